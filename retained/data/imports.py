"""Data into a store: import of a retained export, plain JSONL and server-memory's graph.

The rules (the whole file validated first, batches through ``Store.append``,
the identity each record's source gives it as its ``client_op_id``, links
renumbered): docs/data.md, Import. export.py and backup.py take data out.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from retained.core import chain, json_input, record
from retained.core.log import make_line
from retained.data.backup import BACKUP_MANIFEST, backup  # named here too, for callers of transfer
from retained.data.export import Progress, export, export_to_file, markdown_entry  # likewise
from retained.errors import (  # the classes live in errors.py; named here too for callers of transfer
    BackupFailed,
    BackupRefused,
    ExportRefused,
    ImportRefused,
    InvalidRecord,
    RetainedError,
    SourceChainBroken,
)

FORMATS = ("retained", "jsonl", "memory")
BATCH_RECORDS = 2000  # records per Store.append: one lock, one fsync each
BAD_LINES_LISTED = 20  # line numbers named in one refusal
_LINK_FIELDS = ("supersedes", "retracts")
_PLAIN_API = ("kind", "scope", "source", "body", "client_op_id")
_NOT_PLAIN_FIELDS = record.RESERVED_FIELDS | {"text", *_PLAIN_API}
IDENTITY_PREFIX = "import:"
ORIGIN_CHARS = 16  # hex digits of the source's seq-1 hash in an identity: 64 bits tell stores apart
LINE_DIGEST_CHARS = 32  # hex digits of a line's digest in an identity


def _line_identity(fmt: str, number: int, raw: bytes, part: int | None = None) -> str:
    """The identity of a record read from line ``number`` of a jsonl or memory file: its place and its bytes."""
    where = f"{number}" if part is None else f"{number}.{part}"
    digest = record.digest(raw.rstrip(b"\r\n"))[:LINE_DIGEST_CHARS]
    return f"{IDENTITY_PREFIX}{fmt}:{where}:{digest}"


# -- reading an import file -------------------------------------------------


def _lines(data: bytes, progress: Progress | None = None) -> Iterator[tuple[int, int, bytes]]:
    """``(line number from 1, byte offset, line bytes with b"\\n")``; a missing final newline is supplied.

    ``progress(bytes read, bytes in all)`` is called every 10,000 lines.
    """
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()  # the file ended with a newline
    offset = 0
    for number, part in enumerate(parts, 1):
        yield number, offset, part + b"\n"
        offset += len(part) + 1
        if progress is not None and number % 10000 == 0:
            progress(offset, len(data))


def _line_count(data: bytes) -> int:
    """How many lines ``_lines`` yields for ``data``."""
    return data.count(b"\n") + (not data.endswith(b"\n") and bool(data))


def detect_format(data: bytes) -> str:
    """``retained``, ``memory`` or ``jsonl``, from the first non-blank line."""
    for _, _, raw in _lines(data):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return "jsonl"  # its own validation names the line
        if isinstance(obj, dict):
            if obj.keys() >= record.CHAIN_FIELDS:
                return "retained"
            if obj.get("type") in ("entity", "relation"):
                return "memory"
        return "jsonl"
    return "jsonl"


@dataclass
class _Item:
    line: int
    content: record.Content
    # For our own export: the original seq, and links still to renumber.
    old_seq: int | None = None
    links: dict[str, list[int]] | None = None


@dataclass
class ImportPlan:
    """A validated import: every record built, nothing written yet."""

    path: str
    format: str
    items: list[_Item]
    lines: int
    skipped: dict[str, int] = field(default_factory=dict)
    source_head: dict[str, Any] | None = None

    @property
    def records(self) -> int:
        return len(self.items)


class _Problems:
    """Bad lines collected during validation; raised together at the end."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines: list[tuple[int, str]] = []

    def add(self, line: int, message: str) -> None:
        self.lines.append((line, message))

    def raise_if_any(self) -> None:
        if not self.lines:
            return
        first_line, first = self.lines[0]
        more = ""
        if len(self.lines) > 1:
            listed = ", ".join(str(n) for n, _ in self.lines[:BAD_LINES_LISTED])
            extra = " ..." if len(self.lines) > BAD_LINES_LISTED else ""
            more = f" ({len(self.lines)} bad lines in all, at line {listed}{extra})"
        raise ImportRefused(
            f"{self.path} line {first_line}: {first}{more}; nothing was written",
            path=self.path,
            line=first_line,
            bad_lines=len(self.lines),
        )


def _content_error(exc: InvalidRecord) -> str:
    return exc.message.removesuffix("; nothing was written")


def _objects(data: bytes, problems: _Problems, progress: Progress | None) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
    """``(line number, line bytes, object)`` of each non-blank line of a jsonl or memory file; any other line is a problem."""
    for number, _, raw in _lines(data, progress):
        if not raw.strip():
            continue
        try:
            # Exact integers: orjson would turn one beyond 64 bits into a float and
            # import a different number; the record's integer rule refuses it instead.
            obj = json_input.loads_exact(raw)
        except json_input.NotJSON as exc:
            reason = str(exc)
            problems.add(number, f"{reason} (expected one JSON object per line)" if reason == "not JSON" else reason)
            continue
        if not isinstance(obj, dict):
            problems.add(number, f"a JSON {type(obj).__name__}, expected an object")
            continue
        yield number, raw, obj


def _plan_plain(
    data: bytes, path: str, scope: str | None, on_reserved: str, identity: bool, progress: Progress | None
) -> ImportPlan:
    problems = _Problems(path)
    items: list[_Item] = []
    for number, raw, obj in _objects(data, problems, progress):
        text = obj.get("text")
        if not isinstance(text, str):
            problems.add(number, "needs a string field text" if text is None else f"field text is a {type(text).__name__}, expected a string")
            continue
        if "supersedes" in obj:
            problems.add(number, "field supersedes names seqs of another store; remove it (or import a retained export with --format retained)")
            continue
        extra: dict[str, Any] = {}
        if not record.RESERVED_FIELDS.isdisjoint(obj):
            reserved = sorted(record.RESERVED_FIELDS & obj.keys())
            if on_reserved != "nest":
                problems.add(
                    number,
                    f"field {reserved[0]!r} is set by the store and cannot be imported as is; "
                    "rename it, or pass --nest-reserved to keep such fields under 'original'",
                )
                continue
            if "original" in obj:
                problems.add(number, f"field {reserved[0]!r} would be nested under 'original', which the line already has; rename one")
                continue
            extra["original"] = {k: obj[k] for k in reserved}
        args = {k: obj[k] for k in _PLAIN_API if k in obj}
        fields = {k: v for k, v in obj.items() if k not in _NOT_PLAIN_FIELDS}
        fields.update(extra)
        if scope is not None and "scope" not in args:
            args["scope"] = scope
        if identity and "client_op_id" not in args:
            args["client_op_id"] = _line_identity("jsonl", number, raw)
        try:
            content = record.make_content(text=text, fields=fields or None, **args)
        except InvalidRecord as exc:
            problems.add(number, _content_error(exc))
            continue
        items.append(_Item(number, content))
    problems.raise_if_any()
    return ImportPlan(path, "jsonl", items, _line_count(data))


_ENTITY_KEYS = {"type", "name", "entityType", "observations"}
_RELATION_KEYS = {"type", "from", "to", "relationType"}
_MEMORY_FIELDS = {"entity", "entity_type", "from", "to", "relation_type"}


def _plan_memory(data: bytes, path: str, scope: str | None, identity: bool, progress: Progress | None) -> ImportPlan:
    problems = _Problems(path)
    items: list[_Item] = []
    source = f"server-memory:{Path(path).name}"
    entities = relations = 0
    for number, raw, obj in _objects(data, problems, progress):
        kind = obj.get("type")
        known = _ENTITY_KEYS if kind == "entity" else _RELATION_KEYS
        extra = {k: v for k, v in obj.items() if k not in known}
        clash = sorted((record.RESERVED_FIELDS | record.API_FIELDS | _MEMORY_FIELDS) & extra.keys())
        if clash:
            problems.add(number, f"extra field {clash[0]!r} collides with a field the import sets; rename it")
            continue
        built: list[tuple[str, str, dict[str, Any]]] = []
        if kind == "entity":
            name, etype, observations = obj.get("name"), obj.get("entityType"), obj.get("observations", [])
            if not isinstance(name, str) or not name:
                problems.add(number, "entity needs a non-empty string name")
                continue
            if not isinstance(etype, str):
                problems.add(number, f"entity {name!r} needs a string entityType")
                continue
            if not isinstance(observations, list) or not all(isinstance(o, str) for o in observations):
                problems.add(number, f"entity {name!r}: observations must be a list of strings")
                continue
            names = {"entity": name, "entity_type": etype}
            built.append(("entity", name, {**names, **extra}))
            built.extend(("observation", o, names) for o in observations)
            entities += 1
        elif kind == "relation":
            src, dst, rtype = obj.get("from"), obj.get("to"), obj.get("relationType")
            if not all(isinstance(v, str) and v for v in (src, dst, rtype)):
                problems.add(number, "relation needs non-empty strings from, to and relationType")
                continue
            built.append(("relation", f"{src} {rtype} {dst}", {"from": src, "to": dst, "relation_type": rtype, **extra}))
            relations += 1
        else:
            problems.add(number, f"type is {kind!r}, expected \"entity\" or \"relation\" (a server-memory memory.jsonl line)")
            continue
        for part, (rkind, text, fields) in enumerate(built):
            op = _line_identity("memory", number, raw, part) if identity else None
            try:
                content = record.make_content(
                    text=text, kind=rkind, scope=scope, source=source, fields=fields, client_op_id=op
                )
            except InvalidRecord as exc:
                problems.add(number, _content_error(exc))
                break
            items.append(_Item(number, content))
    problems.raise_if_any()
    return ImportPlan(path, "memory", items, _line_count(data), source_head={"entities": entities, "relations": relations})


def _plan_retained(data: bytes, path: str, identity: bool, progress: Progress | None) -> ImportPlan:
    problems = _Problems(path)
    parsed = []
    number_at: dict[int, int] = {}
    for number, offset, raw in _lines(data, progress):
        if not raw.strip():
            problems.add(number, "blank line inside a retained export (an export has one record per line)")
            continue
        line = make_line(offset, raw)
        number_at[offset] = number
        if line.status == record.FOREIGN:
            problems.add(number, "not a chained record (no seq, prev, hash); an export holds only the log's records")
            continue
        parsed.append(line)
    problems.raise_if_any()
    report = chain.walk(parsed, Path(path).name)
    if report.findings:
        first = report.findings[0]
        where = f"line {number_at[first['offset']]}: " if first.get("offset") in number_at else ""
        raise SourceChainBroken(
            f"{path} does not verify, {where}{first['message']} ({len(report.findings)} findings in all); "
            "the export was changed or damaged after it was made; nothing was written",
            path=path,
            line=number_at.get(first["offset"]) if first.get("offset") is not None else None,
            findings=len(report.findings),
        )
    items: list[_Item] = []
    redacted = 0
    # The source's seq-1 hash names its history (docs/data.md: importing is idempotent).
    origin = parsed[0].hash[:ORIGIN_CHARS] if parsed else ""
    for line in parsed:
        if line.status == record.REDACTED:
            redacted += 1
            continue
        rec = line.record
        number = number_at[line.offset]
        provenance: dict[str, Any] = {"seq": rec["seq"], "hash": rec["hash"], "ts": rec.get("ts"), "client": rec.get("client")}
        fields = {k: v for k, v in rec.items() if k not in record.RESERVED_FIELDS and k not in record.API_FIELDS}
        own_op = rec.get("client_op_id")
        if own_op is not None and not identity:
            provenance["client_op_id"] = own_op  # kept, but no longer a key the log dedupes on
        if "imported" in fields:
            provenance["imported"] = fields["imported"]
        fields["imported"] = provenance
        links: dict[str, list[int]] = {}
        for name in _LINK_FIELDS:
            value = rec.get(name)
            if isinstance(value, list) and value and all(type(s) is int for s in value):
                links[name] = value
                fields.pop(name, None)
        if rec.get("kind") == "redaction" and "redacts" in fields:
            # Its target was erased in the source and is not imported.
            provenance["refs"] = {"redacts": fields.pop("redacts")}
        supersedes = links.pop("supersedes", None)
        try:
            content = record.make_content(
                text=rec.get("text"),
                kind=rec.get("kind", "note"),
                body=rec.get("body"),
                scope=rec.get("scope"),
                source=rec.get("source"),
                supersedes=supersedes,
                client_op_id=(own_op or f"{IDENTITY_PREFIX}{origin}:{rec['seq']}:{rec['hash']}") if identity else None,
                fields=fields,
                store_kind=True,
            )
        except InvalidRecord as exc:
            problems.add(number, _content_error(exc))
            continue
        if supersedes:
            links["supersedes"] = supersedes
        items.append(_Item(number, content, old_seq=rec["seq"], links=links or None))
    problems.raise_if_any()
    head = {"seq": report.head_seq, "hash": report.head_hash, "records": report.records}
    return ImportPlan(path, "retained", items, _line_count(data), skipped={"redacted": redacted} if redacted else {}, source_head=head)


def plan_import(
    path: str | os.PathLike[str],
    *,
    format: str = "auto",
    scope: str | None = None,
    on_reserved: str = "refuse",
    identity: bool = True,
    progress: Progress | None = None,
) -> ImportPlan:
    """Read and validate a whole import file; nothing is written.

    ``progress(bytes read, bytes in all)`` is called every 10,000 lines.
    With ``identity`` (the default) every record carries the identity its
    source gives it (docs/data.md), so importing the file again appends nothing.

    Raises:
        ImportRefused: a bad line (its number is in the message and ``line``).
        SourceChainBroken: a retained export whose chain does not verify.
        InvalidRecord: an unknown format or option.
    """
    if format not in ("auto", *FORMATS):
        raise InvalidRecord(f"format {format!r} is not one of auto, {', '.join(FORMATS)}", path="format")
    if on_reserved not in ("refuse", "nest"):
        raise InvalidRecord(f"on_reserved {on_reserved!r} is not refuse or nest", path="on_reserved")
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InvalidRecord(f"{name}: no such file; nothing was written", path=name) from None
    except IsADirectoryError:
        raise InvalidRecord(f"{name}: is a directory, expected a JSONL file; nothing was written", path=name) from None
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]  # some editors start a UTF-8 file with a byte-order mark
    fmt = detect_format(data) if format == "auto" else format
    if fmt == "retained":
        if scope is not None:
            raise InvalidRecord("--scope does not apply to a retained export: its records keep their own scopes", path="scope")
        return _plan_retained(data, name, identity, progress)
    if fmt == "memory":
        return _plan_memory(data, name, scope, identity, progress)
    return _plan_plain(data, name, scope, on_reserved, identity, progress)


def _batches(items: list[_Item], size: int) -> Iterator[list[_Item]]:
    """Batches of ``size``, cut before a record that links to one in the same batch.

    A link can only be renumbered once its target's new seq is known, that is
    once the target's batch was acknowledged.
    """
    batch: list[_Item] = []
    olds: set[int] = set()
    for item in items:
        linked = item.links and any(s in olds for ss in item.links.values() for s in ss)
        if batch and (len(batch) >= size or linked):
            yield batch
            batch, olds = [], set()
        batch.append(item)
        if item.old_seq is not None:
            olds.add(item.old_seq)
    if batch:
        yield batch


def _relink(item: _Item, content: record.Content, new_seq: dict[int, int]) -> record.Content:
    if not item.links:
        return content
    fields = dict(content.fields)
    provenance = dict(fields["imported"])
    refs = dict(provenance.get("refs", {}))
    for name, olds in item.links.items():
        mapped = sorted({new_seq[s] for s in olds if s in new_seq})
        if mapped != sorted(set(olds)):
            refs[name] = olds
        if mapped:
            fields[name] = mapped
        else:
            fields.pop(name, None)
    if refs:
        provenance["refs"] = refs
    fields["imported"] = provenance
    return record.Content(fields)


def run_import(
    store: Any, plan: ImportPlan, *, batch: int = BATCH_RECORDS, progress: Progress | None = None, dry_run: bool = False
) -> dict[str, Any]:
    """Append a validated plan in batches through the store; returns counts and the seq range written.

    Uses the store's public operations only: ``Store.prepare`` (the write
    guard) for every record before anything is written, then
    ``Store.append`` per batch, the one pipeline into the log. With
    ``dry_run`` it stops after the guard: what it would refuse is refused,
    and nothing is written.

    Raises what ``Store.append`` raises. If a batch fails, the batches
    before it stay written (each was acknowledged); the error says how many.
    """
    if type(batch) is not int or batch < 1:
        raise InvalidRecord(f"batch must be a whole number from 1, got {batch!r}; nothing was written", path="batch")
    # The write guard sees every imported record before anything is written:
    # a secret refuses the whole file (naming its line), as a bad line does.
    guarded = redacted = spans = 0
    prepared: dict[int, Any] = {}  # id(item) -> what Store.prepare made of it
    for item in plan.items:
        try:
            ready = store.prepare(item.content)
        except RetainedError as exc:
            exc.message = f"line {item.line}: {exc.message}"
            exc.args = (exc.message,)
            raise
        if ready.notes:
            guarded += 1
            redacted += len(ready.notes.get("redactions", ()))
            spans += ready.notes.get("private_spans_removed", 0)
        prepared[id(item)] = ready
    guard = {"records_changed": guarded, "secrets_redacted": redacted, "private_spans_removed": spans}
    if dry_run:
        return {"ok": True, "dry_run": True, "path": plan.path, "format": plan.format, "lines": plan.lines,
                "records": plan.records, "written": 0, "skipped": plan.skipped, "source": plan.source_head,
                "guard": guard}
    # Records of this very store (its own export imported into it) are already here, at their own seqs.
    own = _own_records(store, plan)
    new_seq: dict[int, int] = {seq: seq for seq in own}
    written = duplicates = 0
    first_seq = last_seq = None
    total = plan.records
    done = 0
    for chunk in _batches(plan.items, batch):
        if own:
            ours = [item for item in chunk if item.old_seq in own]
            duplicates += len(ours)
            done += len(ours)
            chunk = [item for item in chunk if item.old_seq not in own]
            if not chunk:
                continue
        # Links to records of the source file become links to their new seqs
        # (known once their batch is written); only seq numbers change here.
        ready_chunk = []
        for item in chunk:
            ready = prepared[id(item)]
            ready_chunk.append(ready._replace(content=_relink(item, ready.content, new_seq)))
        try:
            # An import's ids name source records: one already copied is a duplicate whatever scope is asked now.
            proofs = store.append(ready_chunk, op_reuse="duplicate")
        except RetainedError as exc:
            if done:
                exc.message = (
                    f"{exc.message} (import stopped after {done} of {total} records; "
                    f"seq {first_seq}..{last_seq} were written and acknowledged)"
                )
                exc.args = (exc.message,)
            raise
        for item, proof in zip(chunk, proofs, strict=True):
            if item.old_seq is not None:
                new_seq[item.old_seq] = proof["seq"]
            if proof["duplicate"]:
                duplicates += 1
                continue
            written += 1
            first_seq = proof["seq"] if first_seq is None else first_seq
            last_seq = proof["seq"]
        done += len(chunk)
        if progress is not None:
            progress(done, total)
    return {
        "ok": True,
        "path": plan.path,
        "format": plan.format,
        "lines": plan.lines,
        "records": total,
        "written": written,
        "duplicates": duplicates,
        "first_seq": first_seq,
        "last_seq": last_seq,
        "skipped": plan.skipped,
        "source": plan.source_head,
        "guard": guard,
    }


def _own_records(store: Any, plan: ImportPlan) -> set[int]:
    """Source seqs of a retained export whose records are this store's own (same seq, same hash): nothing to add.

    Only with identities (a plain re-import, not ``--allow-duplicates``):
    one pass over this store's log, up to the highest seq the file holds.
    """
    if plan.format != "retained":
        return set()
    wanted = {item.old_seq: item.content.fields["imported"]["hash"] for item in plan.items
              if item.old_seq is not None and item.content.fields.get("client_op_id") is not None
              and isinstance(item.content.fields.get("imported"), dict)}
    if not wanted:
        return set()
    top = max(wanted)
    own = set()
    for line in store.log.scan():
        if line.chained:
            if wanted.get(line.seq) == line.hash:
                own.add(line.seq)
            if line.seq >= top:
                break
    return own


def import_file(
    store: Any,
    path: str | os.PathLike[str],
    *,
    format: str = "auto",
    scope: str | None = None,
    on_reserved: str = "refuse",
    batch: int = BATCH_RECORDS,
    progress: Progress | None = None,
    identity: bool = True,
) -> dict[str, Any]:
    """Validate the whole file, then append it in batches (``plan_import`` + ``run_import``)."""
    plan = plan_import(path, format=format, scope=scope, on_reserved=on_reserved, identity=identity)
    return run_import(store, plan, batch=batch, progress=progress)


__all__ = [
    "BACKUP_MANIFEST",
    "BATCH_RECORDS",
    "FORMATS",
    "BackupFailed",
    "BackupRefused",
    "ExportRefused",
    "ImportPlan",
    "ImportRefused",
    "SourceChainBroken",
    "backup",
    "detect_format",
    "export",
    "export_to_file",
    "import_file",
    "markdown_entry",
    "plan_import",
    "run_import",
]
