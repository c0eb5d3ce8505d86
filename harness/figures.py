"""What the benchmarks share: a percentile, min / median / max over runs, the load average and the CPU time the host
took, and stopping a server they started."""

from __future__ import annotations

import os
import statistics
import subprocess


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def spread(values: list[float], digits: int = 3) -> dict[str, float]:
    """Min, median and max of ``values`` (runs of one measurement), rounded."""
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits), "max": round(max(values), digits)}


def loadavg() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages, rounded; None where the platform has none (Windows)."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def cpu_ticks() -> list[int] | None:
    """The machine's CPU time so far, by kind (``/proc/stat``'s first eight: user to steal); None where there is none.

    Linux only; elsewhere the benchmarks report no steal.
    """
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    return [int(x) for x in fields[1:9]]


def steal_share(before: list[int] | None, after: list[int] | None) -> float | None:
    """The share of the machine's CPU time between two ``cpu_ticks()`` that the hypervisor gave to other guests.

    On a shared virtual machine this, not the load average, is what moves a
    figure that wakes threads: a guest's idle CPU must be scheduled again by
    the host before a woken thread runs, and the load average inside the
    guest does not show it. A published figure comes from runs with little
    of it; the JSON says how much each had (BENCHMARKS.md, Reproducibility).
    """
    if before is None or after is None:
        return None
    spent = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(spent)
    return round(spent[7] / total, 3) if total > 0 else None


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
