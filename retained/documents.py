"""What the index stores for one record: its words, its links, its token cost.

Pure functions over a parsed record, no SQLite: ``index`` writes what they
return, ``index_search`` and ``hybrid`` charge results with `estimate_tokens`.

Token estimate for ``max_tokens``: ``index_schema.estimate_tokens`` of a
result's text and body (a body that is not a string counts as its canonical
JSON), the same formula the brief charges its records with.
"""

from __future__ import annotations

from typing import Any

from . import index_schema, query, record

# Fields never indexed as words: chain and store bookkeeping, and the link
# fields (their numbers would match unrelated queries).
_NOT_WORDS = frozenset(record.RESERVED_FIELDS | {"kind", "scope", "client_op_id", *index_schema.LINK_FIELDS})
FIELDS_CHARS_MAX = 4096  # caller-field text indexed per record; bounds one record's index cost


def estimate_tokens(rec: dict[str, Any]) -> int:
    """Tokens a result costs against ``max_tokens``: ``index_schema.estimate_tokens`` of its text and body."""
    parts: list[str | bytes] = []
    text = rec.get("text")
    if isinstance(text, str):
        parts.append(text)
    body = rec.get("body")
    if isinstance(body, str):
        parts.append(body)
    elif body is not None:
        parts.append(record.canonical(body))
    return index_schema.estimate_tokens(*parts)


def _strings(value: Any, out: list[str], budget: list[int]) -> None:
    if budget[0] <= 0:
        return
    if isinstance(value, str):
        out.append(value)
        budget[0] -= len(value)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out, budget)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out, budget)


def documents(rec: dict[str, Any]) -> tuple[str, str, str]:
    """The (text, body, fields) columns indexed for one record.

    ``fields`` gathers the string values of caller fields (``speaker``,
    ``date``, ``source``, a retraction's ``reason``...), nested ones too, up
    to ``FIELDS_CHARS_MAX`` characters.
    """
    text = rec.get("text")
    body = rec.get("body")
    extra: list[str] = []
    budget = [FIELDS_CHARS_MAX]
    # A parsed canonical line keeps its keys sorted, so this order is stable.
    for key, value in rec.items():
        if key in _NOT_WORDS or key == "text" or key == "body":
            continue
        if type(value) is str:  # the common case, without the recursion
            if budget[0] > 0:
                extra.append(value)
                budget[0] -= len(value)
        else:
            _strings(value, extra, budget)
    if type(body) is str:
        body_text = body
    elif body is None:
        body_text = ""
    else:
        body_words: list[str] = []
        _strings(body, body_words, [FIELDS_CHARS_MAX * 16])
        body_text = " ".join(body_words)
    return (
        query.segment(text) if type(text) is str else "",
        query.segment(body_text) if body_text else "",
        query.segment(" ".join(extra)[:FIELDS_CHARS_MAX]) if extra else "",
    )

