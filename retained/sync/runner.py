"""``retained sync``: publish this store, pull the others, report every finding; or restore a lost store.

One run at a time per store (``sync/sync.lock``). The last run's findings
stay in ``sync/findings.json``, where ``verify`` reports them too.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from retained import limits
from retained.core import anchors, lock, record
from retained.sync import layout, mirror, publish, restore, state
from retained.sync.remote import Remote

Progress = Callable[[str, int, int], None]


def machine_name(given: str | None = None) -> str:
    """The name a published head carries (``--machine``, else this host's name)."""
    name = (given or "").strip() or socket.gethostname() or "unknown"
    return name[:200]


def run(store: Any, url: str, *, machine: str | None = None, endpoint_url: str | None = None,
        restore_id: str | None = None, pull: bool = True, publish_own: bool = True, key: bytes | None = None,
        progress: Progress | None = None, client: Any = None,
        segment_bytes: int = layout.SEGMENT_BYTES) -> dict[str, Any]:
    """One sync of ``store`` with the remote at ``url``; returns the report (``ok`` false on any finding).

    ``key``: 32 bytes; every object is sealed with it (``sealed.SealedRemote``), and one that does not open is a finding.

    Raises:
        SyncError: the remote cannot be reached or read, or a restore cannot be done; nothing local was changed
            (a pull already verified stays).
        LockTimeout: another sync of this store is running.
    """
    directory = store.directory
    if key is None:
        remote = Remote(url, endpoint_url=endpoint_url, client=client)
    else:
        from retained.sync.sealed import SealedRemote

        remote = SealedRemote(url, key, endpoint_url=endpoint_url, client=client)
    name = machine_name(machine)
    state.ensure_dir(layout.sync_dir(directory))

    def step(label: str) -> Callable[[int, int], None] | None:
        if progress is None:
            return None
        return lambda done, total: progress(label, done, total)

    with lock.StoreLock(layout.sync_dir(directory) / layout.LOCK_NAME, limits.LOCK_WAIT_S):
        state_path = layout.sync_dir(directory) / layout.STATE_NAME
        saved = state.read(state_path)
        remotes = dict(saved.get("remotes") or {})
        if restore_id is not None:
            done = restore.restore(directory, store.log, remote, restore_id, step("restore"))
            remotes[url] = done.pop("state")
            state.write(state_path, {"remotes": remotes})
            store.log.reopen()
            rebuilt = store.rebuild()
            verified = store.verify()
            return {"ok": verified["ok"], "remote": url, "machine": name, "restored": done,
                    "index": rebuilt, "verify": {"ok": verified["ok"], "records": verified["records"],
                                                 "findings": verified["findings"]}, "findings": verified["findings"]}
        report: dict[str, Any] = {"remote": url, "machine": name, "store_id": None, "published": None, "pulled": [],
                                  "findings": []}
        own = None
        if publish_own and store.log.exists():
            own = anchors.store_id(directory)
            report["store_id"] = own
            if own is None or not layout.valid_store_id(own):
                raise state.SyncError(f"{directory}: no usable store id (store.id); see `retained head`", path="store.id")
            try:
                done = publish.publish(directory, store.log, remote, own, name, anchor_dir=store.anchor_dir,
                                       saved=dict(remotes.get(url) or {}), progress=step("publish"),
                                       segment_bytes=segment_bytes)
            except state.SyncError as exc:
                if exc.code != "sync_unreadable":
                    raise
                done = {"records": 0, "segments": [], "adopted": [], "replaced": [], "bytes": 0, "head": None,
                        "state": remotes.get(url), "findings": [_unreadable(own, exc)]}
            published = done.pop("state")
            if published != remotes.get(url):
                remotes[url] = published
                state.write(state_path, {"remotes": remotes})
            report["findings"].extend(done.pop("findings"))
            report["published"] = done
        else:
            own = anchors.store_id(directory, create=False) if directory.is_dir() else None
        if pull:
            for sid in remote.children(f"{remote.prefix}stores/"):
                if sid == own or not layout.valid_store_id(sid):
                    continue
                try:
                    got = mirror.pull_store(directory, remote, sid, step(f"pull {sid[:8]}"))
                except state.SyncError as exc:
                    if exc.code != "sync_unreadable":
                        raise
                    got = {"store_id": sid, "records": 0, "segments": [], "bytes": 0, "machine": None,
                           "findings": [_unreadable(sid, exc)]}
                report["findings"].extend(got.pop("findings"))
                report["pulled"].append(got)
                if got.get("erased"):
                    # The mirror's index held the erased words: scrubbed as `retained redact` scrubs the store's own.
                    with type(store)(layout.mirror_dir(directory, sid)) as other:
                        other.index_access.scrub_if_present()
                elif got.get("records"):
                    # A mirror's index, once a search built it, follows its log here (the new records only), so the
                    # session-start brief, which never catches an index up, reads it whole and exactly.
                    with type(store)(layout.mirror_dir(directory, sid)) as other:
                        other.index_access.catch_up_evidence()
        report["ok"] = not report["findings"]
        state.write(layout.sync_dir(directory) / layout.FINDINGS_NAME,
                    {"remote": url, "time": record.utc_now(), "findings": report["findings"]})
        return report


def recorded_findings(directory: Any) -> list[dict[str, Any]]:
    """The findings of the last sync of the store at ``directory`` (for ``verify``); [] when it never synced."""
    try:
        saved = state.read(layout.sync_dir(directory) / layout.FINDINGS_NAME)
    except state.SyncError as exc:
        return [{"kind": "sync_unreadable", "seq": None, "offset": None, "message": exc.message}]
    return [dict(f, message=f"last sync: {f.get('message')}") for f in saved.get("findings") or () if isinstance(f, dict)]


def _unreadable(sid: str, exc: state.SyncError) -> dict[str, Any]:
    return publish.finding("unreadable", sid, f"store {sid}: {exc.message}; nothing of it was used or overwritten",
                           segment=exc.fields.get("path"))
