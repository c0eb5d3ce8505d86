"""Sync's small files beside the store: JSON documents replaced whole (0600 files, 0700 directories)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from retained.core import files
from retained.errors import RetainedError


class SyncError(RetainedError):
    """A sync could not run or finish (the object store unreachable, a setting missing); the log is untouched."""

    code = "sync_failed"


def ensure_dir(path: Path) -> Path:
    """``path`` and its missing parents made 0700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def read(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; {} when there is none.

    Raises:
        SyncError: it exists but is not a JSON object (say which file; the user moves it aside).
    """
    try:
        with files.open_read(path) as f:
            data = f.read()
    except FileNotFoundError:
        return {}
    try:
        obj = json.loads(data)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        raise SyncError(f"{path} is not a JSON object; move it aside and run `retained sync` again", path=str(path))
    return obj


def write(path: Path, obj: dict[str, Any]) -> None:
    """Replace ``path`` with ``obj`` as JSON: a new file, fsynced, renamed over it, the directory fsynced."""
    write_bytes(path, json.dumps(obj, sort_keys=True, indent=1).encode("utf-8") + b"\n")


def write_bytes(path: Path, data: bytes) -> None:
    """A new file at ``path`` (0600) holding ``data``, fsynced, renamed into place."""
    ensure_dir(path.parent)
    files.replace_with(path, data, path.with_name(f"{path.name}.tmp-{os.getpid()}"))
