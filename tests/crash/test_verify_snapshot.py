"""Verify judges one snapshot of the log while writers append (issue 14).

The chain walk and the index check stop at the size verify fixed when it
began: rows the index gains past it (another process's catch-up, or verify's
own) are not ghosts, and a line half-written at that size is not damage.
"""

from __future__ import annotations

import subprocess
import sys
import time

from retained import Store

# A writer that appends until the stop file appears, at most WRITES_MAX
# records and DEADLINE_S seconds: it stops by itself whatever the test does.
WRITER = """
import os, sys, time
from retained import Store
directory, stop, name = sys.argv[1], sys.argv[2], sys.argv[3]
deadline = time.monotonic() + 120
with Store(directory, lock_wait_s=60) as store:
    for i in range(20000):
        if os.path.exists(stop) or time.monotonic() > deadline:
            break
        store.write(f"{name} record {i} " + "y" * (i % 131), scope=name)
"""


def test_issue_14_verify_during_three_writers_reports_no_finding_and_the_size_it_judged(store_dir, anchor_dir, tmp_path):
    with Store(store_dir) as store:
        store.write("before the writers")
        store.search("writers")  # the index exists and is current, as in the report
    stop = tmp_path / "stop"
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(store_dir), str(stop), f"w{n}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for n in range(3)
    ]
    reports = []
    try:
        # Wait (bounded) until the writers are appending.
        log = store_dir / "log.jsonl"
        start = log.stat().st_size
        for _ in range(600):
            if log.stat().st_size > start + 20_000:
                break
            time.sleep(0.01)
        # Each verify also records the head it judged, which the next one checks.
        with Store(store_dir, anchor_dir=anchor_dir) as store:
            for _ in range(20):
                reports.append(store.verify())
                time.sleep(0.02)
        grew_during = log.stat().st_size
    finally:
        stop.touch()
        errors = [w.communicate(timeout=180)[1] for w in writers]
    assert all(w.returncode == 0 for w in writers), errors
    findings = [f for r in reports for f in r["findings"]]
    assert findings == [], findings[:3]
    judged = [r["snapshot"]["bytes"] for r in reports]
    assert all(r["ok"] for r in reports)
    # Each verify says what it judged, and the writers were appending meanwhile.
    assert judged == sorted(judged) and judged[-1] > judged[0], judged
    assert grew_during > judged[0]
    for r in reports:
        assert r["snapshot"]["seq"] == r["head"]["seq"] and r["snapshot"]["hash"] == r["head"]["hash"]
    assert all(r["anchors"]["recorded"] for r in reports)
    assert [r["anchors"]["checked"] for r in reports][1:] == [1] * 19
    # After the writers stop, the whole log verifies as well.
    with Store(store_dir, anchor_dir=anchor_dir) as store:
        final = store.verify()
    assert final["ok"], final["findings"][:3]
    assert final["snapshot"]["bytes"] == (store_dir / "log.jsonl").stat().st_size
