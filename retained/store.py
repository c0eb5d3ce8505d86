"""The facade callers use: ``Store(path)`` and every verb the CLI and the MCP server offer.

Writing: ``write``, ``write_batch``, ``checkpoint``, ``forget``, ``redact``.
Reading: ``get`` (by seq), ``timeline`` (around a seq), ``list`` (newest
first), ``search``, ``brief``, ``head``, ``stats``. Checking and copying:
``verify``, ``rebuild``, ``export``, ``backup``, ``embed``. Each method is a
few lines over the log (and, where present, the index). The CLI and the MCP
server hold no storage logic and reach nothing below this class: they call
these, so a verb gives the same facts on every edge.
"""

from __future__ import annotations

import builtins  # signatures after Store.list name the built-in list through it
import collections
import datetime
import os
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from retained import limits
from retained.core import anchors, chain, files, lock, record
from retained.core.log import Log
from retained.errors import RECORD_LIMIT_SETTING, EmbedConfigError, InvalidRecord, NoStore, NotFound, RecordDamaged, RecordTooLarge, RetainedError
from retained.version import __version__

DEFAULT_CLIENT = {"name": "retained", "version": __version__}
_NO_NOTES: dict[str, Any] = {}
# Store directories whose unsafe permissions this process already warned of (once per process).
_WARNED_DIRS: set[str] = set()


class Guarded(NamedTuple):
    """A record's content as the write guard left it, and what the write's reply should say of it."""

    content: record.Content
    notes: dict[str, Any]


def _entry(line: Any) -> dict[str, Any]:
    """A stored record as callers see it: the record, where it lives."""
    return {"seq": line.seq, "offset": line.offset, "length": line.length, "record": line.record}


class Store:
    """One store directory: the log and everything derived from it."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        client: dict[str, Any] | None = None,
        record_bytes_max: int = limits.RECORD_BYTES_MAX,
        lock_wait_s: float = limits.LOCK_WAIT_S,
        guard: Any = None,
        embed_settings: Mapping[str, str] | None = None,
        follow_writes: bool = False,
        group_commit: bool = True,
        anchor_dir: str | os.PathLike[str] | None = None,
        anchor_every: tuple[int, float] = (anchors.EVERY_RECORDS, anchors.EVERY_S),
    ) -> None:
        self.directory = Path(directory).expanduser()
        # Where the store's head is recorded outside it (retained/anchors.py);
        # None: no anchors. The edges pass the setting (settings.store_options).
        self.anchor_dir = None if anchor_dir is None else anchors.outside(Path(anchor_dir).expanduser(), self.directory)
        # Writes record the head routinely (records, seconds): see anchors.Routine.
        self._routine = None if self.anchor_dir is None else anchors.Routine(self.anchor_dir, self.directory, *anchor_every)
        self._permissions_checked = False
        if self.directory.exists() and not self.directory.is_dir():
            raise NoStore(
                f"{self.directory} is a file, not a store directory; point --dir or RETAINED_DIR at a directory "
                "(a new one is created by the first write)",
                path=str(self.directory),
            )
        self.client = dict(client or DEFAULT_CLIENT)
        # The write guard (retained.safety.guard.Guard) runs on every caller string
        # before anything is encoded; a library user gets the safe default,
        # refuse. Built on first write: compiling its patterns costs more than
        # a read-only caller (the brief, search) should pay.
        self._guard = guard
        # Embeddings are optional (retained/hybrid.py): the RETAINED_EMBED_*
        # settings the edge passed; a long-lived process (the MCP server) sets
        # follow_writes so new records get vectors on a background thread.
        self.embed_settings = dict(embed_settings or {})
        self._follow = follow_writes
        self._hybrid: Any = None
        self._wants: bool | None = None
        # group_commit: threads sharing this Store share fsyncs (see Log.append).
        self.log = Log(self.directory, record_bytes_max=record_bytes_max, lock_wait_s=lock_wait_s, group_commit=group_commit)
        self._index: Any = None  # the derived index (retained/index.py), opened on first use
        # Threads may share a Store (the MCP server's handlers do): the parts
        # opened on first use are opened once, under this lock.
        self._opening = threading.Lock()
        # Writes asking for related records under way (Store.write): their steps may run in any order.
        self._related_writes = 0
        self._counting = threading.Lock()
        # When the index cannot be opened (e.g. left owned by root), search
        # builds this one from the log in a private temporary directory.
        self._scratch: Any = None

    def close(self) -> None:
        self.log.close()
        if self._hybrid is not None:
            self._hybrid.close()
            self._hybrid = None
        if self._index is not None:
            self._index.close()
            self._index = None
        if self._scratch is not None:
            import shutil

            self._scratch.close()
            shutil.rmtree(self._scratch.path.parent, ignore_errors=True)
            self._scratch = None

    def exists(self) -> bool:
        """Whether a store is here: its log exists (the first write creates it)."""
        return self.log.exists()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def warm(self) -> None:
        """Load now what the first write and search would load on their way; no file is touched.

        The write guard (its credential patterns compiled), the OS lock's
        library and the index's modules with the query parser. A long-running
        server calls this on a thread once it listens, so that its first
        calls (many clients connecting at once) do not queue behind it.
        """
        self.guard  # noqa: B018 -- the property builds the guard
        lock.load()
        from retained.index import writer as index  # noqa: F401 -- with index_search, query and documents

    # -- writing -----------------------------------------------------------

    @property
    def guard(self) -> Any:
        if self._guard is None:
            with self._opening:
                if self._guard is None:
                    from retained.safety.guard import Guard

                    self._guard = Guard("refuse")
        return self._guard

    def prepare(self, content: record.Content) -> Guarded:
        """Run the write guard on one record's content: what to store, and what the reply should say.

        A record already over the size limit is refused first: scanning 16 MiB
        for secrets only to refuse it afterwards would be wasted work. The one
        encoding serves both the size test and the guard's fast test.

        Raises:
            RecordTooLarge / SecretDetected / InvalidRecord: nothing written.
        """
        fields = content.fields
        try:
            encoded: bytes | None = record.orjson.dumps(fields)
        except TypeError:
            # Not encodable (a lone surrogate): refused here, naming the field,
            # so an import refuses the file before any batch is written.
            record.encode_checked(fields)
            encoded = None  # left to seal()
        if encoded is not None and len(encoded) > self.log.record_bytes_max:
            raise RecordTooLarge(
                f"record is at least {len(encoded)} bytes encoded, over the limit of {self.log.record_bytes_max} bytes; "
                f"split it, or raise the limit ({RECORD_LIMIT_SETTING}); nothing was written",
                observed=len(encoded),
                expected=self.log.record_bytes_max,
            )
        if encoded is not None and self.guard.untouched(fields, encoded):
            return Guarded(content, _NO_NOTES)
        result = self.guard.apply(fields)
        notes: dict[str, Any] = {}
        if result.private_spans_removed:
            notes["private_spans_removed"] = result.private_spans_removed
        if result.redactions:
            notes["redactions"] = result.redactions
        return Guarded(record.Content(result.fields), notes)

    def append(
        self, items: list[Guarded], *, client: dict[str, Any] | None = None, op_reuse: str = "conflict"
    ) -> list[dict[str, Any]]:
        """Append records the guard has seen (``prepare``); one proof each, in order, once durable.

        Every write of the store comes through here and then ``Log.append``,
        the one pipeline into the file: write, checkpoint, forget,
        write_batch and import alike. ``op_reuse`` as in ``Log.append``.
        """
        for i, item in enumerate(items):
            if not isinstance(item, Guarded):
                raise InvalidRecord(
                    f"item {i}: {type(item).__name__} is not prepared content; pass it through Store.prepare first; "
                    "nothing was written",
                    path=f"[{i}]",
                )
        if self.log.unusable:
            # A failed write poisoned the handle; start again from the file.
            self.log.reopen()
        # The index is derived and not on the acknowledgement path: every read
        # catches it up from the log first (L5), so a write only appends.
        proofs = self.log.append([item.content for item in items], client=client or self.client, op_reuse=op_reuse)
        if self._follow and self.wants_vectors():
            self.hybrid.kick()  # returns at once: the vector follows the acknowledgement
        out = [{**proof, **item.notes} if item.notes else proof for proof, item in zip(proofs, items, strict=True)]
        written = [p for p in proofs if not p["duplicate"]]
        if self._routine is not None and written:
            self._routine.after(written[-1]["seq"], written[-1]["hash"], written[-1]["offset"] + written[-1]["length"])
        if not self._permissions_checked:
            self._permissions_checked = True
            notices = self._permission_notices()
            if notices:
                for proof in out:
                    proof["notices"] = [*proof.get("notices", ()), *notices]
        return out

    def _permission_notices(self) -> list[str]:
        """Once per process and directory: a warning if others may write the store (for the write's reply)."""
        key = str(self.directory.resolve())
        if key in _WARNED_DIRS:
            return []
        _WARNED_DIRS.add(key)
        return [f["message"] for f in self._unsafe_permissions(anchor_dir=False)]

    def _unsafe_permissions(self, *, anchor_dir: bool = True) -> list[dict[str, Any]]:
        """``unsafe_permissions`` findings: the store directory, the log, the anchor directory writable by others."""
        places = [("the store directory", self.directory, "700"), ("the log", self.log.path, "600")]
        if anchor_dir and self.anchor_dir is not None:
            places.append(("the anchor directory", self.anchor_dir, "700"))
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

    def write(
        self,
        text: str,
        *,
        kind: str = "note",
        scope: str | None = None,
        source: str | None = None,
        body: Any = None,
        fields: dict[str, Any] | None = None,
        supersedes: list[int] | None = None,
        client_op_id: str | None = None,
        client: dict[str, Any] | None = None,
        related: bool = False,
    ) -> dict[str, Any]:
        """Append a note (or any caller kind) and return its proof once durable.

        With ``related``, after the acknowledgement the proof also names up to
        3 earlier records of the same scope that look like the same subject
        (``related`` and a notice; see ``Index.related``): records this one
        may correct. The MCP server and the CLI ask for it.
        """
        if not isinstance(text, str):
            raise InvalidRecord(f"field text: must be a string, got {type(text).__name__}; nothing was written", path="text")
        kept = None
        if supersedes:
            targets = self._require(_seq_list(supersedes, "supersedes"), "supersedes")
            if scope is None:
                # A correction belongs where what it corrects did: without a scope it would leave that scope's reads.
                scope, kept = _scope_of(targets)
        content = record.make_content(
            text=text,
            kind=kind,
            body=body,
            scope=scope,
            source=source,
            supersedes=supersedes,
            client_op_id=client_op_id,
            fields=fields,
        )
        if related:  # counted so that a write knows another ran beside it (see _related)
            with self._counting:
                self._related_writes += 1
        try:
            proof = self.append([self.prepare(content)], client=client)[0]
            if kept:
                proof["notices"] = [*proof.get("notices", ()), kept]
            if related and not proof.get("duplicate"):
                found = self._related(proof, text, scope, bool(supersedes), self._related_writes > 1)
                if kept and found.get("notices"):
                    found["notices"] = [*proof["notices"], *found["notices"]]
                proof.update(found)
        finally:
            if related:
                with self._counting:
                    self._related_writes -= 1
        return proof

    def _related(
        self, proof: dict[str, Any], text: str, scope: str | None, links: bool, concurrent: bool
    ) -> dict[str, Any]:
        """``related`` (earlier records on the same subject, see ``Index.related``) and a notice naming them.

        Runs after the acknowledgement; an index that cannot answer costs the
        reply only this hint, never the write. The new record (``proof``;
        ``links``: it supersedes others) is left to a later catch-up;
        ``concurrent``: other writes asking for this step are under way here.
        """
        try:
            found = self.index.related(proof["seq"], text, scope=scope, before=proof["offset"], ts=proof["ts"],
                                       links=links, concurrent=concurrent)
        except (sqlite3.Error, OSError, RetainedError):
            return {}
        if not found:
            return {}
        seqs = ", ".join(str(r["seq"]) for r in found)
        return {"related": found, "notices": [
            f"earlier record(s) {seqs} look like the same subject; if this corrects them, "
            f"write it with supersedes=[{seqs}] (they then leave search)"]}

    def write_batch(self, items: list[dict[str, Any]], *, client: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Append many records with one lock and one fsync; proofs in order.

        Each item holds the arguments of ``write`` (``text`` required, plus
        kind, scope, source, body, fields, supersedes, client_op_id). Every item
        is validated before anything is written: one bad item refuses the batch.
        """
        prepared = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("text"), str):
                raise InvalidRecord(f"batch item {i}: needs a string text; nothing was written", path=f"[{i}].text")
            unknown = set(item) - {"text", "kind", "scope", "source", "body", "fields", "supersedes", "client_op_id"}
            if unknown:
                raise InvalidRecord(
                    f"batch item {i}: unknown argument {sorted(unknown)[0]!r}; put extra data in fields; nothing was written",
                    path=f"[{i}]",
                )
            try:
                prepared.append(self.prepare(record.make_content(**item)))
            except InvalidRecord as exc:
                raise type(exc)(f"batch item {i}: {exc.message}", **exc.fields) from exc
        return self.append(prepared, client=client)

    def import_file(
        self,
        path: str | os.PathLike[str],
        *,
        format: str = "auto",
        scope: str | None = None,
        on_reserved: str = "refuse",
        batch: int | None = None,
        dry_run: bool = False,
        allow_duplicates: bool = False,
        progress: Any = None,
        validate_progress: Any = None,
    ) -> dict[str, Any]:
        """Append the records of a file (a retained export, JSONL with a text field, server-memory's memory.jsonl).

        The whole file is validated, and every record passed through the
        write guard, before anything is written; then batches go through
        ``append``. ``validate_progress(done_bytes, total_bytes)`` is called
        while the file is read, ``progress(done, total)`` while records are
        written. With ``dry_run`` nothing is written and the reply says what
        would be.

        Idempotent: each record carries an identity derived from its source
        (see ``retained.data.imports``), so a record imported before is not
        appended again and ``duplicates`` counts it; ``allow_duplicates``
        imports without that identity.
        """
        from retained.data import imports as transfer

        plan = transfer.plan_import(path, format=format, scope=scope, on_reserved=on_reserved,
                                    identity=not allow_duplicates, progress=validate_progress)
        size = transfer.BATCH_RECORDS if batch is None else batch
        return transfer.run_import(self, plan, batch=size, progress=progress, dry_run=dry_run)

    def checkpoint(
        self,
        label: str,
        *,
        summary: str | None = None,
        scope: str | None = None,
        client: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Append a checkpoint: a labelled point in the work (label as text, summary as body)."""
        if not isinstance(label, str) or not label.strip():
            raise InvalidRecord("field label: must be a non-empty string; nothing was written", path="label")
        if summary is not None and not isinstance(summary, str):
            raise InvalidRecord("field summary: must be a string; nothing was written", path="summary")
        content = record.make_content(text=label, kind="checkpoint", body=summary, scope=scope, store_kind=True)
        return self.append([self.prepare(content)], client=client)[0]

    def forget(self, seqs: list[int], reason: str, *, client: dict[str, Any] | None = None) -> dict[str, Any]:
        """Append a retraction naming ``seqs``: they leave search and the brief, stay readable."""
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidRecord("field reason: must be a non-empty string saying why; nothing was written", path="reason")
        targets = _seq_list(seqs, "ids")
        self._require(targets, "ids")
        content = record.make_content(
            text=None, kind="retract", fields={"retracts": targets, "reason": reason}, store_kind=True
        )
        return self.append([self.prepare(content)], client=client)[0]

    def _require(self, seqs: list[int], path: str) -> list[dict[str, Any]]:
        """The records ``seqs`` name; NotFound (nothing written) when one does not exist."""
        entries = self.get(seqs, missing_ok=True)
        found = {e["seq"] for e in entries}
        missing = [s for s in seqs if s not in found]
        if missing:
            raise NotFound(
                f"field {path}: no record with seq {missing[0]}; nothing was written; see `retained list`",
                seq=missing[0],
                path=path,
            )
        return entries

    def redact(self, seq: int, reason: str, *, client: dict[str, Any] | None = None) -> dict[str, Any]:
        """Erase one record's content for good; the chain still verifies end to end.

        Appends a ``redaction`` record, rewrites the target line into its
        redacted form (temporary file, fsync, atomic rename, directory fsync),
        scrubs quarantined tails, and rebuilds the index with SQLite's
        secure_delete so no erased term survives in its pages.
        """
        from retained.safety import redaction

        # The reason is caller text like any other: the guard sees it first.
        content = self.prepare(redaction.record_content(seq, reason)).content
        result = redaction.redact(self.log, seq, content, client=client or self.client).to_dict()
        result["index"] = self._scrub_index()
        return result

    def quarantine(self, offset: int, *, reason: str | None = None, client: dict[str, Any] | None = None) -> dict[str, Any]:
        """Move the damaged line at byte ``offset`` (one that claims no seq) to a file beside the log, and record it.

        Nothing is deleted: the line's bytes go to ``log.jsonl.quarantine-<offset>``
        (fsynced) before the log is rewritten without it, and a ``quarantine``
        record names the file, offset, length and digest. Later lines move up
        by its length, so the index is rebuilt. See ``retained.safety.redaction``.

        Raises:
            InvalidRecord: no damaged line starts there, or it claims a seq (nothing changed).
            NoStore: there is no log.
        """
        from retained.safety import redaction

        if reason is not None and not isinstance(reason, str):
            raise InvalidRecord("field reason: must be a string; nothing was changed", path="reason")
        result = redaction.quarantine(self.log, offset, reason=reason, client=client or self.client, prepare=self.prepare)
        result["index"] = self._rebuild_if_present()
        return result

    def _rebuild_if_present(self) -> str:
        from retained.index.schema import INDEX_NAME

        if not (self.directory / INDEX_NAME).exists():
            return "absent"
        self.rebuild()
        return "rebuilt"

    def _scrub_index(self) -> str:
        from retained.index.schema import INDEX_NAME

        if not (self.directory / INDEX_NAME).exists():
            return "absent"
        from retained.index.writer import Index

        idx = Index(self.log)
        try:
            db = idx.connection()
            db.execute("PRAGMA secure_delete=ON")
            idx.rebuild()
            from retained.index.hybrid import prune

            prune(idx)  # a redacted line keeps its hash, so its vector must go by seq
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            idx.close()
        return "rebuilt"

    # -- reading -----------------------------------------------------------

    def get(self, seqs: list[int], *, missing_ok: bool = False) -> list[dict[str, Any]]:
        """The records with these seqs, in the order asked.

        Raises:
            NotFound: a seq has no valid record (unless ``missing_ok``).
        """
        wanted = _seq_list(seqs, "ids")
        found: dict[int, dict[str, Any]] = self._get_indexed(wanted)
        remaining = set(wanted) - found.keys()
        damaged: dict[int, Any] = {}  # seq -> the damaged line claiming it (reported if no valid one turns up)
        for line in self.log.scan() if remaining else ():
            if line.chained and line.seq in remaining:
                found[line.seq] = _entry(line)
                remaining.discard(line.seq)
                if not remaining:
                    break
            elif line.status == record.DAMAGED and line.seq in remaining:
                damaged.setdefault(line.seq, line)
        if remaining and not missing_ok:
            s = min(remaining)
            bad = damaged.get(s)
            if bad is not None:
                raise RecordDamaged(
                    f"seq {s} is damaged: the line at byte {bad.offset} of {self.log.path} claims it but {bad.problem}; "
                    "it is kept in place and skipped by the chain; run `retained verify` for the findings",
                    seq=s, offset=bad.offset, problem=bad.problem,
                )
            raise NotFound(f"no record with seq {s}; see `retained list` for what exists", seq=s)
        return [found[s] for s in wanted if s in found]

    def timeline(self, around: int, *, window: int = limits.TIMELINE_WINDOW_DEFAULT) -> dict[str, Any]:
        """The record ``around`` and up to ``window`` records on each side, oldest first, with their links.

        Returns ``{"records", "returned", "more", "more_before", "more_after"}``:
        each record as ``get`` gives it (with ``superseded_by`` /
        ``retracted_by``), and how many records lie before and after the
        window (I2). Seqs are contiguous from 1 (L2), so what lies outside the
        window is a count, not a scan.

        Raises:
            NotFound: no record has seq ``around``.
            InvalidRecord: ``around`` is not a seq, or ``window`` is not a whole number from 0 to
                ``limits.TIMELINE_WINDOW_MAX``.
        """
        (around,) = _seq_list([around], "around")
        if type(window) is not int or not 0 <= window <= limits.TIMELINE_WINDOW_MAX:
            raise InvalidRecord(
                f"field window: must be a whole number from 0 to {limits.TIMELINE_WINDOW_MAX}, got {window!r}",
                path="window",
            )
        head = self.head()["seq"] or 0
        low, high = max(1, around - window), min(head, around + window)
        entries = self.get(list(range(low, high + 1)), missing_ok=True) if around <= head else []
        if around not in {e["seq"] for e in entries}:
            raise NotFound(
                f"no record with seq {around}; nothing to show around it; list the newest records to see what exists",
                seq=around,
            )
        return {
            "records": entries,
            "returned": len(entries),
            "more": (low - 1) + (head - high),
            "more_before": low - 1,
            "more_after": head - high,
        }

    def list(
        self,
        *,
        limit: int = 20,
        kind: str | None = None,
        scope: str | None = None,
        client: str | None = None,
        since: str | None = None,
        until: str | None = None,
        before: int | None = None,
        after: int | None = None,
    ) -> dict[str, Any]:
        """Newest records first, each with its links, and how many more match (I2).

        Filters: ``kind``, ``scope``, ``client`` (the writer's name), ``since``
        and ``until`` (UTC days ``YYYY-MM-DD``, both inclusive), and for
        paging ``before`` / ``after`` (seqs, exclusive). With ``after`` the
        ``limit`` records nearest above it are returned (the page after it),
        still newest first.

        Returns ``{"records", "returned", "total_matches", "more", "left_out"}``;
        each record is ``{"seq", "offset", "length", "record"}`` plus
        ``superseded_by`` / ``retracted_by`` when later records name it (read
        from the index; without a usable index the log alone answers, without
        links). ``total_matches`` counts every record the filters admit;
        ``more`` is ``total_matches - returned``.

        Raises:
            InvalidRecord: a limit, seq or day is malformed (the field is named).
        """
        from retained.index.schema import Listed

        if type(limit) is not int or not 0 <= limit <= limits.SEQ_MAX:
            raise InvalidRecord(f"field limit: must be a whole number from 0 to {limits.SEQ_MAX}", path="limit")
        for name, text in (("client", client), ("kind", kind), ("scope", scope)):
            if text is not None and not isinstance(text, str):
                raise InvalidRecord(f"field {name}: must be a string, got {type(text).__name__}", path=name)
        for name, bound in (("before", before), ("after", after)):
            if bound is not None and (type(bound) is not int or bound < 0):
                raise InvalidRecord(f"field {name}: {bound!r} is not a seq bound (a whole number from 0)", path=name)
        listed = Listed(kind=kind, scope=scope, client=client, below=before, above=after,
                        ts_from=_day(since, "since").isoformat() if since is not None else None,
                        ts_before=(_day(until, "until") + _ONE_DAY).isoformat() if until is not None else None)
        result = self._recent(limit, listed)
        self._add_links(result["records"])
        result["more"] = result["total_matches"] - result["returned"]
        return result

    def _recent(self, limit: int, listed: Any) -> dict[str, Any]:
        if self.log.exists():
            try:
                # The index counts and orders without reading the whole log.
                return self.index.recent(limit, listed=listed)
            except (RetainedError, sqlite3.Error, OSError):
                pass  # an unusable index: the log alone answers, more slowly
        # With ``after`` the page nearest above it is wanted: the last ``limit`` matches read backwards.
        out: Any = collections.deque(maxlen=limit) if listed.above is not None else []
        matched = 0
        for line in self.log.scan_reverse():
            if line.status != record.RECORD or not listed.admits(line.seq, line.record):
                continue
            matched += 1
            if listed.above is not None or len(out) < limit:
                out.append(_entry(line))
        records = builtins.list(out)
        return {"records": records, "returned": len(records), "total_matches": matched,
                "left_out": {"beyond_limit": matched - len(records)}}

    # -- the index (retained/index.py) -------------------------------------

    @property
    def index(self) -> Any:
        """The derived index, opened on first use; safe to delete and rebuild."""
        if self._index is None:
            with self._opening:
                if self._index is None:
                    from retained.index.writer import Index

                    self._index = Index(self.log, witness=None if self.anchor_dir is None else self._witness)
        return self._index

    def _witness(self, seq: int, h: str, size: int) -> None:
        """Record a head the index had read, found gone from the log, before the index is rebuilt.

        So a rebuild never erases the evidence of a rollback: verify reports
        it until the new history is accepted. An anchor that cannot be
        written is not the reader's failure.
        """
        if self.anchor_dir is None:
            return
        try:
            anchors.record_head(self.anchor_dir, self.directory, seq, h, size, "index", durable=True)
        except RetainedError:
            pass

    def _get_indexed(self, seqs: builtins.list[int]) -> dict[int, dict[str, Any]]:
        """Records found through the index (read from the log, hash checked), with their links."""
        if not self.log.exists():
            return {}
        found = {}
        try:
            for s in dict.fromkeys(seqs):
                entry = self.index.read(s)
                if entry is not None:
                    entry.update(self.index.links(s))
                    found[s] = entry
        except (sqlite3.Error, OSError):
            return {}  # the index is unusable: the caller scans the log
        return found

    def _add_links(self, entries: builtins.list[dict[str, Any]]) -> None:
        """Add ``superseded_by`` / ``retracted_by`` from the index to entries read without them."""
        if not entries or not self.log.exists():
            return
        try:
            links = [self.index.links(entry["seq"]) for entry in entries]
        except (RetainedError, sqlite3.Error, OSError):
            return  # an unusable index: the entries stand without links, as the log alone gives them
        for entry, found in zip(entries, links, strict=True):
            entry.update(found)

    def search(
        self,
        query: str,
        *,
        k: int = 10,
        max_tokens: int | None = None,
        scope: str | None = None,
        include_superseded: bool = False,
        include_retracted: bool = False,
        context: int = 0,
    ) -> dict[str, Any]:
        """Ranked records with the I2 accounting (see ``Index.search``); ``context`` neighbours per result."""
        if not self.log.exists():
            from retained.index.writer import Index

            empty = Index.empty_reply(query, k=k, max_tokens=max_tokens)
            empty.update(mode="lexical", mode_reason="the store has no log yet", without_vectors=0)
            return empty
        options = {"k": k, "max_tokens": max_tokens, "scope": scope, "context": context,
                   "include_superseded": include_superseded, "include_retracted": include_retracted}
        if self._follow and self.wants_vectors():
            self.hybrid.kick()  # a long-lived process embeds what is missing (an existing store) in the background
        try:
            return self.hybrid.search(query, **options)
        except (sqlite3.Error, OSError, RetainedError) as exc:
            if isinstance(exc, RetainedError) and exc.code != "index_unavailable":
                raise
            return self._search_log(query, reason=self._index_problem(exc), **options)

    def _search_log(self, query: str, *, reason: str, **options: Any) -> dict[str, Any]:
        """Search without the store's index: the same ranking over an index built from the log alone.

        The slow path: the temporary index (in a private directory, removed
        on close) is built from the whole log on first use, then only
        catches up.
        """
        import tempfile

        from retained.index.schema import INDEX_NAME
        from retained.index.writer import Index

        if self._scratch is None:
            self._scratch = Index(self.log, Path(tempfile.mkdtemp(prefix="retained-search-")) / INDEX_NAME)
        reply = self._scratch.search(query, **options)
        reply.update(mode="lexical", mode_reason=f"answered from the log, more slowly: {reason}")
        return reply

    def _index_problem(self, exc: BaseException) -> str:
        """Why the index cannot be used, which file it is, and how to fix it."""
        from retained.index.schema import INDEX_NAME

        path = self.directory / INDEX_NAME
        detail = exc.message if isinstance(exc, RetainedError) else str(exc)
        owner = ""
        try:
            uid = path.stat().st_uid
            if hasattr(os, "geteuid") and uid != os.geteuid():
                owner = f" (it belongs to user id {uid}, e.g. after a `sudo retained ...`)"
        except OSError:
            pass
        return (
            f"the index {path} cannot be used{owner}: {detail}; it is derived from the log and safe to delete: "
            f"remove {path} and its -wal and -shm files (with sudo if another user owns them) or give them back "
            "to your user (`sudo chown`), then run `retained rebuild`; the log is untouched"
        )

    def wants_vectors(self) -> bool:
        """An endpoint is set or the embedded model is installed (imports neither)."""
        if self._wants is None:
            from retained.index.hybrid import wanted

            self._wants = wanted(self.embed_settings)
        return self._wants

    @property
    def hybrid(self) -> Any:
        """Vector search beside the index (retained/hybrid.py); lexical when embeddings are off."""
        if self._hybrid is None:
            index = self.index
            with self._opening:
                if self._hybrid is None:
                    from retained.index.hybrid import from_settings

                    self._hybrid = from_settings(index, self.embed_settings)
        return self._hybrid

    def rebuild(self, progress: Any = None, *, workers: int = 0) -> dict[str, Any]:
        """Drop the index and rebuild it from the log; ``progress(done_bytes, total_bytes)``.

        ``workers``: worker processes a large log's ranges may be indexed in
        (``retained.core.pool``); 0, the default, starts none.

        Raises:
            IndexError_ (code index_unavailable): the index file cannot be opened; the message names it and the fix.
        """
        from retained.index.writer import IndexError_, IndexFull

        try:
            return self.index.rebuild(progress, workers=workers)
        except IndexFull:
            raise  # a full disk says nothing against the index file: its own message says to free space
        except (sqlite3.Error, OSError, IndexError_) as exc:
            raise IndexError_(self._index_problem(exc), path=str(self.index.path)) from exc

    def embed(self, *, backfill: bool = False, progress: Any = None) -> dict[str, Any]:
        """The optional embeddings: their status, or with ``backfill`` vectors for every record without one.

        Status is ``{"counts", "embedder"}`` (records, vectors of the
        configured model, missing; the embedder's URL, model and breaker).
        A backfill calls ``progress(done, total)`` after each batch and returns
        ``{"embedded", "pending", "error", "model"}``; it stops at the first
        embedder failure, which it reports in ``error``.

        Raises:
            EmbedConfigError: embeddings are off (the reason names the setting to set).
        """
        hybrid = self.hybrid
        if hybrid.embedder is None:
            raise EmbedConfigError(
                hybrid.off_reason or "embeddings are off: set RETAINED_EMBED_URL and RETAINED_EMBED_MODEL"
            )
        if backfill:
            return hybrid.backfill(progress)
        return {"counts": hybrid.counts(), "embedder": hybrid.embedder.status()}

    def stats(self, *, progress: Any = None, workers: int = 0) -> dict[str, Any]:
        """Counts by kind and scope, sizes, head, damage, index lag and vectors (see ``retained.index.stats``); reads only.

        ``workers`` as for ``verify``.
        """
        from retained.index import stats

        return stats.stats(self.log, progress=progress, workers=workers)

    def export(
        self, out: Any, *, format: str = "jsonl", force: bool = False, progress: Any = None, overwrite: bool = False
    ) -> dict[str, Any]:
        """Write the log's chained records, verified first, as ``jsonl`` or ``markdown`` (see ``retained.data.export``).

        ``out`` is a binary stream, or a path: a new file (0600) put in
        place when complete, whose path the result gives; an existing file
        is refused unless ``overwrite``.

        Raises:
            PathRefused: the path exists (without ``overwrite``) or is inside the store; nothing was written.
            ExportRefused: verify found problems and ``force`` is false; nothing was written.
        """
        from retained.data import export

        if hasattr(out, "write"):
            return export.export(self.log, out, format=format, force=force, progress=progress)
        return export.export_to_file(self.log, out, format=format, force=force, progress=progress, overwrite=overwrite)

    def backup(self, dest: str | os.PathLike[str], *, force: bool = False) -> dict[str, Any]:
        """Copy the log under the store lock to a new directory ``dest``, then verify the copy (see ``retained.data.backup``).

        Raises:
            BackupRefused: ``dest`` is in or around the store, or holds something (``force`` replaces a backup).
            BackupFailed: the copy does not verify.
        """
        from retained.data import backup

        return backup.backup(self.log, dest, force=force)

    def brief(self, budget: int | None = None, scope: str | None = None) -> dict[str, Any]:
        """The session-start brief (see ``retained.brief.compose.build_brief``); render it with ``brief.render_text``."""
        from retained.brief import compose as brief

        return brief.build_brief(self.directory, brief.DEFAULT_BUDGET if budget is None else budget, scope,
                                 anchor_dir=self.anchor_dir)

    def _verify_index(self, report: dict[str, Any], lines: Any, snapshot: tuple[int, int]) -> dict[str, Any]:
        if not self.log.exists():
            return {"checked": False, "findings": 0}
        from retained.index.writer import IndexFull

        note = None
        checked = True
        try:
            findings = self.index.verify(lines, snapshot=snapshot)
        except IndexFull as exc:
            # A full disk says nothing about the index or the log: reported, not a finding.
            findings, note, checked = [], exc.message, False
        except (RetainedError, sqlite3.Error, OSError) as exc:
            findings = [{"kind": "index_unusable", "seq": None, "offset": None, "expected": "a usable index",
                         "observed": str(exc), "message": self._index_problem(exc)}]
        caught = self.index.last_catch_up
        if note is None and caught.get("state") == "stale":
            note = f"the index could not catch up ({caught.get('reason')}); it was checked as far as it reaches"
        report["findings"].extend(findings)
        report["ok"] = not report["findings"]
        out: dict[str, Any] = {"checked": checked, "findings": len(findings)}
        if note is not None:
            out["note"] = note
        return out

    def head(self) -> dict[str, Any]:
        """The chain head (seq, hash, bytes): anchor it elsewhere to detect a rewritten log.

        Also the store id and the anchor file where verify and the brief
        record heads (None when anchoring is off or the store does not exist).
        """
        seq, h, end = self.log.tail()
        sid = anchors.store_id(self.directory) if self.anchor_dir is not None else anchors.store_id(self.directory, create=False)
        return {
            "seq": seq, "hash": h, "bytes": end, "log": str(self.log.path), "store_id": sid,
            "anchor_file": str(anchors.anchor_file(self.anchor_dir, sid)) if self.anchor_dir is not None and sid else None,
        }

    def verify(
        self, *, anchor: str | builtins.list[str] | None = None, progress: Any = None, workers: int = 0
    ) -> dict[str, Any]:
        """Walk the whole chain and report every finding (memory flat in log size); ``progress(done_bytes, total_bytes)``.

        ``workers``: worker processes a large log's ranges may be classified
        in (``retained.core.pool``; the report is the same); 0, the default,
        starts none. Pass more only from a program whose main module is
        guarded (``if __name__ == "__main__":``), as the command line does.

        Verify judges one snapshot: the log's size and head when it begins
        (``snapshot`` in the report). The chain walk and the index check both
        stop there, so records appended meanwhile are neither judged nor
        taken for damage.

        Anchors: every head recorded outside the store (``anchor_dir``) and
        not yet accepted must still be on the chain, as must each ``anchor``
        given (``SEQ:HASH``, e.g. saved in git); a log cut back below one is
        ``rolled_back``, one re-chained after it ``anchor_mismatch``. Then the
        head judged is recorded. A store directory, log or anchor directory
        others may write is ``unsafe_permissions``.

        Raises:
            InvalidRecord: an ``anchor`` is not ``SEQ:HASH``; nothing was checked.
        """
        given = [anchors.parse(a) for a in ([anchor] if isinstance(anchor, str) else anchor or [])]
        # Anchors are read before the snapshot is fixed: one recorded by
        # another process after it could name a head verify does not judge.
        loaded = anchors.load(self.anchor_dir, self.directory) if self.anchor_dir is not None else None
        size = self.log.size()
        head_seq, head_hash, head_end = self.log.tail(stop=size)
        to_check = [*(loaded.anchors if loaded is not None else ()), *given]
        # The index check reads the lines the chain walk passes it (one read
        # of the log) while any worker processes classify the next ranges; its
        # findings follow the chain's.
        index: dict[str, Any] = {"findings": []}

        def check(lines: Any) -> None:
            index.update(checked=self._verify_index(index, lines, (size, head_seq)))

        walked = chain.verify_file(self.log, check=check, stop=size, watch={a.seq for a in to_check}, progress=progress,
                                   workers=workers)
        report = walked.to_dict()
        report["snapshot"] = {"bytes": size, "seq": head_seq, "hash": head_hash}
        report["quarantined"] = self.log.quarantined()
        report["log"] = str(self.log.path)
        report["exists"] = self.log.exists()
        report["findings"].extend(index["findings"])
        anchored = anchors.check(to_check, walked.watched, walked.head_seq)
        report["findings"].extend(anchored)
        report["findings"].extend(self._unsafe_permissions())
        report["anchors"] = self._anchor_after_verify(loaded, given, anchored, (head_seq, head_hash, head_end))
        if loaded is not None:
            report["findings"].extend(loaded.problems)
        report["ok"] = not report["findings"]
        report["index"] = index["checked"]
        if self.wants_vectors() or self.embed_settings.get("RETAINED_EMBED_MODEL"):
            # Records without a current vector are reported, not failures: they
            # are backfilled, and search says when it is lexical because of them.
            try:
                report["vectors"] = self.hybrid.verify()
            except (RetainedError, sqlite3.Error) as exc:
                report["vectors"] = {"error": str(exc)}
        return report

    def _anchor_after_verify(
        self, loaded: anchors.Loaded | None, given: builtins.list[Any], findings: builtins.list[dict[str, Any]], head: tuple[int, str, int]
    ) -> dict[str, Any]:
        """Record the head verify judged; after a clean check the anchor file shrinks to it. Returns what was done."""
        out: dict[str, Any] = {"dir": None if self.anchor_dir is None else str(self.anchor_dir),
                               "checked": len(given) + (len(loaded.anchors) if loaded is not None else 0),
                               "given": len(given), "not_on_chain": len(findings), "recorded": False}
        if loaded is None or self.anchor_dir is None:
            return out
        out.update(store_id=loaded.store_id, file=None if loaded.file is None else str(loaded.file))
        seq, h, end = head
        if not seq or loaded.store_id is None:
            return out
        try:
            if not findings and not loaded.problems:
                anchors.compact(loaded, self.directory, seq, h, end, "verify")
                out["recorded"] = True
            else:
                out["recorded"] = anchors.record_head(self.anchor_dir, self.directory, seq, h, end, "verify",
                                                      durable=True)["recorded"]
        except RetainedError as exc:
            # The check stands; only the record of this head is missing.
            out["error"] = exc.message
        return out

    def _index_evidence(self) -> None:
        """Bring the index up to the log now, so a head it had read and the log lost is anchored first.

        Before an acceptance: otherwise the next read would find the index
        built from the old log and record its head after the acceptance,
        as new evidence.
        """
        from retained.index.schema import INDEX_NAME

        if not (self.directory / INDEX_NAME).exists():
            return
        try:
            self.index.catch_up()
        except (RetainedError, sqlite3.Error, OSError):
            pass  # an unusable index holds no evidence this can read

    def anchor(self, *, accept: bool = False, reason: str | None = None) -> dict[str, Any]:
        """The anchors recorded for this store, each with its state on today's chain; ``accept`` settles those off it.

        Listing walks the chain once. ``accept``: when anchors are not on the
        chain (``rolled_back``, ``anchor_mismatch``), append an
        ``anchor_accept`` record naming them (through the write guard, as
        any write), mark them settled in their files, and record the new head:
        verify reports them no more. With every anchor on the chain nothing
        is written.

        Raises:
            InvalidRecord: anchoring is off (no ``anchor_dir``) or ``reason`` is not a string.
        """
        if self.anchor_dir is None:
            raise InvalidRecord(
                "anchoring is off for this store: pass anchor_dir to Store (the command line and the server take "
                "RETAINED_ANCHOR_DIR, default $XDG_STATE_HOME/retained)",
                path="anchor_dir",
            )
        if reason is not None and not isinstance(reason, str):
            raise InvalidRecord("field reason: must be a string saying why the new history is accepted", path="reason")
        if accept:
            self._index_evidence()
        loaded = anchors.load(self.anchor_dir, self.directory)
        size = self.log.size()
        walked = chain.verify_file(self.log, stop=size, watch={a.seq for a in loaded.anchors})
        off = anchors.check(loaded.anchors, walked.watched, walked.head_seq)
        off_by_anchor = {(f["seq"], f["expected"], f["anchor"]["file"]): f["kind"] for f in off}
        listed = []
        for entry in loaded.history:
            state = "accepted" if entry["settled_by"] else off_by_anchor.get((entry["seq"], entry["hash"], entry["file"]), "ok")
            listed.append({**entry, "state": state})
        result: dict[str, Any] = {
            "store_id": loaded.store_id, "dir": str(self.anchor_dir),
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
        proof = self.append([self.prepare(content)])[0]
        by = {"seq": proof["seq"], "hash": proof["hash"]}
        anchors.settle(loaded, by)
        anchors.record_head(self.anchor_dir, self.directory, proof["seq"], proof["hash"],
                            proof["offset"] + proof["length"], "accept", durable=True)
        result["accepted"] = {"count": len(off), "record": proof, "anchors": named}
        return result


_ONE_DAY = datetime.timedelta(days=1)


def _day(value: Any, path: str) -> datetime.date:
    """A ``YYYY-MM-DD`` day as a ``datetime.date``."""
    if isinstance(value, str) and len(value) == 10:
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    raise InvalidRecord(f"field {path}: {value!r} is not a day; give YYYY-MM-DD (UTC), e.g. 2026-11-29", path=path)


def _seq_list(seqs: Any, path: str) -> list[int]:
    if isinstance(seqs, int) and not isinstance(seqs, bool):
        seqs = [seqs]
    if not isinstance(seqs, (list, tuple)) or not seqs:
        raise InvalidRecord(f"field {path}: must be a non-empty list of seq numbers", path=path)
    out = []
    for s in seqs:
        if type(s) is not int or not 1 <= s <= limits.SEQ_MAX:
            raise InvalidRecord(f"field {path}: {s!r} is not a seq (a whole number from 1 to {limits.SEQ_MAX})", path=path)
        out.append(s)
    return out


def _scope_of(targets: builtins.list[dict[str, Any]]) -> tuple[str | None, str]:
    """The scope a correction without one keeps from the records it supersedes, and the notice saying what was done."""
    scopes = sorted({s for s in (e["record"].get("scope") for e in targets) if isinstance(s, str)})
    seqs = ", ".join(str(e["seq"]) for e in targets)
    if len(scopes) == 1 and all(isinstance(e["record"].get("scope"), str) for e in targets):
        return scopes[0], f"scope {scopes[0]!r} kept from the record(s) it supersedes ({seqs})"
    if not scopes:
        return None, ""
    return None, (f"no scope: the records it supersedes ({seqs}) have different scopes ({', '.join(map(repr, scopes))} "
                  "or none); pass scope= to place it")
