"""The write guard's cost per write and its figures on the labelled corpus.

Times ``Guard("refuse").apply(fields)`` on a typical record (~500 bytes of
caller fields) and on a 64 KiB record, and scores the guard on
tests/data/guard_corpus.jsonl (recall on the fake credentials, false-positive
rate on the hard benign strings), on tests/data/guard_evasions.jsonl (secrets
in disguise, and benign text in many scripts) and on conversation turns
(LoCoMo's, ../shared/data/locomo, where present). With
``--compare-detect-secrets`` (needs
``pip install detect-secrets``) it scores and times that library the same way,
in the same run, through its line scanner with its default plugins and filters.

    python harness/bench_guard.py [--runs 2000] [--compare-detect-secrets]

Prints one JSON document. A benchmark, not a test: the microseconds depend on
the machine and its load; the corpus figures do not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import string
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retained.errors import SecretDetected
from retained.safety.guard import Guard

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "guard_corpus.jsonl"
EVASIONS = Path(__file__).resolve().parent.parent / "tests" / "data" / "guard_evasions.jsonl"

WORDS = (
    "the deploy target moved to staging after the review and the index was rebuilt from the log "
    "we agreed to keep the brief under one hundred milliseconds and to retry with the same client op id "
    "search ranks by bm25 then fuses the vector ranking the embedder was down for ten minutes "
    "notes checkpoint scope project meeting friday owner fix bug test release version config"
).split()


def _join(value: Any) -> Any:
    """Corpus values store fake secrets in parts (see tests/data/make_guard_corpus.py)."""
    if isinstance(value, dict):
        if set(value) == {"$join"}:
            return "".join(_join(p) for p in value["$join"])
        return {k: _join(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_join(v) for v in value]
    return value


def load_corpus() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    return [{**row, "value": _join(row["value"])} for row in rows]


def load_evasions() -> list[dict[str, Any]]:
    """Secrets in disguise and benign text (tests/data/make_guard_evasions.py); ``note`` is the disguise."""
    rows = [json.loads(line) for line in EVASIONS.read_text(encoding="utf-8").splitlines()]
    return [{**row, "value": _join(row["value"]), "note": row["disguise"]} for row in rows]


def conversation_turns(n: int) -> tuple[list[dict[str, Any]], str]:
    """``n`` conversation turns as benign rows (LoCoMo's where present: harness/turns.py), and their source."""
    from harness.turns import locomo_turns

    turns, source = locomo_turns(n)
    return [{"value": t, "secret": False, "note": "turn"} for t in turns], source


def as_fields(value: Any) -> dict[str, Any]:
    return {"text": value} if isinstance(value, str) else value


def prose(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
        if rng.random() < 0.08:
            out[-1] += "."
    return " ".join(out)[:chars]


def typical_record(rng: random.Random) -> dict[str, Any]:
    """About 500 bytes of caller fields: the shape an agent's note has."""
    return {
        "text": prose(rng, 300),
        "body": f"see commit {rng.getrandbits(160):040x} and run {uuid.UUID(int=rng.getrandbits(128))}",
        "scope": "proj-a",
        "source": "conversation",
        "x-origin": {"tool": "editor", "file": "src/retained/guard.py", "line": 120, "tags": ["deploy", "staging"]},
    }


def large_record(rng: random.Random) -> dict[str, Any]:
    """64 KiB: prose with code lines, URLs, hashes and identifiers mixed in."""
    parts: list[str] = []
    size = 0
    while size < 64 * 1024:
        r = rng.random()
        if r < 0.6:
            piece = prose(rng, 400)
        elif r < 0.75:
            piece = f"    result = store.write(text, scope='proj-{rng.randrange(9)}', client_op_id='{uuid.UUID(int=rng.getrandbits(128))}')"
        elif r < 0.85:
            piece = f"https://example.com/docs/{rng.choice(WORDS)}/{rng.randrange(10**6)}?page={rng.randrange(9)}"
        elif r < 0.95:
            piece = f"hash {rng.getrandbits(256):064x} prev {rng.getrandbits(256):064x}"
        else:
            piece = "_".join(rng.choice(WORDS) for _ in range(6)) + "".join(rng.choice(string.digits) for _ in range(3))
        parts.append(piece)
        size += len(piece) + 1
    return {"text": "a long pasted document", "body": "\n".join(parts)[: 64 * 1024], "scope": "proj-a"}


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def time_us(fn: Callable[[], Any], runs: int) -> dict[str, float]:
    """p50/p99 in microseconds, wall clock and this thread's CPU time.

    The CPU figure is the steadier one on a shared, loaded machine: it leaves
    out the time the process waited for a core.
    """
    for _ in range(min(50, runs)):
        fn()
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(runs):
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        fn()
        wall.append((time.perf_counter_ns() - t0) / 1000)
        cpu.append((time.thread_time_ns() - c0) / 1000)
    wall.sort()
    cpu.sort()
    return {
        "p50": round(percentile(wall, 0.50), 1),
        "p99": round(percentile(wall, 0.99), 1),
        "cpu_p50": round(percentile(cpu, 0.50), 1),
        "cpu_p99": round(percentile(cpu, 0.99), 1),
        "runs": runs,
    }


def score(flagged: Callable[[Any], bool], rows: list[dict[str, Any]]) -> dict[str, Any]:
    tp = fp = n_secret = n_benign = 0
    missed: list[str] = []
    false: list[str] = []
    for row in rows:
        hit = flagged(row["value"])
        if row["secret"]:
            n_secret += 1
            tp += hit
            if not hit:
                missed.append(row["note"])
        else:
            n_benign += 1
            fp += hit
            if hit:
                false.append(row["note"])
    return {
        "secrets": n_secret,
        "benign": n_benign,
        "recall": round(tp / n_secret, 4) if n_secret else None,
        "false_positive_rate": round(fp / n_benign, 4) if n_benign else None,
        "missed": missed,
        "false_positives": false,
    }


# -- retained's guard ------------------------------------------------------------


def guard_flags(value: Any) -> bool:
    try:
        Guard("refuse").apply(as_fields(value))
    except SecretDetected:
        return True
    return False


# -- detect-secrets, for comparison ----------------------------------------------


def detect_secrets_scanner() -> Callable[[Any], bool]:
    """A scanner over detect-secrets' default plugins and filters, as its file scan runs them."""
    from detect_secrets.core import scan
    from detect_secrets.settings import default_settings

    # Entered for the life of the process; the reference below keeps the
    # context manager alive (collecting it would restore empty settings).
    context = default_settings()
    context.__enter__()

    def strings(value: Any) -> list[str]:
        if isinstance(value, str):
            return [value]
        # A structured value is scanned as the JSON text a file would hold,
        # so that its keyword plugin sees "password": "..." pairs.
        return [json.dumps(value, indent=1)]

    def flagged(value: Any) -> bool:
        for text in strings(value):
            lines = list(enumerate(text.splitlines(), start=1))
            for _ in scan._process_line_based_plugins(lines, filename="record.txt"):
                return True
        return False

    flagged.settings_context = context  # type: ignore[attr-defined]
    return flagged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness bench guard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000, help="timed applications per record size (default 2000)")
    parser.add_argument("--turns", type=int, default=5000,
                        help="conversation turns scored as benign text (default 5000; LoCoMo's where present)")
    parser.add_argument("--compare-detect-secrets", action="store_true", help="score and time detect-secrets too")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args, _ = parser.parse_known_args(argv)

    rng = random.Random(8)
    small = typical_record(rng)
    large = large_record(rng)
    rows = load_corpus()
    turns, turns_source = conversation_turns(args.turns)
    g = Guard("refuse")
    out: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        },
        "record_bytes": {
            "typical": len(json.dumps(small).encode()),
            "large": len(json.dumps(large).encode()),
        },
        "guard": {
            "corpus": score(guard_flags, rows),
            "evasions": score(guard_flags, load_evasions()),
            "conversation_turns": {**score(guard_flags, turns), "source": turns_source},
            "us_per_write": {
                "typical": time_us(lambda: g.apply(small), args.runs),
                "large": time_us(lambda: g.apply(large), max(20, args.runs // 20)),
            },
        },
    }
    if args.compare_detect_secrets:
        try:
            ds = detect_secrets_scanner()
        except ImportError:
            out["detect_secrets"] = {"error": "not installed: pip install detect-secrets"}
        else:
            import detect_secrets

            def ds_fields(fields: dict[str, Any]) -> bool:
                return any(ds(v) for v in fields.values())

            out["detect_secrets"] = {
                "version": getattr(detect_secrets, "__version__", None) or _dist_version("detect-secrets"),
                "corpus": score(ds, rows),
                "us_per_write": {
                    "typical": time_us(lambda: ds_fields(small), max(20, args.runs // 10)),
                    "large": time_us(lambda: ds_fields(large), 10),
                },
            }
    if args.json:
        print(json.dumps({"bench": "guard", **out}))
        return 0
    for name in ("guard", "detect_secrets"):
        block = out.get(name)
        if not block or "us_per_write" not in block:
            continue
        corpus, us = block["corpus"], block["us_per_write"]
        print(f"{name}: corpus {json.dumps(corpus)}; us per write: typical {us['typical']}, large {us['large']}")
        if "evasions" in block:
            ev, tu = block["evasions"], block["conversation_turns"]
            print(f"{name}: evasions refused {ev['recall']:.1%} of {ev['secrets']}, benign refused "
                  f"{ev['false_positive_rate']:.1%} of {ev['benign']}; conversation turns refused "
                  f"{tu['false_positive_rate']:.2%} of {tu['benign']} ({tu['source']})")
    return 0


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
