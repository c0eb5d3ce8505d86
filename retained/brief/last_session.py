"""The last turns of a project's latest captured session, for the top of the session-start brief (docs/capture.md).

The log is read backwards with the brief's own reader (``brief.reader``:
standard library only, no orjson), at most ``SCAN_BYTES_MAX`` bytes. The
newest ``turn`` record of the project's scope names the session; its turns
found there are kept newest first within a token budget and shown oldest first.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from retained.brief.reader import LogReader, line
from retained.core.lines import RECORD
from retained.index.schema import LINK_FIELDS, estimate_tokens, link_targets

if TYPE_CHECKING:
    from typing import Any

SCAN_BYTES_MAX = 512 * 1024  # how far back the log is read for the last session (the brief's own bound is larger)
TURNS_MAX = 6  # at most this many turns of the last session
TURN_CHARS_MAX = 400  # each turn's text is cut to this many characters
# Bytes, not the brief's token budget: with the brief's own cap (8,000 bytes)
# and its two lines, under Claude Code's 10,000 characters.
SECTION_BYTES_MAX = 1_500
SHARE = 3  # the last session takes at most 1/SHARE of the brief's budget
# Canonical JSON (sorted keys, no spaces) spells a key and a string value so, and inside a string a quote
# is always escaped: a line without one of these bytes is neither a turn nor a link, and is not parsed.
_NEEDED = (b'"kind":"turn"', *(f'"{name}":'.encode() for name in LINK_FIELDS))


def last_session(store_dir: Path, scope: str, budget: int) -> dict[str, Any] | None:
    """The project's latest session: ``{"session", "host", "turns", "left_out", "tokens", "scan_complete"}``; None when none was found.

    ``turns`` (oldest first) each hold ``seq``, ``ts``, ``speaker``, ``text``
    (cut to ``TURN_CHARS_MAX`` characters, ``cut`` true then) and ``tokens``;
    ``left_out`` counts that session's turns found but not shown (over the
    budget or ``TURNS_MAX``).
    """
    log = LogReader(store_dir)
    size = log.size()
    if size == 0 or budget <= 0:
        return None
    hidden: set[int] = set()
    session = None
    host = None
    found: list[dict[str, Any]] = []
    read = 0
    complete = True
    for offset, raw in log.raw_reverse(size):
        read += len(raw)
        if read > SCAN_BYTES_MAX:
            complete = False
            break
        if not any(b in raw for b in _NEEDED):
            continue  # most of a store's lines: parsing them was most of the brief's cost at 100k records
        one = line(offset, raw)
        if one.status != RECORD:
            continue
        rec = one.record
        for name in LINK_FIELDS:
            hidden.update(link_targets(rec.get(name)))
        if rec.get("kind") != "turn" or rec.get("scope") != scope or one.seq in hidden:
            continue
        if session is None:
            session = rec.get("session")
            host = rec.get("host") if isinstance(rec.get("host"), dict) else None
        if rec.get("session") != session or not isinstance(rec.get("text"), str):
            continue
        found.append({"seq": one.seq, "ts": rec.get("ts"), "speaker": rec.get("speaker") or "?", "text": rec["text"]})
    if session is None:
        return None
    shown: list[dict[str, Any]] = []
    tokens = 0
    nbytes = 0
    for turn in found:
        item = {**turn, "text": turn["text"][:TURN_CHARS_MAX], "cut": len(turn["text"]) > TURN_CHARS_MAX}
        shown_line = render_turn(item)
        cost = estimate_tokens(shown_line)
        size_b = len(shown_line.encode("utf-8", "surrogatepass")) + 1
        if len(shown) >= TURNS_MAX or tokens + cost > budget or nbytes + size_b > SECTION_BYTES_MAX:
            break
        shown.append({**item, "tokens": cost})
        tokens += cost
        nbytes += size_b
    shown.reverse()
    return {"session": session, "host": host, "turns": shown, "left_out": len(found) - len(shown), "tokens": tokens,
            "scan_complete": complete}


def render_turn(turn: dict[str, Any]) -> str:
    mark = " [cut]" if turn.get("cut") else ""
    return f"  #{turn['seq']} {turn['speaker']}: {turn['text']}{mark}"


def render(last: dict[str, Any]) -> str:
    """The section's text: a heading naming the session and what was left out, then the turns, oldest first."""
    host = last.get("host") or {}
    who = f"{host.get('name')} " if host.get("name") else ""
    session = str(last["session"])[:40]
    when = last["turns"][-1]["ts"] if last["turns"] else None
    more = f"; {last['left_out']} earlier turns of it not shown" if last["left_out"] else ""
    older = "" if last["scan_complete"] else " (only the newest part of the log was read)"
    head = (f"Where the last session of this project stopped ({who}session {session}"
            f"{', last turn at ' + when if when else ''}): its last {len(last['turns'])} turns{more}{older}.")
    return "\n".join([head, *(render_turn(t) for t in last["turns"])])
