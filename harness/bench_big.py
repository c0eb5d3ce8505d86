"""One big write through each door: the library, ``retained write -`` and MCP ``memory_write`` (issue 29 point 12).

A write of ``--mb`` megabytes of conversation turns (LoCoMo's, see
harness/turns.py), acknowledged through ``Store.write`` in this process
(the library: no interpreter start, no related-records step), through the
CLI (a new process reading the text on stdin, asking for the related records
as ``retained write`` does) and through a running MCP stdio server
(``memory_write``, the related records asked for too). The three alternate,
``--runs`` times, each on a store already holding the earlier big writes;
the figure to quote is each door's median against the library's median in
the same run. Target: CLI and MCP at most 2x the library.

    python -m harness bench big [--mb 4] [--runs 3] [--json]

A benchmark, not a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

from harness.adapters.retained import RetainedAdapter
from harness.figures import loadavg, spread
from harness.mcpio import spawn
from harness.turns import locomo_turns
from retained import Store

TARGET_RATIO = 2.0


def big_text(mb: float) -> tuple[str, str]:
    """About ``mb`` megabytes of turns, one per line, and where they came from."""
    want = int(mb * 1024 * 1024)
    turns, source = locomo_turns(max(1, want // 60))
    text = "\n".join(turns)
    while len(text.encode()) < want:
        text += "\n" + text
    return text.encode()[:want].decode(errors="ignore"), source


async def _mcp_writes(directory: Path, work: Path, texts: list[str]) -> list[float]:
    adapter = RetainedAdapter()
    env = {**os.environ, **adapter.env(directory), "RETAINED_RELATED": "on"}
    out = []
    async with spawn(adapter.command(None), env, work) as server:
        await server.call("memory_write", {"text": "warm the server"})
        for text in texts:
            t0 = time.perf_counter()
            reply = await server.call("memory_write", {"text": text})
            out.append(time.perf_counter() - t0)
            if not reply.ok:
                raise SystemExit(f"bench big: the MCP write failed: {reply.brief()}")
    return out


def bench(mb: float, runs: int, workdir: Path | None = None) -> dict[str, Any]:
    text, source = big_text(mb)
    lib: list[float] = []
    cli: list[float] = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = Path(tmp)
        # PYTHONDONTWRITEBYTECODE would compile every module on every run (an installed package has its .pyc).
        env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_") and k != "PYTHONDONTWRITEBYTECODE"}
        env.update(RETAINED_DIR=str(root / "cli"), RETAINED_RELATED="on")
        with Store(root / "lib") as store:
            store.write("warm the log")
            for r in range(runs):
                t0 = time.perf_counter()
                store.write(f"{r} {text}")
                lib.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "retained", "write", "-"], input=f"{r} {text}".encode(),
                                      env=env, capture_output=True, check=False)
                cli.append(time.perf_counter() - t0)
                if done.returncode != 0:
                    raise SystemExit(f"bench big: retained write failed: {done.stderr.decode(errors='replace')[-300:]}")
        # The MCP writes after: one server for all runs, as a client keeps one.
        mcp = anyio.run(_mcp_writes, root / "mcp", root / "work", [f"{r} {text}" for r in range(runs)])
    base = statistics.median(lib)
    return {
        "bench": "big",
        "mb": mb,
        "texts": source,
        "runs": runs,
        "library_s": spread(lib),
        "cli_s": spread(cli),
        "mcp_s": spread(mcp),
        "ratio_cli_over_library": round(statistics.median(cli) / base, 3),
        "ratio_mcp_over_library": round(statistics.median(mcp) / base, 3),
        "target_ratio": TARGET_RATIO,
        "method": "Store.write in process, then retained write - in a new process, alternately; then memory_write "
                  "on one MCP stdio server; the CLI and MCP ask for the related records",
        "cpus": os.cpu_count(),
        "loadavg": loadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness bench big",
        description="one big write through the library, the CLI and MCP stdio; each against the library",
        epilog="example: python -m harness bench big --mb 4 --runs 3 --json",
    )
    p.add_argument("--mb", type=float, default=4.0, help="size of the write in megabytes (default 4)")
    p.add_argument("--runs", type=int, default=3, help="writes through each door (default 3)")
    p.add_argument("--dir", type=Path, help="make the temporary stores under DIR")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args, _ = p.parse_known_args(argv)
    r = bench(args.mb, args.runs, args.dir)
    if args.json:
        print(json.dumps(r))
    else:
        print(f"big write ({r['mb']} MB of {r['texts']}, {r['runs']} runs): library {r['library_s']['median']:.3f} s, "
              f"CLI {r['cli_s']['median']:.3f} s ({r['ratio_cli_over_library']:.2f}x), "
              f"MCP {r['mcp_s']['median']:.3f} s ({r['ratio_mcp_over_library']:.2f}x); target <= {TARGET_RATIO:g}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
