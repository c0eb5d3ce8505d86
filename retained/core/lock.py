"""The store's OS lock: one exclusive holder at a time, across processes.

``fcntl.flock`` on POSIX, portalocker (LockFileEx/msvcrt) on Windows. Each acquisition opens its own descriptor, so
two threads of one process exclude each other exactly as two processes do.
The lock calls are resolved on first use: read-only paths (the brief) never
pay for them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType

from retained import limits
from retained.core.files import open_fd
from retained.errors import LockTimeout

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the brief's path imports this module, and not typing
if TYPE_CHECKING:
    from typing import Any

_calls: Any = None  # (lock, unlock, flags, busy), resolved once by _lock_calls


def _lock_calls() -> Any:
    """The lock and unlock calls for a descriptor, the flags for an exclusive non-blocking lock, and the "held" error.

    On POSIX: ``fcntl.flock`` itself, as portalocker's flock locker calls it.
    Importing portalocker costs more than a whole capture hook may spend
    (its package reads its own installed metadata at import), and the hook
    takes this lock on every prompt and reply. Elsewhere (Windows)
    portalocker's module-level functions. The flags are combined once, so
    no enum arithmetic runs per call.
    """
    global _calls
    if _calls is None:
        try:
            import fcntl
        except ImportError:
            fcntl = None  # type: ignore[assignment]  # Windows
        if fcntl is not None and hasattr(fcntl, "flock"):
            flock = fcntl.flock
            unlock_flag = fcntl.LOCK_UN

            def unlock(fd: int) -> None:
                flock(fd, unlock_flag)

            _calls = (flock, unlock, fcntl.LOCK_EX | fcntl.LOCK_NB, BlockingIOError)
        else:
            import portalocker

            flags = portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING
            _calls = (portalocker.lock, portalocker.unlock, flags, portalocker.exceptions.LockException)
    return _calls


def load() -> None:
    """Resolve the lock calls now, not on the first acquisition (a server warming up)."""
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
        lock, _, flags, busy = _lock_calls()
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
            except busy:
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
