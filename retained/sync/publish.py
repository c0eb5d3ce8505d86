"""Publish: this store's new log bytes go up as sealed segments, then its published head moves forward (docs/sync.md).

Read the published head (and its ETag): past the local log's end it is
``rolled_back``, on another hash here a ``fork``; either stops the publish,
nothing overwritten. Segments a killed publish left past the head are
adopted when their bytes are the log's (else a ``fork``); the rest goes up
in segments of whole lines (``layout.SEGMENT_BYTES``), each created only if
its key is free (``If-None-Match: *``). The head then moves by
compare-and-swap (``If-Match``) and is recorded in ``sync/state.json`` and as
an anchor. Killed anywhere, the local log is untouched (sync only reads it)
and the next run completes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from retained.core import anchors, record
from retained.core.log import Line, Log, make_line
from retained.sync import erasure, layout
from retained.sync.remote import Exists, Moved, Remote

Progress = Callable[[int, int], None]


def finding(kind: str, sid: str, message: str, *, seq: int | None = None, segment: str | None = None,
            expected: Any = None, observed: Any = None) -> dict[str, Any]:
    """A sync finding, shaped as verify's are (``kind``, ``seq``, ``offset``, ``message``) plus the store and segment."""
    return {"kind": kind, "store_id": sid, "seq": seq, "offset": None, "segment": segment,
            "expected": expected, "observed": observed, "message": message}


def read_head(remote: Remote, sid: str) -> tuple[dict[str, Any] | None, str | None, dict[str, Any] | None]:
    """``(head, etag, problem)``: the store's published head, None when it has none, or a finding when it is unreadable."""
    key = layout.head_key(remote.prefix, sid)
    got = remote.get(key)
    if got is None:
        return None, None, None
    data, etag = got
    try:
        head = json.loads(data)
    except ValueError:
        head = None
    if (not isinstance(head, dict) or type(head.get("seq")) is not int or not isinstance(head.get("hash"), str)
            or head.get("store_id") != sid):
        why = ("is sealed with a key: sync with --key-file (every machine on one prefix uses the same key)"
               if data.startswith(b"retained-sealed-") else f"is not a head of store {sid}; it was left as it is")
        return None, etag, finding("head_unreadable", sid, f"the published head {key} {why}; see docs/sync.md", segment=key)
    return head, etag, None


def head_body(sid: str, machine: str, seq: int, h: str, key: str) -> bytes:
    return json.dumps({"format": layout.FORMAT, "store_id": sid, "machine": machine, "seq": seq, "hash": h,
                       "segment": key, "time": record.utc_now()}, sort_keys=True).encode("utf-8") + b"\n"


def locate(log: Log, seq: int, stop: int, hint_end: int | None = None) -> Line | None:
    """The valid chained line holding ``seq`` in the log's first ``stop`` bytes (``hint_end``: where it ended last time)."""
    if hint_end is not None and 0 < hint_end <= stop:
        for line in log.scan_reverse(stop=hint_end):
            if line.chained:
                if line.seq == seq and line.end == hint_end:
                    return line
                break
    for line in log.scan(stop=stop):
        if line.chained and line.seq == seq:
            return line
    return None


def _chained_ends(data: bytes, base: int) -> tuple[Line | None, Line | None]:
    """The first and last valid chained lines of ``data`` (whole lines starting at log byte ``base``)."""
    first = None
    i = 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = make_line(base + i, data[i : nl + 1])
        if line.chained:
            first = line
            break
        i = nl + 1
    if first is None:
        return None, None
    j = len(data) - 1  # the final newline
    while j > 0:
        start = data.rfind(b"\n", 0, j) + 1
        line = make_line(base + start, data[start : j + 1])
        if line.chained:
            return first, line
        j = start - 1
    return first, first


def cut(log: Log, start: int, stop: int, segment_bytes: int = layout.SEGMENT_BYTES):
    """``(offset, bytes, first line, last line)`` of each segment of ``[start, stop)``: whole lines, each with a chained record."""
    f = log.open_read()
    if f is None:
        return
    with f:
        f.seek(start)
        offset = start
        pending = b""
        while offset + len(pending) < stop:
            chunk = f.read(min(segment_bytes, stop - offset - len(pending)))
            if not chunk:
                break
            pending += chunk
            nl = pending.rfind(b"\n")
            if nl == -1:
                continue  # one line longer than a segment: read on to its end
            data, rest = pending[: nl + 1], pending[nl + 1 :]
            first, last = _chained_ends(data, offset)
            if first is None or last is None:
                continue  # only lines of other programs so far: they go with the next record
            yield offset, data, first, last
            offset += len(data)
            pending = rest


def publish(directory: Path, log: Log, remote: Remote, sid: str, machine: str, *, anchor_dir: Path | None,
            saved: dict[str, Any], progress: Progress | None = None,
            segment_bytes: int = layout.SEGMENT_BYTES) -> dict[str, Any]:
    """Publish the log's new records; returns ``{"records", "segments", "adopted", "head", "findings", "state"}``.

    ``saved``: what the last publish to this remote recorded (``state`` in the result is the new one).
    The local log is only read.
    """
    out: dict[str, Any] = {"records": 0, "segments": [], "adopted": [], "replaced": [], "bytes": 0, "head": None,
                           "findings": [], "state": dict(saved)}
    findings = out["findings"]
    head, etag, problem = read_head(remote, sid)
    if problem is not None:
        findings.append(problem)
        return out
    size = log.size()
    tail_seq, _, tail_end = log.tail(stop=size)
    base_seq, base_hash, start = 0, record.ZERO_HASH, 0
    if head is not None:
        out["head"] = {"seq": head["seq"], "hash": head["hash"]}
        if head["seq"] > tail_seq:
            findings.append(finding(
                "rolled_back", sid, f"store {sid}'s published head is seq {head['seq']}, but the local log ends at seq "
                f"{tail_seq}: this log was cut back or restored from an older copy; nothing was published or overwritten; "
                f"`retained sync --restore {sid}` into an empty directory recovers the published records",
                seq=head["seq"], expected=head["hash"], observed=tail_seq))
            return out
        hint = saved.get("end") if saved.get("seq") == head["seq"] and saved.get("hash") == head["hash"] else None
        line = locate(log, head["seq"], tail_end, hint)
        if line is None or line.hash != head["hash"]:
            now = "no valid record" if line is None else f"hash {line.hash[:12]}..."
            findings.append(finding(
                "fork", sid, f"store {sid}'s published head is seq {head['seq']} with hash {head['hash'][:12]}..., but "
                f"seq {head['seq']} here has {now}: two histories for one store id (a restored copy that kept writing, "
                "or a copied store directory); nothing was published or overwritten; see docs/sync.md, forks",
                seq=head["seq"], segment=head.get("segment"), expected=head["hash"],
                observed=None if line is None else line.hash))
            return out
        base_seq, base_hash, start = line.seq, line.hash, line.end
    last_key = head.get("segment") if head is not None else None
    published_seq = base_seq
    erased: set[int] = set()  # seqs the redaction records published now erase
    # 2. Segments a killed publish uploaded past the head.
    after = layout.segment_key(remote.prefix, sid, base_seq, 10**12 - 1)
    orphans = remote.listing(layout.segments_prefix(remote.prefix, sid), start_after=after)
    ranges = sorted((r, key) for key, _, _ in orphans if (r := layout.parse_segment_key(key)) is not None)
    while ranges:
        (first, last), key = ranges[0]
        rivals = [k for (f, _), k in ranges if f == first]
        got = remote.get(key) if len(rivals) == 1 else None
        here = log.read_at(start, len(got[0])) if got is not None else b""
        if got is None or here != got[0] or not here.endswith(b"\n"):
            findings.append(finding(
                "fork", sid, f"segment {key} past store {sid}'s published head does not hold this log's bytes at that place"
                + (f" ({len(rivals)} segments start at seq {first})" if len(rivals) > 1 else "")
                + ": another writer publishes under this store id; nothing was published or overwritten; see docs/sync.md, forks",
                seq=first, segment=key))
            return out
        _, tail_line = _chained_ends(here, start)
        if tail_line is None or tail_line.seq != last:
            findings.append(finding("fork", sid, f"segment {key} does not end at seq {last} here; nothing was published",
                                    seq=last, segment=key))
            return out
        out["adopted"].append(key)
        erased |= erasure.targets(here)
        base_seq, base_hash, start, last_key = last, tail_line.hash, start + len(here), key
        ranges = [(r, k) for r, k in ranges if r[0] > last]
    # 3. The new bytes, in sealed segments.
    total = max(tail_end - start, 0)
    for offset, data, first, last in cut(log, start, tail_end, segment_bytes):
        key = layout.segment_key(remote.prefix, sid, first.seq, last.seq)
        try:
            remote.create(key, data, {"store-id": sid, "last-hash": last.hash})
        except Exists:
            got = remote.get(key)
            if got is None or got[0] != data:
                findings.append(finding(
                    "fork", sid, f"segment {key} already holds other bytes than this log's seqs {first.seq}-{last.seq}: "
                    "two histories for one store id; nothing was overwritten; see docs/sync.md, forks",
                    seq=first.seq, segment=key))
                break
        out["segments"].append(key)
        erased |= erasure.targets(data)
        out["records"] += last.seq - base_seq
        out["bytes"] += len(data)
        base_seq, base_hash, start, last_key = last.seq, last.hash, offset + len(data), key
        if progress is not None:
            progress(start - (tail_end - total), total)
    # Segments published before that still hold what a redaction published now erased.
    old = sorted(t for t in erased if t <= published_seq)
    if old:
        replace_erased(log, remote, sid, old, out)
    # 4. Move the head.
    if head is None or base_seq != head["seq"]:
        body = head_body(sid, machine, base_seq, base_hash, str(last_key))
        try:
            remote.swap(layout.head_key(remote.prefix, sid), body, etag)
        except Moved:
            moved, _, _ = read_head(remote, sid)
            if moved is None or (moved["seq"], moved["hash"]) != (base_seq, base_hash):
                findings.append(finding(
                    "head_moved", sid, f"store {sid}'s published head was moved by another writer while this one "
                    f"published up to seq {base_seq}; it was not overwritten; two machines publish under one store id; "
                    "see docs/sync.md, forks", seq=base_seq,
                    observed=None if moved is None else {"seq": moved["seq"], "hash": moved["hash"], "machine": moved.get("machine")}))
                return out
        out["head"] = {"seq": base_seq, "hash": base_hash}
    # 5. Remember it, and anchor it.
    if base_seq:
        out["state"] = {"seq": base_seq, "hash": base_hash, "end": start, "segment": last_key}
        if anchor_dir is not None:
            anchors.record_head(anchor_dir, directory, base_seq, base_hash, start, "sync", durable=True)
    return out


def replace_erased(log: Log, remote: Remote, sid: str, seqs: list[int], out: dict[str, Any]) -> None:
    """Replace each published segment holding one of ``seqs`` with the same bytes but that line redacted (compare-and-swap)."""
    listing = remote.listing(layout.segments_prefix(remote.prefix, sid), limit=layout.LIST_KEYS_MAX)
    ranges = [(r, key) for key, _, _ in listing if (r := layout.parse_segment_key(key)) is not None]
    for seq in seqs:
        key = next((k for (first, last), k in ranges if first <= seq <= last), None)
        line = locate(log, seq, log.size())
        if key is None or line is None or line.status != record.REDACTED:
            continue  # not published, or not (yet) redacted here: the verify of this store says why
        got = remote.get(key)
        if got is None:
            continue
        new = erasure.replace_line(got[0], seq, line.raw)
        if new is None or new == got[0]:
            continue  # already replaced (a rerun)
        if erasure.redacted_only(got[0], new) != [seq]:
            out["findings"].append(finding("segment_rewritten", sid, f"segment {key} does not hold seq {seq} as this log "
                                           "had it before its erasure; it was not replaced", seq=seq, segment=key))
            continue
        try:
            remote.swap(key, new, got[1])
        except Moved:
            out["findings"].append(finding("segment_rewritten", sid, f"segment {key} changed while seq {seq} was being "
                                           "erased from it; run `retained sync` again", seq=seq, segment=key))
            continue
        out["replaced"].append(key)
