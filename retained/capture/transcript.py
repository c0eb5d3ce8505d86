"""Claude Code transcripts (``~/.claude/projects/**/*.jsonl``) read back as the events live capture sees.

A transcript is one JSON object per line. A prompt is a ``type: "user"``
line with a ``promptId`` (the hook's ``prompt_id``) whose content is the
user's text (not a tool result, not a meta or compaction line); the reply
is the text of the last assistant message (``type: "assistant"``, one line
per content block, blocks of one message sharing ``message.id``) before the
next prompt. Each becomes the event the hook would have delivered --
UserPromptSubmit with the prompt, Stop with the reply, both named by the
prompt id -- so their ids match live capture's and a turn is recorded once
however often it arrives. Subagent lines (``isSidechain``) and every other
kind of line (bookkeeping) are passed over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from retained.capture import events, ledger
from retained.capture.run import Options, record_events

BATCH_EVENTS = 500  # events written with one append (one fsync)
FILES_MAX = 100_000  # a bound on the directory walk


def transcripts(path: Path) -> list[Path]:
    """``path`` itself, or every ``*.jsonl`` below it (sorted, at most FILES_MAX)."""
    if path.is_file():
        return [path]
    return list(islice((p for p in sorted(path.rglob("*.jsonl")) if p.is_file()), FILES_MAX))


def _text_of(content: Any) -> str | None:
    """The text of a message's content: a string, or its text blocks joined; None when it holds a tool result."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            return None
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(parts) if parts else None


def read(path: Path) -> Iterator[events.Event]:
    """The events of one transcript, in order."""
    import orjson

    prompt: events.Event | None = None
    reply: list[str] = []
    reply_id: Any = None
    reply_line = 0

    def close() -> Iterator[events.Event]:
        if prompt is not None and reply:
            yield events.Event(
                host=events.CLAUDE, event="Stop", session=prompt.session, turn_id=prompt.turn_id,
                host_version=prompt.host_version, cwd=prompt.cwd, transcript=str(path),
                turns=[events.Turn("assistant", "\n".join(reply), "assistant",
                                   {"transcript": str(path), "line": reply_line})],
            )

    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(line, dict) or line.get("isSidechain"):
                continue
            kind = line.get("type")
            message: dict[str, Any] = line["message"] if isinstance(line.get("message"), dict) else {}
            if kind == "user" and isinstance(line.get("promptId"), str) and not line.get("isMeta") \
                    and not line.get("isCompactSummary"):
                text = _text_of(message.get("content"))
                if text is None or not isinstance(line.get("sessionId"), str):
                    continue
                yield from close()
                prompt = events.Event(
                    host=events.CLAUDE, event="UserPromptSubmit", session=line["sessionId"], turn_id=line["promptId"],
                    host_version=line.get("version") if isinstance(line.get("version"), str) else None,
                    cwd=line.get("cwd") if isinstance(line.get("cwd"), str) else None, transcript=str(path),
                    turns=[events.Turn("user", text, "user", {"transcript": str(path), "line": number,
                                                              "uuid": line.get("uuid")})],
                )
                reply, reply_id = [], None
                yield prompt
            elif kind == "assistant" and prompt is not None:
                text = _text_of(message.get("content"))
                if not text:
                    continue
                if message.get("id") != reply_id or reply_id is None:
                    reply, reply_id = [], message.get("id")
                reply.append(text)
                reply_line = number
    yield from close()


def import_path(store: Any, path: Path, *, scope: str | None = None, dry_run: bool = False,
                progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Record the turns of every transcript at ``path``; counts, like the ledger's, of what happened.

    Each event also gets its ledger line (not with ``dry_run``, which writes nothing).
    """
    files = transcripts(path)
    totals: dict[str, Any] = {"transcripts": len(files), "turns": 0, "captured": 0, "deduplicated": 0, "skipped": 0, "failed": 0,
              "redactions": 0}
    errors: list[str] = []
    options = Options(scope=scope, live=False)
    for n, file in enumerate(files, 1):
        batch: list[tuple[events.Event, Any]] = []
        try:
            for event in read(file):
                batch.append((event, None))
                if len(batch) >= BATCH_EVENTS:
                    _flush(store, batch, options, dry_run, totals)
                    batch = []
            _flush(store, batch, options, dry_run, totals)
        except OSError as exc:
            errors.append(f"{file}: {exc.strerror or exc}")
        if progress is not None:
            progress(n, len(files))
    totals["errors"] = errors
    totals["dry_run"] = dry_run
    return totals


def _flush(store: Any, batch: list[tuple[events.Event, Any]], options: Options, dry_run: bool,
           totals: dict[str, Any]) -> None:
    if not batch:
        return
    entries = record_events(store, batch, options, dry_run=dry_run)
    for entry in entries:
        totals["turns"] += 1
        outcome = entry["outcome"]
        totals[outcome if outcome in totals else "failed"] += 1
        totals["redactions"] += int(entry.get("redactions") or 0)
    if not dry_run:
        ledger.append_many(store.directory, [{**entry, "imported": True} for entry in entries])
