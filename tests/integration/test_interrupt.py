"""Ctrl-C at any moment of ``retained serve``, ``serve --http`` and ``view``: a prompt, quiet exit (issue 29, point 1).

Each case starts the real command as the ``retained`` console script does
(import ``retained.__main__``, call its ``main``) and sends SIGINT at a moment of
its life: during the imports (a few fixed delays after the interpreter has
imported the entry module, which land in different imports depending on the
machine's load; a signal during the interpreter's own start-up is Python's
to answer, as it is for ``python -c pass``) and once it serves (after its ready line, or its reply to
``initialize`` on stdio). The process must exit by itself with 130 or 0,
print no traceback and not die of a signal. The bound on the wait is there
only so that a server that keeps serving fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from retained import Store

from ..conftest import REPO

COMMANDS = {
    "serve": ["serve"],
    "serve-http": ["serve", "--http", "--port", "0"],
    "view": ["view", "--port", "0"],
}
# Seconds after our code starts: through the imports of the command line, mcp, uvicorn and starlette.
MOMENTS = [0.0, 0.02, 0.08, 0.2, 0.4, 0.7, 1.1, "ready"]
# What the console script runs, with one line on stderr first so that the clock starts in our code.
SCRIPT = ("import sys; import retained.__main__ as entry; sys.stderr.write('started\\n'); sys.stderr.flush(); "
          "sys.argv[0] = 'retained'; sys.exit(entry.main())")
EXIT_WAIT_S = 60.0  # a bound, not a speed: a server that ignores Ctrl-C would otherwise run forever
READY_WAIT_S = 120.0

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def _ready_line(name: str, line: bytes) -> bool:
    if name == "serve-http":
        return b"serving MCP on" in line
    if name == "view":
        return b"viewing" in line
    return line.startswith(b"{")


def _interrupt(name: str, moment: float | str, store_dir) -> tuple[int, str, str]:
    """Start the command, send SIGINT at ``moment``; (exit status, stdout, stderr)."""
    env = {**os.environ, "RETAINED_DIR": str(store_dir), "PYTHONUNBUFFERED": "1"}
    if name == "view":  # the viewer refuses a directory with no store in it
        with Store(store_dir) as store:
            store.write("a note for the viewer to show")
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, *COMMANDS[name]], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=env)
    out: list[bytes] = []
    err: list[bytes] = []
    ready = threading.Event()
    started = threading.Event()
    stream_of_ready = proc.stdout if name == "serve" else proc.stderr

    def pump(stream, sink: list[bytes], watch: bool) -> None:
        for line in iter(stream.readline, b""):
            sink.append(line)
            if line == b"started\n":
                started.set()
            if watch and _ready_line(name, line):
                ready.set()

    readers = [threading.Thread(target=pump, args=(proc.stdout, out, stream_of_ready is proc.stdout), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, err, stream_of_ready is proc.stderr), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        if not started.wait(READY_WAIT_S):
            raise AssertionError(f"{name} never started: {b''.join(err).decode(errors='replace')}")
        if moment == "ready":
            if name == "serve":
                proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
                proc.stdin.flush()
            if not ready.wait(READY_WAIT_S):
                raise AssertionError(f"{name} never became ready: {b''.join(err).decode(errors='replace')}")
        else:
            time.sleep(float(moment))
        proc.send_signal(signal.SIGINT)
        try:
            status = proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{name} still running {EXIT_WAIT_S:.0f} s after Ctrl-C at {moment}") from exc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for reader in readers:
            reader.join(timeout=10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
    return status, b"".join(out).decode(errors="replace"), b"".join(err).decode(errors="replace")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_issue_29_ctrl_c_at_any_moment_exits_cleanly(name, tmp_path):
    """Every moment runs at once, in its own process, so the imports of some overlap the signals of others."""
    results: dict[object, tuple[int, str, str]] = {}
    failures: dict[object, BaseException] = {}

    def one(moment: float | str) -> None:
        try:
            results[moment] = _interrupt(name, moment, tmp_path / f"store-{moment}")
        except BaseException as exc:  # noqa: BLE001 - reported below, with the moment it belongs to
            failures[moment] = exc

    threads = [threading.Thread(target=one, args=(m,)) for m in MOMENTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    for moment, (status, out, err) in results.items():
        assert status in (0, 130), (moment, status, err)
        assert "Traceback" not in err and "Traceback" not in out, (moment, err)
        assert "Exception ignored" not in err, (moment, err)
