"""Ranked search over the index, with honest accounting (invariant I2).

bm25, then a bounded re-rank of the best 50 (`Ranking`): docs/retrieval.md.
Every reply accounts for what it matched (I2): ``returned +
sum(left_out.values()) == total_matches``. Also here: the records around each
result (`attach_context`) and the earlier records a new one may correct
(`related`). `Search` is a part of ``writer.Index`` (its ``searcher``), which
supplies the connection, its lock, catch-up and the checked reads from the log.
"""

from __future__ import annotations

import functools
import math
import queue
import sqlite3
import threading
from bisect import bisect_left, bisect_right
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import zip_longest
from typing import TYPE_CHECKING, Any, Protocol, cast

from retained import limits
from retained.core import record
from retained.core.log import make_line
from retained.errors import InvalidRecord, InvariantBroken
from retained.index import query
from retained.index.documents import cut_to_fit, estimate_tokens, replies, turn
from retained.index.schema import BOOKKEEPING_KINDS, Filter, links_of, read_mark, transaction

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from retained.core.log import Log
    from retained.replies import ContextCount, Entry, Found, Links

# Column weights for bm25 (text, body, fields). Measured on LoCoMo with
# harness/eval_locomo.py: weights between 0.3 and 3 move recall@5 by under
# 0.01, so the columns count alike.
WEIGHTS = (1.0, 1.0, 1.0)
K_MAX = 1000  # results one search may return; more is a listing, not a search
CONTEXT_MAX = limits.CONTEXT_MAX
RELATED_MAX = 3  # earlier records a write's reply names as ones it may correct
RELATED_CHARS = 160  # of each one's text in the reply
# A write's related-records step (`Search.related`) runs after the ack but
# before the reply, so its work is bounded whatever the write holds: these
# bounds and why are in docs/retrieval.md ("A write names what it may correct").
RELATED_TERMS = 16  # content words looked up: the first of the text's first RELATED_TEXT_CHARS characters
RELATED_TEXT_CHARS = limits.RELATED_TEXT_CHARS
RELATED_TERM_ROWS = 32  # earlier rows a word matches at most to count as rare (a common word says nothing of the subject)
RELATED_COMMON_MAX = 1 << 14  # common words remembered per index (past that, counted again each time)
# Records a process's related steps compare in memory before the index must
# catch up with them (`_Recent`): the catch-up then indexes them in one go,
# and the terms' rows remembered (`_Recent.rows_of`) are looked up again.
# Not more: a term common among them but not yet in the index would count as
# rare (at 1024, LoCoMo writes name earlier records half as often again).
RELATED_RECENT_MAX = 256
RELATED_IN_FLIGHT = 64  # concurrent writes of a process: an unseen record this close behind is one whose step has not begun
RELATED_CATCH_UP_BYTES = 1024 * 1024  # a longer backlog of unindexed lines is left to the next read (another's 4 MB record)
WORKER_IDLE_S = 1.0  # the related step's look-ahead thread ends after this long without a write (`_Worker`)
# bm25 scores every row a term matches, so ranking every row that shares one
# common word with a question is slow at 100k records (a name or "new" in
# thousands of rows): the rows ranked are those of the rarest terms, while
# their matches add up to this (docs/retrieval.md, step 2; a commoner term's
# bm25 weight is the smallest in the query anyway).
RANK_ROWS_MAX = 2000
# The bm25 top RERANK_N re-ranked, COVERAGE_WEIGHT per distinct query term a record contains (docs/retrieval.md, step 3).
RERANK_N = 50
COVERAGE_WEIGHT = 2.0
NEAR = 2  # seqs either side of a candidate read at once to find its neighbours in its scope


@dataclass(frozen=True)
class Ranking:
    """The re-ranking steps after bm25, each with its weight (0, or 1.0 for a factor, turns a step off).

    Each step and why: docs/retrieval.md ("How a search runs", its steps
    named below). The defaults were chosen on half of the LoCoMo
    conversations and reported on the other half (harness/eval_locomo.py).
    """

    coverage_weight: float = COVERAGE_WEIGHT  # added per distinct query term a record contains
    rerank_n: int = RERANK_N  # bm25 candidates re-ranked
    reply_credit: float = 0.7  # share of an asking turn's score its answer (the other speaker's next turn) gains
    prev_credit: float = 0.2  # share of a turn's score the other speaker's turn before it gains
    name_factor: float = 0.25  # share of a term a speaker's name counts in a turn someone else says
    recency_band: float = 0.4  # a newer record on the same subject may score this share less and still go first
    rarity: float = 1.0  # each term's share of the coverage is its idf to this power, scaled (0: every term alike; step 3)
    session_credit: float = 0.3  # share of the best score among the candidate turns near it a turn gains (step 4)
    session_window: int = 10  # seqs either side of a turn that are near it


RANKING = Ranking()
# The flagged records (superseded, retracted or redacted) a MATCH finds, walked from the few flagged rows.
_FLAGGED_MATCHES = (" FROM records AS m INDEXED BY records_flagged CROSS JOIN fts ON fts.rowid = m.seq"
                    " WHERE (m.superseded OR m.retracted OR m.redacted) AND fts MATCH ?")


class _Candidate:
    """One record being re-ranked: its row, its score (higher is better), whether it matched, its turn."""

    __slots__ = ("_words", "asks", "good", "matched", "row", "scope", "text", "turn")

    def __init__(self, row: tuple[Any, ...], good: float, matched: bool | None = True) -> None:
        self.row = row
        self.good = good
        self.matched = matched
        self.turn: tuple[str, Any] | None = None
        self.asks = False
        self.scope: Any = None
        self.text = ""
        self._words: frozenset[str] | None = None

    @property
    def words(self) -> frozenset[str]:
        """The record's subject words (`query.subject`), computed when first compared."""
        if self._words is None:
            self._words = query.subject(self.text)
        return self._words


class _Weigher:
    """The coverage score of a record: ``coverage_weight`` per distinct query term it contains.

    Each term counts its share (`shares`: by rarity, 1.0 each when not
    given); a speaker's name counts ``name_factor`` of that in a turn
    someone else says (docs/retrieval.md, step 4).
    """

    def __init__(self, terms: list[str], cover: dict[int, set[int]], ranking: Ranking, speakers: list[str],
                 shares: list[float] | None = None) -> None:
        self.cover = cover
        self.shares = shares or [1.0] * len(terms)
        self.weight = ranking.coverage_weight
        self.factor = ranking.name_factor
        self.spoken: dict[str, frozenset[int]] = {}  # speaker -> indexes of the query terms naming them
        for name in speakers:
            if name not in self.spoken:
                words = set(query.terms(name, stop_words=frozenset()))
                self.spoken[name] = frozenset(i for i, term in enumerate(terms) if term in words)
        self.names = frozenset().union(*self.spoken.values()) if self.spoken else frozenset()

    def __call__(self, seq: int, turn: tuple[str, Any] | None) -> float:
        got = self.cover.get(seq)
        if not got:
            return 0.0
        share = self.shares
        if not self.names or self.factor == 1.0:
            return self.weight * sum(share[i] for i in got)
        own = self.spoken.get(turn[0], frozenset()) if turn else frozenset()
        return self.weight * sum(share[i] * (self.factor if i in self.names and i not in own else 1.0) for i in got)


def shares(counts: list[int], rows: int, power: float) -> list[float] | None:
    """Each term's share of the coverage: its idf (as bm25 computes it) to ``power``, scaled to add up to the terms.

    ``counts`` are the rows each term matches, ``rows`` the rows in the
    index. None (every term alike) for fewer than two terms or ``power`` 0.

    >>> [round(x, 2) for x in shares([300, 3], 600, 1.0)]
    [0.24, 1.76]
    """
    if len(counts) < 2 or not power:
        return None
    idf = [math.log((max(rows, n) - n + 0.5) / (n + 0.5) + 1.0) ** power for n in counts]
    total = sum(idf)
    return [len(idf) * x / total for x in idf]


def _session_gain(cand: dict[int, _Candidate], credit: float, window: int) -> None:
    """Give each candidate turn ``credit`` of the best score among the other candidate turns near it, in place.

    Near: the same scope, at most ``window`` seqs away, and the same
    session when both name one. Scores are read before any gain, so the
    order of the walk does not matter; each turn looks only at the
    candidates within its window, so the step is bounded by the candidates
    times the window.
    """
    turns = sorted(((c, t[1]) for c in cand.values() if (t := c.turn) is not None and c.good > 0),
                   key=lambda pair: pair[0].row[0])
    seqs = [c.row[0] for c, _ in turns]
    before = [c.good for c, _ in turns]
    for i, (c, session) in enumerate(turns):
        best = 0.0
        for j in range(bisect_left(seqs, seqs[i] - window), bisect_right(seqs, seqs[i] + window)):
            o, other = turns[j]
            if j != i and o.scope == c.scope and (session is None or other is None or session == other):
                best = max(best, before[j])
        c.good += credit * best


def _newer_first(ranked: list[_Candidate], band: float, limit: int) -> list[_Candidate]:
    """The first ``limit`` of the ranking, each record put above older records on its subject that score about as well.

    The rule (an older record, the same speaker, `query.same_subject`,
    ``band`` a share of the older one's score) and why: docs/retrieval.md,
    step 5. A record can only enter the first ``limit`` by moving above one
    of them, so only those are compared.
    """
    out: list[_Candidate] = []
    for c in ranked:
        at = len(out)
        for i, o in enumerate(out[:limit]):
            if (o.row[0] < c.row[0] and c.good >= o.good - band * abs(o.good)
                    and (o.turn and o.turn[0]) == (c.turn and c.turn[0])
                    and query.same_subject(o.words, c.words)):
                at = i
                break
        out.insert(at, c)
    return out[:limit]


class _Index(Protocol):
    """What `Search` uses of ``writer.Index`` (named here: the writer imports this module)."""

    log: Log
    busy_timeout_s: float
    ranking: Ranking

    @property
    def lock(self) -> threading.RLock: ...
    def connection(self) -> sqlite3.Connection: ...
    def catch_up(self, *, on_replaced: str = "rebuild", stop: int | None = None) -> dict[str, Any]: ...
    def read_rows(self, rows: Iterable[tuple[int, int, int, str]]) -> Iterator[Entry | None]: ...


class Search:
    """Search over one `Index`: `ranked`, `search`, `attach_context`, `related`, `empty_reply` and their helpers."""

    def __init__(self, index: _Index) -> None:
        self.index = index
        self.log = index.log
        self._mutex = index.lock
        self.busy_timeout_s = index.busy_timeout_s
        self.connection, self.catch_up = index.connection, index.catch_up
        self._related_recent = _Recent()  # see `related`
        self._related_worker = _Worker()  # see `look_ahead`

    @property
    def ranking(self) -> Ranking:
        return self.index.ranking

    def _ranked_rows(self, expr: str, limit: int, shown: Filter) -> list[tuple[int, float, int, int, str]]:
        w = ", ".join(str(x) for x in WEIGHTS)
        db = self.connection()
        if shown.scope is None:
            # Rank in FTS5 alone and drop hidden rows afterwards: asking for
            # as many extra rows as there are flagged matches guarantees
            # `limit` visible ones, and flagged records are few.
            extra = db.execute("SELECT count(*)" + _FLAGGED_MATCHES, (expr,)).fetchone()[0]
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
                if m is None or ((m[3] or m[4] or m[5]) and shown.hides(m[3], m[4], m[5])):
                    continue
                out.append((seq, score, m[0], m[1], m[2]))
                if len(out) == limit:
                    break
            return out
        cond, args = shown.where("m.")
        # The subquery with CROSS JOIN keeps SQLite from driving the join from
        # `records` and scanning the whole FTS5 table per row (DESIGN, "the
        # fast path").
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
        and_unscoped: bool = False,
        include_superseded: bool = False,
        include_retracted: bool = False,
        with_matched: bool = False,
    ) -> list[tuple[Any, ...]]:
        """The lexical ranking: ``[(seq, score)]``, best first (higher score is better).

        The hook for hybrid search, to fuse with a vector ranking. Does not
        catch up; call `catch_up` first. ``with_matched`` adds a third item,
        False for a reply no query word matched (it ranks through the turn it
        answers; the caller's accounting must count it).
        """
        found = query.terms(text)
        if not found or limit <= 0:
            return []
        with self._mutex:
            rows = self._top(found, " OR ".join(found), limit, Filter(
                scope=scope, and_unscoped=and_unscoped, include_superseded=include_superseded,
                include_retracted=include_retracted))
        return [(r[0], -r[1], r[5]) if with_matched else (r[0], -r[1]) for r in rows]

    def _rank_terms(self, found: list[str], budget: int = RANK_ROWS_MAX) -> tuple[list[str], list[str], list[int]]:
        """``(kept, matching, counts)``: the rarest terms whose matches add up to ``budget`` rows, all that match,
        and the rows each kept term matches (empty for a query of one term).

        Each term's match count is taken with a LIMIT, so a common term costs
        at most ``budget`` rows to recognise. The rarest term is always
        kept (its count may stop at that cap). ``found``: the query's terms (``query.terms``).
        """
        if len(found) <= 1:
            return found, found, []
        db = self.connection()

        def capped(term: str, cap: int) -> int:
            return db.execute(
                "SELECT count(*) FROM (SELECT rowid FROM fts WHERE fts MATCH ? LIMIT ?)", (term, cap)
            ).fetchone()[0]

        # A first pass with a quarter of the budget tells rare terms from
        # common ones cheaply; a term at that cap is counted further only if
        # what is left of the budget could still take it.
        first_cap = budget // 4 + 1
        sized = sorted((n, term) for term in found if (n := capped(term, first_cap)))
        if not sized:
            return [], [], []
        kept = [sized[0][1]]
        rows = sized[0][0] if sized[0][0] < first_cap else capped(sized[0][1], budget + 1)
        counts = [rows]
        for n, term in sized[1:]:
            if n >= first_cap:
                left = budget - rows
                if left < first_cap:
                    break
                n = capped(term, left + 1)
            if rows + n > budget:
                break
            kept.append(term)
            counts.append(n)
            rows += n
        return kept, [term for _, term in sized], counts

    def _top(
        self, found: list[str], expr: str, limit: int, shown: Filter, subjects: dict[str, frozenset[str]] | None = None,
    ) -> list[tuple[int, float, int, int, str, bool]]:
        """The best `limit` visible rows, best first: ``(seq, score, offset, length, hash, matched)``.

        bm25 over the rows with a rare term, then re-ordered (`Ranking`):
        coverage, then the conversation, then recency. Scores are
        lower-is-better, like bm25. ``matched`` is False for a reply that
        reached the list only through the turn it answers. ``found``: the
        query's terms, ``expr`` their OR; ``shown``: the rows admitted; ``subjects`` as in `search`.
        """
        r = self.ranking
        terms, matching, counts = self._rank_terms(found)
        if len(terms) < len(matching):
            # Common terms were left out of the candidate set: rank the rows
            # that have a rare term, by bm25 over every term (the rare ones
            # count twice), which keeps recall where ranking the rare terms
            # alone loses it (harness/bench_search.py).
            rank_expr = "(" + " OR ".join(terms) + ") AND (" + " OR ".join(matching) + ")"
        else:
            rank_expr = " OR ".join(terms) if terms else expr
        rows = self._ranked_rows(rank_expr, max(limit, r.rerank_n), shown)
        if not rows:
            return []
        cand = {row[0]: _Candidate(row, -row[1]) for row in rows}
        talk = bool(r.reply_credit or r.prev_credit or r.name_factor != 1.0)
        if talk or r.recency_band:
            self._read_into(list(cand.values()))
            talk = talk and any(c.turn for c in cand.values())
        # With turns among the candidates, their neighbours may join: the
        # coverage of the seqs around each candidate is counted in the same pass.
        near = NEAR if talk and (r.reply_credit or r.prev_credit) else 0
        cover = self._cover(terms, {s + d for s in cand for d in range(-near, near + 1)})
        share = None
        if r.rarity and len(counts) > 1:
            share = shares(counts, self.connection().execute("SELECT max(seq) FROM records").fetchone()[0] or 0,
                           r.rarity)
        weigh = _Weigher(terms, cover, r, [c.turn[0] for c in cand.values() if c.turn], share)
        for seq, c in cand.items():
            c.good += weigh(seq, c.turn)
        if near:
            self._neighbours(cand, weigh, shown)
        if talk and r.session_credit:
            _session_gain(cand, r.session_credit, r.session_window)
        ranked = sorted(cand.values(), key=lambda c: (-c.good, -c.row[0]))
        top = _newer_first(ranked, r.recency_band, limit) if r.recency_band else ranked[:limit]
        if subjects is not None:
            subjects.update((c.text, c._words) for c in top if c._words is not None)
        db = self.connection()
        for c in top:
            if c.matched is None:  # a neighbour none of the rare terms matched: does any term?
                c.matched = db.execute("SELECT 1 FROM fts WHERE fts MATCH ? AND rowid = ?",
                                       (expr, c.row[0])).fetchone() is not None
        return [(c.row[0], -c.good, *c.row[2:5], bool(c.matched)) for c in top]

    def _cover(self, terms: list[str], ids: set[int]) -> dict[int, set[int]]:
        """For each of ``ids`` that contains a term, the indexes into ``terms`` of the terms it contains."""
        cover: dict[int, set[int]] = {}
        if not ids or not terms:
            return cover
        db = self.connection()
        lo, hi = min(ids), max(ids)
        for i, term in enumerate(terms):
            # A rowid range, not `rowid IN (...)`: FTS5 re-runs the whole
            # MATCH for each IN value. The terms here were kept because they
            # match few rows, so the range is cheap; its rows come as one
            # string, intersected with ``ids`` without a Python step per row.
            rows = db.execute(
                "SELECT group_concat(rowid) FROM fts WHERE fts MATCH ? AND rowid BETWEEN ? AND ?", (term, lo, hi)
            ).fetchone()[0]
            for rowid in ids.intersection(map(int, rows.split(","))) if rows else ():
                cover.setdefault(rowid, set()).add(i)
        return cover

    def _neighbours(self, cand: dict[int, _Candidate], weigh: _Weigher, shown: Filter) -> None:
        """Read each candidate turn with its neighbours in its scope (issue 18), in place.

        ``reply_credit`` and ``prev_credit`` pass from a turn to the other
        speaker's turn after or before it (docs/retrieval.md, step 4). A
        neighbour that gains joins the candidates, scored by the query terms
        it contains; one ``shown`` hides (`Filter.hides`) does not.
        """
        r = self.ranking
        db = self.connection()
        turns = [c for c in cand.values() if c.turn is not None and c.good > 0]
        if not turns:
            return
        # One read of every record within NEAR seqs of a turn: a conversation
        # is usually written in order, so a turn's neighbours in its scope
        # are among them; a scope interleaved with others falls back to a
        # query per turn.
        near = {c.row[0] + d for c in turns for d in range(-NEAR, NEAR + 1)}
        places = {row[0]: row[1:] for row in db.execute(
            "SELECT seq, scope, offset, length, hash, superseded, retracted, redacted FROM records"
            f" WHERE seq IN ({','.join(str(x) for x in sorted(near))})"
        )}
        fresh: dict[int, _Candidate] = {}

        def neighbour(seq: int, step: int) -> _Candidate | None:
            scope = places[seq][0]
            found = next((x for x in range(seq + step, seq + step * (NEAR + 1), step)
                          if x in places and places[x][0] == scope), None)
            if found is None and (seq + step * NEAR) in places:
                row = db.execute(
                    "SELECT seq, scope, offset, length, hash, superseded, retracted, redacted FROM records"
                    + (" WHERE scope IS ? AND seq > ? ORDER BY seq LIMIT 1" if step > 0
                       else " WHERE scope IS ? AND seq < ? ORDER BY seq DESC LIMIT 1"),
                    (scope, seq),
                ).fetchone()
                if row is not None:
                    found = row[0]
                    places[found] = row[1:]
            if found is None:
                return None
            got = cand.get(found) or fresh.get(found)
            if got is None:
                _scope, offset, length, h, sup, ret, red = places[found]
                if shown.hides(sup, ret, red):
                    return None
                got = fresh[found] = _Candidate((found, 0.0, offset, length, h), 0.0, None)
            return got

        pairs = [(c, neighbour(c.row[0], 1) if c.asks and r.reply_credit else None,
                  neighbour(c.row[0], -1) if r.prev_credit else None) for c in turns]
        self._read_into(list(fresh.values()))
        gains: dict[int, float] = {}
        for c, answer, before in pairs:
            if answer is not None and replies(c.turn, answer.turn):
                gains[answer.row[0]] = gains.get(answer.row[0], 0.0) + r.reply_credit * c.good
            if before is not None and not before.asks and replies(before.turn, c.turn):
                gains[before.row[0]] = gains.get(before.row[0], 0.0) + r.prev_credit * c.good
        for seq, gain in gains.items():
            got = cand.get(seq)
            if got is None:
                got = cand[seq] = fresh[seq]
                got.good = weigh(seq, got.turn)
                if weigh.cover.get(seq):
                    got.matched = True
            got.good += gain

    def _read_into(self, found: list[_Candidate]) -> None:
        """Read candidates' records: each one's turn (speaker, session), whether it asks, its text.

        Read for ranking only: a result is still read and checked against
        its hash before it is returned. An unreadable line ranks as a note.
        """
        for c, raw in zip(found, self.log.read_many([(c.row[2], c.row[3]) for c in found]), strict=True):
            try:
                rec = record.orjson.loads(raw)
            except ValueError:
                continue
            text = rec.get("text") if type(rec) is dict else None
            if type(text) is str:
                c.turn = turn(rec)
                c.scope = rec.get("scope")
                c.asks = "?" in text
                c.text = text

    def _count(self, expr: str, shown: Filter) -> tuple[int, int, int, int]:
        """(matches, superseded only, retracted only, both) among unredacted records of ``shown``'s scope.

        Redacted records are not matches: their words are gone from the log.
        Counting joins only the flags, never ranks: far cheaper than bm25.
        """
        db = self.connection()
        if shown.scope is None:
            # Count in FTS5 alone (no join per row) and look only at the few
            # flagged records, instead of joining every match to `records`.
            total = db.execute("SELECT count(*) FROM fts WHERE fts MATCH ?", (expr,)).fetchone()[0]
            red, sup, ret, both = db.execute(
                "SELECT coalesce(sum(m.redacted), 0),"
                " coalesce(sum(NOT m.redacted AND m.superseded AND NOT m.retracted), 0),"
                " coalesce(sum(NOT m.redacted AND m.retracted AND NOT m.superseded), 0),"
                " coalesce(sum(NOT m.redacted AND m.superseded AND m.retracted), 0)" + _FLAGGED_MATCHES,
                (expr,),
            ).fetchone()
            return int(total) - int(red), int(sup), int(ret), int(both)
        cond, args = Filter(scope=shown.scope, and_unscoped=shown.and_unscoped).where("m.")
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
        k: int = limits.SEARCH_K_DEFAULT,
        max_tokens: int | None = None,
        scope: str | None = None,
        and_unscoped: bool = False,
        include_superseded: bool = False,
        include_retracted: bool = False,
        context: int = 0,
        subjects: dict[str, frozenset[str]] | None = None,
    ) -> Found:
        """Ranked records for ``text`` with the I2 accounting.

        Returns ``{"query", "results", "total_matches", "returned",
        "left_out", "tokens", "index"}`` where ``returned +
        sum(left_out.values()) == total_matches`` always; what each
        ``left_out`` key counts, and each result's fields, are in
        docs/search.md ("Honest accounting"). ``total_matches`` counts the records the query matched plus any reply
        that reached the top k only through the turn it answers (see
        `Ranking`), so the sum holds in both cases.

        With ``context`` N > 0 each result also carries ``context``: up to N
        records of its scope next to it (see `attach_context`), and the reply
        a ``context`` count of what was included and what the budget left out.

        ``subjects`` gains the ranking's subject words of the results, by text
        (for ``corrections.newer_first``). ``scope`` and ``and_unscoped``: `Filter`'s.

        Raises:
            InvalidRecord: the query is not a string, or k / max_tokens is out of range.
        """
        check_search_args(text, k, max_tokens, context)
        caught = self.catch_up()
        found = query.terms(text)
        expr = " OR ".join(found) if found else None  # query.build's expression, from the terms _top needs too
        total = hidden_sup = hidden_ret = 0
        top: list[tuple[int, float, int, int, str, bool]] = []
        shown = Filter(scope=scope, and_unscoped=and_unscoped, include_superseded=include_superseded,
                       include_retracted=include_retracted)
        if expr is not None:
            with self._mutex, transaction(self.connection()):  # one snapshot for the count and the ranking
                total, sup_only, ret_only, both = self._count(expr, shown)
                hidden_sup = 0 if include_superseded else sup_only + (both if include_retracted else 0)
                hidden_ret = 0 if include_retracted else ret_only + both
                if total - hidden_sup - hidden_ret > 0 and k > 0:
                    top = self._top(found, expr, k, shown, subjects)
        total += sum(1 for row in top if not row[5])  # replies that no query word matched
        visible = total - hidden_sup - hidden_ret
        results: list[Entry] = []
        used = over_budget = unreadable = 0
        read = self.index.read_rows((seq, offset, length, h) for seq, _, offset, length, h, _ in top)
        for _seq, score, *_ in top:
            if over_budget:
                over_budget += 1
                continue
            entry = next(read)
            if entry is None:
                unreadable += 1
                continue
            cost = estimate_tokens(entry["record"])
            if max_tokens is not None and used + cost > max_tokens:
                # The best result alone is over the budget: it comes back as an excerpt around the query's words.
                cut = None if results else cut_to_fit(entry, max_tokens, text)
                if cut is None:
                    over_budget += 1
                    continue
                cost = cut
            used += cost
            entry["score"] = -score  # lower-is-better inside; report higher-is-better
            entry["tokens"] = cost
            results.append(entry)
        self.add_links(results)
        left_out = {
            "beyond_k": visible - len(top),
            "over_budget": over_budget,
            "superseded": hidden_sup,
            "retracted": hidden_ret,
            "unreadable": unreadable,
        }
        if len(results) + sum(left_out.values()) != total:
            raise InvariantBroken(f"search: {len(results)} returned + {left_out} left out != {total} matched (I2)")
        reply: Found = {
            "query": expr or "",
            "results": results,
            "total_matches": total,
            "returned": len(results),
            "left_out": left_out,
            "tokens": used,
            "index": caught,
        }
        if context:
            reply["context"] = self.attach_context(results, context, max_tokens, used,
                                                   include_superseded=include_superseded,
                                                   include_retracted=include_retracted)
            reply["tokens"] += reply["context"]["tokens"]
        return reply

    def attach_context(
        self,
        results: list[Entry],
        n: int,
        max_tokens: int | None,
        used: int,
        *,
        include_superseded: bool = False,
        include_retracted: bool = False,
    ) -> ContextCount:
        """Give each result ``context``: up to ``n`` records of its scope around it, nearest first, in place.

        Which records, in what order, and how they are charged:
        docs/retrieval.md ("Results with their context"); ``used``: the
        tokens the results took, context being charged in rank order after
        them. Returns ``{"asked", "included", "tokens", "over_budget"}``.
        """
        cond, args = Filter(include_superseded=include_superseded, include_retracted=include_retracted).where()
        seen = {r["seq"] for r in results}
        # The records next to each result in its scope, then one read of the
        # log for every one that can be taken: the first n of each as if
        # every earlier one were taken (taking fewer only leaves more of
        # those already read).
        nearest_of = []
        with self._mutex:
            db = self.connection()
            for entry in results:
                scope = entry["record"].get("scope") if isinstance(entry.get("record"), dict) else None
                sides = [db.execute(
                    f"SELECT seq, offset, length, hash FROM records WHERE scope IS ? AND seq {op} ? AND {cond}"
                    f" ORDER BY seq {order} LIMIT ?", (scope if type(scope) is str else None, entry["seq"], *args,
                                                       n + len(results)),
                ).fetchall() for op, order in (("<", "DESC"), (">", "ASC"))]
                nearest_of.append([row for pair in zip_longest(*sides) for row in pair
                                   if row is not None and row[0] not in seen])
        first: dict[int, tuple[int, int, int, str]] = {}
        for nearest in nearest_of:
            first.update((row[0], row) for row in [row for row in nearest if row[0] not in first][:n])
        read = dict(zip(first, self.index.read_rows(first.values()), strict=True))
        included = tokens = over_budget = 0
        for entry, nearest in zip(results, nearest_of, strict=True):
            got: list[Entry] = []
            for row in [row for row in nearest if row[0] not in seen][:n]:
                near = read[row[0]]
                if near is None:
                    continue
                cost = estimate_tokens(near["record"])
                if max_tokens is not None and used + tokens + cost > max_tokens:
                    over_budget += 1
                    continue
                seen.add(row[0])
                near["tokens"] = cost
                tokens += cost
                got.append(near)
            entry["context"] = sorted(got, key=lambda e: e["seq"])
            included += len(got)
        return {"asked": n, "included": included, "tokens": tokens, "over_budget": over_budget}

    def related(
        self, seq: int, text: str, *, scope: str | None = None, limit: int = RELATED_MAX, before: int | None = None,
        ts: str | None = None, links: bool = False, concurrent: bool = False,
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` earlier visible records of ``scope`` that look like the subject of ``text`` (record ``seq``).

        For a write's reply, after its acknowledgement: records it may
        correct, so the writer can decide to supersede them. Each is
        ``{"seq", "ts", "text"}``, most shared words first, newest first, the
        text cut to ``RELATED_CHARS`` characters. The step and its bounds:
        docs/retrieval.md ("A write names what it may correct"); its two
        statements are `_hits_sql` and `_CANDIDATES_SQL`, its test
        `_same_subject`, what it keeps between calls `_Recent`.

        ``ts``: the new record's time, kept for the later steps that compare
        it in memory. ``before``: the new record's offset, where a catch-up
        for the step stops (`catch_up_now`). ``links``: the record names
        others (it supersedes some), so the index must read it before the
        next step answers. ``concurrent``: other writes of this process are
        under way (`_Recent.covers`).
        """
        recent = self._related_recent
        if not links:
            recent.expect(seq, scope)
        if limit <= 0:
            return []
        with self._mutex:
            words = recent.terms_of(text)
            terms = [t for t in words if t not in recent.common]
            db = self.connection()
            top, rows = recent.rows_of(db, terms, seq)
            if not recent.covers(top, seq, concurrent) and self._backlog(db, before) <= RELATED_CATCH_UP_BYTES:
                self.catch_up_now(stop=before)
                recent.clear()
                top, rows = recent.rows_of(db, terms, seq)
            key = (tuple(words), scope, top)
            if recent.ahead is not None and recent.ahead[0] == key:
                _, rare, found, known = recent.ahead  # looked up ahead, the index unchanged since
            else:
                rare, found = self._from_index(db, recent, terms, rows, scope)
                known = {}
            recent.ahead = None
            found = found + recent.compare(rare, scope)
            chosen = [f for _, _, f in sorted(found, key=lambda x: (-x[0], -x[1]))[:limit]]
            recent.add(seq, rare, len(words), _Found(seq, ts, _cut(text[: RELATED_CHARS + 1]), None), scope, links)
        texts = {**known, **self._texts([f for f in chosen if f.place is not None and f.seq not in known])}
        out = []
        for f in chosen:
            said = f.text if f.place is None else texts.get(f.seq)
            if said is not None:
                out.append({"seq": f.seq, "ts": f.ts, "text": _cut(said)})
        return out

    def _from_index(self, db: sqlite3.Connection, recent: _Recent, terms: list[str], rows: list[tuple[int, ...]],
                    scope: str | None) -> tuple[list[str], list[tuple[int, int, _Found]]]:
        """``(the rare terms, (shared, seq, found) for each indexed record on their subject)``, from each term's rows."""
        shared: dict[int, int] = {}
        rare = []
        for term, got in zip(terms, rows, strict=True):
            if len(got) >= RELATED_TERM_ROWS:
                recent.learn(term)
            else:
                rare.append(term)
                for r in got:
                    shared[r] = shared.get(r, 0) + 1
        found = []
        # At most RELATED_TERMS * RELATED_TERM_ROWS / 2 rows share two terms.
        best = [r for r, n in shared.items() if n >= 2]
        if best:
            for r in db.execute(_CANDIDATES_SQL, (f"[{','.join(map(str, best))}]", scope)):
                n = shared[r[0]]
                if _same_subject(n, len(rare), _words_of(r[5])):
                    found.append((n, r[0], _Found(r[0], r[1], None, r[2:5])))
        return rare, found

    def _texts(self, chosen: list[_Found]) -> dict[int, str | None]:
        """Each record's text from the log (one open file), None for a line that is not the record indexed."""
        if not chosen:
            return {}
        out: dict[int, str | None] = {}
        for f, raw in zip(chosen, self.log.read_many([(f.place[0], f.place[1]) for f in chosen if f.place]), strict=True):
            offset, _, h = f.place or (0, 0, "")
            line = make_line(offset, raw)
            said = line.record.get("text") if line.chained and line.seq == f.seq and line.hash == h else None
            out[f.seq] = said if type(said) is str else None
        return out

    def look_ahead(self, text: str, scope: str | None = None) -> Future[None]:
        """Look up the rows of ``text``'s terms for `related` on a worker thread, while its record is made durable.

        The terms' rows go to what the related steps remember
        (`_Recent.rows_of`, kept while the index does not change), so the
        step after the acknowledgement finds them there. It changes no
        answer, and gives way when another thread holds the index. The
        caller waits for it (or cancels it) before its write returns.
        """
        return self._related_worker.submit(self._look_ahead_now, text, scope)

    def _look_ahead_now(self, text: str, scope: str | None) -> None:
        recent = self._related_recent
        if not self._mutex.acquire(blocking=False):
            return
        try:
            words = recent.terms_of(text)
            db = self.connection()
            terms = [t for t in words if t not in recent.common]
            top, rows = recent.rows_of(db, terms, limits.SEQ_MAX)
            if recent.rows_top == top:
                rare, found = self._from_index(db, recent, terms, rows, scope)
                # The texts of those the step is likeliest to name: the most shared, the newest.
                likely = [f for _, _, f in sorted(found, key=lambda x: (-x[0], -x[1]))[:RELATED_MAX]]
                recent.ahead = ((tuple(words), scope, top), rare, found, self._texts(likely))
        except (sqlite3.Error, OSError):
            pass  # the step after the acknowledgement looks them up itself
        finally:
            self._mutex.release()

    def _backlog(self, db: Any, stop: int | None) -> int:
        """Bytes of the log before ``stop`` (its end when None) the index has not read yet."""
        return (self.log.size() if stop is None else stop) - read_mark(db).offset

    def catch_up_now(self, *, stop: int | None = None) -> dict[str, Any]:
        """`catch_up` for a writer's own follow-up work: without waiting for another process that holds the index
        (the index is then left as it is) and without rebuilding a replaced log (reported)."""
        with self._mutex:
            db = self.connection()
            db.execute("PRAGMA busy_timeout = 0")
            try:
                return self.catch_up(on_replaced="report", stop=stop)
            finally:
                db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")

    def add_links(self, entries: list[Entry]) -> None:
        """Give each entry its ``superseded_by`` / ``retracted_by`` / ``redacted_by``, in place (one query)."""
        if entries:
            with self._mutex:
                links = cast("dict[int, Links]", links_of(self.connection(), [e["seq"] for e in entries]))
            for entry in entries:
                entry.update(links.get(entry["seq"], {}))

    @staticmethod
    def empty_reply(text: str, *, k: int = limits.SEARCH_K_DEFAULT, max_tokens: int | None = None) -> Found:
        """The reply for a store with no log yet: nothing matched, nothing left out."""
        check_search_args(text, k, max_tokens)
        return {
            "query": query.build(text) or "",
            "results": [],
            "total_matches": 0,
            "returned": 0,
            "left_out": {"beyond_k": 0, "over_budget": 0, "superseded": 0, "retracted": 0, "unreadable": 0},
            "tokens": 0,
            "index": {"state": "absent", "indexed": 0},
        }


@functools.lru_cache(maxsize=RELATED_TERMS + 1)
def _hits_sql(n: int) -> str:
    """The related step's first statement, for ``n`` terms: one row, the index's highest seq and each term's rows.

    Parameters: each term and the new record's seq in turn. Each term's
    earlier rows (comma-separated), at most `RELATED_TERM_ROWS`: a term that
    reaches that is common and counts for nothing.
    """
    each = "".join(f", (SELECT group_concat(rowid) FROM (SELECT rowid FROM fts WHERE fts MATCH ? AND rowid < ?"
                   f" LIMIT {RELATED_TERM_ROWS}))" for _ in range(n))
    return f"SELECT (SELECT max(seq) FROM records){each}"


def _hits(db: sqlite3.Connection, terms: list[str], seq: int) -> tuple[Any, ...]:
    """`_hits_sql`'s row: the index's highest seq, then each term's rows before ``seq`` as a tuple of seqs."""
    row = db.execute(_hits_sql(len(terms)), [x for t in terms for x in (t, seq)]).fetchone()
    return (row[0], *(tuple(map(int, r.split(","))) if r else () for r in row[1:]))


# The second: of the rows sharing two rare terms or more (their seqs as a
# JSON list, the first parameter: one statement text, prepared once), those
# visible in the scope (the second), each with its place in the log (to read
# its text) and FTS5's count of its words (``fts_docsize``).
_CANDIDATES_SQL = (
    "SELECT m.seq, m.ts, m.offset, m.length, m.hash, d.sz FROM records AS m LEFT JOIN fts_docsize AS d ON d.id = m.seq"
    " WHERE m.seq IN (SELECT value FROM json_each(?)) AND m.scope IS ?"
    " AND NOT (m.superseded OR m.retracted OR m.redacted)"
    f" AND ifnull(m.kind, '') NOT IN ({', '.join(repr(k) for k in sorted(BOOKKEEPING_KINDS))})"
)


def _words_of(sizes: bytes | None) -> int:
    """A record's content words as the index counts them: FTS5's count of its text's words (``fts_docsize``,
    a varint per column), half of them taken for stop words."""
    words = 0
    for byte in sizes or b"":
        words = (words << 7) | (byte & 0x7F)
        if byte < 0x80:
            break
    return max(1, (words + 1) // 2)


def _same_subject(shared: int, mine: int, theirs: int) -> bool:
    """The related step's test, as `query.same_subject` makes it from both texts' words.

    ``shared`` rare terms in common, of the new record's ``mine``; ``theirs``:
    the old record's content words. At least two in common, and at least
    half of the shorter record's.
    """
    return shared >= 2 and 2 * shared >= min(mine, theirs)


def _cut(text: str) -> str:
    return text if len(text) <= RELATED_CHARS else text[: RELATED_CHARS - 1] + "…"


@dataclass(frozen=True)
class _Found:
    """A record the related step may name: its seq and time, and its text (from memory) or its place in the log."""

    seq: int
    ts: str | None
    text: str | None
    place: tuple[int, int, str] | None  # (offset, length, hash) to read it by


class _Recent:
    """What an index's related steps remember between calls (under the index's lock).

    ``common``: the terms found to match `RELATED_TERM_ROWS` rows or more,
    left out of later statements (at most `RELATED_COMMON_MAX`). ``rows``:
    each term's earlier rows in the index as last looked up (`rows_of`),
    while the index's highest seq stays ``rows_top`` (its rows cannot change
    below it without a new record above it; at most `RELATED_COMMON_MAX`
    terms). ``seen``:
    the records the steps saw since the index last caught up, with their
    rare terms, their count of content words and their scope, compared in
    memory with each new one (`compare`) until the index holds them (and
    those expected: their step has not run yet, `expect`).
    """

    def __init__(self) -> None:
        # Guards ``seen`` against `expect`, which runs without the index's lock.
        self.lock = threading.Lock()
        self.common: set[str] = set()
        self.last: tuple[str | None, list[str]] = (None, [])
        self.clear()

    def clear(self) -> None:
        """Forget all but ``common`` and ``last`` (the index caught up: it holds what was kept)."""
        with self.lock:
            self.seen: dict[int, tuple[frozenset[str], int, _Found | None, str | None]] = {}
            self.by_term: dict[str, list[int]] = {}
            # Bounds of the seqs in ``seen`` (a record dropped from it may leave them wider than it is).
            self.low, self.high = limits.SEQ_MAX, 0
            self.rows: dict[str, tuple[int, ...]] = {}
            self.rows_top: int | None = None
            # What a look-ahead found in the index for the next step (`Search.look_ahead`): its key (the words,
            # the scope, the index's highest seq), the rare terms, the records on their subject and their texts.
            self.ahead: tuple[tuple[Any, ...], list[str], list[tuple[int, int, _Found]], dict[int, str | None]] | None = None

    def learn(self, term: str) -> None:
        if len(self.common) < RELATED_COMMON_MAX:
            self.common.add(term)

    def terms_of(self, text: str) -> list[str]:
        """The terms the related step looks up for ``text`` (the last text's kept, for `Search.look_ahead`).

        The first words of a long text are enough to say what it is about,
        and reading no further keeps a 4 MB write as cheap here as a short one.
        """
        head = text if len(text) <= RELATED_TEXT_CHARS else text[:RELATED_TEXT_CHARS]
        if self.last[0] != head:
            self.last = (head, query.terms(head)[:RELATED_TERMS])
        return self.last[1]

    def rows_of(self, db: sqlite3.Connection, terms: list[str], seq: int) -> tuple[int, list[tuple[int, ...]]]:
        """``(the index's highest seq, each term's rows before seq)``: one statement (`_hits_sql`) for the terms not
        looked up since the index last changed (a second, for every term, when it just did)."""
        ask = [t for t in terms if t not in self.rows]
        got = _hits(db, ask, seq)
        top = got[0] or 0
        if top != self.rows_top or top >= seq:
            # The index changed since the rows were looked up (or holds this
            # record already, so that rows before seq are not all it holds).
            self.rows = {}
            self.rows_top = top if top < seq else None
            if len(ask) < len(terms):
                ask, got = terms, _hits(db, terms, seq)
                top = got[0] or 0
        found = dict(zip(ask, got[1:], strict=True))
        if self.rows_top is not None and top == self.rows_top:
            if len(self.rows) + len(found) > RELATED_COMMON_MAX:
                self.rows = {}
            self.rows.update(found)
        return top, [found[t] if t in found else self.rows[t] for t in terms]

    def expect(self, seq: int, scope: str | None) -> None:
        """Count record ``seq`` as seen before its step has run (without the index's lock: one dict operation).

        Concurrent writes of one process (the HTTP server's handlers) run
        their steps in any order; a step that finds an earlier one's record
        expected does not make the index catch up for it (it compares with
        it once its step has run). A step that finds a record neither seen
        nor expected (its step has not begun yet) catches up, which is only
        slower.
        """
        with self.lock:
            self.seen.setdefault(seq, (frozenset(), 0, None, scope))
            self.low, self.high = min(self.low, seq), max(self.high, seq)

    def covers(self, top: int, seq: int, concurrent: bool = False) -> bool:
        """Whether every record after the index's highest (``top``) and before ``seq`` is one seen here.

        Drops those the index now holds; False too when `RELATED_RECENT_MAX`
        wait. ``concurrent``: other writes of this process are under way.
        """
        with self.lock:
            seen = self.seen
            if seen and self.low <= top:
                self.seen = seen = {s: v for s, v in seen.items() if s > top}
                self.by_term = {}
                for s, (terms, _, _, _) in seen.items():
                    for t in terms:
                        self.by_term.setdefault(t, []).append(s)
                self.low, self.high = min(seen, default=limits.SEQ_MAX), max(seen, default=0)
            if len(seen) >= RELATED_RECENT_MAX:
                return False
            if top < self.low and self.high <= seq and len(seen) - (seq in seen) == seq - 1 - top:
                return True  # every seq between them seen (the one write of a process, in order)
            missing = next((s for s in range(top + 1, seq) if s not in seen), None)
            # With other writes of this process under way, a recent record
            # neither seen nor expected is likely one whose step has not
            # begun (it is compared with later ones once it has run); an
            # older one, or any when this write is alone, makes the index
            # catch up.
            return missing is None or (concurrent and seq - missing <= RELATED_IN_FLIGHT)

    def compare(self, rare: list[str], scope: str | None) -> list[tuple[int, int, _Found]]:
        """``(shared, seq, found)`` for each seen record of ``scope`` on the same subject as ``rare``."""
        shared: dict[int, int] = {}
        for t in rare:
            for s in self.by_term.get(t, ()):
                shared[s] = shared.get(s, 0) + 1
        out = []
        for s, n in shared.items():
            _, words, found, where = self.seen[s]
            if found is not None and where == scope and _same_subject(n, len(rare), words):
                out.append((n, s, found))
        return out

    def add(self, seq: int, rare: list[str], words: int, found: _Found, scope: str | None, links: bool) -> None:
        """Remember record ``seq`` until the index holds it; a record that links to others is not kept: the
        index must read it (to hide the records it supersedes) before the next step answers."""
        with self.lock:
            if links:
                self.seen.pop(seq, None)
                return
            self.seen[seq] = (frozenset(rare), words, found, scope)
            self.low, self.high = min(self.low, seq), max(self.high, seq)
            for t in rare:
                self.by_term.setdefault(t, []).append(seq)


class _Worker:
    """One thread that runs the jobs given it in turn, and ends after `WORKER_IDLE_S` without one.

    Not a lasting pool: a process with more than one thread makes its
    verify and rebuild workers by spawn rather than fork (``core.pool``).
    """

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Future[None], Callable[..., None], tuple[Any, ...]]] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def submit(self, job: Callable[..., None], *args: Any) -> Future[None]:
        done: Future[None] = Future()
        with self.lock:
            self.jobs.put((done, job, args))
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="retained-related", daemon=True)
                self.thread.start()
        return done

    def _run(self) -> None:
        while True:
            try:
                done, job, args = self.jobs.get(timeout=WORKER_IDLE_S)
            except queue.Empty:
                with self.lock:
                    if self.jobs.empty():
                        self.thread = None
                        return
                continue
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(job(*args))
                except BaseException as exc:  # noqa: BLE001 - handed to the caller, which waits for it
                    done.set_exception(exc)


def check_search_args(text: Any, k: Any, max_tokens: Any, context: Any = 0) -> None:
    """Refuse a query that is not a string, or k, max_tokens or context out of range (InvalidRecord)."""
    if not isinstance(text, str):
        raise InvalidRecord(f"field query: must be a string, got {type(text).__name__}", path="query")
    if type(k) is not int or not 0 <= k <= K_MAX:
        raise InvalidRecord(f"field k: must be a whole number from 0 to {K_MAX}, got {k!r}", path="k")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 0):
        raise InvalidRecord(f"field max_tokens: must be a whole number from 0, got {max_tokens!r}", path="max_tokens")
    if type(context) is not int or not 0 <= context <= CONTEXT_MAX:
        raise InvalidRecord(f"field context: must be a whole number from 0 to {CONTEXT_MAX}, got {context!r}",
                            path="context")
