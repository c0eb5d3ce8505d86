"""No store file is opened through a symbolic link (issue 14).

A link planted at a name the store creates must be refused with an error that
names it, and whatever it points at must stay untouched: a write through it
could land on, or a truncation hit, any file the user can write.
"""

from __future__ import annotations

import os

import pytest

from retained import Store, chain
from retained.errors import LinkRefused
from retained.log import Log

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")

PRECIOUS = b"a file outside the store that must never change\n"


@pytest.fixture
def target(tmp_path):
    path = tmp_path / "precious.txt"
    path.write_bytes(PRECIOUS)
    return path


def test_a_linked_log_is_refused_for_writes_and_reads(store_dir, target):
    store_dir.mkdir(mode=0o700)
    (store_dir / "log.jsonl").symlink_to(target)
    with Store(store_dir) as store:
        with pytest.raises(LinkRefused) as err:
            store.write("through the link")
        assert "log.jsonl is a symbolic link" in err.value.message
        with pytest.raises(LinkRefused):
            store.verify()
        with pytest.raises(LinkRefused):
            store.list()
    assert target.read_bytes() == PRECIOUS


def test_a_dangling_log_link_does_not_create_its_target(store_dir, tmp_path):
    store_dir.mkdir(mode=0o700)
    missing = tmp_path / "elsewhere" / "created.jsonl"
    missing.parent.mkdir()
    (store_dir / "log.jsonl").symlink_to(missing)
    with Store(store_dir) as store, pytest.raises(LinkRefused):
        store.write("through a dangling link")
    assert not missing.exists()


def test_two_stores_cannot_share_one_log_through_a_link(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    with Store(a) as store:
        store.write("in a")
    b.mkdir(mode=0o700)
    (b / "log.jsonl").symlink_to(a / "log.jsonl")
    with Store(b) as other, pytest.raises(LinkRefused):
        other.write("would fork a's chain")
    assert chain.walk(Log(a).scan()).ok


def test_a_linked_lock_file_is_refused(store, store_dir, target):
    store.write("before")
    store.close()
    (store_dir / "log.lock").unlink()
    (store_dir / "log.lock").symlink_to(target)
    with Store(store_dir) as again, pytest.raises(LinkRefused) as err:
        again.write("after")
    assert "log.lock" in err.value.message
    assert target.read_bytes() == PRECIOUS


def test_a_link_at_the_quarantine_name_is_not_written_through(store, store_dir, target):
    store.write("before")
    size = (store_dir / "log.jsonl").stat().st_size
    with open(store_dir / "log.jsonl", "ab") as f:
        f.write(b'{"torn')  # an append cut short: never acknowledged
    (store_dir / f"log.jsonl.torn-{size}").symlink_to(target)
    with Store(store_dir) as again:
        assert again.write("after the torn tail")["seq"] == 2
    assert target.read_bytes() == PRECIOUS
    kept = store_dir / f"log.jsonl.torn-{size}.1"
    assert kept.read_bytes() == b'{"torn' and not kept.is_symlink()


def test_a_link_at_the_redaction_temporary_is_removed_not_followed(store, store_dir, target):
    store.write("keep")
    store.write("erase me: it held a password")
    (store_dir / "log.jsonl.redact-tmp").symlink_to(target)
    result = store.redact(2, "held a password")
    assert result["redaction_record"]["seq"] == 3
    assert target.read_bytes() == PRECIOUS
    assert not (store_dir / "log.jsonl").is_symlink()
    assert not (store_dir / "log.jsonl.redact-tmp").exists()
    assert chain.walk(Log(store_dir).scan()).redacted == [2]
