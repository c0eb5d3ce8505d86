"""Warming up a server ahead of its first calls: the tools registered once, no file of the store touched."""

from __future__ import annotations

import logging
import threading

import anyio

from retained.mcp.server import build_server, warm


def test_tools_registered_from_several_threads_at_once_are_registered_once(tmp_path, caplog):
    """The warm-up thread and the event loop may both ask for the tools: each is added once, and each caller
    finds all six when its call returns (not the ones another thread had added so far)."""
    server = build_server(tmp_path / "store")
    start = threading.Barrier(8)
    seen: list[int] = []

    def register() -> None:
        start.wait(timeout=30)
        server._register_tools()
        seen.append(len(anyio.run(server.list_tools)))

    threads = [threading.Thread(target=register) for _ in range(8)]
    with caplog.at_level(logging.WARNING):
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert seen == [6] * 8
    assert not [r for r in caplog.records if "already exists" in r.getMessage()]
    names = sorted(t.name for t in anyio.run(server.list_tools))
    assert names == sorted(server._params) and len(names) == 6
    assert not (tmp_path / "store").exists()


def test_warm_loads_the_write_path_and_creates_nothing(tmp_path):
    """Store.warm builds the guard and loads the lock and the index; the directory stays absent."""
    server = build_server(tmp_path / "store")
    warm(server)
    store = server.memory._store
    assert store is not None and store._guard is not None
    assert not (tmp_path / "store").exists()
    proof = store.write("written after warming up")
    assert proof["seq"] == 1 and (tmp_path / "store" / "log.jsonl").exists()
    server.memory.close()


def test_warm_on_a_store_that_is_a_file_raises_nothing_and_writes_nothing(tmp_path):
    """The first call reports an unusable store; the warm-up only stops."""
    (tmp_path / "store").write_bytes(b"not a directory\n")
    server = build_server(tmp_path / "store")
    warm(server)
    assert server.memory._store is None
    assert (tmp_path / "store").read_bytes() == b"not a directory\n"
