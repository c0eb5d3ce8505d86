"""Erasure and quarantine: the two flows that rewrite the log, deliberately and provably (docs/erasure.md).

``redact(log, seq, reason)``, under the store lock: append a ``redaction``
record (the normal append path), scrub the erased values from quarantined
torn tails, write the log anew beside the old one (``log.jsonl.redact-tmp``,
0600) with the target in its redacted form (``v``, ``seq``, ``prev``,
``hash``, ``cd``, ``redacted``), fsync and check it, ``os.replace`` it over
the log, fsync the directory. The chain hash covers ``cd``, so verify still
passes; a crash leaves the old log (the redaction pending: the same redact
finishes it, with no second record) or the new one, never a mix.
``quarantine`` moves one damaged line that claims no seq out of the log
(docs/format.md): its bytes copied to ``log.jsonl.quarantine-<offset>``,
then a ``quarantine`` record, then the same rewrite; a rerun after a crash
copies again, or finds the record and only rewrites.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from retained import limits
from retained.core import record
from retained.core.files import copy_aside, open_read, replace_with, write_all
from retained.core.log import Exclusive, Log, proof_of
from retained.core.recovery import quarantine_name
from retained.errors import InvalidRecord, NoStore, NotFound

if TYPE_CHECKING:
    from retained.replies import WriteProof

TMP_SUFFIX = ".redact-tmp"
QUARANTINE_TMP_SUFFIX = ".quarantine-tmp"
QUARANTINE_PREFIX = ".quarantine-"  # after the log's name: log.jsonl.quarantine-<offset>
_COPY_CHUNK = 1024 * 1024


@dataclass
class Redaction:
    seq: int
    proof: WriteProof | None
    bytes_before: int
    bytes_after: int
    already_redacted: bool = False
    quarantine_scrubbed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "redaction_record": self.proof,
            "line_bytes_before": self.bytes_before,
            "line_bytes_after": self.bytes_after,
            "already_redacted": self.already_redacted,
            "quarantine_scrubbed": self.quarantine_scrubbed,
        }


def _strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _strings(k, out)
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)


def erased_values(rec: dict[str, Any]) -> list[bytes]:
    """The byte strings whose presence anywhere would undo the erasure.

    Every caller string of 8 characters or more, both as raw UTF-8 and as it
    appears inside JSON (escaped); shorter strings are too common to mean
    anything on their own.
    """
    found: list[str] = []
    caller = {k: v for k, v in rec.items() if k not in record.RESERVED_FIELDS}
    _strings(caller, found)
    out: set[bytes] = set()
    for s in found:
        if len(s) >= 8:
            out.add(s.encode("utf-8"))
            out.add(record.canonical(s)[1:-1])
    return sorted(out, key=len, reverse=True)


def _pending(log: Log, seq: int) -> tuple[Any, Any]:
    """The target line and an existing redaction record for it, by one scan."""
    target = None
    existing = None
    for line in log.scan():
        if line.chained and line.seq == seq and target is None:
            target = line
        if line.status == record.RECORD and line.record.get("kind") == "redaction" and line.record.get("redacts") == seq:
            existing = line
    return target, existing


def record_content(seq: int, reason: str) -> record.Content:
    """The content of the redaction record for ``seq``, after checking both arguments.

    Raises:
        InvalidRecord: bad seq or empty reason (nothing changed).
    """
    if type(seq) is not int or seq < 1:
        raise InvalidRecord(f"seq {seq!r} is not a seq (a whole number from 1); nothing was changed", path="seq")
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidRecord("field reason: say why the record is erased; nothing was changed", path="reason")
    return record.make_content(text=None, kind="redaction", fields={"redacts": seq, "reason": reason}, store_kind=True)


def redact(log: Log, seq: int, content: record.Content, *, client: dict[str, Any]) -> Redaction:
    """Erase one record's content, keeping the chain verifiable end to end.

    ``content`` is the redaction record (``record_content``, through the
    store's write guard). Everything happens under the log's lock, through
    its public operations: the record goes through the one append pipeline,
    the rewrite through ``Log``'s whole-file replacement.

    Raises:
        NotFound: no valid record with that seq (nothing changed).
        InvalidRecord: the target is a redaction record itself (nothing changed).
        LockTimeout: nothing changed.
    """
    if not log.directory.is_dir():
        raise NotFound(f"no store at {log.directory}; nothing was changed", seq=seq)
    with log.exclusive() as held:
        return _redact_locked(log, held, seq, content, client)


def _redact_locked(log: Log, held: Exclusive, seq: int, content: record.Content, client: dict[str, Any]) -> Redaction:
    target, existing = _pending(log, seq)
    if target is None:
        raise NotFound(f"no record with seq {seq} to redact; nothing was changed; see `retained list`", seq=seq)
    if target.status == record.REDACTED:
        return Redaction(seq, None, target.length, target.length, already_redacted=True)
    if target.record.get("kind") == "redaction":
        raise InvalidRecord(f"seq {seq} is a redaction record itself; it holds no content to erase; nothing was changed", path="seq")
    values = erased_values(target.record)

    # Step 1: the redaction record, unless an interrupted run already wrote it.
    if existing is None:
        proof = held.append([content], client=client)[0]
    else:
        proof = {**proof_of(existing), "duplicate": True}

    # Step 2: a torn tail may hold the same bytes; erasure means everywhere.
    # Done before the rename: once the log is rewritten the values are gone,
    # and a rerun after a crash could no longer know what to scrub.
    scrubbed = []
    for q in log.quarantined():
        qpath = log.directory / q["file"]
        with open_read(qpath) as f:
            data = f.read()
        cleaned = data
        for v in values:
            cleaned = cleaned.replace(v, b"*" * len(v))
        if cleaned != data:
            _rewrite(qpath, cleaned)
            scrubbed.append(q["file"])

    # Step 3: the new file, streamed (memory flat in log size), checked, renamed in.
    new_line = record.canonical(record.redacted_form(target.record)) + b"\n"
    size = log.size()
    expected_size = size - target.length + len(new_line)

    def write(src: BinaryIO, fd: int) -> None:
        _copy(src, fd, target.offset)
        write_all(fd, new_line)
        src.seek(target.end)
        _copy(src, fd, size - target.end)

    def check(tmp: Path) -> None:
        with open(tmp, "rb") as f:
            f.seek(target.offset)
            back = f.read(len(new_line))
            tmp_size = os.fstat(f.fileno()).st_size
        if back != new_line or tmp_size != expected_size:
            raise InvalidRecord(
                f"the rewritten log did not read back as written (size {tmp_size}, expected {expected_size}); "
                "the log was not replaced; nothing was changed",
                path="seq",
            )

    held.replace(TMP_SUFFIX, write, check)
    return Redaction(seq, proof, target.length, len(new_line), quarantine_scrubbed=scrubbed)


def _copy(src: Any, fd: int, n: int) -> None:
    while n > 0:
        chunk = src.read(min(_COPY_CHUNK, n))
        if not chunk:
            raise OSError(0, "log shrank while it was being copied")
        write_all(fd, chunk)
        n -= len(chunk)


def _rewrite(path: Any, data: bytes) -> None:
    # Not named like a quarantine file, so a crash here leaves nothing that
    # verify would mistake for a torn tail.
    replace_with(path, data, path.with_name(".scrub-" + path.name))


# -- quarantine of a damaged line ---------------------------------------------


def quarantine(log: Log, offset: int, *, reason: str | None, client: dict[str, Any], prepare: Any) -> dict[str, Any]:
    """Move the damaged line that starts at byte ``offset`` to a file beside the log, and record that.

    ``prepare(content)`` passes the quarantine record through the store's
    write guard. Returns ``{"offset", "length", "file", "problem", "digest",
    "record"}`` (the record's proof, its offset as it is after the rewrite).

    Raises:
        NoStore: there is no log.
        InvalidRecord: no complete damaged line starts there, or it claims a seq (nothing changed).
        LockTimeout: nothing changed.
    """
    if type(offset) is not int or not 0 <= offset <= limits.SEQ_MAX:
        raise InvalidRecord(f"offset {offset!r} is not a byte offset (a whole number from 0 to {limits.SEQ_MAX}); "
                            "nothing was changed", path="offset")
    if not log.exists():
        raise NoStore(f"no store at {log.directory}: no log to take a line from; nothing was changed", path=str(log.directory))
    with log.exclusive() as held:
        return _quarantine_locked(log, held, offset, reason, client, prepare)


def _quarantine_locked(log: Log, held: Exclusive, offset: int, reason: str | None, client: dict[str, Any],
                       prepare: Any) -> dict[str, Any]:
    line = next(iter(log.scan(start=offset)), None)
    starts_line = offset == 0 or log.read_at(offset - 1, 1) == b"\n"
    hint = "`retained verify` lists damaged lines with their byte offsets"
    if line is None or line.offset != offset or not starts_line:
        raise InvalidRecord(f"no line starts at byte {offset} of {log.path}; {hint}; nothing was changed", path="offset")
    if line.status != record.DAMAGED:
        raise InvalidRecord(
            f"the line at byte {offset} is a {line.status} line, not a damaged one; only a damaged line is quarantined "
            f"({hint}); nothing was changed",
            path="offset",
        )
    if line.seq is not None:
        raise InvalidRecord(
            f"the line at byte {offset} claims seq {line.seq}: it is part of the chain, and moving it would hide "
            "the evidence, not mend the chain; it stays in place; nothing was changed",
            path="offset",
        )
    digest = record.digest(line.raw)
    # An interrupted earlier run may have copied the line and written the record already.
    existing = None
    for earlier in log.scan(start=line.end):
        moved = earlier.record.get("quarantined") if earlier.status == record.RECORD else None
        if earlier.record is not None and earlier.status == record.RECORD and earlier.record.get("kind") == "quarantine" \
                and isinstance(moved, dict) and moved.get("offset") == offset and moved.get("digest") == digest:
            existing = earlier
    if existing is None:
        name = _copy_aside(log, line.raw, offset)
        fields: dict[str, Any] = {"quarantined": {"offset": offset, "length": line.length, "digest": digest, "file": name,
                                  "problem": line.problem}}
        if reason is not None:
            fields["reason"] = reason
        text = (f"moved a damaged line ({line.problem}, {line.length} bytes at byte {offset}) out of the log "
                f"into {name}; nothing was deleted")
        content = prepare(record.make_content(text=text, kind="quarantine", fields=fields, store_kind=True)).content
        proof = held.append([content], client=client)[0]
    else:
        name = existing.record["quarantined"].get("file")
        proof = {**proof_of(existing), "duplicate": True}

    size = log.size()

    def write(src: BinaryIO, fd: int) -> None:
        _copy(src, fd, offset)
        src.seek(line.end)
        _copy(src, fd, size - line.end)

    def check(tmp: Path) -> None:
        with open(tmp, "rb") as f:
            tmp_size = os.fstat(f.fileno()).st_size
            f.seek(offset)
            back = f.read(min(_COPY_CHUNK, tmp_size - offset))
        after = log.read_at(line.end, len(back))
        if tmp_size != size - line.length or back != after:
            raise InvalidRecord(
                f"the rewritten log did not read back as written (size {tmp_size}, expected {size - line.length}); "
                "the log was not replaced; the line stays; nothing was changed",
                path="offset",
            )

    held.replace(QUARANTINE_TMP_SUFFIX, write, check)
    if proof["offset"] > offset:
        proof = {**proof, "offset": proof["offset"] - line.length}  # where the record is now
    return {"offset": offset, "length": line.length, "file": name, "problem": line.problem, "digest": digest,
            "record": proof}


def _copy_aside(log: Log, data: bytes, offset: int) -> str:
    """Copy ``data`` to a new file beside the log (``files.copy_aside``)."""
    return copy_aside(log.directory, lambda attempt: quarantine_name(log.path.name, offset, attempt, QUARANTINE_PREFIX), data)
