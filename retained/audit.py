"""Verify and anchor acceptance: the checks a Store runs over its log, index, vectors, anchors and permissions.

Both work on a `Store` through the few parts named in `Parts`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from retained.core import anchors, files, record
from retained.errors import InvalidRecord, RetainedError

if TYPE_CHECKING:
    from retained.core.log import Log
    from retained.index.access import IndexAccess
    from retained.replies import Report, WriteProof


class Parts(Protocol):
    """What verify and anchor use of a Store."""

    directory: Path
    anchor_dir: Path | None
    embed_settings: dict[str, str]
    log: Log

    @property
    def index_access(self) -> IndexAccess: ...
    def wants_vectors(self) -> bool: ...


# Store directories whose unsafe permissions this process already warned of (once per process).
_WARNED_DIRS: set[str] = set()


def permission_notices(store: Parts) -> list[str]:
    """Once per process and directory: a warning if others may write the store (for a write's reply)."""
    key = str(store.directory.resolve())
    if key in _WARNED_DIRS:
        return []
    _WARNED_DIRS.add(key)
    return [f["message"] for f in unsafe_permissions(store, anchor_dir=False)]


def head(store: Parts) -> dict[str, Any]:
    """``Store.head``: the chain head, the store id and the anchor file (see there)."""
    seq, h, end = store.log.tail()
    directory, anchor_dir = store.directory, store.anchor_dir
    note = None
    try:
        sid = anchors.store_id(directory, create=anchor_dir is not None)
    except anchors.AnchorError as exc:
        # A read: a store it cannot give an id (read-only, another user's) still has a head to show.
        sid, note = None, f"no store id: {exc.message}; verify and the brief cannot record anchors for it"
    out = {
        "seq": seq, "hash": h, "bytes": end, "log": str(store.log.path), "store_id": sid,
        "anchor_file": str(anchors.anchor_file(anchor_dir, sid)) if anchor_dir is not None and sid else None,
    }
    if note is not None:
        out["note"] = note
    return out


def unsafe_permissions(store: Parts, *, anchor_dir: bool = True) -> list[dict[str, Any]]:
    """``unsafe_permissions`` findings: the store directory, the log, the anchor directory writable by others."""
    places = [("the store directory", store.directory, "700"), ("the log", store.log.path, "600")]
    if anchor_dir and store.anchor_dir is not None:
        places.append(("the anchor directory", store.anchor_dir, "700"))
    out = []
    for what, path, fix in places:
        mode = files.writable_by_others(path)
        if mode is not None:
            out.append({
                "kind": "unsafe_permissions", "seq": None, "offset": None, "expected": "not writable by group or others",
                "observed": oct(mode),
                "message": f"{what} {path} has mode {oct(mode)[2:]}: group or others may write it, so they can "
                f"rewrite the store's history; run `chmod {fix} {path}`",
            })
    return out


def verify_index(store: Parts, report: dict[str, Any], lines: Any, snapshot: tuple[int, int] | None) -> dict[str, Any]:
    """Check the index against the lines the chain walk passes (``Index.verify``); its findings join ``report``'s."""
    if not store.log.exists():
        return {"checked": False, "findings": 0}
    from retained.index.writer import IndexFull

    access = store.index_access
    note = None
    checked = True
    try:
        findings = access.index.verify(lines, snapshot=snapshot)
    except IndexFull as exc:
        # A full disk says nothing about the index or the log: reported, not a finding.
        findings, note, checked = [], exc.message, False
    except (RetainedError, sqlite3.Error, OSError) as exc:
        findings = [{"kind": "index_unusable", "seq": None, "offset": None, "expected": "a usable index",
                     "observed": str(exc), "message": access.problem(exc)}]
    caught = access.index.last_catch_up
    if note is None and caught.get("state") == "stale":
        note = f"the index could not catch up ({caught.get('reason')}); it was checked as far as it reaches"
    report["findings"].extend(findings)
    report["ok"] = not report["findings"]
    out: dict[str, Any] = {"checked": checked, "findings": len(findings)}
    if note is not None:
        out["note"] = note
    return out


def verify(store: Parts, *, anchor: str | list[str] | None = None, progress: Any = None, workers: int = 0) -> Report:
    """``Store.verify``: every finding over one snapshot of the log.

    Verify judges one snapshot: the log's size and head when it begins
    (``snapshot`` in the report). The chain walk and the index check both
    stop there, so records appended meanwhile are neither judged nor taken
    for damage. Every anchor recorded and not yet accepted, and each
    ``anchor`` given (``SEQ:HASH``), must still be on the chain
    (docs/anchors.md); then the head judged is recorded.
    """
    given = [anchors.parse(a) for a in ([anchor] if isinstance(anchor, str) else anchor or [])]
    # Anchors are read before the snapshot is fixed: one recorded by
    # another process after it could name a head verify does not judge.
    loaded = anchors.load(store.anchor_dir, store.directory) if store.anchor_dir is not None else None
    log = store.log
    # A durable snapshot (L6): the head verify records as an anchor, and the index checks against, survives a power cut.
    size = log.durable_end(log.size(), wait_s=log.lock_wait_s)
    head_seq, head_hash, head_end = log.tail(stop=size)
    to_check = [*(loaded.anchors if loaded is not None else ()), *given]
    # The index check reads the lines the chain walk passes it (one read
    # of the log) while any worker processes classify the next ranges; its
    # findings follow the chain's.
    index: dict[str, Any] = {"findings": []}

    vectors: dict[str, Any] = {}

    def check(lines: Any) -> None:
        # The vectors' counts (and the modules they need) here, while any
        # worker processes classify the first ranges, not after the walk,
        # when this process alone would still be working. Only when their
        # catch-up has nothing to report: a replaced log is the index
        # check's to report first, so then they wait for the end, as before.
        if log.exists() and _wants_vectors(store) and _index_state(store) == "ok":
            vectors["report"] = _vectors(store)
        index.update(checked=verify_index(store, index, lines, (size, head_seq)))

    from retained.core import chain  # here: a write's permission_notices needs none of the walk's modules

    walked = chain.verify_file(log, check=check, stop=size, watch={a.seq for a in to_check}, progress=progress,
                               workers=workers)
    report = cast("Report", walked.to_dict())  # the walk's counts and findings; the rest is added here
    report["snapshot"] = {"bytes": size, "seq": head_seq, "hash": head_hash}
    report["quarantined"] = log.quarantined()
    report["log"] = str(log.path)
    report["exists"] = log.exists()
    report["findings"].extend(index["findings"])
    if walked.redacted:
        _may_hold_erased(store, report, walked.redacted)
    anchored = anchors.check(to_check, walked.watched, walked.head_seq)
    report["findings"].extend(anchored)
    report["findings"].extend(unsafe_permissions(store))
    if (store.directory / "sync").is_dir():  # what the last `retained sync` found (forks, rollbacks, bad segments)
        from retained.sync.runner import recorded_findings

        report["findings"].extend(recorded_findings(store.directory))
    report["anchors"] = _record_judged_head(store, loaded, given, anchored, (head_seq, head_hash, head_end))
    if loaded is not None:
        report["findings"].extend(loaded.problems)
    report["ok"] = not report["findings"]
    report["index"] = index["checked"]
    if _wants_vectors(store):
        report["vectors"] = vectors["report"] if "report" in vectors else _vectors(store)
    return report


def _wants_vectors(store: Parts) -> bool:
    return store.wants_vectors() or bool(store.embed_settings.get("RETAINED_EMBED_MODEL"))


def _vectors(store: Parts) -> dict[str, Any]:
    """The vectors part of the report (``Hybrid.verify``).

    Records without a current vector are reported, not failures: they are
    backfilled, and search says when it is lexical because of them.
    """
    try:
        return store.index_access.hybrid.verify()
    except (RetainedError, sqlite3.Error) as exc:
        return {"error": str(exc)}


def _index_state(store: Parts) -> str | None:
    """The index's state against the log without catching it up (``Index.status``), None when it cannot be read."""
    try:
        return cast(str, store.index_access.index.status()["state"])
    except (RetainedError, sqlite3.Error, OSError):
        return None


def _may_hold_erased(store: Parts, report: Report, redacted: list[int]) -> None:
    """Say where erased text may remain: an index that cannot be opened, and one a redaction set aside."""
    seqs = ", ".join(map(str, redacted[:10])) + (", ..." if len(redacted) > 10 else "")
    for finding in report["findings"]:
        if finding.get("kind") == "index_unusable":
            finding["message"] += (f"; it may still hold the erased text of the redacted records (seq {seqs}): "
                                   "deleting it erases that too")
    report["findings"].extend(store.index_access.set_aside_findings(seqs))


def _record_judged_head(
    store: Parts, loaded: anchors.Loaded | None, given: list[Any], findings: list[dict[str, Any]],
    head: tuple[int, str, int],
) -> dict[str, Any]:
    """Record the head verify judged; after a clean check the anchor file shrinks to it. Returns what was done."""
    anchor_dir = store.anchor_dir
    out: dict[str, Any] = {"dir": None if anchor_dir is None else str(anchor_dir),
                           "checked": len(given) + (len(loaded.anchors) if loaded is not None else 0),
                           "given": len(given), "not_on_chain": len(findings), "recorded": False}
    if loaded is None or anchor_dir is None:
        return out
    out.update(store_id=loaded.store_id, file=None if loaded.file is None else str(loaded.file))
    seq, h, end = head
    if not seq or loaded.store_id is None:
        return out
    try:
        if not findings and not loaded.problems:
            anchors.compact(loaded, store.directory, seq, h, end, "verify")
            out["recorded"] = True
        else:
            out["recorded"] = anchors.record_head(anchor_dir, store.directory, seq, h, end, "verify",
                                                  durable=True)["recorded"]
    except RetainedError as exc:
        # The check stands; only the record of this head is missing.
        out["error"] = exc.message
    return out


def anchor(
    store: Parts, append: Callable[[record.Content], WriteProof], *, accept: bool = False, reason: str | None = None,
) -> dict[str, Any]:
    """``Store.anchor``: the anchors with their state; with ``accept`` the history accepted (docs/anchors.md).

    Listing walks the chain once. ``append`` writes the ``anchor_accept``
    record (one of the store's own kind) through the write guard and returns its proof.
    """
    anchor_dir = store.anchor_dir
    if anchor_dir is None:
        raise InvalidRecord(
            "anchoring is off for this store: pass anchor_dir to Store (the command line and the server take "
            "RETAINED_ANCHOR_DIR, default $XDG_STATE_HOME/retained)",
            path="anchor_dir",
        )
    if reason is not None and not isinstance(reason, str):
        raise InvalidRecord("field reason: must be a string saying why the new history is accepted", path="reason")
    if accept:
        store.index_access.catch_up_evidence()
    loaded = anchors.load(anchor_dir, store.directory)
    size = store.log.size()
    from retained.core import chain

    walked = chain.verify_file(store.log, stop=size, watch={a.seq for a in loaded.anchors})
    off = anchors.check(loaded.anchors, walked.watched, walked.head_seq)
    off_by_anchor = {(f["seq"], f["expected"], f["anchor"]["file"]): f["kind"] for f in off}
    listed = []
    for entry in loaded.history:
        state = "accepted" if entry["settled_by"] else off_by_anchor.get((entry["seq"], entry["hash"], entry["file"]), "ok")
        listed.append({**entry, "state": state})
    result: dict[str, Any] = {
        "store_id": loaded.store_id, "dir": str(anchor_dir),
        "file": None if loaded.file is None else str(loaded.file),
        "head": {"seq": walked.head_seq, "hash": walked.head_hash, "bytes": size},
        "anchors": listed, "not_on_chain": len(off), "problems": loaded.problems, "accepted": None,
    }
    if not accept:
        return result
    if not off and not loaded.problems:
        result["accepted"] = {"count": 0, "record": None, "note": "every anchor is on the chain: nothing to accept"}
        return result
    named = [{"seq": f["seq"], "hash": f["expected"], "finding": f["kind"], "time": f["anchor"]["time"],
              "source": f["anchor"]["source"]} for f in off]
    content = record.make_content(
        text=f"accepted the log's history as it is: {len(off)} recorded heads were not on it"
        + (f" and {len(loaded.problems)} anchor lines could not be read" if loaded.problems else ""),
        kind="anchor_accept",
        fields={"accepted": named[: anchors.ACCEPT_LISTED_MAX], "accepted_count": len(off),
                "reason": reason or "accepted with `retained anchor --accept`"},
        store_kind=True,
    )
    proof = append(content)
    by = {"seq": proof["seq"], "hash": proof["hash"]}
    anchors.settle(loaded, by)
    anchors.record_head(anchor_dir, store.directory, proof["seq"], proof["hash"],
                        proof["offset"] + proof["length"], "accept", durable=True)
    result["accepted"] = {"count": len(off), "record": proof, "anchors": named}
    return result
