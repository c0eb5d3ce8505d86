"""The parallel chain walk (chain.verify_file) reports exactly what chain.walk reports (L1, L2, L3).

Logs are cut into tiny ranges so that every kind of damage lands on, just
before, or just after a range boundary, and both process start methods are
run for real.
"""

from __future__ import annotations

import multiprocessing
import shutil
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from retained.core import chain, pool, record
from retained.core.log import Log

from ..conftest import VECTORS, NoProcesses

CLIENT = {"name": "test", "version": "0"}
TS = "2026-11-29T12:00:00.000000Z"
# Range sizes in bytes: one line per range or less, a few lines, many lines.
RANGE_SIZES = [1, 150, 333, 1000, 1 << 20]


def _lines(n: int, redactions: dict[int, int] | None = None) -> list[bytes]:
    """``n`` valid chained lines; ``redactions`` maps a seq to the seq its redaction record names."""
    redactions = redactions or {}
    out, prev = [], record.ZERO_HASH
    for seq in range(1, n + 1):
        if seq in redactions:
            content = record.make_content(
                text=None, kind="redaction", fields={"redacts": redactions[seq], "reason": "test"}, store_kind=True
            )
        else:
            content = record.make_content(text=f"note {seq} " + "word " * (seq % 7), scope=f"s{seq % 3}")
        sealed = record.seal(content, seq=seq, prev=prev, ts=TS, client=CLIENT)
        out.append(sealed.line)
        prev = sealed.hash
    return out


def _redact(line: bytes) -> bytes:
    return record.canonical(record.redacted_form(orjson.loads(line))) + b"\n"


def _flip(line: bytes) -> bytes:
    i = line.index(b"note") + 1
    return line[:i] + bytes([line[i] ^ 0x01]) + line[i + 1 :]


def _by_line(places):
    """The places a check is given, one per line: each ``chain.Run`` as ``(offset, length, seq, hash)`` of its records."""
    for place in places:
        if type(place) is chain.Run:
            offset = place.offset
            for k, length in enumerate(place.lengths):
                yield offset, length, place.seq + k, place.hashes[64 * k : 64 * k + 64]
                offset += length
        else:
            yield place


def _walk_report(directory: Path) -> dict:
    return chain.walk(Log(directory).scan()).to_dict()


def _assert_same(directory: Path, **kw) -> dict:
    want = _walk_report(directory)
    for size in RANGE_SIZES:
        got = chain.verify_file(Log(directory), range_bytes=size, **kw).to_dict()
        assert got == want, f"range_bytes={size}"
    return want


def _write(directory: Path, lines: list[bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "log.jsonl").write_bytes(b"".join(lines))
    return directory


# Each case damages a 12-line log (seq 6 is a redaction record naming seq 3).
DAMAGE: dict[str, Callable[[list[bytes]], list[bytes]]] = {
    "clean": lambda ls: ls[:2] + [_redact(ls[2])] + ls[3:],
    "flipped_byte": lambda ls: ls[:4] + [_flip(ls[4])] + ls[5:],
    "flipped_first_and_last": lambda ls: [_flip(ls[0])] + ls[1:-1] + [_flip(ls[-1])],
    "deleted_line": lambda ls: ls[:4] + ls[5:],
    "swapped_lines": lambda ls: ls[:4] + [ls[5], ls[4]] + ls[6:],
    "repeated_line": lambda ls: ls[:5] + [ls[4]] + ls[5:],
    "foreign_line": lambda ls: ls[:7] + [b'{"from":"another program"}\n', b"[1,2]\n"] + ls[7:],
    "not_json": lambda ls: ls[:7] + [b"not json at all\n"] + ls[7:],
    "non_canonical": lambda ls: ls[:2] + [ls[2].replace(b'","', b'", "', 1)] + ls[3:],
    "malformed_prev": lambda ls: ls[:8] + [ls[8].replace(b'"prev":"', b'"prev":"G', 1)] + ls[9:],
    "torn_tail": lambda ls: ls + [ls[0][:40]],
    "redacted_line": lambda ls: ls[:2] + [_redact(ls[2])] + ls[3:],
    "pending_redaction": lambda ls: ls,  # seq 6 names seq 3, which still holds its content
    "redacted_then_damaged": lambda ls: ls[:2] + [_redact(ls[2]).replace(b'"redacted":true', b'"redacted":true,"x":1')] + ls[3:],
    "everything": lambda ls: (
        [ls[0], ls[1], _redact(ls[2]), _flip(ls[3])]
        + [b'{"from":"another program"}\n', ls[5], ls[4]]
        + ls[7:9]
        + [b"garbage\n"]
        + ls[10:]
        + [b'{"seq":13,"prev":"' + b"0" * 64 + b'"}\n', ls[0][:33]]
    ),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_every_kind_of_damage_across_range_boundaries_gives_the_walk_report(tmp_path, case):
    """L1/L2/L3: each finding, count and offset is the walk's, wherever the ranges cut."""
    lines = DAMAGE[case](_lines(12, {6: 3}))
    directory = _write(tmp_path / case, lines)
    report = _assert_same(directory, workers=1)
    if case == "pending_redaction":
        assert [f["kind"] for f in report["findings"]] == ["redaction_pending"]
    if case in ("clean", "redacted_line"):
        assert report["ok"] and report["redacted"] == [3]


@pytest.mark.parametrize("name", sorted(p.name for p in VECTORS.glob("*.jsonl")))
def test_the_format_vectors_give_the_walk_report_in_any_ranges(tmp_path, name):
    """The format vectors pin the format; the parallel walk agrees on each of them."""
    shutil.copy(VECTORS / name, tmp_path / "log.jsonl")
    _assert_same(tmp_path, workers=1)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_processes_under_each_start_method_give_the_walk_report(tmp_path, method):
    """The ranges classified in real worker processes, linked here, match the walk."""
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} is not available here")
    lines = DAMAGE["everything"](_lines(12, {6: 3})) + _lines(30)[20:]
    directory = _write(tmp_path, lines)
    want = _walk_report(directory)
    got = chain.verify_file(
        Log(directory), workers=2, range_bytes=700, parallel_min_bytes=0, mp_context=multiprocessing.get_context(method)
    ).to_dict()
    assert got == want
    assert not got["ok"]


def test_a_long_valid_log_in_many_ranges_is_one_clean_chain(tmp_path):
    """L2/L3: runs linked across range boundaries leave no finding and the walk's head."""
    lines = _lines(400, {50: 7, 300: 7})
    lines[6] = _redact(lines[6])
    directory = _write(tmp_path, lines)
    want = _assert_same(directory, workers=1)
    assert want["ok"] and want["records"] == 400 and want["redacted"] == [7]


@pytest.mark.parametrize("workers, parallel_min_bytes", [(1, 0), (2, 0), (2, 1 << 30)])
def test_check_runs_once_whichever_way_the_log_is_classified(tmp_path, workers, parallel_min_bytes):
    """Store.verify checks the index in ``check``: it must run exactly once, also with no log."""
    calls = []
    chain.verify_file(Log(tmp_path / "absent"), check=lambda places: calls.append(("absent", list(places))))
    directory = _write(tmp_path / "log", _lines(30))
    report = chain.verify_file(
        Log(directory), workers=workers, range_bytes=500, parallel_min_bytes=parallel_min_bytes,
        mp_context=multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"),
        check=lambda places: calls.append(("log", len(list(_by_line(places))))),
    )
    assert calls == [("absent", []), ("log", 30)]
    assert report.to_dict() == _walk_report(directory)


def test_store_verify_reports_index_findings_after_the_chain_findings(tmp_path):
    """Both checks still run and both report: a flipped byte (chain) and a missing index row (index)."""
    from retained import Store

    with Store(tmp_path) as store:
        for i in range(5):
            store.write(f"note {i}")
        store.rebuild()
    path = tmp_path / "log.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + [_flip(lines[2])] + lines[3:] + _lines(0)))
    with Store(tmp_path) as store:
        db = store.index.connection()
        db.execute("DELETE FROM records WHERE seq = 4")
        db.commit()
        report = store.verify()
    kinds = [f["kind"] for f in report["findings"]]
    assert not report["ok"]
    assert kinds[0] == "hash_mismatch"
    assert "index_missing" in kinds[1:]
    assert report["index"] == {"checked": True, "findings": len(kinds) - 1}


@pytest.mark.parametrize("case", ["everything", "torn_tail", "clean"])
@pytest.mark.parametrize("stop_after", [None, 0, 5])
def test_check_sees_every_complete_line_once_and_the_report_is_unchanged(tmp_path, case, stop_after):
    """A second check reading places from the walk sees what a scan sees; stopping early changes no finding."""
    directory = _write(tmp_path, DAMAGE[case](_lines(12, {6: 3})))
    want = [
        (line.offset, line.length, line.seq, line.hash) if line.status == record.RECORD else (line.offset, line.raw)
        for line in Log(directory).scan()
        if line.status != record.TORN
    ]

    def take(seen, places):
        for place in places:
            if stop_after is not None and len(seen) >= stop_after:
                return
            seen.append(place)

    for size in RANGE_SIZES:
        seen: list[tuple] = []
        report = chain.verify_file(
            Log(directory), workers=1, range_bytes=size, check=lambda places, seen=seen: take(seen, _by_line(places))
        )
        assert seen == (want if stop_after is None else want[:stop_after])
        assert report.to_dict() == _walk_report(directory)


def test_missing_and_empty_logs_give_the_walk_report(tmp_path):
    assert chain.verify_file(Log(tmp_path)).to_dict() == _walk_report(tmp_path)
    _write(tmp_path, [])
    assert chain.verify_file(Log(tmp_path)).to_dict() == _walk_report(tmp_path)


def test_range_bounds_fall_on_line_starts_and_cover_the_file(tmp_path):
    lines = _lines(40) + [b"x" * 5000 + b"\n"] + _lines(3)[:1] + [b"torn"]
    directory = _write(tmp_path, lines)
    data = (directory / "log.jsonl").read_bytes()
    for size in (1, 64, 999, 4096, 1 << 20):
        with open(directory / "log.jsonl", "rb") as f:
            bounds = pool._range_bounds(f, 0, len(data), size)
        assert bounds[0] == 0 and bounds[-1] == len(data)
        assert bounds == sorted(set(bounds))
        assert all(b == 0 or data[b - 1 : b] == b"\n" for b in bounds[:-1])


def test_link_bytes_are_the_canonical_bytes_chain_hash_hashes():
    """The formatted link bytes are canonical({"cd", "prev", "seq"}) for hex inputs."""
    for seq in (1, 9, 10, 12345, 2**63, 2**64 - 1):
        cd, prev = "ab" * 32, "0f" * 32
        assert record._link_bytes(cd, prev, seq) == record.canonical({"cd": cd, "prev": prev, "seq": seq})
        assert record.digest(record._link_bytes(cd, prev, seq)) == record.chain_hash(cd, prev, seq)


@pytest.mark.parametrize(
    "mutate, problem",
    [
        (lambda o: o.update(hash=o["hash"].upper()), "chain fields missing or malformed"),
        (lambda o: o.update(hash=o["hash"][:-1]), "chain fields missing or malformed"),
        (lambda o: o.update(hash=7), "chain fields missing or malformed"),
        (lambda o: o.update(prev=o["prev"].upper()), "chain fields missing or malformed"),
        (lambda o: o.update(seq=0), "chain fields missing or malformed"),
        (lambda o: o.update(hash="e" * 64), "hash does not recompute"),
    ],
)
def test_classify_still_names_malformed_chain_fields_before_a_hash_mismatch(mutate, problem):
    """L1: dropping the hex pattern on a recomputed hash changes no classification."""
    obj = orjson.loads(_lines(2)[1])
    mutate(obj)
    status, _, _, h, found = record.classify(record.canonical(obj))
    assert (status, found) == (record.DAMAGED, problem)
    assert h == (obj["hash"] if record.is_hash(obj["hash"]) else None)


def test_classify_names_a_redacted_line_with_a_bad_hash_as_malformed():
    red = record.redacted_form(orjson.loads(_lines(1)[0]))
    red["hash"] = "Z" * 64
    status, _, _, h, problem = record.classify(record.canonical(red))
    assert (status, h, problem) == (record.DAMAGED, None, "chain fields missing or malformed")


@pytest.mark.parametrize("size", [1, 300, 1 << 20])
def test_index_check_on_the_walks_lines_finds_what_it_finds_reading_the_log(tmp_path, size):
    """The index check fed by the chain walk (one read) reports exactly what it reports reading the log itself."""
    from retained import Store

    with Store(tmp_path) as store:
        for i in range(12):
            store.write(f"note {i}", fields={"nested": {"hash": "a" * 64, "seq": i}} if i == 8 else None)
        store.rebuild()
    path = tmp_path / "log.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines = lines[:2] + [_flip(lines[2])] + lines[3:7] + [b'{"from":"another program"}\n', b"garbage\n"] + lines[7:]
    path.write_bytes(b"".join(lines) + lines[0][:30])
    with Store(tmp_path) as store:
        db = store.index.connection()
        db.execute("DELETE FROM records WHERE seq = 4")
        db.execute("UPDATE records SET hash = ? WHERE seq = 5", ("e" * 64,))
        db.execute("UPDATE records SET offset = offset + 1 WHERE seq = 6")
        db.execute("CREATE TEMP TABLE ghost AS SELECT * FROM records WHERE seq = 7")
        db.execute("UPDATE ghost SET seq = 99")
        db.execute("INSERT INTO records SELECT * FROM ghost")
        db.commit()
        reading = store.index.verify()
        fed: list = []
        walked = chain.verify_file(store.log, workers=1, range_bytes=size, check=lambda ls: fed.extend(store.index.verify(ls)))
    kinds = {f["kind"] for f in reading}
    assert {"index_missing", "index_hash_mismatch", "index_offset_mismatch", "index_ghost"} <= kinds
    assert fed == reading
    assert walked.to_dict() == _walk_report(tmp_path)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method")
def test_where_no_process_can_start_the_ranges_are_classified_here(tmp_path):
    lines = DAMAGE["everything"](_lines(12, {6: 3})) + _lines(60)[20:]
    directory = _write(tmp_path, lines)
    got = chain.verify_file(Log(directory), workers=2, range_bytes=700, parallel_min_bytes=0, mp_context=NoProcesses())
    assert got.to_dict() == _walk_report(directory)
    assert not got.ok


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method")
def test_worker_processes_killed_mid_walk_leave_the_rest_to_this_process(tmp_path):
    import os
    import signal

    directory = _write(tmp_path, _lines(6000))
    killed = []

    def kill_workers(places):
        # SIGKILL every worker as soon as the first line is linked: the ranges
        # still in flight fail with a broken pool and are classified here.
        first = next(places)
        for child in multiprocessing.active_children():
            os.kill(child.pid, signal.SIGKILL)
            killed.append(child.pid)
        return [first, *places]

    got = chain.verify_file(Log(directory), workers=2, range_bytes=16 * 1024, parallel_min_bytes=0,
                            mp_context=multiprocessing.get_context("fork"), check=kill_workers)
    assert killed, "no worker process was running: the test shows nothing"
    assert got.to_dict() == _walk_report(directory)
    assert got.ok and got.records == 6000


@pytest.mark.parametrize("parallel_min_bytes", [0, 1 << 40])
def test_verify_file_reports_progress_after_each_range_up_to_the_size_it_judged(tmp_path: Path, parallel_min_bytes: int):
    """The viewer's health page shows verify's progress from these calls (issue 16)."""
    d = tmp_path / "store"
    d.mkdir()
    (d / "log.jsonl").write_bytes(b"".join(_lines(60)))
    size = (d / "log.jsonl").stat().st_size
    seen: list[tuple[int, int]] = []
    places: list[int] = []
    report = chain.verify_file(Log(d), range_bytes=1000, parallel_min_bytes=parallel_min_bytes, workers=2,
                               check=lambda lines: places.extend(p[0] for p in _by_line(lines)),
                               progress=lambda done, total: seen.append((done, total)))
    assert report.ok and len(places) == 60
    assert len(seen) > 3 and {total for _, total in seen} == {size}
    done = [d for d, _ in seen]
    assert done == sorted(done) and len(set(done)) == len(done) and done[-1] == size


def test_a_repeated_line_after_many_matched_records_hides_no_ghost_and_adds_no_finding(tmp_path):
    """A line repeating a seq the index matched (in a whole run) is the walk's to report; a ghost row is still found."""
    from retained import Store

    with Store(tmp_path) as store:
        store.write_batch([{"text": f"note {i}"} for i in range(2100)])
        store.rebuild()
        db = store.index.connection()
        db.execute("INSERT INTO records (seq, offset, length, hash, redacted) VALUES (9999, 1, 2, ?, 1)", ("d" * 64,))
    path = tmp_path / "log.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines, lines[4]]))
    with Store(tmp_path) as store:
        reading = store.index.verify()
        fed: list = []
        chain.verify_file(store.log, workers=1, check=lambda ls: fed.extend(store.index.verify(ls)))
        report = store.verify()
    assert [(f["kind"], f["seq"]) for f in reading] == [("index_ghost", 9999)]
    assert fed == reading
    assert [f["kind"] for f in report["findings"]] == ["prev_mismatch", "index_ghost"]


def test_the_index_check_fed_by_runs_stops_where_the_index_stops(tmp_path):
    """With the index behind (it cannot grow), lines past its mark are not compared, cut inside a run."""
    from retained import Store

    with Store(tmp_path) as store:
        store.write_batch([{"text": f"note {i}"} for i in range(50)])
        store.rebuild()
        db = store.index.connection()
        db.execute(f"PRAGMA max_page_count={db.execute('PRAGMA page_count').fetchone()[0]}")
        store.write_batch([{"text": f"later {i} " + "more words " * 400} for i in range(30)])
        reading = store.index.verify()
        assert store.index.last_catch_up["state"] == "stale"
        fed: list = []
        walked = chain.verify_file(store.log, workers=1, check=lambda ls: fed.extend(store.index.verify(ls)))
    assert walked.ok and walked.records == 80
    assert reading == [] and fed == []


def test_classify_with_a_lent_hasher_answers_as_without_one_whatever_state_it_is_in():
    """L1: a hasher reused across lines (as the range workers lend one) carries nothing from one line to the next."""
    import blake3

    lines = [line.rstrip(b"\n") for case in sorted(DAMAGE) for line in DAMAGE[case](_lines(12, {6: 3}))]
    hasher = blake3.blake3(b"left over from somewhere else")
    for line in lines:
        assert record.classify(line, hasher) == record.classify(line)
        hasher.update(line[:7])  # whatever a caller did with it in between


def _large_result(path: str, start: int, stop: int) -> bytes:
    """A range task (run in the workers) whose result is far larger than a pipe holds."""
    return bytes(8 << 20) + start.to_bytes(8, "big")


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods() or not Path("/proc/self/wchan").exists(),
                    reason="needs the fork start method and /proc")
def test_a_worker_killed_halfway_through_sending_a_result_leaves_that_range_to_this_process(tmp_path):
    """A result cut off mid-message is never waited for: its range is worked through here (a pool once waited forever)."""
    import os
    import signal
    import time
    from contextlib import closing

    path = tmp_path / "data"
    path.write_bytes(b"abc")
    results = pool.map_ranges(_large_result, str(path), [0, 1, 2], 2, multiprocessing.get_context("fork"))
    with closing(results):
        assert next(results)[-8:] == (0).to_bytes(8, "big")
        # Nobody reads the second worker's pipe until the next range is asked for: it is stuck mid-send.
        (second,) = [p for p in multiprocessing.active_children() if p.name == "retained-ranges-1"]
        deadline = time.monotonic() + 30
        while "pipe_write" not in Path(f"/proc/{second.pid}/wchan").read_text() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "pipe_write" in Path(f"/proc/{second.pid}/wchan").read_text(), "the worker never blocked sending"
        os.kill(second.pid, signal.SIGKILL)
        assert next(results)[-8:] == (1).to_bytes(8, "big")
        assert next(results, None) is None
    assert not multiprocessing.active_children()


def _collecting(path: str, start: int, stop: int) -> int:
    """A range task that runs a full garbage collection in the worker."""
    import gc

    gc.collect()
    return start


class _Finalized:
    """Garbage in a reference cycle whose finalizer records which process ran it."""

    def __init__(self, record_to: Path) -> None:
        self.record_to = record_to
        self.cycle = self

    def __del__(self) -> None:
        import os

        with open(self.record_to, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method")
def test_a_forked_worker_never_finalizes_what_its_parent_left_for_collection(tmp_path):
    """A parent's garbage (an open database, a temporary file) is the parent's to finalize, never a worker's."""
    import gc
    import os

    path = tmp_path / "data"
    path.write_bytes(b"abc")
    record_to = tmp_path / "finalized-by"
    gc.disable()
    try:
        _Finalized(record_to)  # unreachable at once, but only a collection can free it
        got = list(pool.map_ranges(_collecting, str(path), [0, 1, 2, 3], 2, multiprocessing.get_context("fork")))
    finally:
        gc.enable()
    gc.collect()
    assert got == [0, 1, 2]
    assert record_to.read_text().split() == [str(os.getpid())]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_tally_made_in_worker_processes_counts_what_a_scan_of_the_record_lines_counts(tmp_path, method):
    """``retained stats`` counts in the workers that classify: the same counts as one scan, damage included."""
    from retained.index.stats import Tally

    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} is not available here")
    lines, prev = [], record.ZERO_HASH
    for seq in range(1, 41):
        if seq % 9 == 0:
            content = record.make_content(text=None, kind="retract", fields={"retracts": [seq - 2], "reason": "x"},
                                          store_kind=True)
        else:
            content = record.make_content(text=f"note {seq}", kind="note" if seq % 4 else "decision",
                                          scope=f"s{seq % 3}" if seq % 5 else None,
                                          supersedes=[seq - 1] if seq % 7 == 0 else None)
        sealed = record.seal(content, seq=seq, prev=prev, ts=f"2026-11-{10 + seq % 3}T12:00:00.000000Z",
                             client={"name": f"c{seq % 2}", "version": "0"})
        lines.append(sealed.line)
        prev = sealed.hash
    lines = lines[:10] + [_flip(lines[10]), b"garbage\n", _redact(lines[11])] + lines[12:] + [lines[0][:30]]
    directory = _write(tmp_path, lines)
    want = Tally()
    for line in Log(directory).scan():
        if line.status == record.RECORD:
            want.add(line.record, line.length)
    got = Tally()
    report = chain.verify_file(Log(directory), workers=2, range_bytes=900, parallel_min_bytes=0,
                               mp_context=multiprocessing.get_context(method), tally=got)
    assert vars(got) == vars(want)
    assert report.to_dict() == _walk_report(directory)
    assert want.retracted and want.superseded and len(want.kinds) == 3 and len(want.days) == 3
    assert sum(want.kinds.values()) == 38  # 40 records, one flipped and one redacted; garbage and the torn copy are none


SCRIPT_WITHOUT_GUARD = """
import sys
from retained import Store
store = Store(sys.argv[1])
store.write("written once, at the top of a script with no __main__ guard")
import multiprocessing
multiprocessing.set_start_method(sys.argv[2], force=True)
report = store.verify()
stats = store.stats()
store.rebuild()
import resource
# A child process waited for leaves its peak memory here; none ever started leaves 0.
print(report["records"], report["ok"], stats["records"], resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_library_call_never_starts_a_process_of_its_own(tmp_path, method):
    """verify, stats and rebuild of a log large enough for workers, from an unguarded script: none runs it again."""
    import subprocess
    import sys

    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} is not available here")
    lines, prev = [], record.ZERO_HASH
    for seq in range(1, 31):  # 30 lines of about 300 KB: past pool.PARALLEL_MIN_BYTES
        sealed = record.seal(record.make_content(text=f"note {seq} " + "word " * 60_000), seq=seq, prev=prev, ts=TS,
                             client=CLIENT)
        lines.append(sealed.line)
        prev = sealed.hash
    _write(tmp_path / "store", lines)
    assert len(b"".join(lines)) >= pool.PARALLEL_MIN_BYTES
    script = tmp_path / "unguarded.py"
    script.write_text(SCRIPT_WITHOUT_GUARD)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "store"), method],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["31", "True", "31", "0"], (done.stdout, done.stderr)
    assert len((tmp_path / "store" / "log.jsonl").read_bytes().splitlines()) == 31  # the write happened once
    assert "Traceback" not in done.stderr, done.stderr
    # Nor under -m, where a worker would not run the script again: a library call starts none, whatever its caller.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__main__.py").write_text(SCRIPT_WITHOUT_GUARD)
    done = subprocess.run([sys.executable, "-m", "pkg", str(tmp_path / "store"), method], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.split() == ["32", "True", "32", "0"], (done.stdout, done.stderr)


def _pids(path: str, start: int, stop: int) -> int:
    import os

    return os.getpid()


def test_workers_start_only_when_asked_for_and_the_zero_worker_case_runs_here(tmp_path):
    """pool.map_ranges: 0 and 1 worker run every range in this process; 2 run them elsewhere."""
    import os

    path = tmp_path / "data"
    path.write_bytes(b"abcd")
    assert list(pool.map_ranges(_pids, str(path), [0, 1, 2, 3, 4])) == [os.getpid()] * 4
    assert list(pool.map_ranges(_pids, str(path), [0, 1, 2, 3, 4], 1)) == [os.getpid()] * 4
    elsewhere = list(pool.map_ranges(_pids, str(path), [0, 1, 2, 3, 4], 2, multiprocessing.get_context("spawn")))
    assert len(elsewhere) == 4 and os.getpid() not in elsewhere
    with open(path, "rb") as f:
        assert pool.plan_ranges(f, 4, 2, 1, parallel_min_bytes=0)[1] == 2
        assert pool.plan_ranges(f, 4, 2, 1, parallel_min_bytes=5)[1] == 0  # too small to be worth a process
        assert pool.plan_ranges(f, 4, 1, 1, parallel_min_bytes=0)[1] == 0
        with pytest.raises(ValueError, match="workers"):
            pool.plan_ranges(f, 4, -1, 1)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method")
def _gated_pids(path: str, start: int, stop: int) -> int:
    """``_pids`` once the file ``path + ".go"`` exists: a worker cannot finish (and exit) before the test lets it."""
    import os
    import time

    deadline = time.monotonic() + 120  # bounded: a test that never opens the gate still ends
    while not os.path.exists(path + ".go") and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


def test_workers_start_before_the_first_result_is_asked_for_and_closing_at_once_ends_them(tmp_path):
    """map_ranges starts its workers before it returns (the caller works meanwhile); closed unread, it ends them.

    The workers wait on a gate the test opens only for the second call: a
    worker whose ranges are done exits, so without the gate one could be gone
    before the first call's workers are counted.
    """
    import os

    path = tmp_path / "data"
    path.write_bytes(b"abcd")
    results = pool.map_ranges(_gated_pids, str(path), [0, 1, 2, 3, 4], 2, multiprocessing.get_context("fork"))
    started = [p for p in multiprocessing.active_children() if p.name.startswith("retained-ranges-")]
    assert len(started) == 2
    results.close()
    assert not multiprocessing.active_children()
    # Read whole: every range, each from a worker.
    (tmp_path / "data.go").touch()
    got = list(pool.map_ranges(_gated_pids, str(path), [0, 1, 2, 3, 4], 2, multiprocessing.get_context("fork")))
    assert len(got) == 4 and len(set(got)) == 2 and os.getpid() not in got
