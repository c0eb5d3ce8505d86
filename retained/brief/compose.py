"""The session-start brief: what the store holds, within a token budget, and what it left out (docs/brief.md).

``build_brief`` returns the brief as a dict (I2: ``len(included) +
sum(dropped.values()) == eligible``) and ``render_text`` its text. It reads
the log backwards through ``brief.reader`` (the one module that keeps the
brief's start-up budget) down to the index's mark, the older records through
``index.schema`` (never ``index.writer``). It takes no lock and writes
nothing but its anchor.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from retained import limits
from retained.brief.reader import IndexView, LogReader
from retained.core import anchors
from retained.core.lines import DAMAGED, FOREIGN, LOG_NAME, RECORD, TORN
from retained.errors import InvalidRecord, InvariantBroken, RetainedError, StoreDamaged
from retained.index import schema as index_schema
from retained.index.schema import (
    BOOKKEEPING_KINDS,
    LINK_FIELDS,
    estimate_tokens,
    link_targets,
)
from retained.render import FIELD_CHARS_MAX  # header fields (kind, scope, source, client) are cut to this width
from retained.render import block as render_block  # the one text form of a record; the budget counts it
from retained.render import body_text as _body_text
from retained.render import clean as _clean
from retained.render import client as _client  # noqa: F401 (tests/unit/test_brief.py reads it here)
from retained.render import count as _plural
from retained.render import dumps as _dumps
from retained.render import header as _header
from retained.render import short as _short
from retained.render import ts as _ts
from retained.sync import layout as sync_layout  # the stores `retained sync` pulled beside this one

DEFAULT_BUDGET = limits.BRIEF_BUDGET_DEFAULT
# Bytes the records shown may take in the largest output form (their JSON
# entries, or their text blocks as one JSON string). With the opening and
# closing lines and the JSON envelope this keeps every form under 10,000
# characters (Claude Code's cap for a SessionStart hook's output).
OUTPUT_BYTES_MAX = 8000
# Without a usable index, the log is read backwards this far at most (and an
# index further behind the log than this is not used): about 500 records of
# 500 bytes, each parsed and its hash checked, a few milliseconds. Counts are
# exact for a log this small, an upper bound past it.
SCAN_BYTES_MAX = 256 * 1024
# The same for a store pulled by `retained sync` whose index cannot be used (its first `retained search` builds it):
# up to 4 are read at every session start, and their newest 64 KiB hold far more than the budget shows.
PULLED_SCAN_BYTES_MAX = 64 * 1024
# A record that does not fit whole is cut only if this many tokens are left
# (below that, its header and the cut marker leave no room for its text) and
# at least CUT_BYTES_MIN bytes of its text fit: a few words are noise.
CUT_TOKENS_MIN = 24
CUT_BYTES_MIN = 64
# The store path and the scope shown in the opening line.
PATH_CHARS_MAX = 160
# Rows fetched per query when walking the index newest first.
PAGE_ROWS = 32
# A pulled store's machine name and read error in the closing line (which names at most PULLED_READ_MAX stores).
PULLED_NAME_CHARS = 24
PULLED_ERROR_CHARS = 80

DROP_REASONS = ("over_budget", "superseded", "retracted", "unreadable", "not_read")
# The kinds the "note" group leaves out: checkpoints are a group of their own.
_NOT_NOTES = ("checkpoint", *sorted(BOOKKEEPING_KINDS))

# How the bounds relate, checked at import (explicit raises: `python -O` strips asserts).
if CUT_TOKENS_MIN * 4 >= OUTPUT_BYTES_MAX or DEFAULT_BUDGET * 4 > OUTPUT_BYTES_MAX:
    raise ImportError("brief: CUT_TOKENS_MIN and DEFAULT_BUDGET must fit OUTPUT_BYTES_MAX (4 bytes a token)")


# -- records -----------------------------------------------------------------


class _Candidate:
    """An eligible, current record the brief may show, with its full cost."""

    __slots__ = ("body", "entry", "nbytes", "origin", "rec", "seq", "text", "tokens")

    def __init__(self, seq: int, rec: dict[str, Any], origin: dict[str, Any] | None = None) -> None:
        self.seq = seq
        self.rec = rec
        self.origin = origin
        text = rec.get("text")
        self.text = _clean(text) if isinstance(text, str) else ""
        self.body = _body_text(rec.get("body"))
        self.entry = _entry(seq, rec, self.text, self.body or None, None, origin)
        self.tokens, self.nbytes = _cost(self.entry, render_block(self.entry))
        self.entry["tokens"] = self.tokens


def _entry(seq: int, rec: dict[str, Any], text: str, body: str | None, cut: dict[str, int] | None,
           origin: dict[str, Any] | None) -> dict[str, Any]:
    entry = _header(seq, rec)  # a candidate's kind is always a string (``_eligible``, the index's filter)
    sup = link_targets(rec.get("supersedes"))
    if sup:
        entry["supersedes"] = sup[:8]
    if origin is not None:  # a record of another store, pulled by `retained sync` (its seq is that store's)
        entry["origin"] = origin
        entry["id"] = f"{origin['store_id']}:{seq}"
    entry["text"] = text
    entry["body"] = body
    entry["cut"] = cut
    return entry


def _cost(entry: dict[str, Any], block: str) -> tuple[int, int]:
    """(tokens, bytes): the estimate for the block, and its size in the largest output form."""
    tokens = estimate_tokens(block)
    # The JSON entry gains a "tokens" field later: count it now (at most 20 bytes).
    nbytes = max(len(_dumps(block).encode()), len(_dumps(entry).encode()) + 20) + 1
    return tokens, nbytes


def _cut(cand: _Candidate, tokens_left: int, bytes_left: int) -> tuple[dict[str, Any], int, int] | None:
    """``(entry, tokens, bytes)``: the candidate's entry cut to fit, with a marker; None if too little room is left."""
    if tokens_left < CUT_TOKENS_MIN:
        return None
    text_b = cand.text.encode("utf-8", "replace")
    body_b = cand.body.encode("utf-8", "replace")
    total = len(text_b) + len(body_b)

    def make(n: int) -> tuple[dict[str, Any], int, int]:
        t = text_b[:n].decode("utf-8", "ignore")
        rest = n - len(text_b)
        b = body_b[:rest].decode("utf-8", "ignore") if rest > 0 else ""
        shown = len(t.encode()) + len(b.encode())
        entry = _entry(cand.seq, cand.rec, t, b or None, {"shown_bytes": shown, "total_bytes": total}, cand.origin)
        return (entry, *_cost(entry, render_block(entry)))

    lo, hi = 0, min(total, tokens_left * 4, bytes_left)
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        entry, tk, nb = make(mid)
        if tk <= tokens_left and nb <= bytes_left:
            best = (entry, tk, nb)
            lo = mid + 1
        else:
            hi = mid - 1
    if best is None or best[0]["cut"]["shown_bytes"] < min(total, CUT_BYTES_MIN):
        return None
    best[0]["tokens"] = best[1]
    return best


# -- the builder ---------------------------------------------------------------


class _Brief:
    def __init__(self, directory: Path, budget: int, scope: str | None, and_unscoped: bool, scan_bytes_max: int,
                 origin: dict[str, Any] | None = None) -> None:
        self.directory = directory
        self.origin = origin  # None: this store; else the pulled store whose mirror this reads
        self.scan_bytes_max = scan_bytes_max
        self.budget = budget
        self.scope, self.and_unscoped = scope, and_unscoped
        self.log = LogReader(directory)
        self.checkpoints: list[_Candidate] = []
        self.notes: list[_Candidate] = []
        self.need = {"checkpoint": [0, 0], "note": [0, 0]}  # tokens, bytes kept per group
        self.hidden: dict[str, set[int]] = {rel: set() for rel in LINK_FIELDS}
        self.read = {"visible": 0, "superseded": 0, "retracted": 0}
        self.skipped = {"foreign": 0, "damaged": 0, "torn_bytes": 0}
        self.lowest_seq: int | None = None
        self.head: dict[str, Any] | None = None
        self.tail: tuple[int, str, int] | None = None  # (seq, hash, end) of the newest chained line: the head anchored
        self.scanned_bytes = 0
        self.reached_start = False
        self.unreadable = 0

    # keeping candidates ------------------------------------------------------

    def _full(self, group: str) -> bool:
        tokens, nbytes = self.need[group]
        return tokens >= self.budget or nbytes >= OUTPUT_BYTES_MAX

    def _keep(self, seq: int, rec: dict[str, Any]) -> None:
        group = "checkpoint" if rec.get("kind") == "checkpoint" else "note"
        if self._full(group):
            return
        cand = _Candidate(seq, rec, self.origin)
        (self.checkpoints if group == "checkpoint" else self.notes).append(cand)
        self.need[group][0] += cand.tokens
        self.need[group][1] += cand.nbytes

    def _eligible(self, kind: Any, scope: Any) -> bool:
        if not isinstance(kind, str) or kind in BOOKKEEPING_KINDS:
            return False
        return index_schema.scope_admits(self.scope, scope, self.and_unscoped)

    # the log, newest first -----------------------------------------------------

    def scan(self, size: int, index: IndexView) -> None:
        """Read lines backwards from ``size``: down to the index's mark, or up to the scan cap."""
        for line in self.log.lines_reverse(size):
            self.scanned_bytes += line.length
            status = line.status
            if status == TORN:
                self.skipped["torn_bytes"] += line.length
            elif status == FOREIGN:
                self.skipped["foreign"] += 1
            elif status == DAMAGED:
                self.skipped["damaged"] += 1
            else:
                seq = line.seq  # a chained line always has one
                self.lowest_seq = seq
                rec = line.record
                if self.head is None:
                    self.head = {"seq": seq, "ts": _ts(rec.get("ts")) if status == RECORD else None}
                    self.tail = (seq, line.hash, line.end)
                if status == RECORD:
                    self._take(seq, rec)
            if index.db is not None:
                if line.offset <= index.hwm_offset:
                    return  # everything older is indexed
                if self.scanned_bytes >= self.scan_bytes_max:
                    index.give_up("behind", f"the index is more than {self.scan_bytes_max} bytes behind the log")
                    return
            elif self.scanned_bytes >= self.scan_bytes_max:
                return
        self.reached_start = True

    def _take(self, seq: int, rec: dict[str, Any]) -> None:
        for rel in LINK_FIELDS:
            for target in link_targets(rec.get(rel)):
                if target < seq:
                    self.hidden[rel].add(target)
        if seq in self.hidden["redacts"] or not self._eligible(rec.get("kind"), rec.get("scope")):
            return
        if seq in self.hidden["retracts"]:
            self.read["retracted"] += 1
        elif seq in self.hidden["supersedes"]:
            self.read["superseded"] += 1
        else:
            self.read["visible"] += 1
            self._keep(seq, rec)

    # the index, for what the scan did not read ---------------------------------

    def older(self, index: IndexView, boundary: int) -> dict[str, int]:
        """Counts for the indexed records below ``boundary``, and candidates among them."""
        db = index.db
        if db is None:
            raise InvariantBroken("brief: the index's counts were asked for without an open index")
        # Rows with no string kind (redacted lines) and bookkeeping rows are not eligible.
        total, not_eligible = index_schema.count_below(db, boundary, self.scope, self.and_unscoped)
        eligible = total - not_eligible

        # Flags: the index's links, plus those of the records the scan read
        # (the index may not have reached them yet).
        rels: dict[int, set[str]] = {}
        rows: dict[int, tuple[Any, Any, int]] = {}
        for target, rel, kind, scope, redacted in index_schema.links_below(db, boundary):
            rels.setdefault(target, set()).add(rel)
            rows[target] = (kind, scope, redacted)
        for rel in LINK_FIELDS:
            for t in self.hidden[rel]:
                if t < boundary:
                    rels.setdefault(t, set()).add(rel)
        missing = sorted(t for t in rels if t not in rows)
        for seq, kind, scope, redacted in index_schema.kinds_of(db, missing):
            rows[seq] = (kind, scope, redacted)
        superseded = retracted = 0
        for target, found in rels.items():
            kind, scope, redacted = rows.get(target, (None, None, False))
            if not self._eligible(kind, scope):
                continue
            if redacted or "redacts" in found:
                eligible -= 1
            elif "retracts" in found:
                retracted += 1
            elif "supersedes" in found:
                superseded += 1
        visible = eligible - superseded - retracted

        self._fetch(db, boundary, "checkpoint", rels)
        self._fetch(db, boundary, "note", rels)
        if self.head is None:
            newest = index_schema.head(db)
            if newest is not None:
                self.head = {"seq": newest[0], "ts": _ts(newest[1])}
        return {"visible": visible, "superseded": superseded, "retracted": retracted}

    def _fetch(self, db: sqlite3.Connection, boundary: int, group: str, flagged: dict[int, set[str]]) -> None:
        """Candidates of one group below ``boundary``, newest first, read from the log and checked."""
        kind, kinds_not = ("checkpoint", ()) if group == "checkpoint" else (None, _NOT_NOTES)
        below = boundary
        f = self.log.open()
        if f is None:
            raise StoreDamaged(f"{self.log.path} is gone while the brief reads it")
        with f:
            while not self._full(group):
                rows = index_schema.newest(db, PAGE_ROWS, index_schema.Filter(
                    below=below, kind=kind, kinds_not=kinds_not, scope=self.scope, and_unscoped=self.and_unscoped,
                    current=True))
                for seq, offset, length, h in rows:
                    below = seq
                    if seq in flagged:
                        continue  # hidden by a record the index has not reached
                    rec = self.log.record_at(f, seq, offset, length, h)
                    if rec is None:
                        self.unreadable += 1
                        continue
                    self._keep(seq, rec)
                    if self._full(group):
                        break
                if len(rows) < PAGE_ROWS:
                    break

    # the stores pulled beside this one -------------------------------------------

    def merge(self, others: list[_Brief]) -> None:
        """Take the candidates of the pulled stores' briefs into this one's, each group still newest first.

        Seqs of two stores do not compare: the groups are merged by the
        records' ``ts`` (ties: this store's first), and each store's own
        order is kept as it is (its seq order).
        """
        import heapq  # only when other stores were pulled

        def ts(c: _Candidate) -> str:
            value = c.rec.get("ts")
            return value if isinstance(value, str) else ""

        self.checkpoints = list(heapq.merge(self.checkpoints, *(o.checkpoints for o in others), key=ts, reverse=True))
        self.notes = list(heapq.merge(self.notes, *(o.notes for o in others), key=ts, reverse=True))

    # composing -------------------------------------------------------------------

    def compose(self) -> tuple[list[dict[str, Any]], int, str | None]:
        """Fill the budget; returns (entries, tokens, what ended the list).

        The order, the checkpoints' share and the cut are docs/brief.md's
        ("What it shows"); the checkpoints' half holds for the output cap too.
        """
        used = [0, 0]  # tokens, bytes
        limit: list[str | None] = [None]

        def take(cands: list[_Candidate], start: int, tokens_max: int, bytes_max: int,
                 out: list[dict[str, Any]], may_cut: bool) -> tuple[int, bool]:
            i = start
            while i < len(cands):
                c = cands[i]
                if used[0] + c.tokens <= tokens_max and used[1] + c.nbytes <= bytes_max:
                    out.append(c.entry)
                    used[0] += c.tokens
                    used[1] += c.nbytes
                    i += 1
                    continue
                limit[0] = "budget" if used[0] + c.tokens > tokens_max else "output_cap"
                cut = _cut(c, tokens_max - used[0], bytes_max - used[1]) if may_cut else None
                if cut is not None:
                    out.append(cut[0])
                    used[0] += cut[1]
                    used[1] += cut[2]
                    i += 1
                return i, True
            return i, False

        shown_cp: list[dict[str, Any]] = []
        shown_notes: list[dict[str, Any]] = []
        share = 2 if self.notes else 1
        next_cp, _ = take(self.checkpoints, 0, self.budget // share, OUTPUT_BYTES_MAX // share, shown_cp, True)
        _, stopped = take(self.notes, 0, self.budget, OUTPUT_BYTES_MAX, shown_notes, True)
        if not stopped and next_cp < len(self.checkpoints):
            limit[0] = None
            take(self.checkpoints, next_cp, self.budget, OUTPUT_BYTES_MAX, shown_cp, not shown_cp or not shown_cp[-1]["cut"])
        if used[0] > self.budget or used[1] > OUTPUT_BYTES_MAX:
            raise InvariantBroken(f"brief: {used[0]} tokens / {used[1]} bytes chosen, over {self.budget} / {OUTPUT_BYTES_MAX}")
        return [*shown_cp, *shown_notes], used[0], limit[0]


def _status(directory: Path, status: str, message: str | None, budget: int, scope: str | None,
            and_unscoped: bool) -> dict[str, Any]:
    return {
        "status": status,
        "message": message,
        "store": str(directory),
        **index_schema.scope_reply(scope, and_unscoped),
        "budget": budget,
        "tokens": 0,
        "included": [],
        "dropped": dict.fromkeys(DROP_REASONS, 0),
        "eligible": 0,
        "exact": status != "unreadable",
        "limit": None,
        "head": None,
        "index": None,
        "log_bytes_read": 0,
        "skipped": {"foreign": 0, "damaged": 0, "torn_bytes": 0},
        "anchor": None,
        "pulled": [],
        "pulled_skipped": {"stores": 0, "records": 0},
    }


def unavailable(store_dir: str | os.PathLike[str], reason: str, *, budget: int = DEFAULT_BUDGET,
                scope: str | None = None, and_unscoped: bool = False) -> dict[str, Any]:
    """The result for a store the brief could not read (for callers that catch errors themselves)."""
    directory = Path(store_dir).expanduser()
    return _status(directory, "unreadable", f"the store at {_short(str(directory), PATH_CHARS_MAX)} could not be read "
                   f"({_short(reason, 200)}); nothing to show", budget, scope, and_unscoped)


def build_brief(
    store_dir: str | os.PathLike[str],
    budget: int = DEFAULT_BUDGET,
    scope: str | None = None,
    *,
    and_unscoped: bool = False,
    scan_bytes_max: int = SCAN_BYTES_MAX,
    anchor_dir: str | os.PathLike[str] | None = None,
    project: str | None = None,
) -> dict[str, Any]:
    """The brief of the store at ``store_dir``: what to show within ``budget`` tokens, and what was left out.

    Returns a dict with ``status`` (``ok``, ``empty``, ``absent`` or
    ``unreadable``, the last three with a one-line ``message``), ``included``
    (the records shown, each ``{"seq", "kind", "ts", "client", "scope"?,
    "source"?, "supersedes"?, "text", "body", "cut", "tokens"}``, ``cut``
    being null or ``{"shown_bytes", "total_bytes"}``), ``dropped`` (counts by
    reason), ``eligible``, ``exact``, ``tokens``, ``budget``, ``scope``,
    ``and_unscoped`` (with ``scope``, the records with no scope are read too),
    ``limit`` (``budget`` or ``output_cap`` when one of them ended the list),
    ``head`` (newest record's seq and ts), ``index`` (its state and how the
    counts were made) and ``skipped`` (lines of the part read that are not
    records). A missing or unreadable store is a status, not an error.
    ``pulled`` and ``pulled_skipped``: the stores ``retained sync`` pulled,
    read (their records share the budget, marked with ``origin``) or not
    (docs/brief.md).
    ``scan_bytes_max`` bounds how far the log is read without a usable index.
    With ``anchor_dir`` the head the brief read is recorded there
    (``anchors.record_head``: one small write, none when it is already the
    last one); ``anchor`` names the file (or the error: a failure there never
    fails the brief).
    With ``project`` (a scope: the project's identity, ``capture.scope``),
    ``last_session`` holds the last turns of that project's latest captured
    session (``brief.last_session``), shown first, within a third of ``budget``;
    the rest of the brief gets what they leave.

    Raises:
        InvalidRecord: ``budget`` is not a whole number from 0, or ``scope`` is not a string.
    """
    if type(budget) is not int or budget < 0:
        raise InvalidRecord(f"field budget: must be a whole number of tokens from 0, got {budget!r}", path="budget")
    if scope is not None and not isinstance(scope, str):
        raise InvalidRecord(f"field scope: must be a string, got {type(scope).__name__}", path="scope")
    directory = Path(store_dir).expanduser()
    shown_dir = _short(str(directory), PATH_CHARS_MAX)
    try:
        if not directory.is_dir():
            if directory.exists():
                return _status(directory, "unreadable", f"{shown_dir} is not a directory; no brief", budget, scope,
                               and_unscoped)
            return _status(directory, "absent", f"no store at {shown_dir} (nothing recorded yet)", budget, scope,
                           and_unscoped)
        log_path = directory / LOG_NAME
        if log_path.is_dir():
            raise StoreDamaged(f"{log_path} is a directory, not a log file")
        try:
            size = log_path.stat().st_size
        except FileNotFoundError:
            size = 0
        pulled = sync_layout.pulled(directory)
        if size == 0 and not pulled:
            return _status(directory, "empty", f"no records yet in {shown_dir}", budget, scope, and_unscoped)
        last = None
        if project is not None:
            from retained.brief import last_session

            last = last_session.last_session(directory, project, budget // last_session.SHARE)
            budget -= last["tokens"] if last else 0
        builder, index, counts = _read(directory, size, budget, scope, and_unscoped, scan_bytes_max, None)
        read = _newest_pulled(directory, pulled)
        pulled_scan = min(scan_bytes_max, PULLED_SCAN_BYTES_MAX)
        others = [_read_pulled(directory, p, budget, scope, and_unscoped, pulled_scan) if p["store_id"] in read
                  else _not_read(p, "skipped", True) for p in pulled]
        result = _build(builder, index, counts, others)
        if anchor_dir is not None and builder.tail is not None:
            result["anchor"] = _anchor(anchor_dir, directory, builder.tail)
        if last is not None:
            result["last_session"] = last
        return result
    except (OSError, StoreDamaged) as exc:
        reason = exc.message if isinstance(exc, StoreDamaged) else f"{exc.strerror or exc}"
        return unavailable(directory, reason, budget=budget, scope=scope, and_unscoped=and_unscoped)


def _anchor(anchor_dir: str | os.PathLike[str], directory: Path, tail: tuple[int, str, int]) -> dict[str, Any]:
    try:
        done = anchors.record_head(anchor_dir, directory, *tail, "brief")
    except RetainedError as exc:
        return {"error": exc.message}
    # Not whether this run wrote it: the output depends on the store alone.
    return {"file": done["file"], "store_id": done["store_id"]}


def _read(directory: Path, size: int, budget: int, scope: str | None, and_unscoped: bool, scan_bytes_max: int,
          origin: dict[str, Any] | None) -> tuple[_Brief, IndexView, dict[str, Any]]:
    """One store's candidates (in the builder) and counts (``_count``), through its index when it can be used.

    The index is closed on return (its state and reason stay).
    """
    builder = _Brief(directory, budget, scope, and_unscoped, scan_bytes_max, origin)
    index = IndexView(directory, builder.log, size)
    try:
        try:
            counts = _count(builder, index, size)
        except sqlite3.Error as exc:
            # The index failed mid-read (a table missing, a page corrupt):
            # start again from the log alone.
            index.give_up("unusable", f"index cannot be read ({_short(str(exc), 200)})")
            builder = _Brief(directory, budget, scope, and_unscoped, scan_bytes_max, origin)
            counts = _count(builder, index, size)
    finally:
        index.close()
    return builder, index, counts


def _count(b: _Brief, index: IndexView, size: int) -> dict[str, Any]:
    """Read the store newest first (the log's new part, then the index) into ``b``; its counts by kind of record."""
    b.scan(max(size, index.log_size), index)
    older = {"visible": 0, "superseded": 0, "retracted": 0}
    not_read: int | None = 0
    counted_by = "log"
    if index.db is not None:
        boundary = b.lowest_seq if b.lowest_seq is not None else index.hwm_seq + 1
        older = b.older(index, boundary)
        counted_by = "index"
    if counted_by == "log" and not b.reached_start:
        # Seqs run 1, 2, 3 (L2): the records older than the oldest one read
        # are seq 1 .. lowest - 1. None: not one record was read.
        not_read = (b.lowest_seq - 1) if b.lowest_seq is not None else None
    if counted_by == "index":
        how = f"index {index.state}" + (" (the newer part read from the log)" if b.scanned_bytes else "")
    elif b.reached_start:
        how = "whole log read"
    else:
        how = f"last {b.scanned_bytes} bytes of the log read"
    return {"visible": b.read["visible"] + older["visible"], "superseded": b.read["superseded"] + older["superseded"],
            "retracted": b.read["retracted"] + older["retracted"], "unreadable": b.unreadable, "not_read": not_read,
            "counted_by": counted_by, "how": how}


def _newest_pulled(directory: Path, pulled: list[dict[str, Any]]) -> set[Any]:
    """The ids of the pulled stores whose records the brief reads: at most ``PULLED_READ_MAX``, the last changed first."""
    if len(pulled) <= sync_layout.PULLED_READ_MAX:
        return {p["store_id"] for p in pulled}

    def changed(p: dict[str, Any]) -> int:
        try:
            return (sync_layout.mirror_dir(directory, str(p["store_id"])) / LOG_NAME).stat().st_mtime_ns
        except OSError:
            return 0

    return {p["store_id"] for p in sorted(pulled, key=changed, reverse=True)[: sync_layout.PULLED_READ_MAX]}


def _not_read(meta: dict[str, Any], key: str, why: object) -> tuple[dict[str, Any], None, dict[str, int]]:
    """A pulled store whose records were not read (``skipped`` past ``PULLED_READ_MAX``, or an ``error``): named, with
    ``why`` under ``key``, and its records counted as not read (an upper bound, I2)."""
    seq = meta["seq"] if type(meta.get("seq")) is int else 0
    part = dict(meta, machine=_short(str(meta.get("machine")), FIELD_CHARS_MAX), eligible=seq, shown=0, not_read=seq)
    part[key] = why
    counts = {"visible": 0, "superseded": 0, "retracted": 0, "unreadable": 0, "not_read": seq}
    return part, None, counts


def _read_pulled(directory: Path, meta: dict[str, Any], budget: int, scope: str | None, and_unscoped: bool,
                 scan_bytes_max: int) -> tuple[dict[str, Any], _Brief | None, dict[str, Any]]:
    """A pulled store's part: ``(its entry in "pulled", its builder, its counts)``, or no builder when it cannot be read.

    A mirror that cannot be read never fails the brief (``retained sync`` and ``verify`` report it).
    """
    mdir = sync_layout.mirror_dir(directory, str(meta["store_id"]))
    origin = {"store_id": meta["store_id"], "machine": meta.get("machine"), "local": False}
    part = dict(meta, machine=_short(str(meta.get("machine")), FIELD_CHARS_MAX))
    try:
        size = (mdir / LOG_NAME).stat().st_size
        builder, _, counts = _read(mdir, size, budget, scope, and_unscoped, scan_bytes_max, origin)
    except (OSError, StoreDamaged) as exc:
        return _not_read(meta, "error", _short(exc.message if isinstance(exc, StoreDamaged) else f"{exc.strerror or exc}", 200))
    part["eligible"] = sum(counts[name] or 0 for name in ("visible", "superseded", "retracted", "not_read"))
    part["not_read"] = counts["not_read"] or 0
    return part, builder, counts


def _build(b: _Brief, index: IndexView, counts: dict[str, Any],
           others: list[tuple[dict[str, Any], _Brief | None, dict[str, Any]]]) -> dict[str, Any]:
    """The brief's dict: this store's candidates and the pulled stores', composed within one budget."""
    builders = [ob for _, ob, _ in others if ob is not None]
    if builders:
        b.merge(builders)
    entries, tokens, limit = b.compose()
    every = [counts, *(oc for _, _, oc in others)]

    def total(name: str) -> int:
        return sum(c[name] or 0 for c in every)

    unreadable = total("unreadable")
    dropped = {
        "over_budget": total("visible") - len(entries) - unreadable,
        "superseded": total("superseded"),
        "retracted": total("retracted"),
        "unreadable": unreadable,
        "not_read": total("not_read"),
    }
    if dropped["over_budget"] < 0:
        raise InvariantBroken(f"brief: over_budget came to {dropped['over_budget']} (I2 accounting)")
    eligible = len(entries) + sum(dropped.values())
    for p, ob, _ in others:
        if ob is not None:
            p["shown"] = sum(1 for e in entries if e.get("origin", {}).get("store_id") == p["store_id"])
    return {
        **_status(b.directory, "ok", None, b.budget, b.scope, b.and_unscoped),
        "tokens": tokens,
        "included": entries,
        "dropped": dropped,
        "eligible": eligible,
        "exact": all(c["not_read"] == 0 for c in every),
        "limit": limit,
        "head": b.head,
        "index": {"state": index.state, "reason": index.reason or None, "counted_by": counts["counted_by"],
                  "how": counts["how"]},
        "log_bytes_read": b.scanned_bytes,
        "skipped": b.skipped,
        "pulled": [p for p, _, _ in others if not p.get("skipped")],
        "pulled_skipped": {"stores": sum(1 for p, _, _ in others if p.get("skipped")),
                           "records": sum(p["not_read"] for p, _, _ in others if p.get("skipped"))},
    }


# -- rendering -------------------------------------------------------------------


def _scope_words(result: dict[str, Any]) -> str:
    """`` with scope "S"``, `` of project "S" (and records with no scope)``, or nothing (every scope)."""
    if result.get("scope") is None:
        return ""
    if result.get("and_unscoped"):
        return f' of project "{_short(result["scope"], PATH_CHARS_MAX)}" (and records with no scope)'
    return f' with scope "{_short(result["scope"], FIELD_CHARS_MAX)}"'


def opening_line(result: dict[str, Any]) -> str:
    store = _short(result["store"], PATH_CHARS_MAX)
    shown = len(result["included"])
    scope = _scope_words(result)
    head = result.get("head") or {}
    newest = f"; newest record #{head['seq']} at {head['ts']}" if head.get("seq") and head.get("ts") else ""
    of = f" of {result['eligible']}" if result.get("exact") else ""
    return (
        f"Memory brief from retained ({store}{newest}): {shown}{of} records{scope} shown, "
        f"checkpoints first, then newest first, about {result['tokens']} tokens (estimate: UTF-8 bytes / 4)."
    )


def closing_line(result: dict[str, Any]) -> str:
    d = result["dropped"]
    total = sum(d.values())
    parts = []
    if d["over_budget"]:
        where = (f"past the output cap of {OUTPUT_BYTES_MAX} bytes" if result.get("limit") == "output_cap"
                 else f"past the {result['budget']}-token budget")
        parts.append(f"{d['over_budget']} {where}")
    parts += [f"{d[why]} {why}" for why in ("superseded", "retracted") if d[why]]
    if d["unreadable"]:
        parts.append(f"{d['unreadable']} unreadable (the index points at lines that no longer hold them)")
    pulled = result.get("pulled") or []
    past = result.get("pulled_skipped") or {"stores": 0, "records": 0}
    theirs = sum(int(p.get("not_read") or 0) for p in pulled) + int(past["records"])
    mine = d["not_read"] - theirs
    if mine:
        idx = result.get("index") or {}
        why = idx.get("reason") or "no index"
        parts.append(
            f"{mine} older (#1-#{mine}) not read ({why}); that count includes any superseded, "
            "retracted, bookkeeping or other-scope records among them"
        )
    if theirs:
        parts.append(f"{theirs} records of pulled stores not read (see the pulled stores below; a pulled store is read "
                     "whole through its index, which the first `retained search` after a pull builds); that count is "
                     "an upper bound")
    if total == 0 and result["eligible"] == 0:
        line = f"Not shown: 0 records; the store holds no records{_scope_words(result)} to show."
    elif total == 0:
        line = f"Not shown: 0 records; all {result['eligible']} eligible records are above."
    else:
        counts = "exact" if result.get("exact") else "exact for the part of the log read"
        line = f"Not shown: {_plural(total, 'record')}: " + ", ".join(parts) + f" (counts {counts})."
    if result.get("exact") is False and d["not_read"] == 0:
        line += " Older records were not read; their number is not known."
    cut = [e["seq"] for e in result["included"] if e.get("cut")]
    if cut:
        line += f" Record #{cut[0]} is cut to fit (marked [cut])."
    skipped = result.get("skipped") or {}
    bad = skipped.get("foreign", 0) + skipped.get("damaged", 0)
    if bad == 1:
        line += " 1 line of the part of the log read is not a valid record and was skipped."
    elif bad:
        line += f" {bad} lines of the part of the log read are not valid records and were skipped."
    if pulled:
        # The stores read are named; those skipped only counted (the line stays short: the hook's output is capped).
        named = [_pulled_part(p) for p in pulled]
        if past["stores"]:
            named.append(f"{past['stores']} more not read (the brief reads the {len(pulled)} pulled last)")
        line += (" Records of other stores, pulled by `retained sync`, are marked from=MACHINE/STOREID8 (their seqs are "
                 "their store's: `retained get SEQ --from STOREID8`): " + ", ".join(named) + ".")
    return line


def _pulled_part(p: dict[str, Any]) -> str:
    name = f"{_short(str(p['machine']), PULLED_NAME_CHARS)}/{str(p['store_id'])[:8]} (#1-#{p['seq']}"
    if p.get("error"):
        return f"{name}, not read: {_short(p['error'], PULLED_ERROR_CHARS)})"
    return f"{name}, {p.get('shown', 0)} shown)"


def render_text(result: dict[str, Any]) -> str:
    """The brief as text: an opening line, the records, a closing line (no final newline).

    A store that is absent, empty or unreadable gives one line.
    """
    if result["status"] != "ok":
        return f"retained memory: {result['message']}."
    blocks = [render_block(e) for e in result["included"]]
    first = []
    if result.get("last_session"):
        from retained.brief import last_session

        first.append(last_session.render(result["last_session"]))
    return "\n".join([*first, opening_line(result), *blocks, closing_line(result)])


def parse_args(argv: list[str]) -> dict[str, Any] | None:
    """The options of ``retained brief`` (the words after ``brief``), or None when argparse must handle them.

    The brief runs at every session start, where importing and building the
    full command line costs more than the brief itself. Only ``--budget N``
    (digits), ``--scope S``, ``--format text|claude|json``, ``--dir D`` (each
    also as ``--opt=value``), ``--all-scopes`` and ``--json`` are taken; anything else (help,
    an unknown or malformed option) returns None. Returns ``{"dir", "json",
    "all_scopes", "budget", "scope", "format"}`` with argparse's defaults; a test checks the
    two agree.
    """
    values: dict[str, Any] = {"dir": None, "json": False, "all_scopes": False, "budget": None, "scope": None,
                              "format": "text"}
    args = iter(argv)
    for arg in args:
        name, eq, value = arg.partition("=")
        key = name[2:] if name.startswith("--") else ""
        if key in ("json", "all-scopes") and not eq:
            values[key.replace("-", "_")] = True
            continue
        if key not in ("budget", "scope", "format", "dir"):
            return None
        if not eq:
            value = next(args, "-")  # the option's value; a missing one, or another option, is argparse's to report
            if value.startswith("-"):
                return None
        values[key] = value
    if values["budget"] is not None:
        if not values["budget"].isdigit():
            return None
        values["budget"] = int(values["budget"])
    if values["format"] not in ("text", "claude", "json") or (values["all_scopes"] and values["scope"] is not None):
        return None
    return values


def output(result: dict[str, Any], form: str) -> bytes:
    """What a command prints for ``result``: ``text``, ``claude`` (the hook JSON) or ``json``, with a final newline."""
    if form == "json":
        return _dumps(result).encode() + b"\n"
    if form == "claude":
        return _dumps(hook_output(render_text(result))).encode() + b"\n"
    return render_text(result).encode("utf-8", "replace") + b"\n"


def hook_output(text: str) -> dict[str, Any]:
    """The JSON a Claude Code SessionStart hook prints to add ``text`` as context."""
    return {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}


__all__ = [
    "DEFAULT_BUDGET",
    "OUTPUT_BYTES_MAX",
    "build_brief",
    "estimate_tokens",
    "hook_output",
    "output",
    "parse_args",
    "render_text",
    "unavailable",
]
