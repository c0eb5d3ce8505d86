"""The self-test (docs/selftest.md): named checks of retained's claims, each in a fresh temporary store.

This package only returns results (`run`, `run_check`); the CLI prints them.
A check does what a user or a crash would do and looks at the bytes on disk
itself: chain hashes are recomputed from the specification (``spec``), and
the restart and concurrency checks run real child processes (``children``).
The checks are in ``checks_*``; ``context`` is what a check gets.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from retained.errors import InvalidRecord, RetainedError
from retained.selftest.checks_input import (
    check_bad_input,
    check_file_modes,
    check_idempotent_retry,
    check_large_record,
    check_lock_busy,
    check_redaction,
    check_secret_guard,
)
from retained.selftest.checks_log import (
    check_ack_proof,
    check_chain_links,
    check_concurrent_writers,
    check_foreign_line,
    check_read_back,
    check_restart,
    check_tamper_detect,
    check_torn_tail,
)
from retained.selftest.checks_mcp import check_mcp_replies
from retained.selftest.checks_search import (
    check_brief_accounting,
    check_brief_degraded,
    check_embedder_down,
    check_index_damaged,
    check_index_rebuild,
    check_search_accounting,
    check_search_hostile,
    check_supersede,
)
from retained.selftest.context import CheckFailed, Context, NotAvailable, expect, need
from retained.selftest.spec import flip_byte
from retained.store import Store

__all__ = ["CHECKS", "CheckFailed", "Context", "NotAvailable", "expect", "flip_byte", "format_line", "format_summary", "need",
           "run", "run_check"]


CHECKS: dict[str, Callable[[Context], str]] = {
    "ack_proof": check_ack_proof,
    "read_back": check_read_back,
    "chain_links": check_chain_links,
    "torn_tail": check_torn_tail,
    "foreign_line": check_foreign_line,
    "tamper_detect": check_tamper_detect,
    "supersede": check_supersede,
    "search_accounting": check_search_accounting,
    "search_hostile": check_search_hostile,
    "index_rebuild": check_index_rebuild,
    "index_damaged": check_index_damaged,
    "embedder_down": check_embedder_down,
    "brief_accounting": check_brief_accounting,
    "brief_degraded": check_brief_degraded,
    "bad_input": check_bad_input,
    "large_record": check_large_record,
    "idempotent_retry": check_idempotent_retry,
    "redaction": check_redaction,
    "secret_guard": check_secret_guard,
    "lock_busy": check_lock_busy,
    "file_modes": check_file_modes,
    "restart": check_restart,
    "concurrent_writers": check_concurrent_writers,
    "mcp_replies": check_mcp_replies,
}

# Checks whose time goes to child processes (interpreter start-up, fsync):
# run() submits them first so they overlap the rest.
BACKGROUND = frozenset({"restart", "concurrent_writers", "mcp_replies"})
# Threads for run(parallel=True): the checks wait mostly on fsync, SQLite and
# children, which release the interpreter; each has its own store.
WORKERS = 4


# -- running ----------------------------------------------------------------


def run_check(
    name: str,
    *,
    faults: Mapping[str, Callable[[Context], None]] | None = None,
    store_factory: Callable[..., Any] | None = None,
    base: str | os.PathLike[str] | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """Run one check in a fresh temporary store; returns ``{"name", "ok", "detail", "ms"}``.

    The store is in a new temporary directory (0700, removed afterwards).
    Faults can be injected for tests of the checks themselves (a check never
    shown failing proves nothing): ``faults`` maps a point name
    (``"<check>.<point>"``) to a function called with the check's context at
    that point, typically to damage the store on purpose; ``store_factory``
    replaces the ``Store`` class, e.g. with one whose verify is blind.

    Raises:
        InvalidRecord: no check has that name.
    """
    fn = CHECKS.get(name)
    if fn is None:
        raise InvalidRecord(f"unknown check {name!r}; the checks are: {', '.join(CHECKS)}", path="check")
    started = time.perf_counter()
    try:
        work = Path(tempfile.mkdtemp(prefix=f"retained-selftest-{name}-", dir=base))  # 0700
    except OSError as exc:
        detail = f"cannot make a temporary directory in {base or tempfile.gettempdir()}: {exc.strerror or exc}"
        return {"name": name, "ok": False, "detail": detail, "ms": round((time.perf_counter() - started) * 1000, 1)}
    ctx = Context(name, work, store_factory or Store, faults or {}, python or sys.executable)
    try:
        detail = fn(ctx)
        ok = True
    except CheckFailed as exc:
        ok, detail = False, str(exc)
    except RetainedError as exc:
        ok, detail = False, f"{exc.code}: {exc.message}"
    except Exception as exc:  # noqa: BLE001 - the self-test is an edge: a crash in a check is its finding
        ok, detail = False, f"unexpected {type(exc).__name__}: {exc}"
    finally:
        ctx.close()
        shutil.rmtree(work, ignore_errors=True)
    ms = round((time.perf_counter() - started) * 1000, 1)
    return {"name": name, "ok": ok, "detail": " ".join(str(detail).split()), "ms": ms}


def run(
    names: Iterable[str] | None = None,
    *,
    faults: Mapping[str, Callable[[Context], None]] | None = None,
    store_factory: Callable[..., Any] | None = None,
    base: str | os.PathLike[str] | None = None,
    python: str | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    parallel: bool = True,
) -> dict[str, Any]:
    """Run the checks (all, or those named) and return the summary.

    ``on_result`` is called with each check's result in order (the CLI prints
    it). With ``parallel`` the checks run on `WORKERS` threads, those in
    `BACKGROUND` first; each check still has its own store. The summary is
    ``{"ok", "passed", "failed", "seconds", "version", "python", "checks"}``;
    ``ok`` is true only when every check passed.

    Raises:
        InvalidRecord: a name is not a check (nothing was run).
    """
    selected = list(dict.fromkeys(names)) if names else list(CHECKS)
    unknown = [n for n in selected if n not in CHECKS]
    if unknown:
        raise InvalidRecord(f"unknown check {unknown[0]!r}; the checks are: {', '.join(CHECKS)}", path="check")
    started = time.perf_counter()
    options: dict[str, Any] = {"faults": faults, "store_factory": store_factory, "base": base, "python": python}
    results = []
    # The child-process checks start first; the rest share the other threads.
    # Results are still reported in order.
    order = sorted(selected, key=lambda n: n not in BACKGROUND)
    with ThreadPoolExecutor(max_workers=WORKERS if parallel else 1, thread_name_prefix="selftest") as pool:
        pending = {name: pool.submit(run_check, name, **options) for name in order}
        for name in selected:
            result = pending[name].result()
            results.append(result)
            if on_result is not None:
                on_result(result)
    passed = sum(1 for r in results if r["ok"])
    from retained import __version__

    return {
        "ok": passed == len(results),
        "passed": passed,
        "failed": len(results) - passed,
        "seconds": round(time.perf_counter() - started, 2),
        "version": __version__,
        "python": sys.version.split()[0],
        "checks": results,
    }


def format_line(result: dict[str, Any], width: int = max(map(len, CHECKS))) -> str:
    """``ok   <name>  <evidence>`` or ``FAIL <name>  <reason>``."""
    status = "ok  " if result["ok"] else "FAIL"
    return f"{status} {result['name']:<{width}}  {result['detail']}"


def format_summary(summary: dict[str, Any]) -> str:
    """The closing line: ``retained selftest: N ok, M failed``."""
    return f"retained selftest: {summary['passed']} ok, {summary['failed']} failed"
