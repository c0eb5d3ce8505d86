"""Erasure across machines: a redaction published replaces the segment that held the erased record, and mirrors follow.

What a publish replaces and what a pull accepts: docs/sync.md, Privacy; any
other change is a ``segment_rewritten`` finding.
"""

from __future__ import annotations

import orjson

from retained.core import record
from retained.core.log import make_line

MARK = b'"kind":"redaction"'


def targets(data: bytes) -> set[int]:
    """The seqs the redaction records among ``data``'s lines erase (a byte search first: most segments hold none)."""
    out: set[int] = set()
    at = data.find(MARK)
    while at != -1:
        start = data.rfind(b"\n", 0, at) + 1
        end = data.index(b"\n", at) + 1
        line = make_line(0, data[start:end])
        if line.status == record.RECORD and line.record.get("kind") == "redaction" and type(line.record.get("redacts")) is int:
            out.add(line.record["redacts"])
        at = data.find(MARK, end)
    return out


def redacted_only(old: bytes, new: bytes) -> list[int] | None:
    """The seqs whose lines ``new`` redacts where ``old`` held them, when that is the only difference; else None."""
    a, b = old.split(b"\n"), new.split(b"\n")
    if len(a) != len(b):
        return None
    seqs = []
    for x, y in zip(a, b, strict=True):
        if x == y:
            continue
        was, now = make_line(0, x + b"\n"), make_line(0, y + b"\n")
        if not (now.status == record.REDACTED and was.chained and (was.seq, was.hash) == (now.seq, now.hash)):
            return None
        seqs.append(now.seq)
    return seqs


def replace_line(data: bytes, seq: int, raw: bytes) -> bytes | None:
    """``data`` with the chained line holding ``seq`` replaced by ``raw`` (a whole line); None when no line holds it."""
    start = 0
    while start < len(data):
        end = data.index(b"\n", start) + 1
        try:
            obj = orjson.loads(data[start:end])
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and obj.get("seq") == seq and "hash" in obj:
            return data[:start] + raw + data[end:]
        start = end
    return None
