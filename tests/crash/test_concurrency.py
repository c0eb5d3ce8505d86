"""Two processes x 4 threads appending at once: one contiguous chain, nothing lost (L2, L3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from retained.core import chain
from retained.core.log import Log

WRITER = Path(__file__).with_name("writer.py")


def test_two_processes_with_four_threads_each_write_2000_records_in_one_chain(store_dir):
    procs = [
        subprocess.Popen(
            [sys.executable, str(WRITER), str(store_dir), f"p{n}", "250", "4"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    proofs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        proofs += [json.loads(x) for x in out.splitlines()]
    assert len(proofs) == 2000
    assert sorted(p["seq"] for p in proofs) == list(range(1, 2001))
    assert not any(p["duplicate"] for p in proofs)

    log = Log(store_dir)
    report = chain.walk(log.scan())
    assert report.ok and report.records == 2000 and report.head_seq == 2000
    texts = [line.record["text"] for line in log.scan()]
    assert len(set(texts)) == 2000
    by_seq = {line.seq: line for line in log.scan()}
    for p in proofs:
        assert by_seq[p["seq"]].hash == p["hash"] and by_seq[p["seq"]].offset == p["offset"]
