"""The dense side of hybrid search: what a record is embedded as, and the vectors held in memory.

`embed_text`, `turns` (which records are turns of a conversation) and
`Matrix` (one model's vectors, scored in context); numpy comes from
``vectors.require_numpy`` (an optional extra), imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from retained.core import record
from retained.index.documents import SPEAKER_FIELDS, turn
from retained.vectors import numeric as vectors

if TYPE_CHECKING:
    from retained.core.log import Log

EMBED_CHARS_MAX = 8000  # characters of a record sent to the embedder; models truncate near 512 tokens
LABEL_FIELDS = ("speaker", "author", "source")  # a record's "who/where", put before its text
LABEL_CHARS_MAX = 100  # a longer value is content, not a label
SCAN_ROWS_MIN = 256  # from this many records on, `turns` reads the log in one pass instead of line by line


def embed_text(rec: dict[str, Any]) -> str:
    r"""The text embedded for a record: ``"<label>: <text>"``, then its ``body`` if that is a string.

    The label is the first of ``LABEL_FIELDS`` holding a short string (who
    said it, where it came from): on LoCoMo, prepending the speaker doubled
    dense recall (0.221 -> 0.449 at 5, issue 7).

    >>> embed_text({"text": "see you at 5", "speaker": "Mel", "body": "details"})
    'Mel: see you at 5\ndetails'
    """
    parts = []
    label = next(
        (v.strip() for f in LABEL_FIELDS if isinstance(v := rec.get(f), str) and 0 < len(v.strip()) <= LABEL_CHARS_MAX),
        None,
    )
    text = rec.get("text")
    if isinstance(text, str) and text.strip():
        parts.append(f"{label}: {text}" if label else text)
    body = rec.get("body")
    if isinstance(body, str) and body.strip():
        parts.append(body)
    return "\n".join(parts)[:EMBED_CHARS_MAX]


def turns(log: Log, places: list[tuple[int, int, int]]) -> dict[int, tuple[str, Any]]:
    """``{seq: (speaker, session)}`` for the records at ``places`` (seq, offset, length) that are turns.

    Read for ranking only (no hash check). Many places are read in one pass
    over their span of the log, keeping only the lines that name a speaker
    field; a few are read one by one.
    """
    out: dict[int, tuple[str, Any]] = {}
    if len(places) < SCAN_ROWS_MIN:
        lines = ((offset, log.read_at(offset, length)) for _, offset, length in places)
    else:
        start = min(p[1] for p in places)
        stop = max(p[1] + p[2] for p in places)
        lines = (
            line for field in SPEAKER_FIELDS
            for line in log.segments(start, stop, containing=b'"' + field.encode() + b'":')
        )
    seq_at = {offset: seq for seq, offset, _ in places}
    for offset, raw in lines:
        seq = seq_at.get(offset)
        if seq is None or seq in out:
            continue
        try:
            rec = record.orjson.loads(raw)
        except ValueError:
            continue
        found = turn(rec) if type(rec) is dict else None
        if found is not None:
            out[seq] = found
    return out


class Matrix:
    """The in-process copy of one model's vectors, with each turn's neighbouring turns in its scope.

    Rows are in insertion order (seq order, as catch-up embeds). ``prev[i]``
    is the row of the previous turn of a conversation in the same scope and
    session (-1 if none, and always for a record that is not a turn: notes are
    never read in the light of their neighbours; it never changes, the log
    being append-only), and ``next[i]`` the row whose ``prev`` is ``i``.
    """

    def __init__(self, model: str, generation: int) -> None:
        self.model = model
        self.generation = generation
        self.last_id = 0
        self.rows = 0
        self.dim = 0
        self.seqs: Any = None
        self.mat: Any = None
        self.prev: Any = None
        self.next: Any = None
        self.hashes: list[str] = []
        self.scopes: list[str | None] = []
        self.row_of: dict[int, int] = {}
        self.linked = False  # some turn has a previous turn in its scope (context applies)
        self._last_in_scope: dict[str | None, tuple[int, int, Any]] = {}  # scope -> (row, seq, session) of its last turn

    def _grow(self, need: int) -> None:
        np = vectors.require_numpy()
        cap = max(need, 1024, 2 * (self.mat.shape[0] if self.mat is not None else 0))
        mat = np.zeros((cap, self.dim), dtype=np.float32)
        seqs = np.zeros(cap, dtype=np.int64)
        prev = np.full(cap, -1, dtype=np.int64)
        nxt = np.full(cap, -1, dtype=np.int64)
        if self.mat is not None:
            mat[: self.rows] = self.mat[: self.rows]
            seqs[: self.rows] = self.seqs[: self.rows]
            prev[: self.rows] = self.prev[: self.rows]
            nxt[: self.rows] = self.next[: self.rows]
        self.mat, self.seqs, self.prev, self.next = mat, seqs, prev, nxt

    def extend(self, fetched: list[tuple[Any, ...]], turns: dict[int, tuple[str, Any]] | None = None) -> None:
        """Append rows ``(id, seq, hash, dim, blob, scope)`` fetched in id order.

        ``turns`` (see `turns`) says which of them are turns of a
        conversation; only those are linked to their neighbours.
        """
        turns = turns or {}
        if not fetched:
            return
        if self.mat is None:
            self.dim = fetched[0][3]
        need = self.rows + len(fetched)
        if self.mat is None or need > self.mat.shape[0]:
            self._grow(need)
        self.mat[self.rows : need] = vectors.matrix([f[4] for f in fetched], self.dim)
        for i, (row_id, seq, h, _dim, _v, scope) in enumerate(fetched):
            row = self.rows + i
            self.seqs[row] = seq
            self.hashes.append(h)
            self.scopes.append(scope)
            self.row_of[seq] = row
            self.last_id = row_id
            said = turns.get(seq)
            if said is None:
                continue
            last = self._last_in_scope.get(scope)
            if last is not None and last[1] < seq and (last[2] is None or said[1] is None or last[2] == said[1]):
                self.prev[row] = last[0]
                self.next[last[0]] = row
                self.linked = True
            if last is None or last[1] < seq:
                self._last_in_scope[scope] = (row, seq, said[1])
        self.rows = need

    def scores(self, query: Any, context: float, neighbours: float) -> Any:
        """Each row's score for ``query`` (unit): cosine, read in context.

        Cosines are first centred on their mean over all rows: embedding
        models give unrelated texts a high baseline similarity (about 0.75
        for e5), and context must not let an unrelated neighbour ride on a
        match. Then ``context`` (gamma) adds gamma times the previous record's
        centred score (the record read with the one before it in its scope),
        and ``neighbours`` (beta) adds beta times the better of the two
        neighbours' scores. The record after a match so gains gamma + beta
        times the match's score, the match only beta times its better
        neighbour's: with the defaults (0.7 and 0.7, chosen on LoCoMo's
        tuning half) that sum is over 1, and the turn after a strong match
        can outrank it, as the reply to a question often holds its answer.

        Each step is one pass over the rows: a row with no previous (or
        next) turn holds -1, which reads a padding slot after the last row
        holding 0 (or -inf), so no pass needs a mask; a store with no linked
        turns (notes) skips the context steps.
        """
        np = vectors.require_numpy()
        n = self.rows
        # einsum, not `@`: a matrix-vector product is memory-bound, and BLAS
        # threads only add hand-off cost (harness/bench_hybrid.py).
        s = np.einsum("ij,j->i", self.mat[:n], query)
        if not context and not neighbours:
            return s
        z = np.empty(n + 1, dtype=np.float32)
        np.subtract(s, s.mean(), out=z[:n])
        if not self.linked:
            return z[:n]
        z[n] = 0.0  # the padding slot that index -1 reads
        prev = self.prev[:n]
        if context:
            z[:n] += np.float32(context) * z[prev]
        if neighbours:
            z[n] = -np.inf
            best = np.maximum(z[prev], z[self.next[:n]])
            best[np.isneginf(best)] = 0.0
            z[:n] += np.float32(neighbours) * best
        return z[:n]


__all__ = ["EMBED_CHARS_MAX", "LABEL_FIELDS", "Matrix", "embed_text", "turns"]
