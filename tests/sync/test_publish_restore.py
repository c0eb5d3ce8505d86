"""Publish and restore against a real S3 server (SeaweedFS): segments create-only, the head by compare-and-swap, restore byte-identical."""

from __future__ import annotations

import json

from retained import Store
from retained.sync import layout

from ..conftest import run_cli


def _sync(store: Store, seaweed, remote: str, **options):
    return store.sync(remote, client=seaweed.client(), machine=options.pop("machine", "laptop"), **options)


def _keys(seaweed, remote: str) -> list[str]:
    bucket, _, prefix = remote[5:].partition("/")
    out = seaweed.client().list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"] for o in out)


def test_publish_uploads_sealed_segments_and_moves_the_head_then_only_new_bytes_travel(seaweed, tmp_path):
    remote = seaweed.bucket()
    with Store(tmp_path / "a", anchor_dir=tmp_path / "anchors") as store:
        for i in range(30):
            store.write(f"note {i} about the deploy target")
        first = _sync(store, seaweed, remote, segment_bytes=2048)
        assert first["ok"], first["findings"]
        pub = first["published"]
        assert pub["records"] == 30 and len(pub["segments"]) > 2
        sid = first["store_id"]
        keys = _keys(seaweed, remote)
        assert f"memory/stores/{sid}/head.json" in keys
        # The segments hold the log, whole lines, in order, and nothing else.
        body = b"".join(seaweed.client().get_object(Bucket=remote[5:].split("/")[0], Key=k)["Body"].read()
                        for k in keys if "/seg/" in k)
        assert body == store.log.path.read_bytes()
        again = _sync(store, seaweed, remote, segment_bytes=2048)
        assert again["ok"] and again["published"]["records"] == 0 and again["published"]["segments"] == []
        store.write("one more")
        third = _sync(store, seaweed, remote, segment_bytes=2048)
        assert third["published"]["records"] == 1 and len(third["published"]["segments"]) == 1
        assert layout.parse_segment_key(third["published"]["segments"][0]) == (31, 31)
        head = json.loads(seaweed.client().get_object(Bucket=remote[5:].split("/")[0],
                                                      Key=f"memory/stores/{sid}/head.json")["Body"].read())
        assert (head["seq"], head["hash"], head["machine"]) == (31, store.head()["hash"], "laptop")


def test_restore_rebuilds_a_lost_store_byte_identical_with_its_index_and_verify_ok(seaweed, tmp_path):
    remote = seaweed.bucket()
    with Store(tmp_path / "lost") as store:
        for i in range(40):
            store.write(f"restorable note {i}", scope="proj")
        store.redact(3, "a secret was written")
        report = _sync(store, seaweed, remote, segment_bytes=4096)
        assert report["ok"], report["findings"]
        sid, original = report["store_id"], store.log.path.read_bytes()
    with Store(tmp_path / "new") as fresh:
        done = _sync(fresh, seaweed, remote, restore_id=sid)
        assert done["ok"], done["findings"]
        assert fresh.log.path.read_bytes() == original
        assert (tmp_path / "new" / "store.id").read_text().strip() == sid
        assert fresh.search("restorable note 17")["results"][0]["seq"] == 18
        assert fresh.verify()["ok"]
        # The restored store goes on publishing from the head: only new records travel.
        fresh.write("written after the restore")
        after = _sync(fresh, seaweed, remote)
        assert after["ok"], after["findings"]
        assert after["published"]["records"] == 1


def test_restore_refuses_a_directory_that_has_a_log(seaweed, tmp_path):
    remote = seaweed.bucket()
    with Store(tmp_path / "a") as store:
        store.write("x")
        sid = _sync(store, seaweed, remote)["store_id"]
    with Store(tmp_path / "b") as other:
        other.write("y")
        before = other.log.path.read_bytes()
        try:
            _sync(other, seaweed, remote, restore_id=sid)
        except Exception as exc:  # noqa: BLE001 -- asserting on the one error expected
            assert "already holds a log" in str(exc)
        else:
            raise AssertionError("restore over a log was not refused")
        assert other.log.path.read_bytes() == before


def test_the_command_publishes_and_restores_with_json(seaweed, tmp_path, monkeypatch):
    remote = seaweed.bucket()
    for name, value in seaweed.env.items():
        monkeypatch.setenv(name, value)
    a = tmp_path / "a"
    assert run_cli("--dir", str(a), "write", "from the command line").returncode == 0
    done = run_cli("--dir", str(a), "sync", "--remote", remote, "--machine", "desk", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["published"]["records"] == 1
    back = run_cli("--dir", str(tmp_path / "r"), "sync", "--remote", remote, "--restore", report["store_id"], "--json")
    assert back.returncode == 0, back.stderr
    assert (tmp_path / "r" / "log.jsonl").read_bytes() == (a / "log.jsonl").read_bytes()
    assert run_cli("--dir", str(a), "write", "a second one").returncode == 0
    shown = run_cli("--dir", str(a), "sync", "--remote", remote, "--machine", "desk")
    assert shown.returncode == 0, shown.stderr
    assert f"published store {report['store_id']} as desk: 1 new record(s) in 1 segment(s); head seq 2" in shown.stdout
    other = run_cli("--dir", str(tmp_path / "o"), "sync", "--remote", remote, "--no-publish")
    assert other.returncode == 0 and f"pulled store {report['store_id']} (desk): 2 new record(s), now at seq 2" in other.stdout
    missing = run_cli("--dir", str(a), "sync", "--json")
    assert missing.returncode == 2 and "--remote" in missing.stderr
