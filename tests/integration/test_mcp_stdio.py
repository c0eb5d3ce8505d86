"""The MCP server over stdio: `python -m retained` subprocesses and the SDK's real client."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import anyio

from . import mcp_checks
from .conftest import REPO, WAIT_S, check_chain_from_file, client_info, stdio_params


def _run(check, store_dir: Path, name: str = "pytest-agent", version: str = "9.8.7", **env: str) -> None:
    from mcp import Client

    async def go() -> None:
        with anyio.fail_after(WAIT_S * 2):
            async with Client(stdio_params(store_dir, **env), client_info=client_info(name, version)) as client:
                await check(client)

    anyio.run(go)


def test_lists_exactly_the_six_tools_with_their_schemas(tmp_path):
    _run(mcp_checks.check_tool_list, tmp_path / "store")


def test_every_tool_works_and_records_carry_the_handshake_client(tmp_path):
    store_dir = tmp_path / "store"
    _run(lambda c: mcp_checks.check_happy_paths(c, store_dir, "pytest-agent", "9.8.7"), store_dir)


def test_every_error_code_writes_nothing(tmp_path):
    store_dir = tmp_path / "store"
    _run(lambda c: mcp_checks.check_error_codes(c, store_dir), store_dir)


def test_bad_argument_types_are_refused_and_the_server_keeps_serving(tmp_path):
    store_dir = tmp_path / "store"
    _run(lambda c: mcp_checks.check_bad_argument_types(c, store_dir), store_dir)


def test_legacy_handshake_client_is_stamped_too(tmp_path):
    """A client on the initialize handshake (pre-2026 protocol) is stamped from clientInfo."""
    from mcp import Client

    store_dir = tmp_path / "store"

    async def go() -> None:
        with anyio.fail_after(WAIT_S):
            async with Client(stdio_params(store_dir), client_info=client_info("old-client", "0.9"), mode="legacy") as c:
                assert not (await c.call_tool("memory_write", {"text": "from an older client"})).is_error
                assert (await c.call_tool("memory_get", {})).structured_content["records"][0]["record"]["client"] == {
                    "name": "old-client",
                    "version": "0.9",
                }

    anyio.run(go)


def test_a_session_with_writes_errors_and_warnings_puts_only_json_rpc_on_stdout(raw_server, tmp_path):
    """Every byte on stdout is a JSON-RPC message; all logging (made loud here) goes to stderr."""
    server = raw_server(RETAINED_LOG_LEVEL="DEBUG", PYTHONWARNINGS="always")
    assert server.initialize()["result"]["serverInfo"]["name"] == "retained"
    server.request("tools/list")
    server.call("memory_write", {"text": "hello", "scope": "s"})
    server.call("memory_write", {"text": "hello", "client_op_id": "a"})
    server.call("memory_write", {"text": "hello", "client_op_id": "a"})
    server.call("memory_write", {"text": 5})
    server.call("memory_write", {"text": "x", "fields": {"seq": 1}})
    server.call("memory_write", {"text": "x", "client": {"name": "forged"}})
    server.call("memory_get", {"ids": [999]})
    server.call("memory_nonexistent", {})
    server.call("memory_search", {"query": "hello (AND \"OR"})
    server.call("memory_verify", {})
    server.call("memory_forget", {"ids": [1], "reason": "test"})
    server.request("no/such/method")
    server.send_raw(b"this is not json\n")
    server.send_raw(b'{"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": "wrong"}\n')
    last = server.request("ping")
    assert last.get("result") == {}
    assert server.close() == 0
    lines = [*server.out.seen, *server.out.rest()]
    assert lines, "nothing on stdout"
    for raw in lines:
        if not raw:
            continue
        assert raw.endswith(b"\n"), raw
        message = json.loads(raw)
        assert message.get("jsonrpc") == "2.0", raw
        assert ("id" in message and ("result" in message or "error" in message)) or "method" in message, raw
    stderr = b"".join([*server.err.seen, *server.err.rest()])
    assert b"memory_write" in stderr, "the loud logging went nowhere: expected it on stderr"


def test_two_stdio_servers_on_one_store_interleave_100_writes_into_one_valid_chain(tmp_path):
    from mcp import Client

    store_dir = tmp_path / "store"

    async def writer(name: str, order: list[str]) -> None:
        async with Client(stdio_params(store_dir), client_info=client_info(name, "1")) as client:
            for i in range(50):
                result = await client.call_tool("memory_write", {"text": f"{name} record {i}", "client_op_id": f"{name}-{i}"})
                assert not result.is_error, result.content[0].text
                order.append(name)

    async def go() -> None:
        order: list[str] = []
        with anyio.fail_after(WAIT_S * 4):
            async with anyio.create_task_group() as tg:
                tg.start_soon(writer, "agent-a", order)
                tg.start_soon(writer, "agent-b", order)
        assert sorted(order) == ["agent-a"] * 50 + ["agent-b"] * 50

    anyio.run(go)
    records = check_chain_from_file(store_dir / "log.jsonl")
    assert [r["seq"] for r in records] == list(range(1, 101))
    by_client: dict[str, list[str]] = {}
    for r in records:
        by_client.setdefault(r["client"]["name"], []).append(r["text"])
    assert by_client["agent-a"] == [f"agent-a record {i}" for i in range(50)]
    assert by_client["agent-b"] == [f"agent-b record {i}" for i in range(50)]
    names = [r["client"]["name"] for r in records]
    assert any(names[i] != names[i + 1] for i in range(99)), "the two servers never interleaved"


def test_a_server_killed_right_after_an_acknowledged_write_loses_nothing(raw_server, tmp_path):
    """SIGKILL after each ack (with the next write in flight); a new server returns every acked record."""
    from mcp import Client

    store_dir = tmp_path / "store"
    acked: dict[int, str] = {}
    for round_number in range(5):
        server = raw_server()
        server.initialize(name="doomed", version=str(round_number))
        for i in range(3):
            reply = server.call("memory_write", {"text": f"round {round_number} write {i}"})
            proof = reply["result"]["structuredContent"]
            acked[proof["seq"]] = proof["hash"]
        server.send("tools/call", {"name": "memory_write", "arguments": {"text": f"round {round_number} in flight"}})
        server.proc.send_signal(signal.SIGKILL)
        assert server.proc.wait(timeout=WAIT_S) == -signal.SIGKILL

    async def go() -> None:
        with anyio.fail_after(WAIT_S):
            async with Client(stdio_params(store_dir), client_info=client_info("survivor", "1")) as client:
                got = await client.call_tool("memory_get", {"ids": sorted(acked)})
                assert not got.is_error, got.content[0].text
                assert {e["seq"]: e["record"]["hash"] for e in got.structured_content["records"]} == acked
                assert (await client.call_tool("memory_verify", {})).structured_content["ok"] is True
                after = await client.call_tool("memory_write", {"text": "life goes on"})
                assert not after.is_error, after.content[0].text

    anyio.run(go)
    check_chain_from_file(store_dir / "log.jsonl")


def test_start_up_does_not_touch_the_store_before_the_first_call(raw_server, tmp_path):
    """No scan and no index work at start-up: initialize and tools/list leave the directory absent."""
    server = raw_server()
    server.initialize()
    assert len(server.request("tools/list")["result"]["tools"]) == 6
    assert not (tmp_path / "store").exists()
    server.call("memory_write", {"text": "now it exists"})
    assert (tmp_path / "store" / "log.jsonl").exists()
    assert server.close() == 0


def test_an_unusable_store_directory_is_a_coded_error_not_a_dead_server(tmp_path):
    """RETAINED_DIR naming a file: each call fails with a code and a sentence; the server stays up."""
    from mcp import Client

    not_a_dir = tmp_path / "store"
    not_a_dir.write_bytes(b"a file, not a store\n")

    async def go() -> None:
        with anyio.fail_after(WAIT_S):
            async with Client(stdio_params(not_a_dir), client_info=client_info("agent", "1")) as client:
                for _ in range(2):
                    result = await client.call_tool("memory_write", {"text": "x"})
                    assert result.is_error
                    text = result.content[0].text
                    code = text.split(": ")[1]
                    assert code == "no_store" and "is a file, not a store directory" in text, text
                    assert "Traceback" not in text
                assert len((await client.list_tools()).tools) == 6

    anyio.run(go)
    assert not_a_dir.read_bytes() == b"a file, not a store\n"


def test_importing_retained_and_the_server_module_does_not_import_mcp():
    """mcp costs seconds to import: only serving may pay for it."""
    heavy = "('mcp', 'mcp_types', 'pydantic', 'uvicorn', 'starlette')"
    code = f"import sys, retained, retained.mcp.server, retained.cli.commands; print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=WAIT_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_credential_is_refused_with_secret_detected_and_never_echoed(tmp_path):
    store_dir = tmp_path / "store"
    _run(lambda c: mcp_checks.check_secret_refused(c, store_dir), store_dir)


def test_private_spans_and_redacted_secrets_are_reported_in_the_proof(tmp_path):
    """RETAINED_SECRETS=redact stores [secret:<kind>]; <private> spans never reach the log; the reply says so."""
    store_dir = tmp_path / "store"

    async def check(client) -> None:
        text = "deploy key AKIA" + "QYLPMN5HHHFPZAM2 for <private>my pin quokka</private>staging"
        result = await client.call_tool("memory_write", {"text": text})
        assert not result.is_error, result.content[0].text
        proof = result.structured_content
        assert proof["private_spans_removed"] == 1
        assert [r["kind"] for r in proof["redactions"]] == ["aws_access_key"]
        assert "<private> span" in result.content[0].text and "secret(s) replaced" in result.content[0].text

    _run(check, store_dir, RETAINED_SECRETS="redact")
    raw = (store_dir / "log.jsonl").read_bytes()
    assert b"QYLPMN5HHHFPZAM2" not in raw and b"quokka" not in raw and b"[secret:aws_access_key]" in raw
