"""Adapter for retained: memory_write / memory_get / memory_search / memory_verify.

Every claim is checked against ``<dir>/log.jsonl`` with the harness's own
reader (harness.logcheck), never with retained's code.
"""

from __future__ import annotations

import sys
from typing import Any

from .. import logcheck
from ..mcpio import Reply
from .base import Adapter, BadCall, Item, SearchCount, Written

RECORD_BYTES_MAX = 16 * 1024 * 1024
"""retained's stated default record limit (DESIGN, "bad input"); one byte over it must be refused."""

GET_LIMIT = 500
"""Records one memory_get may return (retained's stated maximum); probes write fewer."""

_SERVER_FIELDS = {"v", "seq", "ts", "prev", "hash", "client", "cd", "redacted"}
_API_FIELDS = {"kind", "text", "body", "scope", "source", "supersedes", "client_op_id"}
_NOT_FOREIGN = _SERVER_FIELDS | _API_FIELDS | {"retracted_by", "superseded_by", "offset", "length", "retracts", "reason"}


def _records(data: Any) -> list[dict[str, Any]]:
    """The record list in a get or search reply, whatever its key."""
    if isinstance(data, list):
        return [item for item in data if isinstance(item, dict)]
    if isinstance(data, dict):
        for key in ("records", "results", "items", "result"):
            value = data.get(key)
            if isinstance(value, list):
                return [item for item in value if isinstance(item, dict)]
    return []


def _record_of(entry: dict[str, Any]) -> dict[str, Any]:
    """A search result may wrap its record; unwrap it."""
    inner = entry.get("record")
    return inner if isinstance(inner, dict) else entry


def _proof(data: Any) -> dict[str, Any] | None:
    if isinstance(data, dict):
        if "seq" in data and "hash" in data:
            return data
        inner = data.get("proof")
        if isinstance(inner, dict):
            return inner
    return None


def _count(value: Any) -> int | None:
    """An accounting value: an int, or a breakdown whose ints add up."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        parts = [v for v in value.values() if isinstance(v, int) and not isinstance(v, bool)]
        return sum(parts) if parts else 0
    return None


def _mentions(value: Any, seq: int, offset: int) -> bool:
    """Whether a verify report names this record (by seq or by byte offset) anywhere."""
    if isinstance(value, dict):
        if value.get("seq") == seq or value.get("offset") == offset:
            return True
        return any(_mentions(item, seq, offset) for item in value.values())
    if isinstance(value, list):
        return any(_mentions(item, seq, offset) for item in value)
    if isinstance(value, str):
        return f"seq {seq}" in value or f"byte {offset}" in value or f"offset {offset}" in value
    return False


class RetainedAdapter(Adapter):
    name = "retained"
    env_var = "RETAINED_DIR"
    file_name = "log.jsonl"

    def command(self, override: list[str] | None) -> list[str]:
        return override or [sys.executable, "-m", "retained"]

    async def write(self, server, text, *, kind=None, fields=None, op_id=None) -> Written:
        arguments: dict[str, Any] = {"text": text}
        if kind is not None:
            arguments["kind"] = kind
        if fields is not None:
            arguments["fields"] = fields
        if op_id is not None:
            arguments["client_op_id"] = op_id
        reply = await server.call("memory_write", arguments)
        proof = _proof(reply.data) if reply.ok else None
        duplicate = proof.get("duplicate") if proof else None
        return Written(reply.ok, text, proof=proof, duplicate=duplicate, reply=reply)

    def _item(self, record: dict[str, Any]) -> Item:
        record = _record_of(record)
        fields = {key: value for key, value in record.items() if key not in _NOT_FOREIGN}
        if isinstance(record.get("fields"), dict):
            fields.update(record["fields"])
        return Item(str(record.get("text", "")), record.get("kind"), fields, record.get("seq"))

    async def read_all(self, server) -> list[Item]:
        reply = await server.call("memory_get", {"limit": GET_LIMIT})
        if not reply.ok:
            raise RuntimeError(f"memory_get failed: {reply.brief()}")
        return [self._item(record) for record in _records(reply.data)]

    async def read_one(self, server, written) -> Item | None:
        if not written.proof:
            return await super().read_one(server, written)
        reply = await server.call("memory_get", {"ids": [written.proof["seq"]]})
        if not reply.ok:
            raise RuntimeError(f"memory_get failed: {reply.brief()}")
        records = _records(reply.data)
        return self._item(records[0]) if records else None

    async def alive(self, server) -> Reply:
        return await server.call("memory_get", {"limit": 1})

    async def verify(self, server) -> Reply:
        return await server.call("memory_verify", {})

    def verify_names(self, reply: Reply, item: Item, offset: int) -> str | None:
        """The finding that names this record, if verify reported one.

        Only a report that is not "ok" counts, and only its findings (when it
        has a findings list) are searched, so a head or a count that happens to
        equal the seq does not pass for a finding.
        """
        data = reply.data
        if isinstance(data, dict):
            if data.get("ok") is True:
                return None
            scope: Any = data.get("findings", data)
            for finding in scope if isinstance(scope, list) else [scope]:
                if _mentions(finding, item.key, offset):
                    text = finding.get("message") or finding.get("problem") or finding.get("kind") if isinstance(finding, dict) else finding
                    return " ".join(str(text).split())[:120]
            return None
        for text in (reply.text, reply.error):
            if _mentions(text, item.key, offset):
                return " ".join(text.split())[:120]
        return None

    async def search(self, server, query, k, max_tokens=None) -> SearchCount:
        arguments: dict[str, Any] = {"query": query, "k": k}
        if max_tokens is not None:
            arguments["max_tokens"] = max_tokens
        reply = await server.call("memory_search", arguments)
        if not reply.ok:
            raise RuntimeError(f"memory_search failed: {reply.brief()}")
        data = reply.data if isinstance(reply.data, dict) else {}
        returned = len(_records(data))
        matched = next((_count(data[key]) for key in ("total_matches", "matched", "total") if key in data), None)
        left_out = None
        for key in ("left_out", "omitted", "dropped"):
            if key in data:
                left_out = _count(data[key])
                break
        keys = ", ".join(sorted(data))
        return SearchCount(returned, left_out, matched, detail=f"reply keys: {keys}")

    def raw_write(self, text_json: str, extra_json: str | None = None) -> tuple[str, str]:
        extra = f',"fields":{{"x_harness":{extra_json}}}' if extra_json is not None else ""
        return "memory_write", f'{{"text":{text_json}{extra}}}'

    def bad_calls(self) -> list[BadCall]:
        deep: Any = "bottom"
        for _ in range(100):
            deep = {"d": deep}
        return [
            BadCall("text missing", "memory_write", {}),
            BadCall("text not a string", "memory_write", {"text": 42}),
            BadCall("fields not an object", "memory_write", {"text": "bad input", "fields": "nope"}),
            BadCall("reserved field seq", "memory_write", {"text": "bad input", "fields": {"seq": 99}}),
            BadCall("reserved field hash", "memory_write", {"text": "bad input", "fields": {"hash": "0" * 64}}),
            BadCall("reserved field client", "memory_write", {"text": "bad input", "fields": {"client": {"name": "forged"}}}),
            BadCall("API field shadowed", "memory_write", {"text": "bad input", "fields": {"text": "shadow"}}),
            BadCall("integer over 64 bits", "memory_write", {"text": "bad input", "fields": {"n": 2**70}}),
            BadCall("nesting 100 deep", "memory_write", {"text": "bad input", "fields": {"deep": deep}}),
            BadCall("supersedes not seqs", "memory_write", {"text": "bad input", "supersedes": ["one"]}),
            BadCall("kind not a string", "memory_write", {"text": "bad input", "kind": 7}),
            BadCall("record over 16 MiB", "memory_write", {"text": "a" * (RECORD_BYTES_MAX + 1024)}),
            BadCall("checkpoint without label", "memory_checkpoint", {}),
            BadCall("get ids not seqs", "memory_get", {"ids": "abc"}),
            BadCall("search k negative", "memory_search", {"query": "x", "k": -1}),
            BadCall("forget unknown seq", "memory_forget", {"ids": [999999], "reason": "harness"}),
        ]

    # -- the file -----------------------------------------------------------

    def check_proof(self, data: bytes, written: Written) -> tuple[bool, str]:
        proof = written.proof
        if not proof:
            return False, f"the write reply carries no proof (got {written.reply.brief() if written.reply else 'nothing'})"
        try:
            offset, length, seq, digest = int(proof["offset"]), int(proof["length"]), proof["seq"], proof["hash"]
        except (KeyError, TypeError, ValueError):
            return False, f"the proof lacks offset/length/seq/hash: {sorted(proof)}"
        raw = data[offset : offset + length]
        if len(raw) != length or not raw.endswith(b"\n") or (offset > 0 and data[offset - 1 : offset] != b"\n"):
            return False, f"no whole line at bytes {offset}..{offset + length} of {len(data)}-byte log.jsonl"
        line = logcheck.classify(offset, raw)
        if line.status != "record" or line.record is None:
            return False, f"the line at byte {offset} is {line.status}: {line.problem or 'not a chained record'}"
        found = (line.record.get("seq"), line.record.get("hash"), line.record.get("prev"), line.record.get("ts"))
        claimed = (seq, digest, proof.get("prev", found[2]), proof.get("ts", found[3]))
        if found != claimed:
            return False, f"proof says seq/hash/prev/ts {claimed}, the file holds {found} at byte {offset}"
        if line.record.get("text") != written.text:
            return False, f"the line at byte {offset} holds different text than was written"
        return True, f"seq {seq}: {length} bytes at offset {offset} re-hash to {digest[:12]}..."

    def file_texts(self, data: bytes) -> list[str] | None:
        report = logcheck.check(data)
        return [str(line.record.get("text")) for line in report.records if line.record is not None]

    def check_file(self, data: bytes) -> tuple[bool, str]:
        report = logcheck.check(data)
        return report.ok, report.summary()

    def locate(self, data: bytes, text: str) -> int | None:
        for line in logcheck.check(data).records:
            if line.record is not None and line.record.get("text") == text:
                return line.offset
        return None

    def file_record(self, data: bytes, text: str) -> dict[str, Any] | None:
        for line in logcheck.check(data).records:
            if line.record is not None and line.record.get("text") == text:
                return line.record
        return None
