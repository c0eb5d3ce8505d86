"""The viewer's timeline and search pages at 100,000 records, against the CLI's search in the same run.

Builds a store of N records (LoCoMo dialogue turns replicated as
``bench_search`` builds them: a real vocabulary and real questions), indexes
it, starts a real ``retained view`` subprocess on 127.0.0.1 and asks it, over
one keep-alive HTTP connection, for:

- the timeline's newest page (50 records),
- the timeline filtered by one scope, and paged deep (``before`` a random seq),
- the search page for each question (k=10),
- and once a round the health page (no target: it reads the whole log),

reading the server's own time from the ``Server-Timing`` header each page
carries (and the client's wall time around the request). Interleaved with
each search page, the same question goes to ``Store.search`` in this process
(the library call under the CLI and MCP search), and every few rounds to the
``retained search`` console script (a whole process). Several rounds;
min/median/max of the round medians, and the pooled p50/p95/max.

Target (DESIGN): timeline and search pages answer in <= 150 ms server time
at 100k records. A benchmark, not a test: numbers depend on the machine.

    python -m harness bench viewer --records 100000 --rounds 5 --json
    python -m harness bench viewer --store /tmp/viewer-bench   # reuse a built store
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness.bench_search import DEFAULT_DATA, build_log  # noqa: E402
from harness.figures import stop  # noqa: E402

TARGET_MS = 150.0
WAIT_S = 120.0
PAGE_LIMIT = 50


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "min": round(ordered[0], 2),
        "median": round(statistics.median(ordered), 2),
        "p95": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 2),
        "max": round(ordered[-1], 2),
    }


def _rounds(per_round: list[list[float]]) -> dict[str, float]:
    medians = [statistics.median(r) for r in per_round if r]
    return {"min": round(min(medians), 2), "median": round(statistics.median(medians), 2), "max": round(max(medians), 2)}


def prepare(directory: Path, records: int, data: Path) -> list[str]:
    """The store (built, or reused when it holds ``records`` records) and the questions to ask."""
    from retained import Store

    store_dir = directory / "store"
    questions_file = directory / "questions.json"
    if questions_file.exists() and (store_dir / "index.sqlite3").exists():
        with Store(store_dir) as store:
            if store.head()["seq"] == records:
                return json.loads(questions_file.read_text(encoding="utf-8"))
    if store_dir.exists():
        shutil.rmtree(store_dir)
    print(f"bench_viewer: building {records} records in {store_dir} ...", file=sys.stderr, flush=True)
    asked = build_log(store_dir, records, data)
    with Store(store_dir) as store:
        store.rebuild()
    questions = [q for q, _ in asked]
    questions_file.write_text(json.dumps(questions), encoding="utf-8")
    return questions


class ViewerProcess:
    """``retained view --port 0 --json`` on the store, and one keep-alive connection to it."""

    def __init__(self, store_dir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "retained", "view", "--port", "0", "--json", "--dir", str(store_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env, cwd=REPO,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("retained view did not start")
        self.port = int(json.loads(line)["port"])
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT_S)

    def get(self, path: str) -> tuple[float, float, bytes]:
        """(server ms from Server-Timing, client wall ms, body) of one GET."""
        t0 = time.perf_counter()
        self.conn.request("GET", path, headers={"Host": f"127.0.0.1:{self.port}"})
        reply = self.conn.getresponse()
        body = reply.read()
        wall = (time.perf_counter() - t0) * 1000
        if reply.status != 200:
            raise RuntimeError(f"GET {path}: {reply.status} {body[:300]!r}")
        server = float((reply.getheader("server-timing") or "app;dur=nan").split("dur=", 1)[1])
        return server, wall, body

    def stop(self) -> None:
        self.conn.close()
        stop(self.proc)
        if self.proc.stdout:
            self.proc.stdout.close()


def _console_search(store_dir: Path, query: str) -> float:
    """Whole-process wall ms of ``retained search QUERY`` (the console script beside this interpreter)."""
    script = Path(sys.executable).with_name("retained")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "retained"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_")}
    t0 = time.perf_counter()
    proc = subprocess.run([*argv, "search", query, "--dir", str(store_dir), "--json"], capture_output=True,
                          env=env, timeout=WAIT_S, check=False)
    wall = (time.perf_counter() - t0) * 1000
    if proc.returncode != 0:
        raise RuntimeError(f"retained search exited {proc.returncode}: {proc.stderr[-300:]!r}")
    return wall


def bench(store_dir: Path, questions: list[str], rounds: int, per_round: int, cli_per_round: int,
          seed: int = 11) -> dict[str, Any]:
    from retained import Store

    rng = random.Random(seed)
    store = Store(store_dir)
    head = store.head()["seq"]
    scopes = sorted(store.stats()["by_scope"])
    viewer = ViewerProcess(store_dir)
    kinds = ("timeline", "timeline_scope", "timeline_deep", "search_page")
    server: dict[str, list[list[float]]] = {k: [] for k in kinds}
    wall: dict[str, list[list[float]]] = {k: [] for k in kinds}
    library: list[list[float]] = []
    console: list[float] = []
    console_search_page: list[float] = []
    health: list[float] = []
    sizes: dict[str, int] = {}
    try:
        for q in questions[:10]:  # warm both sides as a running viewer would be
            viewer.get("/search?" + urlencode({"q": q}))
            store.search(q)
        viewer.get("/")
        for r in range(rounds):
            for k in kinds:
                server[k].append([])
                wall[k].append([])
            library.append([])
            picks = rng.sample(questions, min(per_round, len(questions)))
            for i, q in enumerate(picks):
                paths = {
                    "timeline": "/",
                    "timeline_scope": "/?" + urlencode({"scope": rng.choice(scopes)}),
                    "timeline_deep": "/?" + urlencode({"before": rng.randrange(PAGE_LIMIT + 1, head)}),
                    "search_page": "/search?" + urlencode({"q": q}),
                }
                # Alternate the order so neither side always runs on a warmer cache.
                order = list(kinds) if i % 2 == 0 else list(reversed(kinds))
                for k in order:
                    s, w, body = viewer.get(paths[k])
                    server[k][r].append(s)
                    wall[k][r].append(w)
                    sizes[k] = len(body)
                t0 = time.perf_counter()
                store.search(q)
                library[r].append((time.perf_counter() - t0) * 1000)
            health.append(viewer.get("/health")[0])
            for q in picks[:cli_per_round]:
                console.append(_console_search(store_dir, q))
                console_search_page.append(viewer.get("/search?" + urlencode({"q": q}))[1])
    finally:
        viewer.stop()
        store.close()
    pooled_server = {k: _summary([x for r in v for x in r]) for k, v in server.items()}
    result: dict[str, Any] = {
        "records": head,
        "rounds": rounds,
        "requests_per_round": per_round,
        "page_bytes": sizes,
        "target_server_ms": TARGET_MS,
    }
    for k in kinds:
        result[k] = {
            "server_ms": pooled_server[k],
            "server_ms_round_medians": _rounds(server[k]),
            "wall_ms": _summary([x for r in wall[k] for x in r]),
        }
    result["store_search"] = {"ms": _summary([x for r in library for x in r]), "ms_round_medians": _rounds(library)}
    result["console_search"] = {"wall_ms": _summary(console) if console else None}
    # No target: the health page makes one pass over the whole log (Store.stats).
    result["health_page"] = {"server_ms": _summary(health)}
    result["ratios"] = {
        "search_page_server_over_store_search_median": round(
            pooled_server["search_page"]["median"] / result["store_search"]["ms"]["median"], 2),
        "search_page_wall_over_console_search_wall_median": round(
            statistics.median(console_search_page) / statistics.median(console), 3) if console else None,
    }
    result["within_target"] = {
        k: pooled_server[k]["median"] <= TARGET_MS and pooled_server[k]["p95"] <= TARGET_MS for k in kinds
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness bench viewer", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of requests (at least 3)")
    parser.add_argument("--requests", type=int, default=40, help="questions per round (each: 4 pages + Store.search)")
    parser.add_argument("--cli-runs", type=int, default=3, help="console-script searches per round (whole processes)")
    parser.add_argument("--store", metavar="DIR", help="build the store here, or reuse it if it holds --records records")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args, _ = parser.parse_known_args(argv)
    tmp = None
    if args.store:
        base = Path(args.store)
        base.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="bench-viewer-")
        base = Path(tmp)
    try:
        questions = prepare(base, args.records, args.data)
        result = bench(base / "store", questions, max(3, args.rounds), args.requests, args.cli_runs)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"viewer at {result['records']:,} records, {result['rounds']} rounds x {result['requests_per_round']} requests "
          f"(server time from Server-Timing; target <= {TARGET_MS:.0f} ms):")
    for k in ("timeline", "timeline_scope", "timeline_deep", "search_page"):
        s, rm, w = result[k]["server_ms"], result[k]["server_ms_round_medians"], result[k]["wall_ms"]
        print(f"  {k:15} server p50 {s['median']:7.2f} p95 {s['p95']:7.2f} max {s['max']:7.2f} ms "
              f"(round medians {rm['min']:.2f}/{rm['median']:.2f}/{rm['max']:.2f}); wall p50 {w['median']:.2f} ms; "
              f"{'ok' if result['within_target'][k] else 'OVER TARGET'}")
    ls = result["store_search"]["ms"]
    print(f"  Store.search    in-process p50 {ls['median']:7.2f} p95 {ls['p95']:7.2f} max {ls['max']:7.2f} ms")
    cs = result["console_search"]["wall_ms"]
    if cs:
        print(f"  retained search console script wall p50 {cs['median']:.1f} ms (min {cs['min']:.1f}, max {cs['max']:.1f})")
    hp = result["health_page"]["server_ms"]
    print(f"  health page (one pass over the log, no target) server p50 {hp['median']:.0f} ms")
    print(f"  ratios: {result['ratios']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
