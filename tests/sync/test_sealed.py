"""Client-side encryption: with a key, the bucket holds only ciphertext; the same key opens it; another key is a finding."""

from __future__ import annotations

import os

import pytest

from retained import Store

from ..conftest import run_cli
from .helpers import get, keys, kinds, sync

pytest.importorskip("cryptography", reason="cryptography (the encrypt extra) is not installed")


def test_sealed_segments_hide_the_records_and_open_only_with_the_key(seaweed, tmp_path, monkeypatch):
    remote = seaweed.bucket()
    key, other = os.urandom(32), os.urandom(32)
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b, Store(tmp_path / "c") as c:
        for i in range(8):
            a.write(f"confidential pangolin note {i}")
        report = sync(a, seaweed, remote, key=key, segment_bytes=1024)
        assert report["ok"], report["findings"]
        objects = [get(seaweed, remote, k) for k in keys(seaweed, remote)]
        assert objects and not any(b"pangolin" in o or b'"seq"' in o for o in objects)
        assert sync(a, seaweed, remote, key=key)["published"]["records"] == 0  # the head opens: nothing new
        pulled = sync(b, seaweed, remote, key=key)
        assert pulled["ok"], pulled["findings"]
        assert b.search("pangolin", k=20)["total_matches"] == 8
        wrong = sync(c, seaweed, remote, key=other)
        assert kinds(wrong) == ["unreadable"]
        assert c.search("pangolin")["total_matches"] == 0
        plain = sync(c, seaweed, remote)
        assert kinds(plain) == ["head_unreadable"] and "--key-file" in plain["findings"][0]["message"]
        sid = a.head()["store_id"]
        a.redact(2, "erase")
        erased = sync(a, seaweed, remote, key=key, segment_bytes=1024)
        assert erased["ok"] and len(erased["published"]["replaced"]) == 1
        assert sync(b, seaweed, remote, key=key)["pulled"][0]["erased"] == [2]
        log = a.log.path.read_bytes()
    key_file = tmp_path / "sync.key"
    key_file.write_text(key.hex() + "\n")
    for name, value in seaweed.env.items():
        monkeypatch.setenv(name, value)
    back = run_cli("--dir", str(tmp_path / "r"), "sync", "--remote", remote, "--restore", sid, "--key-file", str(key_file), "--json")
    assert back.returncode == 0, back.stderr
    assert (tmp_path / "r" / "log.jsonl").read_bytes() == log
    key_file.write_text("not a key\n")
    bad = run_cli("--dir", str(tmp_path / "r2"), "sync", "--remote", remote, "--key-file", str(key_file))
    assert bad.returncode == 1 and "64 hex digits" in bad.stderr
