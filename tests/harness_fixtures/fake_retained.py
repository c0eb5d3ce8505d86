"""A small stand-in for retained's MCP surface, honest by default, for the harness's own tests.

Each broken server in this folder subclasses FakeStore and cheats in one way;
the harness must catch each cheat. Run as a script: ``python fake_retained.py``
(the store directory comes from RETAINED_DIR).
"""

from __future__ import annotations

import fcntl
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness import logcheck

SERVER_FIELDS = {"v", "seq", "ts", "prev", "hash", "client", "cd", "redacted"}
API_FIELDS = {"kind", "text", "body", "scope", "source", "supersedes", "client_op_id"}
RECORD_BYTES_MAX = 16 * 1024 * 1024
DEPTH_MAX = 64


class Refused(Exception):
    """Bad input: nothing is written."""


def _depth(value: Any, level: int = 0) -> int:
    if isinstance(value, dict):
        return max([_depth(v, level + 1) for v in value.values()] or [level + 1])
    if isinstance(value, list):
        return max([_depth(v, level + 1) for v in value] or [level + 1])
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value <= 2**64 - 1:
        raise Refused(f"invalid_argument: integer {value} is outside 64 bits")
    return level


class FakeStore:
    """One store directory: log.jsonl under a flock on log.lock."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "log.jsonl"
        directory.mkdir(parents=True, exist_ok=True)

    # -- file access ------------------------------------------------------

    def data(self) -> bytes:
        return self.path.read_bytes() if self.path.exists() else b""

    def records(self) -> list[dict[str, Any]]:
        return [line.record for line in logcheck.check(self.data()).records if line.record is not None]

    def lock(self) -> Any:
        handle = open(self.directory / "log.lock", "a+b")  # noqa: SIM115 - the caller closes it to unlock
        fcntl.flock(handle, fcntl.LOCK_EX)
        return handle

    def recover(self) -> None:
        data = self.data()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            (self.directory / f"log.jsonl.torn-{cut}").write_bytes(data[cut:])
            with open(self.path, "r+b") as handle:
                handle.truncate(cut)
                os.fsync(handle.fileno())

    def build(self, fields: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
        report = logcheck.check(data)
        record = dict(fields)
        record.update(
            v=1, seq=report.head_seq + 1, prev=report.head_hash,
            ts=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            client={"name": "fake-retained", "version": "0"},
        )
        record["hash"] = logcheck.chain_hash(logcheck.content_digest(record), record["prev"], record["seq"])
        return record, logcheck.canonical(record) + b"\n"

    def append(self, fields: dict[str, Any]) -> dict[str, Any]:
        handle = self.lock()
        try:
            self.recover()
            record, line = self.build(fields, self.data())
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                offset = os.lseek(fd, 0, os.SEEK_END)
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            with open(self.path, "rb") as check:
                check.seek(offset)
                if check.read(len(line)) != line:
                    raise Refused("write_failed: read-back mismatch")
        finally:
            handle.close()
        return self.proof(record, offset, len(line))

    def proof(self, record: dict[str, Any], offset: int, length: int, duplicate: bool = False) -> dict[str, Any]:
        return {"seq": record["seq"], "hash": record["hash"], "prev": record["prev"], "offset": offset,
                "length": length, "ts": record["ts"], "duplicate": duplicate}

    # -- the operations ---------------------------------------------------

    def validate(self, fields: dict[str, Any]) -> None:
        for key in fields:
            if key in SERVER_FIELDS or key in API_FIELDS:
                raise Refused(f"reserved_field: field {key!r} is set by the store; rename it")
        if _depth(fields) > DEPTH_MAX:
            raise Refused(f"invalid_argument: fields nest deeper than {DEPTH_MAX}")

    def find_op(self, client_op_id: str) -> dict[str, Any] | None:
        for record in self.records():
            if record.get("client_op_id") == client_op_id:
                return record
        return None

    def write(self, text: str, kind: str, fields: dict[str, Any] | None, client_op_id: str | None,
              supersedes: list[int] | None) -> dict[str, Any]:
        extra = dict(fields or {})
        self.validate(extra)
        if client_op_id is not None:
            found = self.find_op(client_op_id)
            if found is not None:
                return self.proof_of(found, duplicate=True)
        if len(text.encode("utf-8")) > RECORD_BYTES_MAX:
            raise Refused(f"too_large: the record is over the {RECORD_BYTES_MAX}-byte limit")
        record = {"kind": kind, "text": text, **extra}
        if supersedes:
            record["supersedes"] = supersedes
        if client_op_id is not None:
            record["client_op_id"] = client_op_id
        return self.append(record)

    def proof_of(self, record: dict[str, Any], duplicate: bool = False) -> dict[str, Any]:
        for line in logcheck.check(self.data()).records:
            if line.record is not None and line.record.get("seq") == record["seq"]:
                return self.proof(record, line.offset, len(line.raw), duplicate)
        raise Refused("not_found: record vanished")

    def entries(self) -> list[dict[str, Any]]:
        """Records as retained's memory_get shows them: where they are, and the record."""
        lines = logcheck.check(self.data()).records
        return [{"seq": line.seq, "offset": line.offset, "length": len(line.raw), "record": line.record}
                for line in lines]

    def get(self, ids: list[int] | None, limit: int) -> dict[str, Any]:
        entries = self.entries()
        if ids:
            by_seq = {entry["seq"]: entry for entry in entries}
            got = [by_seq[seq] for seq in ids if seq in by_seq]
            return {"records": got, "returned": len(got), "more": 0}
        newest = list(reversed(entries))[:limit]
        return {"records": newest, "returned": len(newest), "more": len(entries) - len(newest)}

    def search(self, query: str, k: int, max_tokens: int | None = None) -> dict[str, Any]:
        if k < 1:
            raise Refused("invalid_argument: k must be at least 1")
        hits = [e for e in reversed(self.entries()) if query.lower() in str(e["record"].get("text", "")).lower()]
        returned, tokens = [], 0
        for entry in hits[:k]:
            cost = len(str(entry["record"].get("text", ""))) // 4 + 1
            if max_tokens is not None and tokens + cost > max_tokens:
                break
            returned.append(entry)
            tokens += cost
        over_budget = min(k, len(hits)) - len(returned)
        return {"results": returned, "total_matches": len(hits), "returned": len(returned),
                "left_out": {"beyond_k": len(hits) - min(k, len(hits)), "over_budget": over_budget,
                             "superseded": 0, "retracted": 0}}

    def verify(self) -> dict[str, Any]:
        report = logcheck.check(self.data())
        findings = [{"seq": f.seq, "offset": f.offset, "problem": f.problem} for f in report.findings]
        return {"ok": not findings, "findings": findings}

    def forget(self, ids: list[int], reason: str) -> dict[str, Any]:
        known = {record["seq"] for record in self.records()}
        unknown = [seq for seq in ids if seq not in known]
        if not ids or unknown:
            raise Refused(f"not_found: no record with seq {unknown[0] if unknown else '(none given)'}")
        return self.append({"kind": "retract", "text": reason, "retracts": ids, "reason": reason})

    def shutdown(self) -> None:
        """Called after a clean end of the session."""


def main(store_class: type[FakeStore] = FakeStore, *, answer_every_line: bool = True) -> None:
    """Serve the fake store over stdio; ``answer_every_line`` puts retained's stdio front before the SDK's transport."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    class FakeServer(MCPServer):
        async def get_prompt(self, name: str, arguments: Any = None, context: Any = None) -> Any:
            # JSON-RPC's invalid-params code for a prompt that does not exist (the SDK answers code 0).
            if answer_every_line and name not in {p.name for p in await self.list_prompts()}:
                from mcp.shared.exceptions import MCPError
                from mcp_types import INVALID_PARAMS

                raise MCPError(INVALID_PARAMS, f"no prompt named {name[:40]!r}")
            return await super().get_prompt(name, arguments, context)

    store = store_class(Path(os.environ["RETAINED_DIR"]))
    server = FakeServer("fake-retained")

    def guarded(call: Any) -> dict[str, Any]:
        try:
            return call()
        except Refused as exc:
            raise ToolError(str(exc)) from exc

    @server.tool()
    def memory_write(text: str, kind: str = "note", fields: dict[str, Any] | None = None,
                     client_op_id: str | None = None, supersedes: list[int] | None = None) -> dict[str, Any]:
        """Append one memory and return its proof."""
        return guarded(lambda: store.write(text, kind, fields, client_op_id, supersedes))

    @server.tool()
    def memory_checkpoint(label: str, summary: str | None = None) -> dict[str, Any]:
        """Append a checkpoint."""
        fields = {"kind": "checkpoint", "text": label, **({"body": summary} if summary else {})}
        return guarded(lambda: store.append(fields))

    @server.tool()
    def memory_get(ids: list[int] | None = None, limit: int = 20) -> dict[str, Any]:
        """Records by seq, or newest first."""
        return guarded(lambda: store.get(ids, limit))

    @server.tool()
    def memory_search(query: str, k: int = 10, max_tokens: int | None = None) -> dict[str, Any]:
        """Search with accounting."""
        return guarded(lambda: store.search(query, k, max_tokens))

    @server.tool()
    def memory_verify() -> dict[str, Any]:
        """Check the chain."""
        return guarded(store.verify)

    @server.tool()
    def memory_forget(ids: list[int], reason: str) -> dict[str, Any]:
        """Retract records."""
        return guarded(lambda: store.forget(ids, reason))

    try:
        if answer_every_line:
            import anyio

            from retained.mcp import stdio as mcp_stdio

            anyio.run(lambda: mcp_stdio.serve(server, line_bytes_max=RECORD_BYTES_MAX + 1024 * 1024))
        else:
            server.run()  # the SDK's own transport: a line its reader refuses is never answered
    finally:
        store.shutdown()


if __name__ == "__main__":
    main()
