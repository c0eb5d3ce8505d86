"""Erasure: the one flow that rewrites a log line, deliberately and provably.

``redact(log, seq, reason)`` under the store lock:

1. append a ``redaction`` record naming the target and the reason (the
   normal append path: fsync and read-back);
2. write a new log beside the old one (``log.jsonl.redact-tmp``, 0600): every
   byte copied except the target line, which becomes its redacted form
   (``v``, ``seq``, ``prev``, ``hash``, ``cd``, ``redacted: true``);
   (before that, the erased values are scrubbed from quarantined torn
   tails: after the rename they could no longer be known);
3. fsync it, check it, ``os.replace`` it over the log, fsync the directory.

The chain hash covers ``cd``, not the content, so every later hash stays
valid and verify still passes end to end.

Crash cases: killed before step 1 completes, nothing changed; killed after
step 1, before the rename, the old log stands with a redaction record whose
target is not yet redacted (verify reports it as pending; running the same
redact again finishes it, without a second redaction record); killed after
the rename, the new log stands. ``os.replace`` is atomic, so a reader sees
either the old file or the new one, never a mix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from . import record
from .errors import InvalidRecord, NotFound
from .lock import StoreLock
from .log import Log, fsync_dir

TMP_SUFFIX = ".redact-tmp"
_COPY_CHUNK = 1024 * 1024


@dataclass
class Redaction:
    seq: int
    proof: dict[str, Any] | None
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


def redact(log: Log, seq: int, reason: str, *, client: dict[str, Any]) -> Redaction:
    """Erase one record's content, keeping the chain verifiable end to end.

    Raises:
        InvalidRecord: bad seq or empty reason (nothing changed).
        NotFound: no valid record with that seq (nothing changed).
        LockTimeout: nothing changed.
    """
    if type(seq) is not int or seq < 1:
        raise InvalidRecord(f"seq {seq!r} is not a seq (a whole number from 1); nothing was changed", path="seq")
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidRecord("field reason: say why the record is erased; nothing was changed", path="reason")
    with log._mutex:  # noqa: SLF001 - redaction is the log's one sanctioned rewriter
        if not log.directory.is_dir():
            raise NotFound(f"no store at {log.directory}; nothing was changed", seq=seq)
        with StoreLock(log.lock_path, log.lock_wait_s):
            return _redact_locked(log, seq, reason, client)


def _redact_locked(log: Log, seq: int, reason: str, client: dict[str, Any]) -> Redaction:
    target, existing = _pending(log, seq)
    if target is None:
        raise NotFound(f"no record with seq {seq} to redact; nothing was changed; see `retained list`", seq=seq)
    if target.status == record.REDACTED:
        return Redaction(seq, None, target.length, target.length, already_redacted=True)
    if target.record.get("kind") == "redaction":
        raise InvalidRecord(f"seq {seq} is a redaction record itself; it holds no content to erase; nothing was changed", path="seq")
    values = erased_values(target.record)

    # Step 1: the redaction record, unless an interrupted run already wrote it.
    proof = None
    if existing is None:
        content = record.make_content(
            text=None, kind="redaction", fields={"redacts": seq, "reason": reason}, store_kind=True
        )
        proof = log._append_locked(content, client, None)  # noqa: SLF001 - we hold the lock
    else:
        proof = {**_proof(existing), "duplicate": True}

    # Step 2: a torn tail may hold the same bytes; erasure means everywhere.
    # Done before the rename: once the log is rewritten the values are gone,
    # and a rerun after a crash could no longer know what to scrub.
    scrubbed = []
    for q in log.quarantined():
        qpath = log.directory / q["file"]
        data = qpath.read_bytes()
        cleaned = data
        for v in values:
            cleaned = cleaned.replace(v, b"*" * len(v))
        if cleaned != data:
            _rewrite(qpath, cleaned)
            scrubbed.append(q["file"])

    # Step 3: the new file, streamed (memory flat in log size).
    new_line = record.canonical(record.redacted_form(target.record)) + b"\n"
    tmp = log.directory / (log.path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o600)
    try:
        with open(log.path, "rb") as src:
            size = os.fstat(src.fileno()).st_size
            _copy(src, fd, target.offset)
            _write_all(fd, new_line)
            src.seek(target.end)
            _copy(src, fd, size - target.end)
        # Durable before it may replace the log.
        os.fsync(fd)
    finally:
        os.close(fd)
    expected_size = size - target.length + len(new_line)
    with open(tmp, "rb") as f:
        f.seek(target.offset)
        back = f.read(len(new_line))
        tmp_size = os.fstat(f.fileno()).st_size
    if back != new_line or tmp_size != expected_size:
        os.unlink(tmp)
        raise InvalidRecord(
            f"the rewritten log did not read back as written (size {tmp_size}, expected {expected_size}); "
            "the log was not replaced; nothing was changed",
            path="seq",
        )
    os.replace(tmp, log.path)
    fsync_dir(log.directory)
    # Every cached fact (descriptor, tail, offsets) belonged to the old file.
    log._close_fd()  # noqa: SLF001
    log._ops.clear()  # noqa: SLF001
    log._ops_end = 0  # noqa: SLF001

    return Redaction(seq, proof, target.length, len(new_line), quarantine_scrubbed=scrubbed)


def _proof(line: Any) -> dict[str, Any]:
    from .log import proof_of

    return proof_of(line)


def _copy(src: Any, fd: int, n: int) -> None:
    while n > 0:
        chunk = src.read(min(_COPY_CHUNK, n))
        if not chunk:
            raise OSError(0, "log shrank while it was being copied")
        _write_all(fd, chunk)
        n -= len(chunk)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _rewrite(path: Any, data: bytes) -> None:
    # Not named like a quarantine file, so a crash here leaves nothing that
    # verify would mistake for a torn tail.
    tmp = path.with_name(".scrub-" + path.name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o600)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
