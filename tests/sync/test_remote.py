"""The two conditions sync relies on, against the real server: create-only and compare-and-swap never overwrite."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from retained import Store
from retained.sync.remote import Exists, Moved, Remote

from ..conftest import REPO
from .helpers import head, kinds, sync


def test_create_only_and_compare_and_swap_refuse_to_overwrite(seaweed):
    remote = Remote(seaweed.bucket(), client=seaweed.client())
    key = remote.prefix + "k"
    assert remote.get(key) is None
    first = remote.create(key, b"one")
    with pytest.raises(Exists):
        remote.create(key, b"two")
    assert remote.get(key) == (b"one", first)
    with pytest.raises(Moved):
        remote.swap(key, b"two", None)  # "create only while absent"
    with pytest.raises(Moved):
        remote.swap(key, b"two", '"0123456789abcdef0123456789abcdef"')  # a stale ETag
    assert remote.get(key)[0] == b"one"
    second = remote.swap(key, b"two", first)
    assert remote.get(key) == (b"two", second)
    with pytest.raises(Moved):
        remote.swap(key, b"three", first)  # the ETag read before the last swap
    assert [k for k, _, _ in remote.listing(remote.prefix)] == [key]


def test_two_syncs_of_one_store_at_once_take_turns_and_publish_once(seaweed, tmp_path):
    remote = seaweed.bucket()
    d = tmp_path / "a"
    with Store(d) as a:
        a.write_batch([{"text": f"note {i}"} for i in range(200)])
    env = {**os.environ, **seaweed.env}
    procs = [subprocess.Popen([sys.executable, "-m", "retained", "--dir", str(d), "sync", "--remote", remote, "--json"],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    import json

    reports = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        reports.append(json.loads(out))
    assert sorted(r["published"]["records"] for r in reports) == [0, 200]
    with Store(d) as a:
        assert head(seaweed, remote, a.head()["store_id"])["seq"] == 200
        assert kinds(sync(a, seaweed, remote)) == []
