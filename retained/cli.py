"""The command line: ``retained <command>`` and ``python -m retained <command>``.

Each command is a few lines over ``Store``. Exit status: 0 success, 1
problems found (or the operation failed), 2 a usage error or bad input.
With ``--json`` stdout carries exactly one JSON document; diagnostics and
progress go to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from . import __version__
from .errors import RetainedError

CLI_CLIENT = {"name": "retained-cli", "version": __version__}
USAGE_CODES = {"invalid_argument", "reserved_field", "too_large", "not_found", "secret_detected"}


class UsageError(Exception):
    """Bad command-line input (exit 2)."""


def default_dir() -> Path:
    env = os.environ.get("RETAINED_DIR")
    return Path(env).expanduser() if env else Path.home() / ".retained"


def store_dir(args: argparse.Namespace) -> Path:
    return Path(args.dir).expanduser() if args.dir else default_dir()


def open_store(args: argparse.Namespace, **kwargs: Any) -> Any:
    from .settings import store_options
    from .store import Store

    return Store(store_dir(args), client=CLI_CLIENT, **{**store_options(), **kwargs})


def emit(args: argparse.Namespace, data: Any, text: str | Callable[[], str]) -> None:
    """Print the result: one JSON document with --json, else the text form."""
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(data) + b"\n")
    else:
        out = text() if callable(text) else text
        if out:
            sys.stdout.write(out if out.endswith("\n") else out + "\n")
    sys.stdout.flush()


def progress(message: str) -> None:
    """One line of progress on stderr (long work only)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _proof_text(proof: dict[str, Any]) -> str:
    dup = " (duplicate: already written, nothing appended)" if proof.get("duplicate") else ""
    return (
        f"seq {proof['seq']}{dup}\n"
        f"  hash   {proof['hash']}\n"
        f"  prev   {proof['prev']}\n"
        f"  offset {proof['offset']}  length {proof['length']}  ts {proof.get('ts')}"
    ) + "".join(f"\n  note: {n}" for n in proof.get("notices") or ())


def _record_text(entry: dict[str, Any]) -> str:
    rec = entry["record"]
    if rec.get("redacted"):
        return f"#{entry['seq']} [redacted]"
    head = f"#{entry['seq']} {rec.get('ts', '')} {rec.get('kind', '')}"
    if rec.get("scope"):
        head += f" scope={rec['scope']}"
    for name in ("superseded_by", "retracted_by"):
        if entry.get(name):
            head += f" {name}={','.join(map(str, entry[name]))}"
    lines = [head]
    if rec.get("text"):
        lines.append("  " + str(rec["text"]).replace("\n", "\n  "))
    if rec.get("body"):
        lines.append("  " + str(rec["body"]).replace("\n", "\n  "))
    return "\n".join(lines)


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
            out[key] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UsageError(
                f"--field {key}: the value is not JSON; quote a string as '\"...\"' (e.g. --field {key}='\"text\"')"
            ) from None
    return out


def cmd_write(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    with open_store(args) as store:
        proof = store.write(
            text,
            kind=args.kind,
            scope=args.scope,
            source=args.source,
            body=args.body,
            fields=_parse_fields(args.field),
            supersedes=args.supersedes,
            client_op_id=args.client_op_id,
            related=True,
        )
    emit(args, proof, lambda: _proof_text(proof))
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        proof = store.checkpoint(args.label, summary=args.summary, scope=args.scope)
    emit(args, proof, lambda: _proof_text(proof))
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        entries = store.get(args.seqs)
    emit(args, {"records": entries}, lambda: "\n".join(_record_text(e) for e in entries))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = store.list(limit=args.limit, kind=args.kind, scope=args.scope)

    def text() -> str:
        lines = [_record_text(e) for e in result["records"]]
        more = result["total_matches"] - result["returned"]
        lines.append(f"({result['returned']} shown, {more} more)" if more else f"({result['returned']} shown)")
        return "\n".join(lines)

    emit(args, result, text)
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        reply = store.search(
            args.query, k=args.k, max_tokens=args.max_tokens, scope=args.scope,
            include_superseded=args.include_superseded, context=args.context,
        )

    def text() -> str:
        lines = []
        for r in reply["results"]:
            lines.append(f"{r['score']:.2f} " + _record_text(r))
            lines.extend("    | " + _record_text(c).replace("\n", "\n    | ") for c in r.get("context", ()))
        left = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in reply["left_out"].items() if v)
        lines.append(f"({reply['returned']} of {reply['total_matches']} matches" + (f"; left out: {left})" if left else ")"))
        if reply.get("context"):
            c = reply["context"]
            lines.append(f"(context: {c['included']} records, {c['tokens']} tokens"
                         + (f"; {c['over_budget']} left out over budget)" if c["over_budget"] else ")"))
        if reply.get("mode"):
            lines.append(f"(mode: {reply['mode']}" + (f"; {reply['mode_reason']})" if reply.get("mode_reason") else ")"))
        return "\n".join(lines)

    emit(args, reply, text)
    return 0


def cmd_embed(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        hybrid = store.hybrid
        if hybrid.embedder is None:
            raise UsageError(hybrid.off_reason or "embeddings are off: set RETAINED_EMBED_URL and RETAINED_EMBED_MODEL")
        if not args.backfill:
            result = {"counts": hybrid.counts(), "embedder": hybrid.embedder.status()}
            emit(args, result, lambda: "\n".join(f"{k}: {v}" for k, v in {**result["counts"], **result["embedder"]}.items()))
            return 0

        def report(done: int, total: int) -> None:
            progress(f"embedded {done}/{total} records")

        result = hybrid.backfill(report)
    emit(
        args,
        result,
        lambda: f"embedded {result['embedded']} records with {result['model']}; {result['pending']} still without a vector"
        + (f" ({result['error']})" if result.get("error") else ""),
    )
    return 1 if result["pending"] else 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    def report(done: int, total: int) -> None:
        if not args.json or total > 0:
            progress(f"rebuild: {done}/{total} bytes ({100 * done // max(total, 1)}%)")

    with open_store(args) as store:
        result = store.rebuild(progress=report)
    emit(args, result, lambda: f"rebuilt the index: {result['records']} records from {result['bytes']} bytes of log")
    return 0


def _verify_text(report: dict[str, Any]) -> str:
    lines = []
    if not report.get("exists", True):
        lines.append(f"no log yet at {report.get('log')}: nothing to verify")
    head = report["head"]
    lines.append(
        f"{report['records']} records, head seq {head['seq']} {head['hash'][:16]}..., {report['bytes']} bytes"
    )
    if report["redacted"]:
        lines.append(f"{len(report['redacted'])} redacted (chain intact): seq {', '.join(map(str, report['redacted'][:20]))}")
    if report["foreign"]:
        offsets = ", ".join(map(str, report["foreign"][:20]))
        lines.append(f"{len(report['foreign'])} foreign lines kept and skipped by the chain, at byte {offsets}")
    if report.get("torn_tail"):
        t = report["torn_tail"]
        lines.append(f"unterminated tail of {t['bytes']} bytes at byte {t['offset']} (never acknowledged)")
    for q in report.get("quarantined", []):
        lines.append(f"quarantined torn tail: {q['file']} ({q['bytes']} bytes, was at byte {q['offset']})")
    for f in report["findings"]:
        lines.append(f"FINDING {f['kind']}: {f['message']}")
    lines.append("verify: ok" if report["ok"] else f"verify: {len(report['findings'])} findings")
    return "\n".join(lines)


def cmd_verify(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        report = store.verify()
    emit(args, report, lambda: _verify_text(report))
    return 0 if report["ok"] else 1


def cmd_head(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        head = store.head()
    emit(args, head, lambda: f"{head['seq']} {head['hash']}")
    return 0


def cmd_redact(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = store.redact(args.seq, args.reason)

    def text() -> str:
        if result["already_redacted"]:
            return f"seq {result['seq']} was already redacted; nothing changed"
        proof = result["redaction_record"]
        lines = [
            f"seq {result['seq']} redacted: {result['line_bytes_before']} bytes of content replaced by its "
            f"{result['line_bytes_after']}-byte redacted form; the chain still verifies",
            f"redaction record: seq {proof['seq']} {proof['hash']}",
            f"index: {result['index']}",
        ]
        if result["quarantine_scrubbed"]:
            lines.append("scrubbed from quarantined tails: " + ", ".join(result["quarantine_scrubbed"]))
        return "\n".join(lines)

    emit(args, result, text)
    return 0


# -- data in and out (retained/transfer.py, retained/stats.py) ----------------


def _every_second(label: str, unit: str) -> Callable[[int, int], None]:
    """A progress callback that prints at most one line a second on stderr."""
    import time

    last = [time.monotonic()]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0:
            last[0] = now
            pct = f" ({100 * done // total}%)" if total else ""
            progress(f"{label}: {done}/{total} {unit}{pct}")

    return report


def cmd_import(args: argparse.Namespace) -> int:
    import time

    from . import transfer

    t0 = time.monotonic()
    plan = transfer.plan_import(
        args.file, format=args.format, scope=args.scope, on_reserved="nest" if args.nest_reserved else "refuse",
        progress=_every_second("import: validating", "bytes"),
    )
    progress(f"import: {args.file} is {plan.format}; {plan.records} records from {plan.lines} lines validated")
    if args.dry_run:
        result = {"ok": True, "dry_run": True, "path": plan.path, "format": plan.format, "lines": plan.lines,
                  "records": plan.records, "written": 0, "skipped": plan.skipped, "source": plan.source_head}
        emit(args, result, f"dry run: {plan.records} records would be imported ({plan.format}); nothing was written")
        return 0
    with open_store(args) as store:
        result = transfer.run_import(store, plan, batch=args.batch, progress=_every_second("import", "records"))
    elapsed = time.monotonic() - t0
    result["seconds"] = round(elapsed, 3)
    rate = result["written"] / elapsed if elapsed > 0 else 0.0
    progress(f"import: {result['written']} records written in {elapsed:.2f} s ({rate:,.0f}/s)")

    def text() -> str:
        span = f" as seq {result['first_seq']}..{result['last_seq']}" if result["written"] else ""
        lines = [f"imported {result['written']} of {result['records']} records from {result['path']} ({result['format']}){span}"]
        if result["duplicates"]:
            lines.append(f"{result['duplicates']} already in the store (same client_op_id): not appended again")
        if result["skipped"].get("redacted"):
            lines.append(f"{result['skipped']['redacted']} redacted records skipped (their content was erased at the source)")
        if plan.format == "retained" and result["source"]:
            src = result["source"]
            lines.append(f"source chain verified: head seq {src['seq']} {src['hash']}")
        return "\n".join(lines)

    emit(args, result, text)
    return 0


def _export_summary(result: dict[str, Any]) -> str:
    head = result["head"]
    line = f"exported {result['records']} records ({result['redacted']} redacted) as {result['format']}, head seq {head['seq']} {head['hash']}"
    if result["foreign_left_out"]:
        line += f"; {result['foreign_left_out']} foreign lines left out"
    if result["forced"]:
        line += f"; WARNING: {len(result['findings'])} verify findings, {result['damaged_left_out']} damaged lines left out (--force)"
    return line


def cmd_export(args: argparse.Namespace) -> int:
    from . import transfer

    with open_store(args) as store:
        if args.output:
            result = transfer.export_to_file(store.log, args.output, format=args.format, force=args.force,
                                             progress=_every_second("export", "bytes"))
        else:
            result = transfer.export(store.log, sys.stdout.buffer, format=args.format, force=args.force,
                                     progress=_every_second("export", "bytes"))
    if result["forced"]:
        progress(f"export: WARNING: the log has {len(result['findings'])} verify findings; exported the valid records only")
    if args.output:
        emit(args, result, lambda: _export_summary(result) + f"\nwritten to {result['path']}")
    else:
        progress("export: " + _export_summary(result))
    return 1 if result["forced"] else 0


def cmd_backup(args: argparse.Namespace) -> int:
    from . import transfer

    with open_store(args) as store:
        progress(f"backup: copying {store.log.path} under the store lock, then verifying the copy")
        result = transfer.backup(store.log, args.dest, force=args.force)

    def text() -> str:
        head = result["head"]
        lines = [
            f"backup of {result['records']} records ({result['log_bytes']} bytes) in {result['path']}",
            f"  head seq {head['seq']} {head['hash']}",
            f"  log blake3 {result['log_blake3']}",
        ]
        if result["quarantined"]:
            lines.append(f"  with {len(result['quarantined'])} quarantined tails")
        lines.append("  verified: ok" if result["ok"] else f"  copied byte-exact, but the log has {len(result['findings'])} verify findings")
        return "\n".join(lines)

    emit(args, result, text)
    return 0 if result["ok"] else 1


def cmd_stats(args: argparse.Namespace) -> int:
    from . import stats

    with open_store(args) as store:
        result = stats.stats(store.log, progress=_every_second("stats", "bytes"))
    emit(args, result, lambda: stats.stats_text(result))
    return 1 if result["findings"] else 0


def cmd_selftest(args: argparse.Namespace) -> int:
    from . import selftest

    def show(result: dict[str, Any]) -> None:
        if not args.json:
            sys.stdout.write(selftest.format_line(result) + "\n")
            sys.stdout.flush()

    summary = selftest.run(args.check, base=args.tmp, on_result=show)
    emit(args, summary, lambda: selftest.format_summary(summary))
    return 0 if summary["ok"] else 1


def cmd_serve(args: argparse.Namespace) -> int:
    from . import server

    return server.serve(args) or 0


def cmd_brief(args: argparse.Namespace) -> int:
    from . import brief

    budget = brief.DEFAULT_BUDGET if args.budget is None else args.budget
    try:
        result = brief.build_brief(store_dir(args), budget, args.scope)
    except RetainedError:
        raise
    except Exception as exc:  # noqa: BLE001 - the brief runs at session start and must never fail its host
        result = brief.unavailable(store_dir(args), f"{type(exc).__name__}: {exc}", budget=budget, scope=args.scope)
    sys.stdout.buffer.write(brief.output(result, "json" if args.json else args.format))
    sys.stdout.flush()
    return 0


BRIEF_HELP = "print the session-start brief: checkpoints, then the newest records, within a token budget"
BRIEF_EXAMPLE = "retained brief --budget 800 --scope proj-a --format claude"


def _brief_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", type=int, metavar="TOKENS", help="token budget, estimated as UTF-8 bytes / 4 (default 1500)")
    p.add_argument("--scope", help="only records with this scope")
    p.add_argument("--format", choices=("text", "claude", "json"), default="text",
                   help="text, claude (the JSON a Claude Code SessionStart hook prints), or json (same as --json)")


def _brief_args(argv: list[str]) -> argparse.Namespace | None:
    """``brief``'s plain options without building a parser (see ``brief.parse_args``), or None."""
    from . import brief

    values = brief.parse_args(argv)
    return None if values is None else argparse.Namespace(**values, func=cmd_brief)


def _brief_parser() -> argparse.ArgumentParser:
    """The parser of ``retained brief`` alone: it runs at every session start, so it skips building every command's."""
    p = argparse.ArgumentParser(prog="retained brief", parents=[_common()], description=BRIEF_HELP,
                                epilog=f"example: {BRIEF_EXAMPLE}", formatter_class=argparse.RawDescriptionHelpFormatter)
    _brief_arguments(p)
    p.set_defaults(func=cmd_brief)
    return p


# -- parser ----------------------------------------------------------------


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", help="store directory (default: $RETAINED_DIR or ~/.retained)")
    common.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retained",
        description="Agent memory whose writes are provable: an append-only, hash-chained log.",
        epilog="example: retained write 'the deploy target is staging' --scope proj-a",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"retained {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = _common()

    def command(name: str, help_text: str, example: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            parents=[common],
            help=help_text,
            description=help_text,
            epilog=f"example: {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(func=func)
        return p

    p = command("write", "append a note and print its proof", "retained write 'prefers dark mode' --scope ui --field priority=2", cmd_write)
    p.add_argument("text", help="the note's text ('-' reads it from stdin)")
    p.add_argument("--kind", default="note", help="record kind (default: note)")
    p.add_argument("--scope", help="a project or topic the record belongs to")
    p.add_argument("--source", help="where the information came from")
    p.add_argument("--body", help="longer detail kept with the note")
    p.add_argument("--field", action="append", metavar="KEY=JSON", help="an extra field, value as JSON (repeatable)")
    p.add_argument("--supersedes", action="append", type=int, metavar="SEQ", help="seq this record corrects (repeatable)")
    p.add_argument("--client-op-id", help="idempotency key: a retry with the same key appends nothing")

    p = command("checkpoint", "append a checkpoint (a labelled point in the work)", "retained checkpoint 'shipped 0.1' --summary 'core log done'", cmd_checkpoint)
    p.add_argument("label")
    p.add_argument("--summary", help="what was done, what is next")
    p.add_argument("--scope")

    p = command("get", "print records by seq", "retained get 3 7", cmd_get)
    p.add_argument("seqs", nargs="+", type=int, metavar="SEQ")

    p = command("list", "print the newest records first", "retained list --limit 5 --kind checkpoint", cmd_list)
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--kind")
    p.add_argument("--scope")

    command("verify", "check the chain (and the index); exit 1 on any finding", "retained verify --json", cmd_verify)
    command("head", "print the chain head (seq and hash) to anchor elsewhere", "retained head", cmd_head)

    p = command("selftest", "check retained's claims in temporary stores (never in --dir); exit 1 if any check fails", "retained selftest --check torn_tail", cmd_selftest)
    p.add_argument("--check", action="append", metavar="NAME", help="run only this check (repeatable)")
    p.add_argument("--tmp", metavar="DIR", help="make the temporary stores in DIR, e.g. on the filesystem of your store")

    p = command("import", "append the records of a file: a retained export, JSONL with a text field, or server-memory's memory.jsonl",
                "retained import memory.jsonl --scope old-graph", cmd_import)
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", choices=("auto", "retained", "jsonl", "memory"), default="auto",
                   help="the file's format (default: detected from its first line)")
    p.add_argument("--scope", help="scope for records that have none (jsonl, memory)")
    p.add_argument("--nest-reserved", action="store_true",
                   help="keep keys the store reserves (ts, seq, hash, ...) under 'original' instead of refusing the file")
    p.add_argument("--batch", type=int, default=2000, help="records per batch: one lock and one fsync each (default 2000)")
    p.add_argument("--dry-run", action="store_true", help="validate the whole file and write nothing")

    p = command("export", "write the log's records as JSONL (verified first) or Markdown", "retained export -o backup.jsonl", cmd_export)
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (0600) and print a summary; default: the export on stdout")
    p.add_argument("--format", choices=("jsonl", "markdown"), default="jsonl")
    p.add_argument("--force", action="store_true", help="export the valid records even when verify has findings (exit 1)")

    p = command("backup", "copy the log under the store lock to DEST, then verify the copy", "retained backup ~/retained-backups/2026-11-29", cmd_backup)
    p.add_argument("dest", metavar="DEST", help="a new directory outside the store")
    p.add_argument("--force", action="store_true", help="replace an existing backup in DEST")

    command("stats", "counts by kind and scope, sizes, head, index lag, damage, vectors", "retained stats --json", cmd_stats)

    p = command("search", "ranked records for a query, saying how many it left out and why", "retained search 'deploy target' -k 5 --scope proj-a", cmd_search)
    p.add_argument("query", help="any text; punctuation and search syntax are taken literally")
    p.add_argument("-k", type=int, default=10, help="most results to return (default 10)")
    p.add_argument("--max-tokens", type=int, help="token budget for the results (estimate: utf-8 bytes / 4)")
    p.add_argument("--scope", help="only records with this scope")
    p.add_argument("--include-superseded", action="store_true", help="also show records a later record superseded")
    p.add_argument("--context", type=int, default=0, metavar="N",
                   help="show up to N records of the same scope around each result (within --max-tokens)")

    command("rebuild", "drop the index and rebuild it from the log (progress on stderr)", "retained rebuild", cmd_rebuild)

    p = command("redact", "erase one record's content for good (the chain still verifies)", "retained redact 12 --reason 'pasted a password'", cmd_redact)
    p.add_argument("seq", type=int, metavar="SEQ")
    p.add_argument("--reason", required=True, help="why the record is erased (kept in the redaction record)")

    _brief_arguments(command("brief", BRIEF_HELP, BRIEF_EXAMPLE, cmd_brief))

    p = command("embed", "vectors for records that lack them (optional embeddings)", "retained embed --backfill", cmd_embed)
    p.add_argument("--backfill", action="store_true", help="embed every record without a vector for the configured model (progress on stderr)")

    p = command("serve", "run the MCP server (stdio by default)", "retained serve --http --port 8765", cmd_serve)
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="address to bind with --http (default 127.0.0.1; any other needs RETAINED_TOKEN)")
    p.add_argument("--port", type=int, default=8765, help="TCP port (0 picks a free one and prints it on stderr)")
    p.add_argument("--allow-host", action="append", metavar="NAME", help="another Host name clients use to reach an --http server (repeatable)")
    return parser


def _legacy_flags(argv: list[str]) -> list[str]:
    """``--brief`` / ``--selftest`` as the first argument mean the commands of those names."""
    if argv and argv[0] in ("--brief", "--selftest"):
        return [argv[0][2:], *argv[1:]]
    if argv and argv[0].startswith("--brief="):
        return ["brief", "--budget" + argv[0][len("--brief") :], *argv[1:]]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    argv = _legacy_flags(list(sys.argv[1:] if argv is None else argv))
    if not argv:
        argv = ["serve"]
    brief_only = argv[0] == "brief"  # the session-start path: no parser for every other command
    args = _brief_args(argv[1:]) if brief_only else None
    if args is None:
        parser = _brief_parser() if brief_only else build_parser()
        args = parser.parse_args(argv[1:] if brief_only else argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
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


__all__ = ["main", "build_parser"]
