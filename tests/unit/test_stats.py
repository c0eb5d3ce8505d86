"""``retained stats``: every number checked against a store the test built itself."""

from __future__ import annotations

import json
import sqlite3

import orjson

from retained import Store
from retained.core import record
from retained.core.log import Log
from retained.index.stats import stats
from retained.index.writer import Index

from ..conftest import run_cli


def _build(store_dir):
    s = Store(store_dir)
    s.write("alpha", scope="a")  # 1
    s.write("beta", scope="a", kind="fact")  # 2
    s.write("gamma", scope="b")  # 3
    s.write("delta")  # 4 (no scope)
    s.write("alpha corrected", scope="a", supersedes=[1])  # 5
    s.checkpoint("milestone", summary="done", scope="b")  # 6
    s.forget([3], "wrong")  # 7 (retract)
    s.close()
    return s


def _redact_line(store_dir, seq):
    """Erase one record the way the redaction flow does: its redacted form keeps the chain."""
    path = store_dir / "log.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[seq - 1] = record.canonical(record.redacted_form(orjson.loads(lines[seq - 1]))) + b"\n"
    path.write_bytes(b"".join(lines))


def test_stats_counts_match_the_store_the_test_built(store_dir):
    _build(store_dir)
    _redact_line(store_dir, 4)
    log_path = store_dir / "log.jsonl"
    with open(log_path, "ab") as f:
        f.write(b'{"written by":"another program"}\n')
        f.write(b'{"torn":')  # an unterminated tail: the next append sets it aside
    Store(store_dir).write("after the tear", scope="b")  # 8
    for p in store_dir.glob("index.sqlite3*"):
        p.unlink()  # derived; removed so the test can show stats never creates one

    s = stats(Log(store_dir))
    lines = [line for line in Log(store_dir).scan()]
    live = [line for line in lines if line.status == record.RECORD]
    assert s["records"] == 8
    assert s["by_kind"] == {"note": 4, "checkpoint": 1, "fact": 1, "retract": 1}
    assert s["by_scope"] == {"a": 3, "b": 3, "(none)": 1}
    assert (s["superseded"], s["retracted"], s["redacted"]) == (1, 1, 1)
    assert (s["foreign_lines"], s["damaged_lines"], s["findings"]) == (1, 0, 0)
    assert [q["bytes"] for q in s["quarantined"]] == [len(b'{"torn":')]
    assert s["sizes"]["quarantined_bytes"] == 8
    assert s["sizes"]["log_bytes"] == log_path.stat().st_size
    assert s["sizes"]["record_bytes_max"] == max(line.length for line in live)
    assert s["sizes"]["record_bytes_mean"] == round(sum(line.length for line in live) / len(live))
    seq, h, _ = Log(store_dir).tail()
    assert s["head"] == {"seq": seq, "hash": h} and seq == 8
    assert s["index"] is None and s["vectors"] is None
    assert not (store_dir / "index.sqlite3").exists()  # stats never creates one


def test_stats_reports_index_lag_and_vectors_when_present(store_dir):
    _build(store_dir)
    index = Index(Log(store_dir))
    index.rebuild()
    index.close()
    s = Store(store_dir)
    for i in range(3):
        s.write(f"not yet indexed {i}")
    s.close()
    from retained.index.schema import VECTORS_SCHEMA

    db = sqlite3.connect(store_dir / "index.sqlite3")
    db.executescript(VECTORS_SCHEMA)
    # Rows with an empty vector (records with no text) are never ranked, so stats leaves them out.
    db.executemany(
        "INSERT INTO vectors (model, seq, hash, dim, v) VALUES (?, ?, ?, ?, ?)",
        [("mini", n, "h", 2, b"\0" * 8) for n in (1, 2, 3)] + [("big", 1, "h", 2, b"\0" * 8)]
        + [("mini", 4, "h", 0, b""), ("empty", 1, "h", 0, b"")],
    )
    db.commit()
    db.close()

    out = run_cli("stats", "--json", env_dir=store_dir)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["index"]["state"] == "behind" and got["index"]["seq"] == 7
    assert got["index"]["lag_records"] == 3 and got["index"]["lag_bytes"] > 0
    assert got["vectors"] == {"mini": 3, "big": 1}
    assert got["sizes"]["index_bytes"] > 0
    text = run_cli("stats", env_dir=store_dir)
    assert "lag 3 records" in text.stdout and "vectors: mini 3 of 10 records, big 1 of 10 records" in text.stdout
    assert text.stderr == ""


def test_stats_exits_1_and_says_so_when_the_log_is_damaged(store_dir):
    _build(store_dir)
    path = store_dir / "log.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"gamma"', b'"GAMMA"'))
    out = run_cli("stats", env_dir=store_dir)
    assert out.returncode == 1
    assert "damaged lines 1" in out.stdout and "verify findings: 1" in out.stdout


def test_stats_of_an_empty_store_is_zeros(tmp_path):
    from retained import Store

    with Store(tmp_path / "none") as store:
        got = store.stats()
    assert got["records"] == 0 and got["exists"] is False and got["head"]["seq"] == 0
    # The command line says there is no store there (issue 15) and creates nothing.
    out = run_cli("stats", "--json", env_dir=tmp_path / "none")
    assert out.returncode == 1 and json.loads(out.stdout)["error"]["code"] == "no_store", out.stderr
    assert not (tmp_path / "none").exists()


def test_stats_count_records_by_client_and_by_utc_day(store_dir):
    """The viewer's health page reads who wrote what and when from here (issue 16)."""
    s = Store(store_dir, client={"name": "agent-a", "version": "1"})
    s.write("one")
    s.write("two", client={"name": "agent-b", "version": "2"})
    s.write("three")
    s.close()
    days = [r["ts"][:10] for r in map(orjson.loads, (store_dir / "log.jsonl").read_bytes().splitlines())]
    with open(store_dir / "log.jsonl", "ab") as f:
        f.write(b'{"written by":"another program"}\n')  # not a record: counted nowhere
    got = stats(Log(store_dir))
    assert got["by_client"] == {"agent-a": 2, "agent-b": 1}
    assert got["by_day"] == {d: days.count(d) for d in sorted(set(days))}
    assert sum(got["by_day"].values()) == got["records"] == 3
