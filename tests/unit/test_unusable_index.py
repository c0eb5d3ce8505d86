"""An index that cannot be opened, or a store that cannot be written: every command tells the truth (issue 29, point 6).

Reads by seq answer from the log as search and list do; redact and
quarantine report the log's state and the index's each as it is, never
"the log is untouched" after rewriting it; an index that may still hold
erased text is removed, or set aside and reported by verify. Real
subprocesses of ``python -m retained``; a read-only bind mount where a
read-only store is needed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from retained import Store

from ..conftest import run_cli


def _store_with(store_dir, *texts):
    with Store(store_dir) as s:
        for text in texts:
            s.write(text)
        s.search("x")  # an index exists and holds every record


def _unopenable_index(store_dir):
    """Make the index impossible to open for anyone, root included: a directory takes its name."""
    index = store_dir / "index.sqlite3"
    for name in ("index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm"):
        (store_dir / name).unlink(missing_ok=True)
    index.mkdir()
    return index


@contextlib.contextmanager
def _read_only(store_dir, tmp_path):
    """The store seen through a read-only bind mount: nothing in it can be created or written, root included."""
    if sys.platform != "linux" or not shutil.which("mount") or os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root on Linux (as another user, chmod -w does the same)")
    view = tmp_path / "read-only"
    view.mkdir()
    bind = subprocess.run(["mount", "--bind", str(store_dir), str(view)], capture_output=True, timeout=30, check=False)
    if bind.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bind.stderr.decode(errors='replace').strip()}")
    try:
        ro = subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], capture_output=True, timeout=30, check=False)
        if ro.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {ro.stderr.decode(errors='replace').strip()}")
        yield view
    finally:
        subprocess.run(["umount", str(view)], capture_output=True, timeout=30, check=False)


def _reads_by_seq_answer(store_dir):
    got = run_cli("get", "1", "3", "--json", env_dir=store_dir)
    assert got.returncode == 0 and "Traceback" not in got.stderr, got.stderr
    assert [e["record"]["text"] for e in json.loads(got.stdout)["records"]] == ["first note", "third note"]
    around = run_cli("get", "--around", "2", "--window", "1", "--json", env_dir=store_dir)
    assert around.returncode == 0, around.stderr
    timeline = json.loads(around.stdout)
    assert [e["seq"] for e in timeline["records"]] == [1, 2, 3] and timeline["more_after"] == 1
    text = run_cli("get", "4", env_dir=store_dir)
    assert text.returncode == 0 and "fourth note" in text.stdout, text.stderr
    head = run_cli("head", "--json", env_dir=store_dir)
    assert head.returncode == 0, head.stderr
    assert json.loads(head.stdout)["seq"] == 4
    missing = run_cli("get", "9", env_dir=store_dir)
    assert missing.returncode != 0 and "no record with seq 9" in missing.stderr


def test_reads_by_seq_answer_from_the_log_when_the_index_cannot_be_opened(store_dir):
    _store_with(store_dir, "first note", "second note", "third note", "fourth note")
    _unopenable_index(store_dir)
    with Store(store_dir) as s:
        assert [e["seq"] for e in s.get([4, 2])] == [4, 2]
        assert s.timeline(4, window=1)["returned"] == 2
    _reads_by_seq_answer(store_dir)


@pytest.mark.parametrize("with_index", [True, False], ids=["index", "no-index"])
def test_on_a_read_only_store_reads_by_seq_head_list_and_search_answer(store_dir, tmp_path, with_index):
    # Written by the library without anchors: no store.id, and none can be made on a read-only store.
    with Store(store_dir) as s:
        for text in ("first note", "second note", "third note", "fourth note"):
            s.write(text)
        if with_index:
            s.search("note")
    assert not (store_dir / "store.id").exists()
    before = sorted(p.name for p in store_dir.iterdir())
    with _read_only(store_dir, tmp_path) as view:
        _reads_by_seq_answer(view)
        listed = run_cli("list", "--json", env_dir=view)
        assert listed.returncode == 0 and json.loads(listed.stdout)["returned"] == 4, listed.stderr
        found = run_cli("search", "third", "--json", env_dir=view)
        assert found.returncode == 0 and json.loads(found.stdout)["returned"] == 1, found.stderr
        head = json.loads(run_cli("head", "--json", env_dir=view).stdout)
        assert head["store_id"] is None and "store.id" in head["note"]
    assert sorted(p.name for p in store_dir.iterdir()) == before


def test_redact_with_an_index_it_cannot_open_sets_it_aside_says_so_and_verify_reports_it(store_dir):
    _store_with(store_dir, "the password is hunter2-correct-horse", "a harmless note")
    index = _unopenable_index(store_dir)
    out = run_cli("redact", "1", "--reason", "pasted a password", "--json", env_dir=store_dir)
    # The log was rewritten: the reply says so, with the redaction record, and says what became of the index.
    assert "Traceback" not in out.stderr, out.stderr
    result = json.loads(out.stdout)
    assert result["redaction_record"]["seq"] == 3 and result["already_redacted"] is False
    assert b"hunter2" not in (store_dir / "log.jsonl").read_bytes()
    assert result["index"] == "set_aside" and str(index) in result["index_problem"]
    aside = store_dir / os.path.basename(result["index_set_aside"])
    assert aside.exists() and not index.exists()
    assert out.returncode == 1  # the erased text may still be in what was set aside
    text = run_cli("redact", "1", "--reason", "again", env_dir=store_dir)
    assert "already redacted" in text.stdout and "the log is untouched" not in text.stdout + text.stderr

    verify = run_cli("verify", "--json", env_dir=store_dir)
    assert verify.returncode == 1
    findings = json.loads(verify.stdout)["findings"]
    assert [f["kind"] for f in findings] == ["index_set_aside"]
    assert str(aside) in findings[0]["message"] and "seq 1" in findings[0]["message"]
    aside.rmdir()
    assert run_cli("verify", env_dir=store_dir).returncode == 0


def test_redact_deletes_an_index_it_cannot_open_when_it_can_and_says_the_erased_text_went_with_it(store_dir, tmp_path):
    _store_with(store_dir, "the password is hunter2-correct-horse", "a harmless note")
    index = store_dir / "index.sqlite3"
    for name in ("index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm"):
        (store_dir / name).unlink(missing_ok=True)
    elsewhere = tmp_path / "elsewhere.sqlite3"
    elsewhere.write_bytes(b"not ours")
    index.symlink_to(elsewhere)  # refused: no file of the store is opened through a link
    out = run_cli("redact", "1", "--reason", "pasted a password", "--json", env_dir=store_dir)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["index"] == "removed" and "link" in result["index_problem"]
    assert not os.path.lexists(index) and elsewhere.read_bytes() == b"not ours"
    text = run_cli("redact", "1", "--reason", "again", env_dir=store_dir)
    assert text.returncode == 0 and "already redacted" in text.stdout
    assert run_cli("verify", env_dir=store_dir).returncode == 0
    found = json.loads(run_cli("search", "harmless", "--json", env_dir=store_dir).stdout)
    assert found["returned"] == 1 and "answered from the log" not in (found.get("mode_reason") or "")


def test_redact_as_another_user_deletes_the_index_that_user_cannot_open(store_dir):
    if os.geteuid() == 0:
        pytest.skip("root opens any file whatever its mode; the link and directory cases above run as root")
    _store_with(store_dir, "the password is hunter2-correct-horse", "a harmless note")
    index = store_dir / "index.sqlite3"
    index.chmod(0)
    out = run_cli("redact", "1", "--reason", "pasted a password", "--json", env_dir=store_dir)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["index"] == "removed" and not index.exists()
    assert run_cli("verify", env_dir=store_dir).returncode == 0


def test_quarantine_with_an_index_it_cannot_open_reports_both_states(store_dir):
    _store_with(store_dir, "before the damage")
    log = store_dir / "log.jsonl"
    offset = log.stat().st_size
    with open(log, "ab") as f:
        f.write(b"a note pasted by hand\n")
    index = _unopenable_index(store_dir)
    out = run_cli("quarantine", str(offset), "--json", env_dir=store_dir)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    result = json.loads(out.stdout)
    assert result["record"]["seq"] == 2 and (store_dir / result["file"]).exists()
    assert result["index"] == "unusable" and str(index) in result["index_problem"]
    text = run_cli("quarantine", str(offset), env_dir=store_dir)  # nothing left there: refused, nothing changed
    assert text.returncode == 2
    verify = json.loads(run_cli("verify", "--json", env_dir=store_dir).stdout)
    assert [f["kind"] for f in verify["findings"]] == ["index_unusable"]
    index.rmdir()
    assert run_cli("verify", env_dir=store_dir).returncode == 0
