"""The store's OS lock: one exclusive holder at a time, across processes.

A thin layer over portalocker (flock on POSIX, LockFileEx/msvcrt on Windows):
no hand-written platform code. Each acquisition opens its own descriptor, so
two threads of one process exclude each other exactly as two processes do.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType

import portalocker

from retained import limits
from retained.core.files import open_fd
from retained.errors import LockTimeout

_calls = None  # (lock, unlock, flags), resolved once by _lock_calls


def _lock_calls():
    """portalocker's lock and unlock for a descriptor, and EXCLUSIVE | NON_BLOCKING.

    Where portalocker has a flock locker object (POSIX) its methods are used:
    the module-level ``portalocker.lock`` re-validates the flags and resolves
    the locker on every call, work the write path would repeat on every
    append for the same answer. Elsewhere (Windows) the module-level
    functions. The flags are combined once, so no enum arithmetic runs per
    call.
    """
    global _calls
    if _calls is None:
        flags = portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING
        flock = getattr(portalocker.portalocker, "FlockLocker", None)
        if flock is not None:
            locker = flock()
            _calls = (locker.lock, locker.unlock, flags)
        else:
            _calls = (portalocker.lock, portalocker.unlock, flags)
    return _calls


def load() -> None:
    """Resolve portalocker's calls now, not on the first acquisition (a server warming up)."""
    _lock_calls()


class StoreLock:
    """Exclusive lock on ``log.lock``; a context manager with a bounded wait, reusable.

    Not for concurrent use by several threads: each thread (or the owner's
    mutex) must hold its own instance's turn. ``close()`` releases the descriptor.
    """

    def __init__(self, path: Path, wait_s: float = limits.LOCK_WAIT_S, *, keep_open: bool = False) -> None:
        self.path = path
        self.wait_s = wait_s
        self.keep_open = keep_open
        self._fd: int | None = None

    def __enter__(self) -> StoreLock:
        lock, _, flags = _lock_calls()
        # With keep_open the descriptor stays open between acquisitions
        # (opening and closing it on every append would add two system calls
        # to each write); the owner serialises its own threads, and every StoreLock has
        # its own descriptor, so two holders in one process still exclude
        # each other.
        fd = self._fd
        if fd is None:
            fd = open_fd(self.path, os.O_RDWR | os.O_CREAT)
            self._fd = fd
        deadline = time.monotonic() + self.wait_s
        pause = 0.0005
        while True:
            try:
                lock(fd, flags)
                break
            except portalocker.exceptions.LockException:
                if time.monotonic() >= deadline:
                    if not self.keep_open:
                        self.close()
                    raise LockTimeout(
                        f"store busy: another writer has held {self.path} for over {self.wait_s:g} s; "
                        "nothing was written; retry (with the same client_op_id) or find the stuck process",
                        path=str(self.path),
                    ) from None
                # flock is not fair: a writer in a loop re-takes the lock within
                # microseconds of releasing it, so a waiter only wins if it looks
                # in that gap. A short pause that doubles up to a small cap keeps
                # a waiter's turn close behind a busy writer (the selftest's
                # concurrent_writers check needs both to progress) without spinning.
                time.sleep(pause)
                pause = min(pause * 2, 0.002)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is None:
            return  # closed while held (close() released it)
        try:
            _lock_calls()[1](self._fd)
        finally:
            if not self.keep_open:
                self.close()

    def close(self) -> None:
        """Close the descriptor (releasing the lock if it is held)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
