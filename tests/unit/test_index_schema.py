"""The index's schema and read model (retained/index_schema.py): one definition, read the same everywhere.

Real SQLite files made by the real `Index`, real logs; the import checks run
a fresh interpreter.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from retained import Store
from retained.brief import compose as brief
from retained.core.log import Log
from retained.index import documents
from retained.index import schema as index_schema
from retained.index.schema import INDEX_NAME
from retained.index.stats import stats
from retained.index.writer import Index

from ..conftest import REPO

PACKAGE = REPO / "retained"


def test_importing_the_read_model_loads_the_standard_library_only() -> None:
    """The brief's reader imports it: no orjson, mcp, numpy, portalocker nor blake3 (typing is fine)."""
    code = (
        "import sys; before = set(sys.modules); import retained.index.schema; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    # -S: no site hooks, which would import typing (and more) before the line runs.
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=REPO,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert {"retained", "retained.index.schema"} <= loaded
    ours = {m for m in loaded if m.split(".")[0] == "retained"}
    # files: how every store file is opened (no links), errors: what it raises; both standard library only;
    # version: the package's root names it.
    assert ours == {"retained", "retained.index", "retained.index.schema", "retained.core", "retained.core.files",
                    "retained.errors", "retained.version"}
    foreign = {m.split(".")[0] for m in loaded - ours} - set(sys.stdlib_module_names)
    assert foreign == set(), f"not in the standard library: {sorted(foreign)}"


def test_the_brief_reads_the_index_through_the_read_model_and_nothing_heavier(store_dir: Path) -> None:
    s = Store(store_dir)
    s.write_batch([{"text": f"note {i}"} for i in range(5)])
    s.search("note")  # an index exists, so the brief reads it
    s.close()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "retained", "--brief", "--dir", str(store_dir)],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "index current" in brief.build_brief(store_dir)["index"]["how"]
    loaded = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
              if line.startswith("import time:") and "|" in line}
    assert "retained.index.schema" in loaded
    for heavy in ("retained.index.writer", "retained.index.documents", "retained.index.query", "orjson"):
        assert heavy not in loaded


def test_one_definition_of_the_file_name_the_tables_and_the_mark_in_the_package() -> None:
    """Only index/schema.py spells out the file name, the tables, the meta reads, the version, the token formula.

    (capture/ops.py makes the tables of another database, capture's map of ids.)

    (A hostile search query in the self-test holds "DROP TABLE records": hence "DROP TABLE IF".)
    """
    patterns = {
        "file name": re.compile(re.escape(INDEX_NAME)),
        "table DDL": re.compile(r"CREATE (VIRTUAL )?TABLE|CREATE INDEX|DROP TABLE IF", re.IGNORECASE),
        "meta read": re.compile(r"FROM meta\b", re.IGNORECASE),
        "schema version": re.compile(r"SCHEMA_VERSION\s*=|SCHEMA_VERSIONS\s*="),
        "token formula": re.compile(r"\+ 3\)\s*//\s*4|math\.ceil\(.*/\s*4\)|TOKEN_BYTES - 1\) // TOKEN_BYTES"),
    }
    found: dict[str, list[str]] = {name: [] for name in patterns}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for name, pattern in patterns.items():
            if pattern.search(text):
                found[name].append(path.relative_to(PACKAGE).as_posix())
    expected = {name: ["index/schema.py"] for name in patterns}
    expected["table DDL"] = ["capture/ops.py", "index/schema.py"]  # capture's map of ids: a database of its own
    assert found == expected


# -- the mark ------------------------------------------------------------------------


def _indexed(store_dir: Path, n: int) -> tuple[Log, Index]:
    s = Store(store_dir)
    s.write_batch([{"text": f"record {i}"} for i in range(n)])
    s.close()
    log = Log(store_dir)
    idx = Index(log)
    idx.rebuild()
    return log, idx


def test_read_mark_gives_how_far_the_index_read_and_the_last_record(store_dir: Path) -> None:
    log, idx = _indexed(store_dir, 3)
    try:
        mark = index_schema.read_mark(idx.connection())
        _, h, size = log.tail()
        assert (mark.schema, mark.offset, mark.seq, mark.hash) == (index_schema.SCHEMA_VERSION, size, 3, h)
        assert log.read_at(mark.line_offset, mark.line_length).endswith(b"\n")
        assert index_schema.line_has_hash(log.read_at(mark.line_offset, mark.line_length), h)
        assert index_schema.mark_state(mark, size, log.read_at) == "ok"
    finally:
        idx.close()


def test_mark_state_tells_behind_from_a_shorter_log_and_another_log(store_dir: Path) -> None:
    log, idx = _indexed(store_dir, 4)
    mark = index_schema.read_mark(idx.connection())
    idx.close()
    path = store_dir / "log.jsonl"
    data = path.read_bytes()
    assert index_schema.mark_state(mark, len(data) + 10, log.read_at) == "behind"
    assert index_schema.mark_state(mark, len(data) - 1, log.read_at) == "log_shorter"
    # The same length, but the last line's hash is no longer the one indexed.
    path.write_bytes(data.replace(mark.hash.encode(), b"0" * 64))
    assert index_schema.mark_state(mark, len(data), log.read_at) == "log_other"


def test_read_mark_names_what_is_wrong_with_the_meta_table(store_dir: Path) -> None:
    _, idx = _indexed(store_dir, 1)
    db = idx.connection()
    with pytest.raises(ValueError, match=rf"schema '{index_schema.SCHEMA_VERSION}', expected one of \['9'\]"):
        index_schema.read_mark(db, frozenset({"9"}))
    db.execute("UPDATE meta SET value = 'x' WHERE key = 'hwm_seq'")
    with pytest.raises(ValueError, match="not a number"):
        index_schema.read_mark(db)
    db.execute("DELETE FROM meta WHERE key = 'hwm_hash'")
    with pytest.raises(ValueError, match="meta has no hwm_hash"):
        index_schema.read_mark(db)
    idx.close()


def test_a_read_only_connection_reads_and_cannot_write(tmp_path: Path) -> None:
    # Characters a URI would take for its query or fragment, in the directory name.
    store_dir = tmp_path / "odd ?#% name"
    _, idx = _indexed(store_dir, 2)
    idx.close()
    db = index_schema.connect_read_only(store_dir / INDEX_NAME, 1.0)
    try:
        assert index_schema.row_count(db) == 2
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            db.execute("DELETE FROM records")
    finally:
        db.close()


def test_stats_counts_vectors_of_a_store_whose_path_has_uri_characters(tmp_path: Path) -> None:
    store_dir = tmp_path / "a?b#c%20"
    _, idx = _indexed(store_dir, 2)
    db = idx.connection()
    db.executescript(index_schema.VECTORS_SCHEMA)
    db.execute("INSERT INTO vectors (model, seq, hash, dim, v) VALUES ('m', 1, 'h', 2, x'0000000000000000')")
    idx.close()
    assert stats(Log(store_dir))["vectors"] == {"m": 1}


# -- reads ---------------------------------------------------------------------------


def test_newest_and_count_listed_agree_on_every_filter(store_dir: Path) -> None:
    s = Store(store_dir)
    s.write("a1", scope="a")  # 1
    s.write("b1", scope="b", kind="fact")  # 2
    s.checkpoint("cp", scope="a")  # 3
    s.write("a2", scope="a", supersedes=[1])  # 4
    s.forget([2], "wrong")  # 5
    s.write("a3", scope="a")  # 6
    s.search("a1")  # catch the index up
    db = s.index.connection()
    cases: list[tuple[dict[str, Any], list[int]]] = [
        ({}, [6, 5, 4, 3, 2, 1]),
        ({"current": True}, [6, 5, 4, 3]),
        ({"scope": "a"}, [6, 4, 3, 1]),
        ({"kind": "checkpoint"}, [3]),
        ({"kinds_not": ("checkpoint", "retract")}, [6, 4, 2, 1]),
        ({"below": 4, "scope": "a", "current": True}, [3]),
    ]
    for filters, seqs in cases:
        listed = index_schema.Filter(**filters)
        assert [r[0] for r in index_schema.newest(db, 100, listed)] == seqs, filters
        assert index_schema.count_listed(db, listed) == len(seqs), filters
        assert [r[0] for r in index_schema.newest(db, 2, listed)] == seqs[:2], filters
    assert index_schema.links_of(db, [1, 2, 3]) == {1: {"superseded_by": [4]}, 2: {"retracted_by": [5]}}
    assert index_schema.count_below(db, 6) == (5, 1)  # the retraction is not listed
    assert index_schema.count_below(db, 7, "a") == (4, 0)
    assert sorted(r[:2] for r in index_schema.links_below(db, 7)) == [(1, "supersedes"), (2, "retracts")]
    assert index_schema.head(db) == (6, s.get([6])[0]["record"]["ts"])
    s.close()


def test_vector_counts_tell_rows_from_rows_with_a_vector(store_dir: Path) -> None:
    _, idx = _indexed(store_dir, 1)
    db = idx.connection()
    assert index_schema.vector_counts(db) is None
    for stmt in index_schema.statements(index_schema.VECTORS_SCHEMA):
        db.execute(stmt)
    db.executemany("INSERT INTO vectors (model, seq, hash, dim, v) VALUES (?, ?, 'h', ?, ?)",
                   [("m", 1, 2, b"\0" * 8), ("m", 2, 0, b""), ("n", 1, 0, b"")])
    assert index_schema.vector_counts(db) == {"m": (2, 1), "n": (1, 0)}
    idx.close()


# -- the token estimate ---------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "abcd", "abcde", "é", "日本語", "a" * 4097, "emoji 🙂 and text"])
def test_search_and_the_brief_charge_tokens_by_one_formula(text: str) -> None:
    expected = -(-len(text.encode("utf-8")) // 4)
    assert index_schema.estimate_tokens(text) == expected
    assert brief.estimate_tokens is index_schema.estimate_tokens
    assert documents.estimate_tokens({"text": text}) == expected
    # Text and body are counted together before rounding up, not rounded each.
    assert documents.estimate_tokens({"text": text, "body": "xyz"}) == -(-(len(text.encode()) + 3) // 4)
    assert documents.estimate_tokens({"body": {"k": text}}) == index_schema.estimate_tokens(
        ('{"k":' + json.dumps(text, ensure_ascii=False) + "}").encode())


def test_link_targets_reads_link_fields_as_the_index_stores_them() -> None:
    assert index_schema.link_targets(3) == [3]
    assert index_schema.link_targets([1, 0, -2, "4", 5, True]) == [1, 5]
    assert index_schema.link_targets(None) == [] and index_schema.link_targets("7") == []


def test_a_project_scope_admits_its_records_and_those_with_no_scope_in_every_query(store_dir: Path) -> None:
    s = Store(store_dir)
    for i in range(1, 13):  # 1..12: scope a, then none, then b, in turn
        s.write(f"note {i}", scope=("a", None, "b")[i % 3 - 1])
    s.search("note")  # catch the index up
    db = s.index.connection()
    project = index_schema.Filter(scope="a", and_unscoped=True)
    wanted = [seq for seq in range(12, 0, -1) if seq % 3 in (1, 2)]  # scope a (1, 4, ...) and none (2, 5, ...)
    assert [r[0] for r in index_schema.newest(db, 100, project)] == wanted
    assert [r[0] for r in index_schema.newest(db, 3, project)] == wanted[:3]
    assert index_schema.count_listed(db, project) == len(wanted)
    assert index_schema.count_below(db, 13, "a", and_unscoped=True) == (len(wanted), 0)
    assert index_schema.count_below(db, 6, "a", and_unscoped=True) == (4, 0)
    page = index_schema.Filter(scope="a", and_unscoped=True, above=4)  # the page after seq 4: nearest above it, newest first
    assert [r[0] for r in index_schema.newest(db, 3, page)] == [8, 7, 5]
    assert [r[0] for r in index_schema.newest(db, 100, index_schema.Filter(scope="a"))] == [10, 7, 4, 1]  # only its own
    assert index_schema.Filter(and_unscoped=True).halves()[0].where() == ("redacted = 0", [])  # no scope: every scope
    records = {r["seq"]: r["record"] for r in s.get(list(range(1, 13)))}
    assert [q for q in range(12, 0, -1) if project.admits(q, records[q])] == wanted
    for and_unscoped, found in ((True, wanted), (False, [10, 7, 4, 1])):  # the search path takes the same flag
        reply = s.search("note", k=20, scope="a", and_unscoped=and_unscoped)
        assert sorted((r["seq"] for r in reply["results"]), reverse=True) == found
    s.close()
