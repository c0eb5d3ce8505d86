"""``retained capture`` (a host's hook event on stdin), ``capture status``, ``capture import``, and ``retained scope``.

The hook form runs on every prompt and reply, so ``python -m retained
capture`` comes here without building the parser of every other command
(``retained/__main__.py``). It exits 0 whatever happens: what became of the
event is in the ledger (``retained capture status``) and, for a problem, one
line on stderr; stdout stays empty unless ``--json`` asks for the ledger
entry (a host may pass a hook's stdout to the model).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

from retained.version import __version__

CAPTURE_CLIENT = {"name": "retained-capture", "version": __version__}
LOCK_WAIT_S_DEFAULT = 0.5  # Claude Code gives SessionEnd 1.5 s; a lock held longer than this sends the event to the spool
STDIN_BYTES_MAX = 32 * 1024 * 1024  # a hook event larger than this is not a turn (the record limit is 16 MiB)
OFF_WORDS = ("0", "off", "false", "no")

HOOK_HELP = "record a host's hook event (JSON on stdin): the prompt, the reply, the compaction summary"
HOOK_EXAMPLE = ("retained capture status; retained capture import ~/.claude/projects --dry-run; "
                "echo '{\"hook_event_name\":\"UserPromptSubmit\",\"session_id\":\"s1\",\"prompt\":\"hi\"}' | retained capture")
SCOPE_HELP = "print the project identity captured turns are filed under (the scope), and why"


def _store_dir(given: str | None) -> Path:
    from retained.paths import store_dir

    return store_dir(given)


def _open(directory: Path, lock_wait_s: float) -> Any:
    """The store as capture writes it: its settings, this lock wait, secrets redacted rather than refused."""
    from retained.settings import guard_from, store_options
    from retained.store import Store

    options = store_options()
    policy = os.environ.get("RETAINED_SECRETS", "").strip().lower() or "refuse"
    if policy == "refuse":
        # A turn is not refused for the secret in it: the secret is replaced and counted.
        env = dict(os.environ, RETAINED_SECRETS="redact")
        options["guard"] = guard_from(env)
    options["lock_wait_s"] = lock_wait_s
    options["anchor_dir"] = None  # capture records no heads; verify and the brief do
    options.pop("embed_settings", None)
    return Store(directory, client=CAPTURE_CLIENT, **options)


def _hook_parser() -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(prog="retained capture", description=HOOK_HELP, epilog=f"example: {HOOK_EXAMPLE}",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("event", nargs="?", help="the event as a JSON argument instead of stdin (Codex CLI's notify passes it so)")
    p.add_argument("--dir", help="the store directory (default: $RETAINED_DIR, else ~/.retained)")
    p.add_argument("--json", action="store_true", help="print the event's ledger entry as JSON on stdout")
    p.add_argument("--host", help="the host's name when the event does not say (claude-code and codex are recognised)")
    p.add_argument("--scope", help="file the turns under this scope instead of the project's identity (also RETAINED_SCOPE)")
    p.add_argument("--lock-wait-s", type=float, help=f"how long to wait for a busy store before spooling the event "
                   f"(default {LOCK_WAIT_S_DEFAULT}; also RETAINED_CAPTURE_LOCK_WAIT_S)")
    p.add_argument("--retry", action="store_true", help="write every spooled event now, and read no event")
    return p


def _lock_wait(given: float | None) -> float:
    if given is not None and given > 0:
        return given
    raw = os.environ.get("RETAINED_CAPTURE_LOCK_WAIT_S", "").strip()
    try:
        value = float(raw) if raw else LOCK_WAIT_S_DEFAULT
    except ValueError:
        value = LOCK_WAIT_S_DEFAULT
    return value if value > 0 else LOCK_WAIT_S_DEFAULT


def _claude_version(agent: str) -> str | None:
    """Claude Code's version from the ``AI_AGENT`` it sets for its hooks (``claude-code_2-1-197_harness``)."""
    prefix = "claude-code_"
    if not agent.startswith(prefix):
        return None
    digits = agent[len(prefix):].split("_", 1)[0]
    return digits.replace("-", ".") if digits.replace("-", "").isdigit() else None


def _say(message: str) -> None:
    try:
        sys.stderr.write(f"retained capture: {message}\n")
        sys.stderr.flush()
    except OSError:
        pass


def _print_json(data: Any) -> None:
    import orjson

    sys.stdout.buffer.write(orjson.dumps(data) + b"\n")
    sys.stdout.flush()


_VALUED = {"--dir": "dir", "--host": "host", "--scope": "scope", "--lock-wait-s": "lock_wait_s"}
_FLAGS = {"--json": "json", "--retry": "retry"}


def _fast_args(argv: list[str]) -> Any:
    """The hook's options read without building a parser (argparse's help formatter imports shutil);
    None for anything unusual (help, a bad value), which the parser then reports."""
    args = SimpleNamespace(event=None, dir=None, json=False, host=None, scope=None, lock_wait_s=None, retry=False)
    words = iter(argv)
    for word in words:
        name, eq, value = word.partition("=")
        if name in _VALUED:
            if not eq:
                value = next(words, "")
            if not value or value.startswith("-"):
                return None
            if name == "--lock-wait-s":
                try:
                    args.lock_wait_s = float(value)
                except ValueError:
                    return None
            else:
                setattr(args, _VALUED[name], value)
        elif word in _FLAGS:
            setattr(args, _FLAGS[word], True)
        elif word.startswith("-") or args.event is not None:
            return None
        else:
            args.event = word
    return args


def hook(argv: list[str]) -> int:
    """The hook: one event in, one ledger line, exit 0 (whatever happened)."""
    try:
        args = _fast_args(argv) or _hook_parser().parse_args(argv)
    except SystemExit:
        return 0  # a hook never fails its host (a bad option included); argparse said why on stderr
    try:
        return _hook(args)
    except Exception as exc:  # noqa: BLE001 - the edge of a hook: never fail the host, say what happened
        _say(f"nothing was captured: {type(exc).__name__}: {exc}")
        return 0


def _hook(args: Any) -> int:
    from retained.capture import run

    directory = _store_dir(args.dir)
    off = os.environ.get("RETAINED_CAPTURE", "").strip().lower()
    options = run.Options(host=args.host, scope=args.scope or os.environ.get("RETAINED_SCOPE") or None,
                          cwd=os.getcwd(), disabled="RETAINED_CAPTURE=" + off if off in OFF_WORDS else None,
                          host_version=_claude_version(os.environ.get("AI_AGENT", "")))
    if args.retry:
        with _open(directory, _lock_wait(args.lock_wait_s)) as store:
            done = run.retry(store)
        if args.json:
            _print_json({"retried": done})
        else:
            sys.stderr.write(f"retained capture: {len(done)} spooled events retried\n")
        return 0
    if args.event is not None:
        raw = args.event.encode("utf-8", "surrogatepass")
    else:
        raw = sys.stdin.buffer.read(STDIN_BYTES_MAX + 1)
    if len(raw) > STDIN_BYTES_MAX:
        entry = run.too_large(directory, raw[:4096], STDIN_BYTES_MAX)
        store = None
    else:
        try:
            store = _open(directory, _lock_wait(args.lock_wait_s))
            entry = run.capture(store, raw, options)
        except Exception as exc:  # noqa: BLE001 - the hook's last resort: the event is kept and counted
            store = None
            entry = run.rescue(directory, raw, options, f"{type(exc).__name__}: {exc}")
    try:
        if entry["outcome"] in ("spooled", "failed") or entry.get("ledger_error"):
            _say(f"{entry['outcome']}: {entry.get('reason')}" + (f"; {entry['ledger_error']}" if entry.get("ledger_error") else ""))
        elif entry["outcome"] == "captured" and entry.get("redactions"):
            _say(f"{entry['redactions']} secrets were replaced before the turn was written")
        if store is not None and entry["outcome"] not in ("spooled", "failed"):
            from retained.capture import spool

            if spool.count(directory):
                run.retry(store, limit=run.RETRY_AFTER_EVENT_MAX)
        if args.json:
            _print_json(entry)
    finally:
        if store is not None:
            store.close()
    return 0


def cmd_capture(args: argparse.Namespace) -> int:
    """``retained capture ...`` reached through the full parser: the same code as the fast path."""
    return main(list(args.rest))


def main(argv: list[str]) -> int:
    """``retained capture [status|import] ...``."""
    if argv and argv[0] == "status":
        return _status(argv[1:])
    if argv and argv[0] == "import":
        return _import(argv[1:])
    return hook(argv)


def _parser(prog: str, description: str, example: str) -> argparse.ArgumentParser:
    """The parser of ``capture status`` or ``capture import``, with their ``--dir`` and ``--json``."""
    import argparse

    p = argparse.ArgumentParser(prog=prog, description=description, epilog=f"example: {example}")
    p.add_argument("--dir", help="the store directory (default: $RETAINED_DIR, else ~/.retained)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    return p


def _status(argv: list[str]) -> int:
    from retained.capture import ledger, spool

    p = _parser("retained capture status", "what capture did with every event: counts per day and per session",
                "retained capture status --json")
    args = p.parse_args(argv)
    directory = _store_dir(args.dir)
    result = ledger.status(directory, spooled_now=spool.count(directory))
    if args.json:
        _print_json(result)
    else:
        sys.stdout.write(ledger.render(result) + "\n")
    return 0 if result["adds_up"] else 1


def _import(argv: list[str]) -> int:
    from retained.capture import transcript

    p = _parser("retained capture import", "record the user and assistant turns of Claude Code transcripts "
                "(~/.claude/projects/**/*.jsonl) with the ids live capture gives them",
                "retained capture import ~/.claude/projects --dry-run")
    p.add_argument("path", help="a transcript (.jsonl) or a directory searched for them")
    p.add_argument("--scope", help="file every turn under this scope instead of each session's project")
    p.add_argument("--dry-run", action="store_true", help="count what would be recorded; write nothing")
    args = p.parse_args(argv)
    directory = _store_dir(args.dir)
    show = sys.stderr.isatty() and not args.json

    def progress(done: int, total: int) -> None:
        if show:
            sys.stderr.write(f"\rcapture import: {done}/{total} transcripts")
            sys.stderr.flush()

    with _open(directory, 10.0) as store:
        result = transcript.import_path(store, Path(args.path).expanduser(), scope=args.scope or os.environ.get("RETAINED_SCOPE"),
                                        dry_run=args.dry_run, progress=progress)
    if show:
        sys.stderr.write("\n")
    if args.json:
        _print_json(result)
    else:
        verb = "would record" if args.dry_run else "recorded"
        sys.stdout.write(f"{result['transcripts']} transcripts, {result['turns']} turns: {verb} {result['captured']}, "
                         f"{result['deduplicated']} already in the store, {result['skipped']} skipped\n")
    return 0 if not result.get("errors") else 1


def cmd_scope(args: argparse.Namespace) -> int:
    from retained.capture.scope import identity, project

    found = identity(args.cwd or os.getcwd(), os.environ.get("RETAINED_SCOPE") or None)
    # What `retained search` and `retained brief` read here: this scope and the unscoped records, or (capture off) all.
    reads = "project_and_unscoped" if project(os.environ, args.cwd or os.getcwd()) is not None else "every_scope"
    if args.json:
        _print_json({**found.to_dict(), "reads": reads})
    else:
        said = ("search and brief read this scope and records with no scope (--all-scopes: every scope)"
                if reads == "project_and_unscoped" else "search and brief read every scope (RETAINED_CAPTURE is off)")
        sys.stdout.write(f"{found.scope}\n  ({found.source}: {found.why})\n  {said}\n")
    return 0
