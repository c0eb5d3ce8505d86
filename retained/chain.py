"""The chain verifier: walks lines in file order and reports every finding.

It checks, for each line: it parses (L1), its bytes are canonical (L1), its
hash recomputes, its ``prev`` names the previous chained record's hash (L3)
and its ``seq`` follows on (L2). It never stops at the first problem: a
verifier that gives up hides the second one.

Linking after damage: a damaged line that still claims a seq and hash is a
valid predecessor for the next line too, so one flipped byte is reported as
one finding (at the record it hit), not as a cascade; and the next append's
rule (link to the last *valid* record) is accepted as well.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import record
from .log import Line

_PROBLEM_KINDS = {
    "not JSON": "not_json",
    "bytes are not canonical": "not_canonical",
    "hash does not recompute": "hash_mismatch",
    "chain fields missing or malformed": "chain_fields_malformed",
}


def _short(h: str | None) -> str:
    return (h[:12] + "...") if h else "none"


@dataclass
class ChainReport:
    records: int = 0
    redacted: list[int] = field(default_factory=list)
    foreign: list[int] = field(default_factory=list)
    damaged: int = 0
    head_seq: int = 0
    head_hash: str = record.ZERO_HASH
    findings: list[dict[str, Any]] = field(default_factory=list)
    torn_tail: dict[str, Any] | None = None
    bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def first_bad_seq(self) -> int | None:
        seqs = [f["seq"] for f in self.findings if f.get("seq") is not None]
        return seqs[0] if seqs else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "records": self.records,
            "head": {"seq": self.head_seq, "hash": self.head_hash},
            "bytes": self.bytes,
            "redacted": self.redacted,
            "foreign": self.foreign,
            "damaged": self.damaged,
            "torn_tail": self.torn_tail,
            "first_bad_seq": self.first_bad_seq,
            "findings": self.findings,
        }


def walk(lines: Iterable[Line], log_name: str = "log.jsonl") -> ChainReport:
    """Verify a sequence of lines (a whole log, oldest first)."""
    report = ChainReport()
    last_seq, last_hash = 0, record.ZERO_HASH
    # Predecessors the next chained line may link to: the last valid record,
    # plus any damaged lines after it that still claim a seq and hash.
    candidates: list[tuple[int, str]] = [(0, record.ZERO_HASH)]
    # Targets named by redaction records: each must be redacted by the end,
    # or an erasure was interrupted (running it again finishes it).
    redaction_targets: dict[int, int] = {}
    RECORD = record.RECORD
    for line in lines:
        report.bytes = line.offset + len(line.raw)
        if line.status == RECORD and line.seq == last_seq + 1 and line.record["prev"] == last_hash:
            # The common case, decided without building anything.
            report.records += 1
            rec = line.record
            if rec.get("kind") == "redaction" and type(rec.get("redacts")) is int:
                redaction_targets[rec["redacts"]] = line.seq
            last_seq, last_hash = line.seq, line.hash
            candidates = [(last_seq, last_hash)]
            continue
        where = f"{log_name} byte {line.offset}"
        if line.status == record.TORN:
            report.torn_tail = {
                "offset": line.offset,
                "bytes": line.length,
                "note": "unterminated last line: never acknowledged; the next append sets it aside, then truncates",
            }
            continue
        if line.status == record.FOREIGN:
            report.foreign.append(line.offset)
            continue
        if line.status == record.DAMAGED:
            report.damaged += 1
            kind = _PROBLEM_KINDS.get(line.problem or "", "damaged_line")
            label = f"seq {line.seq}" if line.seq is not None else "a line"
            report.findings.append(
                {
                    "kind": kind,
                    "seq": line.seq,
                    "offset": line.offset,
                    "message": f"{label} ({where}): {line.problem}; the line is kept in place and skipped by the chain",
                }
            )
            if line.seq is not None and line.hash is not None:
                candidates.append((line.seq, line.hash))
            continue
        assert line.seq is not None and line.hash is not None
        rec = line.record
        prev = rec["prev"]
        if not any(seq + 1 == line.seq and h == prev for seq, h in candidates):
            problems = []
            if prev != last_hash and not any(h == prev for _, h in candidates):
                problems.append(
                    f"prev is {_short(prev)}, expected {_short(last_hash)} (hash of seq {last_seq})"
                    if last_seq
                    else f"prev is {_short(prev)}, expected 64 zeros (the first record)"
                )
            if line.seq != last_seq + 1:
                if line.seq > last_seq + 1:
                    problems.append(f"seq jumps from {last_seq} to {line.seq}")
                else:
                    problems.append(f"seq {line.seq} follows seq {last_seq} (out of order or repeated)")
            kind = "prev_mismatch" if problems and problems[0].startswith("prev") else "seq_gap"
            report.findings.append(
                {
                    "kind": kind,
                    "seq": line.seq,
                    "offset": line.offset,
                    "expected": last_hash,
                    "observed": prev,
                    "message": f"chain broken at seq {line.seq} ({where}): " + "; ".join(problems or ["does not link"]),
                }
            )
        report.records += 1
        if line.status == record.RECORD and rec.get("kind") == "redaction" and type(rec.get("redacts")) is int:
            redaction_targets[rec["redacts"]] = line.seq
        if line.status == record.REDACTED:
            report.redacted.append(line.seq)
        last_seq, last_hash = line.seq, line.hash
        candidates = [(last_seq, last_hash)]
    report.head_seq, report.head_hash = last_seq, last_hash
    done = set(report.redacted)
    for target, by in sorted(redaction_targets.items()):
        if target not in done:
            report.findings.append(
                {
                    "kind": "redaction_pending",
                    "seq": target,
                    "offset": None,
                    "message": f"seq {by} records the erasure of seq {target}, but seq {target} still holds its content; "
                    f"run `retained redact {target} --reason ...` again to finish it",
                }
            )
    return report
