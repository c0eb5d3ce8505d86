"""A writer killed with SIGKILL at random moments, 100 times on one store (L4, recovery T2).

After each kill: every proof the writer printed (so: acknowledged) is in the
file byte-exact at its offset, and the chain verifies. The writer runs one
thread, or four threads sharing one Store (group commit: a kill lands while
a group is being written), 40 times.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from retained.core import chain, record
from retained.core.log import Log

WRITER = Path(__file__).with_name("writer.py")
KILLS = 100


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize(("threads", "kills"), [(1, KILLS), (4, 40)])
def test_sigkill_at_random_moments_never_loses_an_acknowledged_record(store_dir, threads, kills):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    acked: dict[int, dict] = {}
    for round_ in range(kills):
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(store_dir), f"r{round_}", str(10**9), str(threads)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        # Wait for the first ack so the kill lands among appends, then let a
        # random number of further appends go by (bounded), then kill.
        lines = [proc.stdout.readline()]
        for _ in range(rng.randrange(0, 8)):
            lines.append(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
        for raw in [*lines, *rest.splitlines()]:
            raw = raw.strip()
            if not raw:
                continue
            try:
                p = json.loads(raw)
            except json.JSONDecodeError:
                # The kill cut this proof's line short on its way to the pipe:
                # its write was acknowledged, but the parent never read the proof.
                continue
            acked[p["seq"]] = p

        data = (store_dir / "log.jsonl").read_bytes()
        for seq, p in acked.items():
            line = data[p["offset"] : p["offset"] + p["length"]]
            status, _, got_seq, got_hash, _ = record.classify(line.rstrip(b"\n"))
            assert line.endswith(b"\n"), f"seed {seed}: seq {seq} lost its newline"
            assert (status, got_seq, got_hash) == (record.RECORD, seq, p["hash"]), f"seed {seed}, round {round_}"
        report = chain.walk(Log(store_dir).scan())
        assert report.ok, f"seed {seed}, round {round_}: {report.findings}"
    assert len(acked) >= kills
