"""Spawn -> initialize reply: `python -m retained` against a bare one-tool MCPServer.

Both servers run on the same interpreter and SDK, alternately in the same run,
so machine noise hits both alike. Each round starts the process, writes one
`initialize` request on its stdin and stops the first clock when the reply
line arrives on its stdout (the target, ratio <= 1.2); it then sends
`notifications/initialized` and `tools/list` and stops a second clock at that
reply, so work deferred past initialize (retained builds its tool schemas on
the first tools/list) is shown too. Prints one JSON document.

    python harness/bench_spawn.py --rounds 15
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

REPLY_WAIT_S = 60.0

BARE_SERVER = '''
from mcp.server.mcpserver import MCPServer

app = MCPServer("bare")


@app.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


app.run()
'''

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench-spawn", "version": "1"},
    },
}


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def _send(proc: subprocess.Popen[bytes], message: Mapping[str, object]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def _reply(proc: subprocess.Popen[bytes], want_id: int) -> dict[str, object]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    reply = json.loads(line)
    if reply.get("id") != want_id or "result" not in reply:
        raise RuntimeError(f"unexpected reply to request {want_id}: {line[:200]!r}")
    return reply


def spawn_to_initialize(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """Seconds from spawn to the initialize reply and to the first tools/list reply, and the CPU seconds used.

    CPU seconds (user + system, the whole life of the process: start-up, the
    two requests, shutdown on end of input) are less sensitive to other load
    on the machine than the wall-clock figures.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        _send(proc, INITIALIZE)
        _reply(proc, 1)
        initialized = time.perf_counter() - start
        _send(proc, INITIALIZED)
        _send(proc, TOOLS_LIST)
        _reply(proc, 2)
        listed = time.perf_counter() - start
    finally:
        proc.stdin.close()
        overdue = threading.Timer(REPLY_WAIT_S, proc.kill)
        overdue.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            overdue.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
    return initialized, listed, usage.ru_utime + usage.ru_stime


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 1),
        "min_ms": round(ordered[0] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness bench spawn", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="rounds per server (default 15)")
    parser.add_argument("--python", default=sys.executable, help="interpreter to run both servers with")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args, _ = parser.parse_known_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_server.py"
        bare.write_text(BARE_SERVER, encoding="utf-8")
        env = dict(os.environ, RETAINED_DIR=str(Path(tmp) / "store"))
        env.pop("RETAINED_TOKEN", None)
        repo = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "") if env.get("PYTHONPATH") else repo
        commands = {
            "retained": [args.python, "-m", "retained"],
            "bare": [args.python, str(bare)],
        }
        # One unmeasured round each warms the OS file cache and the bytecode caches.
        for argv in commands.values():
            spawn_to_initialize(argv, env)
        init: dict[str, list[float]] = {name: [] for name in commands}
        listed: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        load_before = os.getloadavg()[0]
        for _ in range(args.rounds):
            for name, argv in commands.items():
                t_init, t_list, t_cpu = spawn_to_initialize(argv, env)
                init[name].append(t_init)
                listed[name].append(t_list)
                cpu[name].append(t_cpu)
        load_after = os.getloadavg()[0]

    def block(samples: dict[str, list[float]]) -> dict[str, object]:
        ratio = statistics.median(samples["retained"]) / statistics.median(samples["bare"])
        return {
            "retained": summary(samples["retained"]),
            "bare_one_tool_mcpserver": summary(samples["bare"]),
            "ratio_median": round(ratio, 3),
        }

    ratio = statistics.median(init["retained"]) / statistics.median(init["bare"])
    result = {
        "bench": "spawn",
        "what": "spawn -> initialize reply over stdio (and -> first tools/list reply; CPU seconds per process)",
        "rounds": args.rounds,
        "python": args.python,
        "load_average_1m": {"before": round(load_before, 2), "after": round(load_after, 2)},
        "initialize": block(init),
        "tools_list": block(listed),
        "cpu_seconds": block(cpu),
        "target_ratio": 1.2,
        "ok": ratio <= 1.2,
    }
    if args.json:
        print(json.dumps(result))
    else:
        i = result["initialize"]
        print(
            f"spawn -> initialize, {args.rounds} rounds: retained {i['retained']['median_ms']} ms, "
            f"bare one-tool server {i['bare_one_tool_mcpserver']['median_ms']} ms (medians); "
            f"ratio {i['ratio_median']} (target <= 1.2); tools/list ratio {result['tools_list']['ratio_median']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
