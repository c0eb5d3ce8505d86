"""The harness's own reader agrees with the record-format vectors (tests/vectors, and ../shared/vectors when there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import logcheck

from ..conftest import VECTOR_DIRS, VECTORS


@pytest.fixture(params=VECTOR_DIRS, ids=lambda p: "repo" if p == VECTORS else "shared")
def vectors(request: pytest.FixtureRequest) -> Path:
    return request.param


def _expected(vectors: Path) -> dict:
    return json.loads((vectors / "expected.json").read_text(encoding="utf-8"))


def test_valid_chain_reproduces_every_digest_and_hash(vectors: Path) -> None:
    data = (vectors / "chain-v1.jsonl").read_bytes()
    report = logcheck.check(data)
    assert report.ok, report.summary()
    want = _expected(vectors)["chain-v1.jsonl"]
    for line, rec in zip(report.records, want["records"], strict=True):
        assert line.record is not None
        assert line.record["seq"] == rec["seq"]
        assert logcheck.content_digest(line.record) == rec["cd"]
        assert line.record["hash"] == rec["hash"]
    assert (report.head_seq, report.head_hash) == (want["head"]["seq"], want["head"]["hash"])


def test_redacted_and_foreign_lines_keep_the_chain_valid(vectors: Path) -> None:
    report = logcheck.check((vectors / "chain-v1-redacted-foreign.jsonl").read_bytes())
    want = _expected(vectors)["chain-v1-redacted-foreign.jsonl"]
    assert report.ok, report.summary()
    assert [line.offset for line in report.foreign] == want["foreign_offsets"]
    assert [line.seq for line in report.records if line.status == "redacted"] == want["redacted_seqs"]
    assert report.head_hash == want["head"]["hash"]


@pytest.mark.parametrize(
    "name",
    ["tampered-flipped-byte.jsonl", "tampered-deleted-line.jsonl", "tampered-swapped-lines.jsonl",
     "tampered-noncanonical.jsonl"],
)
def test_tampered_logs_report_the_first_bad_seq(vectors: Path, name: str) -> None:
    report = logcheck.check((vectors / name).read_bytes())
    assert not report.ok
    assert report.findings[0].seq == _expected(vectors)[name]["first_bad_seq"]


def test_torn_tail_is_found_at_its_offset(vectors: Path) -> None:
    report = logcheck.check((vectors / "torn-tail.jsonl").read_bytes())
    want = _expected(vectors)["torn-tail.jsonl"]
    torn = report.torn
    assert torn is not None
    assert (torn.offset, len(torn.raw)) == (want["torn_tail_offset"], want["torn_tail_bytes"])
    assert report.head_hash == want["head"]["hash"]
