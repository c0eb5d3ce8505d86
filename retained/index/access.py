"""The index as the Store reaches it: opened on first use, vectors beside it, the log alone when it cannot answer.

What it owns: the store's `Index` and `Hybrid` (opened once, shared by
threads), the reads that go through them with one catch-up per call
(`IndexAccess.one_read`), and every fallback: a get or a listing the log
answers when the index is unusable, a search over a private index built
from the log, the message that says which file is at fault and how to fix
it, and the anchoring of a head the index had read before a rebuild erases it.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import os
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retained import limits
from retained.core import anchors, files, record
from retained.core.log import Line, Log
from retained.errors import EmbedConfigError, InvalidRecord, NotFound, RecordDamaged, RetainedError
from retained.index.schema import INDEX_FILES, INDEX_NAME, INDEX_SUFFIXES, Filter
from retained.index.search import Search
from retained.index.writer import Index, IndexError_, IndexFull

if TYPE_CHECKING:
    from retained.index.hybrid import Hybrid
    from retained.replies import Entry, Found, Listing, Timeline


def entry(line: Line) -> Entry:
    """A stored record as callers see it: the record, where it lives."""
    return {"seq": line.seq, "offset": line.offset, "length": line.length, "record": line.record}


_ONE_DAY = datetime.timedelta(days=1)
# An index a redaction could neither scrub nor delete is renamed to the index file name + SET_ASIDE + <n>; verify reports it.
SET_ASIDE = ".set-aside-"


def listing_filter(limit: Any, *, kind: Any = None, scope: Any = None, client: Any = None, since: Any = None,
                   until: Any = None, before: Any = None, after: Any = None) -> Filter:
    """The `Filter` of ``Store.list``'s arguments, each checked (InvalidRecord names the field)."""
    if type(limit) is not int or not 0 <= limit <= limits.SEQ_MAX:
        raise InvalidRecord(f"field limit: must be a whole number from 0 to {limits.SEQ_MAX}", path="limit")
    for name, text in (("client", client), ("kind", kind), ("scope", scope)):
        if text is not None and not isinstance(text, str):
            raise InvalidRecord(f"field {name}: must be a string, got {type(text).__name__}", path=name)
    for name, bound in (("before", before), ("after", after)):
        if bound is not None and (type(bound) is not int or bound < 0):
            raise InvalidRecord(f"field {name}: {bound!r} is not a seq bound (a whole number from 0)", path=name)
    return Filter(kind=kind, scope=scope, client=client, below=before, above=after,
                  ts_from=_day(since, "since").isoformat() if since is not None else None,
                  ts_before=(_day(until, "until") + _ONE_DAY).isoformat() if until is not None else None)


def _day(value: Any, path: str) -> datetime.date:
    """A ``YYYY-MM-DD`` day as a ``datetime.date``."""
    if isinstance(value, str) and len(value) == 10:
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    raise InvalidRecord(f"field {path}: {value!r} is not a day; give YYYY-MM-DD (UTC), e.g. 2026-11-29", path=path)


class IndexAccess:
    """The index and vectors of one store's log, and the reads that fall back to the log."""

    def __init__(self, log: Log, *, anchor_dir: Path | None, embed_settings: Mapping[str, str]) -> None:
        self.log = log
        self.directory = log.directory
        self.anchor_dir = anchor_dir
        self.embed_settings = embed_settings
        self._index: Index | None = None
        self._hybrid: Hybrid | None = None
        # When the index cannot be opened (e.g. left owned by root), search
        # builds this one from the log in a private temporary directory.
        self._scratch: Index | None = None
        self._opening = threading.Lock()  # threads share a Store: each part is opened once

    def close(self) -> None:
        self._close_index()
        if self._scratch is not None:
            import shutil

            self._scratch.close()
            shutil.rmtree(self._scratch.path.parent, ignore_errors=True)
            self._scratch = None

    @property
    def index(self) -> Index:
        """The derived index, opened on first use; safe to delete and rebuild."""
        if self._index is None:
            with self._opening:
                if self._index is None:
                    self._index = Index(self.log, witness=None if self.anchor_dir is None else self._witness)
        return self._index

    @property
    def hybrid(self) -> Hybrid:
        """Vector search beside the index (``hybrid``); lexical when embeddings are off."""
        if self._hybrid is None:
            index = self.index
            with self._opening:
                if self._hybrid is None:
                    from retained.index.hybrid import from_settings  # the embedder's client, only when searching

                    self._hybrid = from_settings(index, self.embed_settings)
        return self._hybrid

    def present(self) -> bool:
        """Whether the index file exists (a store that was never read has none)."""
        return (self.directory / INDEX_NAME).exists()

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

    def one_read(self) -> contextlib.AbstractContextManager[None]:
        """A block whose reads catch the index up once (``Index.one_catch_up``): one Store call."""
        return self.index.one_catch_up() if self.log.exists() else contextlib.nullcontext()

    # -- reads, with the log as the fallback ------------------------------------

    def find(self, seqs: list[int], *, damaged: dict[int, Any] | None = None) -> dict[int, Entry]:
        """``{seq: entry}`` for those of ``seqs`` that have a valid record, with their links when the index answers.

        Through the index (one read of the log), else, or for a seq it lacks,
        by a scan of the log; ``damaged`` collects the first damaged line the
        scan met claiming each seq it did not find.
        """
        found: dict[int, Entry] = {}
        if self.log.exists():
            with self.one_read():
                try:
                    found = self.index.read_many(seqs)
                except (RetainedError, sqlite3.Error, OSError):
                    found = {}  # the index cannot be opened or read (another user's, a read-only store): the log is scanned
        remaining = set(seqs) - found.keys()
        for line in self.log.scan() if remaining else ():
            if line.chained and line.seq in remaining:
                found[line.seq] = entry(line)
                remaining.discard(line.seq)
                if not remaining:
                    break
            elif damaged is not None and line.status == record.DAMAGED and line.seq in remaining:
                damaged.setdefault(line.seq, line)
        return found

    def get(self, seqs: list[int], *, missing_ok: bool) -> list[Entry]:
        """``Store.get`` for checked ``seqs``: their records in the order asked (see there)."""
        damaged: dict[int, Any] = {}  # seq -> the damaged line claiming it (reported if no valid one turns up)
        found = self.find(seqs, damaged=damaged)
        remaining = set(seqs) - found.keys()
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
        return [found[s] for s in seqs if s in found]

    def timeline(self, around: int, window: Any) -> Timeline:
        """``Store.timeline`` for a checked seq ``around`` (see there)."""
        if type(window) is not int or not 0 <= window <= limits.TIMELINE_WINDOW_MAX:
            raise InvalidRecord(
                f"field window: must be a whole number from 0 to {limits.TIMELINE_WINDOW_MAX}, got {window!r}",
                path="window",
            )
        head = self.log.tail()[0]
        low, high = max(1, around - window), min(head, around + window)
        found = self.find(list(range(low, high + 1))) if around <= head else {}
        entries = [found[s] for s in range(low, high + 1) if s in found]
        if around not in found:
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

    def recent(self, limit: int, listed: Filter) -> Listing:
        """``Store.list``: newest records first with their links, and the count of what matched, or from the log."""
        if self.log.exists():
            try:
                # The index counts and orders without reading the whole log.
                result = self.index.recent(limit, listed=listed)
                result["more"] = result["total_matches"] - result["returned"]
                return result
            except (RetainedError, sqlite3.Error, OSError):
                pass  # an unusable index: the log alone answers, more slowly, without links
        # With ``above`` the page nearest above it is wanted: the last ``limit`` matches read backwards.
        out: Any = collections.deque(maxlen=limit) if listed.above is not None else []
        matched = 0
        for line in self.log.scan_reverse():
            if line.status != record.RECORD or not listed.admits(line.seq, line.record):
                continue
            matched += 1
            if listed.above is not None or len(out) < limit:
                out.append(entry(line))
        records = list(out)
        self._add_links(records)
        return {"records": records, "returned": len(records), "total_matches": matched,
                "left_out": {"beyond_limit": matched - len(records)}, "more": matched - len(records)}

    def _add_links(self, entries: list[Entry]) -> None:
        """Add ``superseded_by`` / ``retracted_by`` from the index to entries read without them."""
        if not entries or not self.log.exists():
            return
        try:
            links = self.index.links_of([e["seq"] for e in entries])
        except (RetainedError, sqlite3.Error, OSError):
            return  # an unusable index: the entries stand without links, as the log alone gives them
        for e in entries:
            e.update(links.get(e["seq"], {}))

    def search(self, query: str, **options: Any) -> Found:
        """``Hybrid.search`` (``Index.search`` when lexical); without a usable index, the same over the log."""
        if not self.log.exists():
            empty = Search.empty_reply(query, k=options["k"], max_tokens=options["max_tokens"])
            empty["mode"], empty["mode_reason"] = "lexical", "the store has no log yet"
            empty["without_vectors"] = 0
            return empty
        try:
            with self.index.one_catch_up():  # one_read, the log being there
                return self.hybrid.search(query, **options)
        except (sqlite3.Error, OSError, RetainedError) as exc:
            if isinstance(exc, RetainedError) and exc.code != "index_unavailable":
                raise
            return self._search_log(query, reason=self.problem(exc), **options)

    def _search_log(self, query: str, *, reason: str, **options: Any) -> Found:
        """Search without the store's index: the same ranking over an index built from the log alone.

        The slow path: the temporary index (in a private directory, removed
        on close) is built from the whole log on first use, then only
        catches up.
        """
        import tempfile

        if self._scratch is None:
            self._scratch = Index(self.log, Path(tempfile.mkdtemp(prefix="retained-search-")) / INDEX_NAME)
        reply = self._scratch.search(query, **options)
        reply["mode"], reply["mode_reason"] = "lexical", f"answered from the log, more slowly: {reason}"
        return reply

    def problem(self, exc: BaseException) -> str:
        """Why the index cannot be used, which file it is, and how to fix it."""
        path = self.directory / INDEX_NAME
        return (
            f"{self.why(exc)}; it is derived from the log and safe to delete: "
            f"remove {path} and its -wal and -shm files (with sudo if another user owns them) or give them back "
            "to your user (`sudo chown`), then run `retained rebuild`; the log is untouched"
        )

    def why(self, exc: BaseException) -> str:
        """Which index file cannot be used, whose it is when not this user's, and the error: no advice."""
        path = self.directory / INDEX_NAME
        while isinstance(exc, RetainedError) and exc.__cause__ is not None:
            exc = exc.__cause__  # the error underneath: a retained one's advice may not fit (a redaction changed the log)
        detail = exc.message if isinstance(exc, RetainedError) else str(exc)
        owner = ""
        try:
            uid = path.stat().st_uid
            if hasattr(os, "geteuid") and uid != os.geteuid():
                owner = f" (it belongs to user id {uid}, e.g. after a `sudo retained ...`)"
        except OSError:
            pass
        return f"the index {path} cannot be used{owner}: {detail}"

    def embed(self, *, backfill: bool, progress: Any) -> dict[str, Any]:
        """``Store.embed``: the vectors' status, or a backfill.

        Status is ``{"counts", "embedder"}`` (records, vectors of the
        configured model, missing; the embedder's URL, model and breaker).
        A backfill calls ``progress(done, total)`` after each batch and returns
        ``{"embedded", "pending", "error", "model"}``; it stops at the first
        embedder failure, which it reports in ``error``.
        """
        hybrid = self.hybrid
        if hybrid.embedder is None:
            raise EmbedConfigError(
                hybrid.off_reason or "embeddings are off: set RETAINED_EMBED_URL and RETAINED_EMBED_MODEL"
            )
        if backfill:
            return hybrid.backfill(progress)
        with self.one_read():
            return {"counts": hybrid.counts(), "embedder": hybrid.embedder.status()}

    # -- rebuilding ---------------------------------------------------------------

    def rebuild(self, progress: Any = None, *, workers: int = 0) -> dict[str, Any]:
        """``Index.rebuild``, with an index that cannot be opened reported by `problem`."""
        try:
            return self.index.rebuild(progress, workers=workers)
        except IndexFull:
            raise  # a full disk says nothing against the index file: its own message says to free space
        except (sqlite3.Error, OSError, IndexError_) as exc:
            raise IndexError_(self.problem(exc), path=str(self.index.path)) from exc

    def rebuild_if_present(self) -> dict[str, Any]:
        """Rebuild an existing index (the log's lines moved); the reply's ``index`` fields.

        ``index`` is ``absent``, ``rebuilt``, or ``unusable`` with
        ``index_problem`` (left as it is: docs/erasure.md, on quarantine).
        """
        if not self.present():
            return {"index": "absent"}
        try:
            self.rebuild()
        except IndexError_ as exc:
            return {"index": "unusable", "index_problem": self.why(exc)}
        return {"index": "rebuilt"}

    def scrub_if_present(self) -> dict[str, Any]:
        """After a redaction: leave no erased term in the index, and say how (the reply's ``index`` fields).

        ``index`` is ``absent``, ``rebuilt`` (with secure_delete,
        ``Index.scrub``), or, when the index cannot be opened or rebuilt,
        ``removed``, ``set_aside`` (``index_set_aside`` names the file) or
        ``unchanged``, each told in docs/erasure.md; ``index_problem`` says why
        it was not rebuilt.
        """
        if not self.present():
            return {"index": "absent"}
        idx = Index(self.log)
        try:
            idx.scrub()
            return {"index": "rebuilt"}
        except (RetainedError, sqlite3.Error, OSError) as exc:
            problem = self.why(exc)
        finally:
            idx.close()
        return {**self._take_out_of_use(), "index_problem": problem}

    def _take_out_of_use(self) -> dict[str, Any]:
        """Delete the index files, or failing that rename them aside (``SET_ASIDE``); what was done, as ``scrub_if_present``."""
        self._close_index()
        path = self.directory / INDEX_NAME
        try:
            for name in INDEX_FILES:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.directory / name)
            files.fsync_dir(self.directory)
            return {"index": "removed"}
        except OSError:
            pass  # not a file (a directory took its name) or not ours to delete: rename it out of use
        n = 0
        while os.path.lexists(aside := path.with_name(f"{INDEX_NAME}{SET_ASIDE}{n}")):
            n += 1
        try:
            os.replace(path, aside)
        except OSError:
            return {"index": "unchanged"}
        for suffix in INDEX_SUFFIXES:
            with contextlib.suppress(OSError):
                os.replace(f"{path}{suffix}", f"{aside}{suffix}")
        with contextlib.suppress(OSError):
            files.fsync_dir(self.directory)
        return {"index": "set_aside", "index_set_aside": str(aside)}

    def _close_index(self) -> None:
        """Close this Store's connections to the index (its file is about to go): the next read opens a new one."""
        with self._opening:
            if self._hybrid is not None:
                self._hybrid.close()
                self._hybrid = None
            if self._index is not None:
                self._index.close()
                self._index = None

    def set_aside_findings(self, redacted: str) -> list[dict[str, Any]]:
        """``index_set_aside`` findings: index files a redaction renamed out of use (``SET_ASIDE``), not yet deleted.

        ``redacted``: the seqs the log holds redacted, as text, whose erased text such a file may still hold.
        """
        out = []
        for aside in sorted(self.directory.glob(f"{INDEX_NAME}{SET_ASIDE}*")):
            if aside.name.endswith(INDEX_SUFFIXES):
                continue
            out.append({
                "kind": "index_set_aside", "seq": None, "offset": None, "expected": "no index set aside",
                "observed": str(aside),
                "message": f"{aside} is an index a redaction could neither open nor delete, so it set it aside; it may "
                f"still hold the erased text of the redacted records (seq {redacted}); delete it and its -wal and -shm "
                "files (with sudo if another user owns them); the log is sound",
            })
        return out

    def catch_up_evidence(self) -> None:
        """Bring an existing index up to the log now, so a head it had read and the log lost is anchored first.

        Before an acceptance: otherwise the next read would find the index
        built from the old log and record its head after the acceptance,
        as new evidence. Also after ``retained sync`` pulled records into a
        mirror whose index exists (``sync.runner``), for readers that never
        catch up (the brief).
        """
        if not self.present():
            return
        try:
            self.index.catch_up()
        except (RetainedError, sqlite3.Error, OSError):
            pass  # an unusable index holds no evidence this can read
