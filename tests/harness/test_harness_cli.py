"""``python -m harness``: usage errors, the bench and eval dispatchers, the 12-question eval."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from harness import cli, eval_small

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, check=False)


def test_unknown_probe_is_a_usage_error_that_names_the_probes() -> None:
    done = _run("--probe", "no_such_probe")
    assert done.returncode == 2
    assert "ack_readback" in done.stderr and done.stdout == ""


def test_unknown_adapter_is_a_usage_error() -> None:
    done = _run("--adapter", "nope")
    assert done.returncode == 2
    assert "server-memory" in done.stderr


def test_bench_dispatch_finds_modules_with_main(capsys) -> None:
    assert cli.run_bench(["--list"]) == 0
    listed = capsys.readouterr().out.split()
    expected = sorted(name.removeprefix("bench_") for name in cli._modules("bench_"))
    assert set(listed) <= set(expected)
    assert cli.run_bench(["no_such_bench"]) == 2


def test_eval_dispatch_refuses_an_unknown_eval() -> None:
    assert cli.run_eval(["no_such_eval"]) == 2


def test_small_eval_finds_every_question_that_shares_words_with_its_memory() -> None:
    """Lexical search must find the six questions that share vocabulary; paraphrases are reported, not asserted."""
    result = eval_small.run()
    assert result["shared"] == {"questions": 6, "hit@1": result["shared"]["hit@1"], "hit@3": 6}
    assert result["all"]["questions"] == 12
    assert 0 <= result["paraphrase"]["hit@3"] <= 6


def test_a_failing_probe_exits_1_with_json_evidence() -> None:
    """End to end through the CLI: a server whose verify sees nothing fails tamper_detect."""
    script = ROOT / "tests" / "harness_fixtures" / "blind_verify.py"
    done = _run("--probe", "tamper_detect", "--json", "--cmd", shlex.join([sys.executable, str(script)]))
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["counts"] == {"PASS": 0, "FAIL": 1, "SKIP": 0}
    (probe,) = report["probes"]
    assert probe["name"] == "tamper_detect" and probe["status"] == "FAIL"
    assert "verify did not name it" in probe["evidence"]
