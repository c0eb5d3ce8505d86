"""Make the record-format test vectors in tests/vectors/ from the library's own record functions.

    python -m harness.make_vectors            # write tests/vectors/
    python -m harness.make_vectors --check    # exit 1 if tests/vectors/ differs from what this makes

Five records are sealed with ``retained.core.record.seal`` at fixed times and
clients (unicode, emoji, escapes, nested unknown fields, ``supersedes``, a
checkpoint), then damaged in known ways. What an implementation must find in
each file (``expected.json``) is stated by construction: each tampered file's
first bad seq is the one this script damaged, each offset is counted from the
bytes written. Before anything is written the harness's independent reader
(``harness.logcheck``, which never imports ``retained``) must agree with every
digest, hash, head and finding; if it does not, nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from retained.core import record

from . import logcheck

OUT = Path(__file__).resolve().parent.parent / "tests" / "vectors"
ZERO = "0" * 64
CLI = {"name": "retained-cli", "version": "0.1.0"}

# (time, client, content) of the five records of chain-v1.jsonl.
RECORDS: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("2026-11-29T12:00:00.000001Z", CLI, {"text": "the deploy target is staging", "scope": "proj-a"}),
    ("2026-11-29T12:00:01.000000Z", {"name": "claude-code", "version": "2.1.0"}, {
        "text": 'Zoë prefers «dark mode» 🌙 and "vim" keys\nsecond line\ttab', "source": "conversation",
        "fields": {"x-origin": {"empty": {}, "nested": [1, -2, 3.5, None, True, "ü"]}}}),
    ("2026-11-29T12:00:02.000000Z", CLI, {"text": "the deploy target is production", "scope": "proj-a", "supersedes": [1]}),
    ("2026-11-29T12:00:03.000000Z", CLI, {"text": "temporary: call 555-0199 about the venue"}),
    ("2026-11-29T12:00:04.000000Z", CLI, {"text": "shipped 0.1", "body": "core log done; chain checks pass",
                                          "kind": "checkpoint", "store_kind": True}),
]
FOREIGN = b'{"note":"appended by another program"}\n'
TORN = b'{"seq":6,"text":"tor'

README = """# Test vectors for the record format (v1)

Small logs built to the record format ([docs/format.md](../../docs/format.md))
by `harness/make_vectors.py`, with what an implementation must find in each
(`expected.json`). Do not edit them by hand: change the script and run
`python -m harness.make_vectors`; `tests/unit/test_format_vectors.py` checks
that these files are what the script makes, and that they agree with the
shared vectors beside the repository (`../shared/vectors`) where those exist.

| file | what it is |
|---|---|
| `chain-v1.jsonl` | five valid records: unicode, emoji, escapes, nested unknown fields, `supersedes`, a checkpoint |
| `chain-v1-redacted-foreign.jsonl` | the same chain with seq 4 in redacted form and a foreign line after it; still verifies |
| `tampered-flipped-byte.jsonl` | one byte of seq 1's text flipped |
| `tampered-deleted-line.jsonl` | the line of seq 3 removed |
| `tampered-swapped-lines.jsonl` | seq 2 and seq 3 swapped |
| `tampered-noncanonical.jsonl` | seq 1 re-spaced: same object, different bytes |
| `torn-tail.jsonl` | a valid chain followed by an unterminated partial line |
"""


def _sealed() -> list[record.Sealed]:
    out: list[record.Sealed] = []
    prev = ZERO
    for seq, (ts, client, spec) in enumerate(RECORDS, start=1):
        content = record.make_content(**spec)
        sealed = record.seal(content, seq=seq, prev=prev, ts=ts, client=client)
        out.append(sealed)
        prev = sealed.hash
    return out


def build() -> dict[str, bytes]:
    """Every file of the vectors directory, by name, as bytes."""
    sealed = _sealed()
    lines = [s.line for s in sealed]
    chain = b"".join(lines)
    head = {"seq": len(sealed), "hash": sealed[-1].hash}

    redacted = record.canonical(record.redacted_form(sealed[3].record)) + b"\n"
    with_foreign = [*lines[:3], redacted, FOREIGN, lines[4]]
    foreign_offset = sum(len(line) for line in with_foreign[:4])

    flipped = lines[0].replace(b"staging", b"rtaging")  # one bit of one byte: s (0x73) -> r (0x72)
    spaced = lines[0].replace(b'"kind":"note"', b'"kind": "note"')
    if flipped == lines[0] or spaced == lines[0]:
        raise SystemExit("make_vectors: seq 1's line no longer holds the bytes this script damages; update the script")

    files = {
        "chain-v1.jsonl": chain,
        "chain-v1-redacted-foreign.jsonl": b"".join(with_foreign),
        "tampered-flipped-byte.jsonl": b"".join([flipped, *lines[1:]]),
        "tampered-deleted-line.jsonl": b"".join([*lines[:2], *lines[3:]]),
        "tampered-swapped-lines.jsonl": b"".join([lines[0], lines[2], lines[1], *lines[3:]]),
        "tampered-noncanonical.jsonl": b"".join([spaced, *lines[1:]]),
        "torn-tail.jsonl": chain + TORN,
    }
    expected: dict[str, Any] = {
        "format": "retained record format v1 (see docs/format.md)",
        "chain-v1.jsonl": {
            "records": [{"seq": s.record["seq"], "cd": s.cd, "hash": s.hash, "prev": s.record["prev"]} for s in sealed],
            "head": head,
            "findings": [],
        },
        "chain-v1-redacted-foreign.jsonl": {
            "head": head, "redacted_seqs": [4], "foreign_offsets": [foreign_offset], "findings": [],
        },
        "tampered-flipped-byte.jsonl": {
            "first_bad_seq": 1, "why": "hash does not recompute (seq 1); seq 2's prev still names the original hash",
        },
        "tampered-deleted-line.jsonl": {"first_bad_seq": 4, "why": "prev does not link and seq jumps from 2 to 4"},
        "tampered-swapped-lines.jsonl": {"first_bad_seq": 3, "why": "seq 3 follows seq 1: prev does not link, seq out of order"},
        "torn-tail.jsonl": {
            "head": head, "torn_tail_offset": len(chain), "torn_tail_bytes": len(TORN),
            "why": "unterminated last line: never acknowledged; set aside, then truncated",
        },
        "tampered-noncanonical.jsonl": {
            "first_bad_seq": 1,
            "why": "bytes are not canonical (a space after a colon); the parsed record still hashes correctly",
        },
    }
    _cross_check(files, expected)
    files["expected.json"] = (json.dumps(expected, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    files["README.md"] = README.encode("utf-8")
    return files


def _cross_check(files: dict[str, bytes], expected: dict[str, Any]) -> None:
    """The independent reader must find in each file what ``expected`` says, or nothing is written."""
    problems = []
    for name, want in expected.items():
        if not name.endswith(".jsonl"):
            continue
        report = logcheck.check(files[name])
        if "head" in want and (report.head_seq, report.head_hash) != (want["head"]["seq"], want["head"]["hash"]):
            problems.append(f"{name}: head {report.head_seq} {report.head_hash}, expected {want['head']}")
        if "findings" in want and not report.ok:
            problems.append(f"{name}: findings {report.summary()}, expected none")
        if "first_bad_seq" in want and (report.ok or report.findings[0].seq != want["first_bad_seq"]):
            problems.append(f"{name}: {report.summary()}, expected the first bad seq {want['first_bad_seq']}")
        for rec in want.get("records", ()):
            line = report.records[rec["seq"] - 1].record or {}
            if logcheck.content_digest(line) != rec["cd"] or line.get("hash") != rec["hash"]:
                problems.append(f"{name}: seq {rec['seq']} does not recompute with the independent reader")
        if "foreign_offsets" in want and [line.offset for line in report.foreign] != want["foreign_offsets"]:
            problems.append(f"{name}: foreign lines at {[line.offset for line in report.foreign]}")
        if "torn_tail_offset" in want and (report.torn is None or report.torn.offset != want["torn_tail_offset"]):
            problems.append(f"{name}: torn tail not found at byte {want['torn_tail_offset']}")
    if problems:
        raise SystemExit("make_vectors: the independent reader disagrees; nothing written:\n" + "\n".join(problems))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.make_vectors", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the directory to write (default tests/vectors)")
    parser.add_argument("--check", action="store_true", help="compare with the directory instead of writing; exit 1 on a difference")
    parser.add_argument("--json", action="store_true", help="print what was written or differs as one JSON document")
    args = parser.parse_args(argv)
    files = build()
    if args.check:
        differ = sorted(name for name, data in files.items()
                        if not (args.out / name).is_file() or (args.out / name).read_bytes() != data)
        print(json.dumps({"directory": str(args.out), "differ": differ}) if args.json
              else "\n".join(f"differs: {args.out / name}" for name in differ) or f"{args.out}: up to date")
        return 1 if differ else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (args.out / name).write_bytes(data)
    print(json.dumps({"directory": str(args.out), "written": sorted(files)}) if args.json
          else f"wrote {len(files)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
