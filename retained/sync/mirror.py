"""Pull: other stores' new segments come down into mirrors beside this store, verified before they are used.

What a mirror holds, how a pull is verified (``check_copy`` for a whole
copy, ``extend`` for new segments after a verified mirror) and its findings:
docs/sync.md, the union and Findings.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from retained.core import chain, files, record
from retained.core.log import Log, make_line
from retained.sync import layout, state
from retained.sync.publish import finding, read_head
from retained.sync.remote import Remote

Progress = Callable[[int, int], None]
STAGING = "incoming"
# Segments downloaded at once: a round trip each, so a few in flight hide the latency; each is held in memory (4 MiB).
DOWNLOADS = 4


def plan(listing: list[tuple[str, str, int]], after_seq: int, head_seq: int, sid: str) -> tuple[list[tuple[str, str, int]], dict[str, Any] | None]:
    """The segments from ``after_seq`` to ``head_seq``, in order, and a finding when they do not lead there."""
    ranges = sorted(((r, item) for item in listing if (r := layout.parse_segment_key(item[0])) is not None),
                    key=lambda x: x[0])
    chosen: list[tuple[str, str, int]] = []
    at = after_seq
    while at < head_seq:
        nexts = [(r, item) for r, item in ranges if r[0] > at]
        if not nexts:
            return chosen, finding("segment_missing", sid, f"store {sid}: no segment after seq {at} although its "
                                   f"published head is seq {head_seq}; pulled up to seq {at}; the next sync retries",
                                   seq=at + 1)
        start = nexts[0][0][0]
        rivals = [(r, item) for r, item in nexts if r[0] == start and r[1] <= head_seq]
        if len(rivals) != 1:
            keys = [item[0] for _, item in nexts if _[0] == start]
            return chosen, finding(
                "fork", sid, f"store {sid}: {len(keys)} segments start at seq {start} ({', '.join(keys)}): two histories "
                "for one store id; neither was pulled, nothing was overwritten; see docs/sync.md, forks",
                seq=start, segment=keys[0] if keys else None, observed=keys)
        (_, last), item = rivals[0]
        chosen.append(item)
        at = last
    return chosen, None


def fetch(remote: Remote, items: list[tuple[str, str, int]], progress: Progress | None) -> Iterator[tuple[str, bytes, str]]:
    """``(key, bytes, etag)`` of each segment, in order, as they arrive; ``DOWNLOADS`` at a time (the client is
    thread-safe), so the caller writes one while the next ones download."""
    from concurrent.futures import ThreadPoolExecutor

    total = sum(size for _, _, size in items)
    done = 0
    with ThreadPoolExecutor(max_workers=max(1, min(DOWNLOADS, len(items)))) as pool:
        for (key, _, size), got in zip(items, pool.map(lambda item: remote.get(item[0]), items), strict=True):
            if got is None:
                raise state.SyncError(f"segment {key} vanished while it was pulled; run `retained sync` again", path=key)
            done += size
            if progress is not None:
                progress(done, total)
            yield key, got[0], got[1]


def check_copy(directory: Path, base: Path | bytes | None, parts: Iterable[tuple[str, bytes, str]], head: dict[str, Any],
               sid: str, got: list[tuple[str, bytes, str]]) -> tuple[Path | None, list[dict[str, Any]]]:
    """Write ``base`` (a log, or its bytes) and ``parts`` (written as they come) into ``directory/log.jsonl`` and verify
    it ends at ``head``; each part is also added to ``got``.

    Returns the copy's path when it verifies, else None and the findings (the copy removed).
    """
    state.ensure_dir(directory)
    path = directory / "log.jsonl"
    tmp = directory / "log.jsonl.part"
    if isinstance(base, bytes):
        state.write_bytes(tmp, base)
    elif base is not None and base.exists():
        shutil.copyfile(base, tmp)
        os.chmod(tmp, 0o600)
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
    starts = []
    with open(tmp, "ab") as f:
        for part in parts:
            starts.append((f.tell(), part[0]))
            f.write(part[1])
            got.append(part)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    log = Log(directory)
    try:
        report = chain.verify_file(log)
    finally:
        log.close()
    problems = list(report.findings)
    if report.torn_tail is not None:
        problems.append({"kind": "torn_tail", "offset": report.torn_tail["offset"],
                         "message": "the last segment does not end with a whole line"})
    if not problems and (report.head_seq, report.head_hash) != (head["seq"], head["hash"]):
        problems.append({"kind": "head_mismatch", "offset": None, "seq": report.head_seq,
                         "message": f"the segments end at seq {report.head_seq} ({report.head_hash[:12]}...), "
                                    f"not at the published head, seq {head['seq']} ({head['hash'][:12]}...)"})
    if not problems:
        return path, []
    shutil.rmtree(directory, ignore_errors=True)
    return None, [_unverified(sid, problems, starts)]


def pull_store(directory: Path, remote: Remote, sid: str, progress: Progress | None = None) -> dict[str, Any]:
    """Bring one other store's mirror up to its published head; returns ``{"store_id", "records", "segments", "findings", ...}``."""
    out: dict[str, Any] = {"store_id": sid, "records": 0, "segments": [], "bytes": 0, "findings": [], "machine": None}
    findings = out["findings"]
    head, _, problem = read_head(remote, sid)
    if problem is not None:
        findings.append(problem)
        return out
    if head is None:
        return out
    out["machine"] = head.get("machine")
    mdir = layout.mirror_dir(directory, sid)
    mstate_path = mdir / layout.MIRROR_STATE_NAME
    mstate = state.read(mstate_path)
    have_seq, have_hash = int(mstate.get("seq", 0)), mstate.get("hash")
    out["seq"] = have_seq
    if head["seq"] < have_seq:
        findings.append(finding(
            "head_moved_back", sid, f"store {sid}'s published head moved back from seq {have_seq} to seq {head['seq']}: "
            "its log was cut back or restored from an older copy; the mirror keeps what it verified; see docs/sync.md",
            seq=head["seq"], expected=have_seq, observed=head["seq"]))
        return out
    if head["seq"] == have_seq and head["hash"] != have_hash:
        findings.append(finding(
            "fork", sid, f"store {sid}'s published head is seq {have_seq} with hash {head['hash'][:12]}..., but the "
            f"mirror verified hash {str(have_hash)[:12]}... there: two histories for one store id; nothing was overwritten",
            seq=have_seq, expected=have_hash, observed=head["hash"]))
        return out
    listing = remote.listing(layout.segments_prefix(remote.prefix, sid), limit=layout.LIST_KEYS_MAX)
    etags = {key: etag for key, etag, _ in listing}
    pulled: dict[str, str] = dict(mstate.get("segments") or {})
    sizes: dict[str, int] = dict(mstate.get("sizes") or {})
    changed = []
    for key, etag in sorted(pulled.items()):
        if key not in etags:
            findings.append(finding(
                "segment_rewritten", sid, f"store {sid}: segment {key}, already pulled and verified, was removed from the "
                "remote; the mirror keeps the bytes it verified; see docs/sync.md", segment=key, expected=etag,
                seq=(layout.parse_segment_key(key) or (None,))[0]))
        elif etags[key] != etag:
            changed.append((key, etags[key], sizes.get(key, 0)))
    if head["seq"] == have_seq and not changed:
        return out
    chosen: list[tuple[str, str, int]] = []
    if head["seq"] > have_seq:
        chosen, gap = plan(listing, have_seq, head["seq"], sid)
        if gap is not None:
            findings.append(gap)
            chosen = []
    base: Path | bytes = mdir / "log.jsonl"
    erased: list[int] = []
    accepted: dict[str, str] = {}
    if changed:
        base, erased, accepted = _apply_erasures(mdir / "log.jsonl", sorted(pulled), sizes, remote, changed, sid, findings)
        if not erased:
            base = mdir / "log.jsonl"
    if not chosen and not erased:
        return out
    mlog = mdir / "log.jsonl"
    recorded_bytes = mstate.get("bytes")
    if not erased and have_seq and mlog.exists() and type(recorded_bytes) is int and recorded_bytes <= mlog.stat().st_size:
        # The common case: a few new segments after a mirror already verified. Only they are walked, linked to the
        # mirror's last record, and appended: a pull costs what it brings, not the mirror's size.
        parts = list(fetch(remote, chosen, progress))
        problems = extend(mlog, recorded_bytes, parts, head, sid, (have_seq, str(have_hash)))
        if problems is not None:
            if problems:
                findings.extend(problems)
                return out
            return _recorded(out, mstate_path, mlog, remote, head, head["seq"], head["hash"], have_seq, pulled, sizes, parts, [])
    staging = layout.sync_dir(directory) / STAGING / sid
    shutil.rmtree(staging, ignore_errors=True)
    parts = []
    copy, problems = check_copy(staging, base, fetch(remote, chosen, progress),
                                head if chosen else {"seq": have_seq, "hash": have_hash}, sid, parts)
    if copy is not None and erased:
        from retained.sync import erasure

        missing = sorted(set(erased) - erasure.targets(copy.read_bytes()))
        if missing:
            copy = None
            shutil.rmtree(staging, ignore_errors=True)
            problems = [finding("segment_rewritten", sid, f"store {sid}: seqs {missing} were redacted in its segments, but "
                                "its log holds no redaction record for them; the mirror keeps what it verified",
                                seq=missing[0])]
    if copy is None:
        findings.extend(problems)
        return out
    state.ensure_dir(mdir)
    os.replace(copy, mdir / "log.jsonl")
    shutil.rmtree(staging, ignore_errors=True)
    if erased:
        pulled.update(accepted)  # the runner scrubs the mirror's index: it held the erased words
    new_seq, new_hash = (head["seq"], head["hash"]) if chosen else (have_seq, str(have_hash))
    return _recorded(out, mstate_path, mdir / "log.jsonl", remote, head, new_seq, new_hash, have_seq, pulled, sizes, parts, erased)


def _recorded(out: dict[str, Any], mstate_path: Path, mlog: Path, remote: Remote, head: dict[str, Any], seq: int, h: str,
              have_seq: int, pulled: dict[str, str], sizes: dict[str, int], parts: list[tuple[str, bytes, str]],
              erased: list[int]) -> dict[str, Any]:
    """Record what the mirror now holds in ``mirror.json``; ``out`` completed."""
    for key, data, etag in parts:
        pulled[key], sizes[key] = etag, len(data)
    state.write(mstate_path, {"store_id": head["store_id"], "machine": head.get("machine"), "seq": seq, "hash": h,
                              "segments": pulled, "sizes": sizes, "bytes": mlog.stat().st_size, "remote": remote.url})
    out.update(records=seq - have_seq, segments=[k for k, _, _ in parts], bytes=sum(len(d) for _, d, _ in parts),
               seq=seq, erased=erased)
    return out


def extend(mlog: Path, size: int, parts: list[tuple[str, bytes, str]], head: dict[str, Any], sid: str,
           have: tuple[int, str]) -> list[dict[str, Any]] | None:
    """Verify ``parts`` as the continuation of the mirror's log (its first ``size`` bytes), then append them; the findings.

    None when the mirror's log does not end where ``mirror.json`` says
    (``have``: its seq and hash): the caller verifies the whole copy instead.

    The walk is ``chain.walk`` over the mirror's last record and the new
    lines: that record is verified already, so the one finding the walk
    makes for it (it starts mid-chain) is expected and dropped; a redaction
    record naming an older seq is satisfied by that seq redacted in the
    mirror. Bytes past ``size`` (an append cut short by a crash) are cut
    off first: they were never recorded as pulled.
    """
    log = Log(mlog.parent)
    try:
        anchor = next((line for line in log.scan_reverse(stop=size) if line.chained), None)
        if anchor is None or (anchor.seq, anchor.hash) != have:
            return None
        data = b"".join(d for _, d, _ in parts)
        lines = [anchor]
        at, offset = 0, anchor.end
        while at < len(data):
            nl = data.find(b"\n", at)
            end = len(data) if nl == -1 else nl + 1
            lines.append(make_line(offset, data[at:end]))
            offset += end - at
            at = end
        report = chain.walk(lines, log_name=f"mirror of {sid}")
        problems = [f for f in report.findings
                    if not (f.get("offset") == anchor.offset and f["kind"] in ("prev_mismatch", "seq_gap"))]
        if any(f["kind"] == "redaction_pending" for f in problems):
            pending = {f["seq"] for f in problems if f["kind"] == "redaction_pending"}
            done = {line.seq for line in log.scan(stop=size) if line.seq in pending and line.status == record.REDACTED}
            problems = [f for f in problems if not (f["kind"] == "redaction_pending" and f["seq"] in done)]
        if report.torn_tail is not None:
            problems.append({"kind": "torn_tail", "offset": report.torn_tail["offset"], "seq": None,
                             "message": "the last segment does not end with a whole line"})
        if not problems and (report.head_seq, report.head_hash) != (head["seq"], head["hash"]):
            problems.append({"kind": "head_mismatch", "offset": None, "seq": report.head_seq,
                             "message": f"the segments end at seq {report.head_seq}, not at the published head, seq {head['seq']}"})
        if problems:
            return [_unverified(sid, problems, _starts(anchor.end, parts))]
        fd = files.open_fd(mlog, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
            os.lseek(fd, size, os.SEEK_SET)
            files.write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return []
    finally:
        log.close()


def _starts(base: int, parts: list[tuple[str, bytes, str]]) -> list[tuple[int, str]]:
    out, at = [], base
    for key, d, _ in parts:
        out.append((at, key))
        at += len(d)
    return out


def _unverified(sid: str, problems: list[dict[str, Any]], starts: list[tuple[int, str]]) -> dict[str, Any]:
    """The finding for segments that do not verify, naming the one where the first problem is."""
    first = next((p["offset"] for p in problems if p.get("offset") is not None), None)
    bad = [key for at, key in starts if first is not None and at <= first][-1:] or [key for _, key in starts]
    detail = "; ".join(p["message"] for p in problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
    return finding("segment_unverified", sid, f"store {sid}: segment {', '.join(bad)} does not verify ({detail}); "
                   "its records are left out of search, the mirror is as it was; see docs/sync.md",
                   seq=problems[0].get("seq"), segment=bad[0] if bad else None, observed=problems[:10])


def _apply_erasures(log_path: Path, keys: list[str], sizes: dict[str, int], remote: Remote,
                    changed: list[tuple[str, str, int]], sid: str,
                    findings: list[dict[str, Any]]) -> tuple[bytes, list[int], dict[str, str]]:
    """The mirror's log with each changed segment's new bytes where they only redact lines; the seqs redacted; ``{key: etag}`` taken.

    Any other change is a ``segment_rewritten`` finding and that segment keeps the bytes verified.
    """
    from retained.sync import erasure

    with open(log_path, "rb") as f:
        data = f.read()
    pieces, at = {}, 0
    for key in keys:
        pieces[key] = data[at : at + sizes.get(key, 0)]
        at += sizes.get(key, 0)
    erased: list[int] = []
    accepted: dict[str, str] = {}
    for key, etag, _ in changed:
        got = remote.get(key)
        seqs = None if got is None else erasure.redacted_only(pieces[key], got[0])
        if got is None or not seqs:
            findings.append(finding(
                "segment_rewritten", sid, f"store {sid}: segment {key}, already pulled and verified, was rewritten in place "
                "(its ETag changed) with more than redactions; the mirror keeps the bytes it verified; see docs/sync.md",
                segment=key, expected=etag, seq=(layout.parse_segment_key(key) or (None,))[0]))
            continue
        pieces[key] = got[0]
        erased.extend(seqs)
        accepted[key] = got[1]
    return b"".join(pieces[k] for k in keys) + data[at:], erased, accepted


def mirrors(directory: Path) -> list[tuple[str, Path, dict[str, Any]]]:
    """``(store id, directory, mirror.json)`` of each mirror beside the store, sorted by id."""
    root = layout.mirrors_dir(directory)
    try:
        names = sorted(os.listdir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for name in names:
        if not layout.valid_store_id(name):
            continue
        mdir = root / name
        try:
            meta = state.read(mdir / layout.MIRROR_STATE_NAME)
        except state.SyncError:
            continue
        if meta and (mdir / "log.jsonl").exists():
            out.append((name, mdir, meta))
    return out

