"""What a write checks before the one append (``Store.append``) and adds after it; the write verbs are a few lines over these.

Before: the write guard's pass, the size limit first (`guarded`), the seqs
named (`seq_list`, `require`), a correction's scope (`scope_of`), a batch's
items, a checkpoint's and a retraction's content. After: the guard's notes
and the routine anchor (`AfterAppend`), the related records (`Related`, now or at the next read).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from retained import limits
from retained.core import anchors, record
from retained.errors import RECORD_LIMIT_SETTING, InvalidRecord, NotFound, RecordTooLarge, RetainedError

if TYPE_CHECKING:
    from concurrent.futures import Future

    from retained.audit import Parts
    from retained.index.writer import Index
    from retained.replies import Entry, Notes, WriteProof, WrittenRelated

_NO_NOTES: Notes = {}
# The related steps one key (an MCP session) may leave for its next read; past this, the oldest are dropped
# and the read says how many: a read runs each that is left (about a millisecond each at 10k records).
RELATED_LATER_MAX = 32
RELATED_LATER_KEYS = 256  # sessions whose steps are kept; past this, the longest unused one's are dropped
_BATCH_ARGS = frozenset({"text", "kind", "scope", "source", "body", "fields", "supersedes", "client_op_id"})


class Guarded(NamedTuple):
    """A record's content as the write guard left it, and what the write's reply should say of it."""

    content: record.Content
    notes: Notes


def guarded(guard: Any, content: record.Content, record_bytes_max: int) -> Guarded:
    """``Store.prepare``: the size limit, then the guard (``untouched``, else ``apply``); see there."""
    fields = content.fields
    try:
        encoded: bytes | None = record.orjson.dumps(fields)
    except TypeError:
        # Not encodable (a lone surrogate): refused here, naming the field,
        # so an import refuses the file before any batch is written.
        record.encode_checked(fields)
        encoded = None  # left to seal()
    if encoded is not None and len(encoded) > record_bytes_max:
        raise RecordTooLarge(f"record is at least {len(encoded)} bytes encoded, over the limit of {record_bytes_max} "
                             f"bytes; split it, or raise the limit ({RECORD_LIMIT_SETTING}); nothing was written",
                             observed=len(encoded), expected=record_bytes_max)
    if encoded is not None and guard.untouched(fields, encoded):
        return Guarded(content, _NO_NOTES)
    result = guard.apply(fields)
    notes: Notes = {}
    if result.private_spans_removed:
        notes["private_spans_removed"] = result.private_spans_removed
    if result.redactions:
        notes["redactions"] = result.redactions
    return Guarded(record.Content(result.fields), notes)


def check_guarded(items: list[Guarded]) -> None:
    """Refuse an item ``Store.append`` is handed that did not come from ``Store.prepare``."""
    for i, item in enumerate(items):
        if not isinstance(item, Guarded):
            raise InvalidRecord(f"item {i}: {type(item).__name__} is not prepared content; pass it through "
                                "Store.prepare first; nothing was written", path=f"[{i}]")


def batch(items: list[dict[str, Any]], prepare: Callable[[record.Content], Guarded]) -> list[Guarded]:
    """``Store.write_batch``'s items, each checked and guarded; the first bad one refuses the batch, naming it."""
    prepared = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            raise InvalidRecord(f"batch item {i}: needs a string text; nothing was written", path=f"[{i}].text")
        unknown = set(item) - _BATCH_ARGS
        if unknown:
            raise InvalidRecord(f"batch item {i}: unknown argument {sorted(unknown)[0]!r}; put extra data in fields; "
                                "nothing was written", path=f"[{i}]")
        try:
            prepared.append(prepare(record.make_content(**item)))
        except InvalidRecord as exc:
            raise type(exc)(f"batch item {i}: {exc.message}", **exc.fields) from exc
    return prepared


def checkpoint(label: Any, summary: Any, scope: str | None) -> record.Content:
    """``Store.checkpoint``'s record: ``label`` as its text, ``summary`` as its body."""
    if not isinstance(label, str) or not label.strip():
        raise InvalidRecord("field label: must be a non-empty string; nothing was written", path="label")
    if summary is not None and not isinstance(summary, str):
        raise InvalidRecord("field summary: must be a string; nothing was written", path="summary")
    return record.make_content(text=label, kind="checkpoint", body=summary, scope=scope, store_kind=True)


def retraction(seqs: Any, reason: Any, get: Callable[..., list[Entry]]) -> record.Content:
    """``Store.forget``'s record: a retraction of ``seqs`` (each must exist) saying why."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidRecord("field reason: must be a non-empty string saying why; nothing was written", path="reason")
    targets = seq_list(seqs, "ids")
    require(get, targets, "ids")
    return record.make_content(text=None, kind="retract", fields={"retracts": targets, "reason": reason}, store_kind=True)


class AfterAppend:
    """What follows a Store's appends: the head recorded routinely outside it, and once a warning if others may write it."""

    def __init__(self, directory: Path, anchor_dir: Path | None, every: tuple[int, float]) -> None:
        # Writes record the head routinely (records, seconds): see anchors.Routine.
        self.routine = None if anchor_dir is None else anchors.Routine(anchor_dir, directory, *every)
        self.permissions_checked = False

    def proofs(self, store: Parts, proofs: list[WriteProof], items: list[Guarded]) -> list[WriteProof]:
        """The write's proofs, each with what the guard did (its notes) and any warning of this Store's first write."""
        out: list[WriteProof] = [{**proof, **item.notes} if item.notes else proof
                                 for proof, item in zip(proofs, items, strict=True)]
        written = [p for p in proofs if not p["duplicate"]]
        if self.routine is not None and written:
            self.routine.after(written[-1]["seq"], written[-1]["hash"], written[-1]["offset"] + written[-1]["length"])
        if not self.permissions_checked:
            self.permissions_checked = True
            from retained.audit import permission_notices

            notices = permission_notices(store)
            if notices:
                for proof in out:
                    proof["notices"] = [*proof.get("notices", ()), *notices]
        return out


def seq_list(seqs: Any, path: str) -> list[int]:
    """``seqs`` (one seq or a non-empty list of them) checked; InvalidRecord names ``path``."""
    if isinstance(seqs, int) and not isinstance(seqs, bool):
        seqs = [seqs]
    if not isinstance(seqs, (list, tuple)) or not seqs:
        raise InvalidRecord(f"field {path}: must be a non-empty list of seq numbers", path=path)
    for s in seqs:
        if type(s) is not int or not 1 <= s <= limits.SEQ_MAX:
            raise InvalidRecord(f"field {path}: {s!r} is not a seq (a whole number from 1 to {limits.SEQ_MAX})", path=path)
    return list(seqs)


def require(get: Callable[..., list[Entry]], seqs: list[int], path: str) -> list[Entry]:
    """The records ``seqs`` name (read with ``get``); NotFound (nothing written) when one does not exist."""
    entries = get(seqs, missing_ok=True)
    found = {e["seq"] for e in entries}
    missing = [s for s in seqs if s not in found]
    if missing:
        raise NotFound(f"field {path}: no record with seq {missing[0]}; nothing was written; see `retained list`",
                       seq=missing[0], path=path)
    return entries


def scope_of(targets: list[Entry]) -> tuple[str | None, str]:
    """The scope a correction without one keeps from the records it supersedes, and the notice saying what was done."""
    scopes = sorted({s for s in (e["record"].get("scope") for e in targets) if isinstance(s, str)})
    seqs = ", ".join(str(e["seq"]) for e in targets)
    if len(scopes) == 1 and all(isinstance(e["record"].get("scope"), str) for e in targets):
        return scopes[0], f"scope {scopes[0]!r} kept from the record(s) it supersedes ({seqs})"
    if not scopes:
        return None, ""
    return None, (f"no scope: the records it supersedes ({seqs}) have different scopes ({', '.join(map(repr, scopes))} "
                  "or none); pass scope= to place it")


class Related:
    """A Store's writes and their ``related`` step: counts the steps under way, since they may run in any order.

    A write may leave its step for later (``later``: a key, such as the MCP
    session that wrote): the step is kept, at most `RELATED_LATER_MAX` per
    key, and runs when the key's next read asks for it (`written`). The MCP
    server's writes do so: the step then costs a write nothing (issue 31),
    and the read that follows says what the writes may correct.
    """

    def __init__(self) -> None:
        self.running = 0
        self._counting = threading.Lock()
        # After the first step (the index open), a lone write's terms are looked up beside its fsync.
        self.warm = False
        # The steps left for later, by key, the least recently used first (at most RELATED_LATER_KEYS keys).
        self._later: OrderedDict[Any, _Later] = OrderedDict()

    def write(self, append: Callable[[], WriteProof], index: Callable[[], Index], text: str, scope: str | None,
              links: bool, kept: str | None, related: bool, later: Any = None) -> WriteProof:
        """``append()``'s proof with ``kept`` (``scope_of``'s notice) and, if ``related``, the related records (``hint``);
        with ``later`` too, the step is kept for ``later``'s next `written` instead."""
        now = related and later is None
        ahead = None
        if now:
            with self._counting:
                self.running += 1
                alone = self.running == 1
        try:
            if now and alone and self.warm:
                ahead = look_ahead(index, text, scope)
            proof = append()
            if kept:
                proof["notices"] = [*proof.get("notices", ()), kept]
            if related and not proof.get("duplicate"):
                if not now:
                    # The step reads only the text's first limits.RELATED_TEXT_CHARS characters; keep no more.
                    self._keep(later, (proof["seq"], proof["offset"], proof["ts"], text[: limits.RELATED_TEXT_CHARS],
                                       scope, links))
                    return proof
                found = hint(index, proof, text, scope, links, self.running > 1)
                self.warm = True
                if kept and found.get("notices"):
                    found["notices"] = [*proof["notices"], *found["notices"]]
                proof.update(cast("WriteProof", found))  # related, notices
            return proof
        finally:
            # The look-ahead ends with the write: never left to run on a store closed after it.
            if ahead is not None and not ahead.cancel():
                ahead.result()
            if now:
                with self._counting:
                    self.running -= 1

    def _keep(self, key: Any, step: tuple[int, int, str, str, str | None, bool]) -> None:
        with self._counting:
            kept = self._later.get(key)
            if kept is None:
                kept = self._later[key] = _Later()
            self._later.move_to_end(key)  # the most recently used
            if len(self._later) > RELATED_LATER_KEYS:
                self._later.popitem(last=False)
            kept.steps.append(step)
            if len(kept.steps) > RELATED_LATER_MAX:
                del kept.steps[0]
                kept.dropped += 1

    def written(self, index: Callable[[], Index], key: Any) -> WrittenRelated | None:
        """The steps ``key``'s writes left for later, run now, oldest first: each write that looks like it may correct
        earlier records, and how many steps were dropped (over `RELATED_LATER_MAX`); None when none was left."""
        with self._counting:
            kept = self._later.pop(key, None)
            if kept is None:
                return None
            self.running += 1
        try:
            writes: list[dict[str, Any]] = []
            for seq, offset, ts, text, scope, links in kept.steps:
                found = hint(index, {"seq": seq, "offset": offset, "ts": ts}, text, scope, links, self.running > 1)
                if found.get("related"):
                    writes.append({"seq": seq, "related": found["related"], "notice": _notice(found["related"], seq)})
            self.warm = True
            return {"writes": writes, "checked": len(kept.steps), "not_checked": kept.dropped}
        finally:
            with self._counting:
                self.running -= 1


class _Later:
    """The related steps one key's writes left for later (``Related.write`` with ``later``), and how many were dropped."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, int, str, str, str | None, bool]] = []
        self.dropped = 0


def look_ahead(index: Callable[[], Index], text: str, scope: str | None) -> Future[None] | None:
    """``Search.look_ahead`` (its terms' rows looked up on a worker thread), or None when the index cannot."""
    try:
        return index().searcher.look_ahead(text, scope)
    except (sqlite3.Error, OSError, RetainedError):
        return None


def hint(index: Callable[[], Index], proof: Mapping[str, Any], text: str, scope: str | None, links: bool,
         concurrent: bool) -> dict[str, Any]:
    """``related`` (earlier records on the same subject, see ``Index.related``) and a notice naming them.

    Runs after the acknowledgement; an index that cannot answer costs the
    reply only this hint, never the write. The new record (``proof``;
    ``links``: it supersedes others) is left to a later catch-up;
    ``concurrent``: other writes asking for this step are under way here.
    """
    try:
        found = index().related(proof["seq"], text, scope=scope, before=proof["offset"], ts=proof["ts"],
                                links=links, concurrent=concurrent)
    except (sqlite3.Error, OSError, RetainedError):
        return {}
    if not found:
        return {}
    return {"related": found, "notices": [_notice(found)]}


def _notice(related: list[dict[str, Any]], written: int | None = None) -> str:
    """What to do about the earlier records a write may correct: said in its own reply, or of ``written`` by a later read."""
    seqs = ", ".join(str(r["seq"]) for r in related)
    if written is None:
        return (f"earlier record(s) {seqs} look like the same subject; if this corrects them, "
                f"write it with supersedes=[{seqs}] (they then leave search)")
    return (f"your write {written}: earlier record(s) {seqs} look like the same subject; if {written} corrects them, "
            f"write the correction with supersedes=[{seqs}, {written}] (they then leave search)")
