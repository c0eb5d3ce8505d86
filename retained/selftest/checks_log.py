"""Checks of the log: proofs, read-back, the chain, crashes, concurrency, damage."""

from __future__ import annotations

import itertools
import random
import subprocess
from typing import Any

import orjson

from retained.selftest.children import _child, _finish, signal_name
from retained.selftest.context import CheckFailed, Context, expect
from retained.selftest.spec import (
    ZERO_HASH,
    _canonical,
    append_raw,
    chained,
    check_proof,
    file_lines,
    flip_byte,
    parse_line,
    put_byte,
    read_at,
)

# Single bytes changed, one at a time, by the tamper check's sweep.
TAMPER_SWEEP = 40


def check_ack_proof(ctx: Context) -> str:
    """The proof in an acknowledgement names the bytes in the file."""
    s = ctx.store()
    proofs = [
        s.write("first note", scope="selftest"),
        s.write("second note, with unicode: naïve 日本語 ✓", fields={"priority": 2}),
        s.checkpoint("selftest checkpoint", summary="what the proof names"),
    ]
    ctx.fault("after_write")
    size = ctx.log_path.stat().st_size
    expected_offset = 0
    for p in proofs:
        expect(p["duplicate"] is False, f"seq {p['seq']}: a first write came back as a duplicate")
        expect(p["offset"] == expected_offset, f"seq {p['seq']}: proof offset {p['offset']}, expected {expected_offset} (end of the previous line)")
        rec = check_proof(ctx.log_path, p)
        expect(rec["ts"] == p["ts"], f"seq {p['seq']}: proof ts {p['ts']} differs from the file's {rec['ts']}")
        expected_offset += p["length"]
    expect(expected_offset == size, f"the proofs cover {expected_offset} bytes, the log has {size}")
    return (
        f"{len(proofs)} proofs match the file: offsets {'/'.join(str(p['offset']) for p in proofs)} of a {size}-byte log, "
        "seq, prev and hash recomputed from the bytes"
    )


def check_read_back(ctx: Context) -> str:
    """What was written reads back unchanged, caller fields verbatim."""
    s = ctx.store()
    fields = {"nested": {"list": [1, 2.5, None, True, "ü"], "empty": {}}, "emoji": "🧪", "big": 2**63, "neg": -(2**63)}
    sent: list[tuple[str, dict[str, Any]]] = [
        ("plain text", {}),
        ("line one\nline two\t\"quoted\" \\ back", {"source": "selftest"}),
        ("fields round-trip", {"fields": fields}),
        ("a kind the store does not model", {"kind": "observation", "body": {"k": [1, {"x": "y"}]}}),
    ]
    proofs = [s.write(text, **kw) for text, kw in sent]
    ctx.fault("after_write")
    got = s.get([p["seq"] for p in proofs])
    expect(len(got) == len(sent), f"asked for {len(sent)} records, got {len(got)}")
    fresh = ctx.store().get([p["seq"] for p in proofs])  # a second handle: nothing cached
    checked = 0
    for (text, kw), proof, entry, entry2 in zip(sent, proofs, got, fresh, strict=True):
        rec = entry["record"]
        expect(rec == entry2["record"], f"seq {proof['seq']}: two handles read different records")
        expect(rec.get("text") == text, f"seq {proof['seq']}: text came back changed")
        for key, value in kw.get("fields", {}).items():
            expect(rec.get(key) == value, f"seq {proof['seq']}: field {key} came back changed")
            checked += 1
        for key in ("kind", "body", "source"):
            if key in kw:
                expect(rec.get(key) == kw[key], f"seq {proof['seq']}: {key} came back changed")
                checked += 1
        raw = read_at(ctx.log_path, proof["offset"], proof["length"])
        expect(_canonical(rec) + b"\n" == raw, f"seq {proof['seq']}: the record read back does not encode to the line in the file")
    return f"{len(sent)} records read back equal through two handles ({checked} caller fields verbatim, canonical bytes equal the file)"


def check_chain_links(ctx: Context) -> str:
    """Every record links to the one before it, checked on the file by the spec."""
    s = ctx.store()
    for i in range(12):
        if i % 4 == 3:
            s.checkpoint(f"checkpoint {i}")
        else:
            s.write(f"chain note {i}", scope="a" if i % 2 else "b")
    s.write_batch([{"text": f"batch note {i}"} for i in range(8)])
    ctx.fault("after_write")
    lines = file_lines(ctx.log_path)
    prev, seq = ZERO_HASH, 0
    for offset, raw in lines:
        rec = parse_line(raw)
        if rec is None:
            raise CheckFailed(f"line at byte {offset} is not a valid chained record (hash does not recompute or bytes not canonical)")
        expect(rec["seq"] == seq + 1, f"seq {rec['seq']} at byte {offset} follows seq {seq}")
        expect(rec["prev"] == prev, f"seq {rec['seq']} at byte {offset}: prev {rec['prev'][:12]}..., expected {prev[:12]}...")
        prev, seq = rec["hash"], rec["seq"]
    report = s.verify()
    head = s.head()
    expect(report["ok"], f"verify reports {len(report['findings'])} findings on a clean log")
    expect(report["records"] == seq == 20, f"verify counts {report['records']} records, the file has {seq}, 20 were written")
    expect(head["seq"] == seq and head["hash"] == prev, f"head is seq {head['seq']}, the file's last is seq {seq}")
    return f"{seq} records, seq 1..{seq} contiguous, every prev = hash before it (recomputed here), head {prev[:12]}..., verify ok"


_RESTART_WRITER = """
import os, signal, orjson
from retained import Store
s = Store(sys.argv[1])
for i in range(int(sys.argv[2])):
    p = s.write(f"restart note {i}", fields={"i": i})
    sys.stdout.buffer.write(orjson.dumps(p) + b"\\n")
    sys.stdout.flush()
# Die at once after the last acknowledgement: no close, no atexit, no flush.
os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
"""

_RESTART_READER = """
from retained.cli.commands import main
directory = sys.argv[1]
# Started beside the writer to hide interpreter start-up; it opens the store
# only once the parent, after the writer is dead, sends the seqs to read.
seqs = sys.stdin.readline().split()
got = main(["get", *seqs, "--dir", directory, "--json"])
main(["verify", "--dir", directory, "--json"])
sys.exit(got)
"""


def check_restart(ctx: Context) -> str:
    """A new process sees every acknowledged write of one killed right after its last ack."""
    n = 10
    # This process writes first and builds the index, so the others' records
    # must be caught up across processes, not indexed from scratch.
    s = ctx.store()
    first = s.write("written before the writer starts")
    searchable = getattr(s, "search", None) is not None
    if searchable:
        s.search("restart", k=1)
    reader = _child(ctx, _RESTART_READER, str(ctx.directory), stdin=subprocess.PIPE)
    try:
        writer = _child(ctx, _RESTART_WRITER, str(ctx.directory), str(n))
        # It kills itself (the status differs by platform); what counts is what it acknowledged.
        out = _finish(writer, "the writer", ok_codes=None)
        proofs = [orjson.loads(line) for line in out.splitlines() if line.strip()]
        expect(len(proofs) == n, f"the writer acknowledged {len(proofs)} of {n} writes, then ended with {signal_name(writer.returncode)}")
        ctx.fault("after_kill")
        seqs = " ".join(str(p["seq"]) for p in proofs).encode() + b"\n"
        try:
            lines = _finish(reader, "a new process (retained get, then retained verify)", input=seqs).splitlines()
        except CheckFailed as exc:
            raise CheckFailed(f"after the writer was killed with {n} acks: {exc}") from None
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.communicate()
    expect(len(lines) == 2, f"the reader printed {len(lines)} lines, expected 2 JSON documents")
    got, report = orjson.loads(lines[0])["records"], orjson.loads(lines[1])
    by_seq = {e["seq"]: e for e in got}
    for p in proofs:
        e = by_seq.get(p["seq"])
        if e is None:
            raise CheckFailed(f"seq {p['seq']} was acknowledged but a new process does not find it")
        expect(e["record"]["hash"] == p["hash"] and e["offset"] == p["offset"],
               f"seq {p['seq']}: a new process reads hash {e['record']['hash'][:12]}... at byte {e['offset']}, "
               f"the ack said {p['hash'][:12]}... at byte {p['offset']}")
    expect(proofs[0]["prev"] == first["hash"], f"the writer's first record (seq {proofs[0]['seq']}) does not link to seq {first['seq']}")
    expect(report["ok"] and report["records"] == n + 1,
           f"verify in a new process: ok={report['ok']}, {report['records']} records (expected {n + 1}), {len(report['findings'])} findings")
    caught = ""
    if searchable:
        found = s.search("restart note", k=2 * n)
        expect(sorted(r["seq"] for r in found["results"]) == sorted(p["seq"] for p in proofs),
               f"this process's search finds {found['total_matches']} of the {n} records the killed writer acknowledged")
        caught = f"; this process's index caught up: search finds {found['total_matches']}/{n}"
    return (
        f"{n} acks from pid {writer.pid}, killed ({signal_name(writer.returncode)}) after the last; "
        f"pid {reader.pid} reads {len(by_seq)}/{n} with the acked hash and offset (retained get), retained verify ok{caught}"
    )


_CONCURRENT_WRITER = """
import os, time, orjson
from retained import Store
directory, tag, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
s = Store(directory)
print("ready", flush=True)
deadline = time.monotonic() + 30
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("no start signal within 30 s")
    time.sleep(0.001)
started = time.time()
proofs = [s.write(f"{tag} write 0", fields={"writer": tag, "i": 0})]
# Go on only once the other writer's first record is in the log: both are
# then writing at once by construction, however fast the disk (tmpfs) is,
# and each must find a tail it did not write itself.
other = b'"writer":"' + (b"B" if tag == "A" else b"A") + b'"'
with open(os.path.join(directory, "log.jsonl"), "rb") as log:
    while other not in log.read():
        if time.monotonic() > deadline:
            sys.exit("the other writer wrote nothing within 30 s")
        time.sleep(0.001)
        log.seek(0)
proofs += [s.write(f"{tag} write {i}", fields={"writer": tag, "i": i}) for i in range(1, n)]
sys.stdout.buffer.write(orjson.dumps({"proofs": proofs, "started": started, "ended": time.time()}) + b"\\n")
"""


def check_concurrent_writers(ctx: Context) -> str:
    """Two processes writing at once: every write lands once, the chain stays whole."""
    n = 25
    go = ctx.work / "go"
    procs = [_child(ctx, _CONCURRENT_WRITER, str(ctx.directory), tag, str(n), str(go)) for tag in ("A", "B")]
    try:
        for p in procs:
            if p.stdout is None:
                raise CheckFailed("a writer process has no stdout to read its proofs from")
            line = p.stdout.readline()
            expect(line.strip() == b"ready", f"writer pid {p.pid} did not start: {line[:100]!r}")
        go.touch()
        outs = [_finish(p, f"writer {tag}") for p, tag in zip(procs, ("A", "B"), strict=True)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    replies = {tag: orjson.loads(out) for tag, out in zip(("A", "B"), outs, strict=True)}
    acked = {tag: reply["proofs"] for tag, reply in replies.items()}
    # Evidence only (wall clocks may step): how long both were writing.
    overlap_ms = (min(r["ended"] for r in replies.values()) - max(r["started"] for r in replies.values())) * 1000
    ctx.fault("after_writers")
    records = chained(ctx.log_path)
    by_seq = {rec["seq"]: (offset, rec) for offset, rec in records}
    expect(len(records) == 2 * n, f"{len(records)} valid records in the log, {2 * n} were acknowledged")
    expect(sorted(by_seq) == list(range(1, 2 * n + 1)), f"seqs are not 1..{2 * n}: {len(by_seq)} distinct")
    first = sorted((proofs[0]["seq"], tag) for tag, proofs in acked.items())
    expect([q for q, _ in first] == [1, 2], f"the writers' first records are seq {first}, expected 1 and 2 (each waits for the other's)")
    for tag, proofs in acked.items():
        expect(len(proofs) == n, f"writer {tag} acknowledged {len(proofs)} of {n}")
        for i, p in enumerate(proofs):
            found = by_seq.get(p["seq"])
            expect(found is not None and found[1]["hash"] == p["hash"] and found[1].get("writer") == tag and found[1].get("i") == i,
                   f"writer {tag} write {i}: acknowledged as seq {p['seq']}, not found there in the log")
    prev = ZERO_HASH
    for seq in range(1, 2 * n + 1):
        rec = by_seq[seq][1]
        expect(rec["prev"] == prev, f"seq {seq} does not link to seq {seq - 1}")
        prev = rec["hash"]
    order = [by_seq[seq][1]["writer"] for seq in range(1, 2 * n + 1)]
    switches = sum(1 for a, b in itertools.pairwise(order) if a != b)
    report = ctx.store().verify()
    expect(report["ok"], f"verify after concurrent writes: {len(report['findings'])} findings")
    return (f"pids {procs[0].pid} + {procs[1].pid}: {n} + {n} acked, {len(records)}/{2 * n} in the log, chain whole; "
            f"both writing for {overlap_ms:.0f} ms, writers alternate {switches} times; verify ok")


def check_torn_tail(ctx: Context) -> str:
    """A torn last line is set aside byte for byte, and the chain continues after it."""
    s = ctx.store()
    proofs = [s.write(f"before the tear {i}") for i in range(3)]
    good = ctx.log_path.read_bytes()
    torn = b'{"client":{"name":"crashed-writer"},"kind":"note","text":"cut off mid-wri'
    append_raw(ctx.log_path, torn)
    mid = s.verify()
    expect(mid.get("torn_tail") is not None and mid["torn_tail"]["offset"] == len(good),
           f"verify does not report the unterminated tail at byte {len(good)}")
    after = s.write("after the tear")
    ctx.fault("after_recovery")
    quarantined = sorted(ctx.directory.glob("log.jsonl.torn-*"))
    expect(len(quarantined) == 1, f"{len(quarantined)} quarantine files beside the log, expected 1")
    kept = quarantined[0].read_bytes()
    expect(kept == torn, f"{quarantined[0].name} holds {len(kept)} bytes, the torn tail was {len(torn)} bytes (or they differ)")
    data = ctx.log_path.read_bytes()
    expect(data.startswith(good), "the lines before the tear were changed")
    expect(after["offset"] == len(good) and after["seq"] == 4,
           f"the next record is seq {after['seq']} at byte {after['offset']}, expected seq 4 at byte {len(good)}")
    expect(after["prev"] == proofs[-1]["hash"], "the record after the tear does not link to seq 3")
    check_proof(ctx.log_path, after)
    expect(len(data) == len(good) + after["length"], f"the log is {len(data)} bytes, expected {len(good) + after['length']}")
    report = s.verify()
    expect(report["ok"] and report["records"] == 4, f"verify after recovery: ok={report['ok']}, {report['records']} records")
    listed = report.get("quarantined") or []
    expect(any(q.get("bytes") == len(torn) for q in listed), "verify does not list the quarantined tail")
    return (
        f"{len(torn)}-byte tail at byte {len(good)} moved to {quarantined[0].name} byte-exact; "
        f"seq 4 at byte {after['offset']} links to seq 3; verify ok, quarantine listed"
    )


def check_foreign_line(ctx: Context) -> str:
    """A line another program appended is kept in place and skipped by the chain."""
    s = ctx.store()
    proofs = [s.write(f"chained note {i}") for i in range(2)]
    foreign = b'{"from":"another program","text":"not a chained record","n":1}\n'
    offset = append_raw(ctx.log_path, foreign)
    after = s.write("written after the foreign line")
    ctx.fault("after_write")
    expect(read_at(ctx.log_path, offset, len(foreign)) == foreign, f"the foreign line at byte {offset} was changed or moved")
    expect(after["seq"] == 3 and after["prev"] == proofs[-1]["hash"],
           f"the next record is seq {after['seq']}, linked to {after['prev'][:12]}..., expected seq 3 linked to seq 2")
    expect(after["offset"] == offset + len(foreign), f"the next record is at byte {after['offset']}, expected {offset + len(foreign)}")
    report = s.verify()
    expect(report["ok"], f"verify: {len(report['findings'])} findings with a foreign line present")
    expect(report.get("foreign") == [offset], f"verify reports foreign lines at {report.get('foreign')}, expected [{offset}]")
    expect(report["records"] == 3, f"verify counts {report['records']} records, expected 3")
    got = s.get([1, 2, 3])
    expect([e["seq"] for e in got] == [1, 2, 3], "records around the foreign line cannot all be read")
    searched = ""
    if getattr(s, "search", None) is not None:
        found = s.search("chained note", k=10)
        seqs = sorted(r["seq"] for r in found["results"])
        expect(seqs == [1, 2], f"search around the foreign line returns seqs {seqs}, expected [1, 2]")
        searched = ", search finds both chained notes"
    return (
        f"foreign line kept at byte {offset} ({len(foreign)} bytes), verify reports it; "
        f"seq 3 links to seq 2 across it; verify ok{searched}"
    )


def check_tamper_detect(ctx: Context) -> str:
    """One flipped byte is found and located by seq and offset; restored, verify is clean."""
    s = ctx.store()
    proofs = [s.write(f"tamper target {i}: the quick brown fox") for i in range(5)]
    target = proofs[2]
    raw = read_at(ctx.log_path, target["offset"], target["length"])
    at = target["offset"] + raw.index(b"quick")
    old, _ = flip_byte(ctx.log_path, at)
    ctx.fault("after_flip")
    report = s.verify()
    expect(not report["ok"], f"verify says ok after byte {at} (inside seq {target['seq']}) was changed")
    findings = report["findings"]
    located = [f for f in findings if f.get("seq") == target["seq"] and f.get("offset") == target["offset"]]
    expect(bool(located), f"no finding names seq {target['seq']} at byte {target['offset']}: {[(f.get('seq'), f.get('offset')) for f in findings]}")
    others = [f for f in findings if f.get("seq") not in (target["seq"], None)]
    expect(not others, f"the flip is also blamed on seq {[f.get('seq') for f in others]}")
    put_byte(ctx.log_path, at, old)
    # The index read the log while the line was damaged and left seq 3 out;
    # verify rightly reports that drift until the index is rebuilt.
    rebuild = getattr(s, "rebuild", None)
    if rebuild is not None:
        rebuild()
    clean = s.verify()
    expect(clean["ok"], f"with the byte restored verify still reports {len(clean['findings'])} findings")
    # A sweep: any single changed byte, wherever it falls (a quote, a digit of
    # seq, a hash, the newline), is found and placed at its line's offset.
    lines = file_lines(ctx.log_path)
    size = lines[-1][0] + len(lines[-1][1])
    rng = random.Random(3)
    positions = sorted(rng.sample(range(size), TAMPER_SWEEP))
    for pos in positions:
        line_offset = max(o for o, _ in lines if o <= pos)
        old, _ = flip_byte(ctx.log_path, pos)
        try:
            swept = s.verify()
        finally:
            put_byte(ctx.log_path, pos, old)
        expect(not swept["ok"], f"verify says ok with byte {pos} changed (in the line at byte {line_offset})")
        offsets = {f.get("offset") for f in swept["findings"]}
        expect(line_offset in offsets, f"byte {pos} changed: no finding at its line's byte {line_offset}, only at {sorted(map(str, offsets))}")
    after = s.verify()
    expect(after["ok"], f"after the sweep, with every byte restored, verify reports {len(after['findings'])} findings")
    return (
        f"byte {at} flipped → {located[0].get('kind')} at seq {target['seq']}, byte {target['offset']} "
        f"({len(findings)} finding, none elsewhere); {len(positions)}/{len(positions)} more single-byte changes "
        f"across the {size}-byte log each found at their line's offset; restored → verify ok"
    )
