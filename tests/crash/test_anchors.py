"""Anchors catch a log cut back or re-chained, and nothing but an explicit acceptance clears that (issue 14).

Each test damages a real store the way the issue describes (an older copy of
log.jsonl put back, a record edited and every hash after it recomputed) and
checks what verify reports, through the library and the command line.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import orjson
import pytest

from retained import Store
from retained.core import anchors, chain, record
from retained.core.log import Log
from retained.errors import InvalidRecord

from ..conftest import run_cli


def _kinds(report):
    return [f["kind"] for f in report["findings"]]


def _anchor_kinds(report):
    """The anchor findings (an index built from the longer log also says so, until it is rebuilt)."""
    return [k for k in _kinds(report) if not k.startswith("index_")]


def _rechain(log: Path, seq: int, text: str) -> None:
    """Edit record ``seq``'s text and recompute every hash from it on: a valid chain that is not the one written."""
    out, prev = [], record.ZERO_HASH
    for raw in log.read_bytes().splitlines():
        obj = orjson.loads(raw)
        if obj["seq"] == seq:
            obj["text"] = text
        obj["prev"] = prev
        obj["hash"] = record.chain_hash(record.content_digest(obj), prev, obj["seq"])
        prev = obj["hash"]
        out.append(record.canonical(obj) + b"\n")
    log.write_bytes(b"".join(out))


def _anchor_lines(anchor_dir: Path) -> list[dict]:
    (path,) = anchor_dir.glob("*.jsonl")
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_rollback_after_a_verify_is_reported_with_the_anchor_time_and_survives_every_rebuild(store_dir, anchor_dir, tmp_path):
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        for i in range(5):
            store.write(f"early {i}")
        old = tmp_path / "old.jsonl"
        shutil.copyfile(store_dir / "log.jsonl", old)
        for i in range(5):
            store.write(f"late {i}")
        first = store.verify()
        assert first["ok"] and first["anchors"]["recorded"]
        anchored_at = _anchor_lines(anchor_dir)[-1]["time"]
    shutil.copyfile(old, store_dir / "log.jsonl")  # the rollback
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        report = store.verify()
        # The index, built from the longer log, says so too, until a rebuild.
        assert _kinds(report) == ["index_log_replaced", "rolled_back"]
        finding = report["findings"][1]
        assert finding["seq"] == 10 and finding["observed"] == 5
        assert anchored_at in finding["message"] and finding["anchor"]["time"] == anchored_at
        # Neither the automatic rebuild of a read nor an explicit one clears it.
        store.search("early")
        store.rebuild()
        assert _kinds(store.verify()) == ["rolled_back"]
        assert store.anchor()["not_on_chain"] == 1
    assert run_cli("verify", "--dir", str(store_dir)).returncode == 1
    assert run_cli("rebuild", "--dir", str(store_dir)).returncode == 0
    assert run_cli("verify", "--dir", str(store_dir)).returncode == 1


def test_issue_14_a_search_after_a_rollback_keeps_the_index_evidence_for_verify(store_dir, anchor_dir, tmp_path):
    """The issue's case: no verify or brief ran, only the index had seen the lost records."""
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        store.write("one")
        store.search("one")
        shutil.copyfile(store_dir / "log.jsonl", tmp_path / "old.jsonl")
        store.write("two")
        store.write("three")
        store.search("two")  # the index reads to seq 3
    # Only the process's first write recorded its head (routine anchors: every 1000 records or 300 s after it).
    (anchored,) = anchor_dir.glob("*.jsonl")
    assert [json.loads(line)["seq"] for line in anchored.read_text(encoding="utf-8").splitlines()[1:]] == [1]
    shutil.copyfile(tmp_path / "old.jsonl", store_dir / "log.jsonl")
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        store.search("one")
        assert store.index.last_catch_up["state"] == "rebuilt"
        report = store.verify()
    assert _kinds(report) == ["rolled_back"]
    assert report["findings"][0]["seq"] == 3 and report["findings"][0]["anchor"]["source"] == "index"


def test_a_rechained_log_passes_the_chain_walk_but_not_the_anchors(store_dir, anchor_dir):
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        for i in range(8):
            store.write(f"fact {i}")
        assert store.verify()["ok"]
        saved = store.head()
    _rechain(store_dir / "log.jsonl", 3, "fact 3, quietly changed")
    assert chain.walk(Log(store_dir).scan()).ok  # the chain alone cannot tell
    (store_dir / "index.sqlite3").unlink()  # nor can a fresh index
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        report = store.verify()
    assert _kinds(report) == ["anchor_mismatch"]
    assert report["findings"][0]["seq"] == 8 and report["findings"][0]["expected"] == saved["hash"]
    # A head saved elsewhere catches it with anchoring off too.
    with Store(store_dir) as bare:
        assert bare.verify()["ok"]  # the limit anchors exist for
        given = bare.verify(anchor=f"{saved['seq']}:{saved['hash']}")
    assert _kinds(given) == ["anchor_mismatch"] and "the anchor given" in given["findings"][0]["message"]


def test_a_rechain_above_the_newest_anchor_is_not_caught(store_dir, anchor_dir):
    """What docs/anchors.md says anchors cannot do, held to it."""
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        for i in range(4):
            store.write(f"fact {i}")
        store.verify()
        for i in range(4):
            store.write(f"later {i}")
    _rechain(store_dir / "log.jsonl", 6, "changed after the last anchor")
    (store_dir / "index.sqlite3").unlink()
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        assert store.verify()["ok"]


def test_accepting_the_new_history_is_a_record_and_clears_the_findings(store_dir, anchor_dir, tmp_path):
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        store.write("a")
        shutil.copyfile(store_dir / "log.jsonl", tmp_path / "old.jsonl")
        store.write("b")
        store.verify()
    shutil.copyfile(tmp_path / "old.jsonl", store_dir / "log.jsonl")
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        assert store.anchor(accept=False)["accepted"] is None
        result = store.anchor(accept=True, reason="restored the copy on purpose")
        proof = result["accepted"]["record"]
        assert result["accepted"]["count"] == 1 and proof["seq"] == 2
        (entry,) = store.get([2])
        rec = entry["record"]
        assert rec["kind"] == "anchor_accept" and rec["reason"] == "restored the copy on purpose"
        assert rec["accepted"][0]["seq"] == 2 and rec["accepted"][0]["finding"] == "rolled_back"
        after = store.verify()
        assert after["ok"], after["findings"]
        again = store.anchor(accept=True)
        assert again["accepted"]["record"] is None  # nothing left to accept: nothing written
        assert store.head()["seq"] == 2
    assert chain.walk(Log(store_dir).scan()).ok
    # After the clean verify the file holds the header and the head verify judged.
    lines = _anchor_lines(anchor_dir)
    assert [x.get("seq") for x in lines] == [None, 2]


def test_nobody_but_the_store_writes_an_acceptance_record(store):
    with pytest.raises(InvalidRecord):
        store.write("looks official", kind="anchor_accept")


def test_deleting_the_store_id_does_not_orphan_the_anchors(store_dir, anchor_dir, tmp_path):
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        store.write("a")
        shutil.copyfile(store_dir / "log.jsonl", tmp_path / "old.jsonl")
        store.write("b")
        first_id = store.head()["store_id"]
        store.verify()
    shutil.copyfile(tmp_path / "old.jsonl", store_dir / "log.jsonl")
    (store_dir / anchors.ID_NAME).unlink()
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        report = store.verify()
        assert store.head()["store_id"] != first_id
    assert _anchor_kinds(report) == ["rolled_back"]
    (finding,) = [f for f in report["findings"] if f["kind"] == "rolled_back"]
    assert finding["anchor"]["file"].endswith(f"{first_id}.jsonl")


def test_a_moved_store_keeps_its_anchors(store_dir, anchor_dir, tmp_path):
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        store.write("a")
        store.write("b")
        store.verify()
    moved = tmp_path / "moved"
    os.rename(store_dir, moved)
    with open(moved / "log.jsonl", "r+b") as f:
        first = f.readline()
        f.truncate(len(first))
    with Store(moved, anchor_dir=anchor_dir) as store:
        assert _anchor_kinds(store.verify()) == ["rolled_back"]


def test_the_brief_records_the_head_once_per_head(store_dir, anchor_dir):
    with Store(store_dir) as store:
        store.write("a")
        store.write("b")
    env = {**os.environ, "RETAINED_DIR": str(store_dir), "RETAINED_ANCHOR_DIR": str(anchor_dir)}
    import subprocess
    import sys

    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "retained", "--brief"], env=env, capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    lines = _anchor_lines(anchor_dir)
    assert lines[0]["store"] == str(store_dir.resolve())
    assert [(x["seq"], x["source"]) for x in lines[1:]] == [(2, "brief")]
    with open(store_dir / "log.jsonl", "r+b") as f:
        f.truncate(len(f.readline()))
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        report = store.verify()
    assert _kinds(report) == ["rolled_back"] and "(by brief)" in report["findings"][0]["message"]


def test_the_default_anchor_directory_is_under_xdg_state_home(store_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("RETAINED_ANCHOR_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert run_cli("write", "x", "--dir", str(store_dir)).returncode == 0
    proc = run_cli("head", "--json", "--dir", str(store_dir))
    head = json.loads(proc.stdout)
    assert head["anchor_file"] == str(tmp_path / "state" / "retained" / f"{head['store_id']}.jsonl")
    assert run_cli("verify", "--dir", str(store_dir)).returncode == 0
    assert Path(head["anchor_file"]).is_file()
    assert (tmp_path / "state" / "retained").stat().st_mode & 0o777 == 0o700
    assert Path(head["anchor_file"]).stat().st_mode & 0o777 == 0o600
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert anchors.dir_from(os.environ) == tmp_path / "home" / ".local" / "state" / "retained"
    monkeypatch.setenv("RETAINED_ANCHOR_DIR", "off")
    assert anchors.dir_from(os.environ) is None


def test_cli_anchor_verify_anchor_and_head(store_dir, anchor_dir, tmp_path):
    for text in ("a", "b", "c"):
        assert run_cli("write", text, "--dir", str(store_dir)).returncode == 0
    head = json.loads(run_cli("head", "--json", "--dir", str(store_dir)).stdout)
    assert head["seq"] == 3 and len(head["store_id"]) == 32
    text = run_cli("head", "--dir", str(store_dir)).stdout
    assert head["store_id"] in text and head["anchor_file"] in text
    spec = f"{head['seq']}:{head['hash']}"
    assert run_cli("verify", "--anchor", spec, "--dir", str(store_dir)).returncode == 0
    bad = run_cli("verify", "--anchor", "3:nothex", "--json", "--dir", str(store_dir))
    assert bad.returncode == 2 and json.loads(bad.stdout)["error"]["code"] == "invalid_argument"
    listing = json.loads(run_cli("anchor", "--json", "--dir", str(store_dir)).stdout)
    assert listing["not_on_chain"] == 0 and [a["state"] for a in listing["anchors"]] == ["ok"]
    with open(store_dir / "log.jsonl", "r+b") as f:
        f.truncate(len(f.readline()))  # back to seq 1
    assert run_cli("verify", "--anchor", spec, "--dir", str(store_dir)).returncode == 1
    proc = run_cli("anchor", "--dir", str(store_dir))
    assert proc.returncode == 1 and "rolled_back" in proc.stdout
    accepted = run_cli("anchor", "--accept", "--reason", "cut back on purpose", "--json", "--dir", str(store_dir))
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["accepted"]["record"]["seq"] == 2
    assert run_cli("verify", "--dir", str(store_dir)).returncode == 0
    # The head saved before still says the history changed: only the recorded anchors were accepted.
    assert run_cli("verify", "--anchor", spec, "--dir", str(store_dir)).returncode == 1


def test_a_store_others_may_write_is_reported_by_verify_and_warned_of_once_per_process(store_dir, anchor_dir):
    from retained import store as store_module

    with Store(store_dir, anchor_dir=anchor_dir) as store:
        assert "notices" not in store.write("private")
    os.chmod(store_dir, 0o770)
    store_module._WARNED_DIRS.clear()  # a fresh process, as far as the warning goes
    try:
        with Store(store_dir, anchor_dir=anchor_dir) as store:
            first = store.write("after the chmod")
            assert any("group or others may write it" in n and "chmod 700" in n for n in first["notices"])
            assert "notices" not in store.write("second write")
            report = store.verify()
        assert _kinds(report) == ["unsafe_permissions"] and report["findings"][0]["observed"] == "0o770"
        with Store(store_dir, anchor_dir=anchor_dir) as again:
            assert "notices" not in again.write("same process, another Store")
        proc = run_cli("write", "from the command line", "--dir", str(store_dir))
        assert proc.returncode == 0 and "note: the store directory" in proc.stdout
        os.chmod(anchor_dir, 0o757)
        with Store(store_dir, anchor_dir=anchor_dir) as store:
            assert [f["message"].split(" /")[0] for f in store.verify()["findings"]] == [
                "the store directory", "the anchor directory"]
    finally:
        os.chmod(store_dir, 0o700)
        os.chmod(anchor_dir, 0o700)


def test_an_anchor_append_cut_short_is_ended_not_glued_to_the_next(store_dir, anchor_dir):
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        store.write("a")
        store.verify()
        path = Path(store.head()["anchor_file"])
        with open(path, "ab") as f:
            f.write(b'{"bytes":12,"hash":"ab')  # a crash in the middle of an append
        store.write("b")
        assert store.brief()["anchor"]["file"] == str(path)
        lines = path.read_bytes().splitlines()
        assert lines[-2] == b'{"bytes":12,"hash":"ab' and json.loads(lines[-1])["seq"] == 2
        report = store.verify()
        assert _kinds(report) == ["anchor_unreadable"] and "line 3" in report["findings"][0]["message"]
        assert store.anchor(accept=True)["accepted"]["count"] == 0
        assert store.verify()["ok"]


def test_issue_29_writes_record_the_head_routinely_so_a_rollback_past_them_is_caught(tmp_path):
    """No verify or brief ran between the writes and the rollback: the heads the writes recorded catch it."""
    store_dir, anchor_dir = tmp_path / "store", tmp_path / "anchors"
    with Store(store_dir, anchor_dir=anchor_dir, anchor_every=(2, 3600)) as s:
        proofs = [s.write(f"note {i}") for i in range(6)]
    log = store_dir / "log.jsonl"
    log.write_bytes(log.read_bytes()[: proofs[1]["offset"] + proofs[1]["length"]])  # back to seq 2
    with Store(store_dir, anchor_dir=anchor_dir) as s:
        report = s.verify()
    assert not report["ok"] and "rolled_back" in {f["kind"] for f in report["findings"]}, report["findings"]


def test_issue_29_routine_anchors_are_at_most_every_n_records(tmp_path):
    store_dir, anchor_dir = tmp_path / "store", tmp_path / "anchors"
    with Store(store_dir, anchor_dir=anchor_dir, anchor_every=(5, 3600)) as s:
        for i in range(12):
            s.write(f"note {i}")
        anchor_file = s.head()["anchor_file"]
    heads = [json.loads(line)["seq"] for line in Path(anchor_file).read_text(encoding="utf-8").splitlines()[1:]]
    assert heads == [1, 6, 11]
