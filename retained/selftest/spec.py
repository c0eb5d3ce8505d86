"""The on-disk format read from the specification, independently of the library.

Lines are split, parsed and their chain hashes recomputed here (blake3 over
canonical JSON), so a check compares the library's answers with the bytes on
disk rather than with the library's own reading of them; the rest edits those
bytes as a crash, another program or an attacker would.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import blake3
import orjson

from retained.selftest.context import CheckFailed, expect

ZERO_HASH = "0" * 64


def _canonical(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def _b3(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def spec_hash(rec: dict[str, Any]) -> str:
    """The chain hash of a parsed record, computed here from the specification.

    ``cd = blake3(canonical(record minus seq, prev, hash))``, then
    ``hash = blake3(canonical({"cd", "prev", "seq"}))``; a redacted line
    supplies its stored ``cd``.
    """
    if rec.get("redacted") is True:
        cd = rec["cd"]
    else:
        cd = _b3(_canonical({k: v for k, v in rec.items() if k not in ("seq", "prev", "hash")}))
    return _b3(_canonical({"cd": cd, "prev": rec["prev"], "seq": rec["seq"]}))


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """A chained record from one line's bytes (with its newline), checked by the spec; else None."""
    if not raw.endswith(b"\n"):
        return None
    try:
        rec = orjson.loads(raw[:-1])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(rec, dict) or not {"seq", "prev", "hash"} <= rec.keys():
        return None
    if _canonical(rec) != raw[:-1] or spec_hash(rec) != rec["hash"]:
        return None
    return rec


def file_lines(path: Path) -> list[tuple[int, bytes]]:
    """``(offset, bytes)`` of every line of a file, read here, not through the library."""
    out, pos = [], 0
    for line in io.BytesIO(path.read_bytes() if path.exists() else b""):  # split at b"\n" only
        out.append((pos, line))
        pos += len(line)
    return out


def chained(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(offset, record)`` of every line that is a valid chained record by the spec."""
    return [(offset, rec) for offset, raw in file_lines(path) if (rec := parse_line(raw)) is not None]


def read_at(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def flip_byte(path: Path, offset: int) -> tuple[int, int]:
    """Change the byte at ``offset`` to another letter; returns (old, new)."""
    old = read_at(path, offset, 1)[0]
    new = ord("q") if old != ord("q") else ord("z")
    put_byte(path, offset, new)
    return old, new


def put_byte(path: Path, offset: int, value: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(bytes([value]))


def append_raw(path: Path, data: bytes) -> int:
    """Append bytes to the log as another program would; returns their offset."""
    with open(path, "ab") as f:
        offset = f.tell()
        f.write(data)
    return offset


def check_proof(path: Path, proof: dict[str, Any]) -> dict[str, Any]:
    """The record a proof points at, after checking the proof against the file's bytes."""
    raw = read_at(path, proof["offset"], proof["length"])
    expect(len(raw) == proof["length"], f"proof says {proof['length']} bytes at byte {proof['offset']}, the file has {len(raw)} there")
    rec = parse_line(raw)
    if rec is None:
        raise CheckFailed(f"the {proof['length']} bytes at byte {proof['offset']} are not one valid chained line")
    for key in ("seq", "hash", "prev"):
        expect(rec[key] == proof[key], f"proof {key} {str(proof[key])[:16]} differs from the file's {str(rec[key])[:16]} at byte {proof['offset']}")
    return rec


def _log_state(path: Path) -> tuple[int, str]:
    data = path.read_bytes() if path.exists() else b""
    return len(data), _b3(data)
