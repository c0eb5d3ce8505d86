"""Group commit: threads sharing one Store share writes and fsyncs, and each gets its own proof (L3, L4).

Only the count of fsync calls is observed (the real fsync still runs); the
log, its lock and its file are real.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from retained import Store
from retained.core import chain, record
from retained.core.log import Log
from retained.errors import RecordTooLarge


def _counting_fsync(monkeypatch):
    calls = {"n": 0}
    real = os.fsync

    def counted(fd):
        calls["n"] += 1
        return real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    return calls


def _write_concurrently(store, threads, per_thread):
    proofs, errors = [], []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def work(t):
        start.wait(timeout=30)
        for i in range(per_thread):
            try:
                p = store.write(f"thread {t} record {i}", scope=f"t{t}")
            except Exception as exc:  # noqa: BLE001 - collected and asserted on below
                with lock:
                    errors.append(exc)
                continue
            with lock:
                proofs.append(p)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    return proofs, errors


@pytest.mark.parametrize("group_commit", [True, False])
def test_threads_on_one_store_get_their_own_proofs_in_one_chain(store_dir, monkeypatch, group_commit):
    """Every acknowledged record is in the file byte-exact at its proof's offset; the chain verifies."""
    store = Store(store_dir, group_commit=group_commit)
    store.write("first")
    calls = _counting_fsync(monkeypatch)
    proofs, errors = _write_concurrently(store, threads=8, per_thread=60)
    monkeypatch.undo()
    assert errors == []
    assert sorted(p["seq"] for p in proofs) == list(range(2, 2 + 8 * 60))
    data = (store_dir / "log.jsonl").read_bytes()
    for p in proofs:
        line = data[p["offset"] : p["offset"] + p["length"]]
        status, _, seq, h, _ = record.classify(line[:-1])
        assert (status, seq, h) == (record.RECORD, p["seq"], p["hash"])
    report = chain.walk(Log(store_dir).scan())
    assert report.ok and report.head_seq == 1 + 8 * 60
    if group_commit:
        # Writers that arrived during an fsync shared the next one.
        assert calls["n"] < 8 * 60
    else:
        assert calls["n"] == 8 * 60


def test_a_refused_request_in_a_group_takes_no_seq_and_the_others_land(store_dir, monkeypatch):
    """One caller's record refused while sealing (its line is over the limit) fails that caller alone.

    Its fields pass the store's size test; only the sealed line, with the
    chain fields, is over: so the refusal happens inside the group.
    """
    store = Store(store_dir, record_bytes_max=2000)
    store.write("first")
    holder = Log(store_dir)
    results: dict[str, object] = {}

    def call(name, **kw):
        try:
            results[name] = store.write(name, **kw)
        except Exception as exc:  # noqa: BLE001 - asserted on below
            results[name] = exc

    calls = _counting_fsync(monkeypatch)
    with holder.exclusive():
        # The leader takes what is queued, then waits for the lock held here;
        # the two that arrive meanwhile queue behind it and form the next group.
        leader = threading.Thread(target=call, args=("a",))
        leader.start()
        deadline = time.monotonic() + 10
        while not store.log._leading and time.monotonic() < deadline:  # noqa: SLF001 - test observes the queue
            time.sleep(0.001)
        others = [
            threading.Thread(target=call, args=("b" + "x" * 1900,)),
            threading.Thread(target=call, args=("c",), kwargs={"supersedes": [1]}),
        ]
        for t in others:
            t.start()
        while len(store.log._queue) < 2 and time.monotonic() < deadline:  # noqa: SLF001
            time.sleep(0.001)
        assert len(store.log._queue) == 2  # noqa: SLF001
    leader.join(timeout=30)
    for t in others:
        t.join(timeout=30)
    monkeypatch.undo()
    refused = [k[:1] for k, v in results.items() if isinstance(v, RecordTooLarge)]
    landed = sorted(v["seq"] for v in results.values() if isinstance(v, dict))
    assert refused == ["b"] and landed == [2, 3]
    assert calls["n"] == 2  # one fsync for the leader alone, one for the group of two
    report = chain.walk(Log(store_dir).scan())
    assert report.ok and report.head_seq == 3



class _Interrupted(Exception):
    pass


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs signal.pthread_kill (POSIX)")
def test_a_caller_interrupted_while_waiting_raises_once_its_group_is_written_and_wakes_the_next(store_dir):
    """A signal handler raising in the main thread while it waits in a group (Ctrl-C in a server).

    Each caller woken wakes the next one of its group, so a caller that left
    on the interrupt would leave the one queued behind it waiting for ever:
    it waits for its group, wakes the next, then raises.
    """
    store = Store(store_dir)
    store.write("first")
    holder = Log(store_dir)
    main = threading.get_ident()
    results: dict[str, object] = {}
    handled, let_go, held = threading.Event(), threading.Event(), threading.Event()

    def call(name):
        try:
            results[name] = store.write(name)
        except Exception as exc:  # noqa: BLE001 - asserted on below
            results[name] = exc

    def hold():
        with holder.exclusive():
            held.set()
            let_go.wait(30)

    def handler(signum, frame):
        handled.set()
        raise _Interrupted("interrupted while waiting")

    def queued(n):
        deadline = time.monotonic() + 30
        while len(store.log._queue) < n and time.monotonic() < deadline:  # noqa: SLF001 - test observes the queue
            time.sleep(0.001)
        return len(store.log._queue) >= n  # noqa: SLF001

    behind = threading.Thread(target=call, args=("c",))

    def interrupt_main():
        # The leader ("a") waits for the lock held by hold(); main ("b") and then "c" queue behind it, one group.
        if queued(1):
            behind.start()
            if queued(2):
                signal.pthread_kill(main, signal.SIGUSR1)
                handled.wait(30)  # the handler ran in main, interrupting its wait
        let_go.set()

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        holding = threading.Thread(target=hold)
        holding.start()
        assert held.wait(30)
        leader = threading.Thread(target=call, args=("a",))
        leader.start()
        deadline = time.monotonic() + 30
        while not store.log._leading and time.monotonic() < deadline:  # noqa: SLF001
            time.sleep(0.001)
        helper = threading.Thread(target=interrupt_main)
        helper.start()
        with pytest.raises(_Interrupted):
            store.write("b")
    finally:
        let_go.set()
        signal.signal(signal.SIGUSR1, previous)
    for t in (holding, leader, helper, behind):
        t.join(timeout=30)
        assert not t.is_alive()
    assert handled.is_set()
    assert results["a"]["seq"] == 2 and results["c"]["seq"] == 4  # type: ignore[index]
    report = chain.walk(Log(store_dir).scan())
    assert report.ok and report.head_seq == 4
    assert [line.record["text"] for line in Log(store_dir).scan()][1:] == ["a", "b", "c"]
