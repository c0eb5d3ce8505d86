"""Data out of a store: the log's records as JSONL (verified first) or Markdown for reading.

JSONL export is the log's chained lines byte for byte, written only after a
verify of the same bytes (a copy spooled while the chain is walked), so an
export is itself a verifiable log that ``retained import`` accepts; Markdown
is for people and is not imported.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from retained import limits
from retained.core import chain, record
from retained.core.files import fsync_dir, inside, open_fd
from retained.core.log import Log
from retained.errors import ExportRefused, InvalidRecord, PathRefused

Progress = Callable[[int, int], None]  # (done, total), for callers that show progress


def _md_text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def markdown_entry(line: Any) -> str:
    """One record as Markdown, for reading (not for import)."""
    rec = line.record
    if line.status == record.REDACTED:
        return f"### #{line.seq} · redacted\n\n*content erased; the chain still verifies*\n"
    kind = rec.get("kind", "note")
    head = f"### #{line.seq} · {kind}"
    if rec.get("scope"):
        head += f" · {rec['scope']}"
    meta = [f"`{rec.get('ts', '')}`"]
    for name in ("supersedes", "retracts"):
        if rec.get(name):
            meta.append(f"{name} " + ", ".join(f"#{s}" for s in rec[name]))
    if rec.get("source"):
        meta.append(f"source: {rec['source']}")
    parts = [head, "", " · ".join(meta), ""]
    if rec.get("text") is not None:
        parts += [_md_text(rec["text"]), ""]
    if rec.get("body") is not None:
        parts += ["> " + _md_text(rec["body"]).replace("\n", "\n> "), ""]
    extra = {k: v for k, v in rec.items() if k not in record.RESERVED_FIELDS and k not in record.API_FIELDS}
    origin = extra.pop("imported", None)
    if isinstance(origin, dict) and "seq" in origin:
        parts += [f"*imported: was seq {origin.get('seq')} ({origin.get('ts')}), hash {str(origin.get('hash'))[:16]}...*", ""]
    elif origin is not None:
        extra["imported"] = origin
    if extra:
        parts += ["```json", orjson.dumps(extra, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2).decode(), "```", ""]
    return "\n".join(parts)


def export(
    log: Log,
    out: BinaryIO,
    *,
    format: str = "jsonl",
    force: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write the log's chained records to ``out`` after verifying them, in one pass.

    ``jsonl`` writes each chained line byte for byte (records and redacted
    lines), so the export verifies on its own and imports with its chain
    checked. Foreign lines are left out and counted. The export is spooled to
    a temporary file while the chain is walked; only when the walk has no
    finding (or ``force``) is it copied to ``out``.

    Raises:
        ExportRefused: verify found problems and ``force`` is false; nothing was written to ``out``.
    """
    if format not in ("jsonl", "markdown"):
        raise InvalidRecord(f"format {format!r} is not jsonl or markdown", path="format")
    size = log.size()
    counted = {"records": 0, "redacted": 0, "foreign": 0, "damaged": 0}

    with tempfile.TemporaryFile() as spool:
        if format == "markdown":
            spool.write(f"# retained export of {log.path}\n\n".encode())

        def tee() -> Iterator[Any]:
            for line in log.scan(stop=size):
                yield line
                if line.chained:
                    counted["redacted" if line.status == record.REDACTED else "records"] += 1
                    spool.write(line.raw if format == "jsonl" else markdown_entry(line).encode("utf-8") + b"\n")
                    if progress is not None and line.seq % 10000 == 0:
                        progress(line.end, size)
                elif line.status == record.FOREIGN:
                    counted["foreign"] += 1
                elif line.status == record.DAMAGED:
                    counted["damaged"] += 1

        report = chain.walk(tee(), log.path.name)
        result = {
            "ok": report.ok,
            "format": format,
            "records": counted["records"],
            "redacted": counted["redacted"],
            "foreign_left_out": counted["foreign"],
            "damaged_left_out": counted["damaged"],
            "head": {"seq": report.head_seq, "hash": report.head_hash},
            "log_bytes": size,
            "findings": report.findings,
            "forced": bool(report.findings) and force,
        }
        if report.findings and not force:
            first = report.findings[0]
            raise ExportRefused(
                f"verify found {len(report.findings)} problems in {log.path}, first: {first['message']}; "
                "nothing was exported; run `retained verify` for all of them, or export with --force "
                "to write the valid records only (that export will not verify on import)",
                findings=len(report.findings),
            )
        spool.seek(0)
        written = 0
        while chunk := spool.read(limits.SCAN_CHUNK_BYTES):
            out.write(chunk)
            written += len(chunk)
        out.flush()
        result["bytes"] = written
    return result


def export_to_file(log: Log, dest: str | os.PathLike[str], *, overwrite: bool = False, **kwargs: Any) -> dict[str, Any]:
    """``export`` into a new file (0600), written beside it under a name of its own and put in place when complete.

    Never deletes or overwrites a file it did not create: an existing
    ``dest`` is refused unless ``overwrite``, and the temporary is created
    exclusively under a fresh name. A path inside the store is refused
    whatever ``overwrite`` says (the export would replace the store's own
    files).

    Raises:
        PathRefused: ``dest`` exists (without ``overwrite``) or is inside the store; nothing was written.
        ExportRefused: verify found problems and ``force`` is false; nothing was written.
    """
    dest = Path(dest)
    if inside(dest, log.directory):
        raise PathRefused(f"export target {dest} is inside the store {log.directory}; write the export outside it; "
                          "nothing was written", path=str(dest))
    if os.path.lexists(dest) and not overwrite:
        raise PathRefused(f"export target {dest} exists; nothing was written; choose a new path, or pass --overwrite "
                          "(overwrite=True) to replace it", path=str(dest))
    fd, tmp = _create_beside(dest)
    try:
        with os.fdopen(fd, "wb") as f:
            result = export(log, f, **kwargs)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, dest)
        else:
            # A hard link is made only where nothing is: a file that appeared meanwhile is never replaced.
            try:
                os.link(tmp, dest)
            except FileExistsError:
                raise PathRefused(f"export target {dest} appeared while the export was written; it was left as it "
                                  "is and nothing was written", path=str(dest)) from None
            os.unlink(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(dest.parent)
    result["path"] = str(dest)
    return result


def _create_beside(dest: Path) -> tuple[int, Path]:
    """A new temporary file beside ``dest``, opened exclusively under a name nothing else has."""
    attempt = 0
    while True:
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}-{attempt}")
        try:
            return open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), tmp
        except FileExistsError:
            attempt += 1
