"""docs/format.md is enough to check a log: its reference checker agrees with `retained verify`.

The checker is taken from the page as written (standard library and blake3
only, no retained import) and run against the page's own worked example, the
shared test vectors, and real stores the library wrote and the test then
damaged in several hundred seeded ways.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from retained import Store
from retained.core import chain
from retained.core.log import Log

from ..conftest import VECTORS

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "format.md"


def _checker() -> types.ModuleType:
    text = PAGE.read_text(encoding="utf-8")
    (code,) = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert "import retained" not in code and "from retained" not in code
    module = types.ModuleType("format_doc_checker")
    exec(compile(code, str(PAGE), "exec"), module.__dict__)  # noqa: S102 - the page's own code, run as written
    return module


def _library(path: Path) -> tuple[tuple[int, str], list[tuple]]:
    report = chain.verify_file(Log(path)).to_dict()
    findings = [(f["kind"], f["seq"], f["offset"]) for f in report["findings"] if f["kind"] != "redaction_pending"]
    return (report["head"]["seq"], report["head"]["hash"]), sorted(findings, key=repr)


def _doc(checker: types.ModuleType, data: bytes) -> tuple[tuple[int, str], list[tuple]]:
    head, findings = checker.check(data)
    return head, sorted(findings, key=repr)


def test_the_worked_example_recomputes() -> None:
    checker = _checker()
    text = PAGE.read_text(encoding="utf-8")
    line = next(x for x in text.splitlines() if x.startswith('{"client":{"name":"retained-cli"') and '"seq":1' in x)
    obj = json.loads(line)
    cd = re.search(r"Its `cd` is `([0-9a-f]{64})`", text).group(1)
    assert checker.digest({k: v for k, v in obj.items() if k not in ("seq", "prev", "hash")}) == cd
    assert checker.digest({"cd": cd, "prev": obj["prev"], "seq": 1}) == obj["hash"]
    assert checker.classify(line.encode()) == ("record", 1, obj["hash"], obj["prev"], None)
    shown = re.search(r"the digest of\n`(\{.*?\})`", text, re.S).group(1).replace("\n", " ")
    assert checker.canonical(json.loads(shown)).encode() == shown.encode()


def test_the_checker_runs_from_the_command_line(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.write("hello")
    code = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.S | re.M)[0]
    script = tmp_path / "check.py"
    script.write_text(code, encoding="utf-8")
    ok = subprocess.run([sys.executable, str(script), str(tmp_path / "s" / "log.jsonl")], capture_output=True,
                        text=True, timeout=60, check=False)
    assert ok.returncode == 0 and ok.stdout.startswith("head seq 1 ")
    log = tmp_path / "s" / "log.jsonl"
    log.write_bytes(log.read_bytes().replace(b"hello", b"hellO"))
    bad = subprocess.run([sys.executable, str(script), str(log)], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 1 and "FINDING hash_mismatch seq 1 at byte 0" in bad.stdout


def test_the_checker_reproduces_the_format_vectors() -> None:
    checker = _checker()
    expected = json.loads((VECTORS / "expected.json").read_text(encoding="utf-8"))
    for name, want in expected.items():
        if not name.endswith(".jsonl"):
            continue
        (seq, h), findings = checker.check((VECTORS / name).read_bytes())
        if "head" in want:
            assert (seq, h) == (want["head"]["seq"], want["head"]["hash"]), name
        if "findings" in want:
            assert findings == [], name
        if "first_bad_seq" in want:
            assert findings and findings[0][1] == want["first_bad_seq"], (name, findings)


def _store(root: Path) -> bytes:
    """A log with floats of every spelling, escapes, unicode, a retraction, a redaction and a checkpoint."""
    rng = random.Random(7)
    with Store(root) as s:
        for i in range(14):
            s.write(f"note {i}: é 😀 \x07 \"q\" \\ / \u2028", scope="p" if i % 2 else None,
                    fields={"f": rng.random() * 10 ** rng.randint(-9, 21), "n": rng.randint(-2**63, 2**64 - 1),
                            "l": [1.5e-5, 1e-5, 1e16, 9999999999999998.0, -0.0, 1e-7, None, True], "k": {"Z": 1, "a": 2, "é": 3}})
        s.checkpoint("half way", summary="seven notes")
        s.forget([2], "wrong")
        s.redact(3, "pasted by mistake")
    return (root / "log.jsonl").read_bytes()


def _damage(rng: random.Random, base: bytes) -> bytes:
    data = bytearray(base)
    lines = bytes(data).split(b"\n")[:-1]
    op = rng.randrange(7)
    if op == 0:
        data[rng.randrange(len(data))] = rng.randrange(256)
    elif op == 1:
        del lines[rng.randrange(len(lines))]
        data = bytearray(b"\n".join(lines) + b"\n")
    elif op == 2:
        i = rng.randrange(len(lines) - 1)
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
        data = bytearray(b"\n".join(lines) + b"\n")
    elif op == 3:
        data += b'{"from":"another program"}\n' + rng.choice([b"", b'{"seq":5', b"[1,2]\n", b"NaN\n", b'"\\ud800"\n',
                                                               b'{"n":18446744073709551616}\n', b"1e400\n"])
    elif op == 4:
        i = rng.randrange(len(data))
        data[i:i] = rng.choice([b" ", b"\\u00e9", b"1", b'"', b"\n", b"e"])
    elif op == 5:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[rng.randrange(len(lines))])
        data = bytearray(b"\n".join(lines) + b"\n")
    else:
        for _ in range(3):
            data[rng.randrange(len(data))] = rng.randrange(32, 127)
    return bytes(data)


def test_the_checker_agrees_with_the_library_on_a_real_log_and_on_every_damage(tmp_path: Path) -> None:
    checker = _checker()
    base = _store(tmp_path / "store")
    assert _doc(checker, base) == _library(tmp_path / "store") and _doc(checker, base)[1] == []
    rng = random.Random(20261129)
    for trial in range(400):
        data = _damage(rng, base)
        where = tmp_path / f"t{trial}"
        where.mkdir()
        (where / "log.jsonl").write_bytes(data)
        assert _doc(checker, data) == _library(where), f"trial {trial}"
        shutil.rmtree(where)
