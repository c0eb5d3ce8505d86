"""Lexical search latency, rebuild and verify time at 10k and 100k records.

Builds a store whose log holds N valid chained records (LoCoMo dialogue turns
replicated under distinct speaker names, so the vocabulary grows with N like a
real store's; the lines are sealed with ``record.seal`` exactly as an append
would, written in one pass without the per-record fsync), rebuilds the index,
then asks the LoCoMo questions (names swapped to match a replica) through
``Index.search`` with k=10: p50/p95 per query, match count included, and
recall@5/@10 of the question's evidence turns in its own replica (the other
replicas are near-identical distractors). Also times ``Index.rebuild`` and
``Index.verify`` at that size.

    python harness/bench_search.py [--sizes 10000,100000] [--queries 500] [--no-compare] [--json]

``--compare`` (the default; ``--no-compare`` skips it) asks every question twice on the same index, once with the
ranking before issue 18 (bm25 and coverage: `PREVIOUS`) and once with the
defaults, alternating which goes first, and reports both and their ratio.

Targets (DESIGN): p50 <= 10 ms and p95 <= 50 ms at 100k; rebuild <= 6 s;
verify <= 1.5 s. A benchmark, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retained.core import record
from retained.core.log import Log
from retained.index.search import RANKING
from retained.index.writer import Index

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo"
CLIENT = {"name": "bench", "version": "0"}
# The ranking as it was before issue 18: bm25 and coverage, none of the conversation or recency steps.
PREVIOUS = dataclasses.replace(RANKING, reply_credit=0.0, prev_credit=0.0, name_factor=1.0, recency_band=0.0, rarity=0.0,
                               session_credit=0.0)


def build_log(directory: Path, n: int, data: Path) -> list[tuple[str, set[int]]]:
    """Write a valid chained log of n records; returns the questions to ask, with their evidence seqs."""
    with open(data / "memories.jsonl", encoding="utf-8") as f:
        turns = [json.loads(line) for line in f]
    with open(data / "questions.jsonl", encoding="utf-8") as f:
        questions = [json.loads(line) for line in f]
    speakers = sorted({t["speaker"] for t in turns})
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    prev = record.ZERO_HASH
    rng = random.Random(7)
    with open(directory / "log.jsonl", "wb") as f:
        for seq in range(1, n + 1):
            t = turns[(seq - 1) % len(turns)]
            replica = (seq - 1) // len(turns)
            # Replica r renames each speaker, so names (the commonest query
            # words) keep their real frequency instead of growing with n.
            text = t["text"]
            speaker = t["speaker"]
            if replica:
                for s in speakers:
                    text = text.replace(s, f"{s}{replica}")
                speaker = f"{speaker}{replica}"
            content = record.make_content(
                text=text,
                kind="note",
                scope=f"conv-{t['conv']}",
                fields={"speaker": speaker, "date": t["date"], "dia_id": t["dia_id"]},
            )
            sealed = record.seal(content, seq=seq, prev=prev, ts="2026-11-29T12:00:00.000000Z", client=CLIENT)
            f.write(sealed.line)
            prev = sealed.hash
    replicas = max(1, n // len(turns))
    place = {(t["conv"], t["dia_id"]): i for i, t in enumerate(turns)}
    asked = []
    for q in questions:
        if not q["evidence"]:
            continue
        r = rng.randrange(replicas)
        text = q["question"]
        if r:
            for s in speakers:
                text = text.replace(s, f"{s}{r}")
        evidence = {r * len(turns) + place[(q["conv"], e)] + 1 for e in q["evidence"]}
        asked.append((text, {s for s in evidence if s <= n}))
    rng.shuffle(asked)
    return asked


def _ask(index: Index, asked: list[tuple[str, set[int]]], rankings: dict[str, Any]) -> dict[str, Any]:
    """Every question under each ranking, alternating which goes first; latency, matches and recall per ranking."""
    lat: dict[str, list[float]] = {name: [] for name in rankings}
    cpu: dict[str, list[float]] = {name: [] for name in rankings}
    matches: dict[str, list[int]] = {name: [] for name in rankings}
    hits = {name: {5: 0, 10: 0} for name in rankings}
    judged = 0
    names = list(rankings)
    for i, (q, evidence) in enumerate(asked):
        judged += bool(evidence)
        for name in names[i % len(names):] + names[: i % len(names)]:
            index.ranking = rankings[name]
            t0, c0 = time.perf_counter(), time.process_time()
            reply = index.search(q, k=10)
            lat[name].append((time.perf_counter() - t0) * 1000)
            cpu[name].append((time.process_time() - c0) * 1000)
            matches[name].append(reply["total_matches"])
            if evidence:
                got = [r["seq"] for r in reply["results"]]
                for k in hits[name]:
                    hits[name][k] += bool(evidence & set(got[:k]))
    index.ranking = RANKING
    out = {}
    for name in names:
        la, cp = sorted(lat[name]), sorted(cpu[name])
        out[name] = {
            "search_ms": {"p50": round(statistics.median(la), 3), "p95": round(la[int(0.95 * (len(la) - 1))], 3),
                          "max": round(la[-1], 3)},
            # Process CPU time: the same numbers on a quiet machine, and a
            # fair reading on a shared one where wall time includes waiting.
            "search_cpu_ms": {"p50": round(statistics.median(cp), 3), "p95": round(cp[int(0.95 * (len(cp) - 1))], 3)},
            "total_matches": {"p50": int(statistics.median(matches[name])), "max": max(matches[name])},
            # Recall against the question's own replica, among every other
            # replica's near-identical turns: a hard case for lexical search.
            "recall": {f"r@{k}": round(v / judged, 3) for k, v in hits[name].items()} if judged else None,
        }
    return out


def bench(n: int, queries: int, data: Path, workdir: Path | None = None, compare: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        d = Path(tmp) / "store"
        t0 = time.perf_counter()
        asked = build_log(d, n, data)[:queries]
        gen_s = time.perf_counter() - t0
        log = Log(d)
        index = Index(log)
        t0, c0 = time.perf_counter(), time.process_time()
        index.rebuild()
        rebuild_s, rebuild_cpu = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        findings = index.verify()
        verify_s, verify_cpu = time.perf_counter() - t0, time.process_time() - c0
        for q, _ in asked[:20]:  # warm the page cache as a long-running server would be
            index.search(q)
        runs = _ask(index, asked, {"previous": PREVIOUS, "default": RANKING} if compare else {"default": RANKING})
        index.close()
        out = {
            "records": n,
            "log_bytes": log.size(),
            "index_bytes": sum(p.stat().st_size for p in d.glob("index.sqlite3*")),
            "queries": len(asked),
            **runs["default"],
            "rebuild_cpu_s": round(rebuild_cpu, 3),
            "verify_cpu_s": round(verify_cpu, 3),
            "rebuild_s": round(rebuild_s, 3),
            "verify_s": round(verify_s, 3),
            "verify_findings": len(findings),
            "generate_s": round(gen_s, 2),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
        if compare:
            out["previous_ranking"] = runs["previous"]
            out["p50_over_previous"] = round(runs["default"]["search_ms"]["p50"] / runs["previous"]["search_ms"]["p50"], 2)
            out["cpu_p50_over_previous"] = round(
                runs["default"]["search_cpu_ms"]["p50"] / runs["previous"]["search_cpu_ms"]["p50"], 2)
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="lexical search, rebuild and verify timings",
                                epilog="example: python harness/bench_search.py --sizes 100000 --json")
    p.add_argument("--sizes", default="10000,100000", help="comma-separated record counts")
    p.add_argument("--queries", type=int, default=500, help="questions asked per size")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--compare", action=argparse.BooleanOptionalAction, default=True,
                   help="also the ranking before issue 18, interleaved, same index: the baseline (default on)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    out = [bench(int(s), args.queries, args.data, compare=args.compare) for s in args.sizes.split(",")]
    if args.json:
        print(json.dumps({"bench_search": out}))
    else:
        for r in out:
            s = r["search_ms"]
            c = r["search_cpu_ms"]
            print(f"{r['records']:>7} records: search p50 {s['p50']:.2f} ms p95 {s['p95']:.2f} ms max {s['max']:.2f} ms"
                  f" (cpu p50 {c['p50']:.2f} p95 {c['p95']:.2f});"
                  f" (matches p50 {r['total_matches']['p50']}, max {r['total_matches']['max']});"
                  f" rebuild {r['rebuild_s']:.2f} s (cpu {r['rebuild_cpu_s']:.2f});"
                  f" verify {r['verify_s']:.2f} s (cpu {r['verify_cpu_s']:.2f}, {r['verify_findings']} findings);"
                  f" index {r['index_bytes'] / 1e6:.1f} MB for a {r['log_bytes'] / 1e6:.1f} MB log;"
                  f" recall {r['recall']}")
            if "previous_ranking" in r:
                pr = r["previous_ranking"]
                print(f"         previous ranking, same run: search p50 {pr['search_ms']['p50']:.2f} ms"
                      f" p95 {pr['search_ms']['p95']:.2f} ms (cpu p50 {pr['search_cpu_ms']['p50']:.2f});"
                      f" recall {pr['recall']}; default / previous p50 {r['p50_over_previous']}"
                      f" (cpu {r['cpu_p50_over_previous']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
