"""One server under test: a real subprocess spoken to with the MCP SDK's client over stdio.

Every call has a timeout, every process runs in its own process group, and
every process the harness started is stopped when its block ends (SIGTERM,
then the SDK's own escalation to SIGKILL), killed when the harness exits, or
killed at once when a probe asks for a SIGKILL.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from . import __version__

CALL_TIMEOUT_S = 30.0
"""Longest wait for one tool call (a 16 MiB argument included)."""

START_TIMEOUT_S = 60.0
"""Longest wait for the initialize reply of a freshly spawned server."""

STDERR_TAIL_BYTES = 2000
"""How much of a server's stderr a report quotes when it died."""

_LIVE_GROUPS: set[int] = set()


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@atexit.register
def _kill_leftovers() -> None:
    for pid in list(_LIVE_GROUPS):
        _kill_group(pid)
        _LIVE_GROUPS.discard(pid)


@dataclass
class Reply:
    """What one tool call came back with."""

    ok: bool
    data: Any = None
    text: str = ""
    error: str = ""
    crashed: bool = False

    def brief(self, limit: int = 160) -> str:
        text = self.error if not self.ok else self.text
        text = " ".join(text.split())
        return text if len(text) <= limit else text[: limit - 3] + "..."


class Server:
    """A live server process and its client session."""

    def __init__(self, client: Any, pidfile: Path, stderr_path: Path) -> None:
        self._client = client
        self._pidfile = pidfile
        self.stderr_path = stderr_path
        self.killed = False

    @property
    def info(self) -> str:
        """The name and version the server gave in its initialize reply."""
        found = self._client.server_info
        return f"{found.name} {found.version}".strip() if found is not None else "unnamed server"

    @property
    def pid(self) -> int | None:
        try:
            return int(self._pidfile.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return None

    async def call(self, tool: str, arguments: dict[str, Any] | None = None, *, timeout: float = CALL_TIMEOUT_S) -> Reply:
        """Call a tool; never raises for what the server does, only reports it."""
        from mcp.shared.exceptions import MCPError

        try:
            with anyio.fail_after(timeout):
                result = await self._client.call_tool(tool, arguments or {}, read_timeout_seconds=timeout)
        except TimeoutError:
            return Reply(False, error=f"no reply to {tool} within {timeout:g} s", crashed=True)
        except MCPError as exc:
            return Reply(False, error=f"protocol error {exc.error.code}: {exc.error.message}")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            return Reply(False, error=f"connection lost during {tool}: {type(exc).__name__}", crashed=True)
        texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
        text = "\n".join(texts)
        if result.is_error:
            return Reply(False, text=text, error=text or "error reply without text")
        data = result.structured_content
        if data is None and texts:
            try:
                data = json.loads(texts[0])
            except ValueError:
                data = None
        return Reply(True, data=data, text=text)

    def kill(self) -> None:
        """SIGKILL the server's whole process group, right now."""
        pid = self.pid
        if pid is not None:
            _kill_group(pid)
        self.killed = True

    def stderr_tail(self) -> str:
        try:
            data = self.stderr_path.read_bytes()[-STDERR_TAIL_BYTES:]
        except OSError:
            return ""
        return data.decode("utf-8", "replace")


@asynccontextmanager
async def spawn(command: list[str], env: dict[str, str], workdir: Path) -> AsyncIterator[Server]:
    """Start ``command`` with ``env`` and yield a connected Server; kill it on exit.

    The command runs under ``sh`` only long enough to note its pid, then execs
    the server, so the pid is the server's own and its process group is the
    group to kill.
    """
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp_types import Implementation

    workdir.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix="pid-", dir=workdir)
    os.close(handle)
    pidfile = Path(name)
    stderr_path = pidfile.with_name(pidfile.name.replace("pid-", "stderr-"))
    params = StdioServerParameters(
        command="/bin/sh",
        args=["-c", 'echo $$ > "$1"; shift; exec "$@"', "retained-harness", str(pidfile), *command],
        env=env,
    )
    async with AsyncExitStack() as stack:
        # A small local file opened once per server; the server's stderr goes straight to it.
        errlog = stack.enter_context(open(stderr_path, "w", encoding="utf-8"))  # noqa: SIM115
        transport = stdio_client(params, errlog=errlog)
        client = Client(
            transport,
            mode="legacy",
            client_info=Implementation(name="retained-harness", version=__version__),
            read_timeout_seconds=START_TIMEOUT_S,
            cache=None,
        )
        server = Server(client, pidfile, stderr_path)

        def _forget() -> None:
            pid = server.pid
            if pid is not None:
                _kill_group(pid)
                _LIVE_GROUPS.discard(pid)

        stack.callback(_forget)
        try:
            await stack.enter_async_context(client)
        except Exception as exc:
            leaf: BaseException = exc
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            tail = " ".join(server.stderr_tail().split())[-300:]
            raise ServerStartError(
                f"{ServerStartError.prefix} ({type(leaf).__name__}: {leaf}); its stderr ends: {tail or '(empty)'}"
            ) from exc
        pid = server.pid
        if pid is not None:
            _LIVE_GROUPS.add(pid)
            # Runs before the client's own shutdown: no probe relies on a clean
            # exit, and a Python server can take seconds to finalise after its
            # stdin closes, which the SDK waits out before it signals.
            stack.callback(_kill_group, pid, signal.SIGTERM)
        yield server


class ServerStartError(Exception):
    """The command under test did not answer the initialize handshake."""

    prefix = "server did not start"


class RawServer:
    """A live server process spoken to in raw JSON-RPC lines, for what no SDK client would send."""

    def __init__(self, process: Any) -> None:
        from anyio.streams.buffered import BufferedByteReceiveStream

        self._process = process
        self._out = BufferedByteReceiveStream(process.stdout)
        self.ended = False  # its stdout closed

    @property
    def pid(self) -> int:
        return int(self._process.pid)

    async def send(self, line: bytes) -> None:
        await self._process.stdin.send(line if line.endswith(b"\n") else line + b"\n")

    async def close_input(self) -> None:
        await self._process.stdin.aclose()

    async def reply(self, request_id: Any, timeout: float = CALL_TIMEOUT_S) -> dict[str, Any] | None:
        """The response carrying ``request_id`` (None: JSON null), or None if none came within ``timeout``."""
        with anyio.move_on_after(timeout):
            while not self.ended:
                try:
                    line = await self._out.receive_until(b"\n", RAW_LINE_BYTES_MAX)
                except (anyio.IncompleteRead, anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    self.ended = True
                    break
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if isinstance(message, dict) and message.get("id", object()) == request_id and (
                    "result" in message or "error" in message
                ):
                    return message
        return None

    async def initialize(self) -> dict[str, Any] | None:
        await self.send(json.dumps({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "retained-harness", "version": __version__}},
        }).encode())
        reply = await self.reply(0, START_TIMEOUT_S)
        await self.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        return reply


RAW_LINE_BYTES_MAX = 64 * 1024 * 1024
"""Longest reply line a raw client reads (a reply holding a 16 MiB record fits)."""


@asynccontextmanager
async def spawn_raw(command: list[str], env: dict[str, str], workdir: Path) -> AsyncIterator[RawServer]:
    """Start ``command`` in its own process group and yield a RawServer; kill the group on exit."""
    import subprocess

    workdir.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix="stderr-raw-", dir=workdir)
    os.close(handle)
    with open(name, "wb") as errlog:
        process = await anyio.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog, env=env, start_new_session=True
        )
        _LIVE_GROUPS.add(process.pid)
        try:
            async with process:  # its exit waits for the process: killed first
                try:
                    yield RawServer(process)
                finally:
                    _kill_group(process.pid)
        finally:
            _LIVE_GROUPS.discard(process.pid)
