"""The brief's reader: the store's log and index, read-only, the way the session-start brief reads them.

The brief runs at every session start, within the start-up budget that
``python -m harness bench brief`` measures against ``python -c pass``; that
budget is kept here and nowhere else. The brief's path needs only the standard
library (with ``blake3`` and ``sqlite3``) and these leaf modules of retained:
``errors``, ``paths``, ``render``, ``core.files``, ``core.lines``,
``core.anchors`` (the brief records the head it read), ``index.schema``,
``brief.session`` and ``sync.layout`` (the pulled stores it also reads). Never
orjson, the storage core (``core.log``, ``core.record``, ``core.lock``) or the
index writer: tests/unit/test_brief.py checks the set. `LogReader` reads the
log, `classify` checks a line, `IndexView` is a snapshot of the index.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import blake3

from retained.core.lines import (
    CHAIN_FIELDS,
    FOREIGN,
    LOG_NAME,
    RECORD,
    REDACTED,
    REDACTED_FIELDS,
    TORN,
    Line,
    open_log,
    read_at,
    segments_reverse,
    size_of,
)
from retained.errors import LinkRefused
from retained.index import schema as index_schema
from retained.index.schema import INDEX_NAME

# How long a read of the index may wait on SQLite's own locks.
INDEX_BUSY_S = 0.2


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def classify(content: bytes) -> tuple[str, Any, int | None, str | None, str | None]:
    """``record.classify(content)``'s answer, ``(status, parsed, seq, hash, problem)``, without orjson.

    Same checks: the line parses, has its chain fields, is canonical and its
    hash recomputes. The standard encoder agrees byte for byte with the
    canonical one except on a few float and escape spellings; wherever this
    quick check does not pass, ``record.classify`` decides, so a damaged line
    is never shown as a record (tests/property/test_display_classify.py).
    """
    try:
        obj = json.loads(content)
    except ValueError:
        return _classify(content)
    if not isinstance(obj, dict) or not ("seq" in obj or "prev" in obj or "hash" in obj):
        return FOREIGN, obj, None, None, None
    seq, prev, h = obj.get("seq"), obj.get("prev"), obj.get("hash")
    if type(seq) is not int or seq < 1 or not isinstance(prev, str) or not isinstance(h, str):
        return _classify(content)
    try:
        if _canonical(obj) != content:
            return _classify(content)
        if obj.get("redacted") is True:
            if obj.keys() != REDACTED_FIELDS or not isinstance(obj.get("cd"), str):
                return _classify(content)
            cd, status = obj["cd"], REDACTED
        else:
            body = dict(obj)
            for name in CHAIN_FIELDS:
                del body[name]
            cd, status = blake3.blake3(_canonical(body)).hexdigest(), RECORD
        if blake3.blake3(_canonical({"cd": cd, "prev": prev, "seq": seq})).hexdigest() != h:
            return _classify(content)
    except (TypeError, ValueError):
        return _classify(content)
    return status, obj, seq, h, None


def _classify(content: bytes) -> tuple[str, Any, int | None, str | None, str | None]:
    """The line as the storage core classifies it (orjson): only for a line the quick check cannot settle.

    The brief's one deferred import, on a path a well-formed log never takes.
    """
    from retained.core.record import classify as exact  # deferred: the brief's budget (see the module's docstring)

    return exact(content)


def line(offset: int, raw: bytes) -> Line:
    """One line (with its newline, if any) as a `Line`."""
    if not raw.endswith(b"\n"):
        return Line(offset, raw, TORN, None, None, None, "unterminated last line")
    return Line(offset, raw, *classify(raw[:-1]))


class LogReader:
    """The log of the store at ``directory``, read-only and without a lock (a torn tail is an append in progress)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOG_NAME

    def size(self) -> int:
        return size_of(self.path)

    def open(self) -> BinaryIO | None:
        """The log opened for reading (never through a link), or None when there is none."""
        return open_log(self.path)

    def read_at(self, offset: int, length: int) -> bytes:
        """The bytes at one place (``index.schema.mark_state`` reads the mark's line so)."""
        return read_at(self.path, offset, length)

    def lines_reverse(self, stop: int) -> Iterator[Line]:
        """Every line before ``stop``, newest first (a torn tail first, if any)."""
        for offset, raw in self.raw_reverse(stop):
            yield line(offset, raw)

    def raw_reverse(self, stop: int) -> Iterator[tuple[int, bytes]]:
        """``(offset, raw bytes)`` of every line before ``stop``, newest first, unclassified: for a caller
        that can tell from the bytes which lines it needs and classifies only those (`line`)."""
        f = self.open()
        if f is None:
            return
        with f:
            yield from segments_reverse(f, stop)

    @staticmethod
    def record_at(f: BinaryIO, seq: int, offset: int, length: int, h: str) -> dict[str, Any] | None:
        """The record at an indexed place of the open log ``f``, or None when the line there no longer holds it."""
        f.seek(offset)
        status, rec, line_seq, line_hash, _ = classify(f.read(length).removesuffix(b"\n"))
        if status != RECORD or line_seq != seq or line_hash != h:
            return None
        return rec


class IndexView:
    """A read-only snapshot of the index, or the reason it cannot be used.

    ``state`` is ``absent``, ``unusable``, ``current`` (its mark is the
    log's size) or ``behind``; ``db`` is open (in one read transaction)
    only when it is current or behind. It never builds or catches up the
    index.
    """

    def __init__(self, directory: Path, log: LogReader, size: int) -> None:
        self.db: sqlite3.Connection | None = None
        self.state = "absent"
        self.reason = f"no {INDEX_NAME}"
        self.hwm_offset = 0
        self.hwm_seq = 0
        self.log_size = size  # the log's size this snapshot covers (it may grow while the brief runs)
        path = directory / INDEX_NAME
        if not path.is_file():
            return
        try:
            db = index_schema.connect_read_only(path, INDEX_BUSY_S)
        except (sqlite3.Error, LinkRefused) as exc:
            # A link in place of the index is never opened; the log alone answers.
            self.give_up("unusable", f"index cannot be opened ({exc})")
            return
        try:
            db.execute("BEGIN")  # one snapshot for the mark and every count
            mark = index_schema.read_mark(db, index_schema.READABLE_VERSIONS)
        except (sqlite3.Error, ValueError) as exc:
            db.close()
            self.give_up("unusable", f"index cannot be read ({exc})")
            return
        if mark.offset > size:
            size = log.size()  # a writer appended, and the index caught up, since the brief began
            self.log_size = size
        state = index_schema.mark_state(mark, size, log.read_at)
        if state in ("log_shorter", "log_other"):
            db.close()
            self.give_up("unusable", f"the index was built from {'a longer' if state == 'log_shorter' else 'another'} log")
            return
        self.db = db
        self.state = "current" if state == "ok" else "behind"
        self.reason = ""
        self.hwm_offset = mark.offset
        self.hwm_seq = mark.seq

    def give_up(self, state: str, reason: str) -> None:
        self.close()
        self.state = state
        self.reason = reason

    def close(self) -> None:
        if self.db is not None:
            try:
                self.db.close()
            except sqlite3.Error:
                pass
            self.db = None

