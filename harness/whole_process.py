"""What the whole-process benchmarks share (``bench brief``, ``bench capture``): a filled store, a timed run, an install, the figures over ``python -c pass``.

Each such benchmark times whole processes, alternating with ``python -c
pass`` in the same run (the interpreter's own start-up, the floor), and
reports wall time and the child's CPU time (user + system, from getrusage):
on a loaded machine the CPU time is the steadier figure, the wall time is
what a host waits for.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.figures import loadavg

REPO = Path(__file__).resolve().parent.parent
RUN_WAIT_S = 60.0
FLOOR = "python_c_pass"


def run(argv: list[str], env: dict[str, str], stdin: bytes | None = None) -> tuple[float, float, bytes]:
    """(wall ms, child CPU ms, stdout) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, input=stdin if stdin is not None else b"", capture_output=True,
                          timeout=RUN_WAIT_S, check=False)
    wall = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-500:]}")
    return wall, cpu, proc.stdout


def fill(store: Any, records: int, make: Callable[[int], dict[str, Any]], batch: int = 2000) -> None:
    """Write ``make(seq)`` for seq 1 .. ``records`` into ``store`` through ``write_batch``, ``batch`` items at a time.

    An item of kind ``checkpoint`` (the store's own kind) goes through
    ``store.checkpoint(text, summary=...)`` in its place instead.
    """
    items: list[dict[str, Any]] = []
    for seq in range(1, records + 1):
        item = make(seq)
        if item.get("kind") == "checkpoint":
            if items:
                store.write_batch(items)
                items = []
            store.checkpoint(item["text"], summary=item.get("summary"))
        else:
            items.append(item)
        if items and (len(items) == batch or seq == records):
            store.write_batch(items)
            items = []


def summary(values: list[float]) -> dict[str, float]:
    """Median, p90, min and max of one measurement's runs (ms, one decimal)."""
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {
        "median": round(statistics.median(ordered), 1),
        "p90": round(p90, 1),
        "min": round(ordered[0], 1),
        "max": round(ordered[-1], 1),
    }


def install(into: Path, what: str) -> Path:
    """A fresh venv with a non-editable install of this checkout; returns its interpreter (``what`` names the caller)."""
    subprocess.run([sys.executable, "-m", "venv", str(into)], check=True, timeout=300)
    bindir = into / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    print(f"{what}: pip install {REPO} into {into} (non-editable) ...", file=sys.stderr, flush=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(REPO)], check=True, timeout=900)
    return python


def against_pass(wall: dict[str, list[float]], cpu: dict[str, list[float]], target_ms: float) -> dict[str, Any]:
    """Every case's runs, and its median over ``python -c pass``'s (wall and CPU), with the target and the load."""
    timed = [name for name in wall if name != FLOOR]
    floor_wall, floor_cpu = statistics.median(wall[FLOOR]), statistics.median(cpu[FLOOR])
    return {
        "wall_ms": {name: summary(v) for name, v in wall.items()},
        "cpu_ms": {name: summary(v) for name, v in cpu.items()},
        "over_python_c_pass_ms": {name: round(statistics.median(wall[name]) - floor_wall, 1) for name in timed},
        "cpu_over_python_c_pass_ms": {name: round(statistics.median(cpu[name]) - floor_cpu, 1) for name in timed},
        "target_over_python_c_pass_ms": target_ms,
        "meets_target": {name: statistics.median(wall[name]) - floor_wall <= target_ms for name in timed},
        "load_average": loadavg(),
        "cpus": os.cpu_count(),
    }


def say(what: str, result: dict[str, Any]) -> str:
    """One line: the floor, then each case over it, wall / CPU, the target and the load."""
    wall, cpu = result["wall_ms"][FLOOR]["median"], result["cpu_ms"][FLOOR]["median"]
    over = ", ".join(f"{name} +{ms} / +{result['cpu_over_python_c_pass_ms'][name]} ms"
                     for name, ms in result["over_python_c_pass_ms"].items())
    load = result.get("load_average")
    return (f"{what}, {result['rounds']} rounds, {result['install']}: python -c pass {wall} ms wall, {cpu} ms CPU "
            f"(median); over it, wall / CPU: {over} (target +{result['target_over_python_c_pass_ms']:g} ms wall)"
            + (f"; load average {load[0]}" if load else ""))
