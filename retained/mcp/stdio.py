"""MCP over stdio: every request read gets a reply, the server keeps serving, and it stops when told.

The SDK's stdio transport hands a line its JSON reader fails on (not JSON, a
lone surrogate escape, nesting past the reader's depth, an integer of
thousands of digits, a message of the wrong shape) to its dispatcher, which
drops it: the client waits for a reply that never comes. At end of input the
dispatcher cancels the requests still in flight, and its reader blocks a
worker thread, which an interrupt must wait for. `StdinFront` sits in front of
the SDK's transport (``stdio_server`` with our own input; its output side and
its claim of fd 1 are unchanged); `serve` runs the server behind it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from typing import Any, cast

from retained import limits
from retained.core import json_input

log = logging.getLogger("retained.mcp.server")

DRAIN_WAIT_S = 60.0  # at end of input, how long requests already read may take to be answered
READ_CHUNK_BYTES = 64 * 1024
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
_ID_MIN, _ID_MAX = -(2**63), 2**63 - 1  # an id outside 64 bits is not echoed (many clients could not match it)
ID_PREFIX_BYTES = 64 * 1024  # of a line over the limit, the first bytes kept to find its id


class _TooLong:
    """Stands in the line queue for a line over the limit: its first bytes, where its id may be."""

    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix


class _Huge:
    """A number the SDK's reader cannot hold: thousands of digits, or beyond a float."""


def _parse_int(text: str) -> Any:
    # Python converts at most sys.get_int_max_str_digits() digits; beyond, the reader fails too.
    limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or len(text) + 1
    return int(text) if len(text.lstrip("-")) <= limit else _Huge()


def _parse_float(text: str) -> Any:
    value = float(text)
    return value if value not in (float("inf"), float("-inf")) else _Huge()


def _parse_constant(name: str) -> Any:
    return _Huge()  # NaN, Infinity: not JSON for the SDK's reader


def _shown(key: str) -> str:
    return key.encode("utf-8", "backslashreplace").decode()


def _refused(value: Any) -> str | None:
    """What the SDK's reader refuses in a value (the rest of the tree is walked by ``json_input.find``)."""
    char = json_input.lone_surrogate(value)
    if char is not None:
        return f"holds a lone surrogate ({char}), half of a UTF-16 pair, which is not text; send well-formed text"
    if isinstance(value, _Huge):
        return f"number out of range (integers are kept from {limits.INT_MIN} to {limits.INT_MAX}); store it as a string"
    return None


def _problem(value: Any, path: str) -> tuple[str, str] | None:
    """The first value the SDK's reader refuses inside ``value``: ``(path, what is wrong)``."""
    return json_input.find(value, _refused, path)


def _depth(value: Any) -> int:
    """How deeply ``value`` nests (iterative: a hostile line must not exhaust the stack)."""
    deepest = 0
    todo = [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level)
            todo.extend((child, level + 1) for child in item)
    return deepest


def _id_ok(request_id: Any) -> bool:
    """Whether ``request_id`` may be echoed: a well-formed string, or an integer within 64 bits."""
    if isinstance(request_id, str):
        return _problem(request_id, "") is None
    return type(request_id) is int and _ID_MIN <= request_id <= _ID_MAX


_BAD_ID = "Invalid Request: id must be a string or an integer within 64 bits"


def _id_in_prefix(prefix: bytes) -> Any:
    """The top-level ``id`` of a JSON object whose first bytes are ``prefix``, when they hold it whole; else None.

    Walks the bytes once, tracking strings and nesting, and reads the value
    after an ``"id"`` key at depth 1 with the standard parser.
    """
    text = prefix.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    depth, i, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            try:
                key, end = decoder.raw_decode(text, i)
            except ValueError:
                return None
            after = text[end:].lstrip(" \t\r\n") if depth == 1 and key == "id" else ""
            if after.startswith(":"):
                try:
                    value, _ = decoder.raw_decode(after[1:].lstrip(" \t\r\n"))
                except ValueError:
                    return None
                return value if _id_ok(value) else None
            i = end
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        i += 1
    return None


def _readable_id(text: str) -> Any:
    """The id of a whole line, when it parses and the id may be echoed; else None."""
    try:
        message = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
    except (ValueError, RecursionError):
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    return request_id if _id_ok(request_id) else None


def _error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def answer(text: str, reader_error: str) -> dict[str, Any] | None:
    """The reply to a line the SDK's reader refused (``reader_error`` says why), or None when none is due.

    A JSON-RPC message as a dict: an error, or for ``tools/call`` a tool
    error result with the ``invalid_argument`` code the tools use.
    """
    try:
        message = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
    except (ValueError, RecursionError):
        return _error(None, PARSE_ERROR, "Parse error: the line is not JSON (one JSON-RPC message per line)")
    if not isinstance(message, dict):
        return _error(None, INVALID_REQUEST, "Invalid Request: expected one JSON-RPC object per line (no batches)")
    request_id = message.get("id")
    if "id" not in message:
        if "method" in message:
            log.warning("dropped a notification the protocol reader refused: %s", reader_error)
        return None
    if not _id_ok(request_id):
        if "method" not in message and ("result" in message or "error" in message):
            log.warning("dropped a response the protocol reader refused: %s", reader_error)
            return None
        return _error(None, INVALID_REQUEST, _BAD_ID)
    method = message.get("method")
    if not isinstance(method, str):
        if "result" in message or "error" in message:
            log.warning("dropped a response the protocol reader refused: %s", reader_error)
            return None
        return _error(request_id, INVALID_REQUEST, "Invalid Request: method must be a string")
    bad_method = _problem(method, "method")
    if bad_method is not None:
        return _error(request_id, INVALID_REQUEST, f"Invalid Request: method {bad_method[1]}")
    params = message.get("params")
    found = _problem(params, "")
    if found is None and _depth(params) >= limits.DEPTH_MAX:
        # Nothing else is wrong, so the nesting is: name the deepest argument.
        inner = params.get("arguments") if isinstance(params, dict) else None
        where = max(inner, key=lambda k: _depth(inner[k])) if isinstance(inner, dict) and inner else None
        levels = _depth(inner[where]) if where is not None and isinstance(inner, dict) else _depth(params)
        found = ("" if where is None else f"arguments.{_shown(where)}"), (
            f"nested {levels} levels deep, deeper than the server reads; "
            f"the store keeps at most {limits.DEPTH_MAX} levels; flatten the value"
        )
    if found is None:
        if params is not None and not isinstance(params, dict):
            return _error(request_id, INVALID_PARAMS, "Invalid params: params must be an object")
        return _error(request_id, INVALID_REQUEST, f"Invalid Request: {reader_error}")
    path, problem = found
    tool = params.get("name") if isinstance(params, dict) else None
    if method == "tools/call" and isinstance(tool, str) and path.startswith("arguments") and _problem(tool, "") is None:
        argument = path.removeprefix("arguments").lstrip(".") or "arguments"
        text = f"Error executing tool {tool}: invalid_argument: argument '{argument}': {problem}; nothing was written"
        return {"jsonrpc": "2.0", "id": request_id,
                "result": {"content": [{"type": "text", "text": text}], "isError": True}}
    where = f"params.{path}" if path else "params"
    return _error(request_id, INVALID_PARAMS, f"invalid_argument: {where}: {problem}",
                  {"code": "invalid_argument", "argument": where})


class _Tracked:
    """The write stream the SDK's dispatcher replies on, noting which request ids were answered."""

    def __init__(self, inner: Any, front: StdinFront) -> None:
        self._inner = inner
        self._front = front

    async def send(self, item: Any) -> None:
        await self._inner.send(item)
        message = getattr(item, "message", None)
        if hasattr(message, "result") or hasattr(message, "error"):
            self._front.answered(getattr(message, "id", None))

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Tracked:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class StdinFront:
    """The lines the SDK's stdio transport reads: only those it accepts; every other one is answered here.

    Iterate it asynchronously (``stdio_server(stdin=front)``). ``attach``
    gives it the transport's write stream (for its own replies) and returns
    the stream the dispatcher must reply on (so it knows what is answered).

    - stdin is read on a daemon thread, so SIGINT and SIGTERM stop the server
      at once (``serve``);
    - a line the SDK's reader accepts is passed on as is; any other line is
      answered here (``answer``), with the codes docs/mcp.md lists (a line not
      JSON or not UTF-8, a bad id, a line over the size limit); a request
      whose content the reader refuses gets a tool error (``tools/call``: the
      same ``invalid_argument`` sentence the tools give) or -32602 naming the
      argument; a notification or a stray response gets no reply, as JSON-RPC
      says, and a line is logged on stderr;
    - a request with a bad id is answered also when the SDK's reader would
      take it for a notification and drop it;
    - at end of input, the requests already passed on are answered before the
      SDK sees the end (bounded by ``DRAIN_WAIT_S``).
    """

    def __init__(self, fd: int = 0, *, line_bytes_max: int) -> None:
        import anyio

        self._fd = fd
        self._line_bytes_max = line_bytes_max
        self._send, self._receive = anyio.create_memory_object_stream[Any](16)
        self._write: Any = None
        self._pending: set[Any] = set()
        self._settled = anyio.Event()  # set when the last pending request is answered
        self._token: Any = None

    # -- the reading thread ----------------------------------------------------

    def start(self) -> None:
        """Start reading stdin on a daemon thread (call from inside the event loop)."""
        import anyio.lowlevel

        self._token = anyio.lowlevel.current_token()
        threading.Thread(target=self._pump, name="retained-stdin", daemon=True).start()

    def _pump(self) -> None:
        import anyio.from_thread

        def put(item: Any) -> None:
            anyio.from_thread.run(self._send.send, item, token=self._token)

        limit = self._line_bytes_max
        partial: list[bytes] = []  # the line being read, in pieces: a long line is joined once
        size = 0
        skipping = False  # inside a line over the limit: dropped up to its newline
        try:
            while True:
                chunk = os.read(self._fd, READ_CHUNK_BYTES)
                if not chunk:
                    break
                pieces = chunk.split(b"\n")
                for piece in pieces[:-1]:
                    line = b"".join((*partial, piece)) if partial else piece
                    partial, size = [], 0
                    if skipping:
                        skipping = False
                    elif len(line) > limit:
                        put(_TooLong(line[:ID_PREFIX_BYTES]))
                    else:
                        put(line)
                if not skipping:
                    partial.append(pieces[-1])
                    size += len(pieces[-1])
                    if size > limit:
                        # Refused whole, without holding the rest of it in memory.
                        head = b"".join(partial)[:ID_PREFIX_BYTES]
                        partial, size, skipping = [], 0, True
                        put(_TooLong(head))
            if partial and not skipping:
                put(b"".join(partial))
            put(None)
        except (OSError, RuntimeError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return  # the loop has ended (or stdin is gone): nothing is waiting for more lines

    # -- the transport's side --------------------------------------------------

    def attach(self, write_stream: Any) -> _Tracked:
        self._write = write_stream
        return _Tracked(write_stream, self)

    def answered(self, request_id: Any) -> None:
        self._pending.discard(request_id)
        if not self._pending:
            self._settled.set()

    async def _reply(self, reply: dict[str, Any]) -> None:
        import anyio
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        message = types.jsonrpc_message_adapter.validate_python(reply, by_name=False)
        try:
            await self._write.send(SessionMessage(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("reply not sent: the output is closed")

    def __aiter__(self) -> StdinFront:
        return self

    async def __anext__(self) -> str:
        import anyio
        import mcp_types as types

        while True:
            raw = await self._receive.receive()
            if raw is None:
                await self._drain()
                raise StopAsyncIteration
            if isinstance(raw, _TooLong):
                await self._reply(_error(_id_in_prefix(raw.prefix), INVALID_REQUEST,
                                         f"Invalid Request: a line over {self._line_bytes_max} bytes was skipped; "
                                         "nothing was done; send a smaller message"))
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                # Refused, as over HTTP: replacing the bytes would store text the client never sent.
                await self._reply(_error(_readable_id(raw.decode("utf-8", errors="replace")), PARSE_ERROR,
                                         f"Parse error: the line is not valid UTF-8 (byte {exc.start} of the line); "
                                         "nothing was done; send UTF-8"))
                continue
            if not text.strip():
                continue
            try:
                message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
            except ValueError as exc:
                errors = exc.errors() if hasattr(exc, "errors") else []
                reason = str(errors[0].get("msg")) if errors else str(exc).split("\n")[0]
                reply = answer(text, reason)
                if reply is not None:
                    await self._reply(reply)
                continue
            if isinstance(message, types.JSONRPCNotification) and '"id"' in text and "id" in json.loads(text):
                # The reader took a request with an id it cannot hold (a float, a bool, null, an array,
                # an object) for a notification, and the dispatcher would drop it unanswered.
                await self._reply(_error(None, INVALID_REQUEST, _BAD_ID))
                continue
            self._note(message)
            await anyio.lowlevel.checkpoint()
            return text

    def _note(self, message: Any) -> None:
        import mcp_types as types

        if isinstance(message, types.JSONRPCRequest):
            self._pending.add(message.id)
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            params = message.params or {}
            self.answered(params.get("requestId"))

    async def _drain(self) -> None:
        """At end of input: wait (bounded) until every request passed on has its reply."""
        import anyio

        with anyio.move_on_after(DRAIN_WAIT_S) as scope:
            while self._pending:
                self._settled = anyio.Event()
                await self._settled.wait()
        if scope.cancelled_caught:
            log.warning("stdin closed; %d request(s) still unanswered after %.0f s", len(self._pending), DRAIN_WAIT_S)


async def serve(server: Any, *, line_bytes_max: int) -> int:
    """Serve ``server`` (an MCPServer) on stdin/stdout until end of input, SIGINT or SIGTERM; the exit status.

    Runs the MCPServer's low-level server on the SDK's stdio transport as
    ``MCPServer.run_stdio_async`` does, with ``StdinFront`` as its input.
    Returns 0 at end of input, 128 + the signal's number on a signal.
    """
    import anyio
    from mcp.server.stdio import stdio_server

    front = StdinFront(line_bytes_max=line_bytes_max)
    status = 0
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            # The SDK asks for an async text file; the front offers the part it reads (line iteration).
            async with stdio_server(stdin=cast(Any, front)) as (read_stream, write_stream):
                front.start()
                # What MCPServer.run_stdio_async runs, given our streams: the SDK has no public way in.
                lowlevel = server._lowlevel_server
                await lowlevel.run(read_stream, front.attach(write_stream), lowlevel.create_initialization_options())
            tg.cancel_scope.cancel()

        async def stop_on_signal() -> None:
            nonlocal status
            if sys.platform == "win32":
                return
            # The event loop puts Python's default SIGINT handler back when the receiver closes;
            # the one before it (``interrupt.exit_on_interrupt`` under the CLI) is restored instead.
            previous = signal.getsignal(signal.SIGINT)
            try:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        status = 128 + signum
                        tg.cancel_scope.cancel()
                        return
            finally:
                if callable(previous):
                    signal.signal(signal.SIGINT, previous)

        tg.start_soon(run)
        tg.start_soon(stop_on_signal)
    return status
