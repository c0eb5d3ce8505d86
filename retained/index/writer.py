"""The derived index beside the log, written here (L5: rebuilt from the log alone).

What it holds, and how every read first catches it up (`Index.catch_up`):
docs/search.md ("The index"). Nothing here is the truth: results are read back
from the log by offset and checked against the hash before they are returned.
The file name, the tables, the mark and the read-only queries are defined in
``schema``; what the index stores for a record in ``documents``; ranked search
(`Index.searcher`) in ``search``; the two-way verify in ``verify``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import blake3

from retained.core import pool, record
from retained.core.log import Log, make_line
from retained.errors import InvalidRecord, RetainedError
from retained.index import schema
from retained.index.documents import documents, estimate_tokens
from retained.index.schema import (
    FLAG_COLUMNS,
    INDEX_NAME,
    LINK_FIELDS,
    SCHEMA_VERSION,
    TOKENIZER,
    link_targets,
)
from retained.index.search import COVERAGE_WEIGHT, K_MAX, RANKING, RERANK_N, Ranking, Search

if TYPE_CHECKING:
    from retained.replies import Entry, Links, Listing

# The names callers import from here, those defined in documents, schema and search included.
__all__ = [
    "COVERAGE_WEIGHT", "INDEX_NAME", "K_MAX", "RERANK_N", "SCHEMA_VERSION", "TOKENIZER", "Index", "IndexError_",
    "documents", "estimate_tokens",
]


def _entry(
    offset: int, length: int, status: str, rec: dict[str, Any], seq: int, h: str
) -> tuple[tuple[Any, ...], tuple[str, str, str] | None, list[tuple[int, int, str]]]:
    """What the index stores for one chained line: its ``records`` row, its words, its links.

    The one definition, for catch-up and rebuild alike. A redacted line has
    no words and no links (None and ``[]``); a link names an earlier seq only.
    """
    kind, scope, ts, op = rec.get("kind"), rec.get("scope"), rec.get("ts"), rec.get("client_op_id")
    redacted = 1 if status == record.REDACTED else 0
    row = (
        seq, offset, length, h,
        kind if type(kind) is str else None,
        scope if type(scope) is str else None,
        ts if type(ts) is str else None,
        op if type(op) is str else None,
        schema.client_name(rec.get("client")),
        redacted,
    )
    if redacted:
        return row, None, []
    links = []
    if "supersedes" in rec or "retracts" in rec or "redacts" in rec:
        for rel in LINK_FIELDS:
            for target in link_targets(rec.get(rel)):
                if target < seq:
                    links.append((target, seq, rel))
    return row, documents(rec), links


# -- the log's lines as rows, a range at a time -----------------------------------
#
# Catch-up and rebuild index the log the same way: byte ranges of it are turned
# into rows by `_index_range` (the per-line work: classify, which re-checks every
# hash and the canonical bytes, and the words), each range into a small
# in-memory SQLite database, through `pool.map_ranges` (in worker processes
# only when a rebuild's caller asks for them). This process attaches each one
# and copies it into the index with INSERT ... SELECT (`Index._copy_range`):
# the only per-row work left here is SQLite's own (FTS5 tokenising), in the
# caller's one transaction.

_BULK = "rebuild_rows"  # the schema name a range's database is attached as
# Ranges of at most this many bytes: a range's database is most of its size
# again, and each worker holds about two (see pool.map_ranges).
INDEX_RANGE_BYTES = 4 * 1024 * 1024
_NO_WORDS = (None, None, None)
_INSERT_LINES = f"INSERT INTO lines ({schema.ROW_COLUMNS}, text, body, fields) VALUES ({', '.join('?' * 13)})"
_INSERT_LINE_LINKS = "INSERT INTO line_links (offset, target, source, rel) VALUES (?, ?, ?, ?)"


class _Place(NamedTuple):
    """A chained line's place, as `schema.write_mark` reads the last one indexed."""

    offset: int
    length: int
    seq: int
    hash: str


class _Range(NamedTuple):
    """What `_index_range` found in a range of the log: its rows and what the copy needs."""

    rows: Any  # a serialized database (bytes; empty when no line is chained), or its rows where SQLite cannot serialize
    lines: int  # chained lines
    first_seq: int  # 0 when none
    max_seq: int
    ascending: bool  # every chained line's seq above the one before
    end: int  # where its complete lines end (a torn tail after)
    last: _Place | None  # its last chained line
    links: bool  # some line names an earlier record


def _index_range(path: str, start: int, stop: int) -> _Range:
    """The index's rows for the lines in ``[start, stop)`` of the log at ``path`` (the pool's task).

    ``start`` is a line boundary; so is ``stop`` unless it is the end of the
    log, where bytes after the last newline are a torn tail (an append in
    progress): not indexed, and the range's ``end`` stops before them.
    Only chained lines are indexed: foreign and damaged lines are verify's
    to report.
    """
    parts, _ = pool.range_lines(path, start, stop)  # a torn tail is not indexed
    classify = record.classify
    hasher = blake3.blake3()  # lent to classify for every line of the range
    RECORD, REDACTED = record.RECORD, record.REDACTED
    rows: list[tuple[Any, ...]] = []
    links: list[tuple[int, int, int, str]] = []
    first_seq = last_seq = max_seq = 0
    ascending = True
    last_place = None
    offset = start
    for raw in parts:
        length = len(raw) + 1
        status, rec, seq, h, _ = classify(raw, hasher)
        if status in (RECORD, REDACTED):
            row, words, named = _entry(offset, length, status, rec, seq, h)  # type: ignore[arg-type]
            rows.append((*row, *(words or _NO_WORDS)))
            for target, source, rel in named:
                links.append((offset, target, source, rel))
            if seq <= last_seq:  # type: ignore[operator]
                ascending = False
            elif seq > max_seq:  # type: ignore[operator]
                max_seq = seq  # type: ignore[assignment]
            if not first_seq:
                first_seq = seq  # type: ignore[assignment]
            last_seq = seq  # type: ignore[assignment]
            last_place = (offset, length, seq, h)
        offset += length
    if not rows:
        return _Range(b"", 0, 0, 0, True, offset, None, False)
    last = None if last_place is None else _Place(*last_place)  # type: ignore[arg-type]
    blob: Any = (rows, links)
    if _SERIALIZE:
        db = sqlite3.connect(":memory:", isolation_level=None)
        try:
            for stmt in schema.bulk_statements():
                db.execute(stmt)
            with schema.transaction(db):
                db.executemany(_INSERT_LINES, rows)
                db.executemany(_INSERT_LINE_LINKS, links)
            blob = db.serialize()
        finally:
            db.close()
    return _Range(blob, len(rows), first_seq, max_seq, ascending, offset, last, bool(links))


# Python's sqlite3 serializes where SQLite was built with it (the default since
# 3.36); elsewhere a range's rows travel as lists and are inserted here.
_SERIALIZE = hasattr(sqlite3.Connection, "serialize")
# Records read from the log through one open of it, at most about this many
# bytes at a time (a reply of a few records reads once; a huge one in steps).
READ_BATCH_BYTES = 4 * 1024 * 1024


class IndexError_(RetainedError):
    """The index file cannot be used (not SQLite, locked past the timeout).

    The log is untouched; ``retained rebuild`` (or deleting the index file)
    recreates the index from it.
    """

    code = "index_unavailable"


class IndexFull(IndexError_):
    """The index could not be written: the disk (or the device) is full or failing.

    The log is untouched and the index is not damaged: it holds what it held
    before; free space and retry.
    """

    code = "index_disk_full"


class _IndexDamaged(IndexError_):
    """The file is not an SQLite database, or SQLite finds it corrupt: only then is it set aside."""


def _failure(exc: sqlite3.Error, path: Path, doing: str) -> IndexError_:
    """The retained error for an SQLite error while ``doing`` something with the index at ``path``.

    Only a file SQLite calls not a database, or corrupt, is damaged; a full
    disk or an I/O error says nothing about the file, which must then be left
    where it is (issue 14: a full disk once moved a sound index aside).
    """
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    if primary in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return _IndexDamaged(f"index {path} is damaged ({exc}); delete it or run `retained rebuild`; the log is untouched",
                             path=str(path))
    if primary in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR):
        return IndexFull(
            f"{doing} the index {path} failed ({exc}): the disk is full or failing; free space, then retry; "
            "the log is untouched and the index is not damaged",
            path=str(path),
        )
    return IndexError_(f"{doing} the index {path} failed ({exc}); retry, or run `retained rebuild`; the log is untouched",
                       path=str(path))


class Index:
    """The FTS5 index of one log. Safe to delete; rebuilt from the log.

    One SQLite connection per instance, guarded by a lock so threads can
    share it. Other modules (vectors) reach the same database through
    `connection()` and the lexical ranking through `ranked()`. Search is a
    part of it (`searcher`, a `Search` over this index), whose verbs it offers.
    """

    ranking: Ranking = RANKING  # the re-ranking steps search uses (an evaluation may set its own)

    def __init__(
        self,
        log: Log,
        path: str | os.PathLike[str] | None = None,
        *,
        busy_timeout_s: float = 10.0,
        witness: Callable[[int, str, int], None] | None = None,
    ) -> None:
        self.log = log
        self.path = Path(path) if path is not None else log.directory / INDEX_NAME
        self.busy_timeout_s = busy_timeout_s
        # Called with (seq, hash, log bytes) of the last record indexed when
        # the log no longer holds it (replaced, cut back, re-chained), before
        # anything is rebuilt: that head is evidence a rebuild would erase
        # (the Store records it as an anchor).
        self.witness = witness
        self._db: sqlite3.Connection | None = None
        self._mutex = threading.RLock()
        self.last_catch_up: dict[str, Any] = {}
        # Inside `one_catch_up`, this thread's first catch-up answers for the rest of the call.
        self._call = threading.local()
        self.searcher = Search(self)
        self.search, self.ranked = self.searcher.search, self.searcher.ranked
        self.attach_context, self.related = self.searcher.attach_context, self.searcher.related

    # -- connection -----------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        """The open connection (created on first use, schema in place).

        Callers outside this module must hold `lock` while using it and must
        not write to the tables this module owns.
        """
        with self._mutex:
            if self._db is None:
                try:
                    self._db = self._open()
                except _IndexDamaged:
                    # Derived and safe to delete: set the damaged file aside
                    # (kept for inspection) and start again from the log.
                    self._set_aside()
                    self._db = self._open()
            return self._db

    def _set_aside(self) -> None:
        n = 0
        while (aside := self.path.with_name(f"{self.path.name}.damaged-{n}")).exists():
            n += 1
        os.replace(self.path, aside)
        for suffix in schema.INDEX_SUFFIXES:
            with suppress(FileNotFoundError):
                os.unlink(str(self.path) + suffix)

    @property
    def lock(self) -> threading.RLock:
        return self._mutex

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            db = schema.connect(self.path, self.busy_timeout_s)
        except sqlite3.Error as exc:
            raise _failure(exc, self.path, "opening") from exc
        except OSError as exc:
            raise IndexError_(f"the index {self.path} cannot be created ({exc.strerror or exc}); free space or fix "
                              "the directory, then retry; the log is untouched", path=str(self.path)) from exc
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            # bm25 reads each matching row's size from FTS5's docsize table:
            # a page cache big enough for the whole index at 100k records
            # (~30 MB) keeps those reads off the OS. Allocated only as used.
            db.execute("PRAGMA cache_size=-65536")
            if schema.schema_version(db) != SCHEMA_VERSION:
                with schema.transaction(db, immediate=True):
                    if schema.schema_version(db) != SCHEMA_VERSION:  # another process may have made it meanwhile
                        self._reset(db)
        except sqlite3.Error as exc:
            db.close()
            raise _failure(exc, self.path, "opening") from exc
        return db

    def close(self) -> None:
        with self._mutex:
            if self._db is not None:
                self._db.close()
                self._db = None

    @staticmethod
    def _reset(db: sqlite3.Connection, *, records_indexes: bool = True) -> None:
        """Drop the index's tables and make them empty, in the caller's write transaction.

        Without ``records_indexes`` the caller makes them (`schema.RECORDS_INDEXES`) once the table is full.
        """
        for stmt in schema.statements(schema.DROP + (schema.SCHEMA if records_indexes else schema.TABLES)):
            db.execute(stmt)
        db.executemany(schema.INSERT_META, schema.EMPTY_META)

    # -- high-water mark ------------------------------------------------------

    def _witness(self, mark: schema.Mark) -> None:
        if self.witness is not None and mark.seq > 0 and mark.hash:
            self.witness(mark.seq, mark.hash, mark.line_offset + mark.line_length)

    def _mark_state(self, mark: schema.Mark, size: int) -> str:
        """``ok``, ``behind`` (the log grew) or ``replaced``."""
        state = schema.mark_state(mark, size, self.log.read_at)
        return "replaced" if state in ("log_shorter", "log_other") else state

    def status(self) -> dict[str, Any]:
        """The mark and whether the log moved past it (no catch-up)."""
        with self._mutex:
            db = self.connection()
            mark = schema.read_mark(db)
            size = self.log.size()
            return {
                "state": self._mark_state(mark, size),
                "indexed_to": mark.offset,
                "log_bytes": size,
                "seq": mark.seq,
                "hash": mark.hash,
                "path": str(self.path),
            }

    @contextmanager
    def one_catch_up(self) -> Iterator[None]:
        """Within the block, this thread catches the index up once: the first catch-up's answer serves the rest.

        A Store call wraps its reads in it, so a call that reads through
        several parts of the index (a hybrid search, a listing with links)
        checks the log against the mark once. Nested blocks are one block.
        """
        if getattr(self._call, "open", False):
            yield
            return
        self._call.open, self._call.done = True, None
        try:
            yield
        finally:
            self._call.open, self._call.done = False, None

    def catch_up(self, *, on_replaced: str = "rebuild", stop: int | None = None) -> dict[str, Any]:
        """Index whatever the log gained since the mark; returns what happened.

        The mark, the transaction that re-reads it, and a replaced log:
        docs/search.md ("The index"). ``on_replaced`` is ``"rebuild"`` (reads:
        the answer must reflect the log) or ``"report"`` (verify: keep the
        drift so it can be shown). ``stop``: index only the lines before this
        offset (a write's related step reads the records before its own and
        leaves its own, however long, to the next catch-up). The result's
        ``state`` is ``ok``, ``rebuilt``, ``replaced`` (reported,
        not rebuilt) or ``stale`` (another process held the index past the
        busy timeout, or the disk is full; the answer comes from the index as
        it was, and ``reason`` says why). Inside `one_catch_up` only the
        first call of the thread does the work.

        Raises:
            IndexFull / IndexError_: the index cannot be opened, or a rebuild failed.
        """
        # A catch-up that stops short (``stop``, the related step's) neither takes nor leaves the call's answer.
        done = getattr(self._call, "done", None) if stop is None else None
        if done is not None:
            return done
        with self._mutex:
            self.last_catch_up = self._catch_up(on_replaced, stop)
        if stop is None and getattr(self._call, "open", False):
            self._call.done = self.last_catch_up
        return self.last_catch_up

    def _catch_up(self, on_replaced: str, stop: int | None) -> dict[str, Any]:
        db = self.connection()
        mark = schema.read_mark(db)
        size = self.log.size()
        wanted = size if stop is None else min(size, stop)
        # Fast path without a write lock: nothing new (the common case).
        if mark.offset >= wanted and self._mark_state(mark, size) != "replaced":
            return {"state": "ok", "indexed": 0}
        # Only durable bytes are indexed (L6, Log.durable_end): an append under way waits for a later read.
        durable = self.log.durable_end(wanted)
        if mark.offset >= durable and self._mark_state(mark, size) != "replaced":
            return {"state": "ok", "indexed": 0, "not_yet_durable": wanted - mark.offset}
        with self._bulk_attached(db):
            tx = schema.transaction(db, immediate=True)
            try:
                with tx:
                    mark = schema.read_mark(db)  # another process may have moved it meanwhile
                    size = self.log.size()
                    replaced = self._mark_state(mark, size) == "replaced"
                    end = min(size, durable)
                    n = 0 if replaced or mark.offset >= end else self._index_lines(db, mark.offset, end, None)
            except sqlite3.OperationalError as exc:
                if not tx.begun:
                    # Another process holds the index for longer than the busy
                    # timeout (a rebuild of a large log). Answer from the index
                    # as it is and say so; the next read catches up.
                    return {"state": "stale", "indexed": 0, "reason": str(exc)}
                return self._stale_or_raise(exc)
            except sqlite3.Error as exc:
                return self._stale_or_raise(exc)
        if not replaced:
            out: dict[str, Any] = {"state": "ok", "indexed": n}
            if end < wanted:
                out["not_yet_durable"] = wanted - end  # bytes of an append under way, left to a later read (L6)
            return out
        if on_replaced == "rebuild":
            result = self.rebuild()  # which keeps the mark as evidence first
            return {"state": "rebuilt", "indexed": result["records"], "reason": "log replaced"}
        self._witness(mark)
        return {"state": "replaced", "indexed": 0}

    def _stale_or_raise(self, exc: sqlite3.Error) -> dict[str, Any]:
        failure = _failure(exc, self.path, "catching up")
        if not isinstance(failure, IndexFull):
            raise failure from exc
        # The index as it was is still sound, only behind: reads answer from it and say so.
        return {"state": "stale", "indexed": 0, "reason": failure.message}

    def _index_lines(
        self, db: sqlite3.Connection, start: int, stop: int, progress: Callable[[int, int], None] | None,
        workers: int = 0, range_bytes: int = INDEX_RANGE_BYTES, parallel_min_bytes: int = pool.PARALLEL_MIN_BYTES,
        mp_context: Any = None,
    ) -> int:
        """Index the lines in ``[start, stop)`` and move the mark past them; returns the chained lines.

        The one way lines are indexed, for catch-up and rebuild alike; the
        caller holds the write transaction and has attached `_BULK`
        (`_bulk_attached`). The ranges go through ``pool.map_ranges``
        (``workers``, ``parallel_min_bytes`` and ``mp_context`` as there);
        ``progress(done_bytes, stop)`` is called after each range.
        """
        f = self.log.open_read()
        if f is None:
            schema.write_mark(db, start, None)
            return 0
        with f:
            bounds, workers = pool.plan_ranges(f, stop, workers, range_bytes, parallel_min_bytes, start=start)
        top = db.execute("SELECT coalesce(max(seq), 0) FROM records").fetchone()[0]
        count = 0
        end = start
        last = None
        with closing(pool.map_ranges(_index_range, str(self.log.path), bounds, workers, mp_context)) as parts:
            for part in parts:
                if part.lines:
                    self._load_range(db, part.rows)
                    # Clean: every seq is above those indexed so far and comes once.
                    self._copy_range(db, clean=part.ascending and part.first_seq > top, links=part.links)
                    top = max(top, part.max_seq)
                    last = part.last
                    count += part.lines
                end = part.end
                if progress is not None:
                    progress(end, stop)
        schema.write_mark(db, end, last)
        return count

    @staticmethod
    @contextmanager
    def _bulk_attached(db: sqlite3.Connection) -> Iterator[None]:
        """The block with the in-memory database ranges are copied from attached, unless it was already.

        Not allowed inside a transaction. Detached after the block, which lets
        go of the last range's rows (the attached database holds them until then).
        """
        if db.execute("SELECT 1 FROM pragma_database_list WHERE name = ?", (_BULK,)).fetchone() is not None:
            yield
            return
        db.execute(f"ATTACH DATABASE ':memory:' AS {_BULK}")
        try:
            if not _SERIALIZE:
                for stmt in schema.bulk_statements(_BULK):
                    db.execute(stmt)
            yield
        finally:
            with suppress(sqlite3.OperationalError):  # a failure to let go must not hide the block's own error
                db.execute(f"DETACH DATABASE {_BULK}")

    @staticmethod
    def _load_range(db: sqlite3.Connection, rows: Any) -> None:
        """Put a range's rows (see `_Range`) in the attached database, in place of the last range's."""
        if _SERIALIZE:
            db.deserialize(rows, name=_BULK)
            return
        lines, links = rows
        db.execute(f"DELETE FROM {_BULK}.lines")
        db.execute(f"DELETE FROM {_BULK}.line_links")
        db.executemany(_INSERT_LINES.replace("INTO lines", f"INTO {_BULK}.lines"), lines)
        db.executemany(_INSERT_LINE_LINKS.replace("INTO line_links", f"INTO {_BULK}.line_links"), links)

    def _copy_range(self, db: sqlite3.Connection, *, clean: bool, links: bool) -> None:
        """Copy the attached range's rows, words and links into the index; the caller holds the write transaction.

        Where a seq is claimed twice (a tampered log) the first line that
        claims it is kept, with its words and links; verify reports the rest.
        """
        lines = f"{_BULK}.lines"
        columns = schema.ROW_COLUMNS
        if clean:
            db.execute(f"INSERT INTO records ({columns}) SELECT {columns} FROM {lines} ORDER BY n")
            db.execute(f"INSERT INTO fts (rowid, text, body, fields) SELECT seq, text, body, fields FROM {lines} "
                       "WHERE redacted = 0 ORDER BY n")
        else:
            db.execute(f"INSERT OR IGNORE INTO records ({columns}) SELECT {columns} FROM {lines} ORDER BY n")
            db.execute(f"INSERT INTO fts (rowid, text, body, fields) SELECT l.seq, l.text, l.body, l.fields "
                       f"FROM {lines} AS l JOIN main.records AS r ON r.seq = l.seq AND r.offset = l.offset "
                       "WHERE l.redacted = 0 ORDER BY l.n")
        if links:
            kept = db.execute(
                f"SELECT l.target, l.source, l.rel FROM {_BULK}.line_links AS l "
                "JOIN main.records AS r ON r.seq = l.source AND r.offset = l.offset ORDER BY l.rowid"
            ).fetchall()
            if kept:
                self._link(db, kept)

    def _link(self, db: sqlite3.Connection, links: list[tuple[int, int, str]]) -> None:
        """Record ``(target, source, rel)`` links of indexed lines: the rows, the targets' flags, a redacted target's words gone."""
        db.executemany("INSERT OR IGNORE INTO links (target, source, rel) VALUES (?, ?, ?)", links)
        for rel, column in FLAG_COLUMNS.items():
            targets = [(t,) for t, _, r in links if r == rel]
            if targets:
                db.executemany(f"UPDATE records SET {column} = 1 WHERE seq = ?", targets)
        # Once each: a contentless FTS5 row deleted twice would corrupt its counts.
        self._drop_redacted_words(db, list(dict.fromkeys(t for t, _, r in links if r == "redacts")))

    def _drop_redacted_words(self, db: sqlite3.Connection, targets: list[int]) -> None:
        """Remove a redacted record's words from FTS5 while its line still holds them.

        A contentless table deletes a row only given the values it indexed,
        so they are read back from the log; if the line was already rewritten
        the log was replaced and the next read rebuilds without them.
        """
        for seq in targets:
            row = schema.place(db, seq)
            if row is None:
                continue
            line = self.log.line_at(row[0], row[1])
            if line.status == record.RECORD and line.hash == row[2]:
                db.execute(
                    "INSERT INTO fts (fts, rowid, text, body, fields) VALUES ('delete', ?, ?, ?, ?)",
                    (seq, *documents(line.record)),
                )

    # -- rebuild --------------------------------------------------------------

    def rebuild(
        self,
        progress: Callable[[int, int], None] | None = None,
        *,
        workers: int = 0,
        range_bytes: int = INDEX_RANGE_BYTES,
        parallel_min_bytes: int = pool.PARALLEL_MIN_BYTES,
        mp_context: Any = None,
    ) -> dict[str, Any]:
        """Drop every table and index the whole log again, in one transaction.

        Every line is classified as it is indexed (its hash recomputed, its
        bytes checked canonical), so a damaged or foreign line is never
        indexed as a record. The log is indexed as a catch-up indexes it
        (`_index_lines`), in ranges of at most ``range_bytes``: in this
        process unless ``workers`` is 2 or more and the log at least
        ``parallel_min_bytes`` (``mp_context`` as for ``pool.map_ranges``).
        Either way the index holds the same rows, words and mark, and a
        failure or a crash before the commit leaves it as it was.

        ``progress(done_bytes, total_bytes)`` is called after each range.
        Returns ``{"records", "bytes"}``.

        Raises:
            IndexFull: the disk is full; the index is left as it was.
            IndexError_: SQLite failed otherwise (busy past the timeout...).
        """
        # Durable bytes only (L6): a rebuild waits for an append under way (before its transaction: no wait holds the index).
        durable = self.log.durable_end(self.log.size(), wait_s=self.log.lock_wait_s)
        with self._mutex:
            db = self.connection()
            try:
                with self._bulk_attached(db), schema.transaction(db, immediate=True):
                    if self.witness is not None:
                        try:
                            mark = schema.read_mark(db)
                        except (ValueError, sqlite3.Error):
                            pass  # no mark to keep: the tables are not this version's
                        else:
                            if self._mark_state(mark, self.log.size()) == "replaced":
                                self._witness(mark)
                    # The records' indexes are made once the table is full: one sort each, not one insert per row each.
                    self._reset(db, records_indexes=False)
                    size = min(self.log.size(), durable)
                    n = self._index_lines(db, 0, size, progress, workers, range_bytes, parallel_min_bytes, mp_context)
                    for stmt in schema.statements(schema.RECORDS_INDEXES):
                        db.execute(stmt)
            except sqlite3.Error as exc:
                raise _failure(exc, self.path, "rebuilding") from exc
            return {"records": n, "bytes": size}

    # -- lookups --------------------------------------------------------------

    def links_of(self, seqs: Sequence[int]) -> dict[int, Links]:
        """`links` of each of ``seqs`` in one query (a seq nothing names is absent)."""
        with self._mutex:
            return cast("dict[int, Links]", schema.links_of(self.connection(), seqs))

    def read_many(self, seqs: Sequence[int]) -> dict[int, Entry]:
        """``{seq: entry}`` for those of ``seqs`` the index holds and the log still has there, with their links.

        One catch-up, one query for the places and one for the links, and
        one read of the log (`read_rows`).
        """
        self.catch_up()
        with self._mutex:
            db = self.connection()
            found = schema.places(db, seqs)
            links = cast("dict[int, Links]", schema.links_of(db, list(found)))
        rows = [(seq, *found[seq]) for seq in dict.fromkeys(seqs) if seq in found]
        return {entry["seq"]: entry for entry in self._read_linked(rows, links)}

    def read_rows(self, rows: Iterable[tuple[int, int, int, str]]) -> Iterator[Entry | None]:
        """The record at each ``(seq, offset, length, hash)``, read from the log and checked against the hash.

        None where the line there no longer holds that record. The log is
        opened once per `READ_BATCH_BYTES` of lines, and lazily: a caller
        that stops early reads no further.
        """
        batch: list[tuple[int, int, int, str]] = []
        size = 0
        for row in rows:
            batch.append(row)
            size += row[2]
            if size >= READ_BATCH_BYTES:
                yield from self._checked(batch)
                batch, size = [], 0
        if batch:
            yield from self._checked(batch)

    def _checked(self, rows: list[tuple[int, int, int, str]]) -> Iterator[Entry | None]:
        raws = self.log.read_many([(offset, length) for _, offset, length, _ in rows])
        for (seq, offset, length, h), raw in zip(rows, raws, strict=True):
            line = make_line(offset, raw)
            ok = line.chained and line.seq == seq and line.hash == h
            yield {"seq": seq, "offset": offset, "length": length, "record": line.record} if ok else None

    def _read_linked(self, rows: list[tuple[int, int, int, str]], links: dict[int, Links]) -> list[Entry]:
        """The records of ``rows`` the log still holds (`read_rows`), each given its ``links``."""
        out = []
        for row, entry in zip(rows, self.read_rows(rows), strict=True):
            if entry is not None:
                entry.update(links.get(row[0], {}))
                out.append(entry)
        return out

    def recent(self, limit: int = 20, *, listed: schema.Filter | None = None) -> Listing:
        """Newest records first (for ``list``), each with its links, and the I2 count of what matched.

        ``listed`` filters (`schema.Filter`).
        """
        if type(limit) is not int or limit < 0:
            raise InvalidRecord("field limit: must be a whole number from 0", path="limit")
        listed = listed or schema.Filter()
        self.catch_up()
        with self._mutex:
            db = self.connection()
            with schema.transaction(db):  # one snapshot for the count, the rows and their links
                total = schema.count_listed(db, listed=listed)
                rows = schema.newest(db, limit, listed=listed)
                links = cast("dict[int, Links]", schema.links_of(db, [row[0] for row in rows]))
        out = self._read_linked(rows, links)
        return {"records": out, "returned": len(out), "total_matches": total,
                "left_out": {"beyond_limit": total - len(rows), "unreadable": len(rows) - len(out)}}

    def scrub(self) -> None:
        """Rebuild with SQLite's secure_delete and vacuum: after a redaction, no erased term survives in the file's pages.

        The vectors of redacted records go too (`schema.prune_vectors`): a
        redacted line keeps its hash, so its vector must go by seq.
        """
        db = self.connection()
        db.execute("PRAGMA secure_delete=ON")
        self.rebuild()
        with self._mutex:
            schema.prune_vectors(db)
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    # -- verify ---------------------------------------------------------------

    def verify(
        self, lines: Iterable[tuple[Any, ...]] | None = None, *, snapshot: tuple[int, int] | None = None
    ) -> list[dict[str, Any]]:
        """Compare the index with the log in both directions; every finding, none if clean.

        ``lines``, if given, are the log's complete lines in file order as the
        chain walk passes them (``chain.verify_file``'s ``check``), so the log
        is read once for both checks: ``(offset, length, seq, hash)`` for a
        record the walk verified, ``(offset, raw)`` for any other line. None
        reads the log here. ``snapshot``: ``(size, head seq)`` of the log
        verify judges; the index is compared with that prefix only, so rows
        for lines appended since are not ghosts.

        Findings are dicts with ``kind``, ``seq``, ``offset``, ``expected``,
        ``observed`` and ``message``; their kinds: docs/search.md ("Verify,
        both ways"). Memory: one bit per seq.
        """
        # Imported here, not at the top: verify is rare, and its module (with
        # orjson) would otherwise load with every reader of the index.
        from retained.index.verify import verify

        caught = self.catch_up(on_replaced="report")
        return verify(self.log, self.connection, self._mutex, self.path, self.busy_timeout_s,
                      replaced=caught["state"] == "replaced", lines=lines, snapshot=snapshot)
