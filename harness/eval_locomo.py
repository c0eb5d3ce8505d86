"""Retrieval evaluation on LoCoMo through the real store and index.

Each LoCoMo conversation becomes one store (a temporary directory); each
dialogue turn is written with ``Store.write`` as a record with the fields
``speaker``, ``date`` and ``dia_id``; each question is asked with
``Index.search``. A question is a hit at k when any of its evidence turns is
among the top k results (1,982 questions have evidence).

    python harness/eval_locomo.py [--data DIR] [--json]
    python harness/eval_locomo.py --ablation      # the steps, on bare FTS5 tables

``--ablation`` measures what each step of the query and index design
contributes, one change at a time, on plain in-memory FTS5 tables built the
same way (no log): default tokenizer; porter; stop words; speaker and date
indexed; column weights. The default run is the product path.

The data is read from ``../shared/data/locomo`` (beside the repository) and
never copied into it: see that directory's README for its source and terms.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retained import query
from retained.index import COVERAGE_WEIGHT, RERANK_N, TOKENIZER, Index
from retained.store import Store

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo"
KS = (1, 3, 5, 10)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def load(data: Path) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Turns grouped by conversation, and the questions that have evidence."""
    convs: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    with open(data / "memories.jsonl", encoding="utf-8") as f:
        for line in f:
            m = json.loads(line)
            convs[m["conv"]].append(m)
    with open(data / "questions.jsonl", encoding="utf-8") as f:
        questions = [q for q in map(json.loads, f) if q["evidence"]]
    return dict(convs), questions


class Scorer:
    """recall@k overall and per category, and per-query latency."""

    def __init__(self) -> None:
        self.hits = {k: 0 for k in KS}
        self.by_cat: dict[int, dict[str, int]] = collections.defaultdict(lambda: {"n": 0, **{f"r@{k}": 0 for k in KS}})
        self.n = 0
        self.latencies_ms: list[float] = []
        self.cpu_ms: list[float] = []

    def add(self, q: dict[str, Any], ranked: list[str], ms: float) -> None:
        evidence = set(q["evidence"])
        cat = self.by_cat[q["category"]]
        cat["n"] += 1
        self.n += 1
        self.latencies_ms.append(ms)
        for k in KS:
            if evidence & set(ranked[:k]):
                self.hits[k] += 1
                cat[f"r@{k}"] += 1

    def report(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)
        return {
            "questions": self.n,
            "recall": {f"r@{k}": round(self.hits[k] / self.n, 3) for k in KS},
            "by_category": {
                f"{c} {CATEGORIES.get(c, '?')}": {"n": v["n"], **{f"r@{k}": round(v[f"r@{k}"] / v["n"], 3) for k in KS}}
                for c, v in sorted(self.by_cat.items())
            },
            "latency_ms": {
                "p50": round(statistics.median(lat), 3),
                "p95": round(lat[int(0.95 * (len(lat) - 1))], 3),
                "max": round(lat[-1], 3),
            },
            "cpu_ms_p50": round(statistics.median(self.cpu_ms), 3) if self.cpu_ms else None,
        }


def run(data: Path = DEFAULT_DATA, *, k: int = 10, workdir: Path | None = None) -> dict[str, Any]:
    """The product path: real stores, real records, ``Index.search``."""
    convs, questions = load(data)
    scorer = Scorer()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        write_s = 0.0
        for conv, turns in convs.items():
            t0 = time.perf_counter()
            seq_to_dia: dict[int, str] = {}
            with Store(Path(tmp) / conv) as store:
                for m in turns:
                    proof = store.write(
                        m["text"], fields={"speaker": m["speaker"], "date": m["date"], "dia_id": m["dia_id"]}
                    )
                    seq_to_dia[proof["seq"]] = m["dia_id"]
                write_s += time.perf_counter() - t0
                index = Index(store.log)
                index.catch_up()
                for q in (q for q in questions if q["conv"] == conv):
                    t1 = time.perf_counter()
                    c1 = time.process_time()
                    reply = index.search(q["question"], k=k)
                    ms = (time.perf_counter() - t1) * 1000
                    scorer.cpu_ms.append((time.process_time() - c1) * 1000)
                    scorer.add(q, [seq_to_dia[r["seq"]] for r in reply["results"]], ms)
                index.close()
    out = scorer.report()
    out["path"] = "Store.write + Index.search"
    out["records"] = sum(len(t) for t in convs.values())
    out["write_s"] = round(write_s, 2)
    return out


# -- ablation: each step on bare FTS5 tables ----------------------------------


def _plain_query(text: str) -> str | None:
    words = re.findall(r"\w+", text)
    return " OR ".join(f'"{w}"' for w in words) or None


def _ablate(convs: dict[str, list[dict[str, Any]]], questions: list[dict[str, Any]], tokenizer: str,
            fields: list[str], weights: list[float], build: Any, coverage: bool = False) -> dict[str, Any]:
    dbs = {}
    for conv, turns in convs.items():
        db = sqlite3.connect(":memory:")
        cols = ["text", *fields]
        db.execute(f"CREATE VIRTUAL TABLE f USING fts5({', '.join(cols)}, content='', tokenize='{tokenizer}')")
        db.executemany(
            f"INSERT INTO f (rowid, {', '.join(cols)}) VALUES (?{', ?' * len(cols)})",
            [(i, query.segment(m["text"]), *(m[x] for x in fields)) for i, m in enumerate(turns)],
        )
        dbs[conv] = (db, [m["dia_id"] for m in turns])
    scorer = Scorer()
    w = ", ".join(map(str, weights))
    for q in questions:
        db, ids = dbs[q["conv"]]
        t0 = time.perf_counter()
        expr = build(q["question"])
        limit = RERANK_N if coverage else 10
        rows = db.execute(
            f"SELECT rowid, bm25(f, {w}) FROM f WHERE f MATCH ? ORDER BY bm25(f, {w}) LIMIT {limit}", (expr,)
        ).fetchall() if expr else []
        if coverage and rows:
            # The same re-ordering Index._top does: bm25 minus a weight per
            # distinct query term the turn contains.
            cand = {r[0] for r in rows}
            cover: collections.Counter[int] = collections.Counter()
            for term in query.terms(q["question"]):
                for (rowid,) in db.execute("SELECT rowid FROM f WHERE f MATCH ?", (term,)):
                    if rowid in cand:
                        cover[rowid] += 1
            rows = sorted(rows, key=lambda r: (r[1] - COVERAGE_WEIGHT * cover[r[0]], -r[0]))[:10]
        scorer.add(q, [ids[r[0]] for r in rows], (time.perf_counter() - t0) * 1000)
    rep = scorer.report()
    return {"recall": rep["recall"], "latency_ms": rep["latency_ms"]}


def ablation(data: Path = DEFAULT_DATA) -> list[dict[str, Any]]:
    """Recall of each step, one change at a time."""
    convs, questions = load(data)
    no_stop = lambda s: query.build(s, stop_words=frozenset(), irregular=False)  # noqa: E731
    plain = lambda s: query.build(s, irregular=False)  # noqa: E731
    sd = ["speaker", "date"]
    steps: list[tuple[Any, ...]] = [
        ("default tokenizer, question words OR-ed", "unicode61", [], [1], _plain_query, False),
        ("+ query builder (punctuation split, dedup), no stop words, no stemming", "unicode61", [], [1], no_stop, False),
        ("+ porter stemming", TOKENIZER, [], [1], no_stop, False),
        ("stop words without porter", "unicode61 remove_diacritics 2", [], [1], plain, False),
        ("porter + stop words", TOKENIZER, [], [1], plain, False),
        ("+ speaker indexed", TOKENIZER, ["speaker"], [1, 1], plain, False),
        ("+ speaker and date indexed", TOKENIZER, sd, [1, 1, 1], plain, False),
        ("  weights text 1, speaker 0.5, date 0.5", TOKENIZER, sd, [1, 0.5, 0.5], plain, False),
        ("  weights text 1, speaker 2, date 1", TOKENIZER, sd, [1, 2, 1], plain, False),
        ("  weights text 1, speaker 1, date 3", TOKENIZER, sd, [1, 1, 3], plain, False),
        ("+ irregular verb and plural forms in the query", TOKENIZER, sd, [1, 1, 1], query.build, False),
        ("+ coverage re-ordering of the bm25 top 50 (without irregular forms)", TOKENIZER, sd, [1, 1, 1], plain, True),
        ("+ both (what Index.search does)", TOKENIZER, sd, [1, 1, 1], query.build, True),
    ]
    out = []
    for label, tok, fields, weights, build, coverage in steps:
        r = _ablate(convs, questions, tok, fields, weights, build, coverage)
        out.append({"step": label, **r})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="example: python harness/eval_locomo.py --json")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory with memories.jsonl and questions.jsonl")
    p.add_argument("--ablation", action="store_true", help="measure each step on bare FTS5 tables instead")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    args = p.parse_args(argv)
    if not (args.data / "questions.jsonl").exists():
        sys.stderr.write(f"eval_locomo: no questions.jsonl in {args.data}; pass --data\n")
        return 2
    if args.ablation:
        steps = ablation(args.data)
        if args.json:
            print(json.dumps({"ablation": steps}))
        else:
            for s in steps:
                r = s["recall"]
                print(f"{s['step']:72s} r@1 {r['r@1']:.3f} r@3 {r['r@3']:.3f} r@5 {r['r@5']:.3f} "
                      f"r@10 {r['r@10']:.3f}  p50 {s['latency_ms']['p50']:.2f} ms")
        return 0
    rep = run(args.data)
    if args.json:
        print(json.dumps(rep))
    else:
        r = rep["recall"]
        print(f"{rep['questions']} questions over {rep['records']} records ({rep['path']})")
        print("overall      " + "  ".join(f"{k} {v:.3f}" for k, v in r.items()))
        for cat, v in rep["by_category"].items():
            print(f"{cat:14s} n={v['n']:4d}  " + "  ".join(f"r@{k} {v[f'r@{k}']:.3f}" for k in KS))
        lat = rep["latency_ms"]
        print(f"search latency p50 {lat['p50']:.2f} ms  p95 {lat['p95']:.2f} ms  max {lat['max']:.2f} ms"
              f"  (process cpu p50 {rep['cpu_ms_p50']:.2f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
