"""Faults injected into the writer's system calls: never an acknowledgement, always a valid log after.

Only what a file cannot do on demand is patched (os.write, os.fsync, os.pread);
the log, its file and the next append are real.
"""

from __future__ import annotations

import errno
import os

import pytest

from retained import Store, chain
from retained.errors import ReadBackMismatch, WriteFailed
from retained.log import Log


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
        data = bytearray(real_pread(fd, n, offset))
        if len(data) > 10:
            data[10] ^= 0x20
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
