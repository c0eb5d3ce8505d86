"""Restore: a lost store's log rebuilt from the bucket, byte for byte as it was published (docs/sync.md, Restore).

The segments are verified as a pull's are; ``sync/state.json`` then records
the head, so the next ``retained sync`` publishes only what is written after
it. The runner rebuilds the index.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from retained.core import anchors, files
from retained.core.log import Log
from retained.sync import layout, mirror, state
from retained.sync.publish import read_head
from retained.sync.remote import Remote


def restore(directory: Path, log: Log, remote: Remote, sid: str, progress: mirror.Progress | None = None) -> dict[str, Any]:
    """Rebuild the store at ``directory`` as store ``sid`` was published; returns ``{"store_id", "seq", "hash", "bytes", "segments", "state"}``.

    Raises:
        SyncError: the directory already has a log, the store id is not one, it has no published head, or its segments
            do not verify (nothing is left behind).
    """
    if not layout.valid_store_id(sid):
        raise state.SyncError(f"store id {sid!r}: expected 32 hex digits (see `retained head` on the lost machine, or "
                              "the names under stores/ in the bucket)", path="restore")
    if log.exists() and log.size() > 0:
        raise state.SyncError(f"{log.path} already holds a log; restore only into an empty directory "
                              "(--dir NEW_DIR); nothing was changed", path=str(log.path))
    existing = anchors.store_id(directory, create=False) if directory.is_dir() else None
    if existing not in (None, sid):
        raise state.SyncError(f"{directory} belongs to store {existing}; restore into an empty directory", path="restore")
    head, _, problem = read_head(remote, sid)
    if problem is not None:
        raise state.SyncError(problem["message"], path="restore")
    if head is None:
        raise state.SyncError(f"store {sid} has published nothing under {remote.url}; check the id and the remote",
                              path="restore")
    listing = remote.listing(layout.segments_prefix(remote.prefix, sid), limit=layout.LIST_KEYS_MAX)
    chosen, gap = mirror.plan(listing, 0, head["seq"], sid)
    if gap is not None:
        raise state.SyncError(gap["message"], path="restore")
    state.ensure_dir(directory)
    staging = layout.sync_dir(directory) / mirror.STAGING / sid
    shutil.rmtree(staging, ignore_errors=True)
    parts: list[tuple[str, bytes, str]] = []
    copy, problems = mirror.check_copy(staging, None, mirror.fetch(remote, chosen, progress), head, sid, parts)
    if copy is None:
        raise state.SyncError(problems[0]["message"], path="restore")
    if existing is None:
        files.write_synced(files.open_fd(directory / anchors.ID_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL),
                           (sid + "\n").encode("ascii"))
    size = os.path.getsize(copy)
    # The log appears last: until then the directory has no store in it.
    os.replace(copy, log.path)
    files.fsync_dir(directory)
    shutil.rmtree(staging, ignore_errors=True)
    return {"store_id": sid, "seq": head["seq"], "hash": head["hash"], "bytes": size, "machine": head.get("machine"),
            "segments": [k for k, _, _ in parts],
            "state": {"seq": head["seq"], "hash": head["hash"], "end": size, "segment": head.get("segment")}}
