"""The HTTP server killed with SIGKILL under load loses no acknowledged write (L4, group commit).

Eight MCP clients write continuously through one `retained serve --http`
process (their writes join group commits); once enough proofs have come
back, the server is killed mid-stream. Every proof a client received is then
in the file byte-exact, and the chain verifies. Three rounds on one store,
each with a fresh server.
"""

from __future__ import annotations

import signal

import anyio
import pytest

from retained.core import chain, record
from retained.core.log import Log

from .conftest import WAIT_S, HttpServer, client_info

CLIENTS = 8
ACKS_BEFORE_KILL = 60
ROUNDS = 3


async def _load_then_kill(server: HttpServer, round_: int) -> list[dict]:
    from mcp import Client

    acked: list[dict] = []
    enough = anyio.Event()

    async def agent(n: int) -> None:
        try:
            async with Client(server.url, client_info=client_info(f"load-{n}", "1")) as client:
                for i in range(10_000):
                    result = await client.call_tool("memory_write", {"text": f"round {round_} client {n} #{i}"})
                    if result.is_error:
                        return
                    acked.append(result.structured_content)
                    if len(acked) >= ACKS_BEFORE_KILL:
                        enough.set()
        except Exception:  # noqa: BLE001 - the server is killed under this client: its next call fails
            return

    with anyio.fail_after(WAIT_S * 2):
        async with anyio.create_task_group() as tg:
            for n in range(CLIENTS):
                tg.start_soon(agent, n)
            await enough.wait()
            server.proc.send_signal(signal.SIGKILL)
    return acked


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_under_load_never_loses_an_acknowledged_write(tmp_path):
    store_dir = tmp_path / "store"
    all_acked: dict[int, dict] = {}
    for round_ in range(ROUNDS):
        server = HttpServer(store_dir)
        try:
            acked = anyio.run(_load_then_kill, server, round_)
        finally:
            server.stop()
        assert len(acked) >= ACKS_BEFORE_KILL
        for proof in acked:
            all_acked[proof["seq"]] = proof
        data = (store_dir / "log.jsonl").read_bytes()
        for seq, p in all_acked.items():
            line = data[p["offset"] : p["offset"] + p["length"]]
            status, _, got_seq, got_hash, _ = record.classify(line.rstrip(b"\n"))
            assert line.endswith(b"\n") and (status, got_seq, got_hash) == (record.RECORD, seq, p["hash"]), f"round {round_}"
        report = chain.walk(Log(store_dir).scan())
        assert report.ok, report.findings
