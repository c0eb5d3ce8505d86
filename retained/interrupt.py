"""Ctrl-C for the long-running commands (``serve``, ``serve --http``, ``view``): a prompt, quiet exit at any moment.

Outside the stretch where a server's own loop handles the signal (the stdio
front drains and returns 130; uvicorn shuts down gracefully, then raises the
signal again), `exit_on_interrupt` makes SIGINT end the process at once,
status 130. The short commands keep Python's ``KeyboardInterrupt``, which the
command line reports as ``interrupted`` after their own clean-up has run.
"""

import os
import signal
import sys
from types import FrameType


def _exit_at_once(signum: int, _frame: FrameType | None) -> None:
    try:
        sys.stderr.flush()
    except (OSError, ValueError, RuntimeError):  # closed, or a write under way on this thread
        pass
    os._exit(128 + signum)


def exit_on_interrupt() -> None:
    """From now on SIGINT ends the process at once with status 130 (a no-op off the main thread).

    Python turns SIGINT into ``KeyboardInterrupt`` wherever the main thread is:
    inside an import, a C extension's initialisation, asyncio's teardown or
    threading's shutdown. Raised there it prints a traceback, and an
    interrupted extension import has crashed the interpreter at exit. A server
    holds nothing that unwinding would save: every acknowledged record is
    already durable, and an unacknowledged line is a torn tail that the next
    writer sets aside (the same state a SIGKILL leaves, which the crash tests
    cover).
    """
    _set(_exit_at_once)


def raise_on_interrupt() -> None:
    """From now on SIGINT raises ``KeyboardInterrupt`` again, as Python's default does."""
    _set(signal.default_int_handler)


def _set(handler: object) -> None:
    try:
        signal.signal(signal.SIGINT, handler)  # type: ignore[arg-type]
    except ValueError:  # not the main thread (an embedding program's worker): its signals are not ours to set
        pass
