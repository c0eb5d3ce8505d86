"""A loopback stand-in for Anthropic's Messages API, for running real Claude Code offline.

``StandIn`` is a small HTTP server on 127.0.0.1 (a port the system picks).
Claude Code, started with ``ANTHROPIC_BASE_URL`` pointing at it, sends its
model requests here; the stand-in answers each with a scripted turn and keeps
every request it received (method, path, headers, parsed JSON body) so a test
can read what the model would have seen: the system prompt, the SessionStart
hook's output, the tools offered, the tool results.

A script is a list of turns. A turn is a list of content blocks
(``text(...)``, ``tool_use(...)``), or a callable that takes the request
body and returns that list (so a turn can name a tool as it is offered in
the request, or echo what a tool returned). Each *main* request (one that
offers tools: the session's conversation) takes the next turn; when the
script is used up the stand-in answers ``"(end of script)"``. Requests that
offer no tools (Claude Code's side calls, such as a title or a quota check)
are answered with a short text and never take a turn.

Streaming requests (``"stream": true``) get a server-sent event stream as the
real API sends it; others get the message as one JSON object.
``POST /v1/messages/count_tokens`` gets a count; any other path gets a 404 in
the API's error shape (and is recorded, so a test can see what was asked).

Every wait is bounded by the caller (the Claude Code subprocess has its own
timeout); the server thread is a daemon and ``close()`` stops it.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Block = dict[str, Any]
Turn = list[Block] | Callable[[dict[str, Any]], list[Block]]

END_OF_SCRIPT = "(end of script)"
SIDE_REPLY = "ok"
MODEL = "claude-standin"


def text(value: str) -> Block:
    """A text block of a scripted turn."""
    return {"type": "text", "text": value}


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> Block:
    """A tool_use block of a scripted turn (an id is made up when none is given)."""
    block: Block = {"type": "tool_use", "name": name, "input": input}
    if id is not None:
        block["id"] = id
    return block


@dataclass
class Request:
    """One request the stand-in received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any  # the parsed JSON body; None when there was none; the raw text when it was not JSON
    main: bool = False  # a conversation turn (it offered tools) rather than a side call
    reply: list[Block] = field(default_factory=list)  # the content the stand-in answered with

    # -- reading a /v1/messages body ------------------------------------------------

    @property
    def is_messages(self) -> bool:
        return self.method == "POST" and self.path.split("?")[0] == "/v1/messages"

    def tool_names(self) -> list[str]:
        tools = self.body.get("tools") if isinstance(self.body, dict) else None
        return [t.get("name", "") for t in tools or [] if isinstance(t, dict)]

    def text(self) -> str:
        """Every string in the request body (system, messages, tool results), one per line."""
        out: list[str] = []
        _strings(self.body, out)
        return "\n".join(out)

    def tool_results(self) -> list[Block]:
        """The tool_result blocks of the request's messages, oldest first."""
        found: list[Block] = []
        for message in self.body.get("messages", []) if isinstance(self.body, dict) else []:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                found += [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        return found


def _strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)


def find_tool(body: dict[str, Any], suffix: str) -> str:
    """The one tool offered in a request body whose name ends with ``suffix`` (an MCP tool's name is prefixed by its server).

    Raises:
        LookupError: none, or more than one, is offered (the names offered are in the message).
    """
    names = [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]
    found = [n for n in names if n == suffix or n.endswith("__" + suffix)]
    if len(found) != 1:
        raise LookupError(f"expected one tool named *{suffix} in the request, found {found}; offered: {names}")
    return found[0]


def result_text(block: Block) -> str:
    """The text of a tool_result block (its content is a string or a list of text blocks)."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


class StandIn:
    """The stand-in server. Use as a context manager, or call ``close()``.

    ``turns`` is the script (see the module's docstring); ``add()`` appends to
    it between sessions. ``requests`` holds every request received, in order.
    """

    def __init__(self, turns: list[Turn] | None = None) -> None:
        self._lock = threading.Lock()
        self._turns: list[Turn] = list(turns or [])
        self._ids = itertools.count(1)
        self.requests: list[Request] = []
        self.errors: list[str] = []  # a scripted turn that raised: the reason, and the turn answers with it as text
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # the test reads self.requests instead
                pass

            def do_GET(self) -> None:
                standin._handle(self)

            def do_POST(self) -> None:
                standin._handle(self)

            def do_HEAD(self) -> None:
                standin._handle(self)

            def do_PUT(self) -> None:
                standin._handle(self)

            def do_DELETE(self) -> None:
                standin._handle(self)

            def do_OPTIONS(self) -> None:
                standin._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="claude-standin", daemon=True)
        self._thread.start()

    # -- the test's side -------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, *turns: Turn) -> None:
        """Append turns to the script."""
        with self._lock:
            self._turns.extend(turns)

    def remaining(self) -> int:
        """Turns not yet taken."""
        with self._lock:
            return len(self._turns)

    def mark(self) -> int:
        """The number of requests so far: ``since(mark)`` gives the ones after it (one session's)."""
        with self._lock:
            return len(self.requests)

    def since(self, mark: int) -> list[Request]:
        with self._lock:
            return list(self.requests[mark:])

    def messages(self, mark: int = 0, *, main: bool | None = None) -> list[Request]:
        """The POST /v1/messages requests after ``mark``; only main ones (or only side ones) when asked."""
        return [r for r in self.since(mark) if r.is_messages and (main is None or r.main == main)]

    def summary(self, mark: int = 0) -> list[str]:
        """One line per request after ``mark``: what was asked and what was answered (for a test's failure message and a report)."""
        lines = []
        for r in self.since(mark):
            line = f"{r.method} {r.path}"
            if r.is_messages and isinstance(r.body, dict):
                kind = "main" if r.main else "side"
                line += f" [{kind}] model={r.body.get('model')} stream={bool(r.body.get('stream'))} tools={len(r.tool_names())}"
                line += f" messages={len(r.body.get('messages') or [])} -> " + ", ".join(
                    b["type"] + (f":{b['name']}" if b["type"] == "tool_use" else "") for b in r.reply
                )
            lines.append(line)
        return lines

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> StandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the server's side -----------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        req = Request(method=h.command, path=h.path, headers={k.lower(): v for k, v in h.headers.items()}, body=body)
        with self._lock:
            self.requests.append(req)
        route = h.path.split("?")[0]
        if h.command == "POST" and route == "/v1/messages" and isinstance(body, dict):
            self._answer_messages(h, req, body)
        elif h.command == "POST" and route == "/v1/messages/count_tokens":
            self._send_json(h, 200, {"input_tokens": max(1, len(raw) // 4)})
        elif h.command in ("HEAD", "OPTIONS"):
            self._send(h, 200, b"", "text/plain")
        else:
            self._send_json(h, 404, {"type": "error", "error": {"type": "not_found_error", "message": f"the stand-in has no {route}"}})

    def _answer_messages(self, h: BaseHTTPRequestHandler, req: Request, body: dict[str, Any]) -> None:
        req.main = bool(body.get("tools"))
        content: list[Block]
        if not req.main:
            content = [text(SIDE_REPLY)]
        else:
            with self._lock:
                turn = self._turns.pop(0) if self._turns else None
            if turn is None:
                content = [text(END_OF_SCRIPT)]
            elif callable(turn):
                try:
                    content = turn(body)
                except Exception as exc:  # noqa: BLE001 - a scripted turn's error is the test's to read, not the server's to die of
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    content = [text(f"scripted turn failed: {exc}")]
            else:
                content = turn
        content = [dict(b, id=b.get("id") or f"toolu_standin_{next(self._ids)}") if b["type"] == "tool_use" else dict(b) for b in content]
        req.reply = content
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        message = {
            "id": f"msg_standin_{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or MODEL,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }
        if body.get("stream"):
            self._send(h, 200, _sse(message), "text/event-stream")
        else:
            self._send_json(h, 200, message)

    @staticmethod
    def _send_json(h: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        StandIn._send(h, status, json.dumps(payload).encode(), "application/json")

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, data: bytes, content_type: str) -> None:
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        h.send_header("request-id", "req_standin")
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)
        h.wfile.flush()


def _sse(message: dict[str, Any]) -> bytes:
    """The message as the API streams it: message_start, each block's start, delta and stop, message_delta, message_stop."""
    events: list[tuple[str, dict[str, Any]]] = []
    start = dict(message, content=[], stop_reason=None, usage=dict(message["usage"], output_tokens=1))
    events.append(("message_start", {"type": "message_start", "message": start}))
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}))
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": opening}))
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                     "usage": {"output_tokens": message["usage"]["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
