"""Checks run against a connected MCP client, whatever the transport (stdio or HTTP).

Each check talks to a real ``retained`` server subprocess through the SDK's own
client, and reads the store's log file to see what really landed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from retained.core.lock import StoreLock

from .conftest import (
    READ_ONLY,
    RECORD_BYTES_MAX_FOR_TESTS,
    TOOL_ARGUMENTS,
    TOOL_NAMES,
    check_chain_from_file,
    error_code,
    log_bytes,
)

HEX64 = re.compile(r"^[0-9a-f]{64}$")


async def check_tool_list(client: Any) -> None:
    """Exactly the six tools, with exactly their arguments, schemas and hints."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOL_NAMES
    for name, tool in tools.items():
        schema = tool.input_schema
        properties, required = TOOL_ARGUMENTS[name]
        assert schema["type"] == "object"
        assert set(schema.get("properties", {})) == properties, name
        assert set(schema.get("required", [])) == required, name
        assert "client" not in schema.get("properties", {}) and "ts" not in schema.get("properties", {})
        assert tool.description and len(tool.description) > 80, name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
        assert tool.annotations is not None and tool.annotations.read_only_hint is (name in READ_ONLY), name
    write = tools["memory_write"].input_schema["properties"]
    assert write["text"]["type"] == "string"
    assert write["supersedes"]["anyOf"][0]["items"]["type"] == "integer"
    assert write["fields"]["anyOf"][0]["type"] == "object"
    get = tools["memory_get"].input_schema["properties"]
    assert get["ids"]["anyOf"][0]["items"]["type"] == "integer"
    assert get["limit"]["type"] == "integer" and get["window"]["type"] == "integer"
    assert get["store_id"]["anyOf"][0]["type"] == "string" and get["store_id"]["default"] is None
    search = tools["memory_search"].input_schema["properties"]
    assert search["k"]["type"] == "integer" and search["include_superseded"]["type"] == "boolean"
    forget = tools["memory_forget"].input_schema["properties"]
    assert forget["ids"]["items"]["type"] == "integer" and forget["reason"]["type"] == "string"
    assert set(tools["memory_write"].output_schema["required"]) >= {"seq", "hash", "prev", "offset", "length", "ts"}
    for name in ("memory_write", "memory_checkpoint", "memory_forget"):
        assert tools[name].annotations.destructive_hint is False, name


def _proof(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    proof = result.structured_content
    assert HEX64.match(proof["hash"]) and HEX64.match(proof["prev"])
    assert proof["seq"] >= 1 and proof["length"] > 0 and proof["ts"].endswith("Z")
    assert result.content[0].type == "text" and str(proof["seq"]) in result.content[0].text
    return proof


async def check_happy_paths(client: Any, store_dir: Path, client_name: str, client_version: str) -> None:
    """Every tool once, as an agent would use it, checked against the log file."""
    stamp = {"name": client_name, "version": client_version}

    first = _proof(await client.call_tool("memory_write", {"text": "the deploy target is staging", "scope": "proj-a"}))
    assert first["seq"] == 1 and first["prev"] == "0" * 64 and first["duplicate"] is False
    lines = log_bytes(store_dir).splitlines(keepends=True)
    assert len(lines) == 1 and first["offset"] == 0 and first["length"] == len(lines[0])

    full = _proof(
        await client.call_tool(
            "memory_write",
            {
                "text": "Zoë prefers dark mode 🌙",
                "kind": "preference",
                "scope": "proj-a",
                "source": "conversation",
                "body": "said twice",
                "fields": {"x-priority": 2, "tags": ["ui", "editor"]},
                "client_op_id": "op-1",
            },
        )
    )
    assert full["seq"] == 2 and full["prev"] == first["hash"]
    retry = {"text": "Zoë prefers dark mode 🌙", "kind": "preference", "scope": "proj-a", "source": "conversation",
             "body": "said twice", "fields": {"tags": ["ui", "editor"], "x-priority": 2}, "client_op_id": "op-1"}
    again = await client.call_tool("memory_write", retry)
    assert "nothing new was written" in again.content[0].text
    again = _proof(again)
    assert again["duplicate"] is True and again["seq"] == 2 and again["hash"] == full["hash"]
    # The same id with other content is refused, naming the first record (issue 29).
    reused = await client.call_tool("memory_write", {"text": "x", "client_op_id": "op-1"})
    assert reused.is_error and "conflict" in reused.content[0].text and "seq 2" in reused.content[0].text

    fix = _proof(
        await client.call_tool("memory_write", {"text": "the deploy target is production", "supersedes": [1], "scope": "proj-a"})
    )
    cp = _proof(await client.call_tool("memory_checkpoint", {"label": "deploy notes", "summary": "target settled", "scope": "proj-a"}))
    gone = _proof(await client.call_tool("memory_forget", {"ids": [2], "reason": "the user took it back"}))
    assert (fix["seq"], cp["seq"], gone["seq"]) == (3, 4, 5)

    records = check_chain_from_file(store_dir / "log.jsonl")
    assert len(records) == 5
    assert all(r["client"] == stamp for r in records), "every MCP write carries the handshake's client"
    assert records[1]["x-priority"] == 2 and records[1]["tags"] == ["ui", "editor"] and records[1]["body"] == "said twice"
    assert records[2]["supersedes"] == [1]
    assert records[3]["kind"] == "checkpoint" and records[3]["text"] == "deploy notes" and records[3]["body"] == "target settled"
    assert records[4]["kind"] == "retract" and records[4]["retracts"] == [2] and records[4]["reason"] == "the user took it back"

    newest = await client.call_tool("memory_get", {"limit": 2})
    assert not newest.is_error, newest.content[0].text
    got = newest.structured_content
    assert [e["seq"] for e in got["records"]] == [5, 4] and got["returned"] == 2 and got["more"] == 3
    assert "3 more" in newest.content[0].text
    for entry in got["records"]:
        assert entry["record"]["client"] == stamp and entry["record"]["ts"].endswith("Z")

    everything = {e["seq"]: e for e in (await client.call_tool("memory_get", {})).structured_content["records"]}
    assert everything[1]["superseded_by"] == [3] and everything[2]["retracted_by"] == [5]

    by_id = (await client.call_tool("memory_get", {"ids": [3, 1]})).structured_content
    assert [e["seq"] for e in by_id["records"]] == [3, 1]
    assert by_id["records"][0]["record"]["text"] == "the deploy target is production"

    checkpoints = (await client.call_tool("memory_get", {"kind": "checkpoint"})).structured_content
    assert [e["seq"] for e in checkpoints["records"]] == [4] and checkpoints["more"] == 0

    around = (await client.call_tool("memory_get", {"around": 3, "window": 1})).structured_content
    assert [e["seq"] for e in around["records"]] == [2, 3, 4]
    assert around["more_before"] == 1 and around["more_after"] == 1

    found = await client.call_tool("memory_search", {"query": "deploy target"})
    assert not found.is_error, found.content[0].text
    hits = found.structured_content
    assert sorted(r["seq"] for r in hits["results"]) == [3, 4], "the superseded seq 1 is hidden"
    assert all(r["record"]["client"] == stamp and r["record"]["ts"] for r in hits["results"])
    assert hits["returned"] + sum(hits["left_out"].values()) == hits["total_matches"]
    assert hits["left_out"]["superseded"] == 1
    assert "left out" in found.content[0].text
    both = (await client.call_tool("memory_search", {"query": "deploy target", "include_superseded": True})).structured_content
    assert sorted(r["seq"] for r in both["results"]) == [1, 3, 4]
    retracted = (await client.call_tool("memory_search", {"query": "dark mode"})).structured_content
    assert retracted["returned"] == 0 and retracted["left_out"]["retracted"] == 1, retracted
    withdrawn = (await client.call_tool("memory_get", {"ids": [2]})).structured_content["records"][0]
    assert withdrawn["retracted_by"] == [5] and withdrawn["record"]["text"] == "Zoë prefers dark mode 🌙"
    corrected = (await client.call_tool("memory_get", {"ids": [1]})).structured_content["records"][0]
    assert corrected["superseded_by"] == [3]

    report = await client.call_tool("memory_verify", {})
    assert not report.is_error, report.content[0].text
    assert report.structured_content["ok"] is True and report.structured_content["findings"] == []
    assert "no findings" in report.content[0].text


def _unchanged(store_dir: Path, before: bytes) -> None:
    assert log_bytes(store_dir) == before, "a refused call changed the log"


async def check_error_codes(client: Any, store_dir: Path) -> None:
    """Every error code, each with nothing written; the server keeps serving."""
    await client.call_tool("memory_write", {"text": "a first record"})
    before = log_bytes(store_dir)

    cases: list[tuple[str, dict[str, Any], str]] = [
        ("memory_write", {"text": "x", "fields": {"seq": 7}}, "reserved_field"),
        ("memory_write", {"text": "x", "fields": {"client": {"name": "forged", "version": "1"}}}, "reserved_field"),
        ("memory_write", {"text": "x", "fields": {"ts": "2000-01-01T00:00:00Z"}}, "reserved_field"),
        ("memory_write", {"text": "x", "fields": {"text": "shadow"}}, "reserved_field"),
        ("memory_write", {"text": "x", "client": {"name": "forged", "version": "1"}}, "invalid_argument"),
        ("memory_write", {"text": "x", "ts": "2000-01-01T00:00:00Z"}, "invalid_argument"),
        ("memory_write", {"text": "x", "kind": "retract"}, "invalid_argument"),
        ("memory_write", {"text": ""}, "invalid_argument"),
        ("memory_write", {"text": "x", "fields": {"deep": _nested(100)}}, "invalid_argument"),
        ("memory_write", {"text": "x", "fields": {"big": 2**70}}, "invalid_argument"),
        ("memory_write", {"text": "y" * (RECORD_BYTES_MAX_FOR_TESTS + 1)}, "too_large"),
        ("memory_write", {"text": "x", "supersedes": [999]}, "not_found"),
        ("memory_get", {"ids": [999]}, "not_found"),
        ("memory_get", {"around": 999}, "not_found"),
        ("memory_get", {"ids": [1], "around": 1}, "invalid_argument"),
        ("memory_forget", {"ids": [999], "reason": "gone"}, "not_found"),
        ("memory_forget", {"ids": [1], "reason": ""}, "invalid_argument"),
    ]
    for tool, arguments, code in cases:
        result = await client.call_tool(tool, arguments)
        assert error_code(result) == code, (tool, list(arguments), result.content[0].text)
        _unchanged(store_dir, before)

    with StoreLock(store_dir / "log.lock", wait_s=5.0):
        busy = await client.call_tool("memory_write", {"text": "while another writer holds the lock"})
    assert error_code(busy) == "store_busy", busy.content[0].text
    _unchanged(store_dir, before)

    still = await client.call_tool("memory_write", {"text": "the server kept serving"})
    assert not still.is_error and still.structured_content["seq"] == 2


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


# Arguments of the wrong type, one tool at a time; none may write, none may stop the server.
BAD_TYPES: list[tuple[str, dict[str, Any]]] = [
    ("memory_write", {"text": 5}),
    ("memory_write", {"text": None}),
    ("memory_write", {"text": ["a"]}),
    ("memory_write", {}),
    ("memory_write", {"text": "x", "kind": 3}),
    ("memory_write", {"text": "x", "scope": {"a": 1}}),
    ("memory_write", {"text": "x", "fields": [1, 2]}),
    ("memory_write", {"text": "x", "fields": "not json {"}),
    ("memory_write", {"text": "x", "supersedes": "one"}),
    ("memory_write", {"text": "x", "supersedes": [0]}),
    ("memory_write", {"text": "x", "supersedes": [-3]}),
    ("memory_write", {"text": "x", "supersedes": [1.5]}),
    ("memory_write", {"text": "x", "client_op_id": 12}),
    ("memory_checkpoint", {}),
    ("memory_checkpoint", {"label": 1}),
    ("memory_checkpoint", {"label": "x", "summary": ["s"]}),
    ("memory_get", {"ids": "all"}),
    ("memory_get", {"ids": []}),
    ("memory_get", {"ids": [True]}),
    ("memory_get", {"limit": "many"}),
    ("memory_get", {"limit": 0}),
    ("memory_get", {"limit": -1}),
    ("memory_get", {"limit": 10**9}),
    ("memory_get", {"around": "x"}),
    ("memory_get", {"window": -1}),
    ("memory_get", {"ids": [1], "store_id": "NOT-HEX!"}),
    ("memory_get", {"ids": [1], "store_id": 7}),
    ("memory_search", {}),
    ("memory_search", {"query": 3}),
    ("memory_search", {"query": "x", "k": "ten"}),
    ("memory_search", {"query": "x", "k": 0}),
    ("memory_search", {"query": "x", "max_tokens": -5}),
    ("memory_search", {"query": "x", "include_superseded": "perhaps"}),
    ("memory_verify", {"deep": True}),
    ("memory_forget", {"ids": [1]}),
    ("memory_forget", {"ids": "1", "reason": "r"}),
    ("memory_forget", {"ids": [], "reason": "r"}),
    ("memory_forget", {"ids": [1], "reason": 5}),
]


async def check_bad_argument_types(client: Any, store_dir: Path) -> None:
    """Each bad call is an invalid_argument tool error naming the argument; nothing is written."""
    await client.call_tool("memory_write", {"text": "a first record"})
    before = log_bytes(store_dir)
    for tool, arguments in BAD_TYPES:
        result = await client.call_tool(tool, arguments)
        assert error_code(result) == "invalid_argument", (tool, arguments, result.content[0].text)
        text = result.content[0].text
        assert "argument" in text, text
        _unchanged(store_dir, before)
    unknown = await client.call_tool("memory_nonexistent", {})
    assert unknown.is_error
    assert not (await client.call_tool("memory_verify", {})).is_error, "the server stopped answering"


SECRETS = [
    {"text": "the deploy key is AKIA" + "QYLPMN5HHHFPZAM2 and it works"},
    {"text": "x", "body": "token ghp_" + "Tq8WZ2bYk4hN6pXc1LmR9sVd3FjA7eKg0uIo"},
    {"text": "x", "fields": {"conn": "postgres://admin:" + "Sup3rS3cretPassw0rd@db.internal:5432/app"}},
]


async def check_secret_refused(client: Any, store_dir: Path) -> None:
    """A credential anywhere in a write is refused with secret_detected, and never echoed."""
    await client.call_tool("memory_write", {"text": "a first record"})
    before = log_bytes(store_dir)
    for arguments in SECRETS:
        result = await client.call_tool("memory_write", arguments)
        assert error_code(result) == "secret_detected", result.content[0].text
        text = result.content[0].text
        for secret in ("QYLPMN5HHHFPZAM2", "Tq8WZ2bYk4hN6pXc1LmR9sVd3FjA7eKg0uIo", "Sup3rS3cretPassw0rd"):
            assert secret not in text, "an error echoed a secret"
        _unchanged(store_dir, before)
