"""Capture's map of the log's client_op_ids, kept in a file so a hook process need not scan the log.

The log recognises a retried write by its ``client_op_id`` (``Log.append``),
but learns the ids by scanning the log once per process, more than a hook may
take. ``capture/ops.sqlite3`` (0600) holds every id of the log up to a byte
offset (the first 16 bytes of its blake3 digest, the line's offset and length)
and one mark row (the log's inode and the offset the map covers, committed in
the same transaction as the entries it covers). Derived and disposable:
deleted, damaged, or from another log (a new inode, a shorter file), it is
rebuilt from the log. `open_map` brings it up to date; `OpsMap` is what
``Log.assume_ops`` reads.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from retained.capture.ledger import capture_dir, ensure_dir
from retained.core import files, record
from retained.core.log import Log, proof_of

OPS_NAME = "ops.sqlite3"
OLD_NAMES = ("ops.bin",)  # an earlier release's map, removed when this one is built
DIGEST_BYTES = 16
LOOSE_BYTES_MAX = 16 * 1024  # log bytes past the mark read per capture before they are written into the map (a few turns)
BUSY_WAIT_S = 0.2  # another capture writing the map: wait this long, then read the log's new lines instead
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ops (digest BLOB PRIMARY KEY, offset INTEGER NOT NULL, length INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS mark (one INTEGER PRIMARY KEY CHECK (one = 1), ino INTEGER NOT NULL, covers INTEGER NOT NULL);"
)


def _digest(op: str) -> bytes:
    import blake3

    return blake3.blake3(op.encode("utf-8", "surrogatepass")).digest()[:DIGEST_BYTES]


def _connect(path: Path) -> sqlite3.Connection:
    files.refuse_links(path, Path(f"{path}-wal"), Path(f"{path}-shm"))
    if not os.path.lexists(path):
        # Created 0600 here (SQLite gives -wal and -shm the same mode).
        os.close(files.open_fd(path, os.O_WRONLY | os.O_CREAT, 0o600))
    db = sqlite3.connect(path, timeout=BUSY_WAIT_S, isolation_level=None, check_same_thread=False)
    try:
        if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            db.execute("PRAGMA journal_mode=WAL")
        db.executescript(_SCHEMA)
        # A commit lost in a crash loses its entries and its mark together: they are read again.
        db.execute("PRAGMA synchronous=NORMAL")
    except BaseException:
        db.close()
        raise
    return db


class OpsMap:
    """The log's client_op_id -> proof map as ``Log.assume_ops`` reads it: the table below, new ids above."""

    def __init__(self, log: Log, path: Path, db: sqlite3.Connection | None) -> None:
        self._log = log
        self._path = path
        self._db = db
        self._new: dict[str, dict[str, Any]] = {}

    def close(self) -> None:
        """Close the table (a later lookup opens it again)."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def get(self, op: str, default: Any = None) -> Any:
        """The proof of the record with ``client_op_id`` ``op``, or ``default``.

        One indexed query (the time does not grow with the store), then the line
        itself read from the log and its id compared, so a digest clash or a
        stale entry is never taken for a match.
        """
        if op in self._new:
            return self._new[op]
        try:
            if self._db is None:
                self._db = _connect(self._path)
            row = self._db.execute("SELECT offset, length FROM ops WHERE digest = ?", (_digest(op),)).fetchone()
        except sqlite3.Error as exc:
            raise OSError(f"capture's map of ids {self._path} cannot be read ({exc})") from exc
        if row is not None:
            try:
                line = self._log.line_at(row[0], row[1])
            except (OSError, ValueError):
                line = None
            if line is not None and line.chained and line.record.get("client_op_id") == op:
                return proof_of(line)
        return default

    def __contains__(self, op: object) -> bool:
        return isinstance(op, str) and self.get(op) is not None

    def __setitem__(self, op: str, proof: dict[str, Any]) -> None:
        self._new[op] = proof

    def update(self, other: dict[str, dict[str, Any]]) -> None:
        self._new.update(other)


def _scan(log: Log, start: int, stop: int, out: list[tuple[str, Any]], proofs: bool) -> int:
    """Add to ``out`` (client_op_id, proof or (offset, length)) for each record in the log's bytes ``start..stop``.

    Returns where they end: ``stop``, or the start of a torn line.
    """
    for line in log.scan(start=start, stop=stop, containing=b'"client_op_id":'):
        if line.status == record.TORN:
            return line.offset
        if line.status == record.RECORD:
            op = line.record.get("client_op_id")
            if isinstance(op, str):
                out.append((op, proof_of(line) if proofs else (line.offset, line.length)))
    return stop


def _mark(db: sqlite3.Connection) -> tuple[int, int] | None:
    row = db.execute("SELECT ino, covers FROM mark WHERE one = 1").fetchone()
    return (int(row[0]), int(row[1])) if row is not None else None


def _write(db: sqlite3.Connection, seen: tuple[int, int] | None, ino: int, start: int, end: int,
           found: list[tuple[str, Any]]) -> bool:
    """Add ``found`` (the log from ``start`` to ``end``) and move the mark, if the mark is still as read (``seen``).

    Two captures catching up at once: the second finds the mark moved, writes
    nothing, and keeps what it read in memory. The first entry for an id is
    the earlier line; a later one for the same id is ignored.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        if _mark(db) != seen:
            db.execute("ROLLBACK")
            return False  # another capture moved it meanwhile
        if start == 0:
            db.execute("DELETE FROM ops")  # a new map (of another log, or none yet)
        db.executemany("INSERT OR IGNORE INTO ops VALUES (?, ?, ?)", [(_digest(op), at[0], at[1]) for op, at in found])
        db.execute("INSERT OR REPLACE INTO mark VALUES (1, ?, ?)", (ino, end))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return True


def _open_db(path: Path) -> tuple[sqlite3.Connection, tuple[int, int] | None]:
    """The table and its mark; a damaged file (derived) is removed and made again."""
    try:
        db = _connect(path)
        try:
            return db, _mark(db)
        except BaseException:
            db.close()
            raise
    except sqlite3.OperationalError:
        raise  # busy or locked: another capture is at it, nothing is damaged
    except sqlite3.DatabaseError:
        for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            stale.unlink(missing_ok=True)
    db = _connect(path)
    return db, _mark(db)


def open_map(store_dir: Path, log: Log) -> tuple[OpsMap, int] | None:
    """The map brought up to the log's current size, and the size it answers for; None when the log does not exist yet.

    A few lines past the mark (up to ``LOOSE_BYTES_MAX``) are only read; past
    that they are written into the map. The size is less than the log's when
    another capture was writing the map; ``Log.assume_ops`` scans whatever
    the log holds past it under the log's lock.

    Raises:
        OSError: the map could not be read or extended (the caller goes on without it).
    """
    try:
        st = os.stat(log.path)
    except FileNotFoundError:
        return None
    directory = ensure_dir(capture_dir(store_dir))
    path = directory / OPS_NAME
    loose: list[tuple[str, Any]] = []
    try:
        db, seen = _open_db(path)
        try:
            start = seen[1] if seen is not None and seen[0] == st.st_ino and seen[1] <= st.st_size else 0
            end = start
            if st.st_size - start <= LOOSE_BYTES_MAX:
                # A few lines since the mark (the last event's record, usually):
                # read here and left out of the file, saving a commit on most
                # events; a later capture writes them.
                end = _scan(log, start, st.st_size, loose, proofs=True)
            else:
                if start == 0:
                    for old in OLD_NAMES:
                        (directory / old).unlink(missing_ok=True)
                rows: list[tuple[str, Any]] = []
                stop = _scan(log, start, st.st_size, rows, proofs=False)
                try:
                    if _write(db, seen, st.st_ino, start, stop, rows):
                        end = stop
                except sqlite3.OperationalError:
                    pass  # busy: another capture is writing it
        except BaseException:
            db.close()
            raise
    except sqlite3.Error as exc:
        raise OSError(f"capture's map of ids {path} cannot be used ({exc})") from exc
    opened = OpsMap(log, path, db)
    for op, proof in loose:
        if op not in opened._new and opened.get(op) is None:
            opened[op] = proof
    return opened, end
