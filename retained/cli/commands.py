"""The command line: ``retained <command>`` and ``python -m retained <command>``.

Each command is a few lines over ``Store``; its exit status and ``--json`` are
as docs/cli.md says. Diagnostics and progress go to stderr, never to stdout.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from retained import limits, paths, render
from retained.brief import compose as brief
from retained.brief.session import session_brief
from retained.capture.scope import project, read_scope
from retained.cli import hook_install
from retained.core import json_input, pool
from retained.core.anchors import listing_text
from retained.errors import NoStore, RetainedError
from retained.interrupt import raise_on_interrupt
from retained.settings import store_options
from retained.store import Store
from retained.version import __version__

CLI_CLIENT = {"name": "retained-cli", "version": __version__}
USAGE_CODES = {"invalid_argument", "reserved_field", "too_large", "not_found", "secret_detected", "embed_config", "conflict"}


# What a person types as an option's name ("--feild"), as opposed to a value
# that starts with a dash ("-5", "--- a note ---").
_OPTION_NAME = re.compile(r"--[a-z][a-z0-9-]*")


class UsageError(Exception):
    """Bad command-line input (exit 2)."""


def whole(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high`` (the bounds the MCP tools take)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range: give {low} to {high}")
        return value

    return parse


def scope(text: str) -> str:
    """An argparse type: a scope, as the MCP tools take it (not empty, at most ``limits.SCOPE_CHARS_MAX`` characters)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a scope cannot be empty: leave --scope out for no scope")
    if len(text) > limits.SCOPE_CHARS_MAX:
        raise argparse.ArgumentTypeError(f"a scope is at most {limits.SCOPE_CHARS_MAX} characters, got {len(text)}")
    return text


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 (pick a free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (a whole number from 0 to 65535)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port: give 0 (a free one) to 65535")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse with errors that point the way: a value starting with '-' goes after '--'."""

    argv: tuple[str, ...] = ()  # the command line being parsed (set by main)

    def error(self, message: str) -> Any:  # argparse's hook: prints usage and the message, exits 2
        command = self._command()
        if command is not None:
            # The command's leftovers come back here; its own parser knows its options and its usage.
            command.error(message)
        known = self._option_string_actions
        dashed = [a for a in self.argv if a.startswith("-") and a != "--" and a.split("=")[0] not in known]
        if dashed:
            name = dashed[0].split("=")[0]
            if _OPTION_NAME.fullmatch(name):
                close = difflib.get_close_matches(name, [o for o in known if o.startswith("--")], n=1)
                message += (f"; {self.prog} has no option {name}: "
                            + (f"did you mean {close[0]}? " if close else "") + f"see {self.prog} --help")
            else:
                message += (f"; {dashed[0]!r} was read as an option: a value that starts with '-' goes after '--', "
                            f"e.g. {self.prog} -- {dashed[0]!r}")
        elif message.startswith("unrecognized arguments: "):
            # A word where the command takes a file only through an option ("retained export out.jsonl").
            stray = message.removeprefix("unrecognized arguments: ").split()
            takes_file = [a.option_strings[0] for a in self._actions if a.option_strings and a.metavar == "FILE"]
            if len(stray) == 1 and len(takes_file) == 1:
                message += f"; to name a file here, use {takes_file[0]}: {self.prog} {takes_file[0]} {stray[0]}"
        super().error(message)

    def _command(self) -> _Parser | None:
        """The parser of the command named on the command line, when this is the parser of all commands."""
        commands = next((a.choices for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
        if not commands:
            return None
        takes_value = {o for a in self._actions if a.option_strings and a.nargs != 0 for o in a.option_strings}
        words = iter(self.argv)
        for word in words:
            if word in takes_value:
                next(words, None)  # the option's value ("--dir list" names no command)
            elif word in commands:
                return commands[word]
            elif not word.startswith("-"):
                return None
        return None


def open_store(args: argparse.Namespace, *, must_exist: bool = True) -> Any:
    """The store of --dir / RETAINED_DIR; a command that only reads refuses a store that is not there."""
    store = Store(paths.store_dir(args.dir), client=CLI_CLIENT, **store_options())
    if must_exist and not store.exists():
        store.close()
        raise NoStore(
            f"no store at {store.directory}: nothing was written there yet; check --dir or RETAINED_DIR "
            "(`retained write` creates a store)",
            path=str(store.directory),
        )
    return store


def emit(args: argparse.Namespace, data: Any, text: str | Callable[[], str]) -> None:
    """Print the result: one JSON document with --json, else the text form."""
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(data) + b"\n")
    else:
        out = text() if callable(text) else text
        if out:
            sys.stdout.write(out if out.endswith("\n") else out + "\n")
    sys.stdout.flush()


def _call(args: argparse.Namespace, call: Callable[[Store], Any], text: Callable[[Any], str], *, must_exist: bool = True) -> Any:
    """Open the store, ``call`` it, and ``emit`` the result (``text`` is its text form); returns the result."""
    with open_store(args, must_exist=must_exist) as store:
        result = call(store)
    emit(args, result, lambda: text(result))
    return result


def progress(message: str) -> None:
    """One line of progress on stderr (long work only)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


# -- commands --------------------------------------------------------------


def _parse_fields(pairs: Sequence[str] | None) -> dict[str, Any] | None:
    if not pairs:
        return None
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--field {pair!r}: expected KEY=JSON, e.g. --field priority=3 or --field 'tag=\"x\"'")
        try:
            # Exact: a big integer must reach the store's integer rule, not become a float.
            out[key] = json_input.loads_exact(raw)
        except json_input.NotJSON as exc:
            if not str(exc).startswith("not JSON"):
                raise UsageError(f"--field {key}: {exc}") from None
            raise UsageError(
                f"--field {key}: the value is {exc}; quote a string as '\"...\"' (e.g. --field {key}='\"text\"')"
            ) from None
    return out


def cmd_write(args: argparse.Namespace) -> int:
    from retained.settings import related_on

    text = sys.stdin.read() if args.text == "-" else args.text
    with open_store(args, must_exist=False) as store:
        proof = store.write(
            text,
            kind=args.kind,
            scope=args.scope,
            source=args.source,
            body=args.body,
            fields=_parse_fields(args.field),
            supersedes=args.supersedes,
            client_op_id=args.client_op_id,
            related=related_on(),
        )
        if store.wants_vectors():
            # This process ends now: the record is durable, its vector is left to whoever comes next.
            proof.setdefault("notices", []).append(VECTOR_LATER)
    emit(args, proof, lambda: render.proof(proof))
    return 0


VECTOR_LATER = ("its vector is computed after this command, by a running `retained serve` or `retained view`, "
                "or by `retained embed --backfill`; the record is already durable, nothing is lost")


def cmd_forget(args: argparse.Namespace) -> int:
    _call(args, lambda store: store.forget(args.seqs, args.reason), render.proof)
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    _call(args, lambda store: store.checkpoint(args.label, summary=args.summary, scope=args.scope), render.proof, must_exist=False)
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    if args.around is not None and args.seqs:
        raise UsageError("give SEQ... or --around SEQ, not both")
    if args.around is None and not args.seqs:
        raise UsageError("give one or more SEQ, or --around SEQ for a timeline; `retained list` shows what exists")
    if args.around is None and args.window is not None:
        raise UsageError("--window goes with --around SEQ")
    with open_store(args) as store:
        if args.around is not None:
            window = limits.TIMELINE_WINDOW_DEFAULT if args.window is None else args.window
            result = store.timeline(args.around, window=window, store_id=args.store_id)
        else:
            entries = store.get(args.seqs, store_id=args.store_id)
            result = {"records": entries, "returned": len(entries), "more": 0}
    emit(args, result, lambda: render.records(result))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    _call(args, lambda store: store.list(limit=args.limit, kind=args.kind, scope=args.scope), render.records)
    return 0


def _read_scope(args: argparse.Namespace) -> tuple[str | None, bool, str | None]:
    """``(the scope search and brief read, and_unscoped, the project's scope)``: ``--scope``, else every scope
    (``--all-scopes``, or capture off), else the project's with the records that have none (``retained scope``;
    docs/capture.md)."""
    found = project(os.environ, os.getcwd())
    project_scope = None if found is None else found.scope
    return (*read_scope(args.scope, project_scope, args.all_scopes), project_scope)


def cmd_search(args: argparse.Namespace) -> int:
    chosen, and_unscoped, _ = _read_scope(args)
    with open_store(args) as store:
        found = store.search(
            args.query, k=args.k, max_tokens=args.max_tokens, scope=chosen, and_unscoped=and_unscoped,
            include_superseded=args.include_superseded, context=args.context,
        )
    reply = {**found, "scope": chosen, "and_unscoped": and_unscoped}

    emit(args, reply, lambda: render.search(reply))
    return 0


def cmd_embed(args: argparse.Namespace) -> int:
    def report(done: int, total: int) -> None:
        progress(f"embedded {done}/{render.count(total, 'record')}")

    result = _call(args, lambda store: store.embed(backfill=args.backfill, progress=report), render.embed)
    return 1 if result.get("pending") else 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    def report(done: int, total: int) -> None:
        if not args.json or total > 0:
            progress(f"rebuild: {done}/{total} bytes ({100 * done // max(total, 1)}%)")

    _call(args, lambda store: store.rebuild(progress=report, workers=pool.cpu_workers()), render.rebuild)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    report = _call(args, lambda store: store.verify(anchor=args.anchor, workers=pool.cpu_workers()), render.verify)
    return 0 if report["ok"] else 1


def cmd_head(args: argparse.Namespace) -> int:
    _call(args, Store.head, render.head)
    return 0


def cmd_anchor(args: argparse.Namespace) -> int:
    result = _call(args, lambda store: store.anchor(accept=args.accept, reason=args.reason), listing_text)
    return 1 if result["not_on_chain"] and not args.accept else 0


def cmd_redact(args: argparse.Namespace) -> int:
    result = _call(args, lambda store: store.redact(args.seq, args.reason), render.redaction)
    return 1 if result["index"] in ("set_aside", "unchanged") else 0  # the erased text may still be in the index


def cmd_quarantine(args: argparse.Namespace) -> int:
    _call(args, lambda store: store.quarantine(args.offset, reason=args.reason), render.quarantine)
    return 0


# -- data in and out ----------------------------------------------------------


def _every_second(label: str, unit: str) -> Callable[[int, int], None]:
    """A progress callback that prints at most one line a second on stderr."""
    last = [time.monotonic()]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0:
            last[0] = now
            pct = f" ({100 * done // total}%)" if total else ""
            progress(f"{label}: {done}/{total} {unit}{pct}")

    return report


def cmd_import(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    with open_store(args, must_exist=False) as store:
        result = store.import_file(
            args.file, format=args.format, scope=args.scope, on_reserved="nest" if args.nest_reserved else "refuse",
            batch=args.batch, dry_run=args.dry_run, allow_duplicates=args.allow_duplicates,
            progress=_every_second("import", "records"),
            validate_progress=_every_second("import: validating", "bytes"),
        )
    progress(f"import: {result['path']} is {result['format']}; {render.count(result['records'], 'record')} from "
             f"{render.count(result['lines'], 'line')} validated")
    if args.dry_run:
        emit(args, result, f"dry run: {render.count(result['records'], 'record')} would be imported ({result['format']}); "
                           "nothing was written")
        return 0
    elapsed = time.monotonic() - t0
    result["seconds"] = round(elapsed, 3)
    rate = result["written"] / elapsed if elapsed > 0 else 0.0
    progress(f"import: {render.count(result['written'], 'record')} written in {elapsed:.2f} s ({rate:,.0f}/s)")

    def text() -> str:
        span = f" as seq {result['first_seq']}..{result['last_seq']}" if result["written"] else ""
        lines = [f"imported {result['written']} of {render.count(result['records'], 'record')} from {result['path']} "
                 f"({result['format']}){span}"]
        if result["duplicates"]:
            lines.append(f"{result['duplicates']} already in the store (imported before, or the same client_op_id): "
                         "not appended again; --allow-duplicates appends them anyway")
        if result["skipped"].get("redacted"):
            lines.append(f"{render.count(result['skipped']['redacted'], 'redacted record')} skipped "
                         "(their content was erased at the source)")
        if result["format"] == "retained" and result["source"]:
            src = result["source"]
            lines.append(f"source chain verified: head seq {src['seq']} {src['hash']}")
        return "\n".join(lines)

    emit(args, result, text)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    if args.json and not args.output:
        raise UsageError("without -o the export itself is on stdout, so --json cannot be; add -o FILE for a JSON summary")
    with open_store(args) as store:
        result = store.export(args.output or sys.stdout.buffer, format=args.format, force=args.force,
                              progress=_every_second("export", "bytes"), overwrite=args.overwrite)
    if result["forced"]:
        progress(f"export: WARNING: the log has {len(result['findings'])} verify findings; exported the valid records only")
    if args.output:
        emit(args, result, lambda: render.export(result))
    else:
        progress("export: " + render.export(result))
    return 1 if result["forced"] else 0


def cmd_backup(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        progress(f"backup: copying the log of {store.directory} under the store lock, then verifying the copy")
        result = store.backup(args.dest, force=args.force)
    emit(args, result, lambda: render.backup(result))
    return 0 if result["ok"] else 1


def cmd_stats(args: argparse.Namespace) -> int:
    result = _call(args, lambda store: store.stats(progress=_every_second("stats", "bytes"), workers=pool.cpu_workers()), render.stats)
    return 1 if result["findings"] else 0


def cmd_selftest(args: argparse.Namespace) -> int:
    from retained import selftest

    if args.dir is not None:
        raise UsageError("selftest never touches a store: it makes its own in temporary directories, so --dir does not "
                         "apply; --tmp DIR chooses where they go")

    def show(result: dict[str, Any]) -> None:
        if not args.json:
            sys.stdout.write(selftest.format_line(result) + "\n")
            sys.stdout.flush()

    summary = selftest.run(args.check, base=args.tmp, on_result=show)
    emit(args, summary, lambda: selftest.format_summary(summary))
    return 0 if summary["ok"] else 1


def cmd_serve(args: argparse.Namespace) -> int:
    from retained.mcp import server

    if args.json:
        raise UsageError("serve speaks JSON-RPC on stdout already; --json does not apply to it")

    return server.serve(args) or 0


def cmd_view(args: argparse.Namespace) -> int:
    from retained.viewer import app

    return app.serve(args)


def cmd_token(args: argparse.Namespace) -> int:
    import secrets

    token = secrets.token_urlsafe(32)  # 43 characters of a 256-bit secret, no whitespace
    emit(args, {"token": token}, token)
    return 0


def cmd_brief(args: argparse.Namespace) -> int:
    chosen, and_unscoped, project_scope = _read_scope(args)
    result = session_brief(paths.store_dir(args.dir), args.budget, chosen, and_unscoped=and_unscoped, environ=os.environ,
                           never_fail=True, project=project_scope)
    sys.stdout.buffer.write(brief.output(result, "json" if args.json else args.format))
    sys.stdout.flush()
    return 0


BRIEF_HELP = "print the session-start brief: checkpoints, then the newest records, within a token budget"
BRIEF_EXAMPLE = "retained brief --budget 800 --scope proj-a --format claude"


def _brief_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", type=int, metavar="TOKENS", help="token budget, estimated as UTF-8 bytes / 4 "
                   f"(default {limits.BRIEF_BUDGET_DEFAULT})")
    _scope_arguments(p)
    p.add_argument("--format", choices=("text", "claude", "json"), default="text",
                   help="text, claude (the JSON a Claude Code SessionStart hook prints), or json (same as --json)")


def _scope_arguments(p: argparse.ArgumentParser) -> None:
    """``--scope`` and ``--all-scopes`` of the reads that default to the project (``search``, ``brief``)."""
    which = p.add_mutually_exclusive_group()
    which.add_argument("--scope", type=scope, help="only records with this scope (default: this project's, "
                       "shown by `retained scope`, and records with no scope)")
    which.add_argument("--all-scopes", action="store_true", help="read records of every scope, not only this project's")


def _brief_args(argv: list[str]) -> argparse.Namespace | None:
    """``brief``'s plain options without building a parser (see ``brief.parse_args``), or None."""
    values = brief.parse_args(argv)
    return None if values is None else argparse.Namespace(**values, func=cmd_brief)


def _brief_parser() -> argparse.ArgumentParser:
    """The parser of ``retained brief`` alone: it runs at every session start, so it skips building every command's."""
    p = _Parser(prog="retained brief", parents=[_common()], **_page(BRIEF_HELP, BRIEF_EXAMPLE))
    _brief_arguments(p)
    p.set_defaults(func=cmd_brief)
    return p


# -- parser ----------------------------------------------------------------


DIR_HELP = "store directory (default: $RETAINED_DIR or ~/.retained)"
JSON_HELP = "print one JSON document on stdout"


def _page(description: str, example: str) -> dict[str, Any]:
    """A parser's ``--help`` page: the description, then the example, kept as written."""
    return {"description": description, "epilog": f"example: {example}", "formatter_class": argparse.RawDescriptionHelpFormatter}


def _common() -> _Parser:
    common = _Parser(add_help=False)
    common.add_argument("--dir", help=DIR_HELP)
    common.add_argument("--json", action="store_true", help=JSON_HELP)
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="retained", **_page("Agent memory whose writes are provable: an append-only, hash-chained log.",
                                             "retained write 'the deploy target is staging' --scope proj-a"))
    parser.add_argument("--version", action="version", version=f"retained {__version__}")
    # Also before the command (retained --dir X list); a subcommand's own value wins (see main).
    parser.add_argument("--dir", dest="global_dir", metavar="DIR", help=DIR_HELP)
    parser.add_argument("--json", dest="global_json", action="store_true", help=JSON_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = _common()

    def command(name: str, help_text: str, example: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, **_page(help_text, example))
        p.set_defaults(func=func)
        return p

    p = command("write", "append a note and print its proof", "retained write 'prefers dark mode' --scope ui --field priority=2", cmd_write)
    p.add_argument("text", help="the note's text ('-' reads it from stdin)")
    p.add_argument("--kind", default="note", help="record kind (default: note)")
    p.add_argument("--scope", type=scope, help="a project or topic the record belongs to")
    p.add_argument("--source", help="where the information came from")
    p.add_argument("--body", help="longer detail kept with the note")
    p.add_argument("--field", action="append", metavar="KEY=JSON", help="an extra field, value as JSON (repeatable)")
    p.add_argument("--supersedes", action="append", type=int, metavar="SEQ", help="seq this record corrects (repeatable)")
    p.add_argument("--client-op-id", help="idempotency key: a retry with the same key appends nothing")

    p = command("forget", "retract records: they leave search and the brief, stay readable (memory_forget); nothing is erased",
                "retained forget 12 14 --reason 'the office moved; these addresses are wrong'", cmd_forget)
    p.add_argument("seqs", nargs="+", type=whole(1, limits.SEQ_MAX), metavar="SEQ", help="seqs of the records to retract")
    p.add_argument("--reason", required=True, help="why, in a sentence a person can check later")

    p = command("checkpoint", "append a checkpoint (a labelled point in the work)",
                "retained checkpoint 'shipped 0.1' --summary 'core log done'", cmd_checkpoint)
    p.add_argument("label", help="a short name for this point in the work")
    p.add_argument("--summary", help="what was done, what is next")
    p.add_argument("--scope", type=scope, help="a project or topic the checkpoint belongs to")

    p = command("get", "print records by seq, or a timeline around one", "retained get 3 7; retained get --around 5 --window 2", cmd_get)
    p.add_argument("seqs", nargs="*", type=int, metavar="SEQ", help="seqs to print, in this order")
    p.add_argument("--around", type=int, metavar="SEQ", help="print this record and its neighbours, oldest first")
    p.add_argument("--from", dest="store_id", metavar="STORE_ID",
                   help="records of another store, pulled by `retained sync`: its id, or its first 8 or more hex digits "
                        "(from=MACHINE/STOREID8 in search and the brief)")
    p.add_argument("--window", type=int, metavar="N",
                   help=f"with --around: records on each side (default {limits.TIMELINE_WINDOW_DEFAULT}, "
                        f"at most {limits.TIMELINE_WINDOW_MAX})")

    p = command("list", "print the newest records first", "retained list --limit 5 --kind checkpoint", cmd_list)
    p.add_argument("--limit", type=whole(1, limits.LIST_LIMIT_MAX), default=20,
                   help=f"most records to print, 1 to {limits.LIST_LIMIT_MAX} (default 20)")
    p.add_argument("--kind", help="only records of this kind, e.g. checkpoint")
    p.add_argument("--scope", type=scope, help="only records with this scope")

    p = command("verify", "check the chain (and the index, and the anchors); exit 1 on any finding", "retained verify --json", cmd_verify)
    p.add_argument("--anchor", action="append", metavar="SEQ:HASH",
                   help="also check that this head (saved elsewhere, e.g. from `retained head`) is on the chain (repeatable)")
    command("head", "print the chain head (seq and hash) to anchor elsewhere, the store id and its anchor file", "retained head", cmd_head)
    p = command("anchor", "list the heads anchored outside the store and whether each is still on the chain; exit 1 if one is not",
                "retained anchor --accept --reason 'restored from the Monday backup'", cmd_anchor)
    p.add_argument("--accept", action="store_true",
                   help="accept the log's history as it is: record that in the log and stop reporting the anchors off the chain")
    p.add_argument("--reason", help="why the new history is accepted (kept in the acceptance record)")

    p = command("selftest", "check retained's claims in temporary stores (never in --dir); exit 1 if any check fails",
                "retained selftest --check torn_tail", cmd_selftest)
    p.add_argument("--check", action="append", metavar="NAME", help="run only this check (repeatable)")
    p.add_argument("--tmp", metavar="DIR", help="make the temporary stores in DIR, e.g. on the filesystem of your store")

    p = command("import", "append the records of a file: a retained export, JSONL with a text field, or server-memory's memory.jsonl",
                "retained import memory.jsonl --scope old-graph", cmd_import)
    p.add_argument("file", metavar="FILE", help="the file to import")
    p.add_argument("--format", choices=("auto", "retained", "jsonl", "memory"), default="auto",
                   help="the file's format (default: detected from its first line)")
    p.add_argument("--scope", type=scope, help="scope for records that have none (jsonl, memory)")
    p.add_argument("--nest-reserved", action="store_true",
                   help="keep keys the store reserves (ts, seq, hash, ...) under 'original' instead of refusing the file")
    p.add_argument("--batch", type=int, default=2000, help="records per batch: one lock and one fsync each (default 2000)")
    p.add_argument("--dry-run", action="store_true", help="validate the whole file and write nothing")
    p.add_argument("--allow-duplicates", action="store_true",
                   help="append records an earlier import of the same source already brought in "
                        "(by default each record's source identity makes a repeated import append nothing)")

    p = command("export", "write the log's records as JSONL (verified first) or Markdown", "retained export -o backup.jsonl", cmd_export)
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (0600) and print a summary; default: the export on stdout")
    p.add_argument("--format", choices=("jsonl", "markdown"), default="jsonl",
                   help="jsonl (the log's lines, for import) or markdown (for reading); default jsonl")
    p.add_argument("--force", action="store_true", help="export the valid records even when verify has findings (exit 1)")
    p.add_argument("--overwrite", action="store_true", help="replace FILE if it exists (by default an existing FILE is refused)")

    p = command("backup", "copy the log under the store lock to DEST, then verify the copy", "retained backup ~/retained-backups/2026-11-29", cmd_backup)
    p.add_argument("dest", metavar="DEST", help="a new directory outside the store")
    p.add_argument("--force", action="store_true", help="replace an existing backup in DEST")

    command("stats", "counts by kind and scope, sizes, head, index lag, damage, vectors", "retained stats --json", cmd_stats)

    p = command("search", "ranked records for a query, saying how many it left out and why", "retained search 'deploy target' -k 5 --scope proj-a", cmd_search)
    p.add_argument("query", help="any text; punctuation and search syntax are taken literally")
    p.add_argument("-k", type=whole(1, limits.SEARCH_K_MAX), default=limits.SEARCH_K_DEFAULT,
                   help=f"most results to return, 1 to {limits.SEARCH_K_MAX} (default {limits.SEARCH_K_DEFAULT})")
    p.add_argument("--max-tokens", type=whole(1, limits.SEQ_MAX), help="token budget for the results (estimate: utf-8 bytes / 4)")
    _scope_arguments(p)
    p.add_argument("--include-superseded", action="store_true", help="also show records a later record superseded")
    p.add_argument("--context", type=whole(0, limits.CONTEXT_MAX), default=0, metavar="N",
                   help="show up to N records of the same scope around each result (within --max-tokens)")

    command("rebuild", "drop the index and rebuild it from the log (progress on stderr)", "retained rebuild", cmd_rebuild)

    p = command("redact", "erase one record's content for good (the chain still verifies)", "retained redact 12 --reason 'pasted a password'", cmd_redact)
    p.add_argument("seq", type=int, metavar="SEQ", help="the record to erase")
    p.add_argument("--reason", required=True, help="why the record is erased (kept in the redaction record)")

    p = command("quarantine", "move a damaged line (one verify reports, claiming no seq) to a file beside the log; "
                "nothing is deleted", "retained quarantine 277 --reason 'a line pasted by hand'", cmd_quarantine)
    p.add_argument("offset", type=int, metavar="OFFSET", help="the line's byte offset, as verify reports it")
    p.add_argument("--reason", help="why, kept in the quarantine record")

    _brief_arguments(command("brief", BRIEF_HELP, BRIEF_EXAMPLE, cmd_brief))

    p = command("embed", "vectors for records that lack them (optional embeddings)", "retained embed --backfill", cmd_embed)
    p.add_argument("--backfill", action="store_true", help="embed every record without a vector for the configured model (progress on stderr)")

    p = command("serve", "run the MCP server (stdio by default)", "retained serve --http --port 8765", cmd_serve)
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="address to bind with --http (default 127.0.0.1; any other needs RETAINED_TOKEN)")
    p.add_argument("--port", type=port, default=8765, help="TCP port (0 picks a free one and prints it on stderr)")
    p.add_argument("--allow-host", action="append", metavar="NAME", help="another Host name clients use to reach an --http server (repeatable)")
    p.add_argument("--allow-origin", action="append", metavar="ORIGIN",
                   help="another browser origin (scheme://host[:port]) allowed to call an --http server (repeatable)")

    command("token", "print a fresh random token for RETAINED_TOKEN (the HTTP servers need at least 16 characters)",
            "retained token  # e.g. export RETAINED_TOKEN=$(retained token)", cmd_token)
    p = command("view", "serve a read-only web viewer of the store on 127.0.0.1 and print its URL",
                "retained view --open", cmd_view)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs RETAINED_TOKEN)")
    p.add_argument("--port", type=port, default=0, help="TCP port (default 0: a free one, printed)")
    p.add_argument("--open", action="store_true", help="open the viewer in this machine's web browser, if it has one")
    p.add_argument("--allow-host", action="append", metavar="NAME", help="another Host name browsers use to reach it (repeatable)")
    p.add_argument("--allow-origin", action="append", metavar="ORIGIN",
                   help="another origin (scheme://host[:port]), e.g. a reverse proxy's, allowed to call it (repeatable)")

    _hook_commands(command, common)
    from retained.cli import sync

    sync.register(command, emit=emit, open_store=open_store, usage_error=UsageError)
    from retained.cli import capture_cmd

    p = command("capture", capture_cmd.HOOK_HELP, capture_cmd.HOOK_EXAMPLE, capture_cmd.cmd_capture)
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="...",
                   help="[EVENT] [--host H] [--scope S] [--retry] | status [--json] | import PATH [--dry-run] (see docs/capture.md)")
    p = command("scope", capture_cmd.SCOPE_HELP, "retained scope --json", capture_cmd.cmd_scope)
    p.add_argument("--cwd", metavar="DIR", help="the directory to name the project of (default: the current one)")
    return parser


# -- retained hook install ---------------------------------------------------


def cmd_hook_install(args: argparse.Namespace) -> int:
    """Merge the SessionStart entry into Claude Code's settings (logic in hook_install)."""
    here = Path(sys.executable).parent / ("retained.exe" if sys.platform == "win32" else "retained")
    retained_bin = here if here.is_file() else shutil.which("retained")
    if retained_bin is None:
        raise UsageError(f"no retained command beside {sys.executable} or on PATH; install retained with pip, then run this again")
    chosen = paths.chosen_dir(args.dir)
    store = chosen.resolve() if chosen else None
    project = Path(args.project).expanduser().resolve() if args.project else None
    path = hook_install.claude_settings_path(Path.home(), project)
    command = hook_install.hook_command(hook_install.hook_path(), Path(retained_bin), store)
    capture_cmd = hook_install.capture_command(Path(retained_bin), store)
    skip = set(args.skip or ()) | (set(hook_install.CAPTURE_EVENTS) if args.no_capture else set())
    capture: dict[str, str | None] = {e: None if e in skip else capture_cmd for e in hook_install.CAPTURE_EVENTS}
    result = hook_install.install_claude(path, command, capture=capture, write=not args.print)

    def text() -> str:
        if args.print:
            return f"# {path} ({result['action']} if written; nothing was written)\n" + hook_install.render(result["settings"])
        if result["action"] == "unchanged":
            return f"{path}: the SessionStart and capture hooks are already as asked; nothing changed"
        backup = f"; the old file is kept as {result['backup']}" if result["backup"] else ""
        events = dict(result["events"])
        first = events.pop("SessionStart")
        captured = ", ".join(f"{e} {a}" for e, a in events.items() if a != "unchanged") or "unchanged"
        return f"{path}: SessionStart hook {first}; capture hooks: {captured}{backup}\n  {command}\n  {capture_cmd}"

    emit(args, result, text)
    return 0


def _hook_commands(command: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    def no_action(_args: argparse.Namespace) -> int:
        hook.print_help(sys.stderr)
        return 2

    hook = command("hook", "set up the session-start hook in an agent's settings", "retained hook install --claude", no_action)
    actions = hook.add_subparsers(dest="hook_command", metavar="ACTION", help="what to do: install")
    p = actions.add_parser("install", parents=[common], help="add the SessionStart and capture hooks to Claude Code's settings (idempotent, keeps a backup)",
                           **_page("add the SessionStart hook to Claude Code's settings: ~/.claude/settings.json, or DIR/.claude/settings.json "
                                   "with --project; the old file is kept as a backup, and a second run changes nothing",
                                   "retained hook install --claude --project . --print"))
    p.add_argument("--claude", action="store_true", required=True, help="Claude Code (the only host with hooks so far)")
    p.add_argument("--project", metavar="DIR", help="the project's .claude/settings.json instead of the user's")
    p.add_argument("--print", action="store_true", help="show the settings file it would write, and write nothing")
    p.add_argument("--no-capture", action="store_true", help="install only the SessionStart hook (no capture hooks; "
                   "removes those of an earlier install)")
    p.add_argument("--skip", action="append", metavar="EVENT", choices=list(hook_install.CAPTURE_EVENTS),
                   help=f"leave out the capture hook of this event (repeatable): {', '.join(hook_install.CAPTURE_EVENTS)}")
    p.set_defaults(func=cmd_hook_install)


def _legacy_flags(argv: list[str]) -> list[str]:
    """``--brief`` / ``--selftest`` as the first argument mean the commands of those names."""
    if argv and argv[0] in ("--brief", "--selftest"):
        return [argv[0][2:], *argv[1:]]
    if argv and argv[0].startswith("--brief="):
        return ["brief", "--budget" + argv[0][len("--brief") :], *argv[1:]]
    return argv


SHORT_HELP = """retained: agent memory whose writes are provable (an append-only, hash-chained log)

With no command, retained is an MCP server on stdin and stdout: an MCP client
starts it with pipes. From a terminal, use a command:

  retained write 'the deploy target is staging' --scope proj-a
  retained search 'deploy target'
  retained list            retained verify            retained brief

`retained --help` lists every command; `retained serve` serves on a terminal anyway.
"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = _legacy_flags(list(sys.argv[1:] if argv is None else argv))
    if not argv:
        if sys.stdin.isatty():
            # A person at a terminal, not an MCP client: a silent server would look hung.
            sys.stdout.write(SHORT_HELP)
            sys.stdout.flush()
            return 0
        argv = ["serve"]
    brief_only = argv[0] == "brief"  # the session-start path: no parser for every other command
    args = _brief_args(argv[1:]) if brief_only else None
    if args is None:
        _Parser.argv = tuple(argv)
        parser = _brief_parser() if brief_only else build_parser()
        args = parser.parse_args(argv[1:] if brief_only else argv)
    if getattr(args, "global_dir", None) is not None and getattr(args, "dir", None) is None:
        args.dir = args.global_dir
    if getattr(args, "global_json", False):
        args.json = True
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if args.func not in (cmd_serve, cmd_view):
        raise_on_interrupt()  # a short command unwinds and reports "interrupted"; the servers exit at once
    try:
        return args.func(args)
    except UsageError as exc:
        return _fail(args, "invalid_argument", str(exc), 2)
    except RetainedError as exc:
        status = 2 if exc.code in USAGE_CODES else 1
        return _fail(args, exc.code, exc.message, status, exc)
    except KeyboardInterrupt:
        return _fail(args, "interrupted", "interrupted", 130)
    except BrokenPipeError:
        return 1
    except OSError as exc:
        return _fail(args, "os_error", f"{exc.strerror or exc} ({exc.filename or 'store'})", 1)


def _fail(args: argparse.Namespace, code: str, message: str, status: int, exc: RetainedError | None = None) -> int:
    sys.stderr.write(f"retained: {message}\n")
    if getattr(args, "json", False):
        body = exc.to_dict() if exc is not None else {"code": code, "message": message}
        sys.stdout.buffer.write(orjson.dumps({"ok": False, "error": body}) + b"\n")
        sys.stdout.flush()
    return status


__all__ = ["build_parser", "main"]
