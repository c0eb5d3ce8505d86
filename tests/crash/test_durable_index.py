"""The index never holds bytes that were not yet durable (issue 29, point 3; L6 in core/log.py).

A real writer process is stopped between its ``os.write`` and its fsync
(its own ``Log._make_durable`` waits for a line on stdin before it syncs):
its line is in the file, visible to every reader, and not durable. A reader
in this process must not index it, or a power cut would leave the index
ahead of the log, a false "rolled back" for ever. Once the writer syncs,
or dies before it could, the next read indexes the line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from retained import Store

from ..conftest import REPO

WRITE_S = 60  # bound on a subprocess step, never a synchronisation

PAUSED_WRITER = textwrap.dedent("""
    import sys
    from retained import Store
    from retained.core.log import Log

    sync = Log._make_durable

    def paused(self, fd, created):
        print("written", flush=True)  # the line is in the file; its fsync waits for the test
        sys.stdin.readline()
        sync(self, fd, created)

    Log._make_durable = paused
    with Store(sys.argv[1]) as s:
        print("acked", s.write("the in-flight line about zebras")["seq"], flush=True)
""")

EARLIER_WRITER = textwrap.dedent("""
    import sys
    from retained import Store
    with Store(sys.argv[1]) as s:
        for i in range(3):
            s.write(f"earlier note {i} about giraffes")
""")


def _indexed(store_dir):
    with Store(store_dir) as s:
        found = s.search("zebras")
        earlier = s.search("giraffes")["returned"]
        seqs = [row[0] for row in s.index.connection().execute("SELECT seq FROM records ORDER BY seq")]
    return found, earlier, seqs


def _start_paused_writer(store_dir):
    # Three records by another process first: a reader learns they are durable from what their writer published.
    subprocess.run([sys.executable, "-c", EARLIER_WRITER, str(store_dir)], cwd=REPO, check=True, timeout=WRITE_S)
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_WRITER, str(store_dir)], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "written"
    assert b"the in-flight line about zebras" in (store_dir / "log.jsonl").read_bytes()
    return proc


def test_a_line_between_its_write_and_its_fsync_is_not_indexed_until_its_writer_syncs(store_dir):
    proc = _start_paused_writer(store_dir)
    try:
        found, earlier, seqs = _indexed(store_dir)
        assert found["returned"] == 0 and found["index"].get("not_yet_durable", 0) > 0
        assert earlier == 3 and seqs == [1, 2, 3]  # everything durable before it is indexed
        with Store(store_dir) as s:
            assert s.get([4])[0]["record"]["text"] == "the in-flight line about zebras"  # the log has it, to read
    finally:
        out, _ = proc.communicate("go\n", timeout=WRITE_S)
    assert proc.returncode == 0 and "acked 4" in out
    found, earlier, seqs = _indexed(store_dir)
    assert found["returned"] == 1 and seqs == [1, 2, 3, 4]
    with Store(store_dir) as s:
        assert s.verify()["ok"]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_line_whose_writer_died_before_its_fsync_is_synced_by_the_reader_then_indexed(store_dir):
    proc = _start_paused_writer(store_dir)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=WRITE_S)
    # No writer holds the lock now: the reader fsyncs the line itself (nobody else will) and indexes it.
    found, _, seqs = _indexed(store_dir)
    assert found["returned"] == 1 and seqs == [1, 2, 3, 4]
