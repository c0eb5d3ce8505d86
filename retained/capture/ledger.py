"""The ledger: one line per event received, saying what became of it; and the counts (docs/capture.md#the-ledger).

``capture/ledger.jsonl`` beside the log (0600, in a 0700 directory), one JSON
object per line (``ts``, ``event_id``, ``host``, ``event``, ``session``,
``outcome``, ``reason``, ``records``, ``duplicates``, ``redactions``,
``private_spans``, ``seqs``), appended with one ``os.write`` on an
``O_APPEND`` descriptor and fsynced; ``status`` counts them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from retained.core import files, record

LEDGER_NAME = "ledger.jsonl"
OUTCOMES = ("captured", "deduplicated", "skipped", "spooled", "failed")
LEDGER_LINE_BYTES_MAX = 64 * 1024  # a ledger line names an event, it never holds its text


def capture_dir(store_dir: Path) -> Path:
    """``<store>/capture``: the ledger, the spool and the per-session state (0700)."""
    return store_dir / "capture"


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (and parents) 0700 if missing; refuse a symbolic link."""
    if not path.is_dir():
        missing = [path]
        while not missing[-1].parent.exists():
            missing.append(missing[-1].parent)
        for directory in reversed(missing):
            directory.mkdir(mode=0o700, exist_ok=True)
            directory.chmod(0o700)  # mkdir's mode is cut by the umask
    files.refuse_links(path)
    return path


def append(store_dir: Path, entry: dict[str, Any]) -> None:
    """Append one ledger line, durable before it returns.

    Raises:
        OSError: the line could not be written (the caller says so on stderr).
    """
    append_many(store_dir, [entry])


def _line(entry: dict[str, Any], ts: str) -> bytes:
    entry = {"ts": ts, **entry}
    line = record.canonical(entry) + b"\n"
    if len(line) > LEDGER_LINE_BYTES_MAX:
        entry["seqs"] = entry.get("seqs", [])[:100]
        entry["reason"] = str(entry.get("reason") or "")[:1000]
        entry["detail"] = str(entry.get("detail") or "")[:1000]
        line = record.canonical(entry) + b"\n"
    return line


def append_many(store_dir: Path, items: list[dict[str, Any]]) -> None:
    """Append ledger lines with one write and one fsync (a transcript import's batch)."""
    if not items:
        return
    directory = ensure_dir(capture_dir(store_dir))
    ts = record.utc_now()
    data = b"".join(_line(entry, ts) for entry in items)
    files.write_synced(files.open_fd(directory / LEDGER_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), data)


def entries(store_dir: Path) -> list[dict[str, Any]]:
    """Every readable ledger line, oldest first (a damaged line is skipped and counted by ``status``)."""
    import orjson

    path = capture_dir(store_dir) / LEDGER_NAME
    try:
        with files.open_read(path) as f:
            raw = f.read()
    except FileNotFoundError:
        return []
    out = []
    for line in raw.splitlines():
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError:
            out.append({"outcome": "unreadable"})
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


def _zero() -> dict[str, int]:
    return {"received": 0, **dict.fromkeys(OUTCOMES, 0), "redactions": 0, "private_spans": 0}


def status(store_dir: Path, spooled_now: int | None = None) -> dict[str, Any]:
    """The counts: overall, per day (UTC) and per session.

    Every delivery of an event is one received event (a host's retry that
    finds its turn already recorded is ``deduplicated``), except a retry of
    the spool (a line with ``retried``), which settles the spooled event it
    names instead: that event moves from ``spooled`` to what the retry made
    of it. ``reasons`` counts why events were skipped, spooled or failed.
    """
    counted: list[dict[str, Any]] = []  # one per received event: its line, as settled by later retries
    waiting: dict[str, int] = {}  # event_id -> index in counted of a spooled event not yet settled
    unreadable = 0
    for item in entries(store_dir):
        eid = item.get("event_id")
        if not isinstance(eid, str) or item.get("outcome") not in OUTCOMES:
            unreadable += 1
            continue
        if item.get("retried") and eid in waiting:
            at = waiting.pop(eid)
            first = counted[at]
            counted[at] = {**item, "ts": first.get("ts"), "session": first.get("session") or item.get("session")}
        else:
            counted.append(item)
        if item["outcome"] == "spooled":
            waiting[eid] = len(counted) - 1
    total = _zero()
    days: dict[str, dict[str, int]] = {}
    sessions: dict[str, dict[str, int]] = {}
    reasons: dict[str, dict[str, int]] = {}
    for item in counted:
        outcome = item["outcome"]
        day = str(item.get("ts", ""))[:10] or "unknown"
        session = str(item.get("session") or "unknown")
        for bucket in (total, days.setdefault(day, _zero()), sessions.setdefault(session, _zero())):
            bucket["received"] += 1
            bucket[outcome] += 1
            bucket["redactions"] += int(item.get("redactions") or 0)
            bucket["private_spans"] += int(item.get("private_spans") or 0)
        if outcome in ("skipped", "spooled", "failed"):
            why = str(item.get("reason") or "unknown")
            by = reasons.setdefault(outcome, {})
            by[why] = by.get(why, 0) + 1
    adds_up = total["received"] == sum(total[o] for o in OUTCOMES)
    out: dict[str, Any] = {
        "ledger": str(capture_dir(store_dir) / LEDGER_NAME),
        "totals": total,
        "adds_up": adds_up,
        "reasons": reasons,
        "days": dict(sorted(days.items())),
        "sessions": sessions,
        "unreadable_lines": unreadable,
    }
    if spooled_now is not None:
        out["spool_files"] = spooled_now
    return out


def render(result: dict[str, Any]) -> str:
    """``retained capture status`` as text: the totals, why events were not captured, the last days and sessions."""
    t = result["totals"]
    lines = [
        f"capture ledger {result['ledger']}",
        f"  received {t['received']} = captured {t['captured']} + deduplicated {t['deduplicated']} + skipped {t['skipped']}"
        f" + spooled {t['spooled']} + failed {t['failed']}" + ("" if result["adds_up"] else "  (DOES NOT ADD UP)"),
        f"  secrets redacted: {t['redactions']}; private spans removed: {t['private_spans']}",
    ]
    if result.get("spool_files"):
        lines.append(f"  waiting in the spool: {result['spool_files']} (retried by the next capture, or `retained capture --retry`)")
    for outcome, reasons in result["reasons"].items():
        said = ", ".join(f"{why} {n}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
        lines.append(f"  {outcome}: {said}")
    days = list(result["days"].items())[-7:]
    if days:
        lines.append("  per day (UTC), last 7:")
        for day, c in days:
            lines.append(f"    {day}  received {c['received']}  captured {c['captured']}  deduplicated {c['deduplicated']}"
                         f"  skipped {c['skipped']}  spooled {c['spooled']}  failed {c['failed']}")
    sessions = list(result["sessions"].items())[-5:]
    if sessions:
        lines.append(f"  per session, last {len(sessions)} of {len(result['sessions'])}:")
        for session, c in sessions:
            lines.append(f"    {session}  received {c['received']}  captured {c['captured']}  skipped {c['skipped']}"
                         f"  spooled {c['spooled']}  failed {c['failed']}")
    if result.get("unreadable_lines"):
        lines.append(f"  {result['unreadable_lines']} ledger lines could not be read")
    return "\n".join(lines)
