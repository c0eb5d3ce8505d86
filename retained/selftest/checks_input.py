"""Checks of what comes in: bad and large input, retries, erasure, secrets, the lock, file modes."""

from __future__ import annotations

import os
import random
import stat
import time
from collections.abc import Callable
from typing import Any

from retained import limits
from retained.errors import RetainedError
from retained.selftest.context import CheckFailed, Context, NotAvailable, expect, need
from retained.selftest.spec import _b3, _log_state, append_raw, chained, check_proof


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def check_bad_input(ctx: Context) -> str:
    """Bad input is refused with a stable code and a clear message, and nothing is written."""
    s = ctx.store()
    s.write("the only good record")
    # The size limit is configurable; a small one keeps the check fast (the
    # default, limits.RECORD_BYTES_MAX, is enforced by the same code).
    small_limit = 64 * 1024
    small = ctx.store(record_bytes_max=small_limit)
    cases: list[tuple[str, str, Callable[[], Any]]] = [
        ("reserved field seq", "reserved_field", lambda: s.write("x", fields={"seq": 7})),
        ("reserved field client", "reserved_field", lambda: s.write("x", fields={"client": {"name": "forged"}})),
        ("API field inside fields", "reserved_field", lambda: s.write("x", fields={"text": "shadow"})),
        ("NaN", "invalid_argument", lambda: s.write("x", body={"score": float("nan")})),
        ("Infinity", "invalid_argument", lambda: s.write("x", fields={"score": float("inf")})),
        ("integer over 64 bits", "invalid_argument", lambda: s.write("x", fields={"n": 2**64})),
        ("integer under -2**63", "invalid_argument", lambda: s.write("x", fields={"n": -(2**63) - 1})),
        ("lone surrogate", "invalid_argument", lambda: s.write("bad \ud800 text")),
        ("lone surrogate in a key", "invalid_argument", lambda: s.write("x", fields={"k\udfff": 1})),
        (f"nested {limits.DEPTH_MAX + 36} deep", "invalid_argument", lambda: s.write("x", body=_deep(limits.DEPTH_MAX + 36))),
        (f"record over a limit of {small_limit} bytes", "too_large", lambda: small.write("x" * small_limit)),
        ("store-owned kind", "invalid_argument", lambda: s.write("x", kind="retract")),
        ("text not a string", "invalid_argument", lambda: s.write(12345)),
        ("supersedes a seq that does not exist", "not_found", lambda: s.write("x", supersedes=[99])),
    ]
    before = _log_state(ctx.log_path)
    ctx.fault("before_cases")
    codes: dict[str, int] = {}
    for label, code, call in cases:
        try:
            call()
        except RetainedError as exc:
            expect(exc.code == code, f"{label}: refused with code {exc.code}, expected {code}")
            msg = exc.message
            expect(bool(msg) and msg[0].islower() and not msg.endswith("."), f"{label}: message is not in the house style: {msg[:80]!r}")
            expect(len(msg) < 1000, f"{label}: message of {len(msg)} characters echoes the input")
            if code == "too_large":
                expect(str(small_limit) in msg, f"{label}: the message does not state the limit: {msg[:120]!r}")
            codes[code] = codes.get(code, 0) + 1
        else:
            raise CheckFailed(f"{label}: accepted, expected a {code} error")
        now = _log_state(ctx.log_path)
        expect(now == before, f"{label}: the log changed ({before[0]} → {now[0]} bytes) although the write was refused")
    expect(not list(ctx.directory.glob("log.jsonl.torn-*")), "a refused write left a quarantine file")
    report = s.verify()
    expect(report["ok"] and report["records"] == 1, f"after the refusals verify: ok={report['ok']}, {report['records']} records")
    summary = ", ".join(f"{c}×{n}" for c, n in sorted(codes.items()))
    return f"{len(cases)} kinds refused ({summary}); log unchanged at {before[0]} bytes, 1 record, verify ok"


def _mebibyte_text(rng: random.Random) -> str:
    """1 MiB of UTF-8 with every kind of character JSON must escape or encode."""
    alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFXYZ 0123456789 .,;:-_\n\t\"\\/ é ß 日本 ✓ 🧪 \u2028 \x01"
    target = 1024 * 1024
    # Random 1 KiB pieces, assembled in random order: varied enough, and fast.
    pool = ["".join(rng.choices(alphabet, k=1024)) for _ in range(64)]
    parts = []
    size = 0
    while size < target:
        chunk = pool[rng.randrange(len(pool))]
        parts.append(chunk)
        size += len(chunk.encode("utf-8"))
    text = "".join(parts)
    data = text.encode("utf-8")[:target]
    return data.decode("utf-8", "ignore")


def check_large_record(ctx: Context) -> str:
    """A 1 MiB record is stored and read back byte-exact."""
    s = ctx.store()
    text = _mebibyte_text(random.Random(1))
    size = len(text.encode("utf-8"))
    expect(size > 1024 * 1024 - 4, f"the test text is {size} bytes, not 1 MiB")
    s.write("small before")
    proof = s.write(text, source="selftest", fields={"digest": _b3(text.encode("utf-8"))})
    s.write("small after")
    ctx.fault("after_write")
    rec = check_proof(ctx.log_path, proof)
    expect(rec["text"] == text, "the text in the file differs from the text written")
    got = ctx.store().get([proof["seq"]])[0]["record"]
    expect(got["text"] == text, "the text read back differs from the text written")
    expect(_b3(got["text"].encode("utf-8")) == got["digest"], "the digest of the text read back differs")
    report = s.verify()
    expect(report["ok"] and report["records"] == 3, f"verify: ok={report['ok']}, {report['records']} records")
    return f"{size}-byte text ({proof['length']}-byte line at byte {proof['offset']}) read back equal, blake3 {got['digest'][:12]}..., verify ok"


def check_idempotent_retry(ctx: Context) -> str:
    """The same client_op_id twice gives one record; the retry says duplicate."""
    s = ctx.store()
    first = s.write("exactly once", client_op_id="op-selftest-1")
    size = ctx.log_path.stat().st_size
    ctx.fault("after_first")
    again = s.write("exactly once", client_op_id="op-selftest-1")
    other = ctx.store().write("exactly once", client_op_id="op-selftest-1")  # a new handle: no cache
    expect(again.get("duplicate") is True and other.get("duplicate") is True,
           f"a retry came back with duplicate={again.get('duplicate')}, {other.get('duplicate')}")
    expect(again["seq"] == other["seq"] == first["seq"] and again["hash"] == first["hash"],
           f"the retry names seq {again['seq']}/{other['seq']}, the first write was seq {first['seq']}")
    expect(ctx.log_path.stat().st_size == size, "a retry appended bytes")
    new = s.write("another operation", client_op_id="op-selftest-2")
    expect(new["duplicate"] is False and new["seq"] == first["seq"] + 1, f"a new client_op_id got seq {new['seq']}, duplicate={new['duplicate']}")
    ops = [rec.get("client_op_id") for _, rec in chained(ctx.log_path)]
    expect(ops.count("op-selftest-1") == 1, f"client_op_id op-selftest-1 is in the log {ops.count('op-selftest-1')} times")
    return f"2 retries (same handle, new handle) → seq {first['seq']} duplicate, log stays {size} bytes; a new id → seq {new['seq']}"


def check_redaction(ctx: Context) -> str:
    """Erasure removes a record's content for good, and the chain still verifies."""
    s = ctx.store()
    redact = need(s, "redact", "erasure of a record's content")
    secret_word = "zanzibarquokka"
    proofs = [s.write(f"keep {i}") for i in range(2)]
    target = s.write(f"erase me: {secret_word}", scope="private")
    proofs.append(s.write("keep after"))
    if getattr(s, "search", None) is not None:
        s.search(secret_word, k=5)  # the word is in the index before the erasure
    result = redact(target["seq"], "selftest erasure")
    ctx.fault("after_redact")
    data = ctx.log_path.read_bytes()
    expect(secret_word.encode() not in data, "the erased word is still in the log")
    leftovers = [p.name for p in ctx.directory.iterdir() if p.is_file() and secret_word.encode() in p.read_bytes()]
    expect(not leftovers, f"the erased word is still in {leftovers}")
    lines = {rec["seq"]: rec for _, rec in chained(ctx.log_path)}
    red = lines.get(target["seq"])
    expect(red is not None and red.get("redacted") is True and red["hash"] == target["hash"],
           f"seq {target['seq']} is not a redacted line keeping its hash")
    for p in proofs:
        expect(lines.get(p["seq"], {}).get("hash") == p["hash"], f"seq {p['seq']} changed its hash after the erasure")
    report = s.verify()
    expect(report["ok"], f"verify after the erasure: {len(report['findings'])} findings")
    expect(target["seq"] in (report.get("redacted") or []), "verify does not list the redacted seq")
    if getattr(s, "search", None) is not None:
        hits = s.search(secret_word, k=5)
        expect(hits["total_matches"] == 0, f"search still matches the erased word {hits['total_matches']} times")
    record_seq = (result.get("redaction_record") or {}).get("seq")
    return f"seq {target['seq']} erased (redaction record seq {record_seq}); word gone from every file, {len(lines)} records, chain verifies"


def check_secret_guard(ctx: Context) -> str:
    """A credential is refused before anything is written; a private span never reaches the log."""
    s = ctx.store()
    s.write("the only record before the guard is tried")
    before = _log_state(ctx.log_path)
    # Fake credentials in real formats, assembled so no scanner takes this file for a leak.
    aws = "AKIA" + "ABCDEFGHIJ234567"
    github = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"[::-1]
    cases = [
        ("text", lambda: s.write(f"deploy with key {aws} tomorrow")),
        ("a nested field", lambda: s.write("ci settings", fields={"ci": {"steps": ["checkout", f"token {github}"]}})),
        ("body", lambda: s.write("rotation", body=f"old key was {aws}")),
    ]
    refused = []
    for where, call in cases:
        try:
            proof = call()
        except RetainedError as exc:
            expect(exc.code == "secret_detected", f"a key in {where}: refused with code {exc.code}, expected secret_detected")
            expect(aws not in exc.message and github not in exc.message, f"a key in {where}: the error message repeats the secret")
            refused.append(getattr(exc, "kind", None) or exc.to_dict().get("kind") or "?")
        else:
            stored = ctx.log_path.read_bytes()
            if aws.encode() in stored or github.encode() in stored:
                if not refused:
                    raise NotAvailable(f"Store.write does not apply the write guard (a key in {where} was stored as seq {proof['seq']})")
                raise CheckFailed(f"a key in {where} was stored as seq {proof['seq']}")
            raise CheckFailed(f"a key in {where} was accepted (seq {proof['seq']}), though not stored as sent")
        now = _log_state(ctx.log_path)
        expect(now == before, f"a key in {where}: the log changed ({before[0]} → {now[0]} bytes) although the write was refused")
    private = s.write("the release is friday <private>door code 4711</private>, ask ops")
    ctx.fault("after_write")
    rec = check_proof(ctx.log_path, private)
    # The span's words, not its number alone: "4711" turns up by chance in a hash or a timestamp about once in 100 runs.
    expect(b"door code 4711" not in ctx.log_path.read_bytes(), "the text of a <private> span reached the log")
    expect("<private>" not in rec.get("text", ""), f"the stored text still has the private tags: {rec.get('text')!r}")
    removed = private.get("private_spans_removed")
    expect(removed == 1, f"the proof says private_spans_removed={removed}, expected 1")
    return (
        f"{len(refused)} writes with fake keys refused as secret_detected ({', '.join(map(str, refused))}), "
        f"no secret in the messages, log unchanged at {before[0]} bytes; 1 <private> span removed from seq {private['seq']} (the proof says so)"
    )


def check_lock_busy(ctx: Context) -> str:
    """A writer that cannot get the lock in time gets store_busy and writes nothing; a retry then lands once."""
    from retained.core.lock import StoreLock

    wait_s = 0.2
    s = ctx.store(lock_wait_s=wait_s)
    s.write("before the lock is held")
    before = _log_state(ctx.log_path)
    started = time.monotonic()
    with StoreLock(ctx.directory / "log.lock", 1.0):  # another holder: a separate descriptor excludes like a process
        try:
            s.write("must wait", client_op_id="op-busy")
        except RetainedError as exc:
            waited = time.monotonic() - started
            expect(exc.code == "store_busy", f"a write against a held lock failed with {exc.code}, expected store_busy")
        else:
            raise CheckFailed("a write went through while another holder had the lock")
        ctx.fault("while_locked")
        expect(_log_state(ctx.log_path) == before, "the refused write changed the log")
    expect(waited >= wait_s * 0.9, f"store_busy came after {waited:.2f} s, before the {wait_s} s wait was over")
    retry = s.write("must wait", client_op_id="op-busy")
    again = s.write("must wait", client_op_id="op-busy")
    expect(retry["seq"] == 2 and again.get("duplicate") is True and again["seq"] == 2,
           f"the retry landed as seq {retry['seq']}, its repeat as seq {again['seq']} duplicate={again.get('duplicate')}")
    return f"store_busy after {waited:.2f} s (lock_wait_s {wait_s}), log unchanged at {before[0]} bytes; released → retry seq {retry['seq']}, repeat duplicate"


def check_file_modes(ctx: Context) -> str:
    """The store directory is 0700 and its files 0600."""
    if os.name == "nt":
        return "not applicable on Windows (NTFS ACLs); nothing to check"
    s = ctx.store()
    s.write("mode check")
    append_raw(ctx.log_path, b'{"torn":')
    s.write("after a torn tail")
    if getattr(s, "search", None) is not None:
        s.search("mode", k=1)
    ctx.fault("after_write")
    modes = {ctx.directory.name + "/": stat.S_IMODE(ctx.directory.stat().st_mode)}
    modes |= {p.name: stat.S_IMODE(p.stat().st_mode) for p in sorted(ctx.directory.iterdir())}
    bad = {name: oct(m) for name, m in modes.items() if m & 0o077}
    expect(not bad, f"readable or writable by others: {bad}")
    expect(modes[ctx.directory.name + "/"] == 0o700, f"the store directory is {oct(modes[ctx.directory.name + '/'])}")
    return f"{len(modes)} paths, none open to group or others: " + ", ".join(f"{n} {oct(m)[2:]}" for n, m in modes.items())
