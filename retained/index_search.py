"""Ranked search over the index, with honest accounting (invariant I2).

Search: bm25 over the text, the body and the string values of other caller
fields, with porter stemming over unicode61 (diacritics folded) and CJK runs
segmented into bigrams by ``query.segment``. Every reply accounts for what it
matched (invariant I2): ``returned + sum(left_out.values()) == total_matches``.

`Search` is mixed into ``index.Index``, which supplies the connection, its
lock, catch-up and the checked read of a record from the log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import query
from .documents import estimate_tokens
from .errors import InvalidRecord, InvariantBroken

if TYPE_CHECKING:
    import sqlite3
    import threading

# Column weights for bm25 (text, body, fields). Measured on LoCoMo with
# harness/eval_locomo.py: weights between 0.3 and 3 move recall@5 by under
# 0.01, so the columns count alike.
WEIGHTS = (1.0, 1.0, 1.0)
K_MAX = 1000  # results one search may return; more is a listing, not a search
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


class Search:
    """The search methods of ``Index``: `ranked`, `search`, `empty_reply` and their helpers."""

    if TYPE_CHECKING:
        # Supplied by Index.
        _mutex: threading.RLock

        def connection(self) -> sqlite3.Connection: ...
        def catch_up(self, *, on_replaced: str = "rebuild") -> dict[str, Any]: ...
        def links(self, seq: int) -> dict[str, list[int]]: ...
        def _read_checked(self, seq: int, offset: int, length: int, h: str) -> dict[str, Any] | None: ...

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
        if len(results) + sum(left_out.values()) != total:
            raise InvariantBroken(f"search: {len(results)} returned + {left_out} left out != {total} matched (I2)")
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


def _check_search_args(text: Any, k: Any, max_tokens: Any) -> None:
    if not isinstance(text, str):
        raise InvalidRecord(f"field query: must be a string, got {type(text).__name__}", path="query")
    if type(k) is not int or not 0 <= k <= K_MAX:
        raise InvalidRecord(f"field k: must be a whole number from 0 to {K_MAX}, got {k!r}", path="k")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 0):
        raise InvalidRecord(f"field max_tokens: must be a whole number from 0, got {max_tokens!r}", path="max_tokens")
