"""Erasure: chain intact afterwards, bytes gone everywhere, and crash-safe at every step."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from retained import Store
from retained.core import chain
from retained.core.log import Log
from retained.errors import InvalidRecord, NotFound

SECRET = "hunter2-correct-horse-battery"


def _filled(store_dir):
    store = Store(store_dir)
    store.write("first note")
    store.write(f"the password is {SECRET}", fields={"meta": {"copy": SECRET}})
    store.write("third note")
    return store


def _bytes_in_store(store_dir, needle: bytes) -> list[str]:
    return [p.name for p in store_dir.iterdir() if p.is_file() and needle in p.read_bytes()]


def test_redaction_keeps_the_chain_and_erases_the_bytes_everywhere(store_dir):
    store = _filled(store_dir)
    # A torn tail holding the same secret, and an index that has seen it.
    with open(store_dir / "log.jsonl", "ab") as f:
        f.write(f'{{"text":"{SECRET} again'.encode())
    store.write("fourth note")  # sets the torn tail aside
    from retained.index.writer import Index

    idx = Index(Log(store_dir))
    idx.catch_up()
    idx.close()
    assert _bytes_in_store(store_dir, SECRET.encode())

    result = store.redact(2, "pasted a password")
    assert result["line_bytes_after"] < result["line_bytes_before"]
    assert result["quarantine_scrubbed"] and result["index"] == "rebuilt"
    report = chain.walk(Log(store_dir).scan())
    assert report.ok and report.redacted == [2] and report.head_seq == 5
    assert _bytes_in_store(store_dir, SECRET.encode()) == []
    assert _bytes_in_store(store_dir, b"hunter2") == []
    (entry,) = store.get([2])
    assert entry["record"]["redacted"] is True and "text" not in entry["record"]
    red = [x for x in Log(store_dir).scan() if x.status == "record" and x.record["kind"] == "redaction"]
    assert red[0].record["redacts"] == 2 and red[0].record["reason"] == "pasted a password"


def test_redacting_twice_changes_nothing_the_second_time(store_dir):
    store = _filled(store_dir)
    store.redact(2, "once")
    before = (store_dir / "log.jsonl").read_bytes()
    assert store.redact(2, "twice")["already_redacted"] is True
    assert (store_dir / "log.jsonl").read_bytes() == before


@pytest.mark.parametrize("seq, reason, error", [(9, "x", NotFound), (0, "x", InvalidRecord), (2, " ", InvalidRecord)])
def test_bad_redaction_requests_change_nothing(store_dir, seq, reason, error):
    store = _filled(store_dir)
    before = (store_dir / "log.jsonl").read_bytes()
    with pytest.raises(error):
        store.redact(seq, reason)
    assert (store_dir / "log.jsonl").read_bytes() == before


def test_appends_after_a_redaction_continue_the_chain_from_any_handle(store_dir):
    store = _filled(store_dir)
    other = Store(store_dir)
    other.write("opened before the redaction")
    store.redact(2, "gone")
    proof = other.write("after the redaction, through the old handle")
    assert proof["seq"] == 6
    assert chain.walk(Log(store_dir).scan()).ok


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import retained.core.log as L
    import retained.safety.redaction as r
    from retained import Store
    step = sys.argv[2]
    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)
    if step == "before_tmp":
        real_copy = r._copy
        r._copy = die
    elif step == "mid_copy":
        real = r.write_all
        calls = {"n": 0}
        def partial(fd, data):
            calls["n"] += 1
            if calls["n"] == 2:
                real(fd, data[: len(data) // 2])
                die()
            real(fd, data)
        r.write_all = partial
    elif step == "before_rename":
        r.os.replace = die
    elif step == "after_rename":
        L.fsync_dir = die  # the log's whole-file replacement fsyncs the directory right after the rename
    Store(sys.argv[1]).redact(2, "crash test")
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("step", ["before_tmp", "mid_copy", "before_rename", "after_rename"])
def test_a_crash_at_each_step_leaves_the_old_log_or_the_new_one_never_a_mix(store_dir, step):
    _filled(store_dir).close()
    old = (store_dir / "log.jsonl").read_bytes()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(store_dir), step], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    now = (store_dir / "log.jsonl").read_bytes()
    report = chain.walk(Log(store_dir).scan())
    if report.redacted:
        # The new log: whole, chain intact, redaction record present.
        assert step == "after_rename" and report.ok
    else:
        # The old log, plus the redaction record appended by step 1.
        assert now.startswith(old) and len(now.splitlines()) == len(old.splitlines()) + 1
        kinds = [f["kind"] for f in report.findings]
        assert kinds == ["redaction_pending"]
    # Running the same erasure again finishes it, without a second redaction record.
    result = Store(store_dir).redact(2, "crash test")
    final = chain.walk(Log(store_dir).scan())
    assert final.ok and final.redacted == [2]
    assert sum(1 for x in Log(store_dir).scan() if x.status == "record" and x.record.get("kind") == "redaction") == 1
    assert result["already_redacted"] == (step == "after_rename")
    assert json.dumps(result)
    assert _bytes_in_store(store_dir, SECRET.encode()) == []
