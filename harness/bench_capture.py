"""The capture hook, whole process, at 100,000 records, as the host runs it.

Builds a store of ``--records`` records (~500-byte lines, every one with a
``client_op_id`` as captured turns have), lets capture build its map of ids
once (an unrecorded run), then, alternating in the same run so machine noise
hits all alike, times the whole process:

- ``python -c pass`` (the interpreter's own start-up, the floor),
- ``retained capture`` fed a new UserPromptSubmit event on stdin (a new
  record each run: guard, lock, append, fsync, read-back, ledger line),
- ``retained capture`` fed a new Stop event (the reply; its turn id is the
  prompt's, kept by the previous event),
- ``retained capture`` fed an event already captured (the deduplicated path),
- ``python -m retained capture`` with a new prompt.

Wall time per run and the child's CPU time. Target (DESIGN): the hook's
median wall time <= ``python -c pass`` + 60 ms. ``--install`` measures a
fresh non-editable install, as users have it.

    python -m harness bench capture --records 100000 --rounds 15 --install --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.bench_brief import _text
from harness.whole_process import REPO, RUN_WAIT_S, against_pass, fill, install, say
from harness.whole_process import run as _run

TARGET_OVER_PASS_MS = 60.0


def build_store(directory: Path, records: int, seed: int = 11) -> dict[str, Any]:
    """``records`` records of two sessions' turns (~500-byte lines), each with a client_op_id."""
    import random

    sys.path.insert(0, str(REPO))
    from retained import Store

    rng = random.Random(seed)

    def make(seq: int) -> dict[str, Any]:
        session = f"old-{(seq - 1) // 1000}"
        return {"text": _text(rng, 200), "kind": "turn", "scope": str(REPO), "source": "claude-code:UserPromptSubmit",
                "client_op_id": f"cap:claude-code:{session}:p-{seq - 1}:user",
                "fields": {"session": session, "speaker": "user", "event": "UserPromptSubmit"}}

    t0 = time.perf_counter()
    with Store(directory) as store:
        fill(store, records, make)
        head = store.head()
    return {"write_s": round(time.perf_counter() - t0, 2), "head_seq": head["seq"], "log_bytes": head["bytes"]}


RUN = f"{os.getpid()}-{time.time_ns()}"  # a new session per benchmark run: a reused store holds the last run's turns


def _event(kind: str, n: int) -> bytes:
    session = "bench-repeat" if kind == "repeat" else f"bench-{RUN}"
    base: dict[str, Any] = {"session_id": session, "transcript_path": "/nonexistent.jsonl", "cwd": str(REPO)}
    if kind == "prompt":
        base.update(hook_event_name="UserPromptSubmit", prompt=f"bench prompt {n}: the deploy target is staging",
                    prompt_id=f"bench-p-{n}")
    elif kind == "stop":
        base.update(hook_event_name="Stop", last_assistant_message=f"bench reply {n}: noted, staging.",
                    prompt_id=f"bench-p-{n}", stop_hook_active=False)
    else:
        base.update(hook_event_name="UserPromptSubmit", prompt="the same prompt again", prompt_id="bench-repeat")
    return json.dumps(base).encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness bench capture", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15, help="runs of each process, alternating (at least 15)")
    parser.add_argument("--store", metavar="DIR", help="build the store here, or reuse it if it already has --records records")
    parser.add_argument("--nice", type=int, default=0,
                        help="add this to the scheduling niceness of the timed runs (pass and capture alike)")
    parser.add_argument("--install", action="store_true",
                        help="measure a fresh non-editable install of this checkout (made in a temporary venv)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout (the default prints a summary)")
    args, _ = parser.parse_known_args(argv)
    rounds = max(15, args.rounds)
    tmp = None
    venv_tmp: str | None = None
    base = Path(args.store) if args.store else Path(tmp := tempfile.mkdtemp(prefix="bench-capture-"))
    store = base / "store"
    try:
        built: dict[str, Any] = {"reused": True}
        if not (store / "log.jsonl").exists() or (store / "log.jsonl").stat().st_size < args.records * 300:
            if store.exists():
                shutil.rmtree(store)
            print(f"bench_capture: building {args.records} records in {store} ...", file=sys.stderr, flush=True)
            built = build_store(store, args.records)
        venv_tmp = tempfile.mkdtemp(prefix="bench-capture-venv-") if args.install else None
        env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_") and k != "PYTHONDONTWRITEBYTECODE"}
        if venv_tmp is not None:
            python = str(install(Path(venv_tmp) / "venv", "bench_capture"))
        else:
            python = sys.executable
            subprocess.run([python, "-m", "compileall", "-q", str(REPO / "retained")],
                           capture_output=True, timeout=RUN_WAIT_S, check=False)
            env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        script = shutil.which("retained", path=str(Path(python).parent))
        if script is None:
            raise SystemExit(f"bench_capture: no retained console script beside {python}; install the package first")
        env = {**env, "RETAINED_DIR": str(store), "RETAINED_ANCHOR_DIR": "off"}
        if args.nice:
            os.nice(args.nice)  # inherited by every timed child
        # The unrecorded first runs: capture's map of ids is built once (the whole log read), caches warm.
        t0 = time.perf_counter()
        _run([script, "capture"], env, _event("repeat", 0))
        first_ms = round((time.perf_counter() - t0) * 1000, 1)
        _run([python, "-c", "pass"], env, None)
        cases = ["python_c_pass", "capture_prompt", "capture_stop", "capture_repeat", "module_prompt"]
        wall: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        outputs: dict[str, int] = dict.fromkeys(cases, 0)
        for r in range(rounds):
            for name in cases:
                if name == "python_c_pass":
                    cmd, stdin = [python, "-c", "pass"], None
                elif name == "capture_prompt":
                    cmd, stdin = [script, "capture"], _event("prompt", 2 * r)
                elif name == "capture_stop":
                    cmd, stdin = [script, "capture"], _event("stop", 2 * r)
                elif name == "capture_repeat":
                    cmd, stdin = [script, "capture"], _event("repeat", 0)
                else:
                    cmd, stdin = [python, "-m", "retained", "capture"], _event("prompt", 2 * r + 1)
                w, c, out = _run(cmd, env, stdin)
                wall[name].append(w)
                cpu[name].append(c)
                outputs[name] = max(outputs[name], len(out))
        status = json.loads(_run([script, "capture", "status", "--json"], env, None)[2])
        result = {
            "bench": "capture",
            "install": "fresh venv, non-editable pip install" if venv_tmp is not None else f"the running interpreter ({python})",
            "records": args.records,
            "log_bytes": (store / "log.jsonl").stat().st_size,
            "build": built,
            "first_capture_ms": first_ms,
            "rounds": rounds,
            **against_pass(wall, cpu, TARGET_OVER_PASS_MS),
            "stdout_bytes": outputs,
            "ledger": status["totals"],
            "ledger_adds_up": status["adds_up"],
            "nice": args.nice,
        }
        if args.json:
            print(json.dumps(result))
        else:
            print(say(f"capture at {args.records} records", result) + f"; first capture (builds the id map) {first_ms} ms")
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if venv_tmp is not None:
            shutil.rmtree(venv_tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
