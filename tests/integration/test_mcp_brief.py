"""The session-start brief through MCP: the prompt "brief" and the resource retained://brief."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio

from .conftest import WAIT_S, client_info, stdio_params


def test_the_brief_is_a_prompt_and_a_resource_showing_checkpoints_first(tmp_path):
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    store_dir = tmp_path / "store"

    async def go() -> None:
        with anyio.fail_after(WAIT_S):
            async with Client(stdio_params(store_dir), client_info=client_info("briefed", "2")) as client:
                empty = (await client.read_resource("retained://brief")).contents[0].text
                assert "no store" in empty or "no records" in empty
                await client.call_tool("memory_write", {"text": "prefers tabs", "scope": "ui"})
                await client.call_tool("memory_checkpoint", {"label": "release 0.1 shipped", "summary": "next: docs"})
                await client.call_tool("memory_write", {"text": "a note in another scope", "scope": "ops"})

                prompts = {p.name: p for p in (await client.list_prompts()).prompts}
                assert {a.name for a in prompts["brief"].arguments} == {"budget", "scope"}
                resources = {str(r.uri) for r in (await client.list_resources()).resources}
                assert "retained://brief" in resources

                text = (await client.read_resource("retained://brief")).contents[0].text
                assert text.index("release 0.1 shipped") < text.index("a note in another scope")
                assert "briefed" in text

                scoped = (await client.get_prompt("brief", {"scope": "ui"})).messages[0].content.text
                assert "prefers tabs" in scoped and "another scope" not in scoped

                # The brief records the head it read outside the store, as the hook's brief does (after the
                # server's first write, which recorded seq 1 as its routine anchor).
                anchor_dir = Path(os.environ.get("RETAINED_ANCHOR_DIR") or store_dir.parent / "anchors")
                heads = [json.loads(line) for f in anchor_dir.glob("*.jsonl") for line in f.read_text().splitlines()]
                assert [(h["seq"], h["source"]) for h in heads if "seq" in h] == [(1, "write"), (3, "brief")], heads

                tiny = (await client.get_prompt("brief", {"budget": "1"})).messages[0].content.text
                assert "Not shown" in tiny or "not shown" in tiny

                try:
                    await client.get_prompt("brief", {"budget": "lots"})
                except MCPError as exc:
                    assert "invalid_argument" in str(exc)
                else:
                    raise AssertionError("a non-numeric budget was accepted")

    anyio.run(go)
