"""Capture's map of the log's client_op_ids, kept in a file so a hook process need not scan the log.

The log recognises a retried write by its ``client_op_id`` (``Log.append``),
but it learns the ids by scanning the log once per process: about a second
at 100,000 records, more than a hook may take. ``capture/ops.bin`` lists
every id of the log up to a byte offset, as fixed entries of 28 bytes (the
first 16 bytes of the id's blake3 digest, the line's offset as 8 bytes and
its length as 4, big-endian). Each batch of entries ends with a mark entry
(8 bytes ``MARK``, the log's inode as 8 bytes, the log offset the map
covers as 8 bytes, 4 zero bytes), written with the entries in one write
and made durable before it counts: the last entry is the mark. Each capture first brings the map up to the log's current size
(a few lines are only read; past ``LOOSE_BYTES_MAX`` they are written into
the map), looks its ids up (a byte search over the file, then
the line itself read from the log and its id compared, so a digest clash or
a stale entry is never taken for a match), and hands the map to the log
(``Log.assume_ops``), which still scans, under its lock, whatever another
writer added since.

Derived and disposable: deleted, or from another log (a new inode, a
shorter file), it is rebuilt from the log. Two captures catching up at once
may both add an entry: the first match is the earlier one, and both point
at the same line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from retained.capture.ledger import capture_dir, ensure_dir
from retained.core import files, record
from retained.core.log import Log, proof_of

OPS_NAME = "ops.bin"
DIGEST_BYTES = 16
ENTRY_BYTES = DIGEST_BYTES + 8 + 4
MARK = b"\xffretmark"[:8]
LOOSE_BYTES_MAX = 16 * 1024  # log bytes past the mark read per capture before they are written into the map (a few turns)


def _digest(op: str) -> bytes:
    import blake3

    return blake3.blake3(op.encode("utf-8", "surrogatepass")).digest()[:DIGEST_BYTES]


class OpsMap:
    """The log's client_op_id -> proof map as ``Log.assume_ops`` reads it: the file below, new ids above."""

    def __init__(self, log: Log, data: bytes) -> None:
        self._log = log
        self._data = data
        self._new: dict[str, dict[str, Any]] = {}

    def get(self, op: str, default: Any = None) -> Any:
        if op in self._new:
            return self._new[op]
        key = _digest(op)
        data = self._data
        at = data.find(key)
        while at >= 0:
            if at % ENTRY_BYTES == 0:
                offset = int.from_bytes(data[at + DIGEST_BYTES: at + DIGEST_BYTES + 8], "big")
                length = int.from_bytes(data[at + DIGEST_BYTES + 8: at + ENTRY_BYTES], "big")
                try:
                    line = self._log.line_at(offset, length)
                except (OSError, ValueError):
                    line = None
                if line is not None and line.chained and line.record.get("client_op_id") == op:
                    return proof_of(line)
            at = data.find(key, at + 1)
        return default

    def __contains__(self, op: object) -> bool:
        return isinstance(op, str) and self.get(op) is not None

    def __setitem__(self, op: str, proof: dict[str, Any]) -> None:
        self._new[op] = proof

    def update(self, other: dict[str, dict[str, Any]]) -> None:
        self._new.update(other)


def _mark(ino: int, end: int) -> bytes:
    return MARK + ino.to_bytes(8, "big") + end.to_bytes(8, "big") + bytes(4)


def _read_mark(fd: int, size: int) -> tuple[int, int] | None:
    """(inode, end) from the file's last entry; None when the file is empty, cut short or not ended by a mark."""
    if size < ENTRY_BYTES or size % ENTRY_BYTES:
        return None
    last = os.pread(fd, ENTRY_BYTES, size - ENTRY_BYTES)
    if len(last) != ENTRY_BYTES or last[:8] != MARK or last[24:] != bytes(4):
        return None
    return int.from_bytes(last[8:16], "big"), int.from_bytes(last[16:24], "big")


def open_map(store_dir: Path, log: Log) -> tuple[OpsMap, int] | None:
    """The map brought up to the log's current size, and that size; None when the log does not exist yet.

    Raises:
        OSError: the map could not be read or extended (the caller goes on without it).
    """
    try:
        st = os.stat(log.path)
    except FileNotFoundError:
        return None
    directory = ensure_dir(capture_dir(store_dir))
    fd = files.open_fd(directory / OPS_NAME, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        size = os.fstat(fd).st_size
        mark = _read_mark(fd, size)
        start = mark[1] if mark is not None and mark[0] == st.st_ino and mark[1] <= st.st_size else -1
        if start < 0:
            os.ftruncate(fd, 0)
            start = 0
        end = st.st_size
        recent: dict[str, Any] = {}  # client_op_id -> its proof (proof_of)
        if 0 < end - start <= LOOSE_BYTES_MAX:
            # A few lines since the mark (the last event's record, usually):
            # read them here and leave the file as it is, saving a write and
            # an fdatasync on most events; a later capture records them.
            for line in log.scan(start=start, stop=end, containing=b'"client_op_id":'):
                if line.status == record.TORN:
                    end = line.offset
                    break
                if line.status == record.RECORD:
                    op = line.record.get("client_op_id")
                    if isinstance(op, str) and op not in recent:
                        recent[op] = proof_of(line)
        elif start != end:
            entries = []
            for line in log.scan(start=start, stop=end, containing=b'"client_op_id":'):
                if line.status == record.TORN:
                    end = line.offset
                    break
                if line.status == record.RECORD:
                    op = line.record.get("client_op_id")
                    if isinstance(op, str):
                        entries.append(_digest(op) + line.offset.to_bytes(8, "big") + line.length.to_bytes(4, "big"))
            # One write: a crash leaves the old mark last (these lines are
            # scanned again), or a cut entry (the map is rebuilt). Durable
            # before a later capture trusts it: a mark past entries lost in a
            # crash would let a repeated event through.
            files.write_all(fd, b"".join(entries) + _mark(st.st_ino, end))
            getattr(os, "fdatasync", os.fsync)(fd)
            size = os.fstat(fd).st_size
        data = os.pread(fd, size - size % ENTRY_BYTES, 0) if size else b""
    finally:
        os.close(fd)
    found = OpsMap(log, data)
    for op, proof in recent.items():
        if found.get(op) is None:
            found[op] = proof
    return found, end
