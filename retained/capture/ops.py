"""Capture's map of the log's client_op_ids, kept in SQLite so a hook process need not scan the log.

The log recognises a retried write by its ``client_op_id`` (``Log.append``),
but it learns the ids by scanning the log once per process: about a second
at 100,000 records, more than a hook may take. ``capture/ops.sqlite3``
holds every id of the log up to a byte offset (and the log's inode); each
capture first brings it up to the log's current size (usually a few lines),
looks its ids up, and hands the map to the log (``Log.assume_ops``), which
still scans, under its lock, whatever another writer added since.

Derived and disposable: deleted, or from another log (a new inode, a
shorter file), it is rebuilt from the log.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from retained.capture.ledger import capture_dir, ensure_dir
from retained.core import record
from retained.core.log import Log, proof_of

OPS_NAME = "ops.sqlite3"
BUSY_MS = 200  # another capture is updating the map: wait this long, then do without it

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ops (op TEXT PRIMARY KEY, proof BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID;
"""


class OpsMap:
    """The log's client_op_id -> proof map as ``Log.assume_ops`` reads it: SQLite below, new ids above."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._new: dict[str, dict[str, Any]] = {}

    def get(self, op: str, default: Any = None) -> Any:
        if op in self._new:
            return self._new[op]
        row = self._db.execute("SELECT proof FROM ops WHERE op = ?", (op,)).fetchone()
        if row is None:
            return default
        import orjson

        return orjson.loads(row[0])

    def __contains__(self, op: object) -> bool:
        return isinstance(op, str) and self.get(op) is not None

    def __setitem__(self, op: str, proof: dict[str, Any]) -> None:
        self._new[op] = proof

    def update(self, other: dict[str, dict[str, Any]]) -> None:
        self._new.update(other)


def _connect(path: Path) -> sqlite3.Connection:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    db = sqlite3.connect(path, timeout=BUSY_MS / 1000, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")  # derived: a lost update is rebuilt from the log
    db.executescript(_SCHEMA)
    return db


def open_map(store_dir: Path, log: Log) -> tuple[OpsMap, int] | None:
    """The map brought up to the log's current size, and that size; None when the log does not exist yet.

    Raises:
        sqlite3.Error / OSError: the map could not be used (the caller goes on without it).
    """
    try:
        st = os.stat(log.path)
    except FileNotFoundError:
        return None
    path = ensure_dir(capture_dir(store_dir)) / OPS_NAME
    db = _connect(path)
    meta = dict(db.execute("SELECT k, v FROM meta").fetchall())
    start = int(meta.get("end", 0))
    if meta.get("ino") != st.st_ino or start > st.st_size:
        start = -1
    size = st.st_size
    if start != size:
        db.execute("BEGIN IMMEDIATE")
        try:
            if start < 0:
                db.execute("DELETE FROM ops")
                start = 0
            end = size
            rows = []
            for line in log.scan(start=start, stop=size, containing=b'"client_op_id":'):
                if line.status == record.TORN:
                    end = line.offset
                    break
                if line.status == record.RECORD:
                    op = line.record.get("client_op_id")
                    if isinstance(op, str):
                        rows.append((op, record.canonical(proof_of(line))))
            db.executemany("INSERT OR IGNORE INTO ops (op, proof) VALUES (?, ?)", rows)
            db.executemany("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", [("end", end), ("ino", st.st_ino)])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        size = end
    return OpsMap(db), size
