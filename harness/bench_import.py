"""Batch append throughput: ``retained import`` and ``Store.write_batch`` in records/s.

Measured in one run, each next to its baselines:

- import of a generated plain JSONL file (validation of the whole file, then
  batches of 2,000: one lock, one write, one fsync, one read-back each);
- import of our own export of that store (its chain walked first, then every
  record re-appended with its provenance);
- ``Store.write_batch`` with the same records prepared in memory;
- baseline: the same bytes written by a bare loop in the same batches
  (``os.write`` + ``os.fsync`` + ``os.pread``), the floor for any batch append;
- contrast: ``Store.write`` one record at a time (one fsync each), on a sample.

Target (DESIGN): >= 20,000 records/s with one fsync per batch.

    python -m harness bench import [--records 100000] [--json]
    python harness/bench_import.py --records 5000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from harness.figures import loadavg
from retained import Store
from retained.data import imports as transfer

TARGET_RECORDS_PER_S = 20_000
WORDS = ("deploy target staging production release note user prefers dark mode editor keybindings "
         "meeting moved thursday budget approved migration index rebuild latency search").split()


def _item(i: int) -> dict[str, Any]:
    words = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(24))
    return {"text": f"{words} #{i}", "scope": f"proj-{i % 17}", "author": f"agent-{i % 5}", "n": i}


def _rate(n: int, seconds: float) -> float:
    return round(n / seconds) if seconds > 0 else 0.0


class _Clock:
    """Wall and CPU seconds of this process: on a loaded machine the CPU rate is the steadier figure."""

    def __enter__(self) -> _Clock:
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall0
        self.cpu = time.process_time() - self.cpu0

    def figures(self, n: int) -> dict[str, Any]:
        return {"records_per_s": _rate(n, self.wall), "seconds": round(self.wall, 3),
                "records_per_cpu_s": _rate(n, self.cpu), "cpu_seconds": round(self.cpu, 3)}


def _bare(path: Path, lines: list[bytes], batch: int) -> float:
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o600)
    try:
        t0 = time.perf_counter()
        for start in range(0, len(lines), batch):
            data = b"".join(lines[start : start + batch])
            offset = os.fstat(fd).st_size
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            assert os.pread(fd, len(data), offset) == data
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def bench(records: int, batch: int = transfer.BATCH_RECORDS, single: int = 200, workdir: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = Path(tmp)
        source = root / "notes.jsonl"
        with open(source, "wb") as f:
            for i in range(records):
                f.write(orjson.dumps(_item(i)) + b"\n")

        Store(root / "warm").write("load the lock module and the encoder before any clock starts")

        # 1. import of plain JSONL (validation included).
        a = Store(root / "a")
        with _Clock() as validate:
            plan = transfer.plan_import(source)
        with _Clock() as append:
            result = transfer.run_import(a, plan, batch=batch)
        assert result["written"] == records
        imp = {"wall": validate.wall + append.wall, "cpu": validate.cpu + append.cpu}

        # 2. import of our own export (chain walked first).
        export = root / "export.jsonl"
        transfer.export_to_file(a.log, export)
        b = Store(root / "b")
        with _Clock() as own:
            result = transfer.import_file(b, export, batch=batch)
        assert result["written"] == records

        # 3. Store.write_batch with the records prepared in memory.
        items = [{"text": it["text"], "scope": it["scope"], "fields": {"author": it["author"], "n": it["n"]}}
                 for it in map(_item, range(records))]
        c = Store(root / "c")
        with _Clock() as wb:
            for start in range(0, records, batch):
                c.write_batch(items[start : start + batch])

        # Baseline: the same bytes, the same batches, a bare write+fsync+pread loop.
        lines = [line.raw for line in c.log.scan()]
        bare_s = _bare(root / "bare.jsonl", lines, batch)

        # Contrast: one fsync per record.
        d = Store(root / "d")
        t0 = time.perf_counter()
        for it in items[:single]:
            d.write(it["text"], scope=it["scope"], fields=it["fields"])
        single_s = time.perf_counter() - t0
        for s in (a, b, c, d):
            s.close()
        log_bytes = sum(len(x) for x in lines)

    return {
        "bench": "import",
        "records": records,
        "batch": batch,
        "log_bytes": log_bytes,
        "import_jsonl": {"records_per_s": _rate(records, imp["wall"]), "seconds": round(imp["wall"], 3),
                         "records_per_cpu_s": _rate(records, imp["cpu"]), "cpu_seconds": round(imp["cpu"], 3),
                         "validate": validate.figures(records), "append": append.figures(records)},
        "import_retained_export": own.figures(records),
        "store_write_batch": wb.figures(records),
        "baseline_bare_batches": {"records_per_s": _rate(records, bare_s), "seconds": round(bare_s, 3),
                                  "what": "same bytes and batches: os.write + os.fsync + os.pread"},
        "contrast_store_write_one_by_one": {"records_per_s": _rate(single, single_s), "records": single},
        "target_records_per_s": TARGET_RECORDS_PER_S,
        "meets_target_wall": {
            "import_jsonl": records / imp["wall"] >= TARGET_RECORDS_PER_S,
            "import_retained_export": records / own.wall >= TARGET_RECORDS_PER_S,
            "store_write_batch": records / wb.wall >= TARGET_RECORDS_PER_S,
        },
        "cpus": os.cpu_count(),
        "loadavg": loadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness bench import",
        description="batch append records/s: import (JSONL and our export) and Store.write_batch, next to a bare loop",
        epilog="example: python -m harness bench import --records 100000 --json",
    )
    p.add_argument("--records", type=int, default=100_000, help="records per measurement (default 100000)")
    p.add_argument("--batch", type=int, default=transfer.BATCH_RECORDS, help="records per batch (default 2000)")
    p.add_argument("--dir", type=Path, help="make the temporary stores under DIR")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args, _ = p.parse_known_args(argv)
    r = bench(args.records, args.batch, workdir=args.dir)
    if args.json:
        print(json.dumps(r))
    else:
        print(
            f"import ({r['records']} records, batches of {r['batch']}): "
            f"jsonl {r['import_jsonl']['records_per_s']:,.0f}/s ({r['import_jsonl']['records_per_cpu_s']:,.0f}/cpu-s), "
            f"own export {r['import_retained_export']['records_per_s']:,.0f}/s ({r['import_retained_export']['records_per_cpu_s']:,.0f}/cpu-s), "
            f"write_batch {r['store_write_batch']['records_per_s']:,.0f}/s ({r['store_write_batch']['records_per_cpu_s']:,.0f}/cpu-s) | "
            f"bare batches {r['baseline_bare_batches']['records_per_s']:,.0f}/s | "
            f"one by one {r['contrast_store_write_one_by_one']['records_per_s']:,.0f}/s "
            f"(target >= {TARGET_RECORDS_PER_S:,}/s); load average {r['loadavg']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
