"""retained.cli.hook_install and `retained hook install --claude`: merge, backup, idempotence, refusals.

Real files in tmp_path; the command-line tests run `python -m retained` with
HOME pointed at a temporary directory, and run the command the settings file
holds through /bin/sh, as Claude Code does.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from retained import Store
from retained.cli import hook_install
from retained.errors import HookSetupRefused

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60
NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)
COMMAND = "RETAINED_BIN=/opt/r/bin/retained sh /opt/r/site-packages/retained/hooks/session-start.sh claude"


def _settings(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _ours(settings: dict) -> list[dict]:
    return [h for g in settings["hooks"]["SessionStart"] for h in g["hooks"] if hook_install.is_retained_hook(h.get("command"))]


def test_a_new_settings_file_gets_the_entry_with_private_modes(tmp_path: Path) -> None:
    path = hook_install.claude_settings_path(tmp_path / "home")
    assert path == tmp_path / "home" / ".claude" / "settings.json"
    result = hook_install.install_claude(path, COMMAND, now=NOW)
    assert result["action"] == "added" and result["written"] and result["backup"] is None
    assert _settings(path) == {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": COMMAND, "timeout": 15}]}]}}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text(encoding="utf-8").endswith("}\n")
    assert [p.name for p in path.parent.iterdir()] == ["settings.json"]  # no temporary file left


def test_every_other_setting_and_hook_is_kept_and_the_old_file_is_backed_up(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    before = {
        "model": "opus",
        "env": {"FOO": "bar"},
        "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}],
            "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hello"}]}],
        },
    }
    original = json.dumps(before, indent=4).encode()
    path.write_bytes(original)
    path.chmod(0o644)
    result = hook_install.install_claude(path, COMMAND, now=NOW)
    after = _settings(path)
    assert result["action"] == "added"
    assert after["model"] == "opus" and after["env"] == {"FOO": "bar"}
    assert after["hooks"]["PreToolUse"] == before["hooks"]["PreToolUse"]
    assert after["hooks"]["SessionStart"][0] == before["hooks"]["SessionStart"][0]
    assert _ours(after) == [{"type": "command", "command": COMMAND, "timeout": 15}]
    backup = Path(result["backup"])
    assert backup.name == "settings.json.bak-20261129T120000Z" and backup.read_bytes() == original
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # the user's own mode is kept


def test_a_second_run_changes_nothing_and_makes_no_backup(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    hook_install.install_claude(path, COMMAND, now=NOW)
    text = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    result = hook_install.install_claude(path, COMMAND, now=NOW)
    assert result["action"] == "unchanged" and not result["written"] and result["backup"] is None
    assert path.read_bytes() == text and path.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.json"]


def test_an_earlier_install_is_updated_in_place_and_duplicates_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    old = {"type": "command", "command": "/path/to/retained/hooks/session-start.sh claude", "timeout": 15}
    other = {"type": "command", "command": "echo other"}
    path.write_text(json.dumps({"hooks": {"SessionStart": [
        {"hooks": [other, old]},
        {"hooks": [dict(old)]},
    ]}}))
    result = hook_install.install_claude(path, COMMAND, now=NOW)
    after = _settings(path)
    assert result["action"] == "updated"
    assert after["hooks"]["SessionStart"] == [{"hooks": [other, {"type": "command", "command": COMMAND, "timeout": 15}]}]
    # A second backup in the same second does not overwrite the first.
    again = hook_install.install_claude(path, COMMAND.replace("/opt/r", "/opt/s"), now=NOW)
    assert again["action"] == "updated" and again["backup"] != result["backup"]
    assert Path(result["backup"]).exists() and Path(again["backup"]).exists()


def test_a_linked_settings_file_is_updated_where_it_lives(tmp_path: Path) -> None:
    """A dotfiles set-up: ~/.claude/settings.json is a link; the link stays and its target gets the entry."""
    real = tmp_path / "dotfiles" / "claude-settings.json"
    real.parent.mkdir()
    real.write_text('{"model": "opus"}')
    link = tmp_path / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(real)
    result = hook_install.install_claude(link, COMMAND, now=NOW)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert _settings(real)["model"] == "opus" and _ours(_settings(real))[0]["command"] == COMMAND
    assert Path(result["backup"]).parent == real.parent and Path(result["backup"]).read_text() == '{"model": "opus"}'


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "holds a JSON list, not an object"),
        ('{"hooks": []}', '"hooks" is not an object'),
        ('{"hooks": {"SessionStart": {"hooks": []}}}', '"hooks.SessionStart" is not a list'),
    ],
)
def test_a_settings_file_that_cannot_take_the_hook_is_refused_and_left_as_it_was(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "settings.json"
    path.write_text(content)
    with pytest.raises(HookSetupRefused) as caught:
        hook_install.install_claude(path, COMMAND, now=NOW)
    assert problem in caught.value.message and "nothing was changed" in caught.value.message
    assert caught.value.code == "invalid_argument"
    assert path.read_text() == content
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]


def test_write_false_touches_nothing_and_says_what_it_would_write(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    result = hook_install.install_claude(path, COMMAND, write=False, now=NOW)
    assert result["action"] == "added" and not result["written"]
    assert _ours(result["settings"])[0]["command"] == COMMAND
    assert not path.parent.exists()


def test_the_command_quotes_paths_and_names_the_store_only_when_chosen(tmp_path: Path) -> None:
    hook = tmp_path / "a dir" / "session-start.sh"
    bin_ = tmp_path / "bin" / "retained"
    assert hook_install.hook_command(hook, bin_) == f"RETAINED_BIN={bin_} sh '{hook}' claude"
    store = tmp_path / "my store"
    assert hook_install.hook_command(hook, bin_, store).startswith(f"RETAINED_DIR='{store}' RETAINED_BIN=")


def test_the_hook_path_is_the_packaged_session_start_script() -> None:
    path = hook_install.hook_path()
    assert path.name == "session-start.sh" and path.read_text().startswith("#!/bin/sh\n")
    assert path.resolve() == (REPO / "hooks" / "session-start.sh").resolve()  # this checkout's editable install


def _cli(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_")}
    full.update(HOME=str(home), **env)
    return subprocess.run([sys.executable, "-m", "retained", *args], capture_output=True, text=True, env=full,
                          cwd=home, timeout=WAIT_S, check=False)


def test_cli_installs_into_the_project_and_the_installed_command_prints_the_brief(tmp_path: Path) -> None:
    home, project, store = tmp_path / "home", tmp_path / "project", tmp_path / "store"
    home.mkdir()
    project.mkdir()
    with Store(store) as s:  # filed under the project, as capture files it (`retained scope` in the project)
        s.write("the deploy target is staging", scope=str(project.resolve()))
    proc = _cli(home, "hook", "install", "--claude", "--project", str(project), "--dir", str(store))
    assert proc.returncode == 0, proc.stderr
    path = project / ".claude" / "settings.json"
    assert proc.stdout.startswith(f"{path}: SessionStart hook added")
    assert not (home / ".claude").exists()
    (hook,) = _ours(_settings(path))
    assert f"RETAINED_BIN={Path(sys.executable).parent / 'retained'}" in hook["command"]
    assert str(hook_install.hook_path()) in hook["command"]
    # As Claude Code runs it: a shell with a PATH that has no retained on it.
    ran = subprocess.run(["/bin/sh", "-c", hook["command"]], input='{"source":"startup"}', capture_output=True,
                         text=True, cwd=project, env={"PATH": "/usr/bin:/bin", "HOME": str(home)}, timeout=WAIT_S,
                         check=False)
    assert ran.returncode == 0, ran.stderr
    context = json.loads(ran.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "the deploy target is staging" in context
    again = _cli(home, "hook", "install", "--claude", "--project", str(project), "--dir", str(store), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["action"] == "unchanged"


def test_cli_user_level_print_and_json(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shown = _cli(home, "hook", "install", "--claude", "--print")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"# {home / '.claude' / 'settings.json'} (added if written; nothing was written)\n")
    assert "session-start.sh claude" in shown.stdout and "RETAINED_DIR" not in shown.stdout
    assert not (home / ".claude").exists()
    done = _cli(home, "hook", "install", "--claude", "--json")
    data = json.loads(done.stdout)
    assert done.returncode == 0 and data["action"] == "added" and data["written"] is True
    assert Path(data["path"]) == home / ".claude" / "settings.json"


def test_cli_refuses_a_broken_settings_file_with_exit_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text("{oops")
    proc = _cli(home, "hook", "install", "--claude", "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "invalid_argument"
    assert "not valid JSON" in proc.stderr and proc.stderr.startswith("retained: ")
    assert (home / ".claude" / "settings.json").read_text() == "{oops"


def test_cli_needs_a_host_and_an_action(tmp_path: Path) -> None:
    assert _cli(tmp_path, "hook", "install").returncode == 2
    no_action = _cli(tmp_path, "hook")
    assert no_action.returncode == 2 and "install" in no_action.stderr
