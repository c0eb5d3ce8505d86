"""capture/ops.bin: the log's client_op_ids without a scan of the log, rebuilt whenever it cannot be trusted."""

from __future__ import annotations

import os
from pathlib import Path

from retained import Store
from retained.capture import ops


def _store(path: Path, n: int) -> Store:
    store = Store(path)
    store.write_batch([{"text": f"turn {i}", "client_op_id": f"op-{i}"} for i in range(n)])
    return store


def test_a_few_new_lines_are_read_and_not_written_into_the_map(tmp_path: Path):
    with _store(tmp_path / "s", 5) as store:
        known, end = ops.open_map(store.directory, store.log)
        assert known.get("op-4")["seq"] == 5 and end == store.log.size()
        assert (store.directory / "capture" / ops.OPS_NAME).stat().st_size == 0


def test_the_map_answers_for_every_id_and_extends_itself_as_the_log_grows(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(ops, "LOOSE_BYTES_MAX", 0)
    with _store(tmp_path / "s", 50) as store:
        known, end = ops.open_map(store.directory, store.log)
        assert end == store.log.size()
        assert known.get("op-17")["seq"] == 18 and known.get("op-nope") is None and "op-3" in known
        store.write("later", client_op_id="op-later")
        known, end = ops.open_map(store.directory, store.log)
        assert known.get("op-later")["seq"] == 51 and end == store.log.size()
        size = (store.directory / "capture" / ops.OPS_NAME).stat().st_size
        assert size == (51 + 2) * ops.ENTRY_BYTES  # 51 entries and one mark per catch-up


def test_a_cut_map_or_a_replaced_log_is_rebuilt_and_a_stale_entry_is_never_a_match(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(ops, "LOOSE_BYTES_MAX", 0)
    with _store(tmp_path / "s", 20) as store:
        ops.open_map(store.directory, store.log)
        path = store.directory / "capture" / ops.OPS_NAME
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size - 5)  # a crash mid-write
        known, _ = ops.open_map(store.directory, store.log)
        assert known.get("op-19")["seq"] == 20
    # Another log in the same place (a new inode): entries pointing into the old one must not count.
    os.replace(tmp_path / "s" / "log.jsonl", tmp_path / "old.jsonl")
    with Store(tmp_path / "s") as store:
        store.write_batch([{"text": f"other {i}", "client_op_id": f"new-{i}"} for i in range(3)])
        known, _ = ops.open_map(store.directory, store.log)
        assert known.get("op-5") is None and known.get("new-2")["seq"] == 3
