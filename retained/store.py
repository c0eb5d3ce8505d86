"""The facade callers use: ``Store(path).write / checkpoint / get / list / verify / head``.

Each method is a few lines over the log (and, where present, the index). The
CLI and the MCP server hold no storage logic: they call these.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import chain, limits, record
from .errors import InvalidRecord, NotFound, RecordTooLarge, RetainedError
from .log import Log

DEFAULT_CLIENT = {"name": "retained", "version": "0.1.0"}


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
    ) -> None:
        self.directory = Path(directory)
        self.client = dict(client or DEFAULT_CLIENT)
        # The write guard (retained.guard.Guard) runs on every caller string
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
        self.log = Log(self.directory, record_bytes_max=record_bytes_max, lock_wait_s=lock_wait_s)
        self._index: Any = None  # the derived index (retained/index.py), opened on first use

    def close(self) -> None:
        self.log.close()
        if self._hybrid is not None:
            self._hybrid.close()
            self._hybrid = None
        if self._index is not None:
            self._index.close()
            self._index = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -----------------------------------------------------------

    @property
    def guard(self) -> Any:
        if self._guard is None:
            from .guard import Guard

            self._guard = Guard("refuse")
        return self._guard

    def _guarded(self, content: record.Content) -> tuple[record.Content, dict[str, Any]]:
        """Apply the write guard; returns the content to store and what the reply should say.

        A record already over the size limit is refused first: scanning 16 MiB
        for secrets only to refuse it afterwards would cost seconds. The one
        encoding serves both the size test and the guard's fast test.
        """
        fields = content.fields
        try:
            encoded: bytes | None = record.orjson.dumps(fields)
        except TypeError:
            encoded = None  # left to seal(), which names the bad field
        if encoded is not None and len(encoded) > self.log.record_bytes_max:
            raise RecordTooLarge(
                f"record is at least {len(encoded)} bytes encoded, over the limit of {self.log.record_bytes_max} bytes; "
                "split it or raise record_bytes_max; nothing was written",
                observed=len(encoded),
                expected=self.log.record_bytes_max,
            )
        if encoded is not None and self.guard.untouched(fields, encoded):
            return content, {}
        result = self.guard.apply(fields)
        notes: dict[str, Any] = {}
        if result.private_spans_removed:
            notes["private_spans_removed"] = result.private_spans_removed
        if result.redactions:
            notes["redactions"] = result.redactions
        return record.Content(result.fields), notes

    def _append(self, content: record.Content, client: dict[str, Any] | None) -> dict[str, Any]:
        content, notes = self._guarded(content)
        if self.log.unusable:
            # A failed write poisoned the handle; start again from the file.
            self.log.reopen()
        # The index is derived and not on the acknowledgement path: every read
        # catches it up from the log first (L5), so a write only appends.
        proof = self.log.append(content, client=client or self.client)
        if self._follow and self.embed_settings.get("RETAINED_EMBED_URL"):
            self.hybrid.kick()  # returns at once: the vector follows the acknowledgement
        return {**proof, **notes} if notes else proof

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
        if supersedes:
            self._require(_seq_list(supersedes, "supersedes"), "supersedes")
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
        proof = self._append(content, client)
        if related and not proof.get("duplicate"):
            proof.update(self._related(proof["seq"], text, scope))
        return proof

    def _related(self, seq: int, text: str, scope: str | None) -> dict[str, Any]:
        """``related`` (earlier records on the same subject, see ``Index.related``) and a notice naming them.

        Runs after the acknowledgement; an index that cannot answer costs the
        reply only this hint, never the write.
        """
        try:
            found = self.index.related(seq, text, scope=scope)
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
        contents = []
        all_notes: list[dict[str, Any]] = []
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
                content, notes = self._guarded(record.make_content(**item))
            except InvalidRecord as exc:
                raise type(exc)(f"batch item {i}: {exc.message}", **exc.fields) from exc
            contents.append(content)
            all_notes.append(notes)
        if self.log.unusable:
            self.log.reopen()
        proofs = self.log.append_batch(contents, client=client or self.client)
        return [{**p, **n} if n else p for p, n in zip(proofs, all_notes)]

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
        return self._append(content, client)

    def forget(self, seqs: list[int], reason: str, *, client: dict[str, Any] | None = None) -> dict[str, Any]:
        """Append a retraction naming ``seqs``: they leave search and the brief, stay readable."""
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidRecord("field reason: must be a non-empty string saying why; nothing was written", path="reason")
        targets = _seq_list(seqs, "ids")
        self._require(targets, "ids")
        content = record.make_content(
            text=None, kind="retract", fields={"retracts": targets, "reason": reason}, store_kind=True
        )
        return self._append(content, client)

    def _require(self, seqs: list[int], path: str) -> None:
        found = {e["seq"] for e in self.get(seqs, missing_ok=True)}
        missing = [s for s in seqs if s not in found]
        if missing:
            raise NotFound(
                f"field {path}: no record with seq {missing[0]}; nothing was written; see `retained list`",
                seq=missing[0],
                path=path,
            )

    def redact(self, seq: int, reason: str, *, client: dict[str, Any] | None = None) -> dict[str, Any]:
        """Erase one record's content for good; the chain still verifies end to end.

        Appends a ``redaction`` record, rewrites the target line into its
        redacted form (temporary file, fsync, atomic rename, directory fsync),
        scrubs quarantined tails, and rebuilds the index with SQLite's
        secure_delete so no erased term survives in its pages.
        """
        from . import redaction

        result = redaction.redact(self.log, seq, reason, client=client or self.client).to_dict()
        result["index"] = self._scrub_index()
        return result

    def _scrub_index(self) -> str:
        index_path = self.directory / "index.sqlite3"
        if not index_path.exists():
            return "absent"
        from .index import Index

        idx = Index(self.log)
        try:
            db = idx.connection()
            db.execute("PRAGMA secure_delete=ON")
            idx.rebuild()
            from .hybrid import prune

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
        for line in self.log.scan() if remaining else ():
            if line.chained and line.seq in remaining:
                found[line.seq] = _entry(line)
                remaining.discard(line.seq)
                if not remaining:
                    break
        if remaining and not missing_ok:
            s = min(remaining)
            raise NotFound(f"no record with seq {s}; see `retained list` for what exists", seq=s)
        return [found[s] for s in wanted if s in found]

    def list(self, *, limit: int = 20, kind: str | None = None, scope: str | None = None) -> dict[str, Any]:
        """Newest records first, with how many more match (I2)."""
        if type(limit) is not int or limit < 0:
            raise InvalidRecord("field limit: must be a whole number from 0", path="limit")
        if self.log.exists():
            try:
                # The index counts and orders without reading the whole log.
                return self.index.recent(limit, kind=kind, scope=scope)
            except (RetainedError, sqlite3.Error, OSError):
                pass  # an unusable index: the log alone answers, more slowly
        out: list[dict[str, Any]] = []
        matched = 0
        for line in self.log.scan_reverse():
            if line.status != record.RECORD:
                continue
            rec = line.record
            if kind is not None and rec.get("kind") != kind:
                continue
            if scope is not None and rec.get("scope") != scope:
                continue
            matched += 1
            if len(out) < limit:
                out.append(_entry(line))
        return {"records": out, "returned": len(out), "total_matches": matched, "left_out": {"beyond_limit": matched - len(out)}}

    # -- the index (retained/index.py) -------------------------------------

    @property
    def index(self) -> Any:
        """The derived index, opened on first use; safe to delete and rebuild."""
        if self._index is None:
            from .index import Index

            self._index = Index(self.log)
        return self._index

    def _get_indexed(self, seqs: list[int]) -> dict[int, dict[str, Any]]:
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
            from .index import Index

            empty = Index.empty_reply(query, k=k, max_tokens=max_tokens)
            empty.update(mode="lexical", mode_reason="the store has no log yet")
            return empty
        return self.hybrid.search(
            query, k=k, max_tokens=max_tokens, scope=scope,
            include_superseded=include_superseded, include_retracted=include_retracted, context=context,
        )

    @property
    def hybrid(self) -> Any:
        """Vector search beside the index (retained/hybrid.py); lexical when embeddings are off."""
        if self._hybrid is None:
            from .hybrid import from_settings

            self._hybrid = from_settings(self.index, self.embed_settings)
        return self._hybrid

    def rebuild(self, progress: Any = None) -> dict[str, Any]:
        """Drop the index and rebuild it from the log; ``progress(done_bytes, total_bytes)``."""
        return self.index.rebuild(progress)

    def brief(self, budget: int | None = None, scope: str | None = None) -> dict[str, Any]:
        """The session-start brief (see ``retained.brief.build_brief``); render it with ``brief.render_text``."""
        from . import brief

        return brief.build_brief(self.directory, brief.DEFAULT_BUDGET if budget is None else budget, scope)

    def _verify_index(self, report: dict[str, Any], lines: Any = None) -> dict[str, Any]:
        if not self.log.exists():
            return {"checked": False, "findings": 0}
        try:
            findings = self.index.verify(lines)
        except (RetainedError, sqlite3.Error) as exc:
            findings = [{"kind": "index_unusable", "seq": None, "offset": None, "expected": "a usable index",
                         "observed": str(exc), "message": f"the index cannot be read ({exc}); run `retained rebuild`"}]
        report["findings"].extend(findings)
        report["ok"] = not report["findings"]
        return {"checked": True, "findings": len(findings)}

    def head(self) -> dict[str, Any]:
        """The chain head (seq, hash): anchor it elsewhere to detect a rewritten log."""
        seq, h, end = self.log.tail()
        return {"seq": seq, "hash": h, "bytes": end, "log": str(self.log.path)}

    def verify(self) -> dict[str, Any]:
        """Walk the whole chain and report every finding (memory flat in log size)."""
        # The index check reads the lines the chain walk passes it (one read
        # of the log) while worker processes classify the next ranges; its
        # findings follow the chain's.
        index: dict[str, Any] = {"findings": []}
        report = chain.verify_file(self.log, check=lambda lines: index.update(checked=self._verify_index(index, lines))).to_dict()
        report["quarantined"] = self.log.quarantined()
        report["log"] = str(self.log.path)
        report["exists"] = self.log.exists()
        report["findings"].extend(index["findings"])
        report["ok"] = not report["findings"]
        report["index"] = index["checked"]
        if self.embed_settings.get("RETAINED_EMBED_URL") or self.embed_settings.get("RETAINED_EMBED_MODEL"):
            # Records without a current vector are reported, not failures: they
            # are backfilled, and search says when it is lexical because of them.
            try:
                report["vectors"] = self.hybrid.verify()
            except (RetainedError, sqlite3.Error) as exc:
                report["vectors"] = {"error": str(exc)}
        return report


def _seq_list(seqs: Any, path: str) -> list[int]:
    if isinstance(seqs, int) and not isinstance(seqs, bool):
        seqs = [seqs]
    if not isinstance(seqs, (list, tuple)) or not seqs:
        raise InvalidRecord(f"field {path}: must be a non-empty list of seq numbers", path=path)
    out = []
    for s in seqs:
        if type(s) is not int or s < 1:
            raise InvalidRecord(f"field {path}: {s!r} is not a seq (a whole number from 1)", path=path)
        out.append(s)
    return out
