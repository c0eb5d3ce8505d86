"""retained next to the official ``@modelcontextprotocol/server-memory`` over MCP stdio, and next to itself
with the related-records step off.

Three servers run at once, each a real child process spoken to over stdio by
the MCP client, and the same workload goes to each *in turn*, call by call
(the order rotating from one record to the next), so machine noise hits all
alike:

- N writes of the same texts, conversation turns by default (``"Speaker:
  text"``, LoCoMo's from ``../shared/data/locomo``, or generated turns of the
  same shape without it; ``--texts words`` for the old 12-word texts):
  ``memory_write {text}`` to retained, and to a second retained with
  ``RETAINED_RELATED=off`` (the write without the step that names earlier
  records of the same subject: the baseline of issue 31); ``create_entities``
  with one entity per text (name derived from the text, the text as its
  observation) to server-memory -- the harness adapter's own mapping;
- Q searches for the same single words: ``memory_search {query, k: 10}`` here;
  ``search_nodes {query}`` there (a case-insensitive substring match that
  returns every match, with no limit).

The writes are reported per window of ``--window`` records as the stores
grow (0 to 10,000 by default), with the ratio of the step on to the step off
in each window (min / median / max over the windows) and over all writes.

What differs by design, and is reported rather than hidden: every retained
write is fsynced and read back before it is acknowledged; server-memory
rewrites its whole file on each change without fsync. retained returns the k
best of the matches and their count; server-memory returns all matches.

    python -m harness bench peer [--records 10000] [--window 1000] [--queries 200] [--peer off] [--json]

npm installs server-memory on first use (the harness adapter's helper);
without node/npm the peer side is reported as unavailable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

from harness.adapters.base import NotApplicable
from harness.adapters.retained import RetainedAdapter
from harness.adapters.server_memory import ServerMemoryAdapter, _name, installed_version
from harness.figures import loadavg, pct, spread
from harness.mcpio import spawn
from harness.turns import locomo_turns

WORDS = ("deploy target staging production release note user prefers dark mode editor keybindings meeting moved "
         "thursday budget approved migration index rebuild latency search alice bob carol dave invoice kettle "
         "orchid lantern harbor").split()
TARGET_STEP_RATIO = 1.15  # issue 31: memory_write p50 and p99 with the step <= 1.15x without it


def word_texts(n: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j * 5) % len(WORDS)] for j in range(12)) + f" item-{i}" for i in range(n)]


def texts(n: int, kind: str) -> tuple[list[str], str]:
    """``(texts, source)``: conversation turns (``locomo``) or the 12-word texts (``words``)."""
    if kind == "words":
        return word_texts(n), "words (31-word vocabulary)"
    return locomo_turns(n)


def queries(q: int, written: list[str]) -> list[str]:
    """Single words to search for: spread over the words of the written texts (4 letters or more)."""
    vocab = sorted({w.lower() for t in written for w in re.findall(r"[A-Za-z]{4,}", t)})
    if not vocab:
        return [WORDS[(i * 11) % len(WORDS)] for i in range(q)]
    return [vocab[(i * 7919) % len(vocab)] for i in range(q)]


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p95": round(pct(ordered, 0.95), 3),
        "p99": round(pct(ordered, 0.99), 3),
        "total_s": round(sum(ordered) / 1000, 3),
    }


def _count(data: Any, key: str) -> int | None:
    if isinstance(data, dict):
        value = data.get(key)
        if isinstance(value, int):
            return value
        if isinstance(value, list):
            return len(value)
    return None


async def _run(written: list[str], q: int, root: Path, window: int, with_peer: bool) -> dict[str, Any]:
    ours, peer = RetainedAdapter(), ServerMemoryAdapter()
    peer_cmd = None
    peer_reason = "not asked for (--peer off)"
    if with_peer:
        try:
            peer_cmd = peer.command(None)
        except NotApplicable as exc:
            peer_reason = str(exc)
    stores = {name: root / name for name in ("retained", "retained-step-off", "server-memory")}
    for path in stores.values():
        path.mkdir(mode=0o700)
    env_on = {**os.environ, **ours.env(stores["retained"]), "RETAINED_RELATED": "on"}
    env_off = {**os.environ, **ours.env(stores["retained-step-off"]), "RETAINED_RELATED": "off"}
    peer_env = {**os.environ, **peer.env(stores["server-memory"])}
    n = len(written)
    result: dict[str, Any] = {"records": n, "queries": q, "window": window}
    w: dict[str, list[float]] = {"on": [], "off": [], "peer": []}
    s_ours: list[float] = []
    s_peer: list[float] = []
    m_ours: list[int] = []
    m_peer: list[int] = []
    named = 0
    async with spawn(ours.command(None), env_on, root / "work-on") as a, \
            spawn(ours.command(None), env_off, root / "work-off") as a_off:
        if peer_cmd is None:
            b = None
        else:
            b_cm = spawn(peer_cmd, peer_env, root / "work-peer")
            b = await b_cm.__aenter__()
        try:
            sides = ["on", "off", "peer"] if b is not None else ["on", "off"]
            for i, text in enumerate(written):
                for side in sides[i % len(sides):] + sides[: i % len(sides)]:
                    if side == "peer":
                        entity = {"name": _name(text), "entityType": "note", "observations": [text]}
                        t0 = time.perf_counter()
                        reply = await b.call("create_entities", {"entities": [entity]})  # type: ignore[union-attr]
                    else:
                        t0 = time.perf_counter()
                        reply = await (a if side == "on" else a_off).call("memory_write", {"text": text})
                    w[side].append((time.perf_counter() - t0) * 1000)
                    if not reply.ok:
                        raise RuntimeError(f"{side} write failed: {reply.brief()}")
                    if side == "on" and isinstance(reply.data, dict) and reply.data.get("related"):
                        named += 1
            for word in queries(q, written):
                t0 = time.perf_counter()
                reply = await a.call("memory_search", {"query": word, "k": 10})
                s_ours.append((time.perf_counter() - t0) * 1000)
                if not reply.ok:
                    raise RuntimeError(f"retained memory_search failed: {reply.brief()}")
                m_ours.append(_count(reply.data, "total_matches") or 0)
                if b is not None:
                    t0 = time.perf_counter()
                    reply = await b.call("search_nodes", {"query": word})
                    s_peer.append((time.perf_counter() - t0) * 1000)
                    if not reply.ok:
                        raise RuntimeError(f"server-memory search_nodes failed: {reply.brief()}")
                    m_peer.append(_count(reply.data, "entities") or 0)
        finally:
            if b is not None:
                await b_cm.__aexit__(None, None, None)
    result["retained"] = {
        "write_ms": _ms(w["on"]),
        "search_ms": _ms(s_ours),
        "matches_p50": int(statistics.median(m_ours)),
        "writes_naming_related": named,
        "store_bytes": sum(p.stat().st_size for p in stores["retained"].iterdir() if p.is_file()),
        "durability": "fsync + byte-exact read-back before each reply",
    }
    result["retained_step_off"] = {"write_ms": _ms(w["off"]), "setting": "RETAINED_RELATED=off"}
    windows: list[dict[str, Any]] = []
    r50: list[float] = []
    r99: list[float] = []
    for lo in range(0, n, window):
        on, off = _ms(w["on"][lo:lo + window]), _ms(w["off"][lo:lo + window])
        r50.append(round(on["p50"] / off["p50"], 3))
        r99.append(round(on["p99"] / off["p99"], 3))
        windows.append({"records": [lo, min(n, lo + window)], "on_ms": on, "off_ms": off,
                        "ratio_p50": r50[-1], "ratio_p99": r99[-1]})
    on_all, off_all = result["retained"]["write_ms"], result["retained_step_off"]["write_ms"]
    result["related_step"] = {
        "windows": windows,
        "ratio_p50": {"all": round(on_all["p50"] / off_all["p50"], 3), **spread(r50)},
        "ratio_p99": {"all": round(on_all["p99"] / off_all["p99"], 3), **spread(r99)},
        "target": f"p50 and p99 <= {TARGET_STEP_RATIO}x the step off",
        "meets_target": max(on_all["p50"] / off_all["p50"], on_all["p99"] / off_all["p99"]) <= TARGET_STEP_RATIO,
    }
    if b is None:
        result["server_memory"] = {"unavailable": peer_reason}
    else:
        result["server_memory"] = {
            "version": installed_version(peer.prefix),
            "write_ms": _ms(w["peer"]),
            "search_ms": _ms(s_peer),
            "matches_p50": int(statistics.median(m_peer)),
            "store_bytes": (stores["server-memory"] / peer.file_name).stat().st_size,
            "durability": "whole file rewritten on each change, no fsync",
        }
        result["ratio_retained_over_peer"] = {
            "write_p50": round(on_all["p50"] / result["server_memory"]["write_ms"]["p50"], 3),
            "search_p50": round(result["retained"]["search_ms"]["p50"] / result["server_memory"]["search_ms"]["p50"], 3),
            "write_total": round(on_all["total_s"] / result["server_memory"]["write_ms"]["total_s"], 3),
        }
    return result


def bench(n: int, q: int, workdir: Path | None = None, *, window: int = 1000, kind: str = "locomo",
          with_peer: bool = True) -> dict[str, Any]:
    written, source = texts(n, kind)
    load_before = loadavg()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        out = anyio.run(_run, written, q, Path(tmp), max(1, window), with_peer)
    out["bench"] = "peer"
    out["texts"] = source
    out["method"] = ("the servers live at once over MCP stdio; calls go to each in turn (order rotating per record), "
                     "same texts, same queries")
    out["cpus"] = os.cpu_count()
    out["loadavg_before"] = load_before
    out["loadavg"] = loadavg()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness bench peer",
        description="retained and @modelcontextprotocol/server-memory, same writes and searches over MCP stdio",
        epilog="example: python -m harness bench peer --records 2000 --json",
    )
    p.add_argument("--records", type=int, default=10000, help="writes sent to each server (default 10000)")
    p.add_argument("--window", type=int, default=1000, help="records per window of the write figures (default 1000)")
    p.add_argument("--texts", choices=("locomo", "words"), default="locomo",
                   help="conversation turns (default; LoCoMo's, or generated of the same shape) or 12-word texts")
    p.add_argument("--peer", choices=("on", "off"), default="on", help="run server-memory beside (default on)")
    p.add_argument("--queries", type=int, default=200, help="searches sent to each server (default 200)")
    p.add_argument("--dir", type=Path, help="make the temporary stores under DIR")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args, _ = p.parse_known_args(argv)
    r = bench(args.records, args.queries, args.dir, window=args.window, kind=args.texts, with_peer=args.peer == "on")
    if args.json:
        print(json.dumps(r))
    else:
        ours, peer = r["retained"], r["server_memory"]
        off, step = r["retained_step_off"], r["related_step"]
        print(f"peer ({r['records']} writes of {r['texts']}, {r['queries']} searches, in turn over MCP stdio):")
        print(f"  retained       write p50 {ours['write_ms']['p50']:.2f} ms p99 {ours['write_ms']['p99']:.2f} ms "
              f"total {ours['write_ms']['total_s']:.1f} s | "
              f"search p50 {ours['search_ms']['p50']:.2f} ms (matches p50 {ours['matches_p50']})")
        print(f"  step off       write p50 {off['write_ms']['p50']:.2f} ms p99 {off['write_ms']['p99']:.2f} ms | "
              f"on/off p50 {step['ratio_p50']['all']:.3f} (windows {step['ratio_p50']['min']:.3f}-"
              f"{step['ratio_p50']['max']:.3f}) p99 {step['ratio_p99']['all']:.3f} ({step['target']}); "
              f"{ours['writes_naming_related']} writes named related records")
        if "unavailable" in peer:
            print(f"  server-memory  unavailable: {peer['unavailable']}")
        else:
            print(f"  server-memory  write p50 {peer['write_ms']['p50']:.2f} ms total {peer['write_ms']['total_s']:.1f} s | "
                  f"search p50 {peer['search_ms']['p50']:.2f} ms (matches p50 {peer['matches_p50']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
