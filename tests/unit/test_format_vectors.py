"""The record-format vectors pin the format (L1, L2, L3).

Run over tests/vectors (made by harness/make_vectors.py) and, when it is
beside the repository, over ../shared/vectors too; the two agree byte for
byte where they overlap.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from retained.core import chain, record
from retained.core.log import Log

from harness import make_vectors

from ..conftest import SHARED_VECTORS, VECTOR_DIRS, VECTORS


@pytest.fixture(params=VECTOR_DIRS, ids=lambda p: "repo" if p == VECTORS else "shared", autouse=True)
def vectors(request: pytest.FixtureRequest) -> Path:
    return request.param


def _expected(vectors: Path) -> dict:
    return json.loads((vectors / "expected.json").read_text(encoding="utf-8"))


def _walk(tmp_path: Path, vectors: Path, name: str) -> chain.ChainReport:
    shutil.copy(vectors / name, tmp_path / "log.jsonl")
    return chain.walk(Log(tmp_path).scan())


def test_the_vectors_are_what_the_script_makes_and_agree_with_the_shared_ones(vectors):
    """tests/vectors is harness/make_vectors.py's output as committed; the shared copy, where present, agrees."""
    made = make_vectors.build()
    assert sorted(p.name for p in VECTORS.iterdir()) == sorted(made)
    assert {name: (VECTORS / name).read_bytes() for name in made} == made
    if vectors == SHARED_VECTORS:
        ours, theirs = _expected(VECTORS), _expected(SHARED_VECTORS)
        overlap = sorted(name for name in theirs if name.endswith(".jsonl"))
        assert overlap == sorted(p.name for p in SHARED_VECTORS.glob("*.jsonl")) and len(overlap) == 7
        for name in overlap:
            assert (SHARED_VECTORS / name).read_bytes() == (VECTORS / name).read_bytes(), name
            assert theirs[name] == ours[name], name


def test_every_cd_hash_and_prev_of_the_valid_chain_recomputes(vectors):
    """L1/L3: an implementation written from DESIGN agrees with every line."""
    want = _expected(vectors)["chain-v1.jsonl"]["records"]
    lines = (vectors / "chain-v1.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) == len(want)
    for line, exp in zip(lines, want):
        obj = json.loads(line)
        assert record.canonical(obj) + b"\n" == line
        assert record.content_digest(obj) == exp["cd"]
        assert record.chain_hash(exp["cd"], exp["prev"], exp["seq"]) == exp["hash"] == obj["hash"]


@pytest.mark.parametrize("name", ["chain-v1.jsonl", "chain-v1-redacted-foreign.jsonl"])
def test_valid_vectors_verify_with_the_expected_head(tmp_path, vectors, name):
    exp = _expected(vectors)[name]
    report = _walk(tmp_path, vectors, name)
    assert report.findings == exp["findings"] == []
    assert (report.head_seq, report.head_hash) == (exp["head"]["seq"], exp["head"]["hash"])
    assert report.redacted == exp.get("redacted_seqs", [])
    assert report.foreign == exp.get("foreign_offsets", [])


@pytest.mark.parametrize(
    "name, kind",
    [
        ("tampered-flipped-byte.jsonl", "hash_mismatch"),
        ("tampered-deleted-line.jsonl", "prev_mismatch"),
        ("tampered-swapped-lines.jsonl", "prev_mismatch"),
        ("tampered-noncanonical.jsonl", "not_canonical"),
    ],
)
def test_tampered_vectors_name_the_first_bad_seq(tmp_path, vectors, name, kind):
    report = _walk(tmp_path, vectors, name)
    assert not report.ok
    assert report.first_bad_seq == _expected(vectors)[name]["first_bad_seq"]
    assert report.findings[0]["kind"] == kind
    assert f"seq {report.first_bad_seq}" in report.findings[0]["message"]


def test_deleted_line_is_one_finding_saying_the_seq_jumps(tmp_path, vectors):
    report = _walk(tmp_path, vectors, "tampered-deleted-line.jsonl")
    assert len(report.findings) == 1
    assert "seq jumps from 2 to 4" in report.findings[0]["message"]


def test_torn_tail_vector_reports_offset_and_size_and_keeps_the_head(tmp_path, vectors):
    exp = _expected(vectors)["torn-tail.jsonl"]
    report = _walk(tmp_path, vectors, "torn-tail.jsonl")
    assert report.ok
    assert report.torn_tail["offset"] == exp["torn_tail_offset"]
    assert report.torn_tail["bytes"] == exp["torn_tail_bytes"]
    assert (report.head_seq, report.head_hash) == (exp["head"]["seq"], exp["head"]["hash"])


def test_append_after_torn_tail_vector_sets_it_aside_and_continues_the_chain(tmp_path, vectors):
    """recovery T2: the torn bytes are quarantined, the chain goes on from seq 5."""
    exp = _expected(vectors)["torn-tail.jsonl"]
    original = (vectors / "torn-tail.jsonl").read_bytes()
    shutil.copy(vectors / "torn-tail.jsonl", tmp_path / "log.jsonl")
    log = Log(tmp_path)
    proof = log.append([record.make_content(text="after the crash")], client={"name": "t", "version": "0"})[0]
    assert proof["seq"] == 6 and proof["prev"] == exp["head"]["hash"]
    assert proof["offset"] == exp["torn_tail_offset"]
    quarantine = tmp_path / f"log.jsonl.torn-{exp['torn_tail_offset']}"
    assert quarantine.read_bytes() == original[exp["torn_tail_offset"] :]
    assert chain.walk(log.scan()).ok


def test_append_to_the_redacted_foreign_vector_links_to_seq_5(tmp_path, vectors):
    shutil.copy(vectors / "chain-v1-redacted-foreign.jsonl", tmp_path / "log.jsonl")
    log = Log(tmp_path)
    proof = log.append([record.make_content(text="next")], client={"name": "t", "version": "0"})[0]
    assert proof["seq"] == 6
    assert proof["prev"] == _expected(vectors)["chain-v1-redacted-foreign.jsonl"]["head"]["hash"]
    assert chain.walk(log.scan()).ok
