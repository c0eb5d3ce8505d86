"""Real MCP servers for the integration tests: subprocesses on stdio and on loopback HTTP.

Every wait here is bounded: a reply, a ready line, a process exit.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import blake3
import orjson
import pytest

REPO = Path(__file__).resolve().parent.parent.parent
WAIT_S = 60.0  # bound on any single wait for a server (start-up imports mcp: seconds on a busy machine)

TOOL_NAMES = {"memory_write", "memory_checkpoint", "memory_get", "memory_search", "memory_verify", "memory_forget"}

# The exact arguments of each tool: (all properties, required ones).
TOOL_ARGUMENTS = {
    "memory_write": (
        {"text", "kind", "scope", "source", "body", "fields", "supersedes", "client_op_id"},
        {"text"},
    ),
    "memory_checkpoint": ({"label", "summary", "scope"}, {"label"}),
    "memory_get": ({"ids", "limit", "kind", "scope", "around", "window", "store_id"}, set()),
    "memory_search": ({"query", "k", "scope", "max_tokens", "include_superseded", "context"}, {"query"}),
    "memory_verify": (set(), set()),
    "memory_forget": ({"ids", "reason"}, {"ids", "reason"}),
}
READ_ONLY = {"memory_get", "memory_search", "memory_verify"}

RECORD_BYTES_MAX_FOR_TESTS = 64 * 1024
LOCK_WAIT_S_FOR_TESTS = 0.5


def server_env(store_dir: Path, **extra: str) -> dict[str, str]:
    """The environment a test server runs with: its own store, small limits, no token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_")}
    env["RETAINED_DIR"] = str(store_dir)
    if "RETAINED_EMBED_LOCAL" in os.environ:  # the test's choice about the embedded model (tests/conftest.py)
        env["RETAINED_EMBED_LOCAL"] = os.environ["RETAINED_EMBED_LOCAL"]
    # The test's own anchor directory (tests/conftest.py); a server a module-scoped
    # fixture starts, before that fixture runs, keeps its anchors beside its store.
    env["RETAINED_ANCHOR_DIR"] = os.environ.get("RETAINED_ANCHOR_DIR") or str(store_dir.parent / "anchors")
    env["RETAINED_RECORD_BYTES_MAX"] = str(RECORD_BYTES_MAX_FOR_TESTS)
    env["RETAINED_LOCK_WAIT_S"] = str(LOCK_WAIT_S_FOR_TESTS)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def stdio_params(store_dir: Path, **extra: str) -> Any:
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable, args=["-m", "retained"], env=server_env(store_dir, **extra), cwd=str(REPO)
    )


def client_info(name: str, version: str = "9.8.7") -> Any:
    from mcp_types import Implementation

    return Implementation(name=name, version=version)


def error_code(result: Any) -> str:
    """The stable code of a tool error: the text is 'Error executing tool NAME: CODE: sentence'."""
    assert result.is_error, result
    text = result.content[0].text
    prefix, _, rest = text.partition(": ")
    assert prefix.startswith("Error executing tool "), text
    code, _, sentence = rest.partition(": ")
    assert code and code.replace("_", "").isalpha() and code.islower(), text
    assert sentence and sentence[0].islower() and not sentence.endswith("."), text
    return code


def log_bytes(store_dir: Path) -> bytes:
    path = store_dir / "log.jsonl"
    return path.read_bytes() if path.exists() else b""


def check_chain_from_file(path: Path) -> list[dict[str, Any]]:
    """Recompute every line's digest and link as DESIGN specifies; return the records."""
    records = []
    prev = "0" * 64
    for number, raw in enumerate(path.read_bytes().splitlines(keepends=True), start=1):
        assert raw.endswith(b"\n"), f"line {number} is not terminated"
        rec = orjson.loads(raw)
        assert orjson.dumps(rec, option=orjson.OPT_SORT_KEYS) + b"\n" == raw, f"line {number} is not canonical"
        assert rec["seq"] == number, f"line {number} has seq {rec['seq']}"
        assert rec["prev"] == prev, f"seq {number}: prev does not link"
        content = {k: v for k, v in rec.items() if k not in ("seq", "prev", "hash")}
        cd = blake3.blake3(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).hexdigest()
        link = orjson.dumps({"cd": cd, "prev": prev, "seq": number}, option=orjson.OPT_SORT_KEYS)
        assert rec["hash"] == blake3.blake3(link).hexdigest(), f"seq {number}: hash does not recompute"
        prev = rec["hash"]
        records.append(rec)
    return records


class LineReader:
    """Lines from a subprocess pipe, read on a thread so every wait can be bounded."""

    def __init__(self, stream: Any) -> None:
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.seen: list[bytes] = []
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: Any) -> None:
        for line in iter(stream.readline, b""):
            self.lines.put(line)
        self.lines.put(b"")

    def next(self, timeout: float = WAIT_S) -> bytes:
        line = self.lines.get(timeout=timeout)
        self.seen.append(line)
        return line

    def until(self, predicate: Any, timeout: float = WAIT_S) -> bytes:
        while True:
            line = self.next(timeout)
            if not line:
                raise AssertionError(f"stream ended before the expected line; saw {self.seen[-5:]!r}")
            if predicate(line):
                return line

    def rest(self, timeout: float = WAIT_S) -> list[bytes]:
        """Every remaining line until the stream closes."""
        out = []
        while True:
            line = self.next(timeout)
            if not line:
                return out
            out.append(line)


class RawServer:
    """``python -m retained`` on stdio, spoken to in raw JSON-RPC lines."""

    def __init__(self, store_dir: Path, *args: str, **env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "retained", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=server_env(store_dir, **env),
            cwd=REPO,
        )
        self.out = LineReader(self.proc.stdout)
        self.err = LineReader(self.proc.stderr)
        self._next_id = 0

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, method: str, params: dict[str, Any] | None = None, *, notify: bool = False) -> int | None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if notify:
            self.send_raw(json.dumps(message).encode() + b"\n")
            return None
        self._next_id += 1
        message["id"] = self._next_id
        self.send_raw(json.dumps(message).encode() + b"\n")
        return self._next_id

    def reply(self, request_id: int) -> dict[str, Any]:
        line = self.out.until(lambda raw: json.loads(raw).get("id") == request_id)
        return json.loads(line)

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        request_id = self.send(method, params)
        assert request_id is not None
        return self.reply(request_id)

    def initialize(self, name: str = "raw-client", version: str = "1.0") -> dict[str, Any]:
        reply = self.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": name, "version": version}},
        )
        self.send("notifications/initialized", notify=True)
        return reply

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def close(self) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=WAIT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream:
                    stream.close()


@pytest.fixture
def raw_server(tmp_path: Path) -> Iterator[Any]:
    """A factory of raw stdio servers on tmp_path/store, all closed at the end."""
    started: list[RawServer] = []

    def start(*args: str, **env: str) -> RawServer:
        server = RawServer(tmp_path / "store", *args, **env)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.proc.poll() is None:
            server.close()
        else:
            for stream in (server.proc.stdin, server.proc.stdout, server.proc.stderr):
                if stream and not stream.closed:
                    stream.close()


class HttpServer:
    """``python -m retained serve --http`` on a free loopback port, read from its ready line."""

    def __init__(self, store_dir: Path, *args: str, **env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "retained", "serve", "--http", "--port", "0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=server_env(store_dir, **env),
            cwd=REPO,
        )
        self.out = LineReader(self.proc.stdout)
        self.err = LineReader(self.proc.stderr)
        ready = self.err.until(lambda raw: b"serving MCP on http://" in raw).decode()
        self.url = ready.split("serving MCP on ", 1)[1].split()[0]
        self.port = int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[Any]:
    """A factory of HTTP servers on tmp_path/store, all stopped at the end."""
    started: list[HttpServer] = []

    def start(*args: str, **env: str) -> HttpServer:
        server = HttpServer(tmp_path / "store", *args, **env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
