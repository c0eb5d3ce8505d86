"""The newer fact first: a result that may correct an earlier one ranks above it.

A fact that changes is often written again without ``supersedes``; both
versions match a question about it at about the same relevance (issue 30).
After a search has chosen its results, `newer_first` puts each pair of results
where the newer may correct the older (`may_correct`) newer first, at
comparable relevance, and marks both: the newer with ``may_correct`` (the
older seqs), the older with ``may_be_corrected_by``. Nothing is stored: the
link is derived at query time from the records and their vectors, so a rebuilt
index gives the same links. Why each test and threshold: docs/retrieval.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from retained.replies import Entry

from retained.index import documents, query

COSINE_NEAR = 0.87  # closer than this and each other's nearest among the results: the same subject (docs/retrieval.md)
MARGIN = 0.01  # two turns are each other's nearest by at least this much over each one's next nearest (likewise)
SKIP_KINDS = ("retract", "redaction", "checkpoint")
MOVE_RANKS_MAX = 3  # "comparable relevance": a newer result swaps with an older one at most this many places above


def _text(entry: Entry) -> str | None:
    rec = entry.get("record") or {}
    if rec.get("kind") in SKIP_KINDS:
        return None
    text = rec.get("text")
    return text if isinstance(text, str) and text.strip() else None


def may_correct(
    older: Entry, newer: Entry, cosine: float | None, mutual: bool = False,
    subjects: dict[str, frozenset[str]] | None = None,
) -> bool:
    """Whether result ``newer`` may correct result ``older`` (same scope, later, same subject).

    The subject words agree (``query.same_subject``), or with vectors the
    cosine is at least ``COSINE_NEAR`` (a correction may share few words with
    the original); what either test needs besides: docs/retrieval.md ("The
    newer fact first").

    ``cosine``: of the two records' vectors, None when either has none.
    ``mutual``: each is the other's nearest among the results (by cosine;
    for two turns, by ``MARGIN`` at least). With a cosine, no pair without it.
    ``subjects``: the caller's cache of subject words by text, for one list of results.
    """
    if newer["seq"] <= older["seq"]:
        return False
    a, b = _text(older), _text(newer)
    if a is None or b is None or (older["record"].get("scope") != newer["record"].get("scope")):
        return False
    if "?" in a or "?" in b:  # a question states no fact: it neither corrects nor is corrected
        return False
    said = (documents.turn(older["record"]), documents.turn(newer["record"]))
    if said[0] is not None and said[1] is not None and said[0][0] != said[1][0]:  # two speakers' turns
        return False
    if cosine is not None:
        if not mutual:
            return False
        if cosine >= COSINE_NEAR:
            return True
    subjects = {} if subjects is None else subjects
    for t in (a, b):
        if t not in subjects:
            subjects[t] = query.subject(t)
    return query.same_subject(subjects[a], subjects[b])


def newer_first(
    results: list[Entry], cosine: Callable[[int, int], float | None] | None = None,
    asked: list[str] | str | None = None, subjects: dict[str, frozenset[str]] | None = None,
) -> int:
    """Swap each result that may correct an earlier-ranked older one with it; mark both. Returns the moves.

    ``cosine(seq_a, seq_b)`` gives the cosine of two records' vectors, or
    None when either has none (lexical search passes no function).
    ``asked``: the query's terms (``query.terms``), or its text (its terms
    worked out when a pair is first found). An older result that answers
    the question as asked stays in place, both marked (docs/retrieval.md:
    every term held, and the newer lacks one with a digit).
    ``subjects``: subject words already worked out, by text
    (``Search.search`` gives those of its ranking).
    """
    wanted = None if isinstance(asked, str) else set(asked or ())
    subjects = {} if subjects is None else subjects
    nearest = _nearest(results, cosine)
    moves = 0
    i = 0
    while i < len(results):
        older = results[i]
        for j in range(i + 1, min(len(results), i + 1 + MOVE_RANKS_MAX)):
            newer = results[j]
            if newer["seq"] <= older["seq"]:
                continue
            c = cosine(older["seq"], newer["seq"]) if cosine is not None else None
            if may_correct(older, newer, c, _mutual(nearest, older, newer), subjects):
                _link(older, newer)
                if wanted is None:
                    wanted = set(query.terms(str(asked)))
                if wanted and _answers_as_asked(wanted, older) and _lacks_a_value(wanted, newer):
                    continue
                results[i], results[j] = newer, older  # the results between the two keep their places
                moves += 1
                break
        else:
            i += 1
            continue
        # The newer record now stands at i: look again from it (it may correct something older still).
        if moves > len(results) ** 2:
            break
    _mark_pairs_in_order(results, cosine, nearest, subjects)
    return moves


def _answers_as_asked(wanted: set[str], entry: Entry) -> bool:
    """Whether ``entry``'s text holds every term of the query."""
    return wanted <= set(query.terms(_text(entry) or ""))


def _lacks_a_value(wanted: set[str], entry: Entry) -> bool:
    """Whether ``entry``'s text lacks a term of the query that holds a digit (a number, a version, a date)."""
    return any(any(ch.isdigit() for ch in term) for term in wanted - set(query.terms(_text(entry) or "")))


def _nearest(results: list[Entry], cosine: Callable[[int, int], float | None] | None) -> dict[int, tuple[int, float, float]]:
    """Each result's nearest other result by cosine: seq to (its seq, their cosine, the next nearest's); empty without vectors."""
    if cosine is None:
        return {}
    best: dict[int, list[float]] = {}  # seq: [cosine, seq, next cosine]
    seqs = [r["seq"] for r in results if _text(r) is not None]
    for i, a in enumerate(seqs):
        for b in seqs[i + 1:]:
            c = cosine(a, b)
            if c is None:
                continue
            for x, y in ((a, b), (b, a)):
                top = best.setdefault(x, [-2.0, 0, -2.0])
                if c > top[0]:
                    top[:] = [c, y, top[0]]
                elif c > top[2]:
                    top[2] = c
    return {a: (int(t[1]), t[0], t[2]) for a, t in best.items()}


def _mutual(nearest: dict[int, tuple[int, float, float]], older: Entry, newer: Entry) -> bool:
    """Whether the two are each other's nearest among the results; two turns by ``MARGIN`` at least."""
    a, b = nearest.get(older["seq"]), nearest.get(newer["seq"])
    if a is None or b is None or a[0] != newer["seq"] or b[0] != older["seq"]:
        return False
    if documents.turn(older["record"]) is None or documents.turn(newer["record"]) is None:
        return True
    return a[1] - a[2] >= MARGIN and b[1] - b[2] >= MARGIN


def _mark_pairs_in_order(
    results: list[Entry], cosine: Callable[[int, int], float | None] | None,
    nearest: dict[int, tuple[int, float, float]],
    subjects: dict[str, frozenset[str]] | None = None,
) -> None:
    """Mark the pairs already in date order too, so a reply names every older record a result may replace."""
    for i, newer in enumerate(results):
        for older in results[i + 1:]:
            if older["seq"] < newer["seq"] and older["seq"] not in newer.get("may_correct", ()):
                c = cosine(older["seq"], newer["seq"]) if cosine is not None else None
                if may_correct(older, newer, c, _mutual(nearest, older, newer), subjects):
                    _link(older, newer)


def _link(older: Entry, newer: Entry) -> None:
    newer.setdefault("may_correct", [])
    if older["seq"] not in newer["may_correct"]:
        newer["may_correct"].append(older["seq"])
    older.setdefault("may_be_corrected_by", [])
    if newer["seq"] not in older["may_be_corrected_by"]:
        older["may_be_corrected_by"].append(newer["seq"])


__all__ = ["COSINE_NEAR", "MARGIN", "may_correct", "newer_first"]
