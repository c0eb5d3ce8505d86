"""The index's schema and read model: what the index file holds and how to read it.

One definition of each: the file name (`INDEX_NAME`, with SQLite's ``-wal``
and ``-shm`` beside it), the tables (`SCHEMA`, `VECTORS_SCHEMA`) and their
version (`SCHEMA_VERSION`), the high-water mark kept in ``meta`` (`Mark`,
`read_mark`, `mark_state`), the link fields that become the ``links`` table
and the flags of ``records``, the token estimate results are charged with,
and the read-only queries the readers share. ``writer`` writes the tables
(catch-up, rebuild); ``search``, ``verify``, ``hybrid``, the
brief, ``stats`` and the self-test read them through these names.

Standard library only (with ``core.files``): the session-start brief's reader
reads the index through here (see ``brief.reader``).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from retained.core import files

INDEX_NAME = "index.sqlite3"
# SQLite's companions of the file in WAL mode; they belong to the index and go with it.
INDEX_SUFFIXES = ("-wal", "-shm")
INDEX_FILES = (INDEX_NAME, *(INDEX_NAME + s for s in INDEX_SUFFIXES))

SCHEMA_VERSION = "3"
# Versions whose meta, records and links tables read as this module reads
# them (2 changed only the words FTS5 indexes, 3 added the client column that
# only `newest` filters on); a reader that never rebuilds (the brief) may use
# an index of any of them.
READABLE_VERSIONS = frozenset({"1", "2", "3"})
TOKENIZER = "porter unicode61 remove_diacritics 2"
BATCH_ROWS = 2000  # lines per batch in verify
# SQLite's page cache per connection that reads the whole index (search, verify):
# big enough for the whole index at 100k records (~30 MB); allocated only as used.
CACHE_KIB = 64 * 1024
# FTS5 holds a transaction's words in memory up to this many bytes before it
# writes them out as a segment (its default is 1 MiB). A rebuild at 100k
# records then writes one segment instead of dozens that FTS5 merges as it
# goes (BENCHMARKS.md gives what that saves). Only a large transaction (a
# rebuild, a catch-up after an import) ever holds that much; a write's
# catch-up holds a few hundred bytes.
FTS_HASH_BYTES = 16 * 1024 * 1024
IN_ROWS_MAX = 500  # values per `IN (...)` list: well under SQLite's default limit of bound parameters

TABLES = f"""
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
    client TEXT,
    superseded INTEGER NOT NULL DEFAULT 0,
    retracted INTEGER NOT NULL DEFAULT 0,
    redacted INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS links (
    target INTEGER NOT NULL,
    source INTEGER NOT NULL,
    rel TEXT NOT NULL,
    PRIMARY KEY (target, rel, source)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    text, body, fields, content='', tokenize='{TOKENIZER}'
);
INSERT INTO fts (fts, rank) VALUES ('hashsize', {FTS_HASH_BYTES});
"""

# The indexes of ``records``; a rebuild makes them after filling the table
# (one sort each, not one b-tree insert per row each).
RECORDS_INDEXES = """
CREATE INDEX IF NOT EXISTS records_scope ON records (scope, seq);
CREATE INDEX IF NOT EXISTS records_kind ON records (kind, seq);
CREATE INDEX IF NOT EXISTS records_client ON records (client, seq);
CREATE INDEX IF NOT EXISTS records_flagged ON records (seq) WHERE superseded OR retracted OR redacted;
"""
SCHEMA = TABLES + RECORDS_INDEXES

# The columns of ``records`` a line fills (its flags are set by the lines that name it).
ROW_COLUMNS = "seq, offset, length, hash, kind, scope, ts, client_op_id, client, redacted"
# The rows of one range of the log, made where the range is read (a worker
# process, or this one) in a database of their own (in memory) and copied from
# there into the tables above: ``lines`` holds a chained line's ``records`` row
# and its words (``n``: its order in the range), ``line_links`` the links it
# makes (named apart from ``links``, so that no statement can mistake one for
# the other).
BULK_TABLES = f"""
CREATE TABLE {{attached}}lines (n INTEGER PRIMARY KEY, {ROW_COLUMNS}, text, body, fields);
CREATE TABLE {{attached}}line_links (offset INTEGER NOT NULL, target INTEGER NOT NULL, source INTEGER NOT NULL, rel TEXT NOT NULL);
"""


def bulk_statements(attached: str | None = None) -> list[str]:
    """`BULK_TABLES`, one statement each; in the attached database named ``attached`` when given."""
    return statements(BULK_TABLES.format(attached=f"{attached}." if attached else ""))

DROP = """
DROP TABLE IF EXISTS fts;
DROP TABLE IF EXISTS links;
DROP TABLE IF EXISTS records;
DROP TABLE IF EXISTS meta;
"""

# The vectors ``hybrid`` keeps beside the index's own tables (one row per
# record and model); ``DROP`` leaves them alone, so a rebuild keeps them.
VECTORS_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    id INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    dim INTEGER NOT NULL,
    v BLOB NOT NULL,
    UNIQUE (model, seq)
);
CREATE TABLE IF NOT EXISTS vectors_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
"""


def statements(script: str) -> list[str]:
    """The statements of `SCHEMA`, `DROP` or `VECTORS_SCHEMA`, one per ``execute``."""
    return [s for s in script.split(";") if s.strip()]


# -- links and flags ---------------------------------------------------------------

# The record fields that name earlier records; each becomes a ``links`` row
# (its ``rel``) and sets a flag column on the record named.
LINK_FIELDS = ("supersedes", "retracts", "redacts")
FLAG_COLUMNS = {"supersedes": "superseded", "retracts": "retracted", "redacts": "redacted"}
# How a record's links are reported on the record named (``superseded_by``...).
LINKED_BY = {"supersedes": "superseded_by", "retracts": "retracted_by", "redacts": "redacted_by"}
# The store's own kinds: they record a change to other records and are never listed as memories.
BOOKKEEPING_KINDS = frozenset({"retract", "redaction", "quarantine"})
_BOOKKEEPING_SQL = ", ".join(f"'{k}'" for k in sorted(BOOKKEEPING_KINDS))


def client_name(value: Any) -> str | None:
    """The name of the client that wrote a record (its ``client`` field), or None when it has none."""
    name = value.get("name") if isinstance(value, dict) else None
    return name if type(name) is str else None


def link_targets(value: Any) -> list[int]:
    """The seqs a link field names: one positive int or a list of them; anything else names none."""
    if type(value) is int and value > 0:
        return [value]
    if isinstance(value, list):
        return [v for v in value if type(v) is int and v > 0]
    return []


# -- the token estimate --------------------------------------------------------------

TOKEN_BYTES = 4  # UTF-8 bytes per token: on the generous side for English and code


def estimate_tokens(*parts: str | bytes) -> int:
    """The one token estimate: ``ceil(UTF-8 bytes of the parts together / TOKEN_BYTES)``.

    Search charges a result its text and body (``documents.estimate_tokens``),
    the brief a record's rendered block; both count through here.
    """
    n = 0
    for part in parts:
        n += len(part) if isinstance(part, bytes) else len(part.encode("utf-8", "surrogatepass"))
    return (n + TOKEN_BYTES - 1) // TOKEN_BYTES


# -- the high-water mark ---------------------------------------------------------------

# The mark's fields and the ``meta`` keys that hold them, in `Mark`'s order.
_MARK_KEYS = ("hwm_offset", "hwm_seq", "hwm_hash", "hwm_line_offset", "hwm_line_length")
# The rows of ``meta`` in an index that has read nothing yet.
EMPTY_META = (("schema", SCHEMA_VERSION), *zip(_MARK_KEYS, (0, 0, "", -1, 0), strict=True))
INSERT_META = "INSERT INTO meta (key, value) VALUES (?, ?)"
_UPDATE_META = "UPDATE meta SET value = ? WHERE key = ?"


class Mark:
    """The high-water mark in ``meta``: how far the index has read the log.

    ``offset``: the log byte the index has read to. ``seq``, ``hash``,
    ``line_offset``, ``line_length``: the last record it indexed and where
    its line is (``line_offset`` -1 when none yet). ``schema``: the version
    the tables were made for.
    """

    __slots__ = ("hash", "line_length", "line_offset", "offset", "schema", "seq")

    def __init__(self, schema: str | None, offset: int, seq: int, h: str, line_offset: int, line_length: int) -> None:
        self.schema = schema
        self.offset = offset
        self.seq = seq
        self.hash = h
        self.line_offset = line_offset
        self.line_length = line_length


def schema_version(db: sqlite3.Connection) -> Any:
    """The ``schema`` value in ``meta`` as stored, or None when there is no such row or table."""
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.OperationalError:
        return None
    return row[0] if row else None


def read_mark(db: sqlite3.Connection, versions: frozenset[str] | None = None) -> Mark:
    """The mark in ``meta``.

    Raises:
        ValueError: a row is missing or not a number, or the schema is not in
            ``versions`` (when given).
        sqlite3.Error: no ``meta`` table, or the file is not an index.
    """
    meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    schema = None if meta.get("schema") is None else str(meta["schema"])
    if versions is not None and schema not in versions:
        raise ValueError(f"schema {schema!r}, expected one of {sorted(versions)}")
    missing = [k for k in _MARK_KEYS if k not in meta]
    if missing:
        raise ValueError(f"meta has no {', '.join(missing)}; run `retained rebuild`")
    offset, seq, h, line_offset, line_length = (meta[k] for k in _MARK_KEYS)
    try:
        return Mark(schema, int(offset), int(seq), str(h), int(line_offset), int(line_length))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"meta holds a mark that is not a number ({exc}); run `retained rebuild`") from None


def write_mark(db: sqlite3.Connection, offset: int, last: Any = None) -> None:
    """Move the mark to ``offset``; ``last`` (with ``seq``, ``hash``, ``offset``, ``length``) is the newest record indexed.

    For the writer (``index``), inside its write transaction.
    """
    values: list[tuple[Any, str]] = [(offset, "hwm_offset")]
    if last is not None:
        values += [(last.seq, "hwm_seq"), (last.hash, "hwm_hash"), (last.offset, "hwm_line_offset"),
                   (last.length, "hwm_line_length")]
    db.executemany(_UPDATE_META, values)


def line_has_hash(raw: bytes, h: str) -> bool:
    """Whether ``raw`` is a whole line holding the chain hash ``h``.

    Canonical lines hold ``"hash":"<64 hex>"`` exactly once at top level; a
    nested caller field can never be named "hash" at top level, so the check
    is exact enough to tell a replaced log from the one indexed.
    """
    return raw.endswith(b"\n") and (b'"hash":"' + h.encode("ascii", "replace") + b'"') in raw


def mark_state(mark: Mark, size: int, read_at: Callable[[int, int], bytes]) -> str:
    """Where the log of ``size`` bytes stands against the mark.

    ``ok`` (the index has read it all), ``behind`` (the log grew since),
    ``log_shorter`` (the index read past the log's end) or ``log_other`` (the
    line at the mark no longer holds the hash indexed): the last two mean the
    log was replaced (restored from a copy, redacted, truncated by hand).
    ``read_at(offset, length)`` reads the log's bytes.
    """
    if mark.offset > size:
        return "log_shorter"
    if mark.line_offset >= 0 and not line_has_hash(read_at(mark.line_offset, mark.line_length), mark.hash):
        return "log_other"
    return "ok" if mark.offset == size else "behind"


# -- reading ---------------------------------------------------------------------

def refuse_links(path: Path) -> None:
    """Raise LinkRefused if the index at ``path`` or its ``-wal`` or ``-shm`` is a symbolic link.

    SQLite follows links and cannot be told not to (its no-follow flag is not
    reachable from Python's sqlite3), so every connection to the index is
    made through `connect` or `connect_read_only`, which look first. A link
    planted between the look and SQLite's open is a race the platform offers
    no way to close.
    """
    files.refuse_links(path, *(f"{path}{suffix}" for suffix in INDEX_SUFFIXES))


def connect(path: Path, timeout_s: float) -> sqlite3.Connection:
    """A read-write connection to the index at ``path``, in autocommit mode; the file is created 0600 if absent.

    Raises:
        LinkRefused: the index or one of its companions is a symbolic link.
        sqlite3.Error: SQLite cannot open it.
    """
    refuse_links(path)
    if not os.path.lexists(path):
        # Create it 0600 ourselves (never through a link: a dangling one would
        # create its target); SQLite gives -wal and -shm the same mode.
        os.close(files.open_fd(path, os.O_WRONLY | os.O_CREAT))
    return sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)


def connect_read_only(path: Path, timeout_s: float) -> sqlite3.Connection:
    """A read-only connection to the index at ``path`` (SQLite may still create ``-wal`` and ``-shm``).

    In autocommit mode: ``BEGIN`` makes one snapshot of several reads. Raises as `connect`.
    """
    refuse_links(path)
    return sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=timeout_s,
                           isolation_level=None, check_same_thread=False)


class transaction:  # lower case: used as a function, `with transaction(db):`
    """``with transaction(db):`` one transaction: BEGIN on entry, COMMIT when the block ends, ROLLBACK if it raises.

    ``immediate`` takes the write lock at once (``BEGIN IMMEDIATE``), so the
    reads that decide a write see what it writes over. A read transaction
    makes one snapshot of several reads. ``begun`` says whether BEGIN itself
    succeeded (a caller may answer from the index as it is when another
    process holds it past the busy timeout).
    """

    __slots__ = ("begun", "db", "mode")

    def __init__(self, db: sqlite3.Connection, *, immediate: bool = False) -> None:
        self.db, self.mode, self.begun = db, "BEGIN IMMEDIATE" if immediate else "BEGIN", False

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute(self.mode)
        self.begun = True
        return self.db

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is None:
            self.db.execute("COMMIT")
        elif self.db.in_transaction:
            self.db.execute("ROLLBACK")


def place(db: sqlite3.Connection, seq: int) -> tuple[int, int, str] | None:
    """``(offset, length, hash)`` of the line indexed for ``seq``, or None."""
    row = db.execute("SELECT offset, length, hash FROM records WHERE seq = ?", (seq,)).fetchone()
    return (row[0], row[1], row[2]) if row else None


def _rows_in(db: sqlite3.Connection, sql: str, seqs: Sequence[int]) -> Iterator[Any]:
    """The rows of ``sql`` for ``seqs``, its ``{}`` an ``IN (...)`` list: one query per `IN_ROWS_MAX` seqs."""
    for i in range(0, len(seqs), IN_ROWS_MAX):
        part = seqs[i : i + IN_ROWS_MAX]
        yield from db.execute(sql.format(",".join("?" * len(part))), part)


def places(db: sqlite3.Connection, seqs: Sequence[int]) -> dict[int, tuple[int, int, str]]:
    """``{seq: (offset, length, hash)}`` for those of ``seqs`` the index holds."""
    return {r[0]: r[1:] for r in _rows_in(db, "SELECT seq, offset, length, hash FROM records WHERE seq IN ({})", seqs)}


def places_between(db: sqlite3.Connection, lo: int, hi: int) -> list[tuple[int, int, int, str]]:
    """``(seq, offset, length, hash)`` of the records with a seq from ``lo`` to ``hi``, in seq order."""
    return db.execute(
        "SELECT seq, offset, length, hash FROM records WHERE seq BETWEEN ? AND ? ORDER BY seq", (lo, hi)
    ).fetchall()


def row_count(db: sqlite3.Connection) -> int:
    """Rows in ``records``, redacted ones included."""
    return int(db.execute("SELECT count(*) FROM records").fetchone()[0])


def rows_beyond(db: sqlite3.Connection, head_seq: int, size: int) -> int:
    """Rows with a seq above ``head_seq`` whose line does not end within the log's first ``size`` bytes.

    Verify's snapshot: the lines of such rows were appended after it fixed
    the log's size and head (a walk by seq from ``head_seq``, not a scan).
    """
    return int(db.execute(
        "SELECT count(*) FROM records WHERE seq > ? AND offset + length > ?", (head_seq, size)
    ).fetchone()[0])


def places_within(db: sqlite3.Connection, size: int | None) -> Iterator[tuple[int, int, str]]:
    """``(seq, offset, hash)`` of every row in seq order; with ``size``, only rows whose line ends by it."""
    within, args = ("", ()) if size is None else (" WHERE offset + length <= ?", (size,))
    return iter(db.execute(f"SELECT seq, offset, hash FROM records{within} ORDER BY seq", args))


def links_of(db: sqlite3.Connection, seqs: Sequence[int]) -> dict[int, dict[str, list[int]]]:
    """``superseded_by`` / ``retracted_by`` / ``redacted_by`` of each of ``seqs``: the records naming it, oldest first.

    One query per `IN_ROWS_MAX` seqs; a seq nothing names is absent.
    """
    out: dict[int, dict[str, list[int]]] = {}
    sql = "SELECT target, source, rel FROM links WHERE target IN ({}) ORDER BY source"
    for target, source, rel in _rows_in(db, sql, seqs):
        out.setdefault(target, {}).setdefault(LINKED_BY[rel], []).append(source)
    return out


def scope_admits(scope: str | None, found: Any, and_unscoped: bool = False) -> bool:
    """Whether a record whose scope is ``found`` passes the filter ``scope`` (None: every scope), with those that have
    none when ``and_unscoped`` (see `Filter`)."""
    return scope is None or found == scope or (found is None and and_unscoped)


def scope_condition(and_unscoped: bool, column: str = "scope") -> str:
    """The SQL condition on ``column`` for a scope filter (one ``?`` for its value), ``and_unscoped`` as in `Filter`."""
    return f"({column} = ? OR {column} IS NULL)" if and_unscoped else f"{column} = ?"


def scope_reply(scope: str | None, and_unscoped: bool) -> dict[str, Any]:
    """How a reply says which scope it read: ``{"scope", "and_unscoped"}`` (scope None: every scope)."""
    return {"scope": scope, "and_unscoped": scope is not None and and_unscoped}


class Filter:
    """Which records a read admits: the one filter of list, count, search and context.

    Always unredacted records, and any of these: ``below`` / ``above``: seq
    bounds (exclusive). ``kind``: equal to one; ``kinds_not``: not in these
    (a record with no kind never matches). ``scope``, and with
    ``and_unscoped`` also the records that have none: the default read of a
    project (issue 26; ``capture.scope.read_scope``). ``client``: the
    writer's name. ``ts_from`` / ``ts_before``: the record's ts from one
    (inclusive) and before the other (exclusive), compared as text (RFC 3339
    times in UTC sort as text). ``include_superseded`` / ``include_retracted``
    (both true unless given; ``current`` makes both false): records a later
    one supersedes or retracts.
    """

    __slots__ = ("above", "and_unscoped", "below", "client", "include_retracted", "include_superseded", "kind",
                 "kinds_not", "no_scope", "scope", "ts_before", "ts_from")

    def __init__(self, *, below: int | None = None, above: int | None = None, kind: str | None = None,
                 kinds_not: Sequence[str] = (), scope: str | None = None, and_unscoped: bool = False,
                 client: str | None = None, ts_from: str | None = None, ts_before: str | None = None,
                 current: bool = False, include_superseded: bool = True, include_retracted: bool = True) -> None:
        self.below, self.above, self.kind, self.kinds_not = below, above, kind, tuple(kinds_not)
        self.scope, self.and_unscoped = scope, and_unscoped and scope is not None
        self.client, self.ts_from, self.ts_before = client, ts_from, ts_before
        self.include_superseded = include_superseded and not current
        self.include_retracted = include_retracted and not current
        self.no_scope = False  # only records with no scope: one of `halves`

    def _copy(self) -> Filter:
        other = Filter.__new__(Filter)
        for name in Filter.__slots__:
            setattr(other, name, getattr(self, name))
        return other

    def halves(self) -> list[Filter]:
        """This filter as disjoint filters each SQLite walks in seq order on one index: with ``and_unscoped``, the
        records of the scope and those with no scope (an OR of the two would sort every match); else itself."""
        if not self.and_unscoped:
            return [self]
        scoped, unscoped = self._copy(), self._copy()
        scoped.and_unscoped = unscoped.and_unscoped = False
        unscoped.scope, unscoped.no_scope = None, True
        return [scoped, unscoped]

    def admits(self, seq: int, rec: dict[str, Any]) -> bool:
        """Whether a record read from the log passes the filters `where` puts in SQL (for a reader without
        an index). The superseded and retracted flags are not judged here: only the index keeps them."""
        kind, ts = rec.get("kind"), rec.get("ts")
        if self.kind is not None and kind != self.kind:
            return False
        if self.kinds_not and (type(kind) is not str or kind in self.kinds_not):
            return False
        if not scope_admits(self.scope, rec.get("scope"), self.and_unscoped) or (self.no_scope and rec.get("scope") is not None):
            return False
        if self.client is not None and client_name(rec.get("client")) != self.client:
            return False
        if (self.below is not None and seq >= self.below) or (self.above is not None and seq <= self.above):
            return False
        if self.ts_from is not None and not (type(ts) is str and ts >= self.ts_from):
            return False
        return self.ts_before is None or (type(ts) is str and ts < self.ts_before)

    def where(self, table: str = "") -> tuple[str, list[Any]]:
        """The SQL condition over ``records`` (``table``: its alias with a dot, e.g. ``"m."``) and its arguments."""
        where = [f"{table}redacted = 0"]
        args: list[Any] = []
        if not self.include_superseded:
            where.append(f"{table}superseded = 0")
        if not self.include_retracted:
            where.append(f"{table}retracted = 0")
        if self.kinds_not:
            where.append(f"{table}kind NOT IN ({', '.join('?' * len(self.kinds_not))})")
            args.extend(self.kinds_not)
        if self.scope is not None:
            where.append(scope_condition(self.and_unscoped, table + "scope"))
            args.append(self.scope)
        if self.no_scope:
            where.append(f"{table}scope IS NULL")
        for condition, value in (("kind = ?", self.kind), ("client = ?", self.client),
                                 ("seq < ?", self.below), ("seq > ?", self.above), ("ts >= ?", self.ts_from),
                                 ("ts < ?", self.ts_before)):
            if value is not None:
                where.append(table + condition)
                args.append(value)
        return " AND ".join(where), args

    def hides(self, superseded: int, retracted: int, redacted: int) -> bool:
        """Whether a row with these flags is left out (the flags' part of `where`, for rows already read)."""
        return bool(redacted or (superseded and not self.include_superseded)
                    or (retracted and not self.include_retracted))


def count_listed(db: sqlite3.Connection, listed: Filter) -> int:
    """How many records `newest` would list with no limit (same filter)."""
    total = 0
    for half in listed.halves():
        cond, args = half.where()
        total += int(db.execute(f"SELECT count(*) FROM records WHERE {cond}", args).fetchone()[0])
    return total


def newest(db: sqlite3.Connection, limit: int, listed: Filter) -> list[tuple[int, int, int, str]]:
    """``(seq, offset, length, hash)`` of the records ``listed`` admits, newest first, at most ``limit``.

    With an ``above`` bound the ``limit`` records nearest above it are taken
    (the page after it), still returned newest first; otherwise the newest.
    """
    halves = listed.halves()
    if len(halves) > 1:
        rows = sorted((row for half in halves for row in newest(db, limit, half)), reverse=True)
        return rows[-limit:] if listed.above is not None else rows[:limit]
    cond, args = listed.where()
    order = "" if listed.above is not None else " DESC"
    rows = db.execute(
        f"SELECT seq, offset, length, hash FROM records WHERE {cond} ORDER BY seq{order} LIMIT ?", [*args, limit]
    ).fetchall()
    return rows[::-1] if listed.above is not None else rows


def head(db: sqlite3.Connection) -> tuple[int, Any] | None:
    """``(seq, ts)`` of the newest record indexed, or None."""
    row = db.execute("SELECT seq, ts FROM records ORDER BY seq DESC LIMIT 1").fetchone()
    return (row[0], row[1]) if row else None


def count_below(db: sqlite3.Connection, boundary: int, scope: str | None = None,
                and_unscoped: bool = False) -> tuple[int, int]:
    """``(records, unlisted)`` with a seq below ``boundary`` (in ``scope``; ``and_unscoped`` as in `Filter`).

    ``unlisted``: those with no string kind (redacted lines) or a bookkeeping kind.
    """
    if scope is None:
        # count(*) without a condition walks the smallest b-tree; the
        # records at or above the boundary are few.
        total = row_count(db) - db.execute("SELECT count(*) FROM records WHERE seq >= ?", (boundary,)).fetchone()[0]
        scope_sql, scope_args = "", []
    else:
        total = db.execute("SELECT count(*) FROM records WHERE scope = ? AND seq < ?", (scope, boundary)).fetchone()[0]
        if and_unscoped:  # two walks of records_scope: an OR would gather and dedupe every rowid
            total += db.execute("SELECT count(*) FROM records WHERE scope IS NULL AND seq < ?", (boundary,)).fetchone()[0]
        # For the two rare kinds, walk records_kind and test the scope row by
        # row (the unary + keeps SQLite from walking every row of the scope).
        scope_sql, scope_args = " AND " + scope_condition(and_unscoped, "+scope"), [scope]
    unlisted = db.execute(
        f"SELECT count(*) FROM records WHERE kind IS NULL AND seq < ?{scope_sql}", [boundary, *scope_args]
    ).fetchone()[0]
    unlisted += db.execute(
        f"SELECT count(*) FROM records WHERE kind IN ({_BOOKKEEPING_SQL}) AND seq < ?{scope_sql}",
        [boundary, *scope_args],
    ).fetchone()[0]
    return int(total), int(unlisted)


def links_below(db: sqlite3.Connection, boundary: int) -> Iterator[tuple[int, str, Any, Any, int]]:
    """``(target, rel, kind, scope, redacted)`` for each link to a record below ``boundary``."""
    return iter(db.execute(
        "SELECT l.target, l.rel, m.kind, m.scope, m.redacted FROM links AS l"
        " CROSS JOIN records AS m ON m.seq = l.target WHERE l.target < ?",
        (boundary,),
    ))


def kinds_of(db: sqlite3.Connection, seqs: Sequence[int]) -> Iterator[tuple[int, Any, Any, int]]:
    """``(seq, kind, scope, redacted)`` for those of ``seqs`` the index holds."""
    return _rows_in(db, "SELECT seq, kind, scope, redacted FROM records WHERE seq IN ({})", seqs)


def prune_vectors(db: sqlite3.Connection) -> int:
    """Delete vectors of redacted records and of seqs the index no longer holds with that hash.

    Returns how many rows went. A redacted line keeps its chain hash, so the
    redacted flag, not the hash, is what finds its vector.
    """
    for stmt in statements(VECTORS_SCHEMA):
        db.execute(stmt)
    cur = db.execute(
        "DELETE FROM vectors WHERE seq IN (SELECT seq FROM records WHERE redacted = 1)"
        " OR NOT EXISTS (SELECT 1 FROM records AS r WHERE r.seq = vectors.seq AND r.hash = vectors.hash)"
    )
    n = cur.rowcount
    if n:
        bump_vectors_generation(db)
    return n


def bump_vectors_generation(db: sqlite3.Connection) -> None:
    """Count one more change of the stored vectors (a reader's cached matrix of them is then stale)."""
    db.execute(
        "INSERT INTO vectors_meta (key, value) VALUES ('generation', 1)"
        " ON CONFLICT (key) DO UPDATE SET value = value + 1"
    )


def vector_counts(db: sqlite3.Connection) -> dict[str, tuple[int, int]] | None:
    """``{model: (rows, rows with a vector)}``; None when there is no vectors table.

    A record with no text gets a row with an empty vector (considered, never
    ranked): it counts in ``rows`` only.
    """
    if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vectors'").fetchone():
        return None
    return {str(m): (int(n), int(v)) for m, n, v in db.execute(
        "SELECT model, count(*), coalesce(sum(dim > 0), 0) FROM vectors GROUP BY model"
    )}
