"""The worker pool: one task over the byte ranges of a file, in this process or in worker processes.

`map_ranges` runs ``task(path, start, stop)`` for each range and gives the
results in file order; its docstring is the contract (the results never depend
on ``workers``, failures never change them, and a library call starts no
process unless its caller passes workers). `plan_ranges` cuts a file at line
starts and decides whether workers are worth starting; `range_lines` reads one
range's lines.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Generator
from itertools import pairwise
from multiprocessing.connection import wait
from typing import Any

from retained.core.files import open_read
from retained.errors import InvariantBroken

# Below this file size the work stays in this process, whatever workers the
# caller allows: starting workers (each a new process, more so under spawn)
# would cost more than they save.
PARALLEL_MIN_BYTES = 8 * 1024 * 1024
# How long a worker may send nothing before its ranges are done in the calling
# process instead: far longer than any range takes, reached only by a worker
# that will never answer (stuck after a fork, say), so that none waits forever.
WORKER_STALL_S = 60.0
# How long a worker that sent its last range may take to exit before it is killed.
WORKER_EXIT_S = 5.0


def cpu_workers() -> int:
    """One worker per CPU this process may run on: what the command line passes when it opts in."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def range_lines(path: str, start: int, stop: int) -> tuple[list[bytes], bytes]:
    """The complete lines of ``[start, stop)`` of the file at ``path`` (without newlines), and what follows the last newline.

    ``start`` is a line boundary; so is ``stop`` unless it is the end of the
    scan, where bytes after the last newline are a torn tail (else b"").
    One read and one split in C, instead of a search and a slice per line:
    the reading half of every range task.
    """
    with open_read(path) as f:
        f.seek(start)
        data = f.read(stop - start)
    parts = data.split(b"\n")
    tail = parts.pop()
    return parts, tail


def _range_bounds(f: Any, start: int, size: int, range_bytes: int) -> list[int]:
    """Offsets that cut ``[start, size)`` into ranges of about ``range_bytes``, each at a line start."""
    bounds = [start]
    cut = start + range_bytes
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


def plan_ranges(
    f: Any, size: int, workers: int, range_bytes: int, parallel_min_bytes: int = PARALLEL_MIN_BYTES, start: int = 0
) -> tuple[list[int], int]:
    """How ``map_ranges`` cuts ``[start, size)`` of the open file ``f``: ``(bounds, workers)``.

    Ranges of at most ``range_bytes``, at line starts (fewer, larger ones
    never exceed it; at least one per worker). The workers returned are 0
    (work here) unless ``workers`` is 2 or more and the part is at least
    ``parallel_min_bytes``.
    """
    if workers < 0:
        raise ValueError(f"workers must be a whole number from 0, got {workers}")
    workers = workers if workers > 1 and size - start >= parallel_min_bytes else 0
    per_range = min(range_bytes, max(1, -(-(size - start) // workers))) if workers else range_bytes
    return _range_bounds(f, start, size, max(1, per_range)), workers


def _exit_with_parent() -> None:
    """A worker's first step: end it when the process that started it ends.

    A worker can block sending a result down a pipe whose reading end a
    sibling forked later also holds, so a parent killed outright (SIGKILL,
    the OOM killer) would leave it waiting forever. A thread waits on the
    parent's sentinel, which is ready once the parent is gone.
    """
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


def _start_method(mp_context: Any) -> Any:
    """``mp_context``, or the platform's default: spawn instead of fork when this process runs other threads.

    A forked child keeps only the forking thread, and a lock another thread
    held at that moment stays held in the child forever; a server calling
    verify or rebuild from a thread spawns. Threads are counted as the OS
    sees them where it says (Linux): a library's own threads (a BLAS pool,
    a watchdog) hold locks too, and Python does not list them.
    """
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
    workers: int = 0,
    mp_context: Any = None,
    stall_s: float = WORKER_STALL_S,
) -> Generator[Any, None, None]:
    """``task(path, start, stop)`` for each range ``[start, stop)`` of ``bounds``, the results in file order, whoever computed them.

    ``workers`` as ``plan_ranges`` returns it; ``mp_context`` is a
    ``multiprocessing`` context (fork, spawn, forkserver), None for the
    platform's default (spawn instead of fork when this process runs other
    threads).

    - ``workers`` 0 (every library call's default) or 1: each range in this
      process, one after the other. This is the serial path; there is no other.
    - ``workers`` 2 or more: up to that many worker processes classify ranges
      ahead while the caller consumes results here. Only a caller that can vouch
      for its main module opts in (the ``retained`` command does, for verify,
      rebuild and stats): a worker started afresh (spawn, forkserver) imports
      the main module, so a script without an ``if __name__ == "__main__":``
      guard would run again in each worker, as with ``multiprocessing`` itself.
      A library call never starts a process unless its caller passes workers.

    ``task`` must be a module-level function (or a ``functools.partial`` of one;
    a worker imports it by name) that depends on nothing but the file and its
    arguments, so that running it here gives what a worker gives: the results do
    not depend on ``workers``.

    Failures never change the results: a worker that cannot start, dies, fails a
    range or sends nothing for ``stall_s`` seconds is ended and its ranges are
    worked through here (a task's error recurs here, with its traceback). Every
    worker is ended before this returns, also when the caller stops early or
    raises. Memory holds about two ranges per worker.

    Worker ``k`` of ``n`` takes ranges ``k``, ``k + n``, ... and sends each
    result down a pipe of its own, read here in file order. Nothing is
    shared between workers (no queue, no lock, no helper thread here), so
    one worker's end cannot block another. A worker runs ahead of the
    reading only as far as its pipe's buffer holds (then its send waits),
    and exits once its last result is sent. The workers start before
    this returns, so the caller may do other work while they classify the
    first ranges; closing the generator ends them (also before the first
    result is asked for).
    """
    ranges = list(pairwise(bounds))
    if workers < 2 or len(ranges) < 2:
        return (task(path, start, stop) for start, stop in ranges)  # each range here, as it is asked for
    results = _elsewhere(task, path, ranges, workers, mp_context, stall_s)
    next(results)  # the workers start now, not at the first result asked for (the generator holds them from here)
    return results


def _elsewhere(
    task: Callable[[str, int, int], Any], path: str, ranges: list[tuple[int, int]], workers: int, mp_context: Any,
    stall_s: float,
) -> Generator[Any, None, None]:
    """``map_ranges`` in worker processes: yields None once they are started, then each range's result in file order."""
    ctx = _start_method(mp_context)
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
        yield None
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
