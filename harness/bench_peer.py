"""retained next to the official ``@modelcontextprotocol/server-memory`` over MCP stdio.

Both servers run at once, each a real child process spoken to over stdio by
the MCP client, and the same workload goes to both *alternately*, call by
call, so machine noise hits both alike:

- N writes of the same texts: ``memory_write {text}`` here; ``create_entities``
  with one entity per text (name derived from the text, the text as its
  observation) there — the harness adapter's own mapping;
- Q searches for the same single words: ``memory_search {query, k: 10}`` here;
  ``search_nodes {query}`` there (a case-insensitive substring match that
  returns every match, with no limit).

What differs by design, and is reported rather than hidden: every retained
write is fsynced and read back before it is acknowledged; server-memory
rewrites its whole file on each change without fsync. retained returns the k
best of the matches and their count; server-memory returns all matches.

    python -m harness bench peer [--records 2000] [--queries 200] [--json]

npm installs server-memory on first use (the harness adapter's helper);
without node/npm the peer side is reported as unavailable.
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

import anyio

from harness.adapters.base import NotApplicable
from harness.adapters.retained import RetainedAdapter
from harness.adapters.server_memory import ServerMemoryAdapter, _name, installed_version
from harness.mcpio import spawn

WORDS = ("deploy target staging production release note user prefers dark mode editor keybindings meeting moved "
         "thursday budget approved migration index rebuild latency search alice bob carol dave invoice kettle "
         "orchid lantern harbor").split()


def texts(n: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j * 5) % len(WORDS)] for j in range(12)) + f" item-{i}" for i in range(n)]


def queries(q: int) -> list[str]:
    return [WORDS[(i * 11) % len(WORDS)] for i in range(q)]


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
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


async def _run(n: int, q: int, root: Path) -> dict[str, Any]:
    ours, peer = RetainedAdapter(), ServerMemoryAdapter()
    try:
        peer_cmd = peer.command(None)
    except NotApplicable as exc:
        peer_cmd = None
        peer_reason = str(exc)
    our_store, peer_store = root / "retained", root / "server-memory"
    our_store.mkdir(mode=0o700)
    peer_store.mkdir(mode=0o700)
    our_env = {**os.environ, **ours.env(our_store)}
    peer_env = {**os.environ, **peer.env(peer_store)}
    result: dict[str, Any] = {"records": n, "queries": q}
    w_ours: list[float] = []
    w_peer: list[float] = []
    s_ours: list[float] = []
    s_peer: list[float] = []
    m_ours: list[int] = []
    m_peer: list[int] = []
    async with spawn(ours.command(None), our_env, root / "work-ours") as a:
        if peer_cmd is None:
            b = None
        else:
            b_cm = spawn(peer_cmd, peer_env, root / "work-peer")
            b = await b_cm.__aenter__()
        try:
            for text in texts(n):
                t0 = time.perf_counter()
                reply = await a.call("memory_write", {"text": text})
                w_ours.append((time.perf_counter() - t0) * 1000)
                if not reply.ok:
                    raise RuntimeError(f"retained memory_write failed: {reply.brief()}")
                if b is not None:
                    entity = {"name": _name(text), "entityType": "note", "observations": [text]}
                    t0 = time.perf_counter()
                    reply = await b.call("create_entities", {"entities": [entity]})
                    w_peer.append((time.perf_counter() - t0) * 1000)
                    if not reply.ok:
                        raise RuntimeError(f"server-memory create_entities failed: {reply.brief()}")
            for word in queries(q):
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
        "write_ms": _ms(w_ours),
        "search_ms": _ms(s_ours),
        "matches_p50": int(statistics.median(m_ours)),
        "store_bytes": sum(p.stat().st_size for p in our_store.iterdir() if p.is_file()),
        "durability": "fsync + byte-exact read-back before each reply",
    }
    if b is None:
        result["server_memory"] = {"unavailable": peer_reason}
    else:
        result["server_memory"] = {
            "version": installed_version(peer.prefix),
            "write_ms": _ms(w_peer),
            "search_ms": _ms(s_peer),
            "matches_p50": int(statistics.median(m_peer)),
            "store_bytes": (peer_store / peer.file_name).stat().st_size,
            "durability": "whole file rewritten on each change, no fsync",
        }
        result["ratio_retained_over_peer"] = {
            "write_p50": round(result["retained"]["write_ms"]["p50"] / result["server_memory"]["write_ms"]["p50"], 3),
            "search_p50": round(result["retained"]["search_ms"]["p50"] / result["server_memory"]["search_ms"]["p50"], 3),
            "write_total": round(result["retained"]["write_ms"]["total_s"] / result["server_memory"]["write_ms"]["total_s"], 3),
        }
    return result


def bench(n: int, q: int, workdir: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        out = anyio.run(_run, n, q, Path(tmp))
    out["bench"] = "peer"
    out["method"] = "both servers live at once over MCP stdio; calls alternate one to one, same texts, same queries"
    out["cpus"] = os.cpu_count()
    out["loadavg"] = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness bench peer",
        description="retained and @modelcontextprotocol/server-memory, same writes and searches over MCP stdio",
        epilog="example: python -m harness bench peer --records 2000 --json",
    )
    p.add_argument("--records", type=int, default=2000, help="writes sent to each server (default 2000)")
    p.add_argument("--queries", type=int, default=200, help="searches sent to each server (default 200)")
    p.add_argument("--dir", type=Path, help="make the temporary stores under DIR")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args, _ = p.parse_known_args(argv)
    r = bench(args.records, args.queries, args.dir)
    if args.json:
        print(json.dumps(r))
    else:
        ours, peer = r["retained"], r["server_memory"]
        print(f"peer ({r['records']} writes, {r['queries']} searches, alternating over MCP stdio):")
        print(f"  retained       write p50 {ours['write_ms']['p50']:.2f} ms total {ours['write_ms']['total_s']:.1f} s | "
              f"search p50 {ours['search_ms']['p50']:.2f} ms (matches p50 {ours['matches_p50']})")
        if "unavailable" in peer:
            print(f"  server-memory  unavailable: {peer['unavailable']}")
        else:
            print(f"  server-memory  write p50 {peer['write_ms']['p50']:.2f} ms total {peer['write_ms']['total_s']:.1f} s | "
                  f"search p50 {peer['search_ms']['p50']:.2f} ms (matches p50 {peer['matches_p50']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
