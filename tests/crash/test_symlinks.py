"""No store file is opened through a symbolic link (issue 14).

A link planted at a name the store creates must be refused with an error that
names it, and whatever it points at must stay untouched: a write through it
could land on, or a truncation hit, any file the user can write.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from retained import Store
from retained.core import chain
from retained.core.log import Log
from retained.errors import LinkRefused

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


# -- every other name the store creates (issue 14) ------------------------------------------


@pytest.mark.parametrize("name", ["index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm"])
def test_a_link_at_the_index_or_its_companions_is_refused_by_name(store, store_dir, target, name):
    store.write("a record")
    store.close()
    for leftover in ("index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm"):
        (store_dir / leftover).unlink(missing_ok=True)
    (store_dir / name).symlink_to(target)
    with Store(store_dir) as again:
        with pytest.raises(LinkRefused) as err:
            again.search("record")
        assert f"{name} is a symbolic link" in err.value.message
        report = again.verify()
        # The log verifies; the index, which cannot be opened, is the one finding.
        assert [f["kind"] for f in report["findings"]] == ["index_unusable"]
        assert name in report["findings"][0]["message"]
        # Writes never touch the index; the brief answers from the log alone.
        assert again.write("still written")["seq"] == 2
        result = again.brief()
        assert result["status"] == "ok" and result["index"]["state"] in ("unusable", "absent")
        assert [e["seq"] for e in result["included"]] == [2, 1]
    assert target.read_bytes() == PRECIOUS
    assert (store_dir / name).is_symlink()


def test_a_dangling_link_at_the_index_name_creates_nothing(store, store_dir, tmp_path):
    store.write("a record")
    store.close()
    missing = tmp_path / "elsewhere.sqlite3"
    (store_dir / "index.sqlite3").symlink_to(missing)
    with Store(store_dir) as again, pytest.raises(LinkRefused):
        again.rebuild()
    assert not missing.exists()


def test_a_link_beside_the_export_is_left_alone_not_followed(filled_store, tmp_path, target):
    """The export's temporary has a fresh name of its own (issue 29): a link planted beside it is neither followed nor removed."""
    from retained.data import imports as transfer

    out = tmp_path / "export.jsonl"
    (tmp_path / "export.jsonl.tmp").symlink_to(target)
    result = transfer.export_to_file(filled_store.log, out)
    assert result["records"] == 10
    assert target.read_bytes() == PRECIOUS
    assert not out.is_symlink() and len(out.read_bytes().splitlines()) == 10
    assert (tmp_path / "export.jsonl.tmp").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".export", "export"))) == [
        "export.jsonl", "export.jsonl.tmp"]


def test_a_link_at_the_backup_temporary_is_removed_not_followed(filled_store, tmp_path, target):
    from retained.data import imports as transfer

    dest = tmp_path / "backup"
    transfer.backup(filled_store.log, dest)
    filled_store.write("one more")
    (tmp_path / f".backup.old-{os.getpid()}").symlink_to(target)
    result = transfer.backup(filled_store.log, dest, force=True)
    assert result["ok"] and result["records"] == 11 and result["replaced"]
    assert target.read_bytes() == PRECIOUS
    assert not (tmp_path / f".backup.old-{os.getpid()}").exists()


def test_a_link_at_the_scrub_temporary_of_a_quarantined_tail_is_removed_not_followed(store, store_dir, target):
    store.write("before")
    size = (store_dir / "log.jsonl").stat().st_size
    with open(store_dir / "log.jsonl", "ab") as f:
        f.write(b'{"text":"secret in a record')
    store.write("sets the tail aside")
    store.write("secret in a record")
    (store_dir / f".scrub-log.jsonl.torn-{size}").symlink_to(target)
    result = store.redact(3, "held a secret")
    assert result["quarantine_scrubbed"] == [f"log.jsonl.torn-{size}"]
    assert target.read_bytes() == PRECIOUS
    assert b"secret in a record" not in (store_dir / f"log.jsonl.torn-{size}").read_bytes()


def test_a_link_at_the_store_id_is_refused_by_name(store_dir, anchor_dir, target):
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        store.write("a record")  # records the head (a routine anchor), which makes store.id
        (store_dir / "store.id").unlink()
        (store_dir / "store.id").symlink_to(target)
        report = store.verify()
        assert [f["kind"] for f in report["findings"]] == ["anchor_unreadable"]
        assert "store.id is a symbolic link" in report["findings"][0]["message"]
        with pytest.raises(LinkRefused):
            store.head()
        assert store.brief()["anchor"]["error"].startswith(str(store_dir / "store.id"))
    assert target.read_bytes() == PRECIOUS


def test_a_link_at_the_anchor_file_is_refused_by_name(store_dir, anchor_dir, target):
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        store.write("a record")
        path = Path(store.head()["anchor_file"])
        path.unlink()  # the write's routine anchor made it; a link takes its place
        path.symlink_to(target)
        assert "is a symbolic link" in store.brief()["anchor"]["error"]
        report = store.verify()
        assert [f["kind"] for f in report["findings"]] == ["anchor_unreadable"]
        assert f"{path} is a symbolic link" in report["findings"][0]["message"]
        assert "symbolic link" in report["anchors"]["error"]
    assert target.read_bytes() == PRECIOUS
