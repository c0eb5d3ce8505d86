"""The chain verifier: walks lines in file order and reports every finding.

It checks, for each line: it parses (L1), its bytes are canonical (L1), its
hash recomputes, its ``prev`` names the previous chained record's hash (L3)
and its ``seq`` follows on (L2). It never stops at the first problem: a
verifier that gives up hides the second one.

Linking after damage: a damaged line that still claims a seq and hash is a
valid predecessor for the next line too, so one flipped byte is reported as
one finding (at the record it hit), not as a cascade; and the next append's
rule (link to the last *valid* record) is accepted as well.

Two entry points give the same report: ``walk(lines)`` over any lines (a
scan, an import file), and ``verify_file(log)``, which ``verify`` uses: the
per-line work (parse, canonical bytes, digests) needs only the line, so byte
ranges of the file are classified in worker processes, and only the linking
(seq, prev) runs in order, here. tests/unit/test_chain_parallel.py holds the
two to the same report on every kind of damage, across range boundaries.
"""

from __future__ import annotations

import bisect
import os
import sys
from array import array
from collections import namedtuple
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from typing import Any, cast

import blake3

from retained.core import record
from retained.core.files import open_read
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
        seqs = [f["seq"] for f in self.findings if f.get("seq") is not None]
        return seqs[0] if seqs else None

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
    """Verify a sequence of lines (a whole log, oldest first).

    ``watch``: seqs whose chained lines' hashes the report keeps in ``watched``.
    """
    linker = _Linker(log_name, watch)
    add = linker.add
    RECORD, REDACTION = record.RECORD, "redaction"
    for line in lines:
        rec = line.record
        redacts = None
        prev = None
        if line.status == RECORD or line.status == record.REDACTED:
            prev = rec["prev"]
            if line.status == RECORD and rec.get("kind") == REDACTION and type(rec.get("redacts")) is int:
                redacts = rec["redacts"]
        add(line.offset, len(line.raw), line.status, line.seq, line.hash, prev, line.problem, redacts)
    return linker.finish()


class _Linker:
    """The sequential half of the walk: links classified lines in file order.

    Fed one line at a time (``add``) or, for a run of records already known
    to link one to the next, its first line and then the rest in one step
    (``extend``). Both feeds give the same report line for line.
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


# -- the whole file, classified in parallel ----------------------------------
#
# Classifying a line (parse, canonical bytes, content digest, chain hash) needs
# nothing but the line, so byte ranges of the file are classified in worker
# processes; only the linking (seq, prev) is sequential, and runs in the
# caller. A worker returns compact items, not records:
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
# Below this log size the walk classifies in its own process: starting workers
# (each a new process, more so under spawn) would cost more than they save.
PARALLEL_MIN_BYTES = 8 * 1024 * 1024
# How long a worker may send nothing before its ranges are done in the calling
# process instead: far longer than any range takes, reached only by a worker
# that will never answer (stuck after a fork, say), so that none waits forever.
WORKER_STALL_S = 60.0
# How long a worker that sent its last range may take to exit before it is killed.
WORKER_EXIT_S = 5.0


def range_lines(path: str, start: int, stop: int) -> tuple[list[bytes], bytes]:
    """The complete lines of ``[start, stop)`` of the file at ``path`` (without newlines), and what follows the last newline.

    ``start`` is a line boundary; so is ``stop`` unless it is the end of the
    scan, where bytes after the last newline are a torn tail (else b"").
    One read and one split in C, instead of a search and a slice per line:
    the reading half of every range task (classify here, index rows in
    ``index._index_range``).
    """
    with open_read(path) as f:
        f.seek(start)
        data = f.read(stop - start)
    parts = data.split(b"\n")
    tail = parts.pop()
    return parts, tail


def _classify_range(path: str, start: int, stop: int, tally: type | None = None) -> list[tuple[Any, ...]]:
    """Classify the lines in ``[start, stop)`` of the file at ``path`` (a worker's task; see ``range_lines``).

    With ``tally`` (a class; see ``verify_file``), one new instance counts
    every record line (parsed, with its length) and is the last item.
    """
    parts, tail = range_lines(path, start, stop)
    counter = tally() if tally is not None else None
    classify = record.classify
    hasher = blake3.blake3()  # lent to classify for every line of the range
    RECORD, REDACTED = record.RECORD, record.REDACTED
    items: list[tuple[Any, ...]] = []
    run_offset = run_seq = run_count = 0
    run_prev = ""
    last_seq, last_hash = -1, ""
    lengths = array("Q")
    hashes: list[str] = []
    redactions: list[tuple[int, int]] = []

    def close_run(end: int) -> None:
        items.append((_RUN, run_offset, run_seq, run_prev, run_count, lengths.tobytes(), "".join(hashes), redactions, end))

    offset = start
    for raw in parts:
        status, obj, seq, h, problem = classify(raw, hasher)
        length = len(raw) + 1
        if status == RECORD:
            # A record always carries its seq and hash (classify's contract).
            prev = obj["prev"]
            if not (run_count and seq == last_seq + 1 and prev == last_hash):
                if run_count:
                    close_run(offset)
                run_offset, run_seq, run_prev, run_count = offset, seq, prev, 0  # type: ignore[assignment]
                lengths, hashes, redactions = array("Q"), [], []
            run_count += 1
            lengths.append(length)
            hashes.append(h)  # type: ignore[arg-type]
            if obj.get("kind") == "redaction" and type(obj.get("redacts")) is int:
                redactions.append((obj["redacts"], seq))  # type: ignore[arg-type]
            last_seq, last_hash = seq, h  # type: ignore[assignment]
            if counter is not None:
                counter.add(obj, length)
        else:
            if run_count:
                close_run(offset)
                run_count = 0
            prev = obj["prev"] if status == REDACTED else None
            items.append((_LINE, offset, length, status, seq, h, prev, problem, None, raw + b"\n"))
        offset += length
    if run_count:
        close_run(offset)
    if tail:
        items.append((_LINE, offset, len(tail), record.TORN, None, None, None, "unterminated last line", None, b""))
    if counter is not None:
        items.append(counter)
    return items


def _range_bounds(f: Any, size: int, range_bytes: int) -> list[int]:
    """Offsets that cut ``[0, size)`` into ranges of about ``range_bytes``, each at a line start."""
    bounds = [0]
    cut = range_bytes
    while cut < size:
        # The first line boundary at or after `cut`: just past the next newline
        # at or after cut - 1. Reads grow, as a line may be longer than a chunk.
        pos, chunk = cut - 1, 64 * 1024
        found = -1
        while pos < size:
            f.seek(pos)
            data = f.read(min(chunk, size - pos))
            if not data:
                break
            nl = data.find(b"\n")
            if nl >= 0:
                found = pos + nl + 1
                break
            pos += len(data)
            chunk *= 2
        if found < 0 or found >= size:
            break
        if found > bounds[-1]:
            bounds.append(found)
        cut = max(found, cut) + range_bytes
    bounds.append(size)
    return bounds


def plan_ranges(f: Any, size: int, workers: int | None, range_bytes: int, parallel_min_bytes: int) -> tuple[list[int], int, bool]:
    """How ``map_ranges`` cuts the first ``size`` bytes of the open file ``f``: ``(bounds, workers, parallel)``.

    Ranges of at most ``range_bytes``, at line starts (fewer, larger ones
    never exceed it; at least one per worker). ``workers`` None is one per
    CPU. A file under ``parallel_min_bytes``, or one worker, is worked
    through in this process, where starting processes would cost more than
    they save.
    """
    workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
    parallel = workers > 1 and size >= parallel_min_bytes
    per_range = min(range_bytes, max(1, -(-size // workers))) if parallel else range_bytes
    return _range_bounds(f, size, max(1, per_range)), workers, parallel


def _exit_with_parent() -> None:
    """A worker's first step: end it when the process that started it ends.

    A worker can block sending a result down a pipe whose reading end a
    sibling forked later also holds, so a parent killed outright (SIGKILL,
    the OOM killer) would leave it waiting forever. A thread waits on the
    parent's sentinel, which is ready once the parent is gone.
    """
    import multiprocessing
    import threading
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="retained-exit-with-parent", daemon=True).start()


def _range_worker(task: Callable[[str, int, int], Any], path: str, ranges: list[tuple[int, int, int]], conn: Any) -> None:
    """A worker process: ``task`` over its ranges ``(i, start, stop)`` in order, each result sent as soon as it is made.

    A failing range ends the worker with a short note instead of a result:
    the caller then works that range through itself, where the same error
    recurs with its own traceback (this process has no one to show one to).
    """
    import gc
    import signal

    # What a forked worker inherits belongs to its parent: a collection here
    # must never finalize any of it (an open database, a temporary file) on
    # the parent's behalf.
    gc.freeze()
    # Ctrl-C reaches the whole process group: the caller handles it and ends the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent()
    try:
        for i, start, stop in ranges:
            conn.send((i, task(path, start, stop)))
    except Exception as exc:  # noqa: BLE001 - a worker is an edge: the caller redoes the range and raises its error
        conn.send((-1, f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _reruns_main(ctx: Any) -> bool:
    """True when a worker started by ``ctx`` would first run this program's main script again.

    A forked worker starts as a copy of this process. A spawned one (the
    default on macOS and Windows, and here where other threads run) starts
    afresh and imports the main module, running every line of a script not
    under ``if __name__ == "__main__":``: a script that writes a record and
    then verifies would write it again in each worker. ``python -m``, an
    interactive session and this package's own commands are safe to start
    so; for any other script the work stays in this process.
    """
    if ctx.get_start_method() == "fork":
        return False
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return not (name == "__main__" or name.endswith(".__main__"))
    if getattr(main, "__file__", None) is None:
        return False
    # An installed command of this package: a stub that calls its main() under the guard.
    entry = getattr(main, "main", None)
    return not str(getattr(entry, "__module__", "")).startswith(f"{__package__}.")


def _start_method(mp_context: Any) -> Any:
    """``mp_context``, or the platform's default: spawn instead of fork when this process runs other threads.

    A forked child keeps only the forking thread, and a lock another thread
    held at that moment stays held in the child forever; a server calling
    verify or rebuild from a thread spawns. Threads are counted as the OS
    sees them where it says (Linux): a library's own threads (a BLAS pool,
    a watchdog) hold locks too, and Python does not list them.
    """
    import multiprocessing
    import threading

    if mp_context is not None:
        return mp_context
    ctx = multiprocessing.get_context()
    if ctx.get_start_method() != "fork":
        return ctx
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = threading.active_count()
    return multiprocessing.get_context("spawn") if threads > 1 else ctx


def map_ranges(
    task: Callable[[str, int, int], Any],
    path: str,
    bounds: list[int],
    workers: int,
    parallel: bool,
    mp_context: Any,
    stall_s: float = WORKER_STALL_S,
) -> Generator[Any, None, None]:
    """``task(path, start, stop)`` for each range of ``bounds``, the results in file order.

    In ``workers`` processes when ``parallel`` (``mp_context`` as for
    ``verify_file``) unless they would run the main script again
    (``_reruns_main``), else here. ``task`` must be a module-level function,
    or a ``functools.partial`` of one (a worker imports it by name), that
    depends on nothing but the file and its arguments, so
    that running it here gives what a worker gives.

    Worker ``k`` of ``n`` takes ranges ``k``, ``k + n``, ... and sends each
    result down a pipe of its own, read here in file order. Nothing is
    shared between workers (no queue, no lock, no helper thread here), so
    one worker's end cannot block another; a worker that cannot start,
    dies, fails a range or sends nothing for ``stall_s`` seconds is ended
    and its ranges are worked through here (an error reading the file
    recurs here). Each worker is at most one result ahead of the reading
    (its send waits for it), so memory holds about two ranges per worker.
    Every worker is ended before this returns, also when the caller stops early.
    """
    ranges = list(pairwise(bounds))
    ctx = _start_method(mp_context) if parallel and len(ranges) > 1 else None
    if ctx is None or _reruns_main(ctx):
        for start, stop in ranges:
            yield task(path, start, stop)
        return
    n = min(workers, len(ranges))
    procs: list[Any] = [None] * n
    conns: list[Any] = [None] * n
    try:
        for k in range(n):
            mine = [(i, *ranges[i]) for i in range(k, len(ranges), n)]
            reader = writer = None
            try:
                reader, writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_range_worker, args=(task, path, mine, writer), daemon=True,
                                   name=f"retained-ranges-{k}")
                proc.start()
            except (OSError, NotImplementedError):
                # No processes here (a sandbox, a process limit): this
                # worker's ranges are worked through below, in this process.
                if reader is not None:
                    reader.close()
                continue
            finally:
                if writer is not None:
                    writer.close()  # the worker holds its own copy; the reading end sees EOF once it is gone
            procs[k], conns[k] = proc, reader
        for i, (start, stop) in enumerate(ranges):
            k = i % n
            result = _receive(conns[k], procs[k], i, stall_s) if conns[k] is not None else None
            if result is None:
                _end(procs, conns, k, finished=False)
                result = (i, task(path, start, stop))
            elif i + n >= len(ranges):
                _end(procs, conns, k, finished=True)  # its last range: the worker is exiting
            yield result[1]
    finally:
        for k in range(n):
            _end(procs, conns, k, finished=False)


def _receive(conn: Any, proc: Any, i: int, stall_s: float) -> tuple[int, Any] | None:
    """Range ``i``'s result from the worker at ``conn``, or None when it cannot give it (ended, failed, stalled)."""
    from multiprocessing.connection import wait

    ready = wait([conn, proc.sentinel], stall_s)
    if conn not in ready:
        # Stalled, or ended without sending range i (a result sent before
        # the end would make the pipe readable too): the caller ends it and
        # works its ranges through itself.
        return None
    try:
        got = conn.recv()
    except (EOFError, OSError):
        return None  # the worker died before or while sending
    if got[0] == -1:
        return None  # the range failed there; done again here, where its error is raised
    if got[0] != i:
        raise InvariantBroken(f"map_ranges: a worker sent range {got[0]} where range {i} was due")
    return got


def _end(procs: list[Any], conns: list[Any], k: int, *, finished: bool) -> None:
    """End worker ``k`` and let go of its pipe: wait for it when it has sent every range (``finished``), else kill it.

    Killing a worker is safe: it shares no lock or queue with anyone.
    """
    conn, proc = conns[k], procs[k]
    conns[k] = procs[k] = None
    if conn is not None:
        conn.close()
    if proc is not None:
        if finished:
            proc.join(WORKER_EXIT_S)
        if proc.is_alive():
            proc.kill()
        proc.join()
        proc.close()


def verify_file(
    log: Log,
    *,
    workers: int | None = None,
    range_bytes: int = RANGE_BYTES,
    parallel_min_bytes: int = PARALLEL_MIN_BYTES,
    mp_context: Any = None,
    check: Callable[[Iterator[tuple[Any, ...]]], Any] | None = None,
    stop: int | None = None,
    watch: Iterable[int] = (),
    progress: Callable[[int, int], None] | None = None,
    tally: Any = None,
) -> ChainReport:
    """The report ``walk(log.scan(stop=stop), watch=watch)`` gives, with lines classified in worker processes.

    The file is cut at line starts into ranges of at most ``range_bytes``
    (fewer, larger ones never exceed it; at least one per worker), read up
    to ``stop`` (default: its size when the walk begins; never past its
    size), so lines appended meanwhile are not judged. Ranges are classified in ``workers``
    processes (default: one per CPU) and linked here in file order; memory
    holds the ranges in flight, not the log. A log under
    ``parallel_min_bytes``, or one CPU, is classified in this process, where
    starting processes would cost more than it saves. ``mp_context`` is a
    ``multiprocessing`` context (fork, spawn, forkserver); None takes the
    platform's default (spawn instead of fork when this process runs other
    threads).

    ``check(places)``, if given, is called once with an iterator over every
    complete line in file order, so that a second check reads the log once
    with the walk, in this process while the workers classify the ranges
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
        bounds, workers, parallel = plan_ranges(f, size, workers, range_bytes, parallel_min_bytes)
    task = _classify_range if tally is None else partial(_classify_range, tally=type(tally))
    results = map_ranges(task, str(log.path), bounds, workers, parallel, mp_context)
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
