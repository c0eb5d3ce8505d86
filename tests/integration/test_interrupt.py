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


def _interrupt(name: str, moment: float | str, store_dir, *, then: list[dict] = (), until=None) -> tuple[int, str, str]:
    """Start the command, send SIGINT at ``moment``; (exit status, stdout, stderr).

    Once ready, ``then`` (JSON-RPC messages, stdio only) is sent and ``until()`` polled before the signal.
    """
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
            for message in then:
                proc.stdin.write(json.dumps(message).encode() + b"\n")
                proc.stdin.flush()
            waited = threading.Event()
            start = time.monotonic()
            while until is not None and not until():
                if time.monotonic() - start > READY_WAIT_S:
                    raise AssertionError(f"{name}: the condition before Ctrl-C never held: "
                                         f"{b''.join(err).decode(errors='replace')}")
                waited.wait(0.1)  # polls the condition; the bound is for a hang only
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


def _vectors(store_dir) -> int:
    """Vectors the store's index holds (read as another process would; 0 before the table exists)."""
    import sqlite3

    try:
        db = sqlite3.connect(f"file:{store_dir / 'index.sqlite3'}?mode=ro", uri=True, timeout=30)
        try:
            return int(db.execute("SELECT count(*) FROM vectors WHERE dim > 0").fetchone()[0])
        finally:
            db.close()
    except sqlite3.OperationalError:
        return 0


@pytest.mark.parametrize("name", ["serve", "view"])
def test_ctrl_c_while_the_embedded_model_fills_vectors_in_the_background(name, tmp_path, monkeypatch):
    """The server and the viewer embed a store's records on a background thread; Ctrl-C still stops them
    cleanly, and the vectors already stored stay."""
    monkeypatch.delenv("RETAINED_EMBED_LOCAL", raising=False)  # the embedded model on (the test extra installs it)
    store_dir = tmp_path / "store"
    with Store(store_dir) as store:
        for i in range(200):
            store.write(f"note {i}: the tomatoes in bed {i % 7} need water")
    # The stdio server starts embedding at its first search; the viewer when it starts.
    search = [{"jsonrpc": "2.0", "method": "notifications/initialized"},
              {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "memory_search", "arguments": {"query": "tomatoes"}}}]
    status, out, err = _interrupt(name, "ready", store_dir, then=search if name == "serve" else [],
                                  until=lambda: _vectors(store_dir) > 0)
    assert status in (0, 130), (status, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    kept = _vectors(store_dir)
    assert 0 < kept <= 200
    monkeypatch.setenv("RETAINED_EMBED_LOCAL", "0")
    with Store(store_dir) as store:
        assert store.verify()["ok"]
