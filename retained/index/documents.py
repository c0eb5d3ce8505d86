"""What the index stores for one record: its words, its links, its token cost, its turn, the text a reply shows.

Pure functions over a parsed record, no SQLite: ``writer`` indexes what they
return, ``search`` and ``hybrid`` charge results with `estimate_tokens`
and read records in their conversation with `turn`; a reply's text form
shows each record as `shown` cuts it (docs/retrieval.md, "The text a client
reads").
"""

from __future__ import annotations

from typing import Any

from retained.core import record
from retained.index import query
from retained.index import schema as index_schema

# Fields never indexed as words: chain and store bookkeeping, and the link
# fields (their numbers would match unrelated queries).
_NOT_WORDS = frozenset(record.RESERVED_FIELDS | {"kind", "scope", "client_op_id", *index_schema.LINK_FIELDS})
FIELDS_CHARS_MAX = 4096  # caller-field text indexed per record; bounds one record's index cost


# A record carrying one of these fields is a turn of a conversation: who said
# it. Records without one are notes, and search never reads a note in the
# light of its neighbours (issue 18: context helps a dialogue and is noise
# between unrelated notes).
SPEAKER_FIELDS = ("speaker", "role")
SESSION_FIELD = "session"  # optional: turns of different sessions are not neighbours
SPEAKER_CHARS_MAX = 100  # a longer value is content, not a name


def turn(rec: dict[str, Any]) -> tuple[str, Any] | None:
    """``(speaker, session)`` when ``rec`` is a turn of a conversation, else None.

    The speaker is the first of `SPEAKER_FIELDS` holding a short non-empty
    string; the session is the record's `SESSION_FIELD` (None when absent).

    >>> turn({"text": "I play clarinet", "speaker": "Mel", "session": 3})
    ('Mel', 3)
    >>> turn({"text": "deploys go out on Tuesdays"}) is None
    True
    """
    for field in SPEAKER_FIELDS:
        value = rec.get(field)
        if type(value) is str and 0 < len(value.strip()) <= SPEAKER_CHARS_MAX:
            session = rec.get(SESSION_FIELD)
            return value.strip(), session if type(session) in (str, int) else None
    return None


def replies(asked: tuple[str, Any] | None, answer: tuple[str, Any] | None) -> bool:
    """True when the turn ``answer``, next in its scope after ``asked``, is the other speaker's reply."""
    if asked is None or answer is None or asked[0] == answer[0]:
        return False
    return asked[1] is None or answer[1] is None or asked[1] == answer[1]


def _text_and_body(rec: dict[str, Any]) -> list[str | bytes]:
    """Those of a record's text and body it has, a body that is not a string as its canonical JSON."""
    text, body = rec.get("text"), rec.get("body")
    parts: list[str | bytes] = [text] if isinstance(text, str) else []
    if isinstance(body, str):
        parts.append(body)
    elif body is not None:
        parts.append(record.canonical(body))
    return parts


def estimate_tokens(rec: dict[str, Any]) -> int:
    """Tokens a result costs against ``max_tokens``: ``index_schema.estimate_tokens`` of its text and body."""
    return index_schema.estimate_tokens(*_text_and_body(rec))


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


TEXT_TOKENS_DEFAULT = 8000  # text a reply's text form carries when the call set no max_tokens
CHARS_PER_TOKEN = 4  # the ratio estimate_tokens uses


def record_text(rec: dict[str, Any]) -> str:
    """A record's text and its body (a body that is not a string as canonical JSON), one after the other."""
    return "\n".join(p if isinstance(p, str) else p.decode("utf-8", "replace") for p in _text_and_body(rec) if p)


REST_HINT = "memory_get with ids=[{seq}] returns the whole record"


def cut_to_fit(entry: Any, tokens_max: int, around: str) -> int | None:
    """Cut a result that alone costs more than ``tokens_max`` to an excerpt that fits, in place; its cost.

    A search under a budget smaller than its best result returns that
    result cut, not nothing: its record keeps every field but ``body``, and
    ``text`` becomes the part of its text and body (`record_text`) centred on
    the words of ``around`` (`query.excerpt`) that fits ``tokens_max`` by
    `estimate_tokens`; ``cut`` says which characters are shown and how to
    read the whole record. None when no character fits (a budget of 0).

    >>> entry = {"seq": 4, "record": {"text": "x " * 3000 + "the deploy key rotates monthly " + "y " * 3000}}
    >>> cut_to_fit(entry, 20, "deploy key") <= 20, "deploy key" in entry["record"]["text"], entry["cut"]["total_chars"]
    (True, True, 12031)
    """
    rec = entry["record"]
    whole = record_text(rec)
    chars = tokens_max * CHARS_PER_TOKEN
    while chars > 0:
        start, end = query.excerpt(whole, around, chars)
        cost = index_schema.estimate_tokens(whole[start:end])
        if cost <= tokens_max:
            break
        chars = min(chars - 1, chars * tokens_max // cost)  # characters of several bytes: fewer of them
    else:
        return None
    entry["record"] = {**{key: value for key, value in rec.items() if key != "body"}, "text": whole[start:end]}
    entry["cut"] = {"start": start, "end": end, "total_chars": len(whole), "message": (
        f"cut to fit max_tokens={tokens_max}: characters {start + 1}-{end} of {len(whole)} (text and body) shown; "
        + REST_HINT.format(seq=entry.get("seq")))}
    return cost


def shown(
    records: list[dict[str, Any]], around: str | None, tokens_max: int | None, *, rest: str = REST_HINT
) -> list[tuple[str, str | None]]:
    """For each record, the text to show and, when it was cut, a note saying what is missing and how to get it.

    The budget is ``tokens_max`` (``TEXT_TOKENS_DEFAULT`` when None) in
    characters at `CHARS_PER_TOKEN` a token. When every record's text fits,
    all are whole; otherwise each gets an equal share of what the shorter
    ones leave, and a longer text is cut to its share around the words of
    ``around`` (`query.excerpt`; from its start without a query). The note
    ends with ``rest``, formatted with the record's ``seq``.

    >>> long = {"seq": 7, "text": "x " * 3000 + "the deploy key rotates monthly " + "y " * 3000}
    >>> (text, note), = shown([long], "deploy key", 100)
    >>> "deploy key rotates" in text, note.startswith("cut: characters")
    (True, True)
    """
    texts = [record_text(r) for r in records]
    budget = (TEXT_TOKENS_DEFAULT if tokens_max is None else tokens_max) * CHARS_PER_TOKEN
    share: dict[int, int] = {}
    left, todo = budget, sorted(range(len(texts)), key=lambda i: len(texts[i]))
    for n, i in enumerate(todo):
        share[i] = min(len(texts[i]), max(0, left // (len(todo) - n)))
        left -= share[i]
    out: list[tuple[str, str | None]] = []
    for i, (rec, text) in enumerate(zip(records, texts, strict=True)):
        if share[i] >= len(text):
            out.append((text, None))
            continue
        start, end = query.excerpt(text, around or "", share[i])
        part = ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")
        out.append((part, f"cut: characters {start + 1}-{end} of {len(text)} shown; " + rest.format(seq=rec.get("seq"))))
    return out
