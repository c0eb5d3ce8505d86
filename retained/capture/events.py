"""A host's event, parsed: the turns worth keeping, each with the id that makes it idempotent.

`parse` reads three shapes (docs/capture.md): Claude Code's hook payloads
(``hook_event_name``), Codex CLI's ``notify`` payload (``type:
agent-turn-complete``, given as the last argument rather than on stdin) and
the generic shape, for any other host. Each turn's ``client_op_id``
(`Event.op_id`) makes a turn delivered twice one record. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from retained.core import record

CLAUDE = "claude-code"
CODEX = "codex"
OP_CHARS_MAX = 200  # record's client_op_id bound (limits.CLIENT_OP_ID_CHARS_MAX)


class BadEvent(ValueError):
    """The event is not one of the shapes capture reads; the message says which field."""


class Turn:
    """One thing to keep: who said it, the text, and where it came from.

    Plain classes here, not dataclasses: making one costs more at import than
    this hook, which runs on every turn, should pay.
    """

    __slots__ = ("extra", "span", "speaker", "text", "what")

    def __init__(self, speaker: str, text: str, what: str, span: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        self.speaker = speaker  # user / assistant
        self.text = text
        self.what = what  # user, assistant, summary, subagent: the last part of the id
        self.span = span  # where in the host's event (or transcript) the text was
        self.extra = extra or {}  # the generic shape's name and at, when given

    def __repr__(self) -> str:
        return f"Turn({self.speaker!r}, {self.text[:40]!r}, {self.what!r})"


class Event:
    """A host's event: who sent it, which session and turn, and the turns to keep."""

    __slots__ = ("cwd", "event", "host", "host_version", "nothing_because", "session", "transcript", "turn_id", "turns")

    def __init__(self, host: str, event: str, session: str, turn_id: str | None = None, host_version: str | None = None,
                 cwd: str | None = None, transcript: str | None = None, turns: list[Turn] | None = None) -> None:
        self.host = host
        self.event = event
        self.session = session
        self.turn_id = turn_id
        self.host_version = host_version
        self.cwd = cwd
        self.transcript = transcript
        self.turns: list[Turn] = turns if turns is not None else []
        self.nothing_because: str | None = None  # why there is nothing to keep, when ``turns`` is empty on purpose

    def __repr__(self) -> str:
        return f"Event({self.host!r}, {self.event!r}, session={self.session!r}, turn={self.turn_id!r}, turns={self.turns!r})"

    def op_id(self, turn: Turn) -> str:
        """The turn's client_op_id: host, session, turn (or the text's digest), what.

        What: ``user``, ``assistant``, ``summary`` or ``subagent``. The same turn
        delivered twice -- a host's retry, a transcript read after live capture --
        gets the same id, and the log keeps it once.
        """
        key = self.turn_id or "t" + record.digest(turn.text.encode("utf-8", "surrogatepass"))[:24]
        op = f"cap:{self.host}:{self.session}:{key}:{turn.what}"
        if len(op) > OP_CHARS_MAX:
            op = f"cap:{self.host}:" + record.digest(op.encode("utf-8", "surrogatepass"))
        return op

    def key(self) -> str:
        """The event's own identity (the ledger's and the spool's name for it)."""
        parts = [self.host, self.session, self.event, self.turn_id or ""]
        parts += [t.what + ":" + t.text for t in self.turns]
        return record.digest("\x00".join(parts).encode("utf-8", "surrogatepass"))[:32]


def _str(payload: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    value = payload.get(name)
    if value is None or value == "":
        if required:
            raise BadEvent(f"field {name}: missing; the event needs it (see docs/capture.md)")
        return None
    if not isinstance(value, str):
        raise BadEvent(f"field {name}: must be a string, got {type(value).__name__}")
    return value


def parse(payload: Any, *, host: str | None = None) -> Event:
    """The event in ``payload`` (a parsed JSON object), whichever shape it has.

    Raises:
        BadEvent: not an object, or a field the shape needs is missing or not a string.
    """
    if not isinstance(payload, dict):
        raise BadEvent(f"the event must be a JSON object, got {type(payload).__name__}")
    if "hook_event_name" in payload:
        return _claude(payload, host or CLAUDE)
    if payload.get("type") == "agent-turn-complete" or "thread-id" in payload:
        return _codex(payload, host or CODEX)
    return _generic(payload, host)


_CLAUDE_FIELDS = {
    # event: (field, speaker, what)
    "UserPromptSubmit": ("prompt", "user", "user"),
    "Stop": ("last_assistant_message", "assistant", "assistant"),
    "SubagentStop": ("last_assistant_message", "assistant", "subagent"),
    "PostCompact": ("compact_summary", "assistant", "summary"),
}


def _claude(payload: dict[str, Any], host: str) -> Event:
    name = _str(payload, "hook_event_name", required=True) or ""
    event = Event(
        host=host,
        event=name,
        session=_str(payload, "session_id", required=True) or "",
        host_version=_str(payload, "version"),
        cwd=_str(payload, "cwd"),
        transcript=_str(payload, "transcript_path"),
    )
    # Claude Code names the turn on its prompt and on the Stop that ends it
    # (2.1.197 sends prompt_id on both); a subagent by its agent id.
    event.turn_id = _str(payload, "agent_id") if name == "SubagentStop" else _str(payload, "prompt_id")
    known = _CLAUDE_FIELDS.get(name)
    if known is None:
        event.nothing_because = f"{name} carries no turn to keep"
        return event
    source_field, speaker, what = known
    text = _str(payload, source_field)
    if text is not None:
        span: dict[str, Any] = {"event": name, "field": source_field}
        if event.transcript:
            span["transcript"] = event.transcript
        if name == "SubagentStop" and _str(payload, "agent_type"):
            span["agent_type"] = payload["agent_type"]
        event.turns.append(Turn(str(speaker), text, what, span))
    return event


def _codex(payload: dict[str, Any], host: str) -> Event:
    event = Event(
        host=host,
        event=_str(payload, "type") or "agent-turn-complete",
        session=_str(payload, "thread-id", required=True) or "",
        turn_id=_str(payload, "turn-id"),
        cwd=_str(payload, "cwd"),
    )
    inputs = payload.get("input-messages") or []
    if not isinstance(inputs, list) or not all(isinstance(m, str) for m in inputs):
        raise BadEvent("field input-messages: must be a list of strings")
    prompt = "\n\n".join(m for m in inputs if m.strip())
    if prompt:
        event.turns.append(Turn("user", prompt, "user", {"event": event.event, "field": "input-messages"}))
    reply = _str(payload, "last-assistant-message")
    if reply:
        event.turns.append(Turn("assistant", reply, "assistant", {"event": event.event, "field": "last-assistant-message"}))
    return event


_SPEAKERS = {"user": "user", "assistant": "assistant"}


def _generic(payload: dict[str, Any], host: str | None) -> Event:
    event = Event(
        host=_str(payload, "host") or host or "unknown",
        event=_str(payload, "event") or "turn",
        session=_str(payload, "session", required=True) or "",
        turn_id=_str(payload, "turn"),
        host_version=_str(payload, "host_version"),
        cwd=_str(payload, "cwd"),
        transcript=_str(payload, "transcript"),
    )
    messages = payload.get("messages")
    if not isinstance(messages, list):
        raise BadEvent("field messages: must be a list of {speaker, text} objects (see docs/capture.md)")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BadEvent(f"field messages[{i}]: must be an object with speaker and text")
        speaker = message.get("speaker")
        if speaker not in _SPEAKERS:
            raise BadEvent(f"field messages[{i}].speaker: must be user or assistant, got {speaker!r}")
        text = message.get("text")
        if not isinstance(text, str):
            raise BadEvent(f"field messages[{i}].text: must be a string")
        what = message["what"] if isinstance(message.get("what"), str) else str(speaker)
        extra = {}
        for name in ("name", "at"):
            value = message.get(name)
            if value is not None and not isinstance(value, str):
                raise BadEvent(f"field messages[{i}].{name}: must be a string")
            if value:
                extra[name] = value
        event.turns.append(Turn(str(speaker), text, what, {"event": event.event, "field": f"messages[{i}]"}, extra))
    return event
