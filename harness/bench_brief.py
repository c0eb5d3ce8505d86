"""The session-start brief, whole process, at 100,000 records, through every entry point.

Builds a store (Store.write_batch, ~500-byte lines, a checkpoint every 10,000
records, a few corrections and retractions), indexes it, and gives a second
directory the same log (a hard link) without an index. Then, alternating in
the same run so machine noise hits all alike, it times the whole process:

- ``python -c pass`` (the interpreter's own start-up, the floor),
- ``retained brief``, the console script (what the hook runs when it is on PATH),
- ``python -m retained --brief``,
- ``hooks/session-start.sh`` fed a SessionStart event on stdin, with the
  console script first on PATH (what a host runs at every session start),
- the Claude Code plugin's SessionStart hook (``plugin/scripts/retained-launch
  --hook SessionStart``: its launcher finds the console script on PATH, then
  runs the same hook),
  each on the indexed store (the normal case),
- ``python -m retained --brief`` on the store without an index (the
  fallback: the log tail only),
- ``python -m retained --brief`` on a store with ``--pulled`` other stores
  pulled beside it by ``retained sync`` (``mirrors/<store id>/``, each the
  same log and index by hard links: the brief reads each as a store of its
  own and composes their records with its own; the default, 0, leaves the
  case out).

The brief is read in project ``proj-1`` (``RETAINED_SCOPE``), one of the
five scopes the records are filed under: its records and the unscoped
checkpoints, as ``retained brief`` reads in a project (issue 26).

Wall time per run (perf_counter around the child) and the child's CPU time
(user + system, from getrusage). Target (DESIGN): every entry point's median
wall time <= ``python -c pass`` + 60 ms. It also checks, with ``-X
importtime``, that the brief imports neither mcp nor portalocker.

By default the interpreter running the benchmark and the ``retained`` script
beside it are measured (an editable install pays for its import hook on every
start); ``--install`` first makes a fresh virtual environment with a
non-editable ``pip install`` of this checkout, the way users install it.

    python -m harness bench brief --records 100000 --rounds 15 --install --json
    python -m harness bench brief --rounds 21 --store /tmp/brief-100k
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.whole_process import REPO, RUN_WAIT_S, against_pass, fill, install, say
from harness.whole_process import run as _run

TARGET_OVER_PASS_MS = 60.0
WORDS = [
    "the", "deploy", "target", "staging", "build", "cache", "index", "query", "log", "chain", "record", "hash",
    "budget", "token", "brief", "session", "scope", "project", "alpha", "beta", "gamma", "delta", "release", "fix",
    "bug", "test", "user", "prefers", "dark", "mode", "config", "server", "port", "migration", "schema", "rollback",
    "review", "merge", "branch", "owner", "deadline", "friday", "decided", "because", "latency",
]

PROJECT = "proj-1"  # the scope the brief is read in (RETAINED_SCOPE): one of the five the records are in


def _text(rng: random.Random, size: int) -> str:
    words: list[str] = []
    n = 0
    while n < size:
        w = rng.choice(WORDS)
        words.append(w)
        n += len(w) + 1
    return " ".join(words)[:size]


def build_store(directory: Path, records: int, seed: int = 7) -> dict[str, Any]:
    """A store of ``records`` records (~500-byte lines), then its index."""
    sys.path.insert(0, str(REPO))
    from retained import Store

    rng = random.Random(seed)

    def make(seq: int) -> dict[str, Any]:
        item: dict[str, Any] = {"text": _text(rng, 200), "scope": f"proj-{seq % 5}", "source": "bench"}  # PROJECT
        if seq > 2000 and seq % 10000 == 2000:  # a checkpoint ends the batch after each 10,000th record
            return {"kind": "checkpoint", "text": f"checkpoint after {seq - 2000} records", "summary": _text(rng, 200)}
        if seq % 997 == 0:
            item["supersedes"] = [seq - 3]
        return item

    t0 = time.perf_counter()
    with Store(directory) as store:
        fill(store, records, make)
        store.forget([records // 2, records // 3], "bench: wrong")
        t1 = time.perf_counter()
        store.rebuild()
        t2 = time.perf_counter()
        head = store.head()
    return {"write_s": round(t1 - t0, 2), "index_s": round(t2 - t1, 2), "head_seq": head["seq"], "log_bytes": head["bytes"]}


def _tail_seq(directory: Path) -> int:
    sys.path.insert(0, str(REPO))
    from retained.core.log import Log

    return Log(directory).tail()[0]


def _imports(python: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [python, "-X", "importtime", "-m", "retained", "--brief"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=RUN_WAIT_S, check=False,
    )
    names = []
    for line in proc.stderr.decode(errors="replace").splitlines():
        if line.startswith("import time:") and "|" in line:
            names.append(line.rsplit("|", 1)[1].strip())
    tops = {n.split(".")[0] for n in names}
    return {"mcp": "mcp" in tops, "portalocker": "portalocker" in tops, "modules": len(names)}


def _with_pulled(indexed: Path, into: Path, n: int) -> None:
    """A store at ``into`` (``indexed``'s log and index) with ``n`` stores pulled beside it, each ``indexed`` again.

    Hard links, as the no-index store's log: a pulled store is laid out as
    ``retained sync`` leaves it (``sync.layout``: the log, its index, and
    ``mirror.json`` with the head's seq and the machine).
    """
    sys.path.insert(0, str(REPO))
    from retained.sync import layout

    seq = _tail_seq(indexed)
    for d in (into, *(layout.mirror_dir(into, f"{i + 1:032x}") for i in range(n))):
        d.mkdir(mode=0o700, parents=True)
        for name in ("log.jsonl", "index.sqlite3"):
            try:
                os.link(indexed / name, d / name)
            except OSError:
                shutil.copyfile(indexed / name, d / name)
        if d != into:
            (d / layout.MIRROR_STATE_NAME).write_text(json.dumps({"seq": seq, "machine": f"bench-{d.name[-2:]}"}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness bench brief", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15, help="runs of each process, alternating (at least 15)")
    parser.add_argument("--store", metavar="DIR", help="build the store here, or reuse it if it already has --records records")
    parser.add_argument("--nice", type=int, default=0,
                        help="add this to the scheduling niceness of the timed runs (negative needs privileges; "
                             "on a busy machine it keeps other work from dominating the figures)")
    parser.add_argument("--pulled", type=int, default=0, metavar="N",
                        help="also time the brief of a store with N stores of --records records pulled beside it")
    parser.add_argument("--install", action="store_true",
                        help="measure a fresh non-editable install of this checkout (made in a temporary venv)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout (the default prints a summary)")
    args, _ = parser.parse_known_args(argv)
    rounds = max(15, args.rounds)

    tmp = None
    venv_tmp: str | None = None
    if args.store:
        base = Path(args.store)
    else:
        tmp = tempfile.mkdtemp(prefix="bench-brief-")
        base = Path(tmp)
    indexed = base / "indexed"
    bare = base / "no-index"
    try:
        built: dict[str, Any] = {"reused": True}
        if not (indexed / "index.sqlite3").exists() or _tail_seq(indexed) < args.records:
            if indexed.exists():
                shutil.rmtree(indexed)
            print(f"bench_brief: building {args.records} records in {indexed} ...", file=sys.stderr, flush=True)
            built = build_store(indexed, args.records)
        if bare.exists():
            shutil.rmtree(bare)
        bare.mkdir(mode=0o700)
        try:
            os.link(indexed / "log.jsonl", bare / "log.jsonl")
        except OSError:
            shutil.copyfile(indexed / "log.jsonl", bare / "log.jsonl")

        pulled = base / "pulled"
        if pulled.exists():
            shutil.rmtree(pulled)
        if args.pulled:
            _with_pulled(indexed, pulled, args.pulled)

        venv_tmp = tempfile.mkdtemp(prefix="bench-brief-venv-") if args.install else None
        env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_") and k != "PYTHONDONTWRITEBYTECODE"}
        # The session's project is one of the five scopes (a fifth of the records), wherever the bench runs: the
        # brief reads it and the unscoped checkpoints, as it does in a project (docs/capture.md).
        env["RETAINED_SCOPE"] = PROJECT
        if venv_tmp is not None:
            python = str(install(Path(venv_tmp) / "venv", "bench_brief"))
        else:
            python = sys.executable
            # An installed package has its bytecode compiled; a checkout run with
            # PYTHONDONTWRITEBYTECODE would compile every module on every run.
            subprocess.run([python, "-m", "compileall", "-q", str(REPO / "retained")],
                           capture_output=True, timeout=RUN_WAIT_S, check=False)
            env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        bindir = Path(python).parent
        script = shutil.which("retained", path=str(bindir))
        if script is None:
            raise SystemExit(f"bench_brief: no retained console script beside {python}; install the package first")
        # The hook finds the console script on PATH, as a host's shell would.
        env["PATH"] = str(bindir) + os.pathsep + env.get("PATH", "")
        env_indexed = {**env, "RETAINED_DIR": str(indexed)}
        env_bare = {**env, "RETAINED_DIR": str(bare)}
        hook = REPO / "hooks" / "session-start.sh"
        event = b'{"session_id":"bench","hook_event_name":"SessionStart","source":"startup"}'
        cases: dict[str, tuple[list[str], dict[str, str], bytes | None]] = {
            "python_c_pass": ([python, "-c", "pass"], env, None),
            "script_indexed": ([script, "brief"], env_indexed, None),
            "module_indexed": ([python, "-m", "retained", "--brief"], env_indexed, None),
            "hook_indexed": (["sh", str(hook)], env_indexed, event),
            "plugin_hook_indexed": (["sh", str(REPO / "plugin" / "scripts" / "retained-launch"), "--hook", "SessionStart"], env_indexed, event),
            "module_no_index": ([python, "-m", "retained", "--brief"], env_bare, None),
        }
        if args.pulled:
            cases["module_pulled"] = ([python, "-m", "retained", "--brief"], {**env, "RETAINED_DIR": str(pulled)}, None)
        # One unrecorded run of each warms the page cache and the bytecode cache.
        if args.nice:
            os.nice(args.nice)  # inherited by every timed child, pass and brief alike
        sizes = {}
        for name, (cmd, e, stdin) in cases.items():
            sizes[name] = len(_run(cmd, e, stdin)[2])
        wall: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(rounds):
            for name, (cmd, e, stdin) in cases.items():
                w, c, _out = _run(cmd, e, stdin)
                wall[name].append(w)
                cpu[name].append(c)
        brief_json = json.loads(_run([python, "-m", "retained", "--brief", "--json"], env_indexed)[2])
        bare_json = json.loads(_run([python, "-m", "retained", "--brief", "--json"], env_bare)[2])
        pulled_json = (json.loads(_run([python, "-m", "retained", "--brief", "--json"], {**env, "RETAINED_DIR": str(pulled)})[2])
                       if args.pulled else None)
        result = {
            "bench": "brief",
            "install": "fresh venv, non-editable pip install" if venv_tmp is not None else f"the running interpreter ({python})",
            "commands": {name: " ".join(cmd) for name, (cmd, _e, _s) in cases.items()},
            "records": brief_json.get("head", {}).get("seq"),
            "log_bytes": (indexed / "log.jsonl").stat().st_size,
            "build": built,
            "rounds": rounds,
            **against_pass(wall, cpu, TARGET_OVER_PASS_MS),
            "output_chars": sizes,
            "brief": {
                "indexed": {"shown": len(brief_json["included"]), "eligible": brief_json["eligible"],
                            "exact": brief_json["exact"], "log_bytes_read": brief_json["log_bytes_read"],
                            "index": brief_json["index"]["state"]},
                "no_index": {"shown": len(bare_json["included"]), "eligible": bare_json["eligible"],
                             "exact": bare_json["exact"], "log_bytes_read": bare_json["log_bytes_read"],
                             "not_read": bare_json["dropped"]["not_read"]},
                **({"pulled": {"stores": len(pulled_json["pulled"]), "shown": len(pulled_json["included"]),
                               "shown_pulled": sum(1 for e in pulled_json["included"] if "origin" in e),
                               "eligible": pulled_json["eligible"], "exact": pulled_json["exact"]}}
                   if pulled_json is not None else {}),
            },
            "imports": _imports(python, env_indexed),
            "nice": args.nice,
        }
        if args.json:
            print(json.dumps(result))
        else:
            print(say(f"brief at {result['records']} records", result))
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if venv_tmp is not None:
            shutil.rmtree(venv_tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
