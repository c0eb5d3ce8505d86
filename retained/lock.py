"""The store's OS lock: one exclusive holder at a time, across processes.

A thin layer over portalocker (flock on POSIX, LockFileEx/msvcrt on Windows):
no hand-written platform code. Each acquisition opens its own descriptor, so
two threads of one process exclude each other exactly as two processes do.
portalocker is imported on first use: read-only paths (the brief) never pay
for it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType

from . import limits
from .errors import LockTimeout

_O_BINARY = getattr(os, "O_BINARY", 0)


class StoreLock:
    """Exclusive lock on ``log.lock``; a context manager with a bounded wait."""

    def __init__(self, path: Path, wait_s: float = limits.LOCK_WAIT_S) -> None:
        self.path = path
        self.wait_s = wait_s
        self._fd: int | None = None

    def __enter__(self) -> StoreLock:
        import portalocker

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _O_BINARY, 0o600)
        flags = portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING
        deadline = time.monotonic() + self.wait_s
        pause = 0.0005
        while True:
            try:
                portalocker.lock(fd, flags)
                break
            except portalocker.exceptions.LockException:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise LockTimeout(
                        f"store busy: another writer has held {self.path} for over {self.wait_s:g} s; "
                        "nothing was written; retry (with the same client_op_id) or find the stuck process",
                        path=str(self.path),
                    ) from None
                # flock is not fair: a writer in a loop re-takes the lock within
                # microseconds of releasing it, so a waiter only wins if it looks
                # in that gap. Looking every 2 ms at most keeps a waiter's turn
                # to tens of milliseconds behind a busy writer (measured by the
                # selftest's concurrent_writers check), at ~500 syscalls/s.
                time.sleep(pause)
                pause = min(pause * 2, 0.002)
        self._fd = fd
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import portalocker

        fd, self._fd = self._fd, None
        assert fd is not None
        try:
            portalocker.unlock(fd)
        finally:
            os.close(fd)
