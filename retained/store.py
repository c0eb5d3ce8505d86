"""The facade callers use: ``Store(path)`` and every verb the CLI and the MCP server offer.

Each method is a few lines over the parts: a write's checks are
``retained.writes``'s, the reads and their fallbacks to the log
``retained.index.access``'s, verify and anchor acceptance ``retained.audit``'s;
the replies' types are in ``retained.replies``. The edges hold no storage
logic and reach nothing below this class, so a verb gives the same facts on
every edge.
"""

from __future__ import annotations

import builtins  # signatures after Store.list name the built-in list through it
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from retained import limits, writes
from retained.core import anchors, lock, record
from retained.core.log import Log
from retained.errors import InvalidRecord, NoStore
from retained.version import __version__

if TYPE_CHECKING:
    from retained.index.access import IndexAccess
    from retained.index.hybrid import Hybrid
    from retained.index.writer import Index
    from retained.replies import Entry, Found, Listing, Report, Timeline, WriteProof, WrittenRelated

DEFAULT_CLIENT = {"name": "retained", "version": __version__}


class Store:
    """One store directory: the log and everything derived from it."""

    def __init__(
        self, directory: str | os.PathLike[str], *, client: dict[str, Any] | None = None,
        record_bytes_max: int = limits.RECORD_BYTES_MAX, lock_wait_s: float = limits.LOCK_WAIT_S, guard: Any = None,
        embed_settings: Mapping[str, str] | None = None, follow_writes: bool = False, group_commit: bool = True,
        anchor_dir: str | os.PathLike[str] | None = None,
        anchor_every: tuple[int, float] = (anchors.EVERY_RECORDS, anchors.EVERY_S),
    ) -> None:
        self.directory = Path(directory).expanduser()
        # Where the store's head is recorded outside it (retained/anchors.py);
        # None: no anchors. The edges pass the setting (settings.store_options).
        self.anchor_dir = None if anchor_dir is None else anchors.outside(Path(anchor_dir).expanduser(), self.directory)
        self._after = writes.AfterAppend(self.directory, self.anchor_dir, anchor_every)
        if self.directory.exists() and not self.directory.is_dir():
            raise NoStore(f"{self.directory} is a file, not a store directory; point --dir or RETAINED_DIR at a "
                          "directory (a new one is created by the first write)", path=str(self.directory))
        self.client = dict(client or DEFAULT_CLIENT)
        # The write guard (retained.safety.guard.Guard; a library user gets the safe default, refuse), built
        # on first write: compiling its patterns costs more than a read-only caller (the brief, search) should pay.
        self._guard = guard
        # Embeddings are optional (retained/index/hybrid.py): the RETAINED_EMBED_* settings the edge passed; a
        # long-lived process (the MCP server) sets follow_writes so new records get vectors on a background thread.
        self.embed_settings = dict(embed_settings or {})
        self._follow = follow_writes
        self._wants: bool | None = None
        # group_commit: threads sharing this Store share fsyncs (see Log.append).
        self.log = Log(self.directory, record_bytes_max=record_bytes_max, lock_wait_s=lock_wait_s, group_commit=group_commit)
        self._access: IndexAccess | None = None  # the derived index and its fallbacks, opened on first use
        # Threads may share a Store (the MCP server's handlers do): what opens on first use opens once, under this lock.
        self._opening = threading.Lock()
        self._related = writes.Related()  # the related step of writes (Store.write)

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
        """Load now what the first write and search would load (the guard's patterns, the lock's library, the index's
        modules); no file is touched. A server calls it once it listens, so its first calls do not queue behind it."""
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

    def prepare(self, content: record.Content) -> writes.Guarded:
        """Run the write guard on one record's content: what to store, and what the reply should say.

        A record already over the size limit is refused first: scanning 16 MiB
        for secrets only to refuse it afterwards would be wasted work. The one
        encoding serves both the size test and the guard's fast test.

        Raises:
            RecordTooLarge / SecretDetected / InvalidRecord: nothing written.
        """
        return writes.guarded(self.guard, content, self.log.record_bytes_max)

    def append(
        self, items: list[writes.Guarded], *, client: dict[str, Any] | None = None, op_reuse: str = "conflict"
    ) -> list[WriteProof]:
        """Append records the guard has seen (``prepare``); one proof each, in order, once durable.

        Every write of the store comes through here and then ``Log.append``,
        the one pipeline into the file: write, checkpoint, forget,
        write_batch and import alike. ``op_reuse`` as in ``Log.append``.
        """
        writes.check_guarded(items)
        if self.log.unusable:
            # A failed write poisoned the handle; start again from the file.
            self.log.reopen()
        # The index is derived and not on the acknowledgement path: every read
        # catches it up from the log first (L5), so a write only appends.
        proofs = self.log.append([item.content for item in items], client=client or self.client, op_reuse=op_reuse)
        if self._follow and self.wants_vectors():
            self.hybrid.kick()  # returns at once: the vector follows the acknowledgement
        return self._after.proofs(self, proofs, items)

    def write(
        self, text: str, *, kind: str = "note", scope: str | None = None, source: str | None = None, body: Any = None,
        fields: dict[str, Any] | None = None, supersedes: list[int] | None = None, client_op_id: str | None = None,
        client: dict[str, Any] | None = None, related: bool = False, later: Any = None,
    ) -> WriteProof:
        """Append a note (or any caller kind) and return its proof once durable.

        With ``related``, after the acknowledgement the proof also names up to
        3 earlier records of the same scope that look like the same subject
        (``related`` and a notice; see ``Index.related``): records this one
        may correct. The CLI asks for it; the MCP server passes ``later`` too
        (its session), and the step runs at ``related_to_writes(later)``.
        """
        if not isinstance(text, str):
            raise InvalidRecord(f"field text: must be a string, got {type(text).__name__}; nothing was written", path="text")
        kept = None
        if supersedes:
            targets = writes.require(self.get, writes.seq_list(supersedes, "supersedes"), "supersedes")
            if scope is None:
                # A correction belongs where what it corrects did: without a scope it would leave that scope's reads.
                scope, kept = writes.scope_of(targets)
        content = record.make_content(text=text, kind=kind, body=body, scope=scope, source=source, supersedes=supersedes,
                                      client_op_id=client_op_id, fields=fields)
        return self._related.write(lambda: self.append([self.prepare(content)], client=client)[0],
                                   lambda: self.index, text, scope, bool(supersedes), kept, related, later)

    def related_to_writes(self, key: Any) -> WrittenRelated | None:
        """The related steps ``key``'s writes left (``write(related=True, later=key)``), run now (``Related.written``)."""
        return self._related.written(lambda: self.index, key)

    def write_batch(self, items: list[dict[str, Any]], *, client: dict[str, Any] | None = None) -> list[WriteProof]:
        """Append many records with one lock and one fsync; proofs in order.

        Each item holds the arguments of ``write`` (``text`` required, plus
        kind, scope, source, body, fields, supersedes, client_op_id). Every item
        is validated before anything is written: one bad item refuses the batch.
        """
        return self.append(writes.batch(items, self.prepare), client=client)

    def import_file(
        self, path: str | os.PathLike[str], *, format: str = "auto", scope: str | None = None, on_reserved: str = "refuse",
        batch: int | None = None, dry_run: bool = False, allow_duplicates: bool = False, progress: Any = None,
        validate_progress: Any = None,
    ) -> dict[str, Any]:
        """Append the records of a file: the formats and rules of docs/data.md#import, idempotence included.

        The whole file is validated, and every record passed through the
        write guard, before anything is written; then batches go through
        ``append``. ``validate_progress(done_bytes, total_bytes)`` is called
        while the file is read, ``progress(done, total)`` while records are
        written. With ``dry_run`` nothing is written and the reply says what
        would be. With ``allow_duplicates`` a record imported before is
        appended again, not counted in ``duplicates``.
        """
        from retained.data import imports as transfer

        plan = transfer.plan_import(path, format=format, scope=scope, on_reserved=on_reserved,
                                    identity=not allow_duplicates, progress=validate_progress)
        size = transfer.BATCH_RECORDS if batch is None else batch
        return transfer.run_import(self, plan, batch=size, progress=progress, dry_run=dry_run)

    def checkpoint(
        self, label: str, *, summary: str | None = None, scope: str | None = None, client: dict[str, Any] | None = None,
    ) -> WriteProof:
        """Append a checkpoint: a labelled point in the work (label as text, summary as body)."""
        return self.append([self.prepare(writes.checkpoint(label, summary, scope))], client=client)[0]

    def forget(self, seqs: list[int], reason: str, *, client: dict[str, Any] | None = None) -> WriteProof:
        """Append a retraction naming ``seqs``: they leave search and the brief, stay readable."""
        return self.append([self.prepare(writes.retraction(seqs, reason, self.get))], client=client)[0]

    def redact(self, seq: int, reason: str, *, client: dict[str, Any] | None = None) -> dict[str, Any]:
        """Erase one record's content for good; the chain still verifies end to end.

        The steps (``retained.safety.redaction``) and the reply's ``index``
        (``IndexAccess.scrub_if_present``) are docs/erasure.md's.
        """
        from retained.safety import redaction

        # The reason is caller text like any other: the guard sees it first.
        content = self.prepare(redaction.record_content(seq, reason)).content
        result = redaction.redact(self.log, seq, content, client=client or self.client).to_dict()
        result.update(self.index_access.scrub_if_present())  # the index's state, beside the log's
        return result

    def quarantine(self, offset: int, *, reason: str | None = None, client: dict[str, Any] | None = None) -> dict[str, Any]:
        """Move the damaged line at byte ``offset`` (one that claims no seq) to a file beside the log, and record it.

        Nothing is deleted: the line's bytes go to ``log.jsonl.quarantine-<offset>``
        first, and the index is rebuilt. See ``retained.safety.redaction.quarantine``.

        Raises:
            InvalidRecord: no damaged line starts there, or it claims a seq (nothing changed).
            NoStore: there is no log.
        """
        from retained.safety import redaction

        if reason is not None and not isinstance(reason, str):
            raise InvalidRecord("field reason: must be a string; nothing was changed", path="reason")
        result = redaction.quarantine(self.log, offset, reason=reason, client=client or self.client, prepare=self.prepare)
        result.update(self.index_access.rebuild_if_present())  # the index's state, beside the log's
        return result

    # -- reading -----------------------------------------------------------

    def _pulled(self, store_id: str | None, read: Any) -> Any:
        """``read(store)`` over the pulled store ``store_id`` names (``sync.union.resolve``), or None for this store."""
        if store_id is None:
            return None
        from retained.sync import union

        other = union.resolve(self.directory, store_id)
        return None if other is None else union.read(self.directory, *other, Store, read)

    def get(self, seqs: list[int], *, missing_ok: bool = False, store_id: str | None = None) -> list[Entry]:
        """The records with these seqs, in the order asked; ``store_id``: another store's, pulled by ``sync``
        (``sync.union.resolve``: its id or first 8+ hex digits), each marked with its ``origin``.

        Raises:
            NotFound: a seq has no valid record (unless ``missing_ok``), or no store ``store_id`` was pulled.
            InvalidRecord: ``store_id`` is not a store id or names more than one.
        """
        pulled = self._pulled(store_id, lambda s: s.get(seqs, missing_ok=missing_ok))
        if pulled is not None:
            return cast("list[Entry]", pulled)
        return self.index_access.get(writes.seq_list(seqs, "ids"), missing_ok=missing_ok)

    def timeline(self, around: int, *, window: int = limits.TIMELINE_WINDOW_DEFAULT,
                 store_id: str | None = None) -> Timeline:
        """The record ``around`` and up to ``window`` records on each side, oldest first, with their links.

        Returns a ``replies.Timeline``: each record as ``get`` gives it, and how
        many records lie before and after the window (I2), a count, not a scan.
        ``store_id``: in another store, pulled by ``sync``, as for ``get``.

        Raises:
            NotFound: no record has seq ``around``, or no store ``store_id`` was pulled.
            InvalidRecord: ``around`` is not a seq, or ``window`` is not a whole number from 0 to
                ``limits.TIMELINE_WINDOW_MAX``, or ``store_id`` is not a store id or names more than one.
        """
        pulled = self._pulled(store_id, lambda s: s.timeline(around, window=window))
        if pulled is not None:
            return cast("Timeline", pulled)
        (around,) = writes.seq_list([around], "around")
        return self.index_access.timeline(around, window)

    def list(
        self, *, limit: int = 20, kind: str | None = None, scope: str | None = None, client: str | None = None,
        since: str | None = None, until: str | None = None, before: int | None = None, after: int | None = None,
    ) -> Listing:
        """Newest records first, each with its links, and how many more match (I2).

        Filters: ``kind``, ``scope``, ``client`` (the writer's name), ``since``
        and ``until`` (UTC days ``YYYY-MM-DD``, both inclusive), and for
        paging ``before`` / ``after`` (seqs, exclusive). With ``after`` the
        ``limit`` records nearest above it are returned (the page after it),
        still newest first.

        Returns a ``replies.Listing``: each record as ``get`` gives it (without a
        usable index the log alone answers, without links); ``total_matches``
        counts every record the filters admit.

        Raises:
            InvalidRecord: a limit, seq or day is malformed (the field is named).
        """
        from retained.index.access import listing_filter

        return self.index_access.recent(limit, listing_filter(limit, kind=kind, scope=scope, client=client, since=since,
                                                              until=until, before=before, after=after))

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

    def follow(self) -> None:
        """Embed records without a vector on a background thread (returns at once; ``close`` stops it between two)."""
        if self.log.exists() and self.wants_vectors():
            self.hybrid.kick()

    def search(
        self,
        query: str,
        *,
        k: int = limits.SEARCH_K_DEFAULT,
        max_tokens: int | None = None,
        scope: str | None = None,
        and_unscoped: bool = False,
        include_superseded: bool = False,
        include_retracted: bool = False,
        context: int = 0,
    ) -> Found:
        """Ranked records with the I2 accounting (see ``Index.search``); ``context`` neighbours per result."""
        if self._follow:
            self.follow()  # a long-lived process embeds what is missing (an existing store) in the background
        options = {"k": k, "max_tokens": max_tokens, "scope": scope, "and_unscoped": and_unscoped, "context": context,
                   "include_superseded": include_superseded, "include_retracted": include_retracted}
        reply = self.index_access.search(query, **options)
        if os.path.isdir(os.path.join(self.directory, "mirrors")):  # stores pulled by `retained sync` (sync/union.py)
            from retained.sync import union

            return cast("Found", union.merge(self.directory, cast("dict[str, Any]", reply), query, options, Store))
        return reply

    def rebuild(self, progress: Any = None, *, workers: int = 0) -> dict[str, Any]:
        """Drop the index and rebuild it from the log; ``progress(done_bytes, total_bytes)``; ``workers``: processes
        a large log's ranges may be indexed in (``retained.core.pool``; 0 starts none). Raises IndexError_
        (index_unavailable) when the index file cannot be opened; the message names it and the fix."""
        return self.index_access.rebuild(progress, workers=workers)

    def embed(self, *, backfill: bool = False, progress: Any = None) -> dict[str, Any]:
        """The optional embeddings: their status, or with ``backfill`` vectors for every record without one.

        Status is ``{"counts", "embedder"}``; a backfill calls ``progress(done, total)``
        and stops at the first embedder failure (see ``retained.index.access.IndexAccess.embed``).

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
        starts none. docs/python.md says when a program may pass more.

        Verify judges one snapshot of the log, checks the anchors (each
        ``anchor`` given as ``SEQ:HASH``, and those under ``anchor_dir``) and
        the permissions, then records the head judged: see ``retained.audit.verify``.

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

        See ``retained.audit.anchor``; with every anchor on the chain nothing is written.

        Raises:
            InvalidRecord: anchoring is off (no ``anchor_dir``) or ``reason`` is not a string.
        """
        from retained import audit

        return audit.anchor(self, lambda content: self.append([self.prepare(content)])[0], accept=accept, reason=reason)

