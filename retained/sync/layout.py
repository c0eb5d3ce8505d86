"""Where sync puts things: object keys under the remote prefix, and files beside the store.

Remote, under ``PREFIX``::

    stores/<store id>/head.json                         the published head (moved by compare-and-swap)
    stores/<store id>/seg/<first seq>-<last seq>.jsonl  a sealed segment: whole log lines, create-only

Seqs in a segment's name are the first and last chained records it holds,
zero-padded to 12 digits so that keys sort in log order. Local, in the
store directory: ``sync/`` (this store's publish state, the last findings,
the lock) and ``mirrors/<store id>/`` (another store's verified log, its
derived index, and what was pulled).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

FORMAT = 1
# A segment holds whole lines up to about this many bytes (one longer line makes a segment of its own).
SEGMENT_BYTES = 4 * 1024 * 1024
# Mirrors the brief names at most (one small file read each).
PULLED_SHOWN_MAX = 20
# Mirrors whose records the brief reads at most, the most recently pulled first (each costs about what the
# store's own part of the brief costs: the session-start budget, `python -m harness bench brief --pulled N`).
PULLED_READ_MAX = 4
# Keys listed per store and sync at most (a store's segments; past it the listing is reported incomplete).
LIST_KEYS_MAX = 1_000_000

SYNC_DIR = "sync"
MIRRORS_DIR = "mirrors"
STATE_NAME = "state.json"
FINDINGS_NAME = "findings.json"
MIRROR_STATE_NAME = "mirror.json"
LOCK_NAME = "sync.lock"

_SEG = re.compile(r"seg/(\d{12})-(\d{12})\.jsonl\Z")
_STORE_ID = re.compile(r"[0-9a-f]{32}\Z")


def valid_store_id(sid: object) -> bool:
    """Whether ``sid`` is a store id (32 hex digits, as ``store.id`` holds; it becomes a directory name)."""
    return isinstance(sid, str) and _STORE_ID.match(sid) is not None


def store_prefix(prefix: str, sid: str) -> str:
    return f"{prefix}stores/{sid}/"


def head_key(prefix: str, sid: str) -> str:
    return store_prefix(prefix, sid) + "head.json"


def segment_key(prefix: str, sid: str, first: int, last: int) -> str:
    return store_prefix(prefix, sid) + f"seg/{first:012d}-{last:012d}.jsonl"


def segments_prefix(prefix: str, sid: str) -> str:
    return store_prefix(prefix, sid) + "seg/"


def parse_segment_key(key: str) -> tuple[int, int] | None:
    """``(first, last)`` of a segment's key, None for any other key."""
    m = _SEG.search(key)
    if m is None:
        return None
    first, last = int(m.group(1)), int(m.group(2))
    return (first, last) if 1 <= first <= last else None


def sync_dir(directory: Path) -> Path:
    return directory / SYNC_DIR


def mirrors_dir(directory: Path) -> Path:
    return directory / MIRRORS_DIR


def mirror_dir(directory: Path, sid: str) -> Path:
    return directory / MIRRORS_DIR / sid


def pulled(directory: Path, limit: int = PULLED_SHOWN_MAX) -> list[dict[str, object]]:
    """``{"store_id", "machine", "seq"}`` of each store pulled beside ``directory`` (at most ``limit``), by id.

    Standard library only: the session-start brief names them. A mirror
    whose ``mirror.json`` cannot be read is left out (``retained sync``
    reports it).
    """
    try:
        names = sorted(n for n in os.listdir(directory / MIRRORS_DIR) if valid_store_id(n))
    except OSError:
        return []
    out: list[dict[str, object]] = []
    for name in names[:limit]:
        try:
            with open(directory / MIRRORS_DIR / name / MIRROR_STATE_NAME, "rb") as f:
                meta = json.loads(f.read(1 << 20))
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and type(meta.get("seq")) is int:
            out.append({"store_id": name, "machine": meta.get("machine"), "seq": meta["seq"]})
    return out
