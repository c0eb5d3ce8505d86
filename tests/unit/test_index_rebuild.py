"""A rebuild, in this process or in worker processes, indexes exactly what a catch-up indexes (L5).

Both turn byte ranges of the log into rows (``Index._index_lines``); a
rebuild's caller may have the ranges made in worker processes, a catch-up
makes them here, from the mark on. On a log with every kind of line
(foreign, damaged, redacted, a pending redaction, supersedes and
retractions, seqs claimed twice, a torn tail), both must give the same
tables, the same words in FTS5 and the same mark, however the ranges are cut
and whatever happens to the workers.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from retained import Store
from retained.core import record
from retained.core.log import Log
from retained.index.schema import INDEX_NAME
from retained.index.writer import Index, IndexFull

from ..conftest import REPO, NoProcesses

FORK = "fork" in multiprocessing.get_all_start_methods()


def _contents(directory: Path) -> dict[str, list[tuple]]:
    """Everything the index holds: rows, links, mark, indexes, and each word FTS5 indexed (term, row, column, position)."""
    db = sqlite3.connect(directory / INDEX_NAME)
    try:
        db.execute("CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, fts, instance)")
        return {
            "records": db.execute("SELECT * FROM records ORDER BY seq").fetchall(),
            "links": db.execute("SELECT * FROM links ORDER BY target, rel, source").fetchall(),
            "meta": db.execute("SELECT key, value FROM meta ORDER BY key").fetchall(),
            "words": db.execute("SELECT term, doc, col, offset FROM temp.words ORDER BY term, doc, col, offset").fetchall(),
            "indexes": db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                                  "ORDER BY name").fetchall(),
        }
    finally:
        db.close()


def _drop_index(directory: Path) -> None:
    for name in (INDEX_NAME, INDEX_NAME + "-wal", INDEX_NAME + "-shm"):
        (directory / name).unlink(missing_ok=True)


def _caught_up(directory: Path) -> dict[str, list[tuple]]:
    """The index a catch-up from nothing makes (in this process, from the mark on)."""
    _drop_index(directory)
    index = Index(Log(directory))
    assert index.catch_up()["state"] == "ok"
    index.close()
    return _contents(directory)


def _rebuilt(directory: Path, **kw) -> dict[str, list[tuple]]:
    index = Index(Log(directory))
    index.rebuild(**kw)
    index.close()
    return _contents(directory)


def _flip(line: bytes) -> bytes:
    i = line.index(b"topic") + 1
    return line[:i] + bytes([line[i] ^ 0x01]) + line[i + 1 :]


def _tricky_log(directory: Path) -> None:
    """A log with every kind of line an index must handle, valid or not."""
    with Store(directory) as store:
        for i in range(1, 41):
            store.write(f"topic {i} " + "alpha beta gamma " * (i % 5), scope=f"s{i % 3}",
                        fields={"speaker": f"person {i % 4}", "n": i})
        store.write("topic corrected", supersedes=[2, 3])
        store.forget([4], "wrong")
        store.redact(5, "private")
        # A redaction record whose target still holds its content: its words must go.
        content = record.make_content(text=None, kind="redaction", fields={"redacts": 6, "reason": "t"}, store_kind=True)
        store.append([store.prepare(content)])
        store.write("topic after", supersedes=[7])
    path = directory / "log.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    by_seq = {orjson.loads(x)["seq"]: x for x in lines}
    # A second line claiming seq 45 with other content and a valid hash of its own.
    other = orjson.loads(by_seq[45])
    other["text"] = "topic impostor"
    other["supersedes"] = [8]
    del other["hash"]
    other["hash"] = record.chain_hash(record.content_digest(other), other["prev"], other["seq"])
    lines = [
        *lines[:10], b'{"from":"another program"}\n', b"not json\n", _flip(lines[10]), *lines[11:],
        by_seq[41], record.canonical(other) + b"\n", by_seq[20], lines[0][:50],
    ]
    path.write_bytes(b"".join(lines))


@pytest.fixture
def tricky(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    _tricky_log(directory)
    return directory


def _big_log(directory: Path, n: int) -> None:
    with Store(directory) as store:
        store.write_batch([{"text": f"topic {i} " + "words " * 20, "scope": f"s{i % 5}"} for i in range(n)])
        store.write("topic replaced", supersedes=[3])


def test_a_small_rebuild_indexes_what_a_catch_up_indexes_and_no_damaged_line(tricky: Path) -> None:
    want = _caught_up(tricky)
    assert want["records"] and want["links"] and want["words"]
    seqs = [r[0] for r in want["records"]]
    assert seqs == sorted(set(seqs)) and 11 not in seqs  # seq 11 was damaged: never indexed as a record
    assert not any(w[0] in ("another", "program", "impostor") for w in want["words"])
    assert _rebuilt(tricky) == want
    for range_bytes in (1, 333, 4096):  # the zero-worker case, cut anywhere
        assert _rebuilt(tricky, range_bytes=range_bytes) == want


@pytest.mark.skipif(not FORK, reason="needs the fork start method")
@pytest.mark.parametrize("range_bytes", [1, 333, 700, 4096])
def test_a_rebuild_in_worker_processes_indexes_what_a_catch_up_indexes_however_the_ranges_are_cut(
    tricky: Path, range_bytes: int
) -> None:
    """Damaged, foreign and repeated lines land at the start, middle and end of ranges; none is indexed as a record."""
    want = _caught_up(tricky)
    got = _rebuilt(tricky, workers=2, range_bytes=range_bytes, parallel_min_bytes=0,
                   mp_context=multiprocessing.get_context("fork"))
    assert got == want


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_rebuild_under_each_start_method_indexes_what_a_catch_up_indexes(tricky: Path, method: str) -> None:
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} is not available here")
    want = _caught_up(tricky)
    got = _rebuilt(tricky, workers=2, range_bytes=2000, parallel_min_bytes=0, mp_context=multiprocessing.get_context(method))
    assert got == want


def test_a_rebuild_in_workers_reports_progress_to_the_end_and_leaves_a_clean_verify(tricky: Path) -> None:
    seen: list[tuple[int, int]] = []
    index = Index(Log(tricky))
    result = index.rebuild(lambda done, total: seen.append((done, total)), workers=2, range_bytes=2000, parallel_min_bytes=0)
    index.close()
    size = (tricky / "log.jsonl").stat().st_size
    done = [d for d, _ in seen]
    assert len(seen) > 3 and {t for _, t in seen} == {size} and done == sorted(done)
    assert done[-1] == size - 50  # the torn tail is not indexed
    assert result == {"records": len(_contents(tricky)["records"]) + 3, "bytes": size}  # three lines repeat a seq
    with Store(tricky) as store:
        kinds = {f["kind"] for f in store.verify()["findings"]}
        assert store.search("impostor")["total_matches"] == 0
    assert not {k for k in kinds if k.startswith("index_")}, kinds


def test_a_repeated_line_keeps_the_links_of_the_line_it_repeats(tmp_path: Path) -> None:
    """The first line that claims a seq is indexed with its links, also when a copy of it follows in the same batch."""
    directory = tmp_path / "store"
    with Store(directory) as store:
        store.write("old plan")
        store.write("new plan", supersedes=[1])
    path = directory / "log.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines, lines[1]]))
    for contents in (_caught_up(directory), _rebuilt(directory), _rebuilt(directory, workers=2, range_bytes=1,
                                                                           parallel_min_bytes=0)):
        assert contents["links"] == [(1, 2, "supersedes")]
        assert [r[0] for r in contents["records"] if r[9]] == [1]  # seq 1 is marked superseded
    with Store(directory) as store:
        assert [r["seq"] for r in store.search("plan")["results"]] == [2]


def test_where_sqlite_cannot_serialize_the_ranges_travel_as_rows_and_give_the_same_index(
    tricky: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Python whose SQLite lacks serialize (built without it) indexes the same rows, catch-up and rebuild alike."""
    from retained.index import writer

    want = _caught_up(tricky)
    monkeypatch.setattr(writer, "_SERIALIZE", False)
    assert _caught_up(tricky) == want
    assert _rebuilt(tricky, range_bytes=333) == want
    if FORK:
        assert _rebuilt(tricky, workers=2, range_bytes=700, parallel_min_bytes=0,
                        mp_context=multiprocessing.get_context("fork")) == want


@pytest.mark.skipif(not FORK, reason="needs the fork start method")
def test_where_no_worker_can_start_the_rebuild_runs_here_and_gives_the_same_index(tricky: Path) -> None:
    want = _caught_up(tricky)
    assert _rebuilt(tricky, workers=2, range_bytes=700, parallel_min_bytes=0, mp_context=NoProcesses()) == want
    assert not multiprocessing.active_children()


@pytest.mark.skipif(not FORK, reason="needs the fork start method")
def test_worker_processes_killed_mid_rebuild_leave_the_rest_to_this_process(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    _big_log(directory, 3000)
    want = _caught_up(directory)
    killed: list[int] = []

    def kill_workers(done: int, total: int) -> None:
        if not killed:
            for child in multiprocessing.active_children():
                os.kill(child.pid, signal.SIGKILL)
                killed.append(child.pid)

    index = Index(Log(directory))
    index.rebuild(kill_workers, workers=2, range_bytes=16 * 1024, parallel_min_bytes=0,
                  mp_context=multiprocessing.get_context("fork"))
    index.close()
    assert killed, "no worker process was running: the test shows nothing"
    assert _contents(directory) == want
    assert not multiprocessing.active_children()


def test_a_rebuild_that_finds_the_disk_full_leaves_the_index_as_it_was(tmp_path: Path) -> None:
    """SQLite's page limit gives the error a full disk gives (SQLITE_FULL): rolled back, nothing left attached."""
    directory = tmp_path / "store"
    _big_log(directory, 3000)
    path = directory / "log.jsonl"
    whole = path.read_bytes()
    path.write_bytes(b"".join(whole.splitlines(keepends=True)[:1000]))
    _drop_index(directory)
    index = Index(Log(directory))
    index.rebuild()
    before = _contents(directory)
    db = index.connection()
    db.execute(f"PRAGMA max_page_count={db.execute('PRAGMA page_count').fetchone()[0]}")
    path.write_bytes(whole)  # the log grew; the index cannot
    with pytest.raises(IndexFull):
        index.rebuild(workers=2, range_bytes=16 * 1024, parallel_min_bytes=0)
    assert [row[1] for row in db.execute("PRAGMA database_list")] == ["main"]
    assert not multiprocessing.active_children()
    index.close()
    assert _contents(directory) == before


def test_a_rebuild_that_raises_in_its_caller_ends_its_workers_at_once(tmp_path: Path) -> None:
    """An error while the ranges are written (here: from progress) rolls back and leaves no worker running."""
    directory = tmp_path / "store"
    _big_log(directory, 1500)
    index = Index(Log(directory))
    index.rebuild()
    before = _contents(directory)

    def fail(done: int, total: int) -> None:
        raise KeyError("stop here")

    with pytest.raises(KeyError):
        index.rebuild(fail, workers=2, range_bytes=8 * 1024, parallel_min_bytes=0)
    assert not multiprocessing.active_children()
    index.close()
    assert _contents(directory) == before


_KILLED_MID_REBUILD = r"""
import multiprocessing, os, signal, sys
from retained.index.writer import Index
from retained.core.log import Log
index = Index(Log(sys.argv[1]))
ranges = []
def progress(done, total):
    ranges.append(done)
    if len(ranges) == 3:
        print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
index.rebuild(progress, workers=2, range_bytes=16 * 1024, parallel_min_bytes=0)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaps has ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_a_rebuild_killed_before_its_commit_leaves_the_index_as_it_was_and_no_worker_behind(tmp_path: Path) -> None:
    """A crash mid-rebuild: the index is the one it had, and the workers end with the process that started them."""
    directory = tmp_path / "store"
    _big_log(directory, 2000)
    with Store(directory) as store:
        store.rebuild()
        before = _contents(directory)
        store.write_batch([{"text": f"later {i}"} for i in range(10)])
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    # Files, not pipes: a worker left behind holding a pipe would keep run() waiting.
    with open(out, "wb") as f, open(err, "wb") as e:
        proc = subprocess.run([sys.executable, "-c", _KILLED_MID_REBUILD, str(directory)], stdout=f, stderr=e,
                              timeout=120, cwd=REPO)
    assert proc.returncode == -signal.SIGKILL, err.read_text()
    pids = [int(p) for p in out.read_text().split()]
    assert pids, "no worker process was running: the test shows nothing"
    deadline = time.monotonic() + 30
    try:
        while any(_running(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_running(p) for p in pids), "a worker outlived the rebuild that started it"
    finally:
        for p in pids:
            if _running(p):
                os.kill(p, signal.SIGKILL)
    assert _contents(directory) == before
    with Store(directory) as store:
        assert store.search("later")["total_matches"] == 10
        assert store.verify()["ok"]
