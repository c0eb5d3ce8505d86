"""The two-way check of the index against the log (``Index.verify``).

Both directions: every chained log line must have its index row (same place,
same hash), and every index row must be held by a log line; then the FTS5
rows must match the records, and FTS5's own integrity check must pass. The
findings' kinds: docs/search.md ("Verify, both ways").

Imported by ``Index.verify`` when it runs, so this module (and orjson, which
parses the lines the byte scan cannot settle) stays off the path of every
other read. It reads the tables through ``schema`` and is handed the
index's connection and lock, so it needs nothing from ``writer``.
"""

from __future__ import annotations

import bisect
import itertools
import sqlite3
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import orjson

from retained.core.chain import Run
from retained.errors import RetainedError
from retained.index import schema
from retained.index.schema import BATCH_ROWS

if TYPE_CHECKING:
    from pathlib import Path

    from retained.core.log import Log


def verify(
    log: Log,
    connection: Callable[[], sqlite3.Connection],
    lock: threading.RLock,
    path: Path,
    busy_timeout_s: float,
    *,
    replaced: bool,
    lines: Iterable[tuple[Any, ...]] | None = None,
    snapshot: tuple[int, int] | None = None,
) -> list[dict[str, Any]]:
    """``Index.verify``: the findings, none if the index at ``path`` matches ``log`` (see there).

    The caller has caught the index up without rebuilding it; ``replaced``:
    that catch-up found the log replaced. ``connection()`` is the index's
    connection, used only while holding ``lock``. ``lines`` and ``snapshot``
    as there (None: the log as it is now).
    """
    integrity = _IntegrityCheck(path, busy_timeout_s)
    # One read transaction: the mark and every row compared are one state
    # of the index, whatever other processes' catch-ups commit meanwhile.
    with lock, schema.transaction(connection()) as db:
        findings = _verify_locked(log, db, integrity, replaced, lines, snapshot)
    integrity.join()
    findings.extend(integrity.words)
    if integrity.error is not None:
        findings.append(_finding("index_integrity", None, None, "ok", integrity.error,
                                 f"FTS5 integrity check failed: {integrity.error}; run `retained rebuild`"))
    return findings


def _verify_locked(
    log: Log,
    db: sqlite3.Connection,
    integrity: _IntegrityCheck,
    replaced: bool,
    lines: Iterable[tuple[Any, ...]] | None,
    snapshot: tuple[int, int] | None,
) -> list[dict[str, Any]]:
    """The comparison with the log, inside ``verify``'s read transaction; starts ``integrity``."""
    findings: list[dict[str, Any]] = []
    mark = schema.read_mark(db)
    size = log.size() if snapshot is None else snapshot[0]
    if replaced:
        findings.append(_finding(
            "index_log_replaced", mark.seq or None, mark.line_offset,
            mark.hash, "other bytes" if mark.offset <= size else f"log of {size} bytes",
            f"the index was built from another log: it read to byte {mark.offset} (seq "
            f"{mark.seq}, hash {mark.hash[:12]}...) but the log {log.path.name} "
            f"is {size} bytes and no longer holds that line there; run `retained rebuild`",
        ))
    matched = _Matched(mark.seq)
    batch: list[tuple[Any, ...]] = []
    stop = min(mark.offset, size)
    source = iter(_raw_lines(log, stop) if lines is None else _lines_before(lines, stop))
    # FTS5's integrity check reads the whole full-text index (a large share
    # of verify's time) and needs nothing from the lines: it runs on its
    # own connection (sqlite3 lets go of the GIL while a statement runs)
    # while they are compared, instead of after them. Started now: the
    # chain walk has already started its worker processes (pool.map_ranges
    # starts them before it returns), which it does only while this
    # process runs one thread.
    integrity.start()
    try:
        for item in source:
            if type(item) is Run:
                # Lines are compared in file order: a seq claimed twice is
                # judged on the line that claims it first.
                findings.extend(_verify_claims(log, db, _claims(batch), matched))
                batch.clear()
                findings.extend(_verify_run(log, db, item, matched))
                continue
            batch.append(item)
            if len(batch) >= BATCH_ROWS:
                findings.extend(_verify_claims(log, db, _claims(batch), matched))
                batch.clear()
        findings.extend(_verify_claims(log, db, _claims(batch), matched))
    except BaseException:
        integrity.join()
        raise
    # Every seq in `matched` is an index row a log line matched; when
    # they are all of the rows there is no ghost to look for. Rows past
    # the snapshot were indexed from lines appended after it.
    indexed = schema.row_count(db)
    if snapshot is not None:
        indexed -= schema.rows_beyond(db, snapshot[1], size)
    ghosts = () if matched.count() == indexed else schema.places_within(db, None if snapshot is None else size)
    for seq, offset, h in ghosts:
        if matched.has(seq):
            continue
        findings.append(_finding(
            "index_ghost", seq, offset, "absent", h,
            f"seq {seq} is in the index (byte {offset}, hash {h[:12]}...) but no log line holds it; "
            f"the log may have been replaced by an older copy; run `retained rebuild`",
        ))
    return findings


class _Matched:
    """The seqs of the index rows a log line was found for.

    Whole runs the index holds exactly are kept as ``(lo, hi)`` ranges
    (sorted, disjoint), single seqs as bits: one bit per seq up to the
    highest single one.
    """

    def __init__(self, top: int) -> None:
        self.bits = bytearray((top >> 3) + 1)
        self.ranges: list[tuple[int, int]] = []
        self.starts: list[int] = []

    def has(self, seq: int) -> bool:
        if seq >> 3 < len(self.bits) and self.bits[seq >> 3] & (1 << (seq & 7)):
            return True
        i = bisect.bisect_right(self.starts, seq) - 1
        return i >= 0 and self.ranges[i][1] >= seq

    def add(self, seq: int) -> None:
        if seq >> 3 >= len(self.bits):
            self.bits.extend(bytes((seq >> 3) + 1 - len(self.bits)))
        self.bits[seq >> 3] |= 1 << (seq & 7)

    def add_range(self, lo: int, hi: int) -> None:
        """Seqs ``lo`` to ``hi``, none of them matched before (each row is matched by one line at most)."""
        i = bisect.bisect_right(self.starts, lo)
        self.starts.insert(i, lo)
        self.ranges.insert(i, (lo, hi))

    def count(self) -> int:
        return int.from_bytes(self.bits, "little").bit_count() + sum(hi - lo + 1 for lo, hi in self.ranges)


class _IntegrityCheck(threading.Thread):
    """The checks of the full-text index that need no log line, on a connection of their own.

    ``words``: the findings of ``_verify_words`` (records and FTS5 rows both
    ways); ``error``: FTS5's ``integrity-check`` failure, None when it passes.
    """

    def __init__(self, path: Path, busy_timeout_s: float) -> None:
        super().__init__(name="retained-fts-integrity", daemon=True)
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        self.words: list[dict[str, Any]] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            db = schema.connect(self.path, self.busy_timeout_s)
        except (sqlite3.Error, RetainedError) as exc:
            self.error = str(exc)
            return
        try:
            # FTS5's check reads every page of the full-text index, some more
            # than once: a cache that holds them all reads each from the OS once.
            db.execute(f"PRAGMA cache_size=-{schema.CACHE_KIB}")
            self.words = list(_verify_words(db))
            db.execute("INSERT INTO fts (fts, rank) VALUES ('integrity-check', 0)")
        except sqlite3.DatabaseError as exc:
            self.error = str(exc)
        finally:
            db.close()


def _raw_lines(log: Log, stop: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, bytes)`` of each complete line before ``stop``, memory flat.

    Verify compares places and hashes, which needs no full record check
    per line (the chain walk does that); a line is classified only when
    it disagrees with the index.
    """
    return ((offset, raw) for offset, raw in log.segments(stop=stop) if raw.endswith(b"\n"))


def _claims(batch: list[tuple[int, bytes]]) -> list[tuple[int, str, int, int]]:
    """``(seq, hash, offset, length)`` claimed by each ``(offset, raw)`` line that claims a seq."""
    claims = []
    for offset, raw in batch:
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
    return claims


# One aggregate row per chunk of a run: the rows the index holds for its
# seqs, in seq order, as text. ``seq`` is the table's primary key, so a
# count of hi - lo + 1 rows between lo and hi is every seq once, and the
# concatenations follow the subquery's seq order: the i-th value of each
# is seq lo + i's.
_RUN_ROWS_SQL = (
    "SELECT count(*), group_concat(offset), group_concat(length), group_concat(hash, '') "
    "FROM (SELECT offset, length, hash FROM records WHERE seq BETWEEN ? AND ? ORDER BY seq)"
)


def _verify_run(log: Log, db: sqlite3.Connection, run: Run, matched: _Matched) -> list[dict[str, Any]]:
    """Findings for a run of records the chain walk verified, compared a chunk at a time.

    A chunk the index holds exactly (seq, place and hash of every line) is
    settled by one aggregate query and a few string comparisons; any other
    goes line by line (``_verify_claims``).
    """
    out: list[dict[str, Any]] = []
    lengths, hashes = run.lengths, run.hashes
    offset = run.offset
    for k in range(0, len(lengths), BATCH_ROWS):
        part = lengths[k : k + BATCH_ROWS]
        lo = run.seq + k
        hi = lo + len(part) - 1
        offsets = list(itertools.accumulate(part[:-1], initial=offset))
        got = db.execute(_RUN_ROWS_SQL, (lo, hi)).fetchone()
        if (
            got[0] == len(part)
            and got[3] == hashes[64 * k : 64 * (k + len(part))]
            and got[2] == ",".join(map(str, part))
            and got[1] == ",".join(map(str, offsets))
        ):
            matched.add_range(lo, hi)
        else:
            claims = [
                (lo + j, hashes[64 * (k + j) : 64 * (k + j + 1)], offsets[j], part[j]) for j in range(len(part))
            ]
            out.extend(_verify_claims(log, db, claims, matched))
        offset += sum(part)
    return out


def _verify_claims(
    log: Log, db: sqlite3.Connection, claims: list[tuple[int, str, int, int]], matched: _Matched
) -> list[dict[str, Any]]:
    """Findings for ``(seq, hash, offset, length)`` claims in file order; the seqs they match go to ``matched``."""
    if not claims:
        return []
    # The common case: the batch is a run of consecutive seqs that the
    # index holds exactly (place and hash). One range query and one list
    # comparison settle it; anything else is examined line by line.
    lo, hi = claims[0][0], claims[-1][0]
    if hi - lo + 1 == len(claims):
        expected = [(c[0], c[2], c[3], c[1]) for c in claims]
        if schema.places_between(db, lo, hi) == expected:
            matched.add_range(lo, hi)
            return []
    rows = schema.places(db, [c[0] for c in claims])
    out = []
    for seq, h, offset, length in claims:
        row = rows.get(seq)
        if row is not None and row == (offset, length, h):
            matched.add(seq)
            continue
        line = log.line_at(offset, length)
        if not line.chained:
            continue  # foreign or damaged: the chain walk reports it
        if row is None:
            out.append(_finding(
                "index_missing", seq, offset, "indexed", "absent",
                f"seq {seq} (log byte {offset}) is in the log but not in the index; run `retained rebuild`",
            ))
            continue
        if matched.has(seq):
            continue  # a second line claiming this seq: the chain walk reports it
        matched.add(seq)
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


def _verify_words(db: sqlite3.Connection) -> Iterator[dict[str, Any]]:
    """Records with no FTS5 row, and FTS5 rows with no record (set differences in SQLite)."""
    for (seq,) in db.execute("SELECT seq FROM records WHERE redacted = 0 EXCEPT SELECT rowid FROM fts ORDER BY 1"):
        yield _finding("index_words_missing", seq, None, "searchable", "no FTS5 row",
                       f"seq {seq} is indexed but its words are not searchable; run `retained rebuild`")
    for (seq,) in db.execute("SELECT rowid FROM fts EXCEPT SELECT seq FROM records WHERE redacted = 0 ORDER BY 1"):
        yield _finding("index_words_ghost", seq, None, "no FTS5 row", "FTS5 row",
                       f"FTS5 has words for seq {seq}, which the index does not list; run `retained rebuild`")


def _lines_before(lines: Iterable[tuple[Any, ...]], stop: int) -> Iterator[tuple[Any, ...]]:
    """The lines given to ``Index.verify`` that end by ``stop``, as ``_raw_lines(log, stop)`` reads them.

    A run that crosses ``stop`` is cut to the lines that end by it.
    """
    for item in lines:
        if type(item) is Run:
            end = item.end
            if end > stop:
                ends = list(itertools.accumulate(item.lengths, initial=item.offset))[1:]
                n = bisect.bisect_right(ends, stop)
                if n:
                    yield Run(item.offset, item.seq, array("Q", item.lengths[:n]), item.hashes[: 64 * n])
                return
        elif item[0] + len(item[1]) > stop:
            return
        yield item


def _finding(kind: str, seq: int | None, offset: int | None, expected: Any, observed: Any, message: str) -> dict[str, Any]:
    return {"kind": kind, "seq": seq, "offset": offset, "expected": expected, "observed": observed, "message": message}
