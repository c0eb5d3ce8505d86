"""The self-test: named checks of retained's claims, each in a fresh temporary store.

``python -m retained --selftest`` (also ``retained selftest``) runs every check
and prints one line per check; this module only returns results, the CLI
prints them. Each check builds its own store in a new temporary directory
(0700, removed afterwards), does what a user or a crash would do, and looks at
the bytes on disk itself: the proof in an acknowledgement is compared with the
file, chain hashes are recomputed here from the specification (blake3 over
canonical JSON) rather than taken from the library, and the restart and
concurrency checks run real child processes.

A check returns one line of evidence with numbers, or fails with a reason. A
check whose feature is missing fails with ``not available: ...``: a missing
feature is never reported as passing, nor silently skipped.

Faults can be injected for tests of the checks themselves (a check never shown
failing proves nothing): ``faults`` maps a point name (``"<check>.<point>"``)
to a function called with the check's context at that point, typically to
damage the store on purpose; ``store_factory`` replaces the ``Store`` class,
e.g. with one whose verify is blind.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3
import orjson

from . import limits
from .errors import InvalidRecord, RetainedError
from .store import Store

__all__ = ["CHECKS", "CheckFailed", "Context", "NotAvailable", "format_line", "format_summary", "run", "run_check"]

ZERO_HASH = "0" * 64
# Single bytes changed, one at a time, by the tamper check's sweep.
TAMPER_SWEEP = 40
# Every child process gets this long; a healthy one needs well under a second.
CHILD_TIMEOUT_S = 60.0
# The package's parent directory, put on a child's sys.path so the child
# imports this very copy of retained (installed or not) without reading or
# changing the environment.
_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


class CheckFailed(Exception):
    """A check found its claim false; the message is the reason shown."""


class NotAvailable(CheckFailed):
    """The feature a check exercises is not there; the check fails, saying so."""

    def __init__(self, what: str) -> None:
        super().__init__(f"not available: {what}")


@dataclass
class Context:
    """What a check gets: its own store directory and the injected faults."""

    name: str
    work: Path
    store_factory: Callable[..., Any] = Store
    faults: Mapping[str, Callable[[Context], None]] = field(default_factory=dict)
    python: str = sys.executable
    _stores: list[Any] = field(default_factory=list)

    @property
    def directory(self) -> Path:
        """The store directory (created by retained itself on the first write)."""
        return self.work / "store"

    @property
    def log_path(self) -> Path:
        return self.directory / "log.jsonl"

    def store(self, **kwargs: Any) -> Any:
        """A new Store on this check's directory, closed when the check ends."""
        s = self.store_factory(self.directory, **kwargs)
        self._stores.append(s)
        return s

    def fault(self, point: str) -> None:
        """Run the fault injected at ``<check>.<point>``, if any (tests of the checks)."""
        hook = self.faults.get(f"{self.name}.{point}")
        if hook is not None:
            hook(self)

    def close(self) -> None:
        for s in self._stores:
            try:
                s.close()
            except (RetainedError, OSError, sqlite3.Error):
                pass
        self._stores.clear()


# -- helpers ----------------------------------------------------------------


def expect(condition: bool, reason: str) -> None:
    """Fail the check with ``reason`` unless ``condition`` holds (never stripped by -O)."""
    if not condition:
        raise CheckFailed(reason)


def need(obj: Any, attr: str, what: str) -> Any:
    """``obj.attr``, or fail the check as not available."""
    found = getattr(obj, attr, None)
    if found is None:
        owner = "Store" if isinstance(obj, Store) else type(obj).__name__
        raise NotAvailable(f"{owner}.{attr} is missing ({what})")
    return found


def _canonical(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def _b3(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def spec_hash(rec: dict[str, Any]) -> str:
    """The chain hash of a parsed record, computed here from the specification.

    ``cd = blake3(canonical(record minus seq, prev, hash))``, then
    ``hash = blake3(canonical({"cd", "prev", "seq"}))``; a redacted line
    supplies its stored ``cd``.
    """
    if rec.get("redacted") is True:
        cd = rec["cd"]
    else:
        cd = _b3(_canonical({k: v for k, v in rec.items() if k not in ("seq", "prev", "hash")}))
    return _b3(_canonical({"cd": cd, "prev": rec["prev"], "seq": rec["seq"]}))


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """A chained record from one line's bytes (with its newline), checked by the spec; else None."""
    if not raw.endswith(b"\n"):
        return None
    try:
        rec = orjson.loads(raw[:-1])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(rec, dict) or not {"seq", "prev", "hash"} <= rec.keys():
        return None
    if _canonical(rec) != raw[:-1] or spec_hash(rec) != rec["hash"]:
        return None
    return rec


def file_lines(path: Path) -> list[tuple[int, bytes]]:
    """``(offset, bytes)`` of every line of a file, read here, not through the library."""
    data = path.read_bytes() if path.exists() else b""
    out = []
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl == -1 else nl + 1
        out.append((pos, data[pos:end]))
        pos = end
    return out


def chained(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(offset, record)`` of every line that is a valid chained record by the spec."""
    out = []
    for offset, raw in file_lines(path):
        rec = parse_line(raw)
        if rec is not None:
            out.append((offset, rec))
    return out


def read_at(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def flip_byte(path: Path, offset: int) -> tuple[int, int]:
    """Change the byte at ``offset`` to another letter; returns (old, new)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(1)[0]
        new = ord("q") if old != ord("q") else ord("z")
        f.seek(offset)
        f.write(bytes([new]))
    return old, new


def put_byte(path: Path, offset: int, value: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(bytes([value]))


def append_raw(path: Path, data: bytes) -> int:
    """Append bytes to the log as another program would; returns their offset."""
    with open(path, "ab") as f:
        offset = f.tell()
        f.write(data)
    return offset


def check_proof(path: Path, proof: dict[str, Any]) -> dict[str, Any]:
    """The record a proof points at, after checking the proof against the file's bytes."""
    raw = read_at(path, proof["offset"], proof["length"])
    expect(len(raw) == proof["length"], f"proof says {proof['length']} bytes at byte {proof['offset']}, the file has {len(raw)} there")
    rec = parse_line(raw)
    expect(rec is not None, f"the {proof['length']} bytes at byte {proof['offset']} are not one valid chained line")
    assert rec is not None
    for key in ("seq", "hash", "prev"):
        expect(rec[key] == proof[key], f"proof {key} {str(proof[key])[:16]} differs from the file's {str(rec[key])[:16]} at byte {proof['offset']}")
    return rec


def _child(ctx: Context, code: str, *args: str, stdin: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """Start a child Python process running ``code`` with retained importable."""
    prelude = f"import sys\nsys.path.insert(0, {_PACKAGE_PARENT!r})\n"
    return subprocess.Popen(
        [ctx.python, "-c", prelude + code, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ctx.work,
    )


def _finish(proc: subprocess.Popen[bytes], what: str, ok_codes: Iterable[int] | None = (0,), input: bytes | None = None) -> bytes:
    """Wait for a child; its stdout, or CheckFailed with its last stderr line (``ok_codes`` None: any status)."""
    try:
        out, err = proc.communicate(input, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise CheckFailed(f"{what} (pid {proc.pid}) did not finish within {CHILD_TIMEOUT_S:g} s") from None
    except BaseException:
        proc.kill()  # interrupted: leave no child behind
        proc.communicate()
        raise
    if ok_codes is not None and proc.returncode not in ok_codes:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise CheckFailed(f"{what} (pid {proc.pid}) exited with status {proc.returncode}: {tail[0][:200]}")
    return out


def _log_state(path: Path) -> tuple[int, str]:
    data = path.read_bytes() if path.exists() else b""
    return len(data), _b3(data)


# -- the checks -------------------------------------------------------------


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
    sent = [
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
        expect(rec is not None, f"line at byte {offset} is not a valid chained record (hash does not recompute or bytes not canonical)")
        assert rec is not None
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
from retained.cli import main
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
            out = _finish(reader, "a new process (retained get, then retained verify)", input=seqs).splitlines()
        except CheckFailed as exc:
            raise CheckFailed(f"after the writer was killed with {n} acks: {exc}") from None
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.communicate()
    expect(len(out) == 2, f"the reader printed {len(out)} lines, expected 2 JSON documents")
    got, report = orjson.loads(out[0])["records"], orjson.loads(out[1])
    by_seq = {e["seq"]: e for e in got}
    for p in proofs:
        e = by_seq.get(p["seq"])
        expect(e is not None, f"seq {p['seq']} was acknowledged but a new process does not find it")
        assert e is not None
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


def signal_name(status: int | None) -> str:
    if status is not None and status < 0:
        try:
            return signal.Signals(-status).name
        except ValueError:
            pass
    return f"status {status}"


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
            assert p.stdout is not None
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
    return f"pids {procs[0].pid} + {procs[1].pid}: {n} + {n} acked, {len(records)}/{2 * n} in the log, chain whole; both writing for {overlap_ms:.0f} ms, writers alternate {switches} times; verify ok"


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
    expect(after["offset"] == len(good) and after["seq"] == 4, f"the next record is seq {after['seq']} at byte {after['offset']}, expected seq 4 at byte {len(good)}")
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
    expect(after["seq"] == 3 and after["prev"] == proofs[-1]["hash"], f"the next record is seq {after['seq']}, linked to {after['prev'][:12]}..., expected seq 3 linked to seq 2")
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


def check_supersede(ctx: Context) -> str:
    """A correction names what it supersedes; the old record is unchanged, hidden and counted."""
    s = ctx.store()
    need(s, "search", "search with superseded records hidden")
    old = s.write("the deploy target is staging", scope="proj")
    old_bytes = read_at(ctx.log_path, old["offset"], old["length"])
    new = s.write("the deploy target is production", scope="proj", supersedes=[old["seq"]])
    ctx.fault("after_write")
    expect(read_at(ctx.log_path, old["offset"], old["length"]) == old_bytes, f"seq {old['seq']} changed on disk when superseded")
    rec = check_proof(ctx.log_path, new)
    expect(rec.get("supersedes") == [old["seq"]], f"seq {new['seq']} stores supersedes={rec.get('supersedes')}")
    found = s.search("deploy target", k=10)
    seqs = [r["seq"] for r in found["results"]]
    expect(seqs == [new["seq"]], f"search returns seqs {seqs}, expected only the correction seq {new['seq']}")
    expect(found["left_out"].get("superseded") == 1, f"search left_out {found['left_out']}: the superseded record is not counted")
    both = s.search("deploy target", k=10, include_superseded=True)
    old_entry = next((r for r in both["results"] if r["seq"] == old["seq"]), None)
    expect(old_entry is not None, "with include_superseded the old record is not returned")
    assert old_entry is not None
    expect(old_entry.get("superseded_by") == [new["seq"]], f"the old record shows superseded_by={old_entry.get('superseded_by')}")
    got = s.get([old["seq"]])[0]
    expect(got["record"]["text"] == "the deploy target is staging", "the superseded record no longer reads back")
    return (
        f"seq {new['seq']} supersedes seq {old['seq']}; old line unchanged ({old['length']} bytes); "
        f"search returns 1, left_out superseded=1; with include_superseded 2, superseded_by={old_entry.get('superseded_by')}"
    )


def _accounting(found: dict[str, Any]) -> tuple[int, int, int]:
    left = sum(found["left_out"].values())
    return found["returned"], left, found["total_matches"]


def check_search_accounting(ctx: Context) -> str:
    """returned + left out = matched, for several k and token budgets."""
    s = ctx.store()
    need(s, "search", "search with the I2 accounting")
    rng = random.Random(6)
    items = []
    for i in range(30):
        filler = " ".join(rng.choice(["river", "stone", "copper", "window", "garden"]) for _ in range(rng.randrange(0, 40)))
        items.append({"text": f"lantern note {i} {filler}", "scope": "even" if i % 2 == 0 else "odd"})
    for i in range(6):
        items.append({"text": f"unrelated note {i} about a bicycle"})
    s.write_batch(items)  # seq 1..36; seq 1..30 mention lantern
    s.write("lantern correction one", supersedes=[3])
    s.write("lantern correction two", supersedes=[4, 5])
    need(s, "forget", "retraction")([7, 8], "obsolete by the selftest")
    ctx.fault("after_write")
    # What should match, counted here from the file: records mentioning lantern.
    matching = {rec["seq"] for _, rec in chained(ctx.log_path) if "lantern" in str(rec.get("text", ""))}
    superseded, retracted = {3, 4, 5}, {7, 8}
    visible = len(matching - superseded - retracted)
    runs = 0
    for k in (1, 5, visible, 100):
        for budget in (None, 8, 60, 100_000):
            found = s.search("lantern", k=k, max_tokens=budget)
            returned, left, total = _accounting(found)
            what = f"k={k} max_tokens={budget}"
            expect(total == len(matching), f"{what}: total_matches {total}, the log has {len(matching)} records mentioning it")
            expect(returned + left == total, f"{what}: returned {returned} + left out {left} != matched {total} ({found['left_out']})")
            expect(returned == len(found["results"]) <= k, f"{what}: returned {returned}, {len(found['results'])} results")
            expect(found["left_out"].get("superseded") == 3 and found["left_out"].get("retracted") == 2,
                   f"{what}: left_out {found['left_out']}, expected superseded 3 and retracted 2")
            expect(found["left_out"].get("beyond_k", 0) == max(0, visible - k), f"{what}: beyond_k {found['left_out'].get('beyond_k')}, expected {max(0, visible - k)}")
            if budget is not None:
                expect(found.get("tokens", 0) <= budget, f"{what}: {found.get('tokens')} tokens returned")
            hidden = {r["seq"] for r in found["results"]} & (superseded | retracted)
            expect(not hidden, f"{what}: returns hidden records {sorted(hidden)}")
            for r in found["results"]:
                raw = read_at(ctx.log_path, r["offset"], r["length"])
                expect(_canonical(r["record"]) + b"\n" == raw, f"{what}: result seq {r['seq']} differs from its line in the log")
            runs += 1
    tight = s.search("lantern", k=visible, max_tokens=8)
    expect(tight["left_out"].get("over_budget", 0) > 0, f"a budget of 8 tokens left nothing out for over_budget: {tight['left_out']}")
    scoped = s.search("lantern", k=100, scope="even")
    in_scope = len([q for q in matching if q <= 30 and q % 2 == 1])  # items i even are seq i + 1
    expect(scoped["total_matches"] == in_scope, f"scope even: total_matches {scoped['total_matches']}, expected {in_scope}")
    expect(sum(_accounting(scoped)[:2]) == in_scope, f"scope even: returned + left out != {in_scope}")
    return (
        f"{runs} searches (k 1/5/{visible}/100 × budget none/8/60/100000): returned + left out = {len(matching)} matched every time; "
        f"superseded 3, retracted 2 hidden and counted; budget 8 → {tight['returned']} returned, {tight['left_out'].get('over_budget')} over budget"
    )


HOSTILE_QUERIES = (
    '"unbalanced quote', "AND OR NOT", "NEAR(alpha beta", "text:alpha", "alpha*", "*", "^alpha", "alpha -beta",
    "(((", ")", "'; DROP TABLE records; --", "c++", "naïve café", "日本語のテキスト", "🧪🧪", "", "   ", "\x00\x01",
    "alpha " * 300, "a" * 2000,
)


def check_search_hostile(ctx: Context) -> str:
    """Whatever a user types, search answers with its accounting: no query syntax error reaches them."""
    s = ctx.store()
    need(s, "search", "search")
    s.write_batch([
        {"text": "alpha beta gamma"},
        {"text": "c++ templates and the naïve café"},
        {"text": "日本語のテキストを検索する"},
        {"text": "the records table is not for dropping"},
    ])
    ctx.fault("after_write")
    answered = matched = 0
    for q in HOSTILE_QUERIES:
        try:
            found = s.search(q, k=5)
        except RetainedError as exc:
            raise CheckFailed(f"query {q[:40]!r}: {exc.code}: {exc.message[:120]}") from None
        except sqlite3.Error as exc:
            raise CheckFailed(f"query {q[:40]!r} reached SQLite as query syntax: {exc}") from None
        returned, left, total = _accounting(found)
        expect(returned + left == total, f"query {q[:40]!r}: returned {returned} + left out {left} != matched {total}")
        answered += 1
        matched += total > 0
    report = s.verify()
    expect(report["ok"], f"verify after the hostile queries: {len(report['findings'])} findings")
    plain = s.search("alpha", k=5)
    expect(plain["total_matches"] == 1, f"an ordinary query finds {plain['total_matches']} records after the hostile ones, expected 1")
    return f"{answered}/{len(HOSTILE_QUERIES)} hostile queries (FTS5 syntax, SQL, quotes, NUL, CJK, 2000 chars) answered with accounting, {matched} matched something; store intact"


def _index_files(directory: Path) -> list[Path]:
    return [p for p in (directory / "index.sqlite3", directory / "index.sqlite3-wal", directory / "index.sqlite3-shm") if p.exists()]


def check_index_rebuild(ctx: Context) -> str:
    """Index drift is found both ways; the index deleted, rebuilt from the log, verifies clean."""
    s = ctx.store()
    need(s, "search", "the derived index")
    need(s, "rebuild", "rebuilding the index from the log")
    s.write_batch([{"text": f"alpha record {i} beta"} for i in range(12)])
    before = s.search("alpha", k=20)
    expect(before["total_matches"] == 12, f"search finds {before['total_matches']} of 12 before the rebuild")
    report = s.verify()
    expect(report["ok"], f"verify before damage: {len(report['findings'])} findings")
    # Damage the index both ways: a record missing from it, a row with no record.
    db = sqlite3.connect(ctx.directory / "index.sqlite3")
    try:
        row = db.execute("SELECT offset, length, hash FROM records WHERE seq = 5").fetchone()
        expect(row is not None, "the index has no row for seq 5 to damage")
        db.execute("DELETE FROM records WHERE seq = 5")
        db.execute("INSERT INTO records (seq, offset, length, hash) VALUES (999, ?, ?, ?)", row)
        db.commit()
    finally:
        db.close()
    drift = s.verify()
    kinds = {(f.get("kind"), f.get("seq")) for f in drift["findings"]}
    expect(not drift["ok"], "verify says ok with a record missing from the index and a ghost row in it")
    expect(any(seq == 5 for _, seq in kinds), f"verify does not name seq 5, missing from the index: {sorted(map(str, kinds))}")
    expect(any(seq == 999 for _, seq in kinds), f"verify does not name the ghost row seq 999: {sorted(map(str, kinds))}")
    s.close()
    removed = _index_files(ctx.directory)
    for p in removed:
        p.unlink()
    expect(bool(removed), "there was no index file to delete")
    ctx.fault("after_delete")
    s2 = ctx.store()
    result = need(s2, "rebuild", "rebuilding the index from the log")()
    expect(result.get("records") == 12, f"rebuild indexed {result.get('records')} records, the log has 12")
    clean = s2.verify()
    expect(clean["ok"], f"verify after rebuild: {len(clean['findings'])} findings: {[f.get('kind') for f in clean['findings']][:5]}")
    after = s2.search("alpha", k=20)
    same = [r["seq"] for r in after["results"]] == [r["seq"] for r in before["results"]]
    expect(same and after["total_matches"] == before["total_matches"], "search after the rebuild differs from before")
    return (
        f"verify found the drift both ways ({', '.join(sorted({str(k) for k, _ in kinds}))}); "
        f"{len(removed)} index files deleted → rebuild indexed {result['records']} records → verify ok, same {after['total_matches']} matches"
    )


def check_index_damaged(ctx: Context) -> str:
    """A damaged index file is no single point of failure: writes land, search and verify answer."""
    s = ctx.store()
    need(s, "search", "the derived index")
    s.write_batch([{"text": f"gamma record {i}"} for i in range(10)])
    expect(s.search("gamma", k=20)["total_matches"] == 10, "search does not find the 10 records before the damage")
    s.close()
    for p in _index_files(ctx.directory):
        p.unlink()
    garbage = b"this is not an SQLite database " * 64
    (ctx.directory / "index.sqlite3").write_bytes(garbage)
    ctx.fault("after_damage")
    s2 = ctx.store()
    proof = s2.write("gamma record written after the damage")
    check_proof(ctx.log_path, proof)
    found = s2.search("gamma", k=20)
    expect(found["total_matches"] == 11 and found["returned"] == 11,
           f"search with a damaged index: {found['returned']} returned of {found['total_matches']} matched, the log has 11")
    report = s2.verify()
    expect(report["ok"], f"verify after the index was replaced: {len(report['findings'])} findings")
    kept = [p.name for p in ctx.directory.iterdir() if p.is_file() and p.read_bytes() == garbage]
    return (
        f"{len(garbage)} bytes of garbage as index.sqlite3: seq {proof['seq']} still acked and read back, "
        f"search finds 11/11, verify ok; damaged file kept as {', '.join(kept) or 'nothing'}"
    )


def _dead_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check_embedder_down(ctx: Context) -> str:
    """With the embedder unreachable, writes land and search answers lexically, saying why."""
    port = _dead_port()
    settings = {"RETAINED_EMBED_URL": f"http://127.0.0.1:{port}/api/embed", "RETAINED_EMBED_MODEL": "selftest-model"}
    try:
        s = ctx.store(embed_settings=settings, follow_writes=True)
    except TypeError:
        raise NotAvailable("Store takes no embed_settings (embeddings are not wired into the store)") from None
    need(s, "search", "search")
    proofs = [s.write(f"epsilon record {i}") for i in range(5)]
    for p in proofs:
        check_proof(ctx.log_path, p)
    ctx.fault("after_write")
    found = s.search("epsilon", k=10)
    if "mode" not in found:
        raise NotAvailable("Store.search ignores embed_settings (its reply has no mode)")
    expect(found["mode"] == "lexical", f"search with the embedder down answered in mode {found['mode']!r}")
    reason = str(found.get("mode_reason") or "")
    expect(bool(reason), "search fell back to lexical without saying why")
    expect(found["total_matches"] == 5 and found["returned"] == 5, f"search found {found['returned']} of {found['total_matches']} matched, the log has 5")
    returned, left, total = _accounting(found)
    expect(returned + left == total, f"returned {returned} + left out {left} != matched {total}")
    report = s.verify()
    expect(report["ok"], f"verify with the embedder down: {len(report['findings'])} findings")
    vectors = report.get("vectors") or {}
    expect(vectors.get("missing") == 5, f"verify does not say that the 5 records lack vectors: {vectors.get('missing')!r}")
    breaker = (found.get("vectors") or {}).get("breaker")
    return (
        f"embedder at 127.0.0.1:{port} unreachable: 5 writes acked, search answers lexically with 5/5 "
        f"(breaker {breaker}; reason: {reason.split(':')[0]}), verify ok and reports 5 records without vectors"
    )


def _brief_function() -> Callable[..., Any]:
    try:
        from . import brief as brief_module
    except ImportError:
        raise NotAvailable("retained/brief.py is missing (the session-start brief)") from None
    fn = getattr(brief_module, "build_brief", None) or getattr(brief_module, "brief", None)
    if fn is None:
        raise NotAvailable("retained.brief has no build_brief() function")
    return fn


def _call_brief(ctx: Context, store: Any, budget: int) -> dict[str, Any]:
    method = getattr(store, "brief", None)
    if method is not None:
        return method(budget=budget)
    return _brief_function()(ctx.directory, budget=budget)


def _count(value: Any) -> int:
    """A count given as a number, a list of items, or a dict of counts by reason."""
    if isinstance(value, dict):
        return sum(int(v) for v in value.values())
    if isinstance(value, list):
        return len(value)
    return int(value)


def check_brief_accounting(ctx: Context) -> str:
    """The brief says what it left out: included + dropped = eligible, counted here from the log."""
    s = ctx.store()
    if getattr(s, "brief", None) is None:
        _brief_function()
    s.write_batch([{"text": f"brief note {i}: " + "context " * (i % 7)} for i in range(20)])  # seq 1..20
    s.checkpoint("brief checkpoint", summary="the state of the work")  # seq 21
    s.write("brief correction", supersedes=[2])  # seq 22
    need(s, "forget", "retraction")([5], "withdrawn by the selftest")  # seq 23, bookkeeping
    ctx.fault("after_write")
    # Eligible, counted from the file: chained records other than bookkeeping kinds.
    records = {rec["seq"]: rec for _, rec in chained(ctx.log_path)}
    eligible = sorted(q for q, rec in records.items() if rec.get("kind") not in ("retract", "redaction"))
    hidden = {2, 5}
    runs = []
    for budget in (30, 150, 100_000):
        b = _call_brief(ctx, s, budget)
        expect("included" in b and "dropped" in b, f"budget {budget}: the brief has no included/dropped accounting")
        included, dropped = _count(b["included"]), _count(b["dropped"])
        what = f"budget {budget}"
        expect(included + dropped == len(eligible),
               f"{what}: included {included} + dropped {dropped} != {len(eligible)} eligible records in the log")
        expect(b.get("eligible", len(eligible)) == len(eligible), f"{what}: the brief says {b.get('eligible')} eligible, the log has {len(eligible)}")
        expect(b.get("tokens", 0) <= budget, f"{what}: the brief used {b.get('tokens')} tokens")
        if isinstance(b["dropped"], dict):
            expect(b["dropped"].get("superseded") == 1 and b["dropped"].get("retracted") == 1,
                   f"{what}: dropped {b['dropped']}, expected superseded 1 and retracted 1")
        if isinstance(b["included"], list):
            shown = [e.get("seq") for e in b["included"]]
            expect(not hidden & set(shown), f"{what}: shows superseded or retracted seqs {sorted(hidden & set(shown))}")
            for e in b["included"]:
                rec = records.get(e.get("seq"), {})
                if not e.get("cut"):
                    expect(e.get("text") == rec.get("text"), f"{what}: seq {e.get('seq')} is shown with other text than the log holds")
        runs.append((budget, included, dropped))
    full = _call_brief(ctx, s, 100_000)
    expect(_count(full["included"]) == len(eligible) - len(hidden), f"a budget of 100000 shows {_count(full['included'])} of {len(eligible) - len(hidden)} current records")
    if isinstance(full["included"], list):
        expect(full["included"][0].get("seq") == 21, f"the brief starts with seq {full['included'][0].get('seq')}, not the checkpoint seq 21")
        notes = [e["seq"] for e in full["included"][1:]]
        expect(notes == sorted(notes, reverse=True), "the notes are not newest first")
    expect(runs[0][2] > len(hidden), f"a budget of 30 tokens dropped only {runs[0][2]}")
    return "; ".join(f"budget {b}: {i} included + {d} dropped = {len(eligible)} eligible" for b, i, d in runs) + " (counted from the log; superseded 1, retracted 1)"


def check_brief_degraded(ctx: Context) -> str:
    """The brief never fails its host: a missing or damaged store is a status, damage around records is skipped."""
    build = _brief_function()
    missing = build(ctx.work / "no-store-here", budget=200)
    expect(missing.get("status") == "absent" and _count(missing["included"]) == 0,
           f"a missing store: status {missing.get('status')!r}, expected 'absent'")
    broken_dir = ctx.work / "broken"
    (broken_dir / "log.jsonl").mkdir(parents=True)
    broken = build(broken_dir, budget=200)
    message = str(broken.get("message") or "")
    expect(broken.get("status") == "unreadable" and message and "\n" not in message,
           f"a log that is a directory: status {broken.get('status')!r}, message {message[:80]!r}")
    s = ctx.store()
    s.write_batch([{"text": f"delta note {i}"} for i in range(5)])
    s.search("delta", k=1)  # an index exists before it is damaged
    s.close()
    for p in _index_files(ctx.directory):
        p.unlink()
    (ctx.directory / "index.sqlite3").write_bytes(b"garbage, not SQLite " * 50)
    append_raw(ctx.log_path, b'{"from":"another program"}\n{"torn":"tail')
    ctx.fault("after_damage")
    b = build(ctx.directory, budget=10_000)
    shown = _count(b["included"])
    expect(b.get("status") == "ok" and shown == 5,
           f"a store with a garbage index, a foreign line and a torn tail: status {b.get('status')!r}, shows {shown} of 5 records")
    expect(shown + _count(b["dropped"]) == 5, f"included {shown} + dropped {_count(b['dropped'])} != 5 eligible")
    expect(not list(ctx.directory.glob("log.jsonl.torn-*")), "the brief repaired the log (it must not write)")
    return (
        f"missing store → {missing['status']}; log is a directory → {broken['status']} (one line); garbage index + foreign "
        f"line + torn tail → ok, {shown}/5 shown, log untouched"
    )


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def check_bad_input(ctx: Context) -> str:
    """Bad input is refused with a stable code and a clear message, and nothing is written."""
    s = ctx.store()
    s.write("the only good record")
    # The size limit is configurable; a small one keeps the check fast (the
    # default, limits.RECORD_BYTES_MAX, is enforced by the same code).
    small_limit = 64 * 1024
    small = ctx.store(record_bytes_max=small_limit)
    cases: list[tuple[str, str, Callable[[], Any]]] = [
        ("reserved field seq", "reserved_field", lambda: s.write("x", fields={"seq": 7})),
        ("reserved field client", "reserved_field", lambda: s.write("x", fields={"client": {"name": "forged"}})),
        ("API field inside fields", "reserved_field", lambda: s.write("x", fields={"text": "shadow"})),
        ("NaN", "invalid_argument", lambda: s.write("x", body={"score": float("nan")})),
        ("Infinity", "invalid_argument", lambda: s.write("x", fields={"score": float("inf")})),
        ("integer over 64 bits", "invalid_argument", lambda: s.write("x", fields={"n": 2**64})),
        ("integer under -2**63", "invalid_argument", lambda: s.write("x", fields={"n": -(2**63) - 1})),
        ("lone surrogate", "invalid_argument", lambda: s.write("bad \ud800 text")),
        ("lone surrogate in a key", "invalid_argument", lambda: s.write("x", fields={"k\udfff": 1})),
        (f"nested {limits.DEPTH_MAX + 36} deep", "invalid_argument", lambda: s.write("x", body=_deep(limits.DEPTH_MAX + 36))),
        (f"record over a limit of {small_limit} bytes", "too_large", lambda: small.write("x" * small_limit)),
        ("store-owned kind", "invalid_argument", lambda: s.write("x", kind="retract")),
        ("text not a string", "invalid_argument", lambda: s.write(12345)),  # type: ignore[arg-type]
        ("supersedes a seq that does not exist", "not_found", lambda: s.write("x", supersedes=[99])),
    ]
    before = _log_state(ctx.log_path)
    ctx.fault("before_cases")
    codes: dict[str, int] = {}
    for label, code, call in cases:
        try:
            call()
        except RetainedError as exc:
            expect(exc.code == code, f"{label}: refused with code {exc.code}, expected {code}")
            msg = exc.message
            expect(bool(msg) and msg[0].islower() and not msg.endswith("."), f"{label}: message is not in the house style: {msg[:80]!r}")
            expect(len(msg) < 1000, f"{label}: message of {len(msg)} characters echoes the input")
            if code == "too_large":
                expect(str(small_limit) in msg, f"{label}: the message does not state the limit: {msg[:120]!r}")
            codes[code] = codes.get(code, 0) + 1
        else:
            raise CheckFailed(f"{label}: accepted, expected a {code} error")
        now = _log_state(ctx.log_path)
        expect(now == before, f"{label}: the log changed ({before[0]} → {now[0]} bytes) although the write was refused")
    expect(not list(ctx.directory.glob("log.jsonl.torn-*")), "a refused write left a quarantine file")
    report = s.verify()
    expect(report["ok"] and report["records"] == 1, f"after the refusals verify: ok={report['ok']}, {report['records']} records")
    summary = ", ".join(f"{c}×{n}" for c, n in sorted(codes.items()))
    return f"{len(cases)} kinds refused ({summary}); log unchanged at {before[0]} bytes, 1 record, verify ok"


def _mebibyte_text(rng: random.Random) -> str:
    """1 MiB of UTF-8 with every kind of character JSON must escape or encode."""
    alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFXYZ 0123456789 .,;:-_\n\t\"\\/ é ß 日本 ✓ 🧪 \u2028 \x01"
    target = 1024 * 1024
    # Random 1 KiB pieces, assembled in random order: varied enough, and fast.
    pool = ["".join(rng.choices(alphabet, k=1024)) for _ in range(64)]
    parts = []
    size = 0
    while size < target:
        chunk = pool[rng.randrange(len(pool))]
        parts.append(chunk)
        size += len(chunk.encode("utf-8"))
    text = "".join(parts)
    data = text.encode("utf-8")[:target]
    return data.decode("utf-8", "ignore")


def check_large_record(ctx: Context) -> str:
    """A 1 MiB record is stored and read back byte-exact."""
    s = ctx.store()
    text = _mebibyte_text(random.Random(1))
    size = len(text.encode("utf-8"))
    expect(size > 1024 * 1024 - 4, f"the test text is {size} bytes, not 1 MiB")
    s.write("small before")
    proof = s.write(text, source="selftest", fields={"digest": _b3(text.encode("utf-8"))})
    s.write("small after")
    ctx.fault("after_write")
    rec = check_proof(ctx.log_path, proof)
    expect(rec["text"] == text, "the text in the file differs from the text written")
    got = ctx.store().get([proof["seq"]])[0]["record"]
    expect(got["text"] == text, "the text read back differs from the text written")
    expect(_b3(got["text"].encode("utf-8")) == got["digest"], "the digest of the text read back differs")
    report = s.verify()
    expect(report["ok"] and report["records"] == 3, f"verify: ok={report['ok']}, {report['records']} records")
    return f"{size}-byte text ({proof['length']}-byte line at byte {proof['offset']}) read back equal, blake3 {got['digest'][:12]}..., verify ok"


def check_idempotent_retry(ctx: Context) -> str:
    """The same client_op_id twice gives one record; the retry says duplicate."""
    s = ctx.store()
    first = s.write("exactly once", client_op_id="op-selftest-1")
    size = ctx.log_path.stat().st_size
    ctx.fault("after_first")
    again = s.write("exactly once", client_op_id="op-selftest-1")
    other = ctx.store().write("exactly once", client_op_id="op-selftest-1")  # a new handle: no cache
    expect(again.get("duplicate") is True and other.get("duplicate") is True, f"a retry came back with duplicate={again.get('duplicate')}, {other.get('duplicate')}")
    expect(again["seq"] == other["seq"] == first["seq"] and again["hash"] == first["hash"], f"the retry names seq {again['seq']}/{other['seq']}, the first write was seq {first['seq']}")
    expect(ctx.log_path.stat().st_size == size, "a retry appended bytes")
    new = s.write("another operation", client_op_id="op-selftest-2")
    expect(new["duplicate"] is False and new["seq"] == first["seq"] + 1, f"a new client_op_id got seq {new['seq']}, duplicate={new['duplicate']}")
    ops = [rec.get("client_op_id") for _, rec in chained(ctx.log_path)]
    expect(ops.count("op-selftest-1") == 1, f"client_op_id op-selftest-1 is in the log {ops.count('op-selftest-1')} times")
    return f"2 retries (same handle, new handle) → seq {first['seq']} duplicate, log stays {size} bytes; a new id → seq {new['seq']}"


def check_redaction(ctx: Context) -> str:
    """Erasure removes a record's content for good, and the chain still verifies."""
    s = ctx.store()
    redact = need(s, "redact", "erasure of a record's content")
    secret_word = "zanzibarquokka"
    proofs = [s.write(f"keep {i}") for i in range(2)]
    target = s.write(f"erase me: {secret_word}", scope="private")
    proofs.append(s.write("keep after"))
    if getattr(s, "search", None) is not None:
        s.search(secret_word, k=5)  # the word is in the index before the erasure
    result = redact(target["seq"], "selftest erasure")
    ctx.fault("after_redact")
    data = ctx.log_path.read_bytes()
    expect(secret_word.encode() not in data, "the erased word is still in the log")
    leftovers = [p.name for p in ctx.directory.iterdir() if p.is_file() and secret_word.encode() in p.read_bytes()]
    expect(not leftovers, f"the erased word is still in {leftovers}")
    lines = {rec["seq"]: rec for _, rec in chained(ctx.log_path)}
    red = lines.get(target["seq"])
    expect(red is not None and red.get("redacted") is True and red["hash"] == target["hash"],
           f"seq {target['seq']} is not a redacted line keeping its hash")
    for p in proofs:
        expect(lines.get(p["seq"], {}).get("hash") == p["hash"], f"seq {p['seq']} changed its hash after the erasure")
    report = s.verify()
    expect(report["ok"], f"verify after the erasure: {len(report['findings'])} findings")
    expect(target["seq"] in (report.get("redacted") or []), "verify does not list the redacted seq")
    if getattr(s, "search", None) is not None:
        hits = s.search(secret_word, k=5)
        expect(hits["total_matches"] == 0, f"search still matches the erased word {hits['total_matches']} times")
    record_seq = (result.get("redaction_record") or {}).get("seq")
    return f"seq {target['seq']} erased (redaction record seq {record_seq}); word gone from every file, {len(lines)} records, chain verifies"


def check_secret_guard(ctx: Context) -> str:
    """A credential is refused before anything is written; a private span never reaches the log."""
    s = ctx.store()
    s.write("the only record before the guard is tried")
    before = _log_state(ctx.log_path)
    # Fake credentials in real formats, assembled so no scanner takes this file for a leak.
    aws = "AKIA" + "ABCDEFGHIJ234567"
    github = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"[::-1]
    cases = [
        ("text", lambda: s.write(f"deploy with key {aws} tomorrow")),
        ("a nested field", lambda: s.write("ci settings", fields={"ci": {"steps": ["checkout", f"token {github}"]}})),
        ("body", lambda: s.write("rotation", body=f"old key was {aws}")),
    ]
    refused = []
    for where, call in cases:
        try:
            proof = call()
        except RetainedError as exc:
            expect(exc.code == "secret_detected", f"a key in {where}: refused with code {exc.code}, expected secret_detected")
            expect(aws not in exc.message and github not in exc.message, f"a key in {where}: the error message repeats the secret")
            refused.append(getattr(exc, "kind", None) or exc.to_dict().get("kind") or "?")
        else:
            stored = ctx.log_path.read_bytes()
            if aws.encode() in stored or github.encode() in stored:
                if not refused:
                    raise NotAvailable(f"Store.write does not apply the write guard (a key in {where} was stored as seq {proof['seq']})")
                raise CheckFailed(f"a key in {where} was stored as seq {proof['seq']}")
            raise CheckFailed(f"a key in {where} was accepted (seq {proof['seq']}), though not stored as sent")
        now = _log_state(ctx.log_path)
        expect(now == before, f"a key in {where}: the log changed ({before[0]} → {now[0]} bytes) although the write was refused")
    private = s.write("the release is friday <private>door code 4711</private>, ask ops")
    ctx.fault("after_write")
    rec = check_proof(ctx.log_path, private)
    expect(b"4711" not in ctx.log_path.read_bytes(), "the text of a <private> span reached the log")
    expect("<private>" not in rec.get("text", ""), f"the stored text still has the private tags: {rec.get('text')!r}")
    removed = private.get("private_spans_removed")
    expect(removed == 1, f"the proof says private_spans_removed={removed}, expected 1")
    return (
        f"{len(refused)} writes with fake keys refused as secret_detected ({', '.join(map(str, refused))}), "
        f"no secret in the messages, log unchanged at {before[0]} bytes; 1 <private> span removed from seq {private['seq']} (the proof says so)"
    )


def check_lock_busy(ctx: Context) -> str:
    """A writer that cannot get the lock in time gets store_busy and writes nothing; a retry then lands once."""
    from .lock import StoreLock

    wait_s = 0.2
    s = ctx.store(lock_wait_s=wait_s)
    s.write("before the lock is held")
    before = _log_state(ctx.log_path)
    started = time.monotonic()
    with StoreLock(ctx.directory / "log.lock", 1.0):  # another holder: a separate descriptor excludes like a process
        try:
            s.write("must wait", client_op_id="op-busy")
        except RetainedError as exc:
            waited = time.monotonic() - started
            expect(exc.code == "store_busy", f"a write against a held lock failed with {exc.code}, expected store_busy")
        else:
            raise CheckFailed("a write went through while another holder had the lock")
        ctx.fault("while_locked")
        expect(_log_state(ctx.log_path) == before, "the refused write changed the log")
    expect(waited >= wait_s * 0.9, f"store_busy came after {waited:.2f} s, before the {wait_s} s wait was over")
    retry = s.write("must wait", client_op_id="op-busy")
    again = s.write("must wait", client_op_id="op-busy")
    expect(retry["seq"] == 2 and again.get("duplicate") is True and again["seq"] == 2,
           f"the retry landed as seq {retry['seq']}, its repeat as seq {again['seq']} duplicate={again.get('duplicate')}")
    return f"store_busy after {waited:.2f} s (lock_wait_s {wait_s}), log unchanged at {before[0]} bytes; released → retry seq {retry['seq']}, repeat duplicate"


def check_file_modes(ctx: Context) -> str:
    """The store directory is 0700 and its files 0600."""
    if os.name == "nt":
        return "not applicable on Windows (NTFS ACLs); nothing to check"
    s = ctx.store()
    s.write("mode check")
    append_raw(ctx.log_path, b'{"torn":')
    s.write("after a torn tail")
    if getattr(s, "search", None) is not None:
        s.search("mode", k=1)
    ctx.fault("after_write")
    modes = {ctx.directory.name + "/": stat.S_IMODE(ctx.directory.stat().st_mode)}
    for p in sorted(ctx.directory.iterdir()):
        modes[p.name] = stat.S_IMODE(p.stat().st_mode)
    bad = {name: oct(m) for name, m in modes.items() if m & 0o077}
    expect(not bad, f"readable or writable by others: {bad}")
    expect(modes[ctx.directory.name + "/"] == 0o700, f"the store directory is {oct(modes[ctx.directory.name + '/'])}")
    return f"{len(modes)} paths, none open to group or others: " + ", ".join(f"{n} {oct(m)[2:]}" for n, m in modes.items())


CHECKS: dict[str, Callable[[Context], str]] = {
    "ack_proof": check_ack_proof,
    "read_back": check_read_back,
    "chain_links": check_chain_links,
    "torn_tail": check_torn_tail,
    "foreign_line": check_foreign_line,
    "tamper_detect": check_tamper_detect,
    "supersede": check_supersede,
    "search_accounting": check_search_accounting,
    "search_hostile": check_search_hostile,
    "index_rebuild": check_index_rebuild,
    "index_damaged": check_index_damaged,
    "embedder_down": check_embedder_down,
    "brief_accounting": check_brief_accounting,
    "brief_degraded": check_brief_degraded,
    "bad_input": check_bad_input,
    "large_record": check_large_record,
    "idempotent_retry": check_idempotent_retry,
    "redaction": check_redaction,
    "secret_guard": check_secret_guard,
    "lock_busy": check_lock_busy,
    "file_modes": check_file_modes,
    "restart": check_restart,
    "concurrent_writers": check_concurrent_writers,
}

# Checks whose time goes to child processes (interpreter start-up, fsync):
# run() submits them first so they overlap the rest.
BACKGROUND = frozenset({"restart", "concurrent_writers"})
# Threads for run(parallel=True): the checks wait mostly on fsync, SQLite and
# children, which release the interpreter; each has its own store.
WORKERS = 4


# -- running ----------------------------------------------------------------


def run_check(
    name: str,
    *,
    faults: Mapping[str, Callable[[Context], None]] | None = None,
    store_factory: Callable[..., Any] | None = None,
    base: str | os.PathLike[str] | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """Run one check in a fresh temporary store; returns ``{"name", "ok", "detail", "ms"}``.

    Raises:
        InvalidRecord: no check has that name.
    """
    fn = CHECKS.get(name)
    if fn is None:
        raise InvalidRecord(f"unknown check {name!r}; the checks are: {', '.join(CHECKS)}", path="check")
    started = time.perf_counter()
    try:
        work = Path(tempfile.mkdtemp(prefix=f"retained-selftest-{name}-", dir=base))  # 0700
    except OSError as exc:
        detail = f"cannot make a temporary directory in {base or tempfile.gettempdir()}: {exc.strerror or exc}"
        return {"name": name, "ok": False, "detail": detail, "ms": round((time.perf_counter() - started) * 1000, 1)}
    ctx = Context(name, work, store_factory or Store, faults or {}, python or sys.executable)
    try:
        detail = fn(ctx)
        ok = True
    except CheckFailed as exc:
        ok, detail = False, str(exc)
    except RetainedError as exc:
        ok, detail = False, f"{exc.code}: {exc.message}"
    except Exception as exc:  # noqa: BLE001 - the self-test is an edge: a crash in a check is its finding
        ok, detail = False, f"unexpected {type(exc).__name__}: {exc}"
    finally:
        ctx.close()
        shutil.rmtree(work, ignore_errors=True)
    ms = round((time.perf_counter() - started) * 1000, 1)
    return {"name": name, "ok": ok, "detail": " ".join(str(detail).split()), "ms": ms}


def run(
    names: Iterable[str] | None = None,
    *,
    faults: Mapping[str, Callable[[Context], None]] | None = None,
    store_factory: Callable[..., Any] | None = None,
    base: str | os.PathLike[str] | None = None,
    python: str | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    parallel: bool = True,
) -> dict[str, Any]:
    """Run the checks (all, or those named) and return the summary.

    ``on_result`` is called with each check's result in order (the CLI prints
    it). With ``parallel`` the checks run on `WORKERS` threads, those in
    `BACKGROUND` first; each check still has its own store. The summary is
    ``{"ok", "passed", "failed", "seconds", "version", "python", "checks"}``;
    ``ok`` is true only when every check passed.

    Raises:
        InvalidRecord: a name is not a check (nothing was run).
    """
    selected = list(dict.fromkeys(names)) if names else list(CHECKS)
    unknown = [n for n in selected if n not in CHECKS]
    if unknown:
        raise InvalidRecord(f"unknown check {unknown[0]!r}; the checks are: {', '.join(CHECKS)}", path="check")
    started = time.perf_counter()
    options: dict[str, Any] = {"faults": faults, "store_factory": store_factory, "base": base, "python": python}
    results = []
    # The child-process checks start first; the rest share the other threads.
    # Results are still reported in order.
    order = sorted(selected, key=lambda n: n not in BACKGROUND)
    with ThreadPoolExecutor(max_workers=WORKERS if parallel else 1, thread_name_prefix="selftest") as pool:
        pending = {name: pool.submit(run_check, name, **options) for name in order}
        for name in selected:
            result = pending[name].result()
            results.append(result)
            if on_result is not None:
                on_result(result)
    passed = sum(1 for r in results if r["ok"])
    from . import __version__

    return {
        "ok": passed == len(results),
        "passed": passed,
        "failed": len(results) - passed,
        "seconds": round(time.perf_counter() - started, 2),
        "version": __version__,
        "python": sys.version.split()[0],
        "checks": results,
    }


def format_line(result: dict[str, Any], width: int = max(map(len, CHECKS))) -> str:
    """``ok   <name>  <evidence>`` or ``FAIL <name>  <reason>``."""
    status = "ok  " if result["ok"] else "FAIL"
    return f"{status} {result['name']:<{width}}  {result['detail']}"


def format_summary(summary: dict[str, Any]) -> str:
    """The closing line: ``retained selftest: N ok, M failed``."""
    return f"retained selftest: {summary['passed']} ok, {summary['failed']} failed"
