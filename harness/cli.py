"""``python -m harness``: probes (the default), ``eval`` and ``bench``.

Examples:
    python -m harness --adapter=retained --cmd="python -m retained"
    python -m harness --adapter=server-memory --json
    python -m harness eval
    python -m harness bench --list
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import re
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

from .adapters import ADAPTERS, NotApplicable, get
from .probes import PROBES

USAGE_ERROR = 2
# How the user started it: from a checkout, or the console script of an installed wheel.
PROG = "python -m harness" if __package__ == "harness" else "retained-harness"


def _probe_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Probe an MCP memory server over stdio: PASS, FAIL or SKIP with evidence per probe. "
        "Subcommands: 'eval' (retrieval evaluation), 'bench' (benchmarks).",
        epilog=f'example: {PROG} --adapter=retained --cmd="python -m retained"',
    )
    parser.add_argument("--adapter", default="retained", help=f"one of {', '.join(ADAPTERS)} (default retained)")
    parser.add_argument("--cmd", help="the server command; a leading bare 'python' or 'python3' means the "
                        "interpreter running the harness; default: 'python -m retained', or for "
                        "server-memory node on a copy npm installs in the harness cache")
    parser.add_argument("--probe", action="append", metavar="NAME",
                        help=f"run only these probes (repeat or comma-separate); all: {', '.join(PROBES)}")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="probes run at once (default: 2, or 1 on one core)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--markdown", action="store_true", help="print the result table as Markdown")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the stores and server logs under DIR")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds one probe may take (default 180)")
    return parser


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _command(text: str) -> list[str]:
    """Split --cmd; a bare python or python3 first word is this interpreter, so a venv need not be active."""
    words = shlex.split(text)
    if words and words[0] in ("python", "python3"):
        words[0] = sys.executable
    return words


def run_probes(argv: list[str]) -> int:
    from .runner import markdown, render, run_all

    args = _probe_parser().parse_args(argv)
    names: list[str] = []
    for chunk in args.probe or []:
        names.extend(name.strip() for name in chunk.split(",") if name.strip())
    unknown = [name for name in names if name not in PROBES]
    if unknown:
        print(f"harness: unknown probe {unknown[0]!r}; expected one of: {', '.join(PROBES)}", file=sys.stderr)
        return USAGE_ERROR
    try:
        adapter = get(args.adapter)
        command = adapter.command(_command(args.cmd) if args.cmd else None)
    except NotApplicable as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return USAGE_ERROR
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    # A terminated harness still unwinds, so every server it started is stopped
    # (and the atexit hook in harness.mcpio kills any group left over).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    report = anyio.run(
        lambda: run_all(adapter, command, names or list(PROBES), jobs=args.jobs, keep=args.keep, timeout=args.timeout)
    )
    if args.json:
        print(json.dumps(report.as_dict(), ensure_ascii=False, indent=1))
    elif args.markdown:
        print(markdown(report))
    else:
        print(render(report))
    return 1 if report.failed else 0


def _modules(prefix: str) -> list[str]:
    # __package__ is 'harness' from a checkout and 'retained.harness' in an installed wheel.
    package = sys.modules[__package__]
    return sorted(info.name for info in pkgutil.iter_modules(package.__path__) if info.name.startswith(prefix))


def run_eval(argv: list[str]) -> int:
    """``eval``: the built-in 12-question set, then the larger retrieval eval when present.

    ``eval NAME [ARGS...]`` runs only harness/eval_NAME.py with ARGS.
    """
    present = {name.removeprefix("eval_"): name for name in _modules("eval_")}
    if argv[:1] in (["-h"], ["--help"]):
        print(f"usage: {PROG} eval [--json] | {PROG} eval NAME [ARGS...]\n"
              f"NAME is one of: {', '.join(present) or 'none'}; without NAME runs small, then locomo")
        return 0
    if argv and not argv[0].startswith("-"):
        name = argv[0].removeprefix("eval_")
        if name not in present:
            print(f"harness eval: no eval {name!r}; have: {', '.join(present) or 'none'}", file=sys.stderr)
            return USAGE_ERROR
        module = importlib.import_module(f"{__package__}.{present[name]}")
        return int(module.main(argv[1:]) or 0)
    status = 0
    for name in ("small", "locomo"):
        if name not in present:
            print(f"harness eval: eval_{name} is not present; skipped", file=sys.stderr)
            continue
        module = importlib.import_module(f"{__package__}.{present[name]}")
        status = max(status, int(module.main(list(argv)) or 0))
    return status


def run_bench(argv: list[str]) -> int:
    """Run every harness/bench_*.py module that has main(argv), or the ones named."""
    found = {}
    for name in _modules("bench_"):
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ImportError as exc:
            where = "" if __package__ == "harness" else "; run it from a checkout: python -m harness bench"
            print(f"harness bench: {name} cannot be imported ({exc}){where}; skipped", file=sys.stderr)
            continue
        if callable(getattr(module, "main", None)):
            found[name.removeprefix("bench_")] = module
    if argv[:1] in (["--list"], ["-l"]):
        print("\n".join(found) if found else "no benchmarks yet (harness/bench_*.py with main(argv))")
        return 0
    if argv[:1] in (["-h"], ["--help"]):
        print(f"usage: {PROG} bench [--list] [--only NAME,NAME] [--json] [NAME [ARGS...]]\n"
              "runs every harness/bench_NAME.py with main(argv) (or those --only names), or only NAME with ARGS")
        return 0
    if argv and not argv[0].startswith("-"):
        name = argv[0].removeprefix("bench_")
        if name not in found:
            print(f"harness bench: no benchmark {name!r}; have: {', '.join(found) or 'none'}", file=sys.stderr)
            return USAGE_ERROR
        return int(found[name].main(argv[1:]) or 0)
    if argv[:1] == ["--table"]:
        return bench_table(argv[1:])
    if not found:
        print("harness bench: no benchmarks yet (harness/bench_*.py with main(argv))", file=sys.stderr)
        return 0
    if "--only" in argv:
        # --only a,b: just those benchmarks (a published table can be made from the ones it needs).
        at = argv.index("--only")
        names = set(argv[at + 1].split(",")) if at + 1 < len(argv) else set()
        unknown = sorted(names - set(found))
        if not names or unknown:
            print(f"harness bench: --only takes names from {', '.join(found)}; not known: {', '.join(unknown) or '(none given)'}",
                  file=sys.stderr)
            return USAGE_ERROR
        found = {k: v for k, v in found.items() if k in names}
        argv = argv[:at] + argv[at + 2:]
    if "--json" in argv:
        return _bench_all_json(found, argv)
    status = 0
    for name, module in found.items():
        print(f"== bench {name}", flush=True)
        status = max(status, int(module.main(list(argv)) or 0))
    return status


def _bench_all_json(found: dict[str, Any], argv: list[str]) -> int:
    """Every benchmark with --json, one after another, each in a process of its own; one JSON document with each
    one's result.

    A process each: run in one process, a benchmark inherits the heap, the
    threads and the peak memory the ones before it left (a larger heap made
    the group-commit figure 10 % lower than the same benchmark run alone, and
    every memory figure was the harness's own peak).
    """
    import platform
    import subprocess
    import time

    from harness.figures import cpu_ticks, loadavg, steal_share

    results: dict[str, Any] = {}
    status = 0
    load_before = loadavg()
    ticks = cpu_ticks()
    top = sys.modules[__package__.split(".")[0]]
    for name in found:
        print(f"harness bench: {name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        # stderr (each benchmark's progress) goes to ours; stdout holds its JSON, the last line.
        done = subprocess.run([sys.executable, "-m", __package__, "bench", name, *argv], stdout=subprocess.PIPE,
                              cwd=Path(top.__path__[0]).parent, check=False)
        text = done.stdout.decode("utf-8", errors="replace").strip()
        try:
            results[name] = json.loads(text.splitlines()[-1]) if text else {"error": f"printed nothing (exit {done.returncode})"}
        except (json.JSONDecodeError, IndexError):
            results[name] = {"error": f"did not print JSON (exit {done.returncode})", "output": text[-2000:]}
            status = 1
        if not isinstance(results[name], dict):
            results[name] = {"error": "printed JSON that is not an object", "output": text[-2000:]}
            status = 1
        results[name]["seconds"] = round(time.monotonic() - started, 1)
        status = max(status, 1 if done.returncode else 0)
    document = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    # 1-, 5- and 15-minute load averages before the first benchmark and after the last: a
                    # figure is published only from a run whose load stayed under one per CPU.
                    "loadavg_before": load_before, "loadavg_after": loadavg(),
                    # The share of CPU time the host gave to other guests over the whole run (Linux; None elsewhere):
                    # a shared virtual machine can be busy while the load average inside it is low.
                    "steal_share": steal_share(ticks, cpu_ticks())},
        "arguments": argv,
        "benchmarks": results,
    }
    print(json.dumps(document))
    return status


# The figures each benchmark's JSON says most plainly, one table row each:
# (benchmark, what, path to the figure, path to its baseline in the same run
# or None, how the two compare, the target). A path is dotted; an integer
# part indexes a list (-1: the largest size run). "ratio": figure / baseline,
# or, with "ratio:PATH", the median of the per-round ratios the benchmark
# gives at PATH (the figure the target is judged on); "over": figure -
# baseline (whole-process times over an empty interpreter); "": no
# comparison (the figure is judged against its target alone).
TABLE_ROWS = (
    ("brief", "`retained brief` (the hook's command) at 100k records, ms", "wall_ms.script_indexed.median",
     "wall_ms.python_c_pass.median", "over", "<= +60 ms"),
    ("brief", "`python -m retained --brief` at 100k, ms", "wall_ms.module_indexed.median",
     "wall_ms.python_c_pass.median", "over", "<= +60 ms"),
    ("brief", "`hooks/session-start.sh` at 100k, ms", "wall_ms.hook_indexed.median",
     "wall_ms.python_c_pass.median", "over", "<= +60 ms"),
    ("write", "acknowledged write p50, ms (baseline: bare flock+write+fsync+pread)", "store_write_ms.p50",
     "bare_write_fsync_pread_ms.p50", "ratio", "<= 1.5x"),
    ("write", "CPU per write p50 on a tmpfs outside the system calls, us (baseline: the bare loop's whole CPU)",
     "cpu.outside_syscalls_us_p50", "cpu.bare_us_p50", "", "<= 40 us"),
    ("group", "writes/s, 16 threads on one Store, group commit on (baseline: off)",
     "on.writes_per_s.median", "off.writes_per_s.median", "ratio:ratio_writes_per_s.median", ">= 4x"),
    ("http", "writes/s, 20 MCP clients over HTTP, group commit on (baseline: off)",
     "group_commit_on.http.writes_per_s.median", "group_commit_off.http.writes_per_s.median",
     "ratio:ratio_writes_per_s_on_off.median", ">= 1x"),
    ("http", "p50 ms of those writes, on (baseline: off)", "group_commit_on.http.p50_ms.median",
     "group_commit_off.http.p50_ms.median", "ratio", "<= 1x"),
    ("http", "p99 ms of those writes, on (baseline: off)", "group_commit_on.http.p99_ms.median",
     "group_commit_off.http.p99_ms.median", "ratio", "<= 1x"),
    ("http", "p99 ms of those writes but each client's first, pooled, on (baseline: off)",
     "group_commit_on.http_after_first.p99_ms", "group_commit_off.http_after_first.p99_ms", "ratio", "<= 1x"),
    ("http", "each client's first call p50, ms, on (baseline: the later calls' p50)",
     "group_commit_on.first_call_ms.p50_ms", "group_commit_on.http_after_first.p50_ms", "ratio", ""),
    ("verify", "`retained verify` at 100k, s (baseline: bare parse + blake3 of every line)", "summary.verify_s",
     None, "ratio:summary.verify_over_parse_hash.median", "<= 2x"),
    ("verify", "`retained rebuild` at 100k, s (baseline: bare FTS5 insert of the documents, prepared before the clock)",
     "summary.rebuild_s", None, "ratio:summary.rebuild_over_fts_bare.median", "<= 1.5x"),
    ("verify", "`retained rebuild` at 100k, s (baseline: bare FTS5 build from the log: read, parse, insert)",
     "summary.rebuild_s", None, "ratio:summary.rebuild_over_fts_from_log.median", "<= 1.5x"),
    ("search", "lexical search p50 at the largest size, ms (baseline: the ranking before issue 18)",
     "bench_search.-1.search_ms.p50", "bench_search.-1.previous_ranking.search_ms.p50", "ratio", "<= 10 ms"),
    ("hybrid", "hybrid search p50 at 100k, ms (baseline: lexical alone)", "bench_hybrid.hybrid_ms.p50",
     "bench_hybrid.lexical_ms.p50", "ratio", "<= 50 ms"),
    ("hybrid", "hybrid search p50 at 100k, query embedded by the embedded model, ms (baseline: lexical alone)",
     "bench_hybrid.embedded_model.end_to_end.hybrid_ms.p50", "bench_hybrid.embedded_model.end_to_end.lexical_ms.p50",
     "ratio", "<= 50 ms"),
    ("peer", "MCP stdio write p50, 0 to 10,000 LoCoMo turns, ms (baseline: server-memory)", "retained.write_ms.p50",
     "server_memory.write_ms.p50", "ratio", ""),
    ("peer", "MCP stdio search p50 at 10,000, ms (baseline: server-memory)", "retained.search_ms.p50",
     "server_memory.search_ms.p50", "ratio", ""),
    ("peer", "MCP stdio write p50 with the related step on (it runs at the session's next read), ms (baseline: step off), "
     "median of 1,000-record windows",
     "retained.write_ms.p50", "retained_step_off.write_ms.p50", "ratio:related_step.ratio_p50.median", "<= 1.15x"),
    ("peer", "the same, p99 (baseline: step off)", "retained.write_ms.p99", "retained_step_off.write_ms.p99",
     "ratio:related_step.ratio_p99.median", "<= 1.15x"),
    ("spawn", "MCP spawn -> initialize, ms (baseline: a bare one-tool server)",
     "initialize.retained.median_ms", "initialize.bare_one_tool_mcpserver.median_ms", "ratio", ""),
    ("import", "import of JSONL, records/s (baseline: bare batched write+fsync)",
     "import_jsonl.records_per_s", "baseline_bare_batches.records_per_s", "ratio", ">= 20,000/s"),
    ("viewer", "viewer search page at 100k, server ms p50 (baseline: Store.search in process)",
     "search_page.server_ms.median", "store_search.ms.median", "ratio", ""),
)


def _dig(data: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(data, list):
            try:
                data = data[int(part)]
            except (ValueError, IndexError):
                return None
        elif isinstance(data, dict) and part in data:
            data = data[part]
        else:
            return None
    return data


def _compare(result: Any, value: Any, base: Any, how: str) -> str:
    """The table's "vs baseline" cell: a ratio (x) or a difference (+ms)."""
    if how.startswith("ratio:"):
        ratio = _dig(result, how.removeprefix("ratio:"))
        return f"{ratio:.2f}x" if isinstance(ratio, (int, float)) else ""
    if not how or not (isinstance(value, (int, float)) and isinstance(base, (int, float))):
        return ""
    if how == "over":
        return f"+{value - base:.1f}"
    return f"{value / base:.2f}x" if base else ""


_TARGET = re.compile(r"^(<=|>=) \+?([0-9][0-9,.]*)\s*(x|ms|us|/s)?")


def _verdict(value: Any, compared: str, target: str) -> str:
    """The target cell with whether this run met it: a ratio target ("<= 1.5x") is judged on the
    "vs baseline" cell, a difference ("<= +60 ms") on that cell's difference, any other on the value."""
    found = _TARGET.match(target)
    if not found:
        return target
    op, bound = found.group(1), float(found.group(2).replace(",", ""))
    unit = found.group(3) or ""
    if unit == "x" or target.startswith(("<= +", ">= +")):
        try:
            figure = float(compared.rstrip("x").lstrip("+"))
        except ValueError:
            return target
    elif isinstance(value, (int, float)):
        figure = float(value)
    else:
        return target
    met = figure <= bound if op == "<=" else figure >= bound
    return f"{target} {'met' if met else 'NOT met'}"


def bench_table(argv: list[str]) -> int:
    """``bench --table RESULTS.json``: a Markdown table of the headline figures of a ``bench --json`` run."""
    if not argv:
        print("usage: python -m harness bench --table RESULTS.json (the output of bench --json)", file=sys.stderr)
        return USAGE_ERROR
    document = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    benches = document.get("benchmarks", {})
    machine = document.get("machine", {})
    load = "".join(f", load {machine[k][0]} {when}" for k, when in (("loadavg_before", "before"), ("loadavg_after", "after"))
                   if machine.get(k))
    if machine.get("steal_share") is not None:
        load += f", {machine['steal_share']:.0%} of the CPU time taken by the host"
    print(f"Measured {document.get('date')} on {machine.get('cpus')} CPUs "
          f"({machine.get('platform')}{load}); command: `python -m harness bench --json`\n")
    print("| figure | value | baseline, same run | vs baseline | target |")
    print("|---|---:|---:|---:|---|")
    for name, what, path, base_path, how, target in TABLE_ROWS:
        result = benches.get(name)
        value = _dig(result, path)
        if value is None:
            continue
        base = _dig(result, base_path) if base_path else None
        compared = _compare(result, value, base, how)
        print(f"| {what} | {value} | {'' if base is None else base} | {compared} | {_verdict(value, compared, target)} |")
    for name, result in benches.items():
        if "error" in result:
            print(f"| {name}: failed | {result['error']} | | | |")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["eval"]:
        return run_eval(argv[1:])
    if argv[:1] == ["bench"]:
        return run_bench(argv[1:])
    if argv[:1] == ["probe"]:
        argv = argv[1:]
    return run_probes(argv)
