"""Faults injected into the writer's system calls: never an acknowledgement, always a valid log after.

Only what a file cannot do on demand is patched (os.write, os.fsync, os.pread);
the log, its file and the next append are real.
"""

from __future__ import annotations

import errno
import os

import pytest

from retained import Store
from retained.core import chain
from retained.core.log import Log
from retained.errors import ReadBackMismatch, WriteFailed


def _lines(store_dir):
    return (store_dir / "log.jsonl").read_bytes().splitlines()


def _after_fault_next_append_is_valid(store, store_dir):
    proof = store.write("after the fault")
    report = chain.walk(Log(store_dir).scan())
    assert report.ok, report.findings
    assert report.head_seq == proof["seq"]
    return proof


def test_short_write_raises_and_the_partial_line_is_set_aside(store, store_dir, monkeypatch):
    store.write("before")
    real_write = os.write

    def short(fd, data):
        return real_write(fd, bytes(data)[: len(data) // 2])

    monkeypatch.setattr(os, "write", short)
    with pytest.raises(WriteFailed) as err:
        store.write("torn by a short write")
    monkeypatch.undo()
    assert "short write" in err.value.message
    proof = _after_fault_next_append_is_valid(store, store_dir)
    assert proof["seq"] == 2
    assert list(store_dir.glob("log.jsonl.torn-*"))


def test_enospc_raises_and_writes_nothing(store, store_dir, monkeypatch):
    store.write("before")
    before = (store_dir / "log.jsonl").read_bytes()

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(WriteFailed) as err:
        store.write("no room")
    monkeypatch.undo()
    assert "No space left" in err.value.message
    assert (store_dir / "log.jsonl").read_bytes() == before
    assert _after_fault_next_append_is_valid(store, store_dir)["seq"] == 2


def test_eio_on_fsync_raises_without_acknowledgement(store, store_dir, monkeypatch):
    store.write("before")

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", eio)
    with pytest.raises(WriteFailed) as err:
        store.write("unsure")
    monkeypatch.undo()
    assert err.value.code == "write_failed"
    # The line reached the page cache whole; it was never acknowledged, and the
    # chain simply continues from it.
    proof = _after_fault_next_append_is_valid(store, store_dir)
    assert proof["seq"] == 3


def test_flipped_byte_in_the_read_back_raises_and_the_handle_is_poisoned(store, store_dir, monkeypatch):
    store.write("before")
    real_pread = os.pread

    def flipped(fd, n, offset):
        # The read-back ends with the new line: flip a byte inside it.
        data = bytearray(real_pread(fd, n, offset))
        if len(data) > 10:
            data[-10] ^= 0x20
        return bytes(data)

    monkeypatch.setattr(os, "pread", flipped)
    with pytest.raises(ReadBackMismatch) as err:
        store.write("read back wrong")
    monkeypatch.undo()
    assert "differs from what was written" in err.value.message
    assert store.log.unusable == "read-back mismatch"
    _after_fault_next_append_is_valid(store, store_dir)


def test_a_fault_never_leaves_two_records_with_one_seq(store_dir, monkeypatch):
    store = Store(store_dir)
    for i in range(3):
        store.write(f"n{i}")
    calls = {"n": 0}
    real_fsync = os.fsync

    def sometimes(fd):
        calls["n"] += 1
        if calls["n"] % 2:
            raise OSError(errno.EIO, "Input/output error")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", sometimes)
    for i in range(6):
        try:
            store.write(f"f{i}")
        except WriteFailed:
            pass
    monkeypatch.undo()
    report = chain.walk(Log(store_dir).scan())
    assert report.ok
    seqs = [line.seq for line in Log(store_dir).scan()]
    assert seqs == list(range(1, len(seqs) + 1))


# -- the same checks on a batch: one pipeline for every append (issue 13) ------


def _batch(n=3):
    return [{"text": f"batch record {i}", "scope": "b"} for i in range(n)]


def _valid_after_reopen(store, store_dir, head_seq):
    """The handle is poisoned; after reopening it the log verifies and the chain continues."""
    assert store.log.unusable
    store.log.reopen()
    report = chain.walk(Log(store_dir).scan())
    assert report.ok, report.findings
    assert report.head_seq == head_seq
    assert store.write("after reopen")["seq"] == head_seq + 1
    assert chain.walk(Log(store_dir).scan()).ok


def test_a_failing_pread_in_a_batch_acknowledges_nothing_and_poisons(store, store_dir, monkeypatch):
    """L4: no proof without a read-back, for every record of a batch."""
    store.write_batch(_batch())

    def eio(fd, n, offset):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "pread", eio)
    with pytest.raises(ReadBackMismatch) as err:
        store.write_batch(_batch(4))
    monkeypatch.undo()
    assert "reading back the batch seq 4..7" in err.value.message
    assert "nothing was acknowledged" in err.value.message
    # The lines reached the file whole and link: after reopening they are records.
    _valid_after_reopen(store, store_dir, head_seq=7)


def test_a_flipped_byte_in_a_batch_read_back_acknowledges_nothing_and_poisons(store, store_dir, monkeypatch):
    store.write_batch(_batch())
    real_pread = os.pread

    def flipped(fd, n, offset):
        data = bytearray(real_pread(fd, n, offset))
        data[len(data) * 2 // 3] ^= 0x01  # inside the batch's third or fourth line
        return bytes(data)

    monkeypatch.setattr(os, "pread", flipped)
    with pytest.raises(ReadBackMismatch) as err:
        store.write_batch(_batch(4))
    monkeypatch.undo()
    assert "differs from what was written" in err.value.message
    assert store.log.unusable == "read-back mismatch"
    _valid_after_reopen(store, store_dir, head_seq=7)


def _rewrite_last_record_in_place(store_dir):
    """Another program replaces the last record by a different one of the same length (size and inode unchanged)."""
    from retained.core import record

    path = store_dir / "log.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    last = Log(store_dir).line_at(sum(map(len, lines[:-1])), len(lines[-1]))
    old = last.record
    text = old["text"][:-1] + ("X" if old["text"][-1] != "X" else "Y")
    content = record.Content({k: v for k, v in old.items() if k in ("kind", "scope", "text")} | {"text": text})
    forged = record.seal(content, seq=old["seq"], prev=old["prev"], ts=old["ts"], client=old["client"]).line
    assert len(forged) == len(lines[-1]) and forged != lines[-1]
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, forged, last.offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    return record.classify(forged[:-1])[3]


@pytest.mark.parametrize("n", [1, 4])
def test_bytes_that_read_back_equal_but_do_not_link_are_refused_and_set_aside(store, store_dir, n):
    """L3 on the bytes read back: the record before the new ones must be the one they link to.

    The handle's cached tail goes stale when another program rewrites the
    last line in place; the new lines read back byte for byte as written,
    yet link to a hash the file no longer holds.
    """
    store.write_batch(_batch())
    forged_hash = _rewrite_last_record_in_place(store_dir)
    size_before = (store_dir / "log.jsonl").stat().st_size
    with pytest.raises(ReadBackMismatch) as err:
        store.write_batch(_batch(n)) if n > 1 else store.write("links to a stale tail")
    assert "does not link" in err.value.message
    assert "nothing was acknowledged" in err.value.message
    assert store.log.unusable == "read-back does not link"
    # The unacknowledged lines were kept aside, the log cut back to what it held.
    assert (store_dir / "log.jsonl").stat().st_size == size_before
    aside = list(store_dir.glob("log.jsonl.torn-*"))
    assert len(aside) == 1 and aside[0].read_bytes().count(b"\n") == n
    _valid_after_reopen(store, store_dir, head_seq=3)
    assert store.get([4])[0]["record"]["prev"] == forged_hash
