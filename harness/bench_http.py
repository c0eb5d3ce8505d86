"""The shared HTTP server under load: CLIENTS MCP clients x WRITES memory_write calls on 127.0.0.1.

One ``retained serve --http`` process per run, group commit on or off
(``RETAINED_GROUP_COMMIT``), runs alternating on, off, on, off ...; the
clients are real MCP clients (the SDK's streamable HTTP client), all in this
process on one event loop, each writing its records one call at a time.
Reported per mode: aggregate acknowledged writes per second, and each call's
latency p50/p99 (min/median/max over the runs, and over every call of the
runs pooled, with the on/off ratio of each). Each client's first call pays
one-time work on both sides (the client library builds the tool's output
schema validator; the server registers its tools and loads its write path),
and with 20 clients those 20 calls are the slowest 2 %, so they alone set an
all-calls p99: the pooled figures are also given without them
(``http_after_first``), and the first calls apart (``first_call_ms``). To show how much of a call is
MCP handling and how much is the store, the same number of threads write
records of the same words through one in-process ``Store``, asking for the
related records as ``memory_write`` does (kept for the session's next read;
the store's share), in the same run.

    python -m harness bench http [--clients 20] [--writes 50] [--runs 3] [--vary group|related] [--json]

``--vary related`` runs the related-records step on and off instead
(``RETAINED_RELATED``, group commit on both ways). ``--vary bare`` runs
retained (as it ships: group commit and the related step on) against a bare
one-tool server on the same SDK and the same HTTP server (uvicorn), whose
``memory_write`` takes the file lock, appends one canonical JSON line,
fsyncs it and reads it back: the floor any durable MCP write pays. The texts are
conversation turns (LoCoMo's, see harness/turns.py) unless ``--texts words``.

A benchmark, not a test: the numbers depend on the machine, its disk and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.bench_group import one_run
from harness.figures import loadavg, pct, spread, stop
from harness.turns import locomo_turns

START_WAIT_S = 60.0
URL = re.compile(rb"serving MCP on (http://\S+)")

# The floor for --vary bare: the same SDK, transport and HTTP server, and a tool that does only the
# durable part of a write (lock, append, fsync, read back), so the ratio shows what retained adds.
BARE_HTTP_SERVER = '''
import os, socket, sys, threading
import anyio, orjson, portalocker, uvicorn
from mcp.server.mcpserver import MCPServer

directory = sys.argv[1]
path = os.path.join(directory, "log.jsonl")
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
lock = open(os.path.join(directory, "log.lock"), "a+b")
local = threading.Lock()
app = MCPServer("bare")


@app.tool()
def memory_write(text: str, scope: str | None = None) -> dict:
    """Append the text durably and return where it landed."""
    with local:
        portalocker.lock(lock, portalocker.LOCK_EX)
        try:
            at = os.lseek(fd, 0, os.SEEK_END)
            line = orjson.dumps({"scope": scope, "text": text}, option=orjson.OPT_SORT_KEYS) + b"\\n"
            os.write(fd, line)
            os.fsync(fd)
            if os.pread(fd, len(line), at) != line:
                raise RuntimeError("read-back differs")
        finally:
            portalocker.unlock(lock)
    return {"ok": True, "offset": at, "bytes": len(line)}


sock = socket.socket()
sock.bind(("127.0.0.1", 0))
print(f"serving MCP on http://127.0.0.1:{sock.getsockname()[1]}/mcp", file=sys.stderr, flush=True)
config = uvicorn.Config(app.streamable_http_app(), log_config=None, access_log=False, log_level="warning")
anyio.run(uvicorn.Server(config).serve, [sock])
'''




class _Server:
    """``retained serve --http --port 0`` on a fresh store, its URL read from stderr."""

    def __init__(self, directory: Path, group_commit: bool, related: bool = True, bare: bool = False,
                 semantic: bool = False) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_")}
        env.update(RETAINED_DIR=str(directory), RETAINED_GROUP_COMMIT="on" if group_commit else "off",
                   RETAINED_RELATED="on" if related else "off")
        # With retained[semantic] installed the server embeds each record after its ack, on the same CPUs:
        # a cost of the extra, measured only when asked (--semantic), so the figures compare like with like.
        if not semantic:
            env["RETAINED_EMBED_LOCAL"] = "0"
        if bare:
            directory.mkdir(parents=True, exist_ok=True)
            script = directory / "bare_http_server.py"
            script.write_text(BARE_HTTP_SERVER, encoding="utf-8")
            argv = [sys.executable, str(script), str(directory)]
        else:
            argv = [sys.executable, "-m", "retained", "serve", "--http", "--host", "127.0.0.1", "--port", "0"]
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + START_WAIT_S
        seen = b""
        stderr = self.proc.stderr
        if stderr is None:
            raise SystemExit("bench http: no stderr from the server")
        while time.monotonic() < deadline:
            line = stderr.readline()
            if not line:
                break
            seen += line
            found = URL.search(line)
            if found:
                self.url = found.group(1).decode()
                # Keep reading stderr so the server never blocks on a full pipe.
                threading.Thread(target=lambda: [None for _ in stderr], daemon=True).start()
                return
        self.stop()
        raise SystemExit(f"bench http: the server did not start: {seen.decode(errors='replace')[-500:]}")

    def stop(self) -> None:
        stop(self.proc)


async def _clients(url: str, clients: int, writes: int, texts: list[str]) -> tuple[float, list[tuple[int, float]]]:
    """The clients' wall time and every call's ``(i, latency_ms)``, ``i`` its place in its client's calls."""
    import anyio
    from mcp import Client
    from mcp_types import Implementation

    latencies: list[tuple[int, float]] = []
    ready = anyio.Event()
    connected = [0]

    async def agent(n: int) -> None:
        async with Client(url, client_info=Implementation(name=f"bench-{n}", version="1")) as client:
            connected[0] += 1
            if connected[0] == clients:
                ready.set()
            await ready.wait()
            for i in range(writes):
                t0 = time.perf_counter()
                text = texts[(n * writes + i) % len(texts)]
                result = await client.call_tool("memory_write", {"text": text, "scope": f"c{n}"})
                latencies.append((i, (time.perf_counter() - t0) * 1000))
                if result.is_error:
                    raise SystemExit(f"bench http: a write failed: {result.content}")

    start = [0.0]

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for n in range(clients):
                tg.start_soon(agent, n)
            await ready.wait()
            start[0] = time.perf_counter()

    await main()
    return time.perf_counter() - start[0], latencies


def one_http_run(directory: Path, *, group_commit: bool, clients: int, writes: int, texts: list[str],
                 related: bool = True, bare: bool = False, semantic: bool = False) -> dict[str, Any]:
    import anyio

    server = _Server(directory, group_commit, related, bare, semantic)
    try:
        wall, calls = anyio.run(_clients, server.url, clients, writes, texts)
    finally:
        server.stop()
    ms = [x for _, x in calls]
    return {
        "writes_per_s": round(clients * writes / wall, 1),
        "p50_ms": round(statistics.median(ms), 3),
        "p99_ms": round(pct(ms, 0.99), 3),
        # every call's latency, pooled over the runs by `bench` (not printed): each client's first apart
        "ms": ms,
        "ms_first": [x for i, x in calls if i == 0],
        "ms_after_first": [x for i, x in calls if i > 0],
    }


# What each --vary compares, and the prefix of its figures in the JSON ("<prefix>_on", "<prefix>_off").
PREFIX = {"group": "group_commit", "related": "related", "bare": "retained_vs_bare"}
WHAT = {"group": "group commit", "related": "the related-records step (RETAINED_RELATED)",
        "bare": "retained (on) against the bare one-tool server (off)"}


def _label(vary: str, name: str) -> str:
    if vary == "bare":
        return "retained" if name == "on" else "bare one-tool server"
    return f"{WHAT[vary]} {name}"


def _pooled(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """p50 and p99 over the latencies under ``key`` of every run together."""
    every = [x for r in runs for x in r[key]]
    return {"calls": len(every), "p50_ms": round(statistics.median(every), 3), "p99_ms": round(pct(every, 0.99), 3)}


def bench(clients: int, writes: int, runs: int, workdir: Path | None = None, *, vary: str = "group",
          kind: str = "locomo", semantic: bool = False) -> dict[str, Any]:
    """Runs alternating ``on`` and ``off`` of what ``vary`` names: group commit, the related-records step
    (group commit on both ways), or retained (``on``) against the bare one-tool server (``off``)."""
    texts, source = (locomo_turns(clients * writes) if kind == "locomo"
                     else ([f"client record {i}" for i in range(clients * writes)], "words"))
    modes: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    store_only: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for r in range(runs):
            for name, flag in (("on", True), ("off", False)):
                group, related = (flag, True) if vary == "group" else (True, flag) if vary == "related" else (True, True)
                modes[name].append(one_http_run(Path(tmp) / f"http-{name}-{r}", group_commit=group,
                                                clients=clients, writes=writes, texts=texts, related=related,
                                                bare=vary == "bare" and not flag, semantic=semantic))
                # The same work as a memory_write call: the same texts, and the related records asked for.
                store_only[name].append(one_run(Path(tmp) / f"store-{name}-{r}", group_commit=group,
                                                threads=clients, per_thread=writes, related=related, texts=texts))
    keys = ("writes_per_s", "p50_ms", "p99_ms")
    out: dict[str, Any] = {
        "bench": "http",
        "clients": clients,
        "writes_per_client": writes,
        "runs": runs,
        "vary": vary,
        "texts": source,
        "semantic": semantic,
    }
    prefix = PREFIX[vary]
    pooled: dict[str, dict[str, Any]] = {}
    for name in ("on", "off"):
        http = {k: spread([r[k] for r in modes[name]]) for k in keys}
        store = {k: spread([r[k] for r in store_only[name]]) for k in keys}
        p50_http, p50_store = http["p50_ms"]["median"], store["p50_ms"]["median"]
        # One run's p99 is its 10th slowest call of 1,000: the runs' calls
        # pooled give a p99 that moves less from one run of the bench to the next.
        pooled[name] = _pooled(modes[name], "ms")
        pooled[f"{name}_after_first"] = _pooled(modes[name], "ms_after_first")
        first = [x for r in modes[name] for x in r["ms_first"]]
        out[f"{prefix}_{name}"] = {
            "http": http,
            "http_pooled": pooled[name],
            "http_after_first": pooled[f"{name}_after_first"],
            "first_call_ms": {"calls": len(first), "p50_ms": round(statistics.median(first), 3),
                              "max_ms": round(max(first), 3)},
            "store_in_process": store,
            "store_share_of_p50": round(min(1.0, p50_store / p50_http), 3) if p50_http else None,
        }
    ratios = [a["writes_per_s"] / b["writes_per_s"] for a, b in zip(modes["on"], modes["off"], strict=True)]
    out["ratio_writes_per_s_on_off"] = spread(ratios)
    out["ratio_pooled_on_off"] = {k: round(pooled["on"][k] / pooled["off"][k], 3) for k in ("p50_ms", "p99_ms")}
    out["ratio_after_first_on_off"] = {
        k: round(pooled["on_after_first"][k] / pooled["off_after_first"][k], 3) for k in ("p50_ms", "p99_ms")}
    out["method"] = ("retained serve --http on 127.0.0.1, real MCP clients in one process, "
                     f"{WHAT[vary]} on and off alternately; store share: the same writes from as many threads through one "
                     "in-process Store")
    out["cpus"] = os.cpu_count()
    out["loadavg"] = loadavg()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness bench http",
        description="MCP clients writing through one retained HTTP server on 127.0.0.1, group commit on against off",
        epilog="example: python -m harness bench http --clients 20 --writes 50 --runs 3 --json",
    )
    p.add_argument("--clients", type=int, default=20, help="concurrent MCP clients (default 20)")
    p.add_argument("--writes", type=int, default=50, help="memory_write calls per client (default 50)")
    p.add_argument("--runs", type=int, default=3, help="runs of each mode, alternating (default 3)")
    p.add_argument("--vary", choices=tuple(PREFIX), default="group",
                   help="what runs on and off: group commit (default), the related-records step, or "
                   "retained against a bare one-tool server (bare)")
    p.add_argument("--texts", choices=("locomo", "words"), default="locomo",
                   help="conversation turns (default; LoCoMo's, or generated of the same shape) or 'client record N'")
    p.add_argument("--semantic", action="store_true",
                   help="let the server embed each record after its ack when retained[semantic] is installed "
                   "(default off: RETAINED_EMBED_LOCAL=0)")
    p.add_argument("--dir", type=Path, help="make the temporary stores under DIR (the filesystem matters)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args, _ = p.parse_known_args(argv)
    result = bench(args.clients, args.writes, args.runs, args.dir, vary=args.vary, kind=args.texts,
                   semantic=args.semantic)
    prefix = PREFIX[args.vary]
    if args.json:
        print(json.dumps(result))
    else:
        for name in ("on", "off"):
            r = result[f"{prefix}_{name}"]
            h, s = r["http"], r["store_in_process"]
            print(
                f"{_label(args.vary, name)}: {h['writes_per_s']['median']:.0f} writes/s over HTTP, "
                f"p50 {h['p50_ms']['median']:.1f} ms p99 {h['p99_ms']['median']:.1f} ms; "
                f"in-process store p50 {s['p50_ms']['median']:.2f} ms (share of the HTTP p50: {r['store_share_of_p50']})"
            )
        ratio = result["ratio_writes_per_s_on_off"]
        pooled = result["ratio_pooled_on_off"]
        print(f"writes/s on/off: {ratio['min']:.2f}-{ratio['median']:.2f}-{ratio['max']:.2f}; "
              f"pooled p50 on/off {pooled['p50_ms']:.2f}, p99 {pooled['p99_ms']:.2f}")
        for name in ("on", "off"):
            r = result[f"{prefix}_{name}"]
            a, f = r["http_after_first"], r["first_call_ms"]
            print(f"{_label(args.vary, name)}, every call but each client's first: p50 {a['p50_ms']:.1f} ms "
                  f"p99 {a['p99_ms']:.1f} ms; first calls: p50 {f['p50_ms']:.1f} ms, max {f['max_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
