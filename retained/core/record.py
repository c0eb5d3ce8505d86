"""The record format: validation, canonical bytes, content digest, chain hash.

Pure: no I/O. A log line is ``canonical(record) + b"\\n"``. Canonical means
``orjson.dumps(obj, option=OPT_SORT_KEYS)``; a line is valid only when
re-encoding its parsed object gives the same bytes, so a hand edit shows.

Chain hash, in two steps so that a record can be redacted later without
breaking the chain::

    cd   = blake3(canonical(record minus {seq, prev, hash}))
    hash = blake3(canonical({"cd": cd, "prev": prev, "seq": seq}))

A redacted line keeps ``v``, ``seq``, ``prev``, ``hash``, stores ``cd`` and
gains ``"redacted": true``; its ``cd`` is taken as stored.
"""

from __future__ import annotations

import math
import re
from collections import namedtuple
from typing import Any, TypeGuard

import blake3
import orjson

from retained import limits
from retained.core import json_input, lines
from retained.errors import RECORD_LIMIT_SETTING, InvalidRecord, RecordTooLarge, ReservedField

FORMAT_VERSION = 1
ZERO_HASH = "0" * 64

# Set by the store on every record; no caller can set or shadow them.
RESERVED_FIELDS = frozenset({"v", "seq", "ts", "prev", "hash", "client", "cd", "redacted"})
# Set by the caller through named API arguments, never through ``fields``.
API_FIELDS = frozenset({"kind", "text", "body", "scope", "source", "supersedes", "client_op_id"})
# Kinds with a meaning to the store; written only through their own calls.
STORE_KINDS = frozenset(limits.STORE_KINDS)
CHAIN_FIELDS, REDACTED_FIELDS = lines.CHAIN_FIELDS, lines.REDACTED_FIELDS

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX64_MATCH = _HEX64.fullmatch


_LINE = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE


def canonical(obj: Any) -> bytes:
    """Encode ``obj`` as canonical JSON: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def digest(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def content_digest(record: dict[str, Any]) -> str:
    """``cd``: the digest of the record without its chain fields."""
    return digest(canonical({k: v for k, v in record.items() if k not in CHAIN_FIELDS}))


def chain_hash(cd: str, prev: str, seq: int) -> str:
    """``hash``: links a content digest to its place in the chain."""
    return digest(canonical({"cd": cd, "prev": prev, "seq": seq}))


def is_hash(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def _link_bytes(cd: str, prev: str, seq: int) -> bytes:
    """``canonical({"cd": cd, "prev": prev, "seq": seq})`` for a ``cd`` and ``prev`` already known to be lowercase hex.

    Hex needs no JSON escaping, so the bytes can be written out directly: the
    same bytes ``canonical`` gives (pinned by test_chain_parallel), without
    building a dict for the encoder.
    """
    return f'{{"cd":"{cd}","prev":"{prev}","seq":{seq}}}'.encode()


# -- validation -------------------------------------------------------------


def _fail(path: str, problem: str, hint: str) -> InvalidRecord:
    return InvalidRecord(f"field {path}: {problem}; {hint}; nothing was written", path=path)


def _check_value(value: Any, path: str, depth: int) -> None:
    """Walk a value and refuse anything that cannot be stored byte-exact.

    Strings are left to orjson (a lone surrogate makes it raise, and
    ``_locate_bad_string`` then names the field): encoding every string twice
    would double the cost of a large record.
    """
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return
    if kind is int:
        if not limits.INT_MIN <= value <= limits.INT_MAX:
            raise _fail(path, "integer outside 64 bits", f"the range is {limits.INT_MIN}..{limits.INT_MAX}; store it as a string")
        return
    if kind is float:
        if not math.isfinite(value):
            # A parsed 1e400 arrives as inf: for the caller it is a number out of range.
            problem = f"{value!r} is not a JSON number" if value != value else f"number out of range ({value!r} is not a JSON number)"
            raise _fail(path, problem, "NaN and Infinity cannot round-trip; store a string or null")
        return
    if kind is dict or kind is list:
        if depth >= limits.DEPTH_MAX:
            raise _fail(path, f"nested deeper than {limits.DEPTH_MAX} levels", "flatten the value")
        if kind is dict:
            for key, item in value.items():
                if type(key) is not str:
                    raise _fail(path, f"key {key!r} is a {type(key).__name__}, not a string", "JSON object keys must be strings")
                _check_value(item, f"{path}.{key}", depth + 1)
        else:
            for i, item in enumerate(value):
                _check_value(item, f"{path}[{i}]", depth + 1)
        return
    raise _fail(path, f"a {kind.__name__} is not a JSON value", "use str, int, float, bool, None, list or dict")


def check_content(content: dict[str, Any]) -> None:
    """Refuse caller content the store cannot keep byte-exact.

    ``content`` holds the caller's part of a record (API fields and extra
    fields, merged). Raises InvalidRecord (nothing written).
    """
    for key, value in content.items():
        if type(key) is not str:
            raise _fail(repr(key), "field names must be strings", "rename the field")
        _check_value(value, key, 1)


def encode_checked(obj: dict[str, Any]) -> bytes:
    """Canonical bytes of a record that passed ``check_content``.

    orjson refuses what the walk left to it (lone surrogates); the error is
    turned into one that names the field.
    """
    try:
        return canonical(obj)
    except orjson.JSONEncodeError as exc:
        where, char = json_input.find(obj, json_input.lone_surrogate) or ("record", "a code point")
        raise InvalidRecord(
            f"field {where}: holds a lone surrogate ({char}), half of a UTF-16 pair, which is not text and "
            "cannot be stored as UTF-8; send well-formed text; nothing was written",
            path=where,
        ) from exc


class Content(namedtuple("Content", "fields")):
    """A caller's record content (``fields``: a dict), validated and ready to be chained."""

    __slots__ = ()


def make_content(
    *,
    text: str | None,
    kind: str = "note",
    body: Any = None,
    scope: str | None = None,
    source: str | None = None,
    supersedes: list[int] | None = None,
    client_op_id: str | None = None,
    fields: dict[str, Any] | None = None,
    store_kind: bool = False,
) -> Content:
    """Merge and validate what a caller may set.

    Raises:
        ReservedField: ``fields`` names a store-owned or API field.
        InvalidRecord: any value that cannot be stored byte-exact.
    """
    if not isinstance(kind, str) or not kind:
        raise _fail("kind", "must be a non-empty string", 'omit it for "note"')
    if kind in STORE_KINDS and not store_kind:
        raise InvalidRecord(
            f'field kind: "{kind}" is written by the store itself; use the {kind} call instead; nothing was written',
            path="kind",
        )
    if text is not None and not isinstance(text, str):
        raise _fail("text", f"must be a string, got {type(text).__name__}", "pass the note as text")
    # The one empty-text rule, for every surface (library, CLI, MCP, import).
    # A record replayed from our own export (store_kind) keeps what its source
    # accepted, so an older export stays importable.
    if text is not None and not store_kind and not text.strip():
        raise _fail("text", "is empty or only whitespace", "write the memory itself in plain words")
    for name, value in (("scope", scope), ("source", source)):
        if value is not None and not isinstance(value, str):
            raise _fail(name, f"must be a string, got {type(value).__name__}", f"pass {name} as text")
    if client_op_id is not None:
        if not isinstance(client_op_id, str) or not client_op_id:
            raise _fail("client_op_id", "must be a non-empty string", "use a UUID or any unique token")
        if len(client_op_id) > limits.CLIENT_OP_ID_CHARS_MAX:
            raise _fail("client_op_id", f"longer than {limits.CLIENT_OP_ID_CHARS_MAX} characters", "use a shorter token")
    if supersedes is not None:
        if not isinstance(supersedes, list) or not supersedes:
            raise _fail("supersedes", "must be a non-empty list of seq numbers", "name the records this one corrects")
        for s in supersedes:
            if type(s) is not int or not 1 <= s <= limits.SEQ_MAX:
                raise _fail("supersedes", f"{s!r} is not a seq (an integer from 1 to {limits.SEQ_MAX})", "name records by their seq")
    content: dict[str, Any] = {"kind": kind}
    if fields is not None:
        if not isinstance(fields, dict):
            raise _fail("fields", f"must be an object, got {type(fields).__name__}", "pass extra fields as a JSON object")
        for key in fields:
            if key in RESERVED_FIELDS:
                raise ReservedField(
                    f"field {key!r} is set by the store and cannot be written by a caller; rename it; nothing was written",
                    path=key,
                )
            if key in API_FIELDS:
                raise ReservedField(
                    f"field {key!r} is an argument of its own; pass it as {key}= instead of inside fields; nothing was written",
                    path=key,
                )
        content.update(fields)
    given: tuple[tuple[str, Any], ...] = (
        ("text", text),
        ("body", body),
        ("scope", scope),
        ("source", source),
        ("supersedes", sorted(set(supersedes)) if supersedes else None),
        ("client_op_id", client_op_id),
    )
    for name, value in given:
        if value is not None:
            content[name] = value
    check_content(content)
    return Content(content)


class Sealed(namedtuple("Sealed", "record line cd hash")):
    """A record with its chain fields (``record``), the exact ``line`` that stores it, its ``cd`` and ``hash``."""

    __slots__ = ()


def seal(
    content: Content,
    *,
    seq: int,
    prev: str,
    ts: str,
    client: dict[str, Any],
    record_bytes_max: int = limits.RECORD_BYTES_MAX,
) -> Sealed:
    """Stamp the store's fields, hash, and encode the line.

    Raises:
        RecordTooLarge: the line is over ``record_bytes_max`` (nothing written).
        InvalidRecord: a string is not valid UTF-8.
    """
    if type(seq) is not int or seq < 1 or not is_hash(prev):
        raise ValueError(f"seal: seq {seq!r} and prev {prev!r} are not a chain position (seq from 1, prev 64 hex digits)")
    body = dict(content.fields)
    body["v"] = FORMAT_VERSION
    body["ts"] = ts
    body["client"] = client
    cd = digest(encode_checked(body))
    h = digest(_link_bytes(cd, prev, seq))  # chain_hash's bytes: cd is a fresh digest and prev was checked, both hex
    body["seq"] = seq
    body["prev"] = prev
    body["hash"] = h
    line = orjson.dumps(body, option=_LINE)  # canonical(body) + b"\n", without copying the line to add the newline
    if len(line) > record_bytes_max:
        raise RecordTooLarge(
            f"record is {len(line)} bytes encoded, over the limit of {record_bytes_max} bytes; "
            f"split it, or raise the limit ({RECORD_LIMIT_SETTING}); nothing was written",
            observed=len(line),
            expected=record_bytes_max,
        )
    return Sealed(body, line, cd, h)


def redacted_form(record: dict[str, Any]) -> dict[str, Any]:
    """The line that replaces a record on erasure: chain intact, content gone."""
    return {
        "cd": content_digest(record),
        "hash": record["hash"],
        "prev": record["prev"],
        "redacted": True,
        "seq": record["seq"],
        "v": record.get("v", FORMAT_VERSION),
    }


# -- classification of stored lines ----------------------------------------

# How every ``ts`` is written, and what a line is (``core.lines`` defines them, for the brief's reader too).
utc_now = lines.utc_now
RECORD, REDACTED, FOREIGN, DAMAGED, TORN = lines.RECORD, lines.REDACTED, lines.FOREIGN, lines.DAMAGED, lines.TORN


def classify(content: bytes, hasher: Any = None) -> tuple[str, Any, int | None, str | None, str | None]:
    """Classify one line's bytes (without its newline).

    Returns ``(status, parsed, seq, hash, problem)``. ``seq`` and ``hash`` are
    the values the line *claims* when it has chain fields, even if damaged, so
    that a verifier can localise damage to one record.

    Checks in order: JSON, chain fields (``seq`` an integer from 1, ``prev``
    and ``hash`` 64 lowercase hex digits), the redacted form, the hash
    recomputes, the bytes are canonical; the first failure is the problem.
    ``hash`` is matched against the hex pattern only when it does not
    recompute: a value equal to a fresh hex digest is one.

    ``hasher``: a ``blake3.blake3()`` the caller lends for both digests (a
    loop over many lines makes one, not two per line); it is reset before
    each use, so whatever state it was left in does not matter. Never share
    one between threads.
    """
    try:
        obj = orjson.loads(content)
    except orjson.JSONDecodeError:
        return DAMAGED, None, None, None, "not JSON"
    if type(obj) is not dict or not ("seq" in obj or "prev" in obj or "hash" in obj):
        return FOREIGN, obj, None, None, None
    seq, prev, h = obj.get("seq"), obj.get("prev"), obj.get("hash")
    if type(seq) is not int or seq < 1 or type(prev) is not str or _HEX64_MATCH(prev) is None or type(h) is not str:
        return _malformed(obj, seq, h)
    if hasher is None:
        hasher = blake3.blake3()
    if obj.get("redacted") is True:
        if not is_hash(h):
            return _malformed(obj, seq, h)
        if obj.keys() != REDACTED_FIELDS or not is_hash(obj.get("cd")):
            return DAMAGED, obj, seq, h, "redacted line has fields other than v, seq, prev, hash, cd, redacted"
        cd = obj["cd"]
        status = REDACTED
    else:
        # content_digest, inline: the three keys are known to be there.
        body = obj.copy()
        del body["seq"], body["prev"], body["hash"]
        hasher.reset()
        hasher.update(orjson.dumps(body, option=orjson.OPT_SORT_KEYS))
        cd = hasher.digest().hex()
        status = RECORD
    # cd and prev are lowercase hex here (a fresh digest, or checked above).
    hasher.reset()
    hasher.update(_link_bytes(cd, prev, seq))
    if hasher.digest().hex() != h:
        if not is_hash(h):
            return _malformed(obj, seq, h)
        return DAMAGED, obj, seq, h, "hash does not recompute"
    if orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) != content:
        return DAMAGED, obj, seq, h, "bytes are not canonical"
    return status, obj, seq, h, None


def _malformed(obj: dict[str, Any], seq: Any, h: Any) -> tuple[str, Any, int | None, str | None, str | None]:
    claimed_seq = seq if type(seq) is int else None
    claimed_hash = h if is_hash(h) else None
    return DAMAGED, obj, claimed_seq, claimed_hash, "chain fields missing or malformed"
