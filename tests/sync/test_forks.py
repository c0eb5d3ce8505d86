"""Forks, rollbacks and a publish killed midway: findings with seqs and segments, nothing overwritten, nothing acknowledged lost."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

from retained import Store

from ..conftest import REPO
from .helpers import head, keys, kinds, put, sync


def test_a_copied_store_directory_that_kept_writing_is_a_fork_and_nothing_is_overwritten(seaweed, tmp_path):
    remote = seaweed.bucket()
    with Store(tmp_path / "a") as a:
        for i in range(5):
            a.write(f"shared history {i}")
        assert sync(a, seaweed, remote)["ok"]
    shutil.copytree(tmp_path / "a", tmp_path / "clone")  # same store id, same history so far
    with Store(tmp_path / "a") as a, Store(tmp_path / "clone") as clone, Store(tmp_path / "c") as c:
        a.write("written on the original")
        clone.write("written on the clone")
        assert sync(a, seaweed, remote, machine="original")["ok"]
        sid = a.head()["store_id"]
        published = head(seaweed, remote, sid)
        before = {k: None for k in keys(seaweed, remote)}
        report = sync(clone, seaweed, remote, machine="clone")
        assert kinds(report) == ["fork"]
        assert report["findings"][0]["seq"] == 6 and report["findings"][0]["segment"].endswith("000000000006-000000000006.jsonl")
        assert head(seaweed, remote, sid) == published
        assert set(keys(seaweed, remote)) == set(before)
        assert clone.log.path.read_bytes().count(b"written on the clone") == 1
        # The clone's verify says so too, until the next sync finds nothing.
        assert "fork" in [f["kind"] for f in clone.verify()["findings"]]
        # A third store pulls the original's history only.
        pulled = sync(c, seaweed, remote)
        assert pulled["ok"], pulled["findings"]
        assert c.search("written")["results"][0]["record"]["text"] == "written on the original"


def test_a_rolled_back_log_is_caught_by_sync_and_by_verify_through_the_published_head(seaweed, tmp_path):
    remote = seaweed.bucket()
    anchors = tmp_path / "anchors"
    with Store(tmp_path / "a", anchor_dir=anchors) as a:
        for i in range(4):
            a.write(f"early {i}")
        old = a.log.path.read_bytes()
        for i in range(4):
            a.write(f"late {i}")
        assert sync(a, seaweed, remote)["ok"]
    (tmp_path / "a" / "log.jsonl").write_bytes(old)  # restored from an older copy
    (tmp_path / "a" / "index.sqlite3").unlink(missing_ok=True)  # only the published head remembers seq 8
    with Store(tmp_path / "a", anchor_dir=anchors) as a:
        report = sync(a, seaweed, remote)
        assert kinds(report) == ["rolled_back"]
        assert report["findings"][0]["seq"] == 8 and report["findings"][0]["observed"] == 4
        found = [f for f in a.verify()["findings"] if f["kind"] == "rolled_back"]
        # Twice: the anchor the publish recorded, and the last sync's own finding.
        assert [f.get("anchor", {}).get("source") for f in found] == ["sync", None]
        assert found[1]["message"].startswith("last sync: ")
        assert head(seaweed, remote, a.head()["store_id"])["seq"] == 8


def test_a_published_head_that_moves_backwards_is_reported_by_the_puller(seaweed, tmp_path):
    remote = seaweed.bucket()
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        for i in range(6):
            a.write(f"note {i}")
        sync(a, seaweed, remote, segment_bytes=512)
        assert sync(b, seaweed, remote)["ok"]
        sid = a.head()["store_id"]
        moved = head(seaweed, remote, sid)
        line = next(ln for ln in a.log.scan() if ln.seq == 3)
        moved.update(seq=3, hash=line.hash)
        import json

        put(seaweed, remote, f"memory/stores/{sid}/head.json", json.dumps(moved).encode())
        report = sync(b, seaweed, remote, publish_own=False)
        assert kinds(report) == ["head_moved_back"]
        assert (report["findings"][0]["expected"], report["findings"][0]["observed"]) == (6, 3)
        assert b.search("note", k=20)["total_matches"] == 6


CHILD = textwrap.dedent("""
    import os, signal, sys
    from retained import Store
    from retained.sync import remote as r

    created = [0]
    create = r.Remote.create

    def dying(self, key, data, metadata=None):
        etag = create(self, key, data, metadata)
        created[0] += 1
        if created[0] == int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)  # the crash, right after a segment landed
        return etag

    r.Remote.create = dying
    with Store(sys.argv[1]) as s:
        s.sync(sys.argv[2], machine="crashing", segment_bytes=2048)
""")


def test_a_publish_killed_midway_loses_nothing_and_the_next_sync_completes(seaweed, tmp_path):
    remote = seaweed.bucket()
    d = tmp_path / "a"
    with Store(d) as a:
        for i in range(60):
            a.write(f"acknowledged note {i} about the crash")
    env = {**os.environ, **seaweed.env}
    child = subprocess.run([sys.executable, "-c", CHILD, str(d), remote, "3"], cwd=REPO, env=env, timeout=120,
                           capture_output=True)
    assert child.returncode == -9, child.stderr
    segs = [k for k in keys(seaweed, remote) if "/seg/" in k]
    assert len(segs) == 3 and not any(k.endswith("head.json") for k in keys(seaweed, remote))
    with Store(d) as a:
        a.write("written after the crash")
        report = sync(a, seaweed, remote, segment_bytes=2048)
        assert report["ok"], report["findings"]
        assert report["published"]["adopted"] == segs
        assert report["published"]["records"] + int(segs[-1].rsplit("-", 1)[1].split(".")[0]) == 61
        sid, log = a.head()["store_id"], a.log.path.read_bytes()
    with Store(tmp_path / "restored") as back:
        assert sync(back, seaweed, remote, restore_id=sid)["ok"]
        assert back.log.path.read_bytes() == log
