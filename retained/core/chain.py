"""The chain verifier: walks lines in file order and reports every finding.

It checks, for each line: it parses (L1), its bytes are canonical (L1), its
hash recomputes, its ``prev`` names the previous chained record's hash (L3)
and its ``seq`` follows on (L2). It never stops at the first problem: a
verifier that gives up hides the second one. `walk` verifies any lines (a
scan, an import file), `verify_file` a log read in byte ranges; both link with
the same `_Linker`, and tests/unit/test_chain_parallel.py holds the two to the
same report on every kind of damage.
"""

from __future__ import annotations

import bisect
import os
from array import array
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from typing import Any, cast

import blake3

from retained.core import pool, record
from retained.core.log import Line, Log
from retained.errors import InvariantBroken

_PROBLEM_KINDS = {
    "not JSON": "not_json",
    "bytes are not canonical": "not_canonical",
    "hash does not recompute": "hash_mismatch",
    "chain fields missing or malformed": "chain_fields_malformed",
}


class Run(namedtuple("Run", "offset seq lengths hashes")):
    """Consecutive records the walk verified, each linking to the one before, as ``verify_file``'s ``check`` sees them.

    The first starts at byte ``offset`` and holds ``seq``; ``lengths`` are
    their line lengths (an ``array("Q")``), ``hashes`` their hashes
    concatenated (64 characters each). A run costs the check one item, not
    one per line.
    """

    __slots__ = ()

    @property
    def end(self) -> int:
        return self.offset + sum(self.lengths)


def _short(h: str | None) -> str:
    return (h[:12] + "...") if h else "none"


@dataclass
class ChainReport:
    records: int = 0
    redacted: list[int] = field(default_factory=list)
    foreign: list[int] = field(default_factory=list)
    damaged: int = 0
    head_seq: int = 0
    head_hash: str = record.ZERO_HASH
    findings: list[dict[str, Any]] = field(default_factory=list)
    torn_tail: dict[str, Any] | None = None
    bytes: int = 0
    # The hashes of the chained lines holding each watched seq (``watch``
    # of ``walk`` / ``verify_file``): where anchors are looked up.
    watched: dict[int, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def first_bad_seq(self) -> int | None:
        return next((f["seq"] for f in self.findings if f.get("seq") is not None), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "records": self.records,
            "head": {"seq": self.head_seq, "hash": self.head_hash},
            "bytes": self.bytes,
            "redacted": self.redacted,
            "foreign": self.foreign,
            "damaged": self.damaged,
            "torn_tail": self.torn_tail,
            "first_bad_seq": self.first_bad_seq,
            "findings": self.findings,
        }


def walk(lines: Iterable[Line], log_name: str = "log.jsonl", *, watch: Iterable[int] = ()) -> ChainReport:
    """Verify a sequence of lines (a whole log, oldest first), as ``verify_file`` verifies a file.

    The lines are turned into items and linked exactly as a range of the
    file is (`_items`, `_link`), a batch of ``WALK_BATCH`` lines at a time.
    ``watch``: seqs whose chained lines' hashes the report keeps in ``watched``.
    """
    linker = _Linker(log_name, watch)
    lines = iter(lines)
    # Each batch is consumed as it is read: only its compact items are held, never its lines.
    while items := _items(islice(lines, WALK_BATCH)):
        _link(linker, items)
    return linker.finish()


class _Linker:
    """The sequential half of the walk: links classified lines in file order.

    Fed one line at a time (``add``) or, for a run of records already known
    to link one to the next, its first line and then the rest in one step
    (``extend``). Both feeds give the same report line for line.

    After damage: a damaged line that still claims a seq and hash is a valid
    predecessor for the next line too, so one flipped byte is reported as one
    finding (at the record it hit), not as a cascade; and the next append's
    rule (link to the last *valid* record) is accepted as well.
    """

    def __init__(self, log_name: str, watch: Iterable[int] = ()) -> None:
        self.log_name = log_name
        self.report = ChainReport()
        self.watch = frozenset(watch)
        self._watch_sorted = sorted(self.watch)
        self.last_seq, self.last_hash = 0, record.ZERO_HASH
        # Predecessors the next chained line may link to: the last valid record,
        # plus any damaged lines after it that still claim a seq and hash.
        self.candidates: list[tuple[int, str]] = [(0, record.ZERO_HASH)]
        # Targets named by redaction records: each must be redacted by the end,
        # or an erasure was interrupted (running it again finishes it).
        self.redaction_targets: dict[int, int] = {}

    def add(
        self,
        offset: int,
        length: int,
        status: str,
        seq: int | None,
        h: str | None,
        prev: str | None,
        problem: str | None,
        redacts: int | None,
    ) -> None:
        """One line: ``prev`` is the record's for a chained line; ``redacts``
        the target of a redaction record (a record, not a redacted line)."""
        report = self.report
        report.bytes = offset + length
        if self.watch and seq in self.watch and (status == record.RECORD or status == record.REDACTED):
            report.watched.setdefault(seq, []).append(h)  # type: ignore[arg-type]
        if status == record.RECORD and seq == self.last_seq + 1 and prev == self.last_hash:
            # The common case, decided without building anything.
            report.records += 1
            if redacts is not None:
                self.redaction_targets[redacts] = seq
            self.last_seq, self.last_hash = seq, h  # type: ignore[assignment]
            self.candidates = [(seq, h)]  # type: ignore[list-item]
            return
        where = f"{self.log_name} byte {offset}"
        if status == record.TORN:
            report.torn_tail = {
                "offset": offset,
                "bytes": length,
                "note": "unterminated last line: never acknowledged; the next append sets it aside, then truncates",
            }
            return
        if status == record.FOREIGN:
            report.foreign.append(offset)
            return
        if status == record.DAMAGED:
            report.damaged += 1
            kind = _PROBLEM_KINDS.get(problem or "", "damaged_line")
            label = f"seq {seq}" if seq is not None else "a line"
            report.findings.append(
                {
                    "kind": kind,
                    "seq": seq,
                    "offset": offset,
                    "message": f"{label} ({where}): {problem}; the line is kept in place and skipped by the chain",
                }
            )
            if seq is not None and h is not None:
                self.candidates.append((seq, h))
            return
        # A chained line (record or redacted) always has its seq and hash.
        seq, h = cast(int, seq), cast(str, h)
        last_seq, last_hash = self.last_seq, self.last_hash
        if not any(s + 1 == seq and c == prev for s, c in self.candidates):
            problems = []
            if prev != last_hash and not any(c == prev for _, c in self.candidates):
                problems.append(
                    f"prev is {_short(prev)}, expected {_short(last_hash)} (hash of seq {last_seq})"
                    if last_seq
                    else f"prev is {_short(prev)}, expected 64 zeros (the first record)"
                )
            if seq != last_seq + 1:
                if seq > last_seq + 1:
                    problems.append(f"seq jumps from {last_seq} to {seq}")
                else:
                    problems.append(f"seq {seq} follows seq {last_seq} (out of order or repeated)")
            kind = "prev_mismatch" if problems and problems[0].startswith("prev") else "seq_gap"
            report.findings.append(
                {
                    "kind": kind,
                    "seq": seq,
                    "offset": offset,
                    "expected": last_hash,
                    "observed": prev,
                    "message": f"chain broken at seq {seq} ({where}): " + "; ".join(problems or ["does not link"]),
                }
            )
        report.records += 1
        if redacts is not None:
            self.redaction_targets[redacts] = seq
        if status == record.REDACTED:
            report.redacted.append(seq)
        self.last_seq, self.last_hash = seq, h
        self.candidates = [(seq, h)]

    def extend(
        self, count: int, last_seq: int, last_hash: str, end: int, redactions: list[tuple[int, int]], hashes: str = ""
    ) -> None:
        """``count`` more records after the last one added, each linking to the one before.

        Every one of them takes ``add``'s common case, so only the totals
        change; ``redactions`` is ``(target, seq)`` for the run, in file order;
        ``hashes`` the run's hashes concatenated, from its first record (the
        one ``add`` took), for the watched seqs among them.
        """
        if last_seq != self.last_seq + count:
            raise InvariantBroken(f"chain walk: a run of {count} records after seq {self.last_seq} ends at seq {last_seq}")
        if self.watch:
            first = last_seq - count  # the seq `add` took, at hashes[0:64]
            for s in self._watch_sorted[bisect.bisect_right(self._watch_sorted, first):]:
                if s > last_seq:
                    break
                k = 64 * (s - first)
                self.report.watched.setdefault(s, []).append(hashes[k : k + 64])
        self.report.records += count
        for target, by in redactions:
            self.redaction_targets[target] = by
        self.last_seq, self.last_hash = last_seq, last_hash
        self.candidates = [(last_seq, last_hash)]
        self.report.bytes = end

    def finish(self) -> ChainReport:
        report = self.report
        report.head_seq, report.head_hash = self.last_seq, self.last_hash
        done = set(report.redacted)
        for target, by in sorted(self.redaction_targets.items()):
            if target not in done:
                report.findings.append(
                    {
                        "kind": "redaction_pending",
                        "seq": target,
                        "offset": None,
                        "message": f"seq {by} records the erasure of seq {target}, but seq {target} still holds its content; "
                        f"run `retained redact {target} --reason ...` again to finish it",
                    }
                )
        return report


# -- lines as items, linked in order -------------------------------------------
#
# Classifying a line (parse, canonical bytes, content digest, chain hash) needs
# nothing but the line, so a file's byte ranges are classified apart (in worker
# processes when the caller asks for them); only the linking (seq, prev) is
# sequential, and runs in the caller. Lines become compact items, not records:
#
#   (_RUN, offset, seq, prev, count, lengths, hashes, redactions, end)
#       ``count`` records from ``offset`` on, each linking to the one before;
#       ``lengths`` their line lengths (array "Q" bytes), ``hashes`` their
#       hashes concatenated (64 characters each), ``redactions`` the
#       ``(target, seq)`` of the redaction records among them.
#   (_LINE, offset, length, status, seq, hash, prev, problem, None, raw)
#       any other line (redacted, foreign, damaged, torn), as ``_Linker.add``
#       takes it, with its bytes (few, and a second check may need them).

_RUN = 0
_LINE = 1

# Ranges of at most this many bytes, one task each: large enough that a range
# costs far more than handing it over, small enough that the ranges in flight
# (two per worker) stay a few MiB each.
RANGE_BYTES = 8 * 1024 * 1024
# Lines `walk` turns into items at a time: the items of one batch are held at once.
WALK_BATCH = 4096


def _classify_range(path: str, start: int, stop: int, tally: type | None = None) -> list[tuple[Any, ...]]:
    """The items for the lines in ``[start, stop)`` of the file at ``path`` (the pool's task; see ``pool.range_lines``).

    With ``tally`` (a class; see ``verify_file``), one new instance counts
    every record line (parsed, with its length) and is the last item.
    """
    parts, tail = pool.range_lines(path, start, stop)
    counter = tally() if tally is not None else None
    items = _items(_classified(parts, start), counter)
    if tail:
        offset = start + sum(len(raw) + 1 for raw in parts)
        items.append((_LINE, offset, len(tail), record.TORN, None, None, None, "unterminated last line", None, b""))
    if counter is not None:
        items.append(counter)
    return items


def _classified(parts: list[bytes], offset: int) -> Iterator[tuple[Any, ...]]:
    """Each complete line of a range as `_items` takes it: a `Line`'s fields, in its order."""
    classify = record.classify
    hasher = blake3.blake3()  # lent to classify for every line of the range
    for raw in parts:
        line = raw + b"\n"
        yield offset, line, *classify(raw, hasher)
        offset += len(line)


def _run(offset: int, seq: int, prev: str, count: int, lengths: array[int], hashes: list[str],
         redactions: list[tuple[int, int]], end: int) -> tuple[Any, ...]:
    """A `_RUN` item (see above)."""
    return (_RUN, offset, seq, prev, count, lengths.tobytes(), "".join(hashes), redactions, end)


def _items(lines: Iterable[tuple[Any, ...]], counter: Any = None) -> list[tuple[Any, ...]]:
    """The items (see above) for classified lines: `Line` s, or tuples of its fields ``(offset, raw, status, record, seq, hash, problem)``.

    The one place lines become runs: a file's ranges (`_classify_range`) and
    any lines (`walk`) alike. ``counter.add(record, length)`` is called for
    each record line.
    """
    RECORD, REDACTED = record.RECORD, record.REDACTED
    items: list[tuple[Any, ...]] = []
    # The open run's fields; plain locals (no closure over them), as this loop runs once per line.
    run_offset = run_seq = run_count = 0
    run_prev = ""
    last_seq, last_hash = -1, ""
    lengths = array("Q")
    hashes: list[str] = []
    redactions: list[tuple[int, int]] = []
    end = 0
    for offset, raw, status, obj, seq, h, problem in lines:
        length = len(raw)
        if status == RECORD:
            # A record always carries its seq and hash (classify's contract).
            prev = obj["prev"]
            if not (run_count and seq == last_seq + 1 and prev == last_hash and offset == end):
                if run_count:
                    items.append(_run(run_offset, run_seq, run_prev, run_count, lengths, hashes, redactions, end))
                run_offset, run_seq, run_prev, run_count = offset, seq, prev, 0
                lengths, hashes, redactions = array("Q"), [], []
            run_count += 1
            lengths.append(length)
            hashes.append(h)
            if "redacts" in obj and obj.get("kind") == "redaction" and type(obj["redacts"]) is int:
                redactions.append((obj["redacts"], seq))
            last_seq, last_hash = seq, h
            if counter is not None:
                counter.add(obj, length)
        else:
            if run_count:
                items.append(_run(run_offset, run_seq, run_prev, run_count, lengths, hashes, redactions, end))
                run_count = 0
            prev = obj["prev"] if status == REDACTED else None
            items.append((_LINE, offset, length, status, seq, h, prev, problem, None, raw))
        end = offset + length
    if run_count:
        items.append(_run(run_offset, run_seq, run_prev, run_count, lengths, hashes, redactions, end))
    return items


def verify_file(
    log: Log,
    *,
    workers: int = 0,
    range_bytes: int = RANGE_BYTES,
    parallel_min_bytes: int = pool.PARALLEL_MIN_BYTES,
    mp_context: Any = None,
    check: Callable[[Iterator[tuple[Any, ...]]], Any] | None = None,
    stop: int | None = None,
    watch: Iterable[int] = (),
    progress: Callable[[int, int], None] | None = None,
    tally: Any = None,
) -> ChainReport:
    """The report ``walk(log.scan(stop=stop), watch=watch)`` gives, the file read in ranges.

    The file is cut at line starts into ranges of at most ``range_bytes``,
    read up to ``stop`` (default: its size when the walk begins; never past
    its size), so lines appended meanwhile are not judged. Each range is
    classified by ``pool.map_ranges`` (in this process unless ``workers``
    is 2 or more and the log at least ``parallel_min_bytes``; ``mp_context``
    as there) and linked here in file order; memory holds the ranges in
    flight, not the log.

    ``check(places)``, if given, is called once with an iterator over every
    complete line in file order, so that a second check reads the log once
    with the walk, in this process while any workers classify the ranges
    ahead (``Store.verify`` checks the index so): a `Run` for consecutive
    records the walk verified (one item for many lines), ``(offset, raw)``
    (the line's bytes) for any other line. It may stop early; the walk links
    the rest after it returns.

    ``progress(done_bytes, total_bytes)``, if given, is called after each
    range is linked.

    ``tally``, if given, counts what the records hold where they are
    classified (``stats`` counts kinds, scopes... so): an object whose class
    can be made with no arguments (in a worker too, so defined at module
    level), with ``add(record, length)`` for each record line (not redacted
    ones) and ``merge(other)``. Each range gets a new one, merged into
    ``tally`` in file order.
    """
    linker = _Linker(log.path.name, watch)
    f = log.open_read()
    if f is None:
        if check is not None:
            check(iter(()))
        return linker.finish()
    with f:
        size = os.fstat(f.fileno()).st_size
        if stop is not None:
            size = min(size, stop)
        bounds, workers = pool.plan_ranges(f, size, workers, range_bytes, parallel_min_bytes)
    task = _classify_range if tally is None else partial(_classify_range, tally=type(tally))
    results = pool.map_ranges(task, str(log.path), bounds, workers, mp_context)
    # Closed on the way out, also when the check raises: that ends the workers now, not whenever the generator is collected.
    with closing(results):
        ranges = results if tally is None else _tallied(results, tally)
        ranges = ranges if progress is None else _reporting(ranges, bounds, progress)
        if check is None:
            for items in ranges:
                _link(linker, items)
            return linker.finish()
        places = _places(linker, ranges)
        check(places)
        for _ in places:
            pass  # link what the check left
        return linker.finish()


def _reporting(ranges: Iterator[list[tuple[Any, ...]]], bounds: list[int],
               progress: Callable[[int, int], None]) -> Iterator[list[tuple[Any, ...]]]:
    """``ranges`` as they are, calling ``progress`` with the end of each once its consumer asks for the next."""
    for stop, items in zip(bounds[1:], ranges, strict=True):
        yield items
        progress(stop, bounds[-1])


def _tallied(ranges: Iterator[list[Any]], tally: Any) -> Iterator[list[tuple[Any, ...]]]:
    """``ranges`` without each one's tally (its last item), merged into ``tally`` in file order."""
    for items in ranges:
        tally.merge(items.pop())
        yield items


def _link(linker: _Linker, items: list[tuple[Any, ...]]) -> None:
    for item in items:
        if item[0] == _RUN:
            _, offset, seq, prev, count, lengths, hashes, redactions, end = item
            linker.add(offset, array("Q", lengths[:8])[0], record.RECORD, seq, hashes[:64], prev, None, None)
            linker.extend(count - 1, seq + count - 1, hashes[-64:], end, redactions, hashes)
        else:
            linker.add(*item[1:9])


def _places(linker: _Linker, ranges: Iterable[list[tuple[Any, ...]]]) -> Iterator[tuple[Any, ...]]:
    """Link each range's items in order, yielding its runs and other complete lines (see ``verify_file``)."""
    for items in ranges:
        _link(linker, items)
        for item in items:
            if item[0] == _RUN:
                yield Run(item[1], item[2], array("Q", item[5]), item[6])
            elif item[3] != record.TORN:
                yield item[1], item[9]
