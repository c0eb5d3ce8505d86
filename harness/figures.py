"""What the benchmarks share: a percentile, min / median / max over runs, and stopping a server they started."""

from __future__ import annotations

import statistics
import subprocess


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def spread(values: list[float], digits: int = 3) -> dict[str, float]:
    """Min, median and max of ``values`` (runs of one measurement), rounded."""
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits), "max": round(max(values), digits)}


def stop(proc: subprocess.Popen[bytes], wait_s: float = 30.0) -> None:
    """End a server process the benchmark started: SIGTERM, then SIGKILL if it has not exited after ``wait_s``."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=wait_s)
