"""LoCoMo replayed through capture: the same turn-level recall as the same turns written directly?

Each LoCoMo conversation of the held-out half (``eval_locomo.TEST``) is
replayed as hook events, in order: one event per turn in the generic shape
(docs/capture.md), the conversation's first speaker as ``user`` and the
other as ``assistant``, the person's name as ``name``, the session's date as
``at``, the conversation as the host's session and the turn's ``dia_id`` as
its turn id. By default each event is one ``retained capture`` process with
the event on stdin, as a host runs it (``--in-process`` calls the same code
in this process, for a quick look). Then every question is asked with
``Index.search`` as ``eval_locomo`` asks it, and the recall is compared with
``eval_locomo``'s product path on the same conversations, measured in the
same run (the turns written with ``Store.write_batch``, their speaker, date
and dia_id as fields).

    python -m harness eval capture [--json] [--in-process] [--only 30,42]

Target (issue 26): turn-level recall@k within 0.01 of the direct write, k in 1, 3, 5, 10.
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

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.eval_locomo import DEFAULT_DATA, SESSION_K, TEST, load, score
from retained.index.writer import Index
from retained.store import Store

TOLERANCE = 0.01
RUN_WAIT_S = 120


def events_of(turns: list[dict[str, Any]], conv: str, cwd: str) -> list[dict[str, Any]]:
    """The conversation's turns as generic capture events, in order."""
    first = turns[0]["speaker"]
    return [{"host": "locomo", "event": "turn", "session": f"locomo-{conv}", "turn": m["dia_id"], "cwd": cwd,
             "messages": [{"speaker": "user" if m["speaker"] == first else "assistant", "text": m["text"],
                           "name": m["speaker"], "at": m["date"]}]}
            for m in turns]


def replay(directory: Path, events: list[dict[str, Any]], *, in_process: bool) -> dict[str, Any]:
    """Capture every event into the store at ``directory``; returns the ledger's totals and the time taken."""
    t0 = time.perf_counter()
    if in_process:
        from retained.capture.run import Options, capture
        from retained.safety.guard import Guard

        with Store(directory, guard=Guard("redact")) as store:
            for event in events:
                capture(store, json.dumps(event).encode(), Options())
    else:
        script = shutil.which("retained", path=str(Path(sys.executable).parent))
        if script is None:
            raise SystemExit(f"eval_capture: no retained console script beside {sys.executable}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_")}
        env.update(RETAINED_DIR=str(directory), RETAINED_ANCHOR_DIR="off")
        for event in events:
            proc = subprocess.run([script, "capture"], input=json.dumps(event).encode(), env=env, capture_output=True,
                                  timeout=RUN_WAIT_S, check=False)
            if proc.returncode != 0 or proc.stdout:
                raise RuntimeError(f"retained capture exited {proc.returncode} with stdout {proc.stdout[:200]!r}")
    from retained.capture import ledger

    return {"seconds": round(time.perf_counter() - t0, 1), "ledger": ledger.status(directory)["totals"]}


def rank(directory: Path, questions: list[dict[str, Any]], dia_of: Any) -> dict[str, Any]:
    """Each question's ranking (dia_ids) through Index.search, as eval_locomo ranks."""
    out = {}
    with Store(directory) as store:
        index = Index(store.log)
        try:
            index.catch_up()
            for q in questions:
                t1 = time.perf_counter()
                reply = index.search(q["question"], k=SESSION_K)
                ms = (time.perf_counter() - t1) * 1000
                out[q["qid"]] = ([dia_of(r) for r in reply["results"]], ms, 0.0)
        finally:
            index.close()
    return out


def run(data: Path = DEFAULT_DATA, *, only: list[str] | None = None, in_process: bool = False,
        workdir: Path | None = None) -> dict[str, Any]:
    convs, questions = load(data)
    wanted = only or list(TEST)
    tmp = tempfile.mkdtemp(prefix="eval-capture-", dir=workdir)
    try:
        direct: dict[str, Any] = {}
        captured: dict[str, Any] = {}
        replays = {}
        for conv in wanted:
            turns = convs[conv]
            asked = [q for q in questions if q["conv"] == conv]
            # The direct path: eval_locomo's records, in one batch.
            base = Path(tmp) / f"direct-{conv}"
            with Store(base) as store:
                proofs = store.write_batch([{"text": m["text"], "fields": {"speaker": m["speaker"], "date": m["date"],
                                                                           "dia_id": m["dia_id"]}} for m in turns])
            by_seq = {p["seq"]: m["dia_id"] for p, m in zip(proofs, turns, strict=True)}
            direct.update(rank(base, asked, lambda r, by_seq=by_seq: by_seq[r["seq"]]))
            # The capture path.
            cap = Path(tmp) / f"capture-{conv}"
            replays[conv] = replay(cap, events_of(turns, conv, str(Path(tmp))), in_process=in_process)
            captured.update(rank(cap, asked, lambda r: r["record"]["turn"]))
        asked_all = [q for q in questions if q["conv"] in wanted]
        a, b = score(asked_all, direct), score(asked_all, captured)
        diff = {k: round(b["recall"][k] - a["recall"][k], 3) for k in a["recall"]}
        return {
            "eval": "capture", "conversations": wanted, "questions": len(asked_all),
            "turns": sum(len(convs[c]) for c in wanted),
            "mode": "in process" if in_process else "one retained capture process per event",
            "direct": {"recall": a["recall"], "session_recall": a["session_recall"]},
            "captured": {"recall": b["recall"], "session_recall": b["session_recall"]},
            "difference": diff, "tolerance": TOLERANCE,
            "within_tolerance": all(abs(v) <= TOLERANCE for v in diff.values()),
            "replays": replays,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness eval capture", description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--only", help="comma-separated conversation ids (default: the held-out half)")
    parser.add_argument("--in-process", action="store_true", help="call capture in this process (quick look)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.data, only=args.only.split(",") if args.only else None, in_process=args.in_process)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['questions']} questions over {result['turns']} turns ({result['mode']}): "
              f"direct {result['direct']['recall']}, captured {result['captured']['recall']}, "
              f"difference {result['difference']} (tolerance {TOLERANCE})")
    return 0 if result["within_tolerance"] else 1


if __name__ == "__main__":
    sys.exit(main())
