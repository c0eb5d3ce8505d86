"""What a store holds: counts by kind, scope, client and day, sizes, the chain head, index lag, damage.

One forward scan of the log, classified as verify classifies it (memory flat
in its size, apart from one counter per distinct kind, scope, client and day
and the sets of superseded and retracted seqs),
plus looks at the index only when it exists: the index's own public
``Index.status()`` for the lag (no catch-up), and ``schema``'s
read-only connection and vector counts. Stats never creates an index and never
touches the log; opening an existing index through ``Index`` does what any
reader does (sets up its schema if it is missing or from another version).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from typing import Any

from retained.core import chain
from retained.core.log import Log
from retained.index import schema as index_schema
from retained.index.schema import INDEX_NAME

# How long the vector counts may wait on SQLite's own locks.
VECTORS_BUSY_S = 5.0


def _index_files(log: Log) -> dict[str, int]:
    return {name: p.stat().st_size for name in index_schema.INDEX_FILES if (p := log.directory / name).exists()}


def _index_status(log: Log, head_seq: int) -> dict[str, Any] | None:
    """The index's own view of its high-water mark, and how far it trails the log."""
    if not (log.directory / INDEX_NAME).exists():
        return None
    from retained.index.writer import Index

    idx = Index(log)
    try:
        status = idx.status()
    except Exception as exc:  # noqa: BLE001 - stats reports a broken index, it does not fail on it
        return {"state": "unreadable", "error": str(exc)}
    finally:
        idx.close()
    status["lag_records"] = max(0, head_seq - int(status.get("seq") or 0))
    status["lag_bytes"] = max(0, int(status["log_bytes"]) - int(status["indexed_to"]))
    return status


def _vectors(log: Log) -> dict[str, int] | None:
    """Vectors per model, read through a read-only connection; None when there is no vectors table."""
    path = log.directory / INDEX_NAME
    if not path.exists():
        return None
    try:
        db = index_schema.connect_read_only(path, VECTORS_BUSY_S)
    except sqlite3.Error:
        return None
    try:
        counts = index_schema.vector_counts(db)
    except sqlite3.Error:
        return None
    finally:
        db.close()
    if counts is None:
        return None
    # Rows with an empty vector (a record with no text) are never ranked: not counted here.
    ranked = sorted(((n, m) for m, (_, n) in counts.items() if n), key=lambda nm: (-nm[0], nm[1]))
    return {m: n for n, m in ranked}


class Tally:
    """What the record lines of (a range of) the log hold, counted where they are classified (``chain.verify_file``)."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.scopes: Counter[str] = Counter()
        self.clients: Counter[str] = Counter()
        self.days: Counter[str] = Counter()
        self.superseded: set[int] = set()
        self.retracted: set[int] = set()
        self.total_bytes = 0
        self.max_bytes = 0

    def add(self, rec: dict[str, Any], length: int) -> None:
        kind = rec.get("kind", "note")
        self.kinds[str(kind)] += 1
        scope = rec.get("scope")
        self.scopes[scope if isinstance(scope, str) else "(none)"] += 1
        self.clients[index_schema.client_name(rec.get("client")) or "(none)"] += 1
        ts = rec.get("ts")
        self.days[ts[:10] if isinstance(ts, str) else "(none)"] += 1
        if "supersedes" in rec:
            self.superseded.update(index_schema.link_targets(rec["supersedes"]))
        if kind == "retract":
            self.retracted.update(index_schema.link_targets(rec.get("retracts")))
        self.total_bytes += length
        self.max_bytes = max(self.max_bytes, length)

    def merge(self, other: Tally) -> None:
        self.kinds.update(other.kinds)
        self.scopes.update(other.scopes)
        self.clients.update(other.clients)
        self.days.update(other.days)
        self.superseded |= other.superseded
        self.retracted |= other.retracted
        self.total_bytes += other.total_bytes
        self.max_bytes = max(self.max_bytes, other.max_bytes)


def _by_count(counts: Counter[str]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def stats(log: Log, *, progress: Callable[[int, int], None] | None = None, workers: int = 0) -> dict[str, Any]:
    """Counts, sizes, head, damage and index lag of one store (reads only).

    The lines are classified and counted where verify classifies them
    (``chain.verify_file``: in ``workers`` processes when given, on a large log).
    """
    size = log.size()
    tally = Tally()
    report = chain.verify_file(log, stop=size, tally=tally, progress=progress, workers=workers)
    live = report.records - len(report.redacted)
    quarantined = log.quarantined()
    index_files = _index_files(log)
    return {
        "log": str(log.path),
        "exists": log.exists(),
        "records": report.records,
        "by_kind": _by_count(tally.kinds),
        "by_scope": _by_count(tally.scopes),
        "by_client": _by_count(tally.clients),
        # UTC days (the first ten characters of ts), oldest first: records over time.
        "by_day": dict(sorted(tally.days.items())),
        "superseded": len(tally.superseded),
        "retracted": len(tally.retracted),
        "redacted": len(report.redacted),
        "foreign_lines": len(report.foreign),
        "damaged_lines": report.damaged,
        "findings": len(report.findings),
        "torn_tail": report.torn_tail,
        "quarantined": quarantined,
        "head": {"seq": report.head_seq, "hash": report.head_hash},
        "sizes": {
            "log_bytes": size,
            "record_bytes_mean": round(tally.total_bytes / live) if live else 0,
            "record_bytes_max": tally.max_bytes,
            "quarantined_bytes": sum(q["bytes"] for q in quarantined),
            "index_bytes": sum(index_files.values()),
            "index_files": index_files,
        },
        "index": _index_status(log, report.head_seq),
        "vectors": _vectors(log),
    }

