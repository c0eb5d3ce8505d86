"""The append path and the readers, on real files (L1-L4)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest

from retained import Store
from retained.core import chain, record
from retained.core.lock import StoreLock
from retained.core.log import Log
from retained.errors import LockTimeout, NotFound, OpIdConflict

CLIENT = {"name": "test", "version": "0"}


def _append(log: Log, text: str, **kw):
    return log.append([record.make_content(text=text, **kw)], client=CLIENT)[0]


def test_proof_matches_the_bytes_in_the_file(store_dir):
    """L4: the proof names bytes that are really there."""
    log = Log(store_dir)
    proofs = [_append(log, f"note {i}") for i in range(5)]
    data = (store_dir / "log.jsonl").read_bytes()
    for i, p in enumerate(proofs, start=1):
        line = data[p["offset"] : p["offset"] + p["length"]]
        assert line.endswith(b"\n")
        status, obj, seq, h, _ = record.classify(line[:-1])
        assert (status, seq, h, obj["prev"]) == (record.RECORD, i, p["hash"], p["prev"])
    assert proofs[-1]["offset"] + proofs[-1]["length"] == len(data)


def test_seq_and_prev_link_across_handles(store_dir):
    """L2/L3: a second handle (as another process would) continues the chain."""
    a, b = Log(store_dir), Log(store_dir)
    p1 = _append(a, "one")
    p2 = _append(b, "two")
    p3 = _append(a, "three")
    assert [p1["seq"], p2["seq"], p3["seq"]] == [1, 2, 3]
    assert p2["prev"] == p1["hash"] and p3["prev"] == p2["hash"]
    assert chain.walk(a.scan()).ok


def test_store_directory_is_0700_and_files_0600(store_dir):
    Store(store_dir).write("x")
    assert stat.S_IMODE(store_dir.stat().st_mode) == 0o700
    for name in ("log.jsonl", "log.lock"):
        assert stat.S_IMODE((store_dir / name).stat().st_mode) == 0o600


def test_tail_of_a_1_mib_last_line_is_found_without_a_forward_scan(store_dir):
    log = Log(store_dir)
    _append(log, "small")
    big = _append(log, "x" * (1024 * 1024))
    fresh = Log(store_dir)
    seq, h, end = fresh.tail()
    assert (seq, h) == (2, big["hash"])
    assert end == big["offset"] + big["length"]
    assert _append(fresh, "after")["prev"] == big["hash"]


def test_foreign_line_is_kept_reported_and_skipped_by_the_chain(store_dir):
    log = Log(store_dir)
    _append(log, "one")
    with open(store_dir / "log.jsonl", "ab") as f:
        f.write(b'{"note":"appended by another program"}\n')
    p = _append(log, "two")
    assert p["seq"] == 2
    report = chain.walk(log.scan())
    assert report.ok and report.foreign == [p["offset"] - len(b'{"note":"appended by another program"}\n')]
    assert b"another program" in (store_dir / "log.jsonl").read_bytes()


def test_damaged_last_line_is_kept_and_the_next_record_links_past_it(store_dir):
    log = Log(store_dir)
    p1 = _append(log, "one")
    _append(log, "two")
    path = store_dir / "log.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"text":"two"', b'"text":"twp"'))  # one flipped byte in seq 2
    p3 = Log(store_dir)
    proof = _append(p3, "three")
    # seq 2 is damaged, so the chain continues from seq 1 (its last valid record).
    assert proof["seq"] == 2 and proof["prev"] == p1["hash"]
    report = chain.walk(p3.scan())
    assert [f["kind"] for f in report.findings] == ["hash_mismatch"]
    assert len(path.read_bytes().splitlines()) == 3


def test_unterminated_tail_is_quarantined_then_truncated(store_dir):
    """recovery T2 on a real file: bytes kept aside, fsynced, log cut at the last newline."""
    log = Log(store_dir)
    p1 = _append(log, "one")
    path = store_dir / "log.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"seq":2,"text":"half a rec')
    proof = _append(Log(store_dir), "two")
    assert proof["seq"] == 2 and proof["offset"] == p1["length"]
    q = store_dir / f"log.jsonl.torn-{p1['length']}"
    assert q.read_bytes() == b'{"seq":2,"text":"half a rec'
    assert stat.S_IMODE(q.stat().st_mode) == 0o600
    assert chain.walk(Log(store_dir).scan()).ok
    assert Log(store_dir).quarantined()[0]["bytes"] == len(b'{"seq":2,"text":"half a rec')


def test_client_op_id_retry_returns_the_first_proof_and_appends_nothing(store_dir):
    log = Log(store_dir)
    first = _append(log, "once", client_op_id="op-1")
    _append(log, "other")
    size = (store_dir / "log.jsonl").stat().st_size
    again = _append(Log(store_dir), "once", client_op_id="op-1")
    assert again["duplicate"] is True and first["duplicate"] is False
    assert {k: again[k] for k in ("seq", "hash", "offset", "length")} == {k: first[k] for k in ("seq", "hash", "offset", "length")}
    assert (store_dir / "log.jsonl").stat().st_size == size


def test_client_op_id_lookup_finds_every_earlier_id_among_records_without_one(store_dir):
    log = Log(store_dir)
    firsts = {}
    for i in range(60):
        if i % 7 == 0:
            firsts[f"op-{i}"] = _append(log, "retry", client_op_id=f"op-{i}")
        else:
            # Lines that mention the field without having it must not confuse the lookup.
            _append(log, f'text says "client_op_id": op-{i}', fields={"meta": {"client_op_id": f"op-{i}"}})
    with open(store_dir / "log.jsonl", "ab") as f:
        f.write(b'{"seq":61,"client_op_id":"op-torn"')  # a torn tail; the next append sets it aside
    fresh = Log(store_dir)
    for op, first in firsts.items():
        again = _append(fresh, "retry", client_op_id=op)
        assert again["duplicate"] and again["seq"] == first["seq"] and again["hash"] == first["hash"], op
    for i in (1, 2, 59):
        assert _append(fresh, "new", client_op_id=f"op-{i}")["duplicate"] is False  # only in a nested field before
    assert _append(fresh, "new", client_op_id="op-torn")["duplicate"] is False
    assert chain.walk(Log(store_dir).scan()).ok


def test_client_op_id_is_recognised_by_another_process(store_dir):
    Store(store_dir).write("from the parent", client_op_id="shared-op")
    code = textwrap.dedent(
        f"""
        import json
        from retained import Store
        print(json.dumps(Store({str(store_dir)!r}).write("from the parent", client_op_id="shared-op")))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert '"duplicate": true' in out.stdout
    assert len((store_dir / "log.jsonl").read_bytes().splitlines()) == 1


def test_supersedes_a_seq_that_does_not_exist_is_refused(store_dir):
    log = Log(store_dir)
    _append(log, "one")
    with pytest.raises(NotFound):
        _append(log, "two", supersedes=[5])
    assert len((store_dir / "log.jsonl").read_bytes().splitlines()) == 1


def test_a_held_lock_gives_store_busy_and_writes_nothing(store_dir):
    log = Log(store_dir, lock_wait_s=0.2)
    _append(log, "one")
    size = (store_dir / "log.jsonl").stat().st_size
    with StoreLock(store_dir / "log.lock"):
        with pytest.raises(LockTimeout) as err:
            _append(Log(store_dir, lock_wait_s=0.2), "blocked")
    assert err.value.code == "store_busy"
    assert (store_dir / "log.jsonl").stat().st_size == size


def test_scan_and_scan_reverse_agree_and_carry_offsets(store_dir):
    log = Log(store_dir)
    for i in range(50):
        _append(log, f"n{i}" * (1 + i * 97 % 3000))
    forward = [(x.offset, x.seq) for x in log.scan()]
    backward = [(x.offset, x.seq) for x in log.scan_reverse()]
    assert forward == list(reversed(backward))
    assert [s for _, s in forward] == list(range(1, 51))


def test_scan_stops_at_the_size_it_started_with(store_dir):
    log = Log(store_dir)
    for i in range(3):
        _append(log, str(i))
    it = log.scan()
    first = next(it)
    _append(log, "appended during the scan")
    rest = list(it)
    assert first.seq == 1 and [x.seq for x in rest] == [2, 3]


def test_a_log_replaced_on_disk_is_reopened_before_the_next_append(store_dir):
    """A redaction renames a new file in; an open descriptor must not write to the old one."""
    log = Log(store_dir)
    _append(log, "one")
    path = store_dir / "log.jsonl"
    replacement = store_dir / "new.jsonl"
    replacement.write_bytes(path.read_bytes())
    os.replace(replacement, path)
    _append(log, "two")
    assert len(path.read_bytes().splitlines()) == 2


def test_batch_append_chains_reads_back_and_dedupes(store_dir):
    """One lock, one fsync: every record still chained (L3) and read back (L4)."""
    store = Store(store_dir)
    store.write("batch 0", client_op_id="op-0")
    items = [{"text": f"batch {i % 50}", "client_op_id": f"op-{i % 50}"} for i in range(100)]
    proofs = store.write_batch(items)
    fresh = [p for p in proofs if not p["duplicate"]]
    assert [p["seq"] for p in fresh] == list(range(2, 51))
    assert sum(p["duplicate"] for p in proofs) == 51
    report = chain.walk(Log(store_dir).scan())
    assert report.ok and report.head_seq == 50
    data = (store_dir / "log.jsonl").read_bytes()
    for p in fresh:
        assert record.classify(data[p["offset"] : p["offset"] + p["length"] - 1])[2] == p["seq"]


def test_batch_with_one_bad_item_writes_nothing(store_dir):
    store = Store(store_dir)
    store.write("before")
    before = (store_dir / "log.jsonl").read_bytes()
    with pytest.raises(Exception) as err:
        store.write_batch([{"text": "ok"}, {"text": "bad", "fields": {"hash": "x"}}])
    assert "batch item 1" in str(err.value)
    assert (store_dir / "log.jsonl").read_bytes() == before


def test_issue_29_deleting_log_lock_while_a_writer_holds_it_does_not_let_a_second_writer_in(store_dir):
    """Mutual exclusion does not depend on a file anyone can delete (L2, L3)."""
    holder = Log(store_dir)
    _append(holder, "one")
    size = (store_dir / "log.jsonl").stat().st_size
    with holder.exclusive():
        (store_dir / "log.lock").unlink()
        with pytest.raises(LockTimeout):
            _append(Log(store_dir, lock_wait_s=0.2), "let in")
    assert (store_dir / "log.jsonl").stat().st_size == size
    # The lock file comes back: the next writers take turns on it again.
    assert _append(Log(store_dir), "two")["seq"] == 2
    assert _append(holder, "three")["seq"] == 3
    assert (store_dir / "log.lock").exists()
    assert chain.walk(holder.scan()).ok


def test_issue_29_a_landed_line_that_does_not_link_is_never_the_parent_of_the_next_record(store_dir):
    """A second line claiming seq 2 (a writer that raced and was never acknowledged) is set aside, not chained onto (L3)."""
    log = Log(store_dir)
    p1 = _append(log, "one")
    p2 = _append(log, "two")
    stray = record.seal(record.make_content(text="raced"), seq=2, prev=p1["hash"], ts=p2["ts"], client=CLIENT)
    path = store_dir / "log.jsonl"
    with open(path, "ab") as f:
        f.write(stray.line)
    proof = _append(Log(store_dir), "three")
    assert proof["seq"] == 3 and proof["prev"] == p2["hash"]
    assert chain.walk(Log(store_dir).scan()).ok
    aside = store_dir / f"log.jsonl.torn-{p2['offset'] + p2['length']}"
    assert aside.read_bytes() == stray.line


def test_issue_29_a_reused_client_op_id_with_other_content_is_refused_naming_the_first_record(store_dir):
    log = Log(store_dir)
    first = _append(log, "deploy to staging", client_op_id="op-1", scope="a")
    size = (store_dir / "log.jsonl").stat().st_size
    for other in ({"text": "deploy to production"}, {"text": "deploy to staging", "scope": "b"},
                  {"text": "deploy to staging", "scope": "a", "kind": "fact"}):
        with pytest.raises(OpIdConflict) as err:
            log.append([record.make_content(client_op_id="op-1", **{"scope": None, **other})], client=CLIENT)
        assert err.value.code == "conflict" and err.value.seq == first["seq"] and "seq 1" in err.value.message
    # Another process, and a conflict inside one batch, alike.
    with pytest.raises(OpIdConflict):
        _append(Log(store_dir), "something else", client_op_id="op-1")
    with pytest.raises(OpIdConflict):
        log.append([record.make_content(text="x", client_op_id="op-2"), record.make_content(text="y", client_op_id="op-2")],
                   client=CLIENT)
    assert (store_dir / "log.jsonl").stat().st_size == size
    # The same content again: the first proof, as before.
    again = _append(Log(store_dir), "deploy to staging", client_op_id="op-1", scope="a")
    assert again["duplicate"] and again["seq"] == first["seq"] and again["hash"] == first["hash"]


def test_assume_ops_takes_a_callers_map_and_still_scans_what_the_log_gained_after_it(tmp_path):
    """A caller's complete map up to a byte replaces the per-process scan; lines after it are still read (L4)."""
    from retained.core import record as rec

    def content(text, op):
        return rec.make_content(text=text, client_op_id=op)

    first = Log(tmp_path)
    a = first.append([content("a", "op-a")], client={"name": "t"})[0]
    end = first.size()
    other = Log(tmp_path)
    b = other.append([content("b", "op-b")], client={"name": "t"})[0]  # after the map's end
    fresh = Log(tmp_path)
    proof_a = {k: a[k] for k in ("seq", "hash", "prev", "offset", "length", "ts")}
    # "op-z" is in the caller's map only: the log must answer from the map, not from a scan of its own.
    fresh.assume_ops({"op-a": proof_a, "op-z": proof_a}, end)
    again = fresh.append([content("a", "op-a"), content("b", "op-b"), content("c", "op-c"), content("z", "op-z")],
                         client={"name": "t"}, op_reuse="duplicate")
    assert [p["duplicate"] for p in again] == [True, True, False, True]
    assert (again[0]["seq"], again[1]["seq"], again[2]["seq"]) == (a["seq"], b["seq"], b["seq"] + 1)


def test_a_long_last_line_changed_in_place_is_not_taken_for_the_tail_another_process_published(store_dir):
    # A long last line is recognised by the digest of its bytes published in log.lock: changed in place
    # (same inode, same size), the next process reads the file and links past it, as for a short one.
    log = Log(store_dir)
    p1 = _append(log, "one")
    _append(log, "two " + "x" * 100_000)
    log.close()
    path = store_dir / "log.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"text":"two ', b'"text":"twp '))
    fresh = Log(store_dir)
    proof = _append(fresh, "three")
    assert proof["seq"] == 2 and proof["prev"] == p1["hash"]
    assert [f["kind"] for f in chain.walk(fresh.scan()).findings] == ["hash_mismatch"]
    # Untouched, the published tail is taken as it is and the chain goes on from it.
    again = Log(store_dir)
    long = _append(again, "four " + "y" * 100_000)
    again.close()
    last = Log(store_dir)
    assert _append(last, "five")["prev"] == long["hash"]
    assert [f["kind"] for f in chain.walk(last.scan()).findings] == ["hash_mismatch"]  # still only the one changed
