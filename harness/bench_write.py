"""Acknowledged write latency: ``Store.write`` against a bare write + fsync + pread loop.

Both run in the same process and the same directory, alternately (one store
write, then one bare round, and so on), so disk and machine noise hit both
alike. The bare round writes the very bytes of the line the store just
acknowledged with one ``os.write`` on an ``O_APPEND`` descriptor, ``os.fsync``
and ``os.pread`` of the same bytes: the floor an acknowledged append cannot go
below. Target (DESIGN): p50 ratio <= 1.25.

    python -m harness bench write [--records 2000] [--json]
    python harness/bench_write.py --records 200

A benchmark, not a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retained import Store  # noqa: E402

TARGET_P50_RATIO = 1.25
TEXT = "the deploy target for proj-a moved from staging to production after the 0.3 release; " * 2


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def _summary(ms: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(ms), 4), "p99": round(_pct(ms, 0.99), 4), "max": round(max(ms), 4)}


def bench(records: int, workdir: Path | None = None, warmup: int = 20) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        directory = Path(tmp) / "store"
        store = Store(directory)
        bare_path = directory / "bare.jsonl"
        store.write("warm the log and its directory entry")
        fd = os.open(bare_path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o600)
        store_ms: list[float] = []
        bare_ms: list[float] = []
        line_bytes = 0
        try:
            for i in range(warmup + records):
                t0 = time.perf_counter_ns()
                proof = store.write(f"{TEXT} #{i}", scope="bench")
                t1 = time.perf_counter_ns()
                line = store.log.read_at(proof["offset"], proof["length"])
                line_bytes = len(line)
                t2 = time.perf_counter_ns()
                offset = os.fstat(fd).st_size
                os.write(fd, line)
                os.fsync(fd)
                back = os.pread(fd, len(line), offset)
                t3 = time.perf_counter_ns()
                assert back == line
                if i >= warmup:
                    store_ms.append((t1 - t0) / 1e6)
                    bare_ms.append((t3 - t2) / 1e6)
        finally:
            os.close(fd)
            store.close()
    s, b = _summary(store_ms), _summary(bare_ms)
    return {
        "bench": "write",
        "records": records,
        "line_bytes": line_bytes,
        "store_write_ms": s,
        "bare_write_fsync_pread_ms": b,
        "ratio_p50": round(s["p50"] / b["p50"], 3),
        "ratio_p99": round(s["p99"] / b["p99"], 3),
        "target_ratio_p50": TARGET_P50_RATIO,
        "meets_target": s["p50"] / b["p50"] <= TARGET_P50_RATIO,
        "method": "alternating store.write and a bare O_APPEND write+fsync+pread of the same bytes, same directory, same run",
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness bench write",
        description="acknowledged write p50/p99 against a bare write+fsync+pread loop, measured alternately",
        epilog="example: python -m harness bench write --records 2000 --json",
    )
    p.add_argument("--records", type=int, default=2000, help="writes measured on each side (default 2000)")
    p.add_argument("--dir", type=Path, help="make the temporary store under DIR (the filesystem matters)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args, _ = p.parse_known_args(argv)
    result = bench(args.records, args.dir)
    if args.json:
        print(json.dumps(result))
    else:
        s, b = result["store_write_ms"], result["bare_write_fsync_pread_ms"]
        print(
            f"write ({result['records']} records, {result['line_bytes']}-byte lines): "
            f"store p50 {s['p50']:.3f} ms p99 {s['p99']:.3f} ms | bare p50 {b['p50']:.3f} ms p99 {b['p99']:.3f} ms | "
            f"ratio p50 {result['ratio_p50']:.2f} (target <= {TARGET_P50_RATIO}) p99 {result['ratio_p99']:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
