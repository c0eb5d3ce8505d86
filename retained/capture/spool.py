"""The spool: events that could not be written now, kept beside the store for a retry (docs/capture.md#the-spool).

``capture/spool/<event_id>.json``: the host's event as received and the
options it came with, whole or absent (``files.replace_with``); the retry
removes it once its turns are in the log.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from retained.capture.ledger import capture_dir, ensure_dir
from retained.core import files, record

SPOOL_NAME = "spool"
SUFFIX = ".json"


def spool_dir(store_dir: Path) -> Path:
    return capture_dir(store_dir) / SPOOL_NAME


def put(store_dir: Path, event_id: str, item: dict[str, Any]) -> Path:
    """Keep ``item`` (JSON-encodable) under ``event_id``; durable before it returns.

    Raises:
        OSError: it could not be kept (the event is then counted as failed).
    """
    directory = ensure_dir(spool_dir(store_dir))
    path = directory / f"{event_id}{SUFFIX}"
    if path.exists():
        return path  # the same event is already waiting
    files.replace_with(path, record.canonical(item), directory / f".{event_id}.{os.getpid()}.tmp")
    return path


def waiting(store_dir: Path) -> list[Path]:
    """Spooled events, oldest first."""
    directory = spool_dir(store_dir)
    try:
        names = [p for p in directory.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith(".")]
    except FileNotFoundError:
        return []
    return sorted(names, key=lambda p: (p.stat().st_mtime, p.name))


def count(store_dir: Path) -> int:
    directory = spool_dir(store_dir)
    try:
        return sum(1 for name in os.listdir(directory) if name.endswith(SUFFIX) and not name.startswith("."))
    except FileNotFoundError:
        return 0


def load(path: Path) -> dict[str, Any] | None:
    """A spooled item, or None when it cannot be read as one (left in place for a person)."""
    import orjson

    try:
        with files.open_read(path) as f:
            item = orjson.loads(f.read())
    except (OSError, orjson.JSONDecodeError):
        return None
    return item if isinstance(item, dict) else None
