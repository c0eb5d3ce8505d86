"""The facade callers use: ``Store(path)`` and every verb the CLI and the MCP server offer.

Writing: ``write``, ``write_batch``, ``checkpoint``, ``forget``, ``redact``.
Reading: ``get`` (by seq), ``timeline`` (around a seq), ``list`` (newest
first), ``search``, ``brief``, ``head``, ``stats``. Checking and copying:
``verify``, ``rebuild``, ``export``, ``backup``, ``embed``. Each method is a
few lines over the log (and, where present, the index): the reads and their
fallbacks to the log are ``retained.index.access``'s, verify and anchor
acceptance ``retained.audit``'s. The replies' types are in
``retained.replies``. The CLI and the MCP server hold no storage logic and
reach nothing below this class: they call these, so a verb gives the same
facts on every edge.
"""

from __future__ import annotations

import builtins  # signatures after Store.list name the built-in list through it
import os
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from retained import limits
from retained.core import anchors, lock, record
from retained.core.log import Log
from retained.errors import RECORD_LIMIT_SETTING, InvalidRecord, NoStore, NotFound, RecordDamaged, RecordTooLarge, RetainedError
from retained.version import __version__

if TYPE_CHECKING:
    from retained.index.access import IndexAccess
    from retained.index.hybrid import Hybrid
    from retained.index.writer import Index
    from retained.replies import Entry, Found, Listing, Notes, Report, Timeline, WriteProof

DEFAULT_CLIENT = {"name": "retained", "version": __version__}
_NO_NOTES: Notes = {}


class Guarded(NamedTuple):
    """A record's content as the write guard left it, and what the write's reply should say of it."""

    content: record.Content
    notes: Notes


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
        self._wants: bool | None = None
        # group_commit: threads sharing this Store share fsyncs (see Log.append).
        self.log = Log(self.directory, record_bytes_max=record_bytes_max, lock_wait_s=lock_wait_s, group_commit=group_commit)
        self._access: IndexAccess | None = None  # the derived index and its fallbacks, opened on first use
        # Threads may share a Store (the MCP server's handlers do): the parts
        # opened on first use are opened once, under this lock.
        self._opening = threading.Lock()
        # Writes asking for related records under way (Store.write): their steps may run in any order.
        self._related_writes = 0
        self._counting = threading.Lock()

    def close(self) -> None:
        self.log.close()
        if self._access is not None:
            self._access.close()

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
        from retained.safety.credentials import compile_rules

        compile_rules()
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
        notes: Notes = {}
        if result.private_spans_removed:
            notes["private_spans_removed"] = result.private_spans_removed
        if result.redactions:
            notes["redactions"] = result.redactions
        return Guarded(record.Content(result.fields), notes)

    def append(
        self, items: list[Guarded], *, client: dict[str, Any] | None = None, op_reuse: str = "conflict"
    ) -> list[WriteProof]:
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
        out: list[WriteProof] = [{**proof, **item.notes} if item.notes else proof
                                 for proof, item in zip(proofs, items, strict=True)]
        written = [p for p in proofs if not p["duplicate"]]
        if self._routine is not None and written:
            self._routine.after(written[-1]["seq"], written[-1]["hash"], written[-1]["offset"] + written[-1]["length"])
        if not self._permissions_checked:
            self._permissions_checked = True
            from retained.audit import permission_notices

            notices = permission_notices(self)
            if notices:
                for proof in out:
                    proof["notices"] = [*proof.get("notices", ()), *notices]
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
    ) -> WriteProof:
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
                proof.update(cast("WriteProof", found))  # related, notices
        finally:
            if related:
                with self._counting:
                    self._related_writes -= 1
        return proof

    def _related(
        self, proof: Mapping[str, Any], text: str, scope: str | None, links: bool, concurrent: bool
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

    def write_batch(self, items: list[dict[str, Any]], *, client: dict[str, Any] | None = None) -> list[WriteProof]:
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
    ) -> WriteProof:
        """Append a checkpoint: a labelled point in the work (label as text, summary as body)."""
        if not isinstance(label, str) or not label.strip():
            raise InvalidRecord("field label: must be a non-empty string; nothing was written", path="label")
        if summary is not None and not isinstance(summary, str):
            raise InvalidRecord("field summary: must be a string; nothing was written", path="summary")
        content = record.make_content(text=label, kind="checkpoint", body=summary, scope=scope, store_kind=True)
        return self.append([self.prepare(content)], client=client)[0]

    def forget(self, seqs: list[int], reason: str, *, client: dict[str, Any] | None = None) -> WriteProof:
        """Append a retraction naming ``seqs``: they leave search and the brief, stay readable."""
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidRecord("field reason: must be a non-empty string saying why; nothing was written", path="reason")
        targets = _seq_list(seqs, "ids")
        self._require(targets, "ids")
        content = record.make_content(
            text=None, kind="retract", fields={"retracts": targets, "reason": reason}, store_kind=True
        )
        return self.append([self.prepare(content)], client=client)[0]

    def _require(self, seqs: list[int], path: str) -> list[Entry]:
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
        result["index"] = self.index_access.scrub_if_present()
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
        result["index"] = self.index_access.rebuild_if_present()
        return result

    # -- reading -----------------------------------------------------------

    def get(self, seqs: list[int], *, missing_ok: bool = False, store_id: str | None = None) -> list[Entry]:
        """The records with these seqs, in the order asked; ``store_id``: another store's, pulled by ``sync``.

        Raises:
            NotFound: a seq has no valid record (unless ``missing_ok``), or no store ``store_id`` was pulled.
        """
        if store_id is not None and store_id != anchors.store_id(self.directory, create=False):
            from retained.sync import union

            return cast("list[Entry]", union.get(self.directory, store_id, seqs, Store, missing_ok=missing_ok))
        wanted = _seq_list(seqs, "ids")
        damaged: dict[int, Any] = {}  # seq -> the damaged line claiming it (reported if no valid one turns up)
        found = self.index_access.find(wanted, damaged=damaged)
        remaining = set(wanted) - found.keys()
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

    def timeline(self, around: int, *, window: int = limits.TIMELINE_WINDOW_DEFAULT) -> Timeline:
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
        return self.index_access.timeline(around, window)

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
    ) -> Listing:
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
        from retained.index.access import listing_filter

        listed = listing_filter(limit, kind=kind, scope=scope, client=client, since=since, until=until, before=before,
                                after=after)
        result = self.index_access.recent(limit, listed)
        result["more"] = result["total_matches"] - result["returned"]
        return result

    # -- the index (retained/index/) ------------------------------------------

    @property
    def index_access(self) -> IndexAccess:
        """The index and its vectors, opened on first use, with the log as the fallback (``index.access``)."""
        if self._access is None:
            with self._opening:
                if self._access is None:
                    from retained.index.access import IndexAccess

                    self._access = IndexAccess(self.log, anchor_dir=self.anchor_dir, embed_settings=self.embed_settings)
        return self._access

    @property
    def index(self) -> Index:
        """The derived index, opened on first use; safe to delete and rebuild."""
        return self.index_access.index

    @property
    def hybrid(self) -> Hybrid:
        """Vector search beside the index (``index.hybrid``); lexical when embeddings are off."""
        return self.index_access.hybrid

    def wants_vectors(self) -> bool:
        """An endpoint is set or the embedded model is installed (imports neither)."""
        if self._wants is None:
            from retained.index.hybrid import wanted

            self._wants = wanted(self.embed_settings)
        return self._wants

    def search(
        self,
        query: str,
        *,
        k: int = limits.SEARCH_K_DEFAULT,
        max_tokens: int | None = None,
        scope: str | None = None,
        include_superseded: bool = False,
        include_retracted: bool = False,
        context: int = 0,
    ) -> Found:
        """Ranked records with the I2 accounting (see ``Index.search``); ``context`` neighbours per result."""
        if self._follow and self.log.exists() and self.wants_vectors():
            self.hybrid.kick()  # a long-lived process embeds what is missing (an existing store) in the background
        reply = self.index_access.search(query, k=k, max_tokens=max_tokens, scope=scope, context=context,
                                         include_superseded=include_superseded, include_retracted=include_retracted)
        if (self.directory / "mirrors").is_dir():  # other stores pulled by `retained sync` (retained/sync/union.py)
            from retained.sync import union

            options = {"k": k, "max_tokens": max_tokens, "scope": scope, "context": context,
                       "include_superseded": include_superseded, "include_retracted": include_retracted}
            reply = cast("Found", union.merge(self.directory, anchors.store_id(self.directory, create=False),
                                              cast("dict[str, Any]", reply), query, options, Store))
        return reply

    def rebuild(self, progress: Any = None, *, workers: int = 0) -> dict[str, Any]:
        """Drop the index and rebuild it from the log; ``progress(done_bytes, total_bytes)``.

        ``workers``: worker processes a large log's ranges may be indexed in
        (``retained.core.pool``); 0, the default, starts none.

        Raises:
            IndexError_ (code index_unavailable): the index file cannot be opened; the message names it and the fix.
        """
        return self.index_access.rebuild(progress, workers=workers)

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
        return self.index_access.embed(backfill=backfill, progress=progress)

    def stats(self, *, progress: Any = None, workers: int = 0) -> dict[str, Any]:
        """Counts by kind and scope, sizes, head, damage, index lag and vectors (see ``retained.index.stats``); reads only.

        ``workers`` as for ``verify``.
        """
        from retained.index import stats

        result = stats.stats(self.log, progress=progress, workers=workers)
        result["capture"] = self.capture_status()
        return result

    def capture_status(self) -> dict[str, Any] | None:
        """What capture did with every event (``retained.capture.ledger.status``); None when nothing was captured here."""
        from retained.capture import ledger, spool

        if not (ledger.capture_dir(self.directory) / ledger.LEDGER_NAME).exists():
            return None
        return ledger.status(self.directory, spooled_now=spool.count(self.directory))

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
        from retained.brief.session import session_brief

        return session_brief(self.directory, budget, scope, anchor_dir=self.anchor_dir)

    def head(self) -> dict[str, Any]:
        """The chain head (seq, hash, bytes): anchor it elsewhere to detect a rewritten log.

        Also the store id and the anchor file where verify and the brief
        record heads (None when anchoring is off or the store does not exist).
        """
        from retained import audit

        return audit.head(self)

    def verify(
        self, *, anchor: str | builtins.list[str] | None = None, progress: Any = None, workers: int = 0
    ) -> Report:
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
        from retained import audit

        return audit.verify(self, anchor=anchor, progress=progress, workers=workers)

    def sync(self, remote: str, **options: Any) -> dict[str, Any]:
        """Publish this store to ``remote`` (``s3://BUCKET/PREFIX``), pull and verify the others, report forks and rollbacks.

        ``restore_id``: rebuild this (empty) store as that store was published instead.
        See ``retained.sync.runner.run`` for the options and docs/sync.md for the model.
        """
        from retained.sync import runner

        return runner.run(self, remote, **options)

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
        from retained import audit

        return audit.anchor(self, lambda content: self.append([self.prepare(content)])[0], accept=accept, reason=reason)


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


def _scope_of(targets: builtins.list[Entry]) -> tuple[str | None, str]:
    """The scope a correction without one keeps from the records it supersedes, and the notice saying what was done."""
    scopes = sorted({s for s in (e["record"].get("scope") for e in targets) if isinstance(s, str)})
    seqs = ", ".join(str(e["seq"]) for e in targets)
    if len(scopes) == 1 and all(isinstance(e["record"].get("scope"), str) for e in targets):
        return scopes[0], f"scope {scopes[0]!r} kept from the record(s) it supersedes ({seqs})"
    if not scopes:
        return None, ""
    return None, (f"no scope: the records it supersedes ({seqs}) have different scopes ({', '.join(map(repr, scopes))} "
                  "or none); pass scope= to place it")
