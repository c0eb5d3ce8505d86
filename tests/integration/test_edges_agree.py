"""The Store, the CLI and the MCP server give the same facts: one door, two thin edges.

A store is written through the library; then the same reads go through
``Store`` in this process, ``retained ... --json`` subprocesses and a real MCP
client over stdio, and must agree record for record, links and counts
included. The text forms must agree too: the CLI and memory_get render a
record the same way (``retained.render``).
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio

import retained
from retained import Store

from ..conftest import run_cli
from .conftest import WAIT_S, client_info, stdio_params


def _fill(store_dir: Path) -> None:
    """Seq 1 superseded by 3, seq 2 retracted by 4, a checkpoint (5), two notes in another scope (6, 7)."""
    with Store(store_dir) as store:
        store.write("the deploy target is staging", scope="proj-a", fields={"priority": 2})
        store.write("the user prefers tabs", scope="proj-a")
        store.write("the deploy target is production", scope="proj-a", supersedes=[1], source="chat")
        store.forget([2], "the user took it back")
        store.checkpoint("deploy settled", scope="proj-a")
        store.write("the cache is warm", scope="proj-b")
        store.write("the build is green", scope="proj-b")


# (memory_get arguments, the same read through the Store, the same read through the CLI)
READS = [
    ({"around": 3, "window": 2}, lambda s: s.timeline(3, window=2), ["get", "--around", "3", "--window", "2"]),
    ({"around": 1}, lambda s: s.timeline(1), ["get", "--around", "1"]),
    ({}, lambda s: s.list(limit=20), ["list"]),
    ({"limit": 2, "scope": "proj-a"}, lambda s: s.list(limit=2, scope="proj-a"), ["list", "--limit", "2", "--scope", "proj-a"]),
    ({"kind": "note", "limit": 3}, lambda s: s.list(limit=3, kind="note"), ["list", "--kind", "note", "--limit", "3"]),
    (
        {"ids": [2, 1]},
        lambda s: (lambda got: {"records": got, "returned": len(got), "more": 0})(s.get([2, 1])),
        ["get", "2", "1"],
    ),
]


def test_store_cli_and_memory_get_agree_on_records_links_and_counts(tmp_path):
    store_dir = tmp_path / "store"
    _fill(store_dir)
    with Store(store_dir) as store:
        from_store = [read(store) for _, read, _ in READS]
    around = from_store[0]
    assert [e["seq"] for e in around["records"]] == [1, 2, 3, 4, 5]
    assert around["records"][0]["superseded_by"] == [3] and around["records"][1]["retracted_by"] == [4]
    assert (around["more_before"], around["more_after"]) == (0, 2)

    from_cli = []
    cli_text = []
    for _, _, argv in READS:
        out = run_cli(*argv, "--json", env_dir=store_dir)
        assert out.returncode == 0, (argv, out.stderr)
        from_cli.append(json.loads(out.stdout))
        cli_text.append(run_cli(*argv, env_dir=store_dir).stdout.rstrip("\n"))

    from mcp import Client

    from_mcp = []
    mcp_text = []

    async def go() -> None:
        with anyio.fail_after(WAIT_S * 2):
            async with Client(stdio_params(store_dir), client_info=client_info("agree-check")) as client:
                assert client.server_info.version == retained.__version__
                for arguments, _, _ in READS:
                    result = await client.call_tool("memory_get", arguments)
                    assert not result.is_error, result.content[0].text
                    from_mcp.append(result.structured_content)
                    mcp_text.append(result.content[0].text)

    anyio.run(go)
    for (arguments, _, argv), store_reply, cli_reply, mcp_reply in zip(READS, from_store, from_cli, from_mcp):
        assert mcp_reply == store_reply, arguments
        assert cli_reply == store_reply, argv
    # Short single-line texts and no bodies: the preview is the whole text, so the text forms match exactly.
    for (arguments, _, _), cli, over_mcp in zip(READS, cli_text, mcp_text):
        assert cli == over_mcp, arguments
    assert "superseded_by=#3" in mcp_text[0] and "retracted_by=#4" in mcp_text[0]
