"""A full disk: every failure is a retained error with a hint, nothing is acknowledged, nothing is left behind (issue 14).

On a real 1 MiB tmpfs when this process may mount one (root on Linux), else
skipped; the same guarantees are held without a mount by the tests after it,
which fill the index with SQLite's own page limit and make the quarantine
copy fail the way a full disk makes it fail.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys

import pytest

from retained import Store
from retained.core import chain
from retained.core.log import Log
from retained.errors import RetainedError, WriteFailed
from retained.index.writer import IndexFull

from ..conftest import REPO


@pytest.fixture
def tmpfs(tmp_path):
    """A 1 MiB tmpfs mounted at a fresh directory, unmounted afterwards; skips when it cannot be mounted."""
    if sys.platform != "linux" or not shutil.which("mount") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root on Linux")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)],
                          capture_output=True, timeout=30, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30, check=False)


def _fill(directory):
    """Take every free byte of the file system holding ``directory``."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 1):
            try:
                for _ in range(10**6):
                    os.write(fd, b"x" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def _quarantined(store_dir):
    return {p.name: p.stat().st_size for p in store_dir.glob("log.jsonl.torn-*")}


def test_on_a_full_tmpfs_nothing_is_acknowledged_every_error_says_free_space_and_verify_moves_nothing(tmpfs):
    store_dir, anchor_dir = tmpfs / "store", tmpfs / "anchors"
    store = Store(store_dir, anchor_dir=anchor_dir)
    acked = [store.write("before the disk filled")]
    store.search("before")
    assert store.verify()["ok"]
    _fill(tmpfs)
    failures = []
    big = "y" * 3000
    for attempt in range(8):
        try:
            acked.append(store.write(f"attempt {attempt} " + big))
        except RetainedError as exc:
            failures.append(exc)
    for call in (lambda: store.write_batch([{"text": big}] * 3), lambda: store.checkpoint("cp", summary=big)):
        with pytest.raises(WriteFailed) as err:
            call()
        failures.append(err.value)
    assert len(failures) >= 8
    for exc in failures:
        assert isinstance(exc, WriteFailed), exc
        assert "free space" in exc.message and ("nothing was acknowledged" in exc.message or "nothing was written" in exc.message)
    # Retries leave no quarantine file behind, empty or not, while the disk is full.
    assert all(size > 0 for size in _quarantined(store_dir).values())
    # Reads answer; the index, behind, is not damaged and stays where it is.
    assert store.search("before")["returned"] == 1
    assert [e["seq"] for e in store.list()["records"]][-1] == 1
    with pytest.raises(IndexFull) as err:
        store.rebuild()
    assert "free space" in err.value.message and "not damaged" in err.value.message
    report = store.verify()
    assert report["findings"] == [], report["findings"]
    assert "full" in report["index"].get("note", "") or report["index"]["checked"]
    assert "error" in report["anchors"] or report["anchors"]["recorded"] is False
    assert not list(store_dir.glob("index.sqlite3.damaged-*"))
    brief = store.brief()
    assert brief["status"] == "ok"
    # The command line says the same, and exits 1.
    env = {**os.environ, "RETAINED_DIR": str(store_dir), "RETAINED_ANCHOR_DIR": str(anchor_dir)}
    proc = subprocess.run([sys.executable, "-m", "retained", "write", "from the command line " + big], env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 1 and "free space" in proc.stderr and "Traceback" not in proc.stderr
    store.close()
    # Space back: the next write lands, every acknowledged record is there, the log verifies.
    os.unlink(tmpfs / "filler")
    with Store(store_dir, anchor_dir=anchor_dir) as again:
        acked.append(again.write("after space came back"))
        report = again.verify()
        assert report["ok"], report["findings"]
        got = {e["seq"]: e["record"]["hash"] for e in again.get([p["seq"] for p in acked])}
    assert got == {p["seq"]: p["hash"] for p in acked}
    assert all(size > 0 for size in _quarantined(store_dir).values())
    assert not list(store_dir.glob("index.sqlite3.damaged-*"))


def test_an_index_that_cannot_grow_is_reported_not_set_aside(filled_store, store_dir):
    """SQLite's own page limit gives the index the error a full disk gives it (SQLITE_FULL), without a mount."""
    filled_store.search("note")
    db = filled_store.index.connection()
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count={pages}")
    filled_store.write_batch([{"text": "more words " * 400} for _ in range(20)])
    reply = filled_store.search("note")  # answers from the index as it was
    assert reply["total_matches"] == 10
    assert filled_store.index.last_catch_up["state"] == "stale"
    assert "free space" in filled_store.index.last_catch_up["reason"]
    report = filled_store.verify()
    assert report["findings"] == [] and "could not catch up" in report["index"]["note"]
    with pytest.raises(IndexFull):
        filled_store.rebuild()
    assert not list(store_dir.glob("index.sqlite3.damaged-*"))
    filled_store.index.close()  # a new connection has no page limit: the index catches up
    assert filled_store.search("words")["total_matches"] == 20
    assert filled_store.verify()["ok"]


def test_a_quarantine_copy_that_fails_for_space_leaves_no_file_and_retries_cleanly(store, store_dir, monkeypatch):
    store.write("before")
    with open(store_dir / "log.jsonl", "ab") as f:
        f.write(b'{"torn')
    real_write = os.write

    def full(fd, data):
        # The log's own descriptor still writes; any other file (the quarantine copy) finds the disk full.
        if os.fstat(fd).st_ino != (store_dir / "log.jsonl").stat().st_ino:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    for _ in range(5):
        with pytest.raises(WriteFailed) as err:
            store.write("after the tail")
        assert "free space" in err.value.message
    monkeypatch.undo()
    assert _quarantined(store_dir) == {}
    assert store.write("space is back")["seq"] == 2
    assert list(_quarantined(store_dir).values()) == [len(b'{"torn')]
    assert chain.walk(Log(store_dir).scan()).ok
