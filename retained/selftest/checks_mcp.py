"""Checks of the MCP server over stdio: every request gets a reply, and the server keeps serving."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from typing import Any

from retained.selftest.children import _child
from retained.selftest.context import CheckFailed, Context, expect
from retained.selftest.spec import chained

# A reply from a live server takes milliseconds; this bounds the wait for one that never comes.
REPLY_WAIT_S = 15.0

_SERVER = """
from retained.cli.commands import main
sys.exit(main(["serve", "--dir", sys.argv[1]]))
"""


def _call(request_id: int, tool: str, arguments: str) -> bytes:
    """A tools/call line with ``arguments`` as raw JSON text (so it can hold what a JSON encoder never writes)."""
    return (f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
            f'"params":{{"name":"{tool}","arguments":{arguments}}}}}\n').encode()


# (what is sent, the line, the id its reply carries, what the reply must be)
_HOSTILE: list[tuple[str, bytes, Any, str]] = [
    ("a lone surrogate in a text", _call(11, "memory_write", '{"text":"a\\ud800b"}'), 11, "tool error"),
    ("a lone surrogate in a field key", _call(12, "memory_write", '{"text":"a","fields":{"k\\udfff":1}}'), 12, "tool error"),
    ("a lone surrogate in a search query", _call(13, "memory_search", '{"query":"q\\ud800"}'), 13, "tool error"),
    ("200 levels of nesting", _call(14, "memory_write", '{"text":"a","fields":{"x":' + "[" * 200 + "]" * 200 + "}}"),
     14, "tool error"),
    ("a 5,000-digit integer", _call(15, "memory_write", '{"text":"a","fields":{"x":' + "9" * 5000 + "}}"), 15, "tool error"),
    ("a seq of 2**63", _call(16, "memory_get", '{"ids":[9223372036854775808]}'), 16, "tool error"),
    ("a line that is not JSON", b"this is not json\n", None, "-32700"),
    ("an unknown prompt", b'{"jsonrpc":"2.0","id":17,"method":"prompts/get","params":{"name":"no-such-prompt"}}\n', 17,
     "-32602"),
]


class _Replies:
    """The server's stdout, one JSON-RPC message per line, read on a thread so every wait is bounded."""

    def __init__(self, stream: Any) -> None:
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        with stream:  # closed here, once the server's output has ended
            for line in iter(stream.readline, b""):
                self._lines.put(line)
        self._lines.put(b"")

    def wait(self, request_id: Any, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + REPLY_WAIT_S
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise CheckFailed(f"no reply within {REPLY_WAIT_S:g} s to {what}: a client would wait for ever") from None
            if not line:
                raise CheckFailed(f"the server's output ended before it answered {what}")
            try:
                message = json.loads(line)
            except ValueError:
                raise CheckFailed(f"the server wrote a line that is not JSON-RPC while answering {what}") from None
            if isinstance(message, dict) and message.get("id") == request_id and ("result" in message or "error" in message):
                return message


def _judge(reply: dict[str, Any], want: str, what: str) -> str:
    if want == "tool error":
        result = reply.get("result") or {}
        text = " ".join(c.get("text", "") for c in result.get("content") or () if isinstance(c, dict))
        expect(result.get("isError") is True and "invalid_argument" in text,
               f"{what}: expected a tool error with code invalid_argument, got {json.dumps(reply)[:160]}")
        return "invalid_argument"
    code = (reply.get("error") or {}).get("code")
    expect(str(code) == want, f"{what}: expected JSON-RPC error {want}, got {json.dumps(reply)[:160]}")
    return want


def check_mcp_replies(ctx: Context) -> str:
    """Over stdio, every request gets a reply (hostile ones too), the server keeps serving, and drains at EOF."""
    server = _child(ctx, _SERVER, str(ctx.directory), stdin=subprocess.PIPE)
    if server.stdin is None or server.stdout is None:
        raise CheckFailed("the server process has no stdin or stdout to talk to")
    replies = _Replies(server.stdout)
    try:
        def send(line: bytes) -> None:
            server.stdin.write(line)  # type: ignore[union-attr]
            server.stdin.flush()  # type: ignore[union-attr]

        send(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
             b'"capabilities":{},"clientInfo":{"name":"retained-selftest","version":"1"}}}\n')
        replies.wait(1, "initialize")
        send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        send(_call(2, "memory_write", '{"text":"written before the hostile requests"}'))
        replies.wait(2, "a plain write")
        ctx.fault("before_hostile")
        codes = []
        for what, line, request_id, want in _HOSTILE:
            send(line)
            codes.append(_judge(replies.wait(request_id, what), want, what))
        # Still serving; then a write sent just before stdin closes is answered before the server exits.
        send(_call(3, "memory_write", '{"text":"written as stdin closed"}'))
        server.stdin.close()
        last = replies.wait(3, "a write sent just before stdin closed")
        expect(not (last.get("result") or {}).get("isError"), f"the last write failed: {json.dumps(last)[:160]}")
        try:
            status = server.wait(timeout=REPLY_WAIT_S)
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"the server did not exit within {REPLY_WAIT_S:g} s of its stdin closing") from None
        expect(status == 0, f"the server exited with status {status} after stdin closed")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        for stream in (server.stdin, server.stderr):  # stdout is closed by its reader
            if stream is not None and not stream.closed:
                stream.close()
    texts = [rec.get("text") for _, rec in chained(ctx.log_path)]
    expect(texts == ["written before the hostile requests", "written as stdin closed"],
           f"the log holds {len(texts)} records after the hostile requests, expected the 2 good ones")
    return (f"{len(_HOSTILE)} hostile requests over stdio each answered ({', '.join(sorted(set(codes)))}), "
            f"2 of 2 good writes stored, the last answered after stdin closed, exit status {server.returncode}")
