"""The figures every benchmark reports: a percentile, and min / median / max over runs."""

from __future__ import annotations

import statistics


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def spread(values: list[float], digits: int = 3) -> dict[str, float]:
    """Min, median and max of ``values`` (runs of one measurement), rounded."""
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits), "max": round(max(values), digits)}
