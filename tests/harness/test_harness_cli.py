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


def test_bench_table_is_made_from_a_real_bench_json_run(tmp_path, capsys) -> None:
    """The README's performance table comes from ``bench --json``: a real (small) group-commit run, then ``--table``."""
    from harness import bench_group

    status = cli._bench_all_json({"group": bench_group}, ["--json", "--threads", "2", "--per-thread", "5", "--runs", "1"])
    document = capsys.readouterr().out
    assert status == 0
    results = tmp_path / "results.json"
    results.write_text(document, encoding="utf-8")
    group = json.loads(document)["benchmarks"]["group"]
    assert cli.bench_table([str(results)]) == 0
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if "16 threads on one Store" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == str(group["on"]["writes_per_s"]["median"])
    assert cells[2] == str(group["off"]["writes_per_s"]["median"])
    assert cells[3] == f"{group['ratio_writes_per_s']['median']:.2f}x"
    met = group["ratio_writes_per_s"]["median"] >= 4
    assert cells[4] == f">= 4x {'met' if met else 'NOT met'}"
    # Rows of benchmarks that did not run are left out, not filled with blanks.
    assert "verify" not in table and "brief" not in table
    (pair,) = group["pairs"]  # one run each way: one pair, its ratio the headline's
    assert pair["ratio"] == round(pair["on_writes_per_s"] / pair["off_writes_per_s"], 3) == round(
        group["ratio_writes_per_s"]["median"], 3)
    assert group["undisturbed_pairs"] in (0, 1)
    steal = json.loads(document)["machine"]["steal_share"]
    assert (steal is not None) == sys.platform.startswith("linux")
    if steal is not None:
        assert f"{steal:.0%} of the CPU time taken by the host" in table.splitlines()[0]


def test_steal_share_is_the_hosts_part_of_the_cpu_time_between_two_readings() -> None:
    """``/proc/stat``'s eighth field over the sum of the first eight; None without two readings or with no time between."""
    from harness.figures import cpu_ticks, steal_share

    assert steal_share([0] * 8, [10, 0, 5, 80, 0, 0, 0, 5]) == 0.05
    assert steal_share([1] * 8, [1] * 8) is None
    assert steal_share(None, [1] * 8) is None
    before = cpu_ticks()
    if sys.platform.startswith("linux"):
        assert before is not None and len(before) == 8
        later = [t + 1 for t in before]
        assert steal_share(before, later) == 0.125
    else:
        assert before is None


def test_bench_table_differences_and_list_paths(tmp_path, capsys) -> None:
    """``over`` rows print a difference; a path may index a list (the largest size of bench search)."""
    document = {"date": "2026-12-01", "machine": {"cpus": 2, "platform": "Linux"}, "benchmarks": {
        "brief": {"wall_ms": {"script_indexed": {"median": 30.5}, "python_c_pass": {"median": 10.0}}},
        "search": {"bench_search": [{"search_ms": {"p50": 9.0}, "previous_ranking": {"search_ms": {"p50": 3.0}}},
                                    {"search_ms": {"p50": 4.0}, "previous_ranking": {"search_ms": {"p50": 2.0}}}]},
    }}
    results = tmp_path / "results.json"
    results.write_text(json.dumps(document), encoding="utf-8")
    assert cli.bench_table([str(results)]) == 0
    table = capsys.readouterr().out
    assert "| 30.5 | 10.0 | +20.5 | <= +60 ms met |" in table
    assert "| 4.0 | 2.0 | 2.00x | <= 10 ms met |" in table
    # A target missed says so in its cell: a difference over its bound, a value over its bound.
    document["benchmarks"]["brief"]["wall_ms"]["script_indexed"]["median"] = 80.5
    document["benchmarks"]["search"]["bench_search"][1]["search_ms"]["p50"] = 12.0
    results.write_text(json.dumps(document), encoding="utf-8")
    assert cli.bench_table([str(results)]) == 0
    table = capsys.readouterr().out
    assert "| 80.5 | 10.0 | +70.5 | <= +60 ms NOT met |" in table
    assert "| 12.0 | 2.0 | 6.00x | <= 10 ms NOT met |" in table


def test_the_readme_table_is_the_one_bench_table_makes_from_the_stored_run(capsys) -> None:
    """The README's performance table is ``bench --table`` of the stored ``bench --json`` document, byte for byte."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    head = "<!-- produced by: python -m harness bench --table "
    start = readme.index(head)
    source = readme[start + len(head): readme.index(" -->", start)]
    table = readme[readme.index("-->", start) + 3: readme.index("<!-- end of the produced table -->")].strip()
    assert cli.bench_table([str(ROOT / source)]) == 0
    assert capsys.readouterr().out.strip() == table


def test_bench_only_runs_the_named_benchmarks_and_refuses_unknown_names(capsys) -> None:
    """``bench --only group --json``: one document holding only that benchmark, and the run's load before and after."""
    argv = ["--only", "group", "--json", "--threads", "2", "--per-thread", "5", "--runs", "1"]
    assert cli.run_bench(argv) == 0
    document = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(document["benchmarks"]) == ["group"]
    assert document["benchmarks"]["group"]["every_acknowledged_record_present"] is True
    assert "--only" not in document["arguments"]
    assert len(document["machine"]["loadavg_before"]) == 3 and len(document["machine"]["loadavg_after"]) == 3
    if sys.platform.startswith("linux"):
        # What the host took of the CPU over the run: what moves a figure on a shared virtual machine.
        assert 0.0 <= document["machine"]["steal_share"] <= 1.0
    assert cli.run_bench(["--only", "group,no_such", "--json"]) == 2
    assert "no_such" in capsys.readouterr().err
