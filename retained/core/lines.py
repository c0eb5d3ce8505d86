"""A line of the log as found on disk: its status, the `Line` that carries it, reading lines backwards, the time format.

The log (``core.log``) and the session-start brief's reader
(``brief.reader``) both read lines newest first through ``segments_reverse``
and describe each as a `Line`; ``core.record`` decides a line's status.
``utc_now`` is how every ``ts`` (and an anchor's ``time``) is written. This
module needs only the standard library, like everything on the brief's path.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from retained import limits
from retained.core.files import open_read
from retained.errors import StoreDamaged

LOG_NAME = "log.jsonl"

# What a line is (``record.classify`` and the brief's reader decide it).
RECORD = "record"
REDACTED = "redacted"
FOREIGN = "foreign"
DAMAGED = "damaged"
TORN = "torn"
CHAINED = frozenset({RECORD, REDACTED})
# The fields that chain a line, and all a redacted line holds (``core.record`` says why).
CHAIN_FIELDS = frozenset({"seq", "prev", "hash"})
REDACTED_FIELDS = frozenset({"v", "seq", "prev", "hash", "cd", "redacted"})


def utc_now() -> str:
    """RFC 3339 UTC with microseconds and ``Z``, as every ``ts`` is written."""
    # isoformat, not strftime: it parses no format string on the write path.
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class Line(namedtuple("Line", "offset raw status record seq hash problem")):
    """One line of the log as found on disk, with what it is.

    ``status`` is record / redacted (a valid chained line), foreign (JSON
    without chain fields, written by another program), damaged (a complete
    line that fails to parse or verify) or torn (bytes after the last
    newline). ``seq`` and ``hash`` are what the line claims, also when damaged.
    A named tuple: scans build one per line, and tuple construction is the
    cheapest immutable record Python has.

    Fields: offset (int), raw (bytes), status (str), record (the parsed
    object or None), seq (int | None), hash (str | None), problem (str | None).
    """

    __slots__ = ()

    @property
    def length(self) -> int:
        return len(self.raw)

    @property
    def end(self) -> int:
        return self.offset + len(self.raw)

    @property
    def chained(self) -> bool:
        return self.status in CHAINED


def size_of(path: Path) -> int:
    """The log's size in bytes (0 when there is none yet)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def open_log(path: Path) -> BinaryIO | None:
    """The log at ``path`` opened for reading (never through a link), or None when there is none yet."""
    try:
        return open_read(path)
    except FileNotFoundError:
        return None
    except IsADirectoryError as exc:
        raise StoreDamaged(f"{path} is a directory, not a log file; move it aside") from exc


def read_at(path: Path, offset: int, length: int) -> bytes:
    """The bytes at one place of the log at ``path`` (b"" when there is no log)."""
    f = open_log(path)
    if f is None:
        return b""
    with f:
        f.seek(offset)
        return f.read(length)


def segments_reverse(f: BinaryIO, end: int) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, bytes)`` of each line before ``end``, newest first.

    The first segment may lack its newline (a torn tail). Reads grow when a
    line is longer than a chunk, so a 16 MiB line costs a few reads, not
    hundreds.
    """
    pos = end
    carry = b""
    chunk = limits.TAIL_CHUNK_BYTES
    while True:
        n = min(chunk, pos)
        pos -= n
        f.seek(pos)
        data = f.read(n) + carry
        hi = len(data)
        while True:
            if hi == 0:
                if pos == 0:
                    return
                carry = b""
                break
            nl = data.rfind(b"\n", 0, hi - 1)
            if nl == -1:
                if pos == 0:
                    yield 0, data[:hi]
                    return
                carry = data[:hi]
                chunk *= 2
                break
            yield pos + nl + 1, data[nl + 1 : hi]
            hi = nl + 1
