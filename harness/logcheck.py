"""An independent reader of retained's log format (DESIGN, "The record").

The harness checks a server's claims against the bytes in its store, so it
must not trust the server's own code to read them: this module re-implements
the small part of the format it needs (canonical bytes, the content digest,
the chain hash, line classification) from the specification alone and never
imports ``retained``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import blake3
import orjson

ZERO_HASH = "0" * 64
CHAIN_FIELDS = ("seq", "prev", "hash")


def canonical(obj: Any) -> bytes:
    """Return the canonical encoding: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def content_digest(record: dict[str, Any]) -> str:
    """Return ``cd``: blake3 of the record without seq, prev and hash."""
    body = {key: value for key, value in record.items() if key not in CHAIN_FIELDS}
    return blake3.blake3(canonical(body)).hexdigest()


def chain_hash(cd: str, prev: str, seq: int) -> str:
    """Return the chain hash of a record from its digest, link and position."""
    return blake3.blake3(canonical({"cd": cd, "prev": prev, "seq": seq})).hexdigest()


@dataclass
class Line:
    """One line of the log as the harness classifies it."""

    offset: int
    raw: bytes
    status: str  # "record", "redacted", "foreign", "damaged", "torn"
    record: dict[str, Any] | None = None
    problem: str | None = None

    @property
    def seq(self) -> int | None:
        return self.record.get("seq") if self.record is not None and self.status in ("record", "redacted") else None


@dataclass
class Finding:
    offset: int
    seq: int | None
    problem: str


@dataclass
class Report:
    """What the harness found in a log file."""

    lines: list[Line] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    head_seq: int = 0
    head_hash: str = ZERO_HASH

    @property
    def records(self) -> list[Line]:
        return [line for line in self.lines if line.status in ("record", "redacted")]

    @property
    def foreign(self) -> list[Line]:
        return [line for line in self.lines if line.status == "foreign"]

    @property
    def torn(self) -> Line | None:
        return next((line for line in self.lines if line.status == "torn"), None)

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        if self.ok:
            extra = f", {len(self.foreign)} foreign line(s) kept" if self.foreign else ""
            return f"{len(self.records)} chained records, head seq {self.head_seq}{extra}, chain valid"
        first = self.findings[0]
        where = f"seq {first.seq}" if first.seq is not None else "a line"
        return f"{len(self.findings)} finding(s); first: {where} at byte {first.offset}: {first.problem}"


def _has_chain_fields(obj: dict[str, Any]) -> bool:
    return (
        isinstance(obj.get("seq"), int)
        and not isinstance(obj.get("seq"), bool)
        and isinstance(obj.get("prev"), str)
        and isinstance(obj.get("hash"), str)
    )


def classify(offset: int, raw: bytes) -> Line:
    """Classify one complete line (``raw`` ends with a newline)."""
    body = raw[:-1]
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return Line(offset, raw, "damaged", problem=f"not JSON ({exc})")
    if not isinstance(obj, dict) or not _has_chain_fields(obj):
        return Line(offset, raw, "foreign", record=obj if isinstance(obj, dict) else None)
    status = "redacted" if obj.get("redacted") is True else "record"
    if canonical(obj) != body:
        return Line(offset, raw, "damaged", record=obj, problem="bytes are not the canonical encoding")
    if status == "redacted":
        cd = obj.get("cd")
        if not isinstance(cd, str):
            return Line(offset, raw, "damaged", record=obj, problem="redacted line without a cd")
    else:
        cd = content_digest(obj)
    expected = chain_hash(cd, obj["prev"], obj["seq"])
    if expected != obj["hash"]:
        return Line(
            offset, raw, "damaged", record=obj,
            problem=f"hash does not recompute: stored {obj['hash'][:12]}..., computed {expected[:12]}...",
        )
    return Line(offset, raw, status, record=obj)


def check(data: bytes) -> Report:
    """Read a whole log and check every line and every chain link.

    A damaged line that still carries chain fields takes part in the chain with
    its stored hash, so one flipped byte is reported once, at its own seq.
    """
    report = Report()
    offset = 0
    size = len(data)
    while offset < size:
        end = data.find(b"\n", offset)
        if end < 0:
            line = Line(offset, data[offset:], "torn", problem=f"{size - offset} bytes without a final newline")
            report.lines.append(line)
            report.findings.append(Finding(offset, None, line.problem or "torn tail"))
            break
        line = classify(offset, data[offset : end + 1])
        report.lines.append(line)
        offset = end + 1
        if line.status == "foreign":
            continue
        if line.status == "damaged":
            obj = line.record
            seq = obj.get("seq") if obj is not None and _has_chain_fields(obj) else None
            report.findings.append(Finding(line.offset, seq, line.problem or "damaged"))
            if seq is None:
                continue
        assert line.record is not None
        seq, prev = line.record["seq"], line.record["prev"]
        if seq != report.head_seq + 1 or prev != report.head_hash:
            report.findings.append(
                Finding(
                    line.offset, seq,
                    f"chain break: expected seq {report.head_seq + 1} linking to {report.head_hash[:12]}..., "
                    f"found seq {seq} linking to {prev[:12]}...",
                )
            )
        report.head_seq, report.head_hash = seq, line.record["hash"]
    return report
