"""Vector math for hybrid search: normalise, float32 blobs, cosine top-N, rank fusion.

numpy is optional (``pip install 'retained[vectors]'``) and imported lazily,
on the first call that needs it, so importing retained never pays for it.
Without numpy, ``normalise``, ``pack``, ``unpack`` and ``rrf`` still work (pure
Python), so vectors can be stored and fused; only ``matrix`` and ``top_scores``
(cosine over many rows) need numpy, and ``numpy_missing()`` returns the one
message a caller shows before answering lexically.

A stored vector is L2-normalised float32, little-endian, ``4 * dim`` bytes, so
cosine similarity is a plain dot product.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, TypeVar

from retained.errors import InvalidRecord, VectorsUnavailable

RRF_K = 60  # the constant of reciprocal rank fusion (Cormack et al. 2009): score = sum w / (k + rank)

NUMPY_MISSING = (
    "numpy is not installed, so search cannot rank by vectors and stays lexical; "
    "install it with: pip install 'retained[vectors]'"
)


@functools.cache
def _load_numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def numpy_missing() -> str | None:
    """``None`` when numpy can be imported, else the message saying why search is lexical.

    The import is tried once per process; the same string comes back each time,
    so a caller can show it once and then compare.
    """
    return None if _load_numpy() is not None else NUMPY_MISSING


def require_numpy() -> Any:
    """Return the numpy module.

    Raises:
        VectorsUnavailable: numpy is not installed.
    """
    np = _load_numpy()
    if np is None:
        raise VectorsUnavailable(NUMPY_MISSING)
    return np


def normalise(vec: Sequence[float]) -> list[float]:
    """``vec`` scaled to unit length (an all-zero vector comes back unchanged).

    Raises:
        InvalidRecord: a value is not finite.
    """
    total = math.fsum(float(x) * float(x) for x in vec)
    if not math.isfinite(total):
        raise InvalidRecord("vector has a non-finite value; expected finite numbers")
    if total == 0.0:
        return [float(x) for x in vec]
    norm = math.sqrt(total)
    return [float(x) / norm for x in vec]


def pack(vec: Sequence[float]) -> bytes:
    """Normalise ``vec`` and encode it as little-endian float32 bytes for SQLite."""
    unit = normalise(vec)
    return struct.pack(f"<{len(unit)}f", *unit)


def unpack(blob: bytes) -> list[float]:
    """Decode one ``pack``ed blob back to floats.

    Raises:
        InvalidRecord: the blob's length is not a multiple of 4.
    """
    if len(blob) % 4:
        raise InvalidRecord(f"vector blob of {len(blob)} bytes is not float32 (length not a multiple of 4)")
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


def matrix(blobs: Iterable[bytes], dim: int) -> Any:
    """Stack ``pack``ed blobs of dimension ``dim`` into an ``(n, dim)`` float32 numpy array.

    Raises:
        VectorsUnavailable: numpy is not installed.
        InvalidRecord: a blob is not ``4 * dim`` bytes.
    """
    np = require_numpy()
    items = list(blobs)
    width = 4 * dim
    for i, b in enumerate(items):
        if len(b) != width:
            raise InvalidRecord(f"vector blob {i} has {len(b)} bytes, expected {width} ({dim} float32)")
    if not items:
        return np.zeros((0, dim), dtype=np.float32)
    flat = np.frombuffer(b"".join(items), dtype="<f4")
    return flat.reshape(len(items), dim).astype(np.float32, copy=False)


def top_scores(scores: Any, n: int) -> list[tuple[int, float]]:
    """The ``n`` best entries of a 1-d score array, best first, as ``(position, score)``.

    Ties go to the lower position; ``-inf`` entries are never returned.

    Raises:
        VectorsUnavailable: numpy is not installed.
    """
    np = require_numpy()
    finite = int(np.isfinite(scores).sum())
    n = min(n, finite)
    if n <= 0:
        return []
    rows = scores.shape[0]
    if n < rows:
        part = np.argpartition(-scores, n - 1)[:n]
        order = part[np.lexsort((part, -scores[part]))]
    else:
        order = np.lexsort((np.arange(rows), -scores))[:n]
    return [(int(i), float(scores[i])) for i in order]


Id = TypeVar("Id", bound=Hashable)


def rrf(
    rankings: Sequence[Sequence[Id]],
    weights: Sequence[float] | None = None,
    k: int = RRF_K,
    *,
    keep_first: int = 0,
) -> list[tuple[Id, float]]:
    """Fuse rankings by reciprocal rank fusion: ``score(id) = sum_i w_i / (k + rank_i(id))``.

    Ranks start at 1; an id absent from a ranking gets nothing from it, and an
    id repeated within one ranking counts at its best rank. Ties are broken by
    the best single rank, then by first appearance, so the result is
    deterministic. Returns ``(id, score)`` pairs, best first.

    ``keep_first`` = m puts the first m ids of the first ranking at the head,
    in their order, each with its fused score; the rest follow by score. At
    k = 60 neighbouring ranks differ by about 1/3,700, so even a light second
    ranking reorders the head of the first; this keeps the head where the
    first ranking is the more precise one.

    >>> rrf([["a", "b"], ["b", "c"]])
    [('b', 0.03252247488101534), ('a', 0.01639344262295082), ('c', 0.016129032258064516)]
    >>> [i for i, _ in rrf([["a", "b"], ["b", "c"]], keep_first=1)]
    ['a', 'b', 'c']

    Raises:
        InvalidRecord: ``weights`` does not match ``rankings``, ``k`` is
            negative, or ``keep_first`` is not a whole number from 0.
    """
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise InvalidRecord(f"rrf got {len(weights)} weights for {len(rankings)} rankings, expected one each")
    if k < 0:
        raise InvalidRecord(f"rrf k must not be negative, found {k}")
    if type(keep_first) is not int or keep_first < 0:
        raise InvalidRecord(f"rrf keep_first must be a whole number from 0, found {keep_first!r}")
    score: dict[Id, float] = {}  # in order of first appearance, which the stable sort keeps for ties
    best: dict[Id, int] = {}
    for ranking, w in zip(rankings, weights, strict=True):
        seen: set[Id] = set()
        for rank, ident in enumerate(ranking, start=1):
            if ident in seen:
                continue
            seen.add(ident)
            score[ident] = score.get(ident, 0.0) + w / (k + rank)
            best[ident] = min(best.get(ident, rank), rank)
    fused = sorted(score.items(), key=lambda kv: (-kv[1], best[kv[0]]))
    if not keep_first or not rankings:
        return fused
    head = list(dict.fromkeys(rankings[0]))[:keep_first]
    kept = set(head)
    return [(ident, score[ident]) for ident in head] + [pair for pair in fused if pair[0] not in kept]


__all__ = [
    "NUMPY_MISSING",
    "RRF_K",
    "matrix",
    "normalise",
    "numpy_missing",
    "pack",
    "require_numpy",
    "rrf",
    "top_scores",
    "unpack",
]
