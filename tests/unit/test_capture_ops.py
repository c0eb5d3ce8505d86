"""capture/ops.sqlite3: the log's client_op_ids without a scan of the log, rebuilt whenever it cannot be trusted."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from retained import Store
from retained.capture import ops
from retained.core import record


def _store(path: Path, n: int) -> Store:
    store = Store(path)
    store.write_batch([{"text": f"turn {i}", "client_op_id": f"op-{i}"} for i in range(n)])
    return store


def _table(store: Store) -> tuple[int, tuple[int, int] | None]:
    """(entries, (inode, covers) or None) of the map on disk, read with a connection of its own."""
    db = sqlite3.connect(store.directory / "capture" / ops.OPS_NAME)
    try:
        count = db.execute("SELECT count(*) FROM ops").fetchone()[0]
        mark = db.execute("SELECT ino, covers FROM mark").fetchone()
    finally:
        db.close()
    return count, mark


def test_a_few_new_lines_are_read_and_not_written_into_the_map(tmp_path: Path):
    with _store(tmp_path / "s", 5) as store:
        known, end = ops.open_map(store.directory, store.log)
        assert known.get("op-4")["seq"] == 5 and end == store.log.size()
        known.close()
        assert _table(store) == (0, None)
        assert (store.directory / "capture" / ops.OPS_NAME).stat().st_mode & 0o777 == 0o600


def test_the_map_answers_for_every_id_and_extends_itself_as_the_log_grows(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(ops, "LOOSE_BYTES_MAX", 0)
    with _store(tmp_path / "s", 50) as store:
        known, end = ops.open_map(store.directory, store.log)
        assert end == store.log.size()
        assert known.get("op-17")["seq"] == 18 and known.get("op-nope") is None and "op-3" in known
        known.close()
        store.write("later", client_op_id="op-later")
        known, end = ops.open_map(store.directory, store.log)
        assert known.get("op-later")["seq"] == 51 and end == store.log.size()
        known.close()
        assert _table(store) == (51, (os.stat(store.log.path).st_ino, store.log.size()))


def test_a_damaged_map_or_a_replaced_log_is_rebuilt_and_a_stale_entry_is_never_a_match(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(ops, "LOOSE_BYTES_MAX", 0)
    with _store(tmp_path / "s", 20) as store:
        ops.open_map(store.directory, store.log)[0].close()
        path = store.directory / "capture" / ops.OPS_NAME
        for companion in (Path(f"{path}-wal"), Path(f"{path}-shm")):
            companion.unlink(missing_ok=True)
        path.write_bytes(b"not a database, a crash's leftovers" * 100)
        known, _ = ops.open_map(store.directory, store.log)
        assert known.get("op-19")["seq"] == 20
        known.close()
        assert _table(store)[0] == 20
    # Another log in the same place (a new inode): entries pointing into the old one must not count.
    os.replace(tmp_path / "s" / "log.jsonl", tmp_path / "old.jsonl")
    with Store(tmp_path / "s") as store:
        store.write_batch([{"text": f"other {i}", "client_op_id": f"new-{i}"} for i in range(3)])
        known, _ = ops.open_map(store.directory, store.log)
        assert known.get("op-5") is None and known.get("new-2")["seq"] == 3
        known.close()
        assert _table(store)[0] == 3


def test_a_map_another_capture_is_writing_leaves_the_rest_to_the_log_and_a_repeat_is_still_one_record(
        tmp_path: Path, monkeypatch):
    monkeypatch.setattr(ops, "LOOSE_BYTES_MAX", 0)
    with _store(tmp_path / "s", 10) as store:
        ops.open_map(store.directory, store.log)[0].close()
        covered = store.log.size()
        store.write_batch([{"text": f"more {i}", "client_op_id": f"more-{i}"} for i in range(5)])
        other = sqlite3.connect(store.directory / "capture" / ops.OPS_NAME, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another capture's catch-up, under way
        try:
            known, end = ops.open_map(store.directory, store.log)
            assert end == covered < store.log.size()  # the map answers only up to its mark
            store.log.assume_ops(known, end)
            proofs = store.log.append([record.make_content(text="more 3, delivered again", client_op_id="more-3")],
                                      client={"name": "t"}, op_reuse="duplicate")
            assert proofs[0]["duplicate"] and proofs[0]["seq"] == 14
            known.close()
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert _table(store) == (10, (os.stat(store.log.path).st_ino, covered))


def test_an_earlier_release_map_file_is_removed_when_the_map_is_built(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(ops, "LOOSE_BYTES_MAX", 0)
    with _store(tmp_path / "s", 3) as store:
        old = store.directory / "capture" / "ops.bin"
        old.parent.mkdir(mode=0o700)
        old.write_bytes(b"\0" * 28)
        ops.open_map(store.directory, store.log)[0].close()
        assert not old.exists()
