"""The conformance probes: each drives a server through its adapter and checks the store file.

A probe returns PASS, FAIL or SKIP with one sentence of evidence. Every probe
gets a fresh store directory and starts the servers it needs itself.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from .adapters.base import Adapter, Item, NotApplicable, Written
from .mcpio import Server, spawn, spawn_raw

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass
class Outcome:
    name: str
    status: str
    evidence: str
    seconds: float = 0.0


class Verdict(Exception):
    """Raised inside a probe to end it with a status and a sentence."""

    def __init__(self, status: str, evidence: str) -> None:
        super().__init__(evidence)
        self.status = status
        self.evidence = evidence


def fail(evidence: str) -> Verdict:
    return Verdict(FAIL, evidence)


@dataclass
class Context:
    """What a probe runs with: the adapter, the command, and a private temp root."""

    adapter: Adapter
    command: list[str]
    root: Path
    base_env: dict[str, str] = field(default_factory=dict)
    nonce: str = field(default_factory=lambda: secrets.token_hex(4))
    seen: list[str] = field(default_factory=list)

    def store(self) -> Path:
        path = Path(tempfile.mkdtemp(prefix="store-", dir=self.root))
        os.chmod(path, 0o700)
        return path

    @asynccontextmanager
    async def server(self, store: Path) -> AsyncIterator[Server]:
        env = dict(self.base_env)
        env.update(self.adapter.env(store))
        async with spawn(self.command, env, self.root / "proc") as server:
            if not self.seen:
                self.seen.append(server.info)
            yield server

    def read(self, store: Path) -> bytes:
        path = self.adapter.store_file(store)
        return path.read_bytes() if path.exists() else b""

    def append(self, store: Path, data: bytes) -> None:
        path = self.adapter.store_file(store)
        with open(path, "ab") as handle:
            handle.write(data)


async def _write_ok(ctx: Context, server: Server, text: str, **kw: Any) -> Written:
    written = await ctx.adapter.write(server, text, **kw)
    if not written.ok:
        raise fail(f"write of {text[:40]!r} was refused: {written.error}")
    return written


async def _read_all(ctx: Context, server: Server, when: str) -> list[Item]:
    try:
        return await ctx.adapter.read_all(server)
    except RuntimeError as exc:
        raise fail(f"{when}: {exc}") from exc


def _missing(expected: list[str], found: list[str] | None) -> list[str]:
    have = set(found or [])
    return [text for text in expected if text not in have]


def _file_valid(ctx: Context, store: Path, when: str) -> str:
    ok, why = ctx.adapter.check_file(ctx.read(store))
    if not ok:
        raise fail(f"{when} the store file is damaged: {why}")
    return why


# -- the probes ---------------------------------------------------------------


async def ack_readback(ctx: Context) -> tuple[str, str]:
    store = ctx.store()
    last = ""
    async with ctx.server(store) as server:
        for i in range(3):
            written = await _write_ok(ctx, server, f"ack readback {i} {ctx.nonce}: the proof must match the file")
            ok, why = ctx.adapter.check_proof(ctx.read(store), written)
            if not ok:
                raise fail(f"write {i + 1} of 3: {why}")
            last = why
    _file_valid(ctx, store, "after 3 writes")
    return PASS, f"3 of 3 acks match the bytes in the file; last: {last}"


async def restart(ctx: Context) -> tuple[str, str]:
    store = ctx.store()
    texts = [f"restart {i} {ctx.nonce}" for i in range(10)]
    async with ctx.server(store) as server:
        for text in texts:
            await _write_ok(ctx, server, text)
        server.kill()
    async with ctx.server(store) as server:
        items = await _read_all(ctx, server, "after restart, reading back")
    missing = _missing(texts, [item.text for item in items])
    if missing:
        raise fail(f"after SIGKILL right after the 10th ack, a new process returned {10 - len(missing)} of 10 (lost {missing[0]!r})")
    in_file = _missing(texts, ctx.adapter.file_texts(ctx.read(store)))
    if in_file:
        raise fail(f"a new process returned all 10 but the file lacks {len(in_file)} of them")
    return PASS, "10 acked writes, SIGKILL right after the last ack; a new process returned 10 of 10"


FOREIGN_FIELDS: dict[str, Any] = {
    "x_harness_nested": {"a": [1, -2, 3.5, None, True, "ü"], "empty": {}, "deep": {"l1": {"l2": {"l3": [[]]}}}},
    "x_harness_unicode": "Zoë «ñ» 日本語 🚀 \u2028 e\u0301 שלום \"q\" \\ \t",
    "x_harness_ключ": "значение",
    "x_harness_big": 9007199254740993,
}


async def foreign_field(ctx: Context) -> tuple[str, str]:
    store = ctx.store()
    text = f"foreign field {ctx.nonce}: Zoë prefers «dark mode» 🌙 and \"vim\" keys\nsecond line\ttab"
    async with ctx.server(store) as server:
        written = await ctx.adapter.write(server, text, fields=dict(FOREIGN_FIELDS))
        if not written.ok:
            raise Verdict(SKIP, f"the server refuses unknown fields: {written.error}")
        item = await ctx.adapter.read_one(server, written)
    if item is None:
        raise fail("the record written with foreign fields could not be read back")
    if item.text != text:
        raise fail("the unicode text did not round-trip byte-exact")
    lost = [key for key, value in FOREIGN_FIELDS.items() if item.fields.get(key) != value]
    if lost:
        if len(lost) == len(FOREIGN_FIELDS) and not any(key in item.fields for key in lost):
            raise fail(f"the write with {len(lost)} unknown fields was acknowledged, but none of them came back (silently dropped)")
        raise fail(f"the write was acknowledged but {len(lost)} of {len(FOREIGN_FIELDS)} unknown fields came back different "
                   f"or missing: {', '.join(sorted(lost)[:3])}")
    on_disk = ctx.adapter.file_record(ctx.read(store), text)
    if on_disk is not None:
        bad = [key for key, value in FOREIGN_FIELDS.items() if on_disk.get(key) != value]
        if bad:
            raise fail(f"the read-back was right but the file holds {bad[0]} differently")
    return PASS, f"{len(FOREIGN_FIELDS)} unknown fields (nested, unicode keys and values, 2^53+1) and unicode text round-trip verbatim"


async def foreign_record(ctx: Context) -> tuple[str, str]:
    store = ctx.store()
    kind = ctx.adapter.kind_probe_value()
    texts = [f"foreign record {i} {ctx.nonce}" for i in range(4)]
    async with ctx.server(store) as server:
        await _write_ok(ctx, server, texts[0], kind=kind)
        await _write_ok(ctx, server, texts[1])
        before = ctx.read(store)
        separator = b"" if not before or before.endswith(b"\n") else b"\n"
        line = ctx.adapter.foreign_line()
        ctx.append(store, separator + line)
        for text in texts[2:]:
            written = await ctx.adapter.write(server, text, kind=kind)
            if not written.ok:
                raise fail(f"after another program appended a line, a write was refused: {written.error}")
        items = await _read_all(ctx, server, "after a foreign line was appended, reading")
    by_text = {item.text: item for item in items}
    missing = _missing(texts, list(by_text))
    if missing:
        raise fail(f"after a foreign line was appended, {len(missing)} of 4 records were missing on read")
    wrong = [text for text in (texts[0], texts[2], texts[3]) if by_text[text].kind != kind]
    if wrong:
        raise fail(f"kind {kind!r} came back as {by_text[wrong[0]].kind!r}")
    data = ctx.read(store)
    if line.rstrip(b"\n") not in data.split(b"\n"):
        raise fail("the line another program appended is gone from the store file (rewritten or dropped)")
    _file_valid(ctx, store, "after the foreign line")
    return PASS, f"kind {kind!r} round-trips; a foreign line appended mid-session is kept byte-exact and 4 of 4 records read back"


async def concurrent(ctx: Context) -> tuple[str, str]:
    store = ctx.store()
    texts = {side: [f"concurrent {side} {i} {ctx.nonce}" for i in range(25)] for side in "AB"}
    errors: list[str] = []

    async def writer(server: Server, side: str) -> None:
        for text in texts[side]:
            written = await ctx.adapter.write(server, text)
            if not written.ok:
                errors.append(f"{side}: {written.error}")

    async with ctx.server(store) as a, ctx.server(store) as b:
        async with anyio.create_task_group() as group:
            group.start_soon(writer, a, "A")
            group.start_soon(writer, b, "B")
        items = await _read_all(ctx, a, "after the concurrent writes, reading")
    expected = texts["A"] + texts["B"]
    if errors:
        raise fail(f"{len(errors)} of 50 concurrent writes were refused; first: {errors[0]}")
    missing = _missing(expected, [item.text for item in items])
    in_file = _missing(expected, ctx.adapter.file_texts(ctx.read(store)))
    if missing or in_file:
        lost = max(len(missing), len(in_file))
        raise fail(
            f"two processes, 25 + 25 acked writes: {50 - len(missing)} of 50 read back, "
            f"{50 - len(in_file)} of 50 in the file; {lost} acknowledged writes lost"
        )
    why = _file_valid(ctx, store, "after the concurrent writes")
    order = [text.split()[1] for text in ctx.adapter.file_texts(ctx.read(store)) or [] if text in expected]
    switches = sum(1 for before, after in itertools.pairwise(order) if before != after)
    return PASS, (
        f"two processes, 25 + 25 concurrent writes (the file switches writer {switches} times): "
        f"50 of 50 read back and in the file; {why}"
    )


def _large_text(size: int = 1024 * 1024) -> str:
    unit = "line {:05d}: Zoë «ñ» 🚀 \"quoted\" back\\slash\ttab\n"
    parts: list[str] = []
    used = 0
    i = 0
    while True:
        piece = unit.format(i)
        piece_bytes = len(piece.encode("utf-8"))
        if used + piece_bytes > size:
            break
        parts.append(piece)
        used += piece_bytes
        i += 1
    parts.append("x" * (size - used))
    text = "".join(parts)
    assert len(text.encode("utf-8")) == size
    return text


async def large_record(ctx: Context) -> tuple[str, str]:
    store = ctx.store()
    text = _large_text()
    async with ctx.server(store) as server:
        written = await _write_ok(ctx, server, text)
        item = await ctx.adapter.read_one(server, written)
    if item is None:
        raise fail("the acknowledged 1 MiB record could not be read back")
    if item.text != text:
        got = len(item.text.encode("utf-8"))
        raise fail(f"1 MiB written, {got} bytes of text read back{' (truncated)' if got < len(text.encode()) else ''}, not byte-exact")
    if text not in (ctx.adapter.file_texts(ctx.read(store)) or []):
        raise fail("the 1 MiB text read back intact but the store file does not hold it byte-exact")
    if written.proof:
        ok, why = ctx.adapter.check_proof(ctx.read(store), written)
        if not ok:
            raise fail(f"the 1 MiB record's proof does not match the file: {why}")
    return PASS, "1 MiB of multi-byte text (1,048,576 UTF-8 bytes) read back and stored byte-exact"


async def _send_twice(ctx: Context, server: Server, text: str, op_id: str) -> tuple[Written, Written, str]:
    """The same write twice: with one client_op_id, or, lacking one, the identical call."""
    try:
        first = await _write_ok(ctx, server, text, op_id=op_id)
        second = await _write_ok(ctx, server, text, op_id=op_id)
        return first, second, ""
    except NotApplicable as exc:
        retry = getattr(ctx.adapter, "retry_write", None)
        if retry is None:
            raise Verdict(SKIP, str(exc)) from exc
        first, second = await retry(server, text)
        if not (first.ok and second.ok):
            raise fail(f"the retried call was refused: {second.error or first.error}") from exc
        return first, second, f" ({exc}; the identical call sent instead)"


def _same_proof(first: Written, second: Written, when: str) -> None:
    if not (first.proof and second.proof):
        return
    if second.proof.get("seq") != first.proof.get("seq") or second.duplicate is not True:
        raise fail(
            f"{when}, the retry's proof (seq {second.proof.get('seq')}, duplicate {second.duplicate}) "
            f"is not the first's (seq {first.proof.get('seq')})"
        )


async def idempotent_retry(ctx: Context) -> tuple[str, str]:
    """Retry in the same process, then again from a new process after a SIGKILL (a lost reply)."""
    store = ctx.store()
    text = f"idempotent retry {ctx.nonce}"
    op_id = f"harness-op-{ctx.nonce}"
    async with ctx.server(store) as server:
        first, second, note = await _send_twice(ctx, server, text, op_id)
        _same_proof(first, second, "in the same process")
        server.kill()
    async with ctx.server(store) as server:
        third, fourth, _ = await _send_twice(ctx, server, text, op_id)
        _same_proof(first, third, "from a new process")
        _same_proof(first, fourth, "from a new process")
        items = await _read_all(ctx, server, "after the retries, reading")
    count = sum(1 for item in items if item.text == text)
    stored = sum(1 for found in ctx.adapter.file_texts(ctx.read(store)) or [] if found == text)
    if count != 1 or stored != 1:
        how = note or " with one client_op_id"
        raise fail(f"the same write sent 4 times{how}, twice per process: {count} records read back, {stored} in the file")
    if first.proof:
        return PASS, (
            f"one client_op_id sent twice, then twice more from a new process after SIGKILL: 1 record; "
            f"every retry returned seq {first.proof.get('seq')} with duplicate: true"
        )
    return PASS, f"the same write sent twice, then twice more from a new process{note}: 1 record read back and 1 in the file"


TORN_BYTES = b'{"v":1,"seq":99,"text":"a write cut off mid-li'


async def torn_tail(ctx: Context) -> tuple[str, str]:
    store = ctx.store()
    texts = [f"torn tail {i} {ctx.nonce}" for i in range(5)]
    async with ctx.server(store) as server:
        for text in texts:
            await _write_ok(ctx, server, text)
        server.kill()
    before = ctx.read(store)
    separator = b"" if before.endswith(b"\n") else b"\n"
    ctx.append(store, separator + TORN_BYTES)
    after_text = f"torn tail after recovery {ctx.nonce}"
    async with ctx.server(store) as server:
        items = await _read_all(ctx, server, "with a torn last line, a new process could not read")
        missing = _missing(texts, [item.text for item in items])
        if missing:
            raise fail(f"with a torn last line a new process returned {5 - len(missing)} of 5 acked records")
        written = await ctx.adapter.write(server, after_text)
        if not written.ok:
            raise fail(f"with a torn last line, the next write was refused: {written.error}")
        items = await _read_all(ctx, server, "after writing past a torn tail, reading")
    expected = [*texts, after_text]
    missing = _missing(expected, [item.text for item in items])
    in_file = _missing(expected, ctx.adapter.file_texts(ctx.read(store)))
    if missing or in_file:
        raise fail(f"after a torn tail and one more write: {6 - len(missing)} of 6 read back, {6 - len(in_file)} of 6 in the file")
    why = _file_valid(ctx, store, "after recovery")
    quarantined = sorted(p.name for p in store.iterdir() if "torn" in p.name)
    aside = f"; torn bytes set aside in {quarantined[0]}" if quarantined else ""
    return PASS, f"{len(TORN_BYTES)} torn bytes after 5 acked writes: all 5 kept, the next write landed, {why}{aside}"


async def tamper_detect(ctx: Context) -> tuple[str, str]:
    store = ctx.store()
    texts = [f"tamper target {i} {ctx.nonce}" for i in range(5)]
    async with ctx.server(store) as server:
        written = [await _write_ok(ctx, server, text) for text in texts]
        target = await ctx.adapter.read_one(server, written[2])
        if target is None:
            raise fail("record 3 of 5 could not be read back before tampering")
        data = bytearray(ctx.read(store))
        offset = ctx.adapter.locate(bytes(data), texts[2])
        if offset is None:
            raise fail("record 3 of 5 is not in the store file")
        at = data.index(texts[2].encode("utf-8"), offset)
        data[at] ^= 0x01  # "t" -> "u": still valid JSON, so only a checksum can tell
        ctx.adapter.store_file(store).write_bytes(bytes(data))
        flipped = texts[2].replace("t", "u", 1)
        try:
            reply = await ctx.adapter.verify(server)
        except NotApplicable as exc:
            items = await _read_all(ctx, server, "after tampering, reading")
            served = any(item.text == flipped for item in items)
            tail = "; a read after the flip served the altered text as if it were stored" if served else ""
            raise Verdict(SKIP, f"{exc}{tail}") from exc
        named = ctx.adapter.verify_names(reply, target, offset)
    if not named:
        raise fail(f"one byte flipped in record {target.key} (byte {at}); verify did not name it: {reply.brief()}")
    return PASS, f"one byte flipped at byte {at} of the file; verify named record {target.key}: {named!r}"


SEARCH_TERM = "zephyrquartz"
BUDGET_TOKENS = 40
"""A token budget that fits a few of the twelve matching records, not all."""


async def search_accounting(ctx: Context) -> tuple[str, str]:
    store = ctx.store()
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]
    async with ctx.server(store) as server:
        try:
            await ctx.adapter.search(server, SEARCH_TERM, 1)
        except NotApplicable as exc:
            raise Verdict(SKIP, str(exc)) from exc
        except RuntimeError:
            pass  # an empty store may refuse; the real checks follow
        for word in words:
            await _write_ok(ctx, server, f"the {word} cluster runs {SEARCH_TERM} nightly {ctx.nonce}")
        for word in words[:4]:
            await _write_ok(ctx, server, f"an unrelated note about {word} {ctx.nonce}")
        written = len(words) + 4
        seen = []
        for k in (1, 3, 5, 12, 50):
            try:
                count = await ctx.adapter.search(server, SEARCH_TERM, k)
            except RuntimeError as exc:
                raise fail(f"search with k={k}: {exc}") from exc
            if count.matched is None or count.left_out is None:
                raise fail(f"search with k={k} does not say how many matched and how many it left out ({count.detail})")
            if count.returned > k:
                raise fail(f"search with k={k} returned {count.returned} results")
            if count.returned + count.left_out != count.matched:
                raise fail(f"k={k}: returned {count.returned} + left out {count.left_out} != matched {count.matched}")
            # A hybrid search may also count records its dense ranking chose, so
            # matched may exceed the records holding the term, never fall short.
            if not len(words) <= count.matched <= written:
                raise fail(
                    f"k={k}: reports {count.matched} matched, but {len(words)} of the {written} records "
                    "contain the term"
                )
            seen.append(f"k={k}: {count.returned}+{count.left_out}={count.matched}")
        budget = BUDGET_TOKENS
        count = await ctx.adapter.search(server, SEARCH_TERM, 50, max_tokens=budget)
        if count.matched is None or count.left_out is None or count.returned + count.left_out != count.matched:
            raise fail(
                f"k=50 within {budget} tokens: returned {count.returned} + left out {count.left_out} "
                f"!= matched {count.matched}"
            )
        seen.append(f"k=50 within {budget} tokens: {count.returned}+{count.left_out}={count.matched}")
    return PASS, "returned + left out = matched for " + ", ".join(seen)


def _unclear(message: str) -> bool:
    """A bare "Error executing tool X" is what a client sees when the tool crashed."""
    message = " ".join(message.split())
    return len(message) < 10 or re.fullmatch(r"(Error executing tool \S+)?[.:]?", message) is not None


async def bad_input(ctx: Context) -> tuple[str, str]:
    store = ctx.store()
    calls = ctx.adapter.bad_calls()
    if not calls:
        raise Verdict(SKIP, "the adapter knows no invalid calls for this server")
    problems: list[str] = []
    sample = ""
    async with ctx.server(store) as server:
        await _write_ok(ctx, server, f"bad input seed {ctx.nonce}")
        before = ctx.read(store)
        for call in calls:
            reply = await server.call(call.tool, call.arguments)
            if reply.ok:
                problems.append(f"{call.label}: accepted")
            elif reply.crashed:
                problems.append(f"{call.label}: {reply.error}")
                break
            elif _unclear(reply.error):
                problems.append(f"{call.label}: unclear error {reply.brief(60)!r}")
            elif not sample or ("reserved" in call.label and "reserved" not in sample):
                sample = f"{call.label}: {reply.brief(110)!r}"
            if ctx.read(store) != before:
                problems.append(f"{call.label}: the store file changed")
                break
        alive = await ctx.adapter.alive(server)
    after = ctx.read(store)
    if after != before:
        problems.append(f"store file changed from {len(before)} to {len(after)} bytes")
    if not alive.ok:
        problems.append(f"the server no longer answers reads: {alive.brief(80)}")
    if problems:
        raise fail(f"{len(problems)} problem(s) over {len(calls)} invalid calls; first: {problems[0]}")
    return PASS, f"{len(calls)} invalid calls refused with clear errors, store file unchanged ({len(after)} bytes); e.g. {sample}"


REPLY_WAIT_S = 10.0
"""How long every_reply waits for each answer; a live server answers in milliseconds."""


def _raw_call(request_id: int, tool: str, arguments: str) -> bytes:
    return (f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
            f'"params":{{"name":"{tool}","arguments":{arguments}}}}}').encode()


async def every_reply(ctx: Context) -> tuple[str, str]:
    """Requests an SDK's JSON reader refuses each get an answer, the server keeps serving, and stdin closing
    right after a write still brings that write's answer."""
    try:
        ctx.adapter.raw_write('"probe"')
    except NotApplicable as exc:
        raise Verdict(SKIP, str(exc)) from None
    store = ctx.store()
    env = dict(ctx.base_env)
    env.update(ctx.adapter.env(store))
    nonce = ctx.nonce
    write = ctx.adapter.raw_write
    surrogate = f'"every reply {nonce} \\ud800"'  # JSON text holding a lone surrogate escape
    cases: list[tuple[str, bytes, Any]] = [
        ("a line that is not JSON", b"this is not json", None),
        ("a lone surrogate in the text", _raw_call(11, *write(surrogate)), 11),
        ("200 levels of nesting", _raw_call(12, *write('"every reply nested"', "[" * 200 + "]" * 200)), 12),
        ("a 5,000-digit integer", _raw_call(13, *write('"every reply big"', "9" * 5000)), 13),
        ("an unknown prompt",
         b'{"jsonrpc":"2.0","id":14,"method":"prompts/get","params":{"name":"x-harness-no-such-prompt"}}', 14),
    ]
    seen: list[str] = []
    last_text = f"every reply {nonce}: written just before stdin closed"
    async with spawn_raw(ctx.command, env, ctx.root / "proc") as server:
        if await server.initialize() is None:
            raise fail(f"no reply to initialize within the start timeout (pid {server.pid})")
        for label, line, request_id in cases:
            await server.send(line)
            reply = await server.reply(request_id, REPLY_WAIT_S)
            if reply is None:
                raise fail(f"no reply within {REPLY_WAIT_S:g} s to {label}: a client would wait until its own timeout")
            code = (reply.get("error") or {}).get("code")
            if request_id is None and code != -32700:
                raise fail(f"{label}: answered {json.dumps(reply)[:120]}, expected the parse error -32700")
            if label == "an unknown prompt" and code not in (-32602, -32601):
                raise fail(f"{label}: answered {json.dumps(reply)[:120]}, expected -32602 (or -32601 without prompts)")
            seen.append(f"{label}: {'error ' + str(code) if code is not None else 'result'}")
        await server.send(_raw_call(20, *ctx.adapter.raw_write(json.dumps(last_text))))
        await server.close_input()
        reply = await server.reply(20, REPLY_WAIT_S)
        if reply is None:
            raise fail("a write sent just before stdin closed got no reply (requests read were dropped at end of input)")
        if "error" in reply or (reply.get("result") or {}).get("isError"):
            raise fail(f"the write sent just before stdin closed failed: {json.dumps(reply)[:160]}")
    texts = ctx.adapter.file_texts(ctx.read(store)) or []
    if last_text not in texts:
        raise fail("the write answered after stdin closed is not in the store file")
    return PASS, (f"{len(cases)} requests a JSON reader refuses each answered ({'; '.join(seen)}); "
                  "then a write sent as stdin closed was answered and stored")


Probe = Callable[[Context], Awaitable[tuple[str, str]]]

PROBES: dict[str, Probe] = {
    "ack_readback": ack_readback,
    "restart": restart,
    "foreign_field": foreign_field,
    "foreign_record": foreign_record,
    "concurrent": concurrent,
    "large_record": large_record,
    "idempotent_retry": idempotent_retry,
    "torn_tail": torn_tail,
    "tamper_detect": tamper_detect,
    "search_accounting": search_accounting,
    "bad_input": bad_input,
    "every_reply": every_reply,
}
