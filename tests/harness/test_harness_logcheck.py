"""The harness's own reader agrees with the shared vectors (DESIGN, "The record")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import logcheck

ROOT = Path(__file__).resolve().parents[2]

VECTORS = next((p for p in (ROOT.parent / "shared" / "vectors", ROOT / "shared" / "vectors") if p.is_dir()), None)
pytestmark = pytest.mark.skipif(VECTORS is None, reason="the shared vectors are not beside the repository")


def _expected() -> dict:
    assert VECTORS is not None
    return json.loads((VECTORS / "expected.json").read_text(encoding="utf-8"))


def test_valid_chain_reproduces_every_digest_and_hash() -> None:
    data = (VECTORS / "chain-v1.jsonl").read_bytes()
    report = logcheck.check(data)
    assert report.ok, report.summary()
    want = _expected()["chain-v1.jsonl"]
    for line, rec in zip(report.records, want["records"], strict=True):
        assert line.record is not None
        assert line.record["seq"] == rec["seq"]
        assert logcheck.content_digest(line.record) == rec["cd"]
        assert line.record["hash"] == rec["hash"]
    assert (report.head_seq, report.head_hash) == (want["head"]["seq"], want["head"]["hash"])


def test_redacted_and_foreign_lines_keep_the_chain_valid() -> None:
    report = logcheck.check((VECTORS / "chain-v1-redacted-foreign.jsonl").read_bytes())
    want = _expected()["chain-v1-redacted-foreign.jsonl"]
    assert report.ok, report.summary()
    assert [line.offset for line in report.foreign] == want["foreign_offsets"]
    assert [line.seq for line in report.records if line.status == "redacted"] == want["redacted_seqs"]
    assert report.head_hash == want["head"]["hash"]


@pytest.mark.parametrize(
    "name",
    ["tampered-flipped-byte.jsonl", "tampered-deleted-line.jsonl", "tampered-swapped-lines.jsonl",
     "tampered-noncanonical.jsonl"],
)
def test_tampered_logs_report_the_first_bad_seq(name: str) -> None:
    report = logcheck.check((VECTORS / name).read_bytes())
    assert not report.ok
    assert report.findings[0].seq == _expected()[name]["first_bad_seq"]


def test_torn_tail_is_found_at_its_offset() -> None:
    report = logcheck.check((VECTORS / "torn-tail.jsonl").read_bytes())
    want = _expected()["torn-tail.jsonl"]
    torn = report.torn
    assert torn is not None
    assert (torn.offset, len(torn.raw)) == (want["torn_tail_offset"], want["torn_tail_bytes"])
    assert report.head_hash == want["head"]["hash"]
