"""Verify and rebuild at 10k and 100k records: seconds and peak memory, to show memory flat in log size.

For each size a valid chained log is written in one pass (lines sealed with
``record.seal`` exactly as an append would, without the per-record fsync);
each text is 40 words of a 31-word vocabulary, or with ``--texts turns`` a
conversation turn (harness/turns.py), whose larger vocabulary and shorter
lines change what FTS5 and the per-line work cost against each other.
Each measurement runs in a fresh child process so its peak RSS is its own:

- ``rebuild``: ``Store.rebuild(workers=...)`` (``Index.rebuild``
  through the store) with one worker per CPU, as ``retained rebuild`` asks,
  from no index;
- ``verify``: ``Store.verify(workers=...)``, what ``retained verify`` runs
  (one worker per CPU): the chain walk plus the two-way index check;
- ``verify_here``: ``Store.verify()`` as a library call runs it, in its own
  process (the zero-worker case of ``retained.core.pool``);
- ``chain``: the chain walk alone in one process (``chain.walk(Log.scan())``);
- ``chain_parallel``: the chain walk as ``retained verify`` runs it
  (``chain.verify_file``: byte ranges classified in one worker process per
  CPU, linked in order);
- ``verify_walk``: the previous ``Store.verify`` path, in the same run: the
  one-process walk, then the same index check;
- ``stats``: ``Store.stats(workers=...)`` (``retained stats``; the viewer's Health
  page), counted in the workers that classify, alternated with verify's
  floor too (``stats_over_parse_hash``);
- baselines in the same run: ``parse`` reads the log and ``orjson.loads``
  every line (the floor for anything that looks at each record), and
  ``import`` is a child that only imports retained (the RSS floor);
- rebuild's two floors, each alternated with it, several rounds:
  ``fts_bare`` inserts the same documents, prepared before the clock, into a
  contentless FTS5 table of the same tokenizer in one transaction (the
  strict floor: SQLite's own work only), and ``fts_from_log`` is the
  smallest program that makes that table from the log file, timed whole
  (read the lines, parse each, take its documents, insert them in one
  transaction; no line checked, no other table).

Imports happen before the clock starts, as in a long-running process.

CPU seconds include the worker processes (``RUSAGE_CHILDREN``), and RSS is the
parent's and, separately, the largest worker's. Seconds and RSS come from a run without tracing; the Python heap peak from a
second run under ``tracemalloc`` (slower, so its time is not reported).
Targets (DESIGN): verify <= 1.5 s, rebuild <= 6 s at 100k; memory flat.

    python -m harness bench verify [--records 100000] [--texts words|turns] [--json]
    python harness/bench_verify.py --records 20000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.figures import loadavg, spread
from harness.turns import locomo_turns
from retained.core import record

REPO = Path(__file__).resolve().parent.parent
TARGET_S = {"verify": 1.5, "rebuild": 6.0}
# DESIGN: verify <= 2x a bare parse + blake3 of every line; rebuild <= 1.5x a bare FTS5 build of the same documents.
TARGET_RATIO = {"verify": 2.0, "rebuild": 1.5}
CLIENT = {"name": "bench", "version": "0"}
WORDS = ("deploy target staging production release note user prefers dark mode editor keybindings meeting moved "
         "thursday budget approved migration index rebuild latency search alice bob carol dave").split()

CHILD = r"""
import json, resource, sys, time, tracemalloc
op, directory, trace = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
import orjson
from retained import Store, audit
from retained.core import chain, pool
from retained.core.log import Log
WORKERS = pool.cpu_workers()  # what the command line passes
from retained.index.writer import Index  # noqa: F401 - imported before the clock, as a running server has it
if trace:
    tracemalloc.start()
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
c0 = cpu()
t0 = time.perf_counter()
out = {}
if op == "import":
    pass
elif op == "parse":
    n = 0
    with open(directory + "/log.jsonl", "rb") as f:
        for line in f:
            orjson.loads(line)
            n += 1
    out["lines"] = n
elif op == "parse_hash":
    # The bare floor of verify: parse every line and blake3 it, nothing else.
    import blake3
    n = 0
    with open(directory + "/log.jsonl", "rb") as f:
        for line in f:
            orjson.loads(line)
            blake3.blake3(line).hexdigest()
            n += 1
    out["lines"] = n
elif op == "fts_bare":
    # The bare floor of rebuild: the same documents (prepared before the
    # clock) into a contentless FTS5 table of the same tokenizer, one transaction.
    import sqlite3
    from retained.index.documents import documents
    from retained.index.writer import TOKENIZER
    with open(directory + "/log.jsonl", "rb") as f:
        docs = [(i + 1, *documents(orjson.loads(line))) for i, line in enumerate(f)]
    path = directory + "/bare-fts.sqlite3"
    c0, t0 = cpu(), time.perf_counter()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"CREATE VIRTUAL TABLE fts USING fts5(text, body, fields, content='', tokenize='{TOKENIZER}')")
    db.execute("BEGIN")
    db.executemany("INSERT INTO fts (rowid, text, body, fields) VALUES (?, ?, ?, ?)", docs)
    db.execute("COMMIT")
    db.close()
    import os
    os.unlink(path)
    out["lines"] = len(docs)
elif op == "fts_from_log":
    # The second floor of rebuild: the smallest program that makes the same
    # FTS5 table from the log file, timed whole: read the lines, parse each,
    # take its documents, insert them in one transaction (no check of any line).
    import sqlite3
    from retained.index.documents import documents
    from retained.index.writer import TOKENIZER
    path = directory + "/bare-fts.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"CREATE VIRTUAL TABLE fts USING fts5(text, body, fields, content='', tokenize='{TOKENIZER}')")
    db.execute("BEGIN")
    seen = [0]
    def docs(f):
        for n, line in enumerate(f, 1):
            seen[0] = n
            yield (n, *documents(orjson.loads(line)))
    with open(directory + "/log.jsonl", "rb") as f:
        db.executemany("INSERT INTO fts (rowid, text, body, fields) VALUES (?, ?, ?, ?)", docs(f))
    db.execute("COMMIT")
    db.close()
    import os
    os.unlink(path)
    out["lines"] = seen[0]
elif op == "chain":
    r = chain.walk(Log(directory).scan())
    out["records"], out["findings"] = r.records, len(r.findings)
elif op == "chain_parallel":
    r = chain.verify_file(Log(directory), workers=WORKERS)
    out["records"], out["findings"] = r.records, len(r.findings)
elif op == "verify_walk":
    s = Store(directory)
    r = chain.walk(s.log.scan(), s.log.path.name).to_dict()
    r["index"] = audit.verify_index(s, r, None, None)
    out["records"], out["findings"] = r["records"], len(r["findings"])
elif op == "verify":
    r = Store(directory).verify(workers=WORKERS)
    out["records"], out["findings"] = r["records"], len(r["findings"])
elif op == "verify_here":
    r = Store(directory).verify()
    out["records"], out["findings"] = r["records"], len(r["findings"])
elif op == "stats":
    r = Store(directory).stats(workers=WORKERS)
    out["records"], out["findings"] = r["records"], r["findings"]
elif op == "rebuild":
    r = Store(directory).rebuild(workers=WORKERS)
    out["rebuild"] = {k: v for k, v in r.items() if isinstance(v, (int, float, str))}
out["seconds"] = time.perf_counter() - t0
out["cpu_seconds"] = cpu() - c0
out["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["worker_max_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
if trace:
    out["tracemalloc_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
print(json.dumps(out))
"""


def build_log(directory: Path, n: int, texts: str = "words") -> int:
    """A chained log of ``n`` records: 40 words of a 31-word vocabulary each (``words``), or conversation turns (``turns``)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    prev = record.ZERO_HASH
    turns = locomo_turns(n)[0] if texts == "turns" else None
    with open(directory / "log.jsonl", "wb") as f:
        for seq in range(1, n + 1):
            if turns is not None:
                speaker, _, said = turns[seq - 1].partition(": ")
                content = record.make_content(text=said, scope=f"proj-{seq % 23}", fields={"speaker": speaker, "n": seq})
            else:
                words = " ".join(WORDS[(seq * 7 + j * 3) % len(WORDS)] for j in range(40))
                content = record.make_content(
                    text=f"{words} #{seq}", scope=f"proj-{seq % 23}", fields={"author": WORDS[seq % len(WORDS)], "n": seq}
                )
            sealed = record.seal(content, seq=seq, prev=prev, ts="2026-11-29T12:00:00.000000Z", client=CLIENT)
            f.write(sealed.line)
            prev = sealed.hash
    return (directory / "log.jsonl").stat().st_size


def _child(op: str, directory: Path, trace: bool) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, op, str(directory), "1" if trace else "0"],
        capture_output=True, text=True, cwd=REPO, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{op} child failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def measure(op: str, directory: Path) -> dict[str, Any]:
    plain = _child(op, directory, False)
    traced = _child(op, directory, True)
    out = {"seconds": round(plain["seconds"], 3), "cpu_seconds": round(plain["cpu_seconds"], 3), "max_rss_mb": round(plain["max_rss_mb"], 1),
           "worker_max_rss_mb": round(plain["worker_max_rss_mb"], 1), "tracemalloc_peak_mb": round(traced["tracemalloc_peak_mb"], 2)}
    for key in ("records", "findings", "lines"):
        if key in plain:
            out[key] = plain[key]
    return out



def bench(sizes: list[int], workdir: Path | None = None, rounds: int = 3, texts: str = "words") -> dict[str, Any]:
    runs = []
    ratios: dict[str, list[float]] = {"verify_over_parse_hash": [], "rebuild_over_fts_bare": [], "rebuild_over_fts_from_log": [],
                                      "stats_over_parse_hash": []}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        floor = _child("import", Path(tmp), False)
        for n in sizes:
            d = Path(tmp) / f"s{n}"
            t0 = time.perf_counter()
            log_bytes = build_log(d, n, texts)
            generate_s = time.perf_counter() - t0
            row: dict[str, Any] = {"records": n, "log_bytes": log_bytes, "generate_s": round(generate_s, 2)}
            row["parse_baseline"] = measure("parse", d)
            row["chain"] = measure("chain", d)
            row["chain_parallel"] = measure("chain_parallel", d)
            try:
                row["rebuild"] = measure("rebuild", d)
            except RuntimeError as exc:  # no index code in this tree: report verify only
                row["rebuild"] = {"error": str(exc)}
            for p in d.glob("index.sqlite3*"):
                row.setdefault("index_bytes", 0)
                row["index_bytes"] += p.stat().st_size
            row["verify_walk"] = measure("verify_walk", d)
            row["verify"] = measure("verify", d)
            row["verify_here"] = measure("verify_here", d)
            row["stats"] = measure("stats", d)
            if n == sizes[-1]:
                # Each against its bare floor, alternately (A B A B), several rounds.
                order = ("parse_hash", "verify", "fts_bare", "rebuild", "fts_from_log", "stats")
                timed: dict[str, list[float]] = {op: [] for op in order}
                for _ in range(rounds):
                    for op in order:
                        timed[op].append(_child(op, d, False)["seconds"])
                    ratios["verify_over_parse_hash"].append(timed["verify"][-1] / timed["parse_hash"][-1])
                    ratios["rebuild_over_fts_bare"].append(timed["rebuild"][-1] / timed["fts_bare"][-1])
                    ratios["rebuild_over_fts_from_log"].append(timed["rebuild"][-1] / timed["fts_from_log"][-1])
                    ratios["stats_over_parse_hash"].append(timed["stats"][-1] / timed["parse_hash"][-1])
                row["against_the_floor_s"] = {op: spread(v) for op, v in timed.items()}
            runs.append(row)
    big = runs[-1]
    verdict = {
        "verify_s": big["verify"]["seconds"], "verify_cpu_s": big["verify"]["cpu_seconds"], "verify_target_s": TARGET_S["verify"],
        "verify_walk_s": big["verify_walk"]["seconds"], "verify_walk_cpu_s": big["verify_walk"]["cpu_seconds"],
        "verify_here_s": big["verify_here"]["seconds"], "verify_here_cpu_s": big["verify_here"]["cpu_seconds"],
        "rebuild_s": big["rebuild"].get("seconds"), "rebuild_cpu_s": big["rebuild"].get("cpu_seconds"),
        "rebuild_target_s": TARGET_S["rebuild"],
        "verify_over_parse_hash": spread(ratios["verify_over_parse_hash"]),
        "verify_over_parse_hash_target": TARGET_RATIO["verify"],
        "rebuild_over_fts_bare": spread(ratios["rebuild_over_fts_bare"]),
        "rebuild_over_fts_bare_target": TARGET_RATIO["rebuild"],
        "rebuild_over_fts_from_log": spread(ratios["rebuild_over_fts_from_log"]),
        "stats_s": big["stats"]["seconds"], "stats_cpu_s": big["stats"]["cpu_seconds"],
        "stats_over_parse_hash": spread(ratios["stats_over_parse_hash"]),
    }
    if len(runs) > 1:
        small = runs[0]
        for op in ("chain", "chain_parallel", "verify", "rebuild"):
            if "tracemalloc_peak_mb" in small[op] and "tracemalloc_peak_mb" in big[op]:
                verdict[f"{op}_heap_peak_growth"] = round(big[op]["tracemalloc_peak_mb"] / max(small[op]["tracemalloc_peak_mb"], 1e-6), 2)
                verdict[f"{op}_rss_growth"] = round(big[op]["max_rss_mb"] / small[op]["max_rss_mb"], 2)
        verdict["records_growth"] = round(big["records"] / small["records"], 1)
    return {
        "bench": "verify",
        "runs": runs,
        "baseline_import_retained": {"seconds": round(floor["seconds"], 3), "max_rss_mb": round(floor["max_rss_mb"], 1)},
        "summary": verdict,
        "method": "each operation in a fresh child process; time and RSS untraced, heap peak from a tracemalloc run; "
        "verify and rebuild against their bare floors alternately, several rounds",
        "texts": texts if texts == "words" else f"turns: {locomo_turns(1)[1]}",
        "cpus": os.cpu_count(),
        "loadavg": loadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness bench verify",
        description="verify and rebuild: seconds and peak memory at a tenth of N and at N records",
        epilog="example: python -m harness bench verify --records 100000 --json",
    )
    p.add_argument("--records", type=int, default=100_000, help="the large size; the small one is a tenth (default 100000)")
    p.add_argument("--dir", type=Path, help="make the temporary stores under DIR")
    p.add_argument("--rounds", type=int, default=3, help="rounds of verify and rebuild against their floors (default 3)")
    p.add_argument("--texts", choices=("words", "turns"), default="words",
                   help="each record's text: 40 words of a 31-word vocabulary (default, as published) or a "
                   "conversation turn (LoCoMo's, or generated of the same shape; harness/turns.py)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args, _ = p.parse_known_args(argv)
    sizes = [max(1, args.records // 10), args.records]
    r = bench(sizes, args.dir, args.rounds, args.texts)
    if args.json:
        print(json.dumps(r))
    else:
        for row in r["runs"]:
            parts = [f"{row['records']:>7} records ({row['log_bytes'] / 1e6:.1f} MB):"]
            for op in ("parse_baseline", "chain", "chain_parallel", "verify_walk", "verify", "verify_here", "rebuild"):
                m = row[op]
                if "seconds" in m:
                    parts.append(f"{op} {m['seconds']:.2f} s (cpu {m['cpu_seconds']:.2f} s) rss {m['max_rss_mb']:.0f} MB "
                                 f"heap {m['tracemalloc_peak_mb']:.1f} MB;")
                else:
                    parts.append(f"{op} unavailable;")
            print(" ".join(parts))
        s = r["summary"]
        print(f"targets at {r['runs'][-1]['records']}: verify {s['verify_s']} s, cpu {s['verify_cpu_s']} s (<= {s['verify_target_s']} s; "
              f"previous path {s['verify_walk_s']} s, cpu {s['verify_walk_cpu_s']} s), "
              f"rebuild {s['rebuild_s']} s (<= {s['rebuild_target_s']}); load average {r['loadavg']}")
        v, b, fl = s["verify_over_parse_hash"], s["rebuild_over_fts_bare"], s["rebuild_over_fts_from_log"]
        print(f"against the floor (min-median-max): verify / bare parse+blake3 {v['min']}-{v['median']}-{v['max']} "
              f"(<= {TARGET_RATIO['verify']}), rebuild / bare FTS5 build {b['min']}-{b['median']}-{b['max']} "
              f"(<= {TARGET_RATIO['rebuild']}), rebuild / FTS5 build from the log {fl['min']}-{fl['median']}-{fl['max']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
