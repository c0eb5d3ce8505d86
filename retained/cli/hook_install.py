"""Set up the session-start hook in a host's settings (Claude Code's SessionStart entry).

The hook itself is ``session-start.sh``, shipped inside the package as
``retained.hooks`` (``hooks/`` in the repository); `install_claude` merges the
entry that runs it into a Claude Code settings file. Library code: it takes
paths as arguments and never reads the environment; ``retained hook install``
(``retained.cli.commands``) is the edge that does.
"""

from __future__ import annotations

import json
import os
import shlex
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from retained.core import files
from retained.errors import HookSetupRefused

HOOK_FILE = "session-start.sh"
HOOK_TIMEOUT_S = 15  # Claude Code stops the hook after this; the hook gives the brief 5 s of it
EVENT = "SessionStart"
# The capture hooks (docs/capture.md) and the timeout each gets, in seconds.
# Capture spools rather than waits (0.5 s for a busy lock), so these only
# bound a machine under heavy load; SessionEnd gets 1.5 s from Claude Code.
CAPTURE_EVENTS = {"UserPromptSubmit": 10, "Stop": 10, "SubagentStop": 10, "PostCompact": 10, "SessionEnd": 2}


def hook_path() -> Path:
    """The installed ``session-start.sh``: inside the package, wheel or checkout alike.

    Raises:
        HookSetupRefused: the package was installed without its hook file.
    """
    path = Path(str(resources.files("retained.hooks") / HOOK_FILE))
    if not path.is_file():
        raise HookSetupRefused(
            f"the session-start hook is missing from this install ({path}); reinstall retained", path="hook"
        )
    return path


def claude_settings_path(home: Path, project: Path | None = None) -> Path:
    """``~/.claude/settings.json``, or ``PROJECT/.claude/settings.json`` for one project."""
    return (project if project is not None else home) / ".claude" / "settings.json"


def hook_command(hook: Path, retained_bin: Path, store_dir: Path | None = None) -> str:
    """The shell command Claude Code runs: the installed hook, told which retained to use.

    ``RETAINED_BIN`` names the ``retained`` command of this install, so the
    hook does not depend on the host's PATH; ``RETAINED_DIR`` is included only
    for a store chosen explicitly (otherwise the hook reads the default, as
    the MCP server does).
    """
    return _in_store(store_dir, "RETAINED_BIN=" + shlex.quote(str(retained_bin)), "sh", shlex.quote(str(hook)), "claude")


def capture_command(retained_bin: Path, store_dir: Path | None = None) -> str:
    """The shell command a capture hook runs: this install's ``retained capture`` (the event arrives on stdin)."""
    return _in_store(store_dir, shlex.quote(str(retained_bin)), "capture")


def _in_store(store_dir: Path | None, *words: str) -> str:
    """``words`` as a shell command, told the store with ``RETAINED_DIR=`` when one was chosen."""
    return " ".join(words if store_dir is None else ("RETAINED_DIR=" + shlex.quote(str(store_dir)), *words))


def is_retained_capture(command: Any) -> bool:
    """True for a command that runs ``retained capture`` (this or an earlier install)."""
    return isinstance(command, str) and "retained" in command and command.rstrip().endswith(" capture")


def is_retained_hook(command: Any) -> bool:
    """True for a command that runs retained's session-start hook (this or an earlier install)."""
    return isinstance(command, str) and HOOK_FILE in command and "retained" in command


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HookSetupRefused(
            f"{path} is not valid JSON ({exc}); nothing was changed; fix the file, then run this again", path=str(path)
        ) from exc
    if not isinstance(data, dict):
        raise HookSetupRefused(f"{path} holds a JSON {type(data).__name__}, not an object; nothing was changed", path=str(path))
    return data


def _merge(settings: dict[str, Any], command: str, path: Path,
           capture: dict[str, str | None] | None = None) -> tuple[dict[str, Any], str, dict[str, str]]:
    """Settings with retained's entries in place, what changed overall, and per event: added, updated, removed or unchanged.

    ``capture`` maps each capture event to its command, or to None to leave
    that event out (an entry of an earlier install is then removed).
    """
    merged = json.loads(json.dumps(settings))  # a deep copy: the caller's dict is left as it was
    hooks = merged.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise HookSetupRefused(f'{path}: "hooks" is not an object; nothing was changed; fix it by hand', path="hooks")
    actions = {EVENT: _merge_event(hooks, EVENT, {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S},
                                   is_retained_hook, path)}
    for event, wanted in (capture or {}).items():
        entry = None if wanted is None else {"type": "command", "command": wanted, "timeout": CAPTURE_EVENTS[event]}
        actions[event] = _merge_event(hooks, event, entry, is_retained_capture, path)
    changed = [a for a in actions.values() if a != "unchanged"]
    if not changed:
        overall = "unchanged"
    elif actions[EVENT] == "added" and all(a in ("added", "unchanged") for a in changed):
        overall = "added"
    else:
        overall = "updated"
    return merged, overall, actions


def _merge_event(hooks: dict[str, Any], event: str, wanted: dict[str, Any] | None, ours: Any, path: Path) -> str:
    """Put ``wanted`` (None: no entry) as retained's one entry for ``event``; returns added, updated, removed or unchanged."""
    groups = hooks.setdefault(event, [])
    if not isinstance(groups, list):
        raise HookSetupRefused(f'{path}: "hooks.{event}" is not a list; nothing was changed; fix it by hand', path=f"hooks.{event}")
    found = False
    action = "unchanged"
    for group in groups:
        entries = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(entries, list):
            continue
        kept = []
        for entry in entries:
            if isinstance(entry, dict) and ours(entry.get("command")):
                if found or wanted is None:
                    action = "removed" if wanted is None else "updated"  # left out, or a second copy: dropped
                    continue
                found = True
                if entry != wanted:
                    action = "updated"
                kept.append(wanted)
            else:
                kept.append(entry)
        group["hooks"] = kept
    # A group left empty by dropping a duplicate would be a hook with nothing to run.
    hooks[event] = [g for g in groups if not (isinstance(g, dict) and g.get("hooks") == [])]
    if not found and wanted is not None:
        hooks[event].append({"hooks": [wanted]})
        action = "added"
    if not hooks[event]:
        del hooks[event]
    return action


def render(settings: dict[str, Any]) -> str:
    """The settings file's text as written: two-space indents, a final newline."""
    return json.dumps(settings, indent=2, ensure_ascii=False) + "\n"


def _write_exclusive(path: Path, data: bytes, mode: int) -> None:
    """A new file (never an existing one, never through a symlink) holding ``data``, fsynced."""
    files.write_synced(files.open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), data)


def _backup(path: Path, data: bytes, mode: int, now: datetime) -> Path:
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    for n in range(100):
        backup = path.with_name(f"{path.name}.bak-{stamp}" + (f".{n}" if n else ""))
        try:
            _write_exclusive(backup, data, mode)
            return backup
        except FileExistsError:
            continue
    raise HookSetupRefused(f"could not pick a backup name beside {path}; nothing was changed; clear old backups", path=str(path))


def install_claude(settings_path: Path, command: str, *, capture: dict[str, str | None] | None = None, write: bool = True,
                   now: datetime | None = None) -> dict[str, Any]:
    """Merge retained's SessionStart entry (and with ``capture``, its capture hooks) into a Claude Code settings file.

    ``capture`` maps capture events (``CAPTURE_EVENTS``) to the command each
    runs, or to None to leave the event out (removing an earlier install's entry).
    Every other key and hook in the file is kept, a second run changes
    nothing, the backup is created exclusively (never overwritten), and a
    crash leaves the old file or the new one: docs/brief.md says how.

    With ``write=False`` nothing is touched and the result says what would be
    written. Returns ``{"path", "action", "written", "backup", "command",
    "settings"}``: ``action`` is ``added``, ``updated`` or ``unchanged``;
    ``backup`` is the copy of the old file (None when there was no file or
    nothing changed).

    Raises:
        HookSetupRefused: the settings file is not a JSON object, or its hooks
            are not shaped as Claude Code reads them (nothing is changed).
        OSError: the file or its directory could not be written.
    """
    now = now or datetime.now(UTC)
    before = _load(settings_path)
    after, action, events = _merge(before, command, settings_path, capture)
    result: dict[str, Any] = {
        "path": str(settings_path),
        "action": action,
        "events": events,
        "written": False,
        "backup": None,
        "command": command,
        "settings": after,
    }
    if not write or action == "unchanged":
        return result
    # A settings file kept elsewhere and linked in (a dotfiles repository) is
    # updated where it lives: replacing the link would cut it off.
    target = Path(os.path.realpath(settings_path)) if settings_path.is_symlink() else settings_path
    directory = target.parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = 0o600
    if target.exists():
        mode = target.stat().st_mode & 0o777
        result["backup"] = str(_backup(target, target.read_bytes(), mode, now))
    tmp = target.with_name(f".{target.name}.retained-tmp-{os.getpid()}")
    try:
        _write_exclusive(tmp, render(after).encode("utf-8"), mode)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    files.fsync_dir(directory)
    result["written"] = True
    return result


__all__ = ["CAPTURE_EVENTS", "capture_command", "claude_settings_path", "hook_command", "hook_path", "install_claude",
           "is_retained_capture", "is_retained_hook", "render"]
