"""The MCP server over streamable HTTP: a `retained serve --http` subprocess on 127.0.0.1."""

from __future__ import annotations

import contextlib
from typing import Any
import json
import subprocess
import sys

import anyio
import httpx2

from . import mcp_checks
from .conftest import REPO, WAIT_S, check_chain_from_file, client_info, server_env

TOKEN = "t0k3n-for-tests-only-0123456789abcdef"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}
MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@contextlib.asynccontextmanager
async def _client(url: str, name: str = "http-agent", version: str = "3.2.1", token: str | None = None):
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    if token is None:
        async with Client(url, client_info=client_info(name, version)) as client:
            yield client
        return
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=WAIT_S) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, client_info=client_info(name, version)) as client:
            yield client


def _run(check, url: str, **kwargs) -> None:
    async def go() -> None:
        with anyio.fail_after(WAIT_S * 2):
            async with _client(url, **kwargs) as client:
                await check(client)

    anyio.run(go)


def _post(url: str, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.post(url, content=json.dumps(INITIALIZE), headers={**MCP_HEADERS, **(headers or {})}, timeout=WAIT_S)


def test_lists_exactly_the_six_tools_with_their_schemas(http_server):
    _run(mcp_checks.check_tool_list, http_server().url)


def test_every_tool_works_and_records_carry_the_client(http_server, tmp_path):
    server = http_server()
    _run(lambda c: mcp_checks.check_happy_paths(c, tmp_path / "store", "http-agent", "3.2.1"), server.url)


def test_every_error_code_writes_nothing(http_server, tmp_path):
    server = http_server()
    _run(lambda c: mcp_checks.check_error_codes(c, tmp_path / "store"), server.url)


def test_bad_argument_types_are_refused_and_the_server_keeps_serving(http_server, tmp_path):
    server = http_server()
    _run(lambda c: mcp_checks.check_bad_argument_types(c, tmp_path / "store"), server.url)


def test_one_process_serves_many_clients_each_stamped_with_its_own_name(http_server, tmp_path):
    server = http_server()

    async def agent(name: str) -> None:
        async with _client(server.url, name=name) as client:
            for i in range(10):
                result = await client.call_tool("memory_write", {"text": f"{name} {i}"})
                assert not result.is_error, result.content[0].text

    async def go() -> None:
        with anyio.fail_after(WAIT_S * 2):
            async with anyio.create_task_group() as tg:
                for name in ("agent-1", "agent-2", "agent-3"):
                    tg.start_soon(agent, name)

    anyio.run(go)
    records = check_chain_from_file(tmp_path / "store" / "log.jsonl")
    assert len(records) == 30
    for name in ("agent-1", "agent-2", "agent-3"):
        assert [r["text"] for r in records if r["client"]["name"] == name] == [f"{name} {i}" for i in range(10)]


def test_each_session_reads_what_its_own_writes_may_correct_and_how_many_were_not_checked(http_server):
    """Issue 31: the related step leaves the write; a session's next read names what its writes may correct."""
    from retained.writes import RELATED_LATER_MAX

    server = http_server()

    async def go() -> None:
        with anyio.fail_after(WAIT_S * 2):
            async with _client(server.url, name="a") as a, _client(server.url, name="b") as b:
                old = (await a.call_tool("memory_write", {"text": "The API timeout is 30 seconds."})).structured_content
                told = (await a.call_tool("memory_get", {"limit": 1})).structured_content["related_to_writes"]
                assert told == {"writes": [], "checked": 1, "not_checked": 0}
                mine = []
                for i in range(RELATED_LATER_MAX + 2):
                    proof = (await b.call_tool("memory_write", {"text": f"We raised the API timeout to {60 + i} seconds."}))
                    assert "related" not in proof.structured_content
                    mine.append(proof.structured_content["seq"])
                # Session a wrote nothing since its read: nothing to say. Session b hears of its last writes.
                assert "related_to_writes" not in (await a.call_tool("memory_search", {"query": "timeout"})).structured_content
                read = await b.call_tool("memory_search", {"query": "timeout"})
                told = read.structured_content["related_to_writes"]
                assert told["checked"] == RELATED_LATER_MAX and told["not_checked"] == 2
                named = {w["seq"]: [r["seq"] for r in w["related"]] for w in told["writes"]}
                assert set(named) <= set(mine[2:]) and named and all(named.values())
                text = read.content[0].text
                assert "2 earlier write(s) of this session were not checked" in text
                assert f"supersedes=[{', '.join(map(str, named[min(named)]))}, {min(named)}]" in text
                assert all(0 < r < seq for seq, seqs in named.items() for r in seqs) and old["seq"] < min(mine)

    anyio.run(go)


def test_warming_up_after_listening_touches_no_file_of_the_store(http_server, tmp_path):
    """The server registers its tools and loads its write path once it listens, and creates nothing doing so."""
    server = http_server(RETAINED_LOG_LEVEL="DEBUG")
    server.err.until(lambda raw: b"warmed up: tools registered" in raw)
    assert not (tmp_path / "store").exists()

    async def check(client) -> None:
        assert len((await client.list_tools()).tools) == 6
        result = await client.call_tool("memory_write", {"text": "the first call after warming up"})
        assert not result.is_error, result.content[0].text

    _run(check, server.url)
    assert [r["text"] for r in check_chain_from_file(tmp_path / "store" / "log.jsonl")] == [
        "the first call after warming up"]


def test_a_store_directory_that_is_a_file_stops_the_warm_up_and_each_call_says_so(http_server, tmp_path):
    """Warming up on an unusable store leaves the error to the calls: coded, the server still up, the file untouched."""
    (tmp_path / "store").write_bytes(b"a file, not a store\n")
    server = http_server(RETAINED_LOG_LEVEL="DEBUG")
    server.err.until(lambda raw: b"warming up stopped" in raw)

    async def check(client) -> None:
        for _ in range(2):
            result = await client.call_tool("memory_write", {"text": "x"})
            assert result.is_error
            assert "no_store" in result.content[0].text and "is a file, not a store directory" in result.content[0].text

    _run(check, server.url)
    assert (tmp_path / "store").read_bytes() == b"a file, not a store\n"


def test_a_non_loopback_bind_without_a_token_is_refused(tmp_path):
    for host in ("0.0.0.0", "192.0.2.10"):
        out = subprocess.run(
            [sys.executable, "-m", "retained", "serve", "--http", "--host", host, "--port", "0"],
            capture_output=True,
            text=True,
            env=server_env(tmp_path / "store"),
            cwd=REPO,
            timeout=WAIT_S,
        )
        assert out.returncode == 2, out.stderr
        assert out.stdout == ""
        assert "RETAINED_TOKEN" in out.stderr and host in out.stderr
    assert not (tmp_path / "store").exists()


def test_a_non_loopback_bind_with_a_token_serves_only_with_the_token(http_server):
    server = http_server("--host", "0.0.0.0", RETAINED_TOKEN=TOKEN)
    url = f"http://127.0.0.1:{server.port}/mcp"
    assert _post(url).status_code == 401
    assert _post(url, {"authorization": f"Bearer {TOKEN}"}).status_code == 200
    errors = b"".join(server.err.seen)
    assert TOKEN.encode() not in errors


def test_with_a_token_a_missing_or_wrong_one_gets_401_and_the_right_one_works(http_server, tmp_path):
    server = http_server(RETAINED_TOKEN=TOKEN)
    missing = _post(server.url)
    assert missing.status_code == 401 and missing.headers["www-authenticate"].lower().startswith("bearer")
    for wrong in (f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer", "bearer  x", f"Basic {TOKEN}", TOKEN):
        assert _post(server.url, {"authorization": wrong}).status_code == 401, wrong
    assert _post(server.url, {"authorization": f"Bearer {TOKEN}"}).status_code == 200

    async def write(client) -> None:
        result = await client.call_tool("memory_write", {"text": "through the token"})
        assert not result.is_error, result.content[0].text

    _run(write, server.url, token=TOKEN)
    assert check_chain_from_file(tmp_path / "store" / "log.jsonl")[0]["text"] == "through the token"
    assert not [line for line in server.err.seen if TOKEN.encode() in line], "the token reached the log"


def test_a_foreign_origin_or_host_is_rejected(http_server, tmp_path):
    server = http_server()
    assert _post(server.url, {"origin": "https://evil.example"}).status_code == 403
    assert _post(server.url, {"origin": "http://attacker.test:8080"}).status_code == 403
    assert _post(server.url, {"origin": "null"}).status_code == 403
    assert _post(server.url, {"host": f"evil.example:{server.port}"}).status_code == 421
    assert _post(server.url, {"origin": f"http://localhost:{server.port}"}).status_code == 200
    assert _post(server.url, {"host": f"localhost:{server.port}"}).status_code == 200
    assert not (tmp_path / "store").exists(), "a rejected request reached the store"


def test_issue_14_an_origin_is_checked_as_scheme_host_and_port(http_server, tmp_path):
    """A page served from another local port (or scheme) is refused; --allow-origin admits exactly one more."""
    server = http_server("--allow-origin", "https://memory.example.org")
    other = server.port + 1 if server.port < 65535 else server.port - 1
    for refused in (f"http://127.0.0.1:{other}", f"http://localhost:{other}", "http://127.0.0.1",
                    f"https://127.0.0.1:{server.port}", "https://memory.example.org:8443", "http://memory.example.org"):
        assert _post(server.url, {"origin": refused}).status_code == 403, refused
    for allowed in (f"http://127.0.0.1:{server.port}", f"http://localhost:{server.port}", "https://memory.example.org"):
        assert _post(server.url, {"origin": allowed}).status_code == 200, allowed
    assert not (tmp_path / "store" / "log.jsonl").exists(), "a request wrote to the store"


def test_a_malformed_allow_origin_is_a_usage_error(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "retained", "serve", "--http", "--port", "0", "--allow-origin", "memory.example.org"],
        capture_output=True, text=True, env=server_env(tmp_path / "store"), cwd=REPO, timeout=WAIT_S,
    )
    assert out.returncode == 2, out.stderr
    assert "--allow-origin 'memory.example.org' is not an origin" in out.stderr


def test_a_credential_is_refused_with_secret_detected_and_never_echoed(http_server, tmp_path):
    server = http_server()
    _run(lambda c: mcp_checks.check_secret_refused(c, tmp_path / "store"), server.url)


# -- issue 29, point 8: the server holds up before authentication ---------------------------------------------


def _raw(port: int, source: str, data: bytes = b"") -> Any:
    """A TCP connection to the server from loopback address ``source`` (127.0.0.x: another client), ``data`` sent."""
    import socket

    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S, source_address=(source, 0))
    if data:
        sock.sendall(data)
    return sock


def _closed_by_server(sock: Any) -> bytes:
    """Everything the server sends until it closes the connection (bounded by WAIT_S)."""
    got = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return got
        got += chunk


def _initialize_from(port: int, source: str, token: str | None = None) -> int:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S, source_address=(source, 0))
    try:
        headers = {**MCP_HEADERS, "host": f"127.0.0.1:{port}"}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        conn.request("POST", "/mcp", body=json.dumps(INITIALIZE), headers=headers)
        reply = conn.getresponse()
        reply.read()
        return reply.status
    finally:
        conn.close()


def test_issue_29_a_short_or_spaced_token_is_refused_and_retained_token_prints_a_good_one(tmp_path, http_server):
    for bad, why in (("short-token", "under the minimum of 16"), ("a token with spaces in it", "whitespace")):
        for args in (["serve", "--http", "--port", "0"], ["view", "--port", "0"]):
            out = subprocess.run([sys.executable, "-m", "retained", *args], capture_output=True, text=True,
                                 env=server_env(tmp_path / "store", RETAINED_TOKEN=bad), cwd=REPO, timeout=WAIT_S)
            assert out.returncode == 2 and why in out.stderr and "retained token" in out.stderr, (args, out.stderr)
            assert bad not in out.stderr
    fresh = subprocess.run([sys.executable, "-m", "retained", "token"], capture_output=True, text=True,
                           env=server_env(tmp_path / "store"), cwd=REPO, timeout=WAIT_S, check=True).stdout.strip()
    assert len(fresh) >= 32 and not any(c.isspace() for c in fresh)
    server = http_server(RETAINED_TOKEN=fresh)
    assert _post(server.url, {"authorization": f"Bearer {fresh}"}).status_code == 200


def test_issue_29_half_sent_requests_are_closed_and_capped_per_client_and_in_all(http_server):
    server = http_server(RETAINED_TOKEN=TOKEN, RETAINED_HTTP_HEADER_TIMEOUT_S="1",
                         RETAINED_HTTP_CLIENT_CONNECTIONS_MAX="8", RETAINED_HTTP_CONNECTIONS_MAX="12")
    half = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Slow: ".encode()
    with contextlib.ExitStack() as opened:
        def connect(source: str, data: bytes = b"") -> Any:
            return opened.enter_context(_raw(server.port, source, data))

        slow = [connect("127.0.0.2", half) for _ in range(8)]
        # The attacker's ninth is refused as it is accepted; an authenticated client elsewhere is served.
        assert _closed_by_server(connect("127.0.0.2")).startswith(b"HTTP/1.1 503")
        assert _initialize_from(server.port, "127.0.0.1", TOKEN) == 200
        # The cap in all: 8 + 4 from other addresses fill it; the next is refused whoever it is.
        more = [connect(f"127.0.0.{3 + i}", half) for i in range(4)]
        assert _closed_by_server(connect("127.0.0.9")).startswith(b"HTTP/1.1 503")
        # Headers that never complete: the server closes each connection, answering nothing.
        for sock in slow + more:
            assert _closed_by_server(sock) == b""
        assert _initialize_from(server.port, "127.0.0.2", TOKEN) == 200


def test_issue_29_wrong_tokens_from_one_client_are_bounded(http_server):
    server = http_server(RETAINED_TOKEN=TOKEN)
    for _ in range(20):
        assert _initialize_from(server.port, "127.0.0.2", TOKEN + "x") == 401
    assert _initialize_from(server.port, "127.0.0.2", TOKEN) == 429  # even the right one, for a while
    assert _initialize_from(server.port, "127.0.0.1", TOKEN) == 200  # another client is not held up


def test_issue_29_an_idle_mcp_session_is_closed(http_server):
    server = http_server(RETAINED_HTTP_SESSION_IDLE_S="1", RETAINED_LOG_LEVEL="INFO")
    reply = _post(server.url)
    assert reply.status_code == 200
    session = reply.headers["mcp-session-id"]
    server.err.until(lambda raw: b"idle timeout" in raw and session.encode() in raw)
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    gone = httpx2.post(server.url, content=json.dumps(ping), timeout=WAIT_S,
                       headers={**MCP_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"})
    assert gone.status_code == 404
