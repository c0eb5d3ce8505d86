"""One event through capture: parse, skip or keep, write through the guard and the one append pipeline, account.

``capture`` never raises for anything the event or the store does: every
outcome becomes a ledger entry (see ``ledger``), which it returns. A write
the store cannot take now (the lock held past the budget, a failing disk)
sends the event to the spool; ``retry`` writes spooled events later.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retained.capture import events, ledger, spool
from retained.capture.scope import identity
from retained.core import record
from retained.errors import LockTimeout, RecordTooLarge, RetainedError

KINDS = {"summary": "summary"}  # what -> record kind; every other turn is a "turn"
SESSION_STATE = "sessions"  # capture/sessions/<digest of the session>: the session's last prompt id
RETRY_AFTER_EVENT_MAX = 5  # spooled events a hook retries after its own (``--retry`` takes all)


class Options:
    """How to read and file one event: the host (when the payload does not say), the scope, the working directory."""

    def __init__(self, *, host: str | None = None, scope: str | None = None, cwd: str | None = None,
                 disabled: str | None = None, live: bool = True, host_version: str | None = None) -> None:
        self.host_version = host_version  # the host's version when the event does not carry it (the edge reads it)
        self.live = live  # a hook's event (False: read back from a transcript)
        self.host = host
        self.scope = scope
        self.cwd = cwd
        self.disabled = disabled  # why capture is off (e.g. "RETAINED_CAPTURE=off"), or None

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "scope": self.scope, "cwd": self.cwd}


def _entry(event_id: str, outcome: str, reason: str | None = None, event: events.Event | None = None,
           **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"event_id": event_id, "outcome": outcome, "reason": reason}
    if event is not None:
        out.update(host=event.host, event=event.event, session=event.session)
    out.update(more)
    return out


def _session_file(store_dir: Path, session: str) -> Path:
    return ledger.capture_dir(store_dir) / SESSION_STATE / record.digest(session.encode("utf-8", "surrogatepass"))[:32]


def _remember_prompt(store_dir: Path, event: events.Event) -> None:
    """Keep the session's current prompt id: the Stop hook that follows names the same turn with it."""
    if not event.turn_id:
        return
    path = _session_file(store_dir, event.session)
    import os

    from retained.core import files

    try:
        ledger.ensure_dir(path.parent)
        fd = files.open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            files.write_all(fd, event.turn_id.encode("utf-8", "surrogatepass"))
        finally:
            os.close(fd)
    except OSError:
        pass  # only a hint: the reply is then named by its text's digest


def _current_prompt(store_dir: Path, session: str) -> str | None:
    try:
        value = _session_file(store_dir, session).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return value[:200] or None


def _host_version(event: events.Event, options: Options) -> str | None:
    """The host's version: from the event, else as the edge found it, else from the last lines of its transcript."""
    if event.host_version or options.host_version or not event.transcript:
        return event.host_version or options.host_version
    import re

    try:
        with open(event.transcript, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 16384))
            tail = f.read()
    except OSError:
        return None
    found = re.findall(rb'"version":"([0-9A-Za-z.+-]{1,40})"', tail)
    return found[-1].decode() if found else None


def contents(event: events.Event, store_dir: Path, options: Options) -> tuple[list[tuple[str, record.Content]], list[str]]:
    """The records to write, each with its op id, and why any turn was skipped."""
    from retained.safety.guard import remove_private

    if event.event == "Stop" and not event.turn_id:
        event.turn_id = _current_prompt(store_dir, event.session)
    if event.event == "UserPromptSubmit" and options.live:
        _remember_prompt(store_dir, event)
    who = identity(event.cwd or options.cwd or ".", options.scope)
    version = _host_version(event, options)
    out: list[tuple[str, record.Content]] = []
    skipped: list[str] = []
    for turn in event.turns:
        if not turn.text.strip():
            skipped.append("empty")
            continue
        if not remove_private(turn.text)[0].strip():
            skipped.append("private_only")
            continue
        op = event.op_id(turn)
        fields: dict[str, Any] = {
            "session": event.session,
            "speaker": turn.speaker,
            "event": event.event,
            "host": {"name": event.host, "version": version},
            "span": turn.span,
        }
        if event.turn_id:
            fields["turn"] = event.turn_id
        fields.update(turn.extra)
        content = record.make_content(
            text=turn.text, kind=KINDS.get(turn.what, "turn"), scope=who.scope, source=f"{event.host}:{event.event}",
            client_op_id=op, fields=fields,
        )
        out.append((op, content))
    return out, skipped


def capture(store: Any, raw: bytes | dict[str, Any], options: Options) -> dict[str, Any]:
    """Capture one event into ``store``; returns its ledger entry (already appended to the ledger when it could be).

    ``raw`` is the event as received (bytes of JSON) or already parsed.
    """
    return _noted(store.directory, _decide(store, raw, options))


def _noted(store_dir: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """``entry``, appended to the ledger, or with ``ledger_error`` saying why it could not be."""
    try:
        ledger.append(store_dir, entry)
    except OSError as exc:
        entry["ledger_error"] = f"the ledger could not be written ({exc.strerror or exc})"
    return entry


def rescue(store_dir: Path, raw: bytes, options: Options, why: str) -> dict[str, Any]:
    """The ledger entry for an event that capture itself failed on (``why``): the event as received goes to the spool.

    For the edge's last resort: whatever went wrong, the event is kept and counted.
    """
    event_id = record.digest(raw)[:32]
    try:
        spool.put(store_dir, event_id, {"raw": raw.decode("utf-8", "replace"), "options": options.to_dict()})
    except OSError as exc:
        entry = _entry(event_id, "failed", f"internal: {why}; the spool could not keep it either ({exc.strerror or exc})")
    else:
        entry = _entry(event_id, "spooled", f"internal: {why}")
    return _noted(store_dir, entry)


def too_large(store_dir: Path, head: bytes, limit: int) -> dict[str, Any]:
    """The ledger entry (appended) for an event over ``limit`` bytes: skipped, never parsed."""
    entry = _entry(record.digest(head)[:32], "skipped", "too_large", detail=f"the event is over {limit} bytes")
    return _noted(store_dir, entry)


def _decide(store: Any, raw: bytes | dict[str, Any], options: Options, *, retried: bool = False) -> dict[str, Any]:
    import orjson

    if isinstance(raw, (bytes, bytearray)):
        event_id = record.digest(bytes(raw))[:32]
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return _entry(event_id, "skipped", f"bad_event: not JSON ({exc})")
    else:
        payload = raw
        event_id = record.digest(record.canonical(payload))[:32]
    try:
        event = events.parse(payload, host=options.host)
    except events.BadEvent as exc:
        return _entry(event_id, "skipped", f"bad_event: {exc}")
    return record_events(store, [(event, payload)], options, retried=retried)[0]


def record_events(store: Any, batch: list[tuple[events.Event, Any]], options: Options, *, retried: bool = False,
                  dry_run: bool = False) -> list[dict[str, Any]]:
    """Write the turns of parsed events in one append; one ledger entry per event (not yet in the ledger).

    ``payload`` (each event as received) is what the spool keeps when the
    store cannot take the write now; None means the caller keeps the event
    itself (a transcript import) and the entry says ``failed``.
    """
    store_dir = store.directory
    out: list[dict[str, Any] | None] = []
    pending: list[tuple[int, events.Event, Any, list[tuple[str, Any]], dict[str, Any]]] = []
    for event, payload in batch:
        event_id = event.key()
        if options.disabled:
            out.append(_entry(event_id, "skipped", "disabled", event, detail=options.disabled))
            continue
        if not event.turns:
            out.append(_entry(event_id, "skipped", "nothing_to_keep" if event.nothing_because else "empty", event))
            continue
        try:
            items, skipped = contents(event, store_dir, options)
        except RetainedError as exc:
            out.append(_entry(event_id, "skipped", f"bad_event: {exc.message}", event))
            continue
        if not items:
            out.append(_entry(event_id, "skipped", skipped[0], event))
            continue
        prepared = []
        refused = None
        for op, content in items:
            try:
                prepared.append((op, store.prepare(content)))
            except RecordTooLarge:
                skipped.append("too_large")
            except RetainedError as exc:
                refused = f"refused: {exc.code}"
        if refused is not None or not prepared:
            out.append(_entry(event_id, "skipped", refused or "too_large", event))
            continue
        counts: dict[str, Any] = {
            "redactions": sum(len(g.notes.get("redactions", ())) for _, g in prepared),
            "private_spans": sum(int(g.notes.get("private_spans_removed", 0)) for _, g in prepared),
            "skipped_turns": len(skipped),
        }
        if retried:
            counts["retried"] = True
        pending.append((len(out), event, payload, prepared, counts))
        out.append(None)
    if pending and dry_run:
        for at, event, _payload, prepared, counts in pending:
            known = _known(store_dir, store, [op for op, _ in prepared])
            fresh = sum(1 for k in known if k is None)
            out[at] = _entry(event.key(), "captured" if fresh else "deduplicated", None, event, records=fresh,
                             duplicates=len(prepared) - fresh, **counts)
    elif pending:
        try:
            proofs = _append(store, store_dir, [p for _, _, _, prepared, _ in pending for p in prepared])
        except (RetainedError, OSError) as exc:
            why = "store_busy" if isinstance(exc, LockTimeout) else (getattr(exc, "code", None) or "os_error")
            detail = getattr(exc, "message", None) or str(exc)
            for at, event, payload, _prepared, counts in pending:
                out[at] = _spool(store_dir, event.key(), payload, options, event, why, counts, detail=detail)
        else:
            i = 0
            for at, event, _payload, prepared, counts in pending:
                mine = proofs[i: i + len(prepared)]
                i += len(prepared)
                written = [p for p in mine if not p.get("duplicate")]
                # Redactions and private spans count where something was written.
                kept = [g for (_, g), p in zip(prepared, mine, strict=True) if not p.get("duplicate")]
                counts["redactions"] = sum(len(g.notes.get("redactions", ())) for g in kept)
                counts["private_spans"] = sum(int(g.notes.get("private_spans_removed", 0)) for g in kept)
                out[at] = _entry(event.key(), "captured" if written else "deduplicated", None, event,
                                 records=len(written), duplicates=len(mine) - len(written),
                                 seqs=[p["seq"] for p in mine], **counts)
    return [e for e in out if e is not None]


def _known(store_dir: Path, store: Any, op_ids: list[str]) -> list[Any]:
    """The proofs of these ids already in the log (None where not)."""
    from retained.capture import ops

    try:
        opened = ops.open_map(store_dir, store.log)
    except OSError:
        opened = None
    if opened is None:
        return [None for _ in op_ids]
    try:
        return [opened[0].get(op) for op in op_ids]
    finally:
        opened[0].close()


def _append(store: Any, store_dir: Path, prepared: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Write the prepared turns; the ids already in the log come back as duplicates without taking the lock."""
    from retained.capture import ops

    try:
        opened = ops.open_map(store_dir, store.log)
    except OSError:
        opened = None  # without the map the log scans for the ids itself: slower, as correct
    if opened is not None:
        known, end = opened
        try:
            earlier = [known.get(op) for op, _ in prepared]
            if all(e is not None for e in earlier):
                return [{**e, "duplicate": True} for e in earlier]
            store.log.assume_ops(known, end)
            # The id names the turn, whatever else differs between two deliveries of it
            # (a transcript import keeps another span than the live hook): a repeat.
            return store.append([g for _, g in prepared], op_reuse="duplicate")
        finally:
            known.close()  # the log may still ask it (it opens the table again then)
    return store.append([g for _, g in prepared], op_reuse="duplicate")


def _spool(store_dir: Path, event_id: str, payload: Any, options: Options, event: events.Event, why: str,
           counts: dict[str, Any], detail: str | None = None) -> dict[str, Any]:
    if payload is None:
        return _entry(event_id, "failed", f"{why}: {detail}", event, **counts)
    try:
        spool.put(store_dir, event_id, {"event": payload, "options": options.to_dict()})
    except OSError as exc:
        return _entry(event_id, "failed", f"{why}; the spool could not keep it either ({exc.strerror or exc})", event,
                      **counts)
    return _entry(event_id, "spooled", why, event, detail=detail, **counts)


def retry(store: Any, *, limit: int | None = None) -> list[dict[str, Any]]:
    """Write spooled events (oldest first, at most ``limit``); each result is also a ledger line.

    An event that goes to the spool again stays there (it is not counted
    twice); a busy store ends the retry early.
    """
    store_dir = store.directory
    out = []
    for path in spool.waiting(store_dir)[:limit]:
        item = spool.load(path)
        if item is None:
            continue
        given = item.get("options") or {}
        options = Options(host=given.get("host"), scope=given.get("scope"), cwd=given.get("cwd"))
        raw = item.get("raw")
        event = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else item.get("event") or {}
        entry = _decide(store, event, options, retried=True)
        if entry["outcome"] == "spooled":
            out.append(entry)
            break  # still busy or failing: leave the rest for later
        path.unlink(missing_ok=True)
        entry["event_id"] = path.name[: -len(spool.SUFFIX)]
        entry["retried"] = True
        out.append(_noted(store_dir, entry))
    return out
