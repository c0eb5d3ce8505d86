"""The derived index: ``index.sqlite3`` beside the log (L5: rebuilt from the log alone).

What it holds: an FTS5 table for lexical search (contentless: the log has the
text) and a ``records`` table with each chained record's place in the log
(offset, length, hash) and the flags the log implies (superseded, retracted,
redacted). Nothing here is the truth: results are read back from the log by
offset and checked against the hash before they are returned.

Catch-up: the index keeps a high-water mark (the log offset it has read to,
and the seq, hash and place of the last record it indexed). Every read first
indexes whatever the log gained since, whoever wrote it. Catch-up runs in a
``BEGIN IMMEDIATE`` transaction that re-reads the mark inside it, so two
processes catching up at once never index a record twice. If the line at the
mark no longer carries the recorded hash, or the log is shorter than the mark,
the log was replaced (restored from a copy, redacted, truncated by hand):
reads then rebuild, and ``verify`` reports it first.

Search: bm25 over the text, the body and the string values of other caller
fields, with porter stemming over unicode61 (diacritics folded) and CJK runs
segmented into bigrams by ``query.segment``. Every reply accounts for what it
matched (invariant I2): ``returned + sum(left_out.values()) == total_matches``.

Token estimate for ``max_tokens``: ``ceil(utf8 bytes of text and body / 4)``
per result (a body that is not a string counts as its canonical JSON). It is
an estimate on the generous side for English and code.
"""

from __future__ import annotations

import bisect
import math
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from . import query, record
from .errors import InvalidRecord, RetainedError
from .log import Line, Log

INDEX_NAME = "index.sqlite3"
SCHEMA_VERSION = "2"
TOKENIZER = "porter unicode61 remove_diacritics 2"
# Column weights for bm25 (text, body, fields). Measured on LoCoMo with
# harness/eval_locomo.py: weights between 0.3 and 3 move recall@5 by under
# 0.01, so the columns count alike.
WEIGHTS = (1.0, 1.0, 1.0)
# Fields never indexed as words: chain and store bookkeeping, and the link
# fields (their numbers would match unrelated queries).
_NOT_WORDS = frozenset(record.RESERVED_FIELDS | {"kind", "scope", "supersedes", "retracts", "redacts", "client_op_id"})
FIELDS_CHARS_MAX = 4096  # caller-field text indexed per record; bounds one record's index cost
K_MAX = 1000  # results one search may return; more is a listing, not a search
BATCH_ROWS = 2000  # rows per executemany during rebuild and catch-up
# bm25 costs ~8 us per matching row in FTS5, so ranking every row that shares
# one common word with a question is slow at 100k records (a name or "new" in
# thousands of rows). Terms are ranked rarest first while the rows they match
# add up to this; a commoner term still counts in total_matches but does not
# widen the ranking (its bm25 weight is the smallest in the query anyway).
RANK_ROWS_MAX = 2000
# The bm25 top RERANK_N are re-ordered by how many distinct query terms each
# record contains (COVERAGE_WEIGHT per term, added to the bm25 score). bm25
# alone lets one repeated word outrank a record that has three of the
# question's words; on LoCoMo this step adds about 0.025 to recall@5
# (harness/eval_locomo.py --ablation).
RERANK_N = 50
COVERAGE_WEIGHT = 2.0

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL,
    hash TEXT NOT NULL,
    kind TEXT,
    scope TEXT,
    ts TEXT,
    client_op_id TEXT,
    superseded INTEGER NOT NULL DEFAULT 0,
    retracted INTEGER NOT NULL DEFAULT 0,
    redacted INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS records_scope ON records (scope, seq);
CREATE INDEX IF NOT EXISTS records_kind ON records (kind, seq);
CREATE INDEX IF NOT EXISTS records_flagged ON records (seq) WHERE superseded OR retracted OR redacted;
CREATE TABLE IF NOT EXISTS links (
    target INTEGER NOT NULL,
    source INTEGER NOT NULL,
    rel TEXT NOT NULL,
    PRIMARY KEY (target, rel, source)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    text, body, fields, content='', tokenize='{TOKENIZER}'
);
"""

_DROP = """
DROP TABLE IF EXISTS fts;
DROP TABLE IF EXISTS links;
DROP TABLE IF EXISTS records;
DROP TABLE IF EXISTS meta;
"""

_REL_COLUMN = {"supersedes": "superseded", "retracts": "retracted", "redacts": "redacted"}


class IndexError_(RetainedError):
    """The index file cannot be used (not SQLite, locked past the timeout).

    The log is untouched; ``retained rebuild`` (or deleting index.sqlite3)
    recreates the index from it.
    """

    code = "index_unavailable"


def estimate_tokens(rec: dict[str, Any]) -> int:
    """Tokens a result costs against ``max_tokens``: ceil(utf8 bytes of text and body / 4)."""
    n = 0
    text = rec.get("text")
    if isinstance(text, str):
        n += len(text.encode("utf-8", "surrogatepass"))
    body = rec.get("body")
    if isinstance(body, str):
        n += len(body.encode("utf-8", "surrogatepass"))
    elif body is not None:
        n += len(record.canonical(body))
    return math.ceil(n / 4)


def _strings(value: Any, out: list[str], budget: list[int]) -> None:
    if budget[0] <= 0:
        return
    if isinstance(value, str):
        out.append(value)
        budget[0] -= len(value)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out, budget)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out, budget)


def documents(rec: dict[str, Any]) -> tuple[str, str, str]:
    """The (text, body, fields) columns indexed for one record.

    ``fields`` gathers the string values of caller fields (``speaker``,
    ``date``, ``source``, a retraction's ``reason``...), nested ones too, up
    to ``FIELDS_CHARS_MAX`` characters.
    """
    text = rec.get("text")
    body = rec.get("body")
    extra: list[str] = []
    budget = [FIELDS_CHARS_MAX]
    # A parsed canonical line keeps its keys sorted, so this order is stable.
    for key, value in rec.items():
        if key in _NOT_WORDS or key == "text" or key == "body":
            continue
        if type(value) is str:  # the common case, without the recursion
            if budget[0] > 0:
                extra.append(value)
                budget[0] -= len(value)
        else:
            _strings(value, extra, budget)
    if type(body) is str:
        body_text = body
    elif body is None:
        body_text = ""
    else:
        body_words: list[str] = []
        _strings(body, body_words, [FIELDS_CHARS_MAX * 16])
        body_text = " ".join(body_words)
    return (
        query.segment(text) if type(text) is str else "",
        query.segment(body_text) if body_text else "",
        query.segment(" ".join(extra)[:FIELDS_CHARS_MAX]) if extra else "",
    )


def _seqs(value: Any) -> list[int]:
    if type(value) is int and value > 0:
        return [value]
    if isinstance(value, list):
        return [v for v in value if type(v) is int and v > 0]
    return []


def _line_has_hash(raw: bytes, h: str) -> bool:
    # Canonical lines hold `"hash":"<64 hex>"` exactly once at top level; a
    # nested caller field can never be named "hash" at top level, so the
    # check is exact enough to tell a replaced log from the one indexed.
    return raw.endswith(b"\n") and (b'"hash":"' + h.encode("ascii") + b'"') in raw


class Index:
    """The FTS5 index of one log. Safe to delete; rebuilt from the log.

    One SQLite connection per instance, guarded by a lock so threads can
    share it. Other modules (vectors) reach the same database through
    `connection()` and the lexical ranking through `ranked()`.
    """

    def __init__(self, log: Log, path: str | os.PathLike[str] | None = None, *, busy_timeout_s: float = 10.0) -> None:
        self.log = log
        self.path = Path(path) if path is not None else log.directory / INDEX_NAME
        self.busy_timeout_s = busy_timeout_s
        self._db: sqlite3.Connection | None = None
        self._mutex = threading.RLock()
        self.last_catch_up: dict[str, Any] = {}
        self.damaged_set_aside: str | None = None  # name of an unusable index file moved aside

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
                except IndexError_:
                    # Derived and safe to delete: set the unusable file aside
                    # (kept for inspection) and start again from the log.
                    self._set_aside()
                    self._db = self._open()
            return self._db

    def _set_aside(self) -> None:
        n = 0
        while (aside := self.path.with_name(f"{self.path.name}.damaged-{n}")).exists():
            n += 1
        os.replace(self.path, aside)
        for suffix in ("-wal", "-shm"):
            try:
                os.unlink(str(self.path) + suffix)
            except FileNotFoundError:
                pass
        self.damaged_set_aside = aside.name

    @property
    def lock(self) -> threading.RLock:
        return self._mutex

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self.path.exists():
            # Create it 0600 ourselves; SQLite gives -wal and -shm the same mode.
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            os.close(fd)
        db = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            # bm25 reads each matching row's size from FTS5's docsize table:
            # a page cache big enough for the whole index at 100k records
            # (~30 MB) keeps those reads off the OS. Allocated only as used.
            db.execute("PRAGMA cache_size=-65536")
            version = None
            try:
                row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                version = row[0] if row else None
            except sqlite3.OperationalError:
                version = None
            if version != SCHEMA_VERSION:
                db.execute("BEGIN IMMEDIATE")
                try:
                    row = None
                    try:
                        row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                    except sqlite3.OperationalError:
                        pass
                    if not row or row[0] != SCHEMA_VERSION:
                        for stmt in (_DROP + _SCHEMA).split(";"):
                            if stmt.strip():
                                db.execute(stmt)
                        db.executemany(
                            "INSERT INTO meta (key, value) VALUES (?, ?)",
                            [("schema", SCHEMA_VERSION), ("hwm_offset", 0), ("hwm_seq", 0), ("hwm_hash", ""),
                             ("hwm_line_offset", -1), ("hwm_line_length", 0)],
                        )
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
        except sqlite3.DatabaseError as exc:
            db.close()
            raise IndexError_(
                f"index {self.path} cannot be opened ({exc}); delete it or run `retained rebuild`; the log is untouched",
                path=str(self.path),
            ) from exc
        return db

    def close(self) -> None:
        with self._mutex:
            if self._db is not None:
                self._db.close()
                self._db = None

    # -- high-water mark ------------------------------------------------------

    def _mark(self, db: sqlite3.Connection) -> dict[str, Any]:
        return dict(db.execute("SELECT key, value FROM meta").fetchall())

    def _mark_state(self, mark: dict[str, Any], size: int) -> str:
        """``ok``, ``behind`` (the log grew) or ``replaced``."""
        hwm = int(mark["hwm_offset"])
        if hwm > size:
            return "replaced"
        line_offset = int(mark["hwm_line_offset"])
        if line_offset >= 0:
            raw = self.log.read_at(line_offset, int(mark["hwm_line_length"]))
            if not _line_has_hash(raw, str(mark["hwm_hash"])):
                return "replaced"
        return "ok" if hwm == size else "behind"

    def status(self) -> dict[str, Any]:
        """The mark and whether the log moved past it (no catch-up)."""
        with self._mutex:
            db = self.connection()
            mark = self._mark(db)
            size = self.log.size()
            return {
                "state": self._mark_state(mark, size),
                "indexed_to": int(mark["hwm_offset"]),
                "log_bytes": size,
                "seq": int(mark["hwm_seq"]),
                "hash": mark["hwm_hash"],
                "path": str(self.path),
            }

    def catch_up(self, *, on_replaced: str = "rebuild") -> dict[str, Any]:
        """Index whatever the log gained since the mark; returns what happened.

        ``on_replaced`` is ``"rebuild"`` (reads: the answer must reflect the
        log) or ``"report"`` (verify: keep the drift so it can be shown).
        The result's ``state`` is ``ok``, ``rebuilt``, ``replaced`` (reported,
        not rebuilt) or ``stale`` (another process held the index past the
        busy timeout; the answer comes from the index as it was).
        """
        with self._mutex:
            db = self.connection()
            mark = self._mark(db)
            size = self.log.size()
            # Fast path without a write lock: nothing new (the common case).
            if int(mark["hwm_offset"]) == size and self._mark_state(mark, size) == "ok":
                self.last_catch_up = {"state": "ok", "indexed": 0}
                return self.last_catch_up
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                # Another process holds the index for longer than the busy
                # timeout (a rebuild of a large log). Answer from the index
                # as it is and say so; the next read catches up.
                self.last_catch_up = {"state": "stale", "indexed": 0, "reason": str(exc)}
                return self.last_catch_up
            try:
                mark = self._mark(db)  # another process may have moved it meanwhile
                size = self.log.size()
                state = self._mark_state(mark, size)
                if state == "replaced":
                    db.execute("ROLLBACK")
                    if on_replaced == "rebuild":
                        result = self.rebuild()
                        self.last_catch_up = {"state": "rebuilt", "indexed": result["records"], "reason": "log replaced"}
                    else:
                        self.last_catch_up = {"state": "replaced", "indexed": 0}
                    return self.last_catch_up
                n = self._ingest(db, int(mark["hwm_offset"]), size, None)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            self.last_catch_up = {"state": "ok", "indexed": n}
            return self.last_catch_up

    def _ingest(
        self, db: sqlite3.Connection, start: int, stop: int, progress: Callable[[int, int], None] | None
    ) -> int:
        """Index the lines in [start, stop); the caller holds the write transaction."""
        rows: list[tuple[Any, ...]] = []
        docs: list[tuple[Any, ...]] = []
        links: list[tuple[int, int, str]] = []
        last: Line | None = None
        end = start
        count = 0
        # A seq above the index's highest, seen once in this run, cannot
        # collide: those rows take the bulk path. Anything else (a seq seen
        # twice in a tampered log) goes row by row with OR IGNORE.
        top = db.execute("SELECT coalesce(max(seq), 0) FROM records").fetchone()[0]
        seen = bytearray()
        dupes: list[tuple[Any, ...]] = []
        for line in self.log.scan(start=start, stop=stop):
            if line.status == record.TORN:
                break  # an append in progress, or a tail the next writer sets aside
            end = line.end
            if not line.chained:
                continue  # foreign and damaged lines are verify's to report
            assert line.seq is not None and line.hash is not None
            last = line
            rec = line.record
            redacted = 1 if line.status == record.REDACTED else 0
            seq = line.seq
            fresh = seq > top
            if fresh:
                i = seq - top
                if i >> 3 >= len(seen):
                    seen.extend(bytes((i >> 3) + 1024 - len(seen)))
                fresh = not seen[i >> 3] & (1 << (i & 7))
                seen[i >> 3] |= 1 << (i & 7)
            kind, scope, ts, op = (rec.get(k) for k in ("kind", "scope", "ts", "client_op_id"))
            (rows if fresh else dupes).append((
                seq, line.offset, line.length, line.hash,
                kind if type(kind) is str else None,
                scope if type(scope) is str else None,
                ts if type(ts) is str else None,
                op if type(op) is str else None,
                redacted,
            ))
            if not redacted:
                docs.append((seq, line.offset, fresh, *documents(rec)))
                if "supersedes" in rec or "retracts" in rec or "redacts" in rec:
                    for rel in ("supersedes", "retracts", "redacts"):
                        for target in _seqs(rec.get(rel)):
                            if target < seq:
                                links.append((target, seq, rel))
            count += 1
            if len(rows) + len(dupes) >= BATCH_ROWS:
                self._flush(db, rows, docs, links, dupes)
                if progress is not None:
                    progress(end, stop)
        self._flush(db, rows, docs, links, dupes)
        updates: list[tuple[str, Any]] = [("hwm_offset", end)]
        if last is not None:
            updates += [("hwm_seq", last.seq), ("hwm_hash", last.hash),
                        ("hwm_line_offset", last.offset), ("hwm_line_length", last.length)]
        db.executemany("UPDATE meta SET value = ? WHERE key = ?", [(v, k) for k, v in updates])
        if progress is not None:
            progress(end, stop)
        return count

    def _flush(self, db: sqlite3.Connection, rows: list[tuple[Any, ...]], docs: list[tuple[Any, ...]],
               links: list[tuple[int, int, str]], dupes: list[tuple[Any, ...]]) -> None:
        insert = (
            "INSERT OR IGNORE INTO records (seq, offset, length, hash, kind, scope, ts, client_op_id, redacted)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        db.executemany(insert, rows)
        kept = set()
        for row in dupes:
            # A seq the index may already hold: keep the first line that
            # claimed it and index its words once; verify reports the rest.
            if db.execute(insert, row).rowcount == 1:
                kept.add((row[0], row[1]))
        if dupes:
            seqs = {r[0] for r in dupes} - {s for s, _ in kept}
            links[:] = [x for x in links if x[1] not in seqs]
        db.executemany(
            "INSERT INTO fts (rowid, text, body, fields) VALUES (?, ?, ?, ?)",
            [(d[0], *d[3:]) for d in docs if d[2] or (d[0], d[1]) in kept],
        )
        if links:
            db.executemany("INSERT OR IGNORE INTO links (target, source, rel) VALUES (?, ?, ?)", links)
            for rel, column in _REL_COLUMN.items():
                targets = [(t,) for t, _, r in links if r == rel]
                if targets:
                    db.executemany(f"UPDATE records SET {column} = 1 WHERE seq = ?", targets)
            self._drop_redacted_words(db, [t for t, _, r in links if r == "redacts"])
        rows.clear()
        docs.clear()
        links.clear()
        dupes.clear()

    def _drop_redacted_words(self, db: sqlite3.Connection, targets: list[int]) -> None:
        """Remove a redacted record's words from FTS5 while its line still holds them.

        A contentless table deletes a row only given the values it indexed,
        so they are read back from the log; if the line was already rewritten
        the log was replaced and the next read rebuilds without them.
        """
        for seq in targets:
            row = db.execute("SELECT offset, length, hash FROM records WHERE seq = ?", (seq,)).fetchone()
            if row is None:
                continue
            line = self.log.line_at(row[0], row[1])
            if line.status == record.RECORD and line.hash == row[2]:
                db.execute(
                    "INSERT INTO fts (fts, rowid, text, body, fields) VALUES ('delete', ?, ?, ?, ?)",
                    (seq, *documents(line.record)),
                )

    # -- rebuild --------------------------------------------------------------

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Drop every table and index the whole log again, in one transaction.

        ``progress(done_bytes, total_bytes)`` is called every `BATCH_ROWS`
        records. Returns ``{"records", "bytes"}``.
        """
        with self._mutex:
            db = self.connection()
            db.execute("BEGIN IMMEDIATE")
            try:
                for stmt in (_DROP + _SCHEMA).split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [("schema", SCHEMA_VERSION), ("hwm_offset", 0), ("hwm_seq", 0), ("hwm_hash", ""),
                     ("hwm_line_offset", -1), ("hwm_line_length", 0)],
                )
                size = self.log.size()
                n = self._ingest(db, 0, size, progress)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            return {"records": n, "bytes": size}

    # -- lookups --------------------------------------------------------------

    def lookup(self, seq: int) -> tuple[int, int, str] | None:
        """``(offset, length, hash)`` of a record, or None if the index has no such seq."""
        self.catch_up()
        with self._mutex:
            row = self.connection().execute("SELECT offset, length, hash FROM records WHERE seq = ?", (seq,)).fetchone()
            return (row[0], row[1], row[2]) if row else None

    def links(self, seq: int) -> dict[str, list[int]]:
        """``superseded_by`` / ``retracted_by`` / ``redacted_by``: the records naming ``seq``."""
        with self._mutex:
            out: dict[str, list[int]] = {}
            names = {"supersedes": "superseded_by", "retracts": "retracted_by", "redacts": "redacted_by"}
            for source, rel in self.connection().execute(
                "SELECT source, rel FROM links WHERE target = ? ORDER BY source", (seq,)
            ):
                out.setdefault(names[rel], []).append(source)
            return out

    def read(self, seq: int) -> dict[str, Any] | None:
        """The record read from the log at its indexed place, checked against its hash.

        None when the index has no such seq or the line there no longer holds it.
        """
        found = self.lookup(seq)
        if found is None:
            return None
        return self._read_checked(seq, *found)

    def _read_checked(self, seq: int, offset: int, length: int, h: str) -> dict[str, Any] | None:
        line = self.log.line_at(offset, length)
        if not line.chained or line.seq != seq or line.hash != h:
            return None
        return {"seq": seq, "offset": offset, "length": length, "record": line.record}

    def recent(
        self, limit: int = 20, *, kind: str | None = None, scope: str | None = None, before_seq: int | None = None
    ) -> dict[str, Any]:
        """Newest records first (for ``list``), with the I2 count of what matched."""
        if type(limit) is not int or limit < 0:
            raise InvalidRecord("field limit: must be a whole number from 0", path="limit")
        self.catch_up()
        where = ["redacted = 0"]
        args: list[Any] = []
        if kind is not None:
            where.append("kind = ?")
            args.append(kind)
        if scope is not None:
            where.append("scope = ?")
            args.append(scope)
        if before_seq is not None:
            where.append("seq < ?")
            args.append(before_seq)
        cond = " AND ".join(where)
        with self._mutex:
            db = self.connection()
            total = db.execute(f"SELECT count(*) FROM records WHERE {cond}", args).fetchone()[0]
            rows = db.execute(
                f"SELECT seq, offset, length, hash FROM records WHERE {cond} ORDER BY seq DESC LIMIT ?", [*args, limit]
            ).fetchall()
        out = []
        for seq, offset, length, h in rows:
            entry = self._read_checked(seq, offset, length, h)
            if entry is not None:
                out.append(entry)
        return {"records": out, "returned": len(out), "total_matches": total,
                "left_out": {"beyond_limit": total - len(rows), "unreadable": len(rows) - len(out)}}

    # -- search ---------------------------------------------------------------

    def _filters(self, scope: str | None, include_superseded: bool, include_retracted: bool) -> tuple[str, list[Any]]:
        where = ["m.redacted = 0"]
        args: list[Any] = []
        if scope is not None:
            where.append("m.scope = ?")
            args.append(scope)
        if not include_superseded:
            where.append("m.superseded = 0")
        if not include_retracted:
            where.append("m.retracted = 0")
        return " AND ".join(where), args

    def _ranked_rows(
        self, expr: str, limit: int, scope: str | None, include_superseded: bool, include_retracted: bool
    ) -> list[tuple[int, float, int, int, str]]:
        w = ", ".join(str(x) for x in WEIGHTS)
        db = self.connection()
        if scope is None:
            # Rank in FTS5 alone and drop hidden rows afterwards: asking for
            # as many extra rows as there are flagged matches guarantees
            # `limit` visible ones, and flagged records are few.
            extra = db.execute(
                "SELECT count(*) FROM records AS m INDEXED BY records_flagged CROSS JOIN fts ON fts.rowid = m.seq"
                " WHERE (m.superseded OR m.retracted OR m.redacted) AND fts MATCH ?",
                (expr,),
            ).fetchone()[0]
            out = []
            ranked = db.execute(
                f"SELECT rowid, bm25(fts, {w}) AS score FROM fts WHERE fts MATCH ? ORDER BY score, rowid DESC LIMIT ?",
                (expr, limit + extra),
            ).fetchall()
            meta = {r[0]: r[1:] for r in db.execute(
                "SELECT seq, offset, length, hash, superseded, retracted, redacted FROM records"
                f" WHERE seq IN ({','.join(str(seq) for seq, _ in ranked)})"
            )} if ranked else {}
            for seq, score in ranked:
                m = meta.get(seq)
                if m is None or m[5] or (m[3] and not include_superseded) or (m[4] and not include_retracted):
                    continue
                out.append((seq, score, m[0], m[1], m[2]))
                if len(out) == limit:
                    break
            return out
        cond, args = self._filters(scope, include_superseded, include_retracted)
        # The subquery with CROSS JOIN keeps SQLite from driving the join from
        # `records` and scanning the whole FTS5 table per row (DESIGN: a plain
        # JOIN took ~400 ms at 100k rows, this form ~0.2 ms).
        sql = (
            f"SELECT f.rowid, f.score, m.offset, m.length, m.hash FROM"
            f" (SELECT rowid, bm25(fts, {w}) AS score FROM fts WHERE fts MATCH ?) AS f"
            f" CROSS JOIN records AS m ON m.seq = f.rowid WHERE {cond} ORDER BY f.score, f.rowid DESC LIMIT ?"
        )
        return db.execute(sql, [expr, *args, limit]).fetchall()

    def ranked(
        self,
        text: str,
        *,
        limit: int = 100,
        scope: str | None = None,
        include_superseded: bool = False,
        include_retracted: bool = False,
    ) -> list[tuple[int, float]]:
        """The lexical ranking: ``[(seq, score)]``, best first (higher score is better).

        The hook for hybrid search, to fuse with a vector ranking. Does not
        catch up; call `catch_up` first.
        """
        expr = query.build(text)
        if expr is None or limit <= 0:
            return []
        with self._mutex:
            rows = self._top(text, expr, limit, scope, include_superseded, include_retracted)
        return [(r[0], -r[1]) for r in rows]

    def _rank_terms(self, text: str) -> tuple[list[str], list[str]]:
        """``(kept, matching)``: the rarest terms whose matches add up to `RANK_ROWS_MAX`, and all that match.

        Each term's match count is taken with a LIMIT, so a common term costs
        at most `RANK_ROWS_MAX` rows to recognise. The rarest term is always kept.
        """
        found = query.terms(text)
        if len(found) <= 1:
            return found, found
        db = self.connection()

        def capped(term: str, cap: int) -> int:
            return db.execute(
                "SELECT count(*) FROM (SELECT rowid FROM fts WHERE fts MATCH ? LIMIT ?)", (term, cap)
            ).fetchone()[0]

        # A first pass with a quarter of the budget tells rare terms from
        # common ones cheaply; a term at that cap is counted further only if
        # what is left of the budget could still take it.
        first_cap = RANK_ROWS_MAX // 4 + 1
        sized = sorted((n, term) for term in found if (n := capped(term, first_cap)))
        if not sized:
            return [], []
        kept = [sized[0][1]]
        rows = sized[0][0] if sized[0][0] < first_cap else capped(sized[0][1], RANK_ROWS_MAX + 1)
        for n, term in sized[1:]:
            if n >= first_cap:
                left = RANK_ROWS_MAX - rows
                if left < first_cap:
                    break
                n = capped(term, left + 1)
            if rows + n > RANK_ROWS_MAX:
                break
            kept.append(term)
            rows += n
        return kept, [term for _, term in sized]

    def _top(
        self, text: str, expr: str, limit: int, scope: str | None, include_superseded: bool, include_retracted: bool
    ) -> list[tuple[int, float, int, int, str]]:
        """The best `limit` visible rows: bm25 over the rows with a rare term, then re-ordered by coverage.

        Scores are lower-is-better, like bm25: ``bm25 - COVERAGE_WEIGHT *
        distinct terms matched``.
        """
        terms, matching = self._rank_terms(text)
        if len(terms) < len(matching):
            # Common terms were left out of the candidate set: rank the rows
            # that have a rare term, by bm25 over every term (the rare ones
            # count twice). At 100k records (harness/bench_search.py data)
            # this lifted recall@10 from 0.42 to 0.52 for ~1 ms at p50.
            rank_expr = "(" + " OR ".join(terms) + ") AND (" + " OR ".join(matching) + ")"
        else:
            rank_expr = " OR ".join(terms) if terms else expr
        rows = self._ranked_rows(rank_expr, max(limit, RERANK_N), scope, include_superseded, include_retracted)
        if len(terms) < 2 or len(rows) < 2:
            return rows[:limit]
        db = self.connection()
        ids = {r[0] for r in rows}
        lo, hi = min(ids), max(ids)
        cover: dict[int, int] = {}
        for term in terms:
            # A rowid range, not `rowid IN (...)`: FTS5 re-runs the whole
            # MATCH for each IN value (measured 6x slower). The terms here
            # were kept because they match few rows, so the range is cheap.
            for (rowid,) in db.execute(
                "SELECT rowid FROM fts WHERE fts MATCH ? AND rowid BETWEEN ? AND ?", (term, lo, hi)
            ):
                if rowid in ids:
                    cover[rowid] = cover.get(rowid, 0) + 1
        scored = [(r[0], r[1] - COVERAGE_WEIGHT * cover.get(r[0], 0), *r[2:]) for r in rows]
        scored.sort(key=lambda r: (r[1], -r[0]))
        return scored[:limit]

    def _count(self, expr: str, scope: str | None) -> tuple[int, int, int, int]:
        """(matches, superseded only, retracted only, both) among unredacted records.

        Redacted records are not matches: their words are gone from the log.
        Counting joins only the flags, never ranks: 6-50x cheaper than bm25.
        """
        db = self.connection()
        if scope is None:
            # Count in FTS5 alone (~0.3 us a row) and look only at the few
            # flagged records, instead of joining every match to `records`.
            total = db.execute("SELECT count(*) FROM fts WHERE fts MATCH ?", (expr,)).fetchone()[0]
            red, sup, ret, both = db.execute(
                "SELECT coalesce(sum(m.redacted), 0),"
                " coalesce(sum(NOT m.redacted AND m.superseded AND NOT m.retracted), 0),"
                " coalesce(sum(NOT m.redacted AND m.retracted AND NOT m.superseded), 0),"
                " coalesce(sum(NOT m.redacted AND m.superseded AND m.retracted), 0)"
                " FROM records AS m INDEXED BY records_flagged CROSS JOIN fts ON fts.rowid = m.seq"
                " WHERE (m.superseded OR m.retracted OR m.redacted) AND fts MATCH ?",
                (expr,),
            ).fetchone()
            return int(total) - int(red), int(sup), int(ret), int(both)
        cond, args = self._filters(scope, True, True)
        sql = (
            "SELECT count(*), coalesce(sum(m.superseded AND NOT m.retracted), 0),"
            " coalesce(sum(m.retracted AND NOT m.superseded), 0), coalesce(sum(m.superseded AND m.retracted), 0)"
            " FROM (SELECT rowid FROM fts WHERE fts MATCH ?) AS f CROSS JOIN records AS m ON m.seq = f.rowid"
            f" WHERE {cond}"
        )
        row = db.execute(sql, [expr, *args]).fetchone()
        return int(row[0]), int(row[1]), int(row[2]), int(row[3])

    def search(
        self,
        text: str,
        *,
        k: int = 10,
        max_tokens: int | None = None,
        scope: str | None = None,
        include_superseded: bool = False,
        include_retracted: bool = False,
    ) -> dict[str, Any]:
        """Ranked records for ``text`` with the I2 accounting.

        Returns ``{"query", "results", "total_matches", "returned",
        "left_out", "tokens", "index"}`` where ``returned +
        sum(left_out.values()) == total_matches`` always. ``left_out`` says
        why each of the rest is missing: ``beyond_k`` (ranked below k),
        ``over_budget`` (in the top k but past ``max_tokens``: results are a
        prefix of the ranking, so the first that does not fit ends the list),
        ``superseded`` and ``retracted`` (hidden unless asked for; a record
        that is both counts as retracted), ``unreadable`` (the log no longer
        holds the indexed line; verify explains, rebuild clears). Each result
        is ``{"seq", "offset", "length", "record", "score", "tokens"}``, the
        record read from the log and checked against the indexed hash.

        Raises:
            InvalidRecord: the query is not a string, or k / max_tokens is out of range.
        """
        _check_search_args(text, k, max_tokens)
        caught = self.catch_up()
        expr = query.build(text)
        total = sup_only = ret_only = both = 0
        top: list[tuple[int, float, int, int, str]] = []
        if expr is not None:
            with self._mutex:
                db = self.connection()
                db.execute("BEGIN")  # one snapshot for the count and the ranking
                try:
                    total, sup_only, ret_only, both = self._count(expr, scope)
                    hidden_sup = 0 if include_superseded else sup_only + (both if include_retracted else 0)
                    hidden_ret = 0 if include_retracted else ret_only + both
                    visible = total - hidden_sup - hidden_ret
                    if visible > 0 and k > 0:
                        top = self._top(text, expr, min(k, visible), scope, include_superseded, include_retracted)
                finally:
                    db.execute("COMMIT")
        hidden_sup = 0 if include_superseded else sup_only + (both if include_retracted else 0)
        hidden_ret = 0 if include_retracted else ret_only + both
        visible = total - hidden_sup - hidden_ret
        results: list[dict[str, Any]] = []
        used = over_budget = unreadable = 0
        for seq, score, offset, length, h in top:
            if over_budget:
                over_budget += 1
                continue
            entry = self._read_checked(seq, offset, length, h)
            if entry is None:
                unreadable += 1
                continue
            cost = estimate_tokens(entry["record"])
            if max_tokens is not None and used + cost > max_tokens:
                over_budget += 1
                continue
            used += cost
            entry["score"] = -score  # lower-is-better inside; report higher-is-better
            entry["tokens"] = cost
            entry.update(self.links(seq))
            results.append(entry)
        left_out = {
            "beyond_k": visible - len(top),
            "over_budget": over_budget,
            "superseded": hidden_sup,
            "retracted": hidden_ret,
            "unreadable": unreadable,
        }
        assert len(results) + sum(left_out.values()) == total
        return {
            "query": expr or "",
            "results": results,
            "total_matches": total,
            "returned": len(results),
            "left_out": left_out,
            "tokens": used,
            "index": caught,
        }

    @staticmethod
    def empty_reply(text: str, *, k: int = 10, max_tokens: int | None = None) -> dict[str, Any]:
        """The reply for a store with no log yet: nothing matched, nothing left out."""
        _check_search_args(text, k, max_tokens)
        return {
            "query": query.build(text) or "",
            "results": [],
            "total_matches": 0,
            "returned": 0,
            "left_out": {"beyond_k": 0, "over_budget": 0, "superseded": 0, "retracted": 0, "unreadable": 0},
            "tokens": 0,
            "index": {"state": "absent", "indexed": 0},
        }

    # -- verify ---------------------------------------------------------------

    def verify(self, lines: Iterable[tuple[Any, ...]] | None = None) -> list[dict[str, Any]]:
        """Compare the index with the log in both directions; every finding, none if clean.

        ``lines``, if given, are the log's complete lines in file order as the
        chain walk passes them (``chain.verify_file``'s ``check``), so the log
        is read once for both checks: ``(offset, length, seq, hash)`` for a
        record the walk verified, ``(offset, raw)`` for any other line. None
        reads the log here.

        Findings are dicts with ``kind``, ``seq``, ``offset``, ``expected``,
        ``observed`` and ``message``. Kinds: ``index_log_replaced`` (the mark
        no longer matches the log), ``index_missing`` (a log record the index
        lacks), ``index_ghost`` (an index row no log record matches),
        ``index_offset_mismatch``, ``index_hash_mismatch``,
        ``index_words_missing`` / ``index_words_ghost`` (records and FTS5 rows
        disagree), ``index_integrity`` (FTS5's own check). Memory: one bit
        per seq.
        """
        findings: list[dict[str, Any]] = []
        caught = self.catch_up(on_replaced="report")
        with self._mutex:
            db = self.connection()
            mark = self._mark(db)
            size = self.log.size()
            if caught["state"] == "replaced":
                findings.append(_finding(
                    "index_log_replaced", int(mark["hwm_seq"]) or None, int(mark["hwm_line_offset"]),
                    mark["hwm_hash"], "other bytes" if int(mark["hwm_offset"]) <= size else f"log of {size} bytes",
                    f"the index was built from another log: it read to byte {mark['hwm_offset']} (seq "
                    f"{mark['hwm_seq']}, hash {str(mark['hwm_hash'])[:12]}...) but the log {self.log.path.name} "
                    f"is {size} bytes and no longer holds that line there; run `retained rebuild`",
                ))
            hwm = int(mark["hwm_offset"])
            seen = bytearray((int(mark["hwm_seq"]) >> 3) + 1)
            batch: list[tuple[Any, ...]] = []
            ranges: list[tuple[int, int]] = []
            stop = min(hwm, size)
            for item in self._raw_lines(stop) if lines is None else _lines_before(lines, stop):
                batch.append(item)
                if len(batch) >= BATCH_ROWS:
                    findings.extend(self._verify_batch(db, batch, seen, ranges))
                    batch.clear()
            findings.extend(self._verify_batch(db, batch, seen, ranges))
            # Every seq marked in `seen` is an index row a log line matched;
            # when they are all of the rows there is no ghost to look for.
            indexed = db.execute("SELECT count(*) FROM records").fetchone()[0]
            matched = int.from_bytes(seen, "little").bit_count() + sum(b - a + 1 for a, b in ranges)
            ghosts = db.execute("SELECT seq, offset, hash FROM records ORDER BY seq") if matched != indexed else ()
            ranges.sort()
            starts = [a for a, _ in ranges]
            for seq, offset, h in ghosts:
                if seq >> 3 < len(seen) and seen[seq >> 3] & (1 << (seq & 7)):
                    continue
                i = bisect.bisect_right(starts, seq) - 1
                if i >= 0 and ranges[i][0] <= seq <= ranges[i][1]:
                    continue
                findings.append(_finding(
                    "index_ghost", seq, offset, "absent", h,
                    f"seq {seq} is in the index (byte {offset}, hash {h[:12]}...) but no log line holds it; "
                    f"the log may have been replaced by an older copy; run `retained rebuild`",
                ))
            findings.extend(self._verify_words(db))
            try:
                db.execute("INSERT INTO fts (fts, rank) VALUES ('integrity-check', 0)")
            except sqlite3.DatabaseError as exc:
                findings.append(_finding("index_integrity", None, None, "ok", str(exc),
                                         f"FTS5 integrity check failed: {exc}; run `retained rebuild`"))
        return findings

    def _raw_lines(self, stop: int) -> Iterator[tuple[int, bytes]]:
        """``(offset, bytes)`` of each complete line before ``stop``, memory flat.

        Verify compares places and hashes, which needs no full record check
        per line (the chain walk does that); a line is classified only when
        it disagrees with the index.
        """
        try:
            f = open(self.log.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return
        with f:
            base = 0
            data = b""
            remaining = stop
            while remaining > 0:
                chunk = f.read(min(1 << 20, remaining))
                if not chunk:
                    break
                remaining -= len(chunk)
                data = data + chunk if data else chunk
                i = 0
                while True:
                    nl = data.find(b"\n", i)
                    if nl == -1:
                        break
                    yield base + i, data[i : nl + 1]
                    i = nl + 1
                base += i
                data = data[i:]

    def _verify_batch(
        self, db: sqlite3.Connection, batch: list[tuple[Any, ...]], seen: bytearray, ranges: list[tuple[int, int]]
    ) -> list[dict[str, Any]]:
        """Findings for one batch of lines; matched seqs go to `ranges` (whole runs) or `seen` (bits)."""
        claims = []
        for item in batch:
            if len(item) == 4:
                # (offset, length, seq, hash) of a record the chain walk verified.
                claims.append((item[2], item[3], item[0], item[1]))
                continue
            offset, raw = item
            # In canonical JSON a key is never escaped and a string's quotes
            # are, so `"seq":` and `"hash":"` occur once per line unless a
            # nested object has such keys; only then is the line parsed. A
            # wrong claim can only disagree with the index, and every
            # disagreement is re-checked by classifying the line.
            h = raw.find(b'"hash":"')
            q = raw.find(b'"seq":')
            if h >= 0 and q >= 0 and raw.find(b'"hash":"', h + 8) < 0 and raw.find(b'"seq":', q + 6) < 0:
                end = q + 6
                while 48 <= raw[end] <= 57:
                    end += 1
                if end > q + 6:
                    claims.append((int(raw[q + 6 : end]), raw[h + 8 : h + 72].decode("ascii", "replace"), offset, len(raw)))
                    continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue  # damaged: the chain walk reports it
            if isinstance(obj, dict) and type(obj.get("seq")) is int and isinstance(obj.get("hash"), str):
                claims.append((obj["seq"], obj["hash"], offset, len(raw)))
        if not claims:
            return []
        # The common case: the batch is a run of consecutive seqs that the
        # index holds exactly (place and hash). One range query and one list
        # comparison settle it; anything else is examined line by line.
        lo, hi = claims[0][0], claims[-1][0]
        if hi - lo + 1 == len(claims):
            expected = [(c[0], c[2], c[3], c[1]) for c in claims]
            if db.execute(
                "SELECT seq, offset, length, hash FROM records WHERE seq BETWEEN ? AND ? ORDER BY seq", (lo, hi)
            ).fetchall() == expected:
                ranges.append((lo, hi))
                return []
        rows = {}
        for i in range(0, len(claims), 500):
            part = claims[i : i + 500]
            rows.update((r[0], r[1:]) for r in db.execute(
                f"SELECT seq, offset, length, hash FROM records WHERE seq IN ({','.join('?' * len(part))})",
                [c[0] for c in part],
            ))
        out = []
        for seq, h, offset, length in claims:
            row = rows.get(seq)
            if row is not None and row == (offset, length, h):
                if seq >> 3 >= len(seen):
                    seen.extend(bytes((seq >> 3) + 1 - len(seen)))
                seen[seq >> 3] |= 1 << (seq & 7)
                continue
            line = self.log.line_at(offset, length)
            if not line.chained:
                continue  # foreign or damaged: the chain walk reports it
            if seq >> 3 >= len(seen):
                seen.extend(bytes((seq >> 3) + 1 - len(seen)))
            if row is None:
                out.append(_finding(
                    "index_missing", seq, offset, "indexed", "absent",
                    f"seq {seq} (log byte {offset}) is in the log but not in the index; run `retained rebuild`",
                ))
                continue
            if seen[seq >> 3] & (1 << (seq & 7)):
                continue  # a second line claiming this seq: the chain walk reports it
            seen[seq >> 3] |= 1 << (seq & 7)
            if row[2] != h:
                out.append(_finding(
                    "index_hash_mismatch", seq, offset, h, row[2],
                    f"seq {seq}: the index has hash {row[2][:12]}..., the log line at byte {offset} has "
                    f"{h[:12]}...; run `retained rebuild`",
                ))
            else:
                out.append(_finding(
                    "index_offset_mismatch", seq, offset, f"{offset}+{length}", f"{row[0]}+{row[1]}",
                    f"seq {seq}: the index places it at byte {row[0]} ({row[1]} bytes), the log has it at byte "
                    f"{offset} ({length} bytes); run `retained rebuild`",
                ))
        return out

    def _verify_words(self, db: sqlite3.Connection) -> Iterator[dict[str, Any]]:
        """Records with no FTS5 row, and FTS5 rows with no record (set differences in SQLite)."""
        for (seq,) in db.execute("SELECT seq FROM records WHERE redacted = 0 EXCEPT SELECT rowid FROM fts ORDER BY 1"):
            yield _finding("index_words_missing", seq, None, "searchable", "no FTS5 row",
                           f"seq {seq} is indexed but its words are not searchable; run `retained rebuild`")
        for (seq,) in db.execute("SELECT rowid FROM fts EXCEPT SELECT seq FROM records WHERE redacted = 0 ORDER BY 1"):
            yield _finding("index_words_ghost", seq, None, "no FTS5 row", "FTS5 row",
                           f"FTS5 has words for seq {seq}, which the index does not list; run `retained rebuild`")


def _check_search_args(text: Any, k: Any, max_tokens: Any) -> None:
    if not isinstance(text, str):
        raise InvalidRecord(f"field query: must be a string, got {type(text).__name__}", path="query")
    if type(k) is not int or not 0 <= k <= K_MAX:
        raise InvalidRecord(f"field k: must be a whole number from 0 to {K_MAX}, got {k!r}", path="k")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 0):
        raise InvalidRecord(f"field max_tokens: must be a whole number from 0, got {max_tokens!r}", path="max_tokens")


def _lines_before(lines: Iterable[tuple[Any, ...]], stop: int) -> Iterator[tuple[Any, ...]]:
    """The lines given to ``Index.verify`` that end by ``stop``, as ``_raw_lines(stop)`` reads them."""
    for item in lines:
        if item[0] + (item[1] if len(item) == 4 else len(item[1])) > stop:
            return
        yield item


def _finding(kind: str, seq: int | None, offset: int | None, expected: Any, observed: Any, message: str) -> dict[str, Any]:
    return {"kind": kind, "seq": seq, "offset": offset, "expected": expected, "observed": observed, "message": message}
