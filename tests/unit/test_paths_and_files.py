"""Paths and files (issue 29, point 11): what the store writes lands only where it may, and bad numbers are told."""

from __future__ import annotations

import os

import pytest

from retained import Store
from retained.core import record
from retained.core.log import Log
from retained.errors import InvalidRecord, PathRefused, StoreDamaged

from ..conftest import run_cli


def test_issue_29_export_never_overwrites_a_file_it_did_not_create(filled_store, tmp_path):
    out = tmp_path / "mine.jsonl"
    out.write_bytes(b"my own notes\n")
    beside = tmp_path / "mine.jsonl.tmp"
    beside.write_bytes(b"also mine\n")
    with pytest.raises(PathRefused, match="exists"):
        filled_store.export(out)
    assert out.read_bytes() == b"my own notes\n" and beside.read_bytes() == b"also mine\n"
    cli = run_cli("export", "-o", str(out), "--json", env_dir=filled_store.directory)
    assert cli.returncode == 2 and "exists" in cli.stderr and "--overwrite" in cli.stderr
    assert out.read_bytes() == b"my own notes\n" and beside.read_bytes() == b"also mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.jsonl", "mine.jsonl.tmp", "store"]
    # Asked for: replaced; a new path: made; the file beside it never touched.
    assert filled_store.export(out, overwrite=True)["path"] == str(out)
    assert len(out.read_bytes().splitlines()) == 10
    assert run_cli("export", "-o", str(tmp_path / "new.jsonl"), env_dir=filled_store.directory).returncode == 0
    assert beside.read_bytes() == b"also mine\n"


def test_issue_29_export_into_the_store_is_refused_even_with_overwrite(filled_store):
    log = filled_store.directory / "log.jsonl"
    before = log.read_bytes()
    for target in (log, filled_store.directory / "copy.jsonl"):
        with pytest.raises(PathRefused, match="inside the store"):
            filled_store.export(target, overwrite=True)
    assert log.read_bytes() == before and not (filled_store.directory / "copy.jsonl").exists()


def test_issue_29_an_anchor_directory_inside_the_store_is_refused_with_a_reason(tmp_path, monkeypatch):
    store_dir = tmp_path / "store"
    for inside in (store_dir, store_dir / "anchors"):
        with pytest.raises(InvalidRecord, match="inside the store") as err:
            Store(store_dir, anchor_dir=inside)
        assert "RETAINED_ANCHOR_DIR" in err.value.message
    monkeypatch.setenv("RETAINED_ANCHOR_DIR", str(store_dir / "anchors"))
    cli = run_cli("write", "x", "--json", env_dir=store_dir)
    assert cli.returncode == 2 and "inside the store" in cli.stderr
    assert not (store_dir / "log.jsonl").exists()


def test_issue_29_a_hard_linked_log_is_refused(filled_store, tmp_path):
    log_path = filled_store.directory / "log.jsonl"
    os.link(log_path, tmp_path / "other-name.jsonl")
    size = log_path.stat().st_size
    with pytest.raises(StoreDamaged, match="2 hard links"):
        Log(filled_store.directory).append([record.make_content(text="x")], client={"name": "t", "version": "0"})
    assert log_path.stat().st_size == size
    (tmp_path / "other-name.jsonl").unlink()
    assert Store(filled_store.directory).write("now alone")["seq"] == 11


@pytest.mark.parametrize("args, words", [
    (["quarantine", "9223372036854775808"], "is not a byte offset"),
    (["serve", "--http", "--port", "99999"], "99999 is not a port"),
    (["view", "--port=-1"], "-1 is not a port"),
    (["serve", "--http", "--port", "http"], "'http' is not a port"),
])
def test_issue_29_huge_or_negative_offsets_and_ports_get_a_clear_error(filled_store, args, words):
    out = run_cli(*args, env_dir=filled_store.directory)
    assert out.returncode == 2 and words in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
