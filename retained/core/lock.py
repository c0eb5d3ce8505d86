"""The store's OS lock: one exclusive holder at a time, across processes.

``fcntl.flock`` on POSIX, portalocker (LockFileEx/msvcrt) on Windows.
Each acquisition opens its own descriptor, so
two threads of one process exclude each other exactly as two processes do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from retained import limits
from retained.core.files import open_fd
from retained.errors import LockTimeout

_calls: Any = None  # (lock, unlock, flags), resolved once by _lock_calls
# A directory can be opened (and flock-ed) where O_DIRECTORY exists: POSIX.
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0) if os.name != "nt" else 0
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
if _O_DIRECTORY:
    import fcntl

    _flock, _LOCK_EX_NB, _LOCK_UN = fcntl.flock, fcntl.LOCK_EX | fcntl.LOCK_NB, fcntl.LOCK_UN


def _lock_calls():
    """The lock and unlock calls for a descriptor, and the flags of an exclusive, non-blocking lock.

    On POSIX ``fcntl.flock`` itself, as portalocker's flock locker calls it:
    importing portalocker reads its package's installed metadata, which costs
    more than a capture hook may spend, and the hook takes this lock on every
    prompt and reply. Elsewhere (Windows) portalocker's module-level
    functions, imported here. The flags are combined once, so no enum
    arithmetic runs per call.
    """
    global _calls
    if _calls is None:
        if _O_DIRECTORY:
            _calls = (_flock, _unflock_dir, _LOCK_EX_NB)
        else:
            import portalocker

            flags = portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING
            _calls = (portalocker.lock, portalocker.unlock, flags)
    return _calls


def load() -> None:
    """Resolve the lock calls now, not on the first acquisition (a server warming up)."""
    _lock_calls()


def _take_file(fd: int) -> bool:
    """Try the exclusive lock on ``fd``; False when another holder has it."""
    if _O_DIRECTORY:
        return _flock_dir(fd)  # fcntl.flock on the file too (see _lock_calls)
    import portalocker

    lock, _, flags = _lock_calls()
    try:
        lock(fd, flags)
    except portalocker.exceptions.LockException:
        return False
    return True


def _flock_dir(fd: int) -> bool:
    """Try an exclusive flock on ``fd`` (the directory's, or log.lock's on POSIX); False when another holder has it.

    POSIX only (the one place a directory can be opened), so ``fcntl.flock``
    itself: portalocker's wrapper re-checks its enum flags on every call,
    microseconds the write path would pay twice per append.
    """
    try:
        _flock(fd, _LOCK_EX_NB)
    except BlockingIOError:
        return False
    return True


def _unflock_dir(fd: int) -> None:
    _flock(fd, _LOCK_UN)


class StoreLock:
    """Exclusive lock on the store; a context manager with a bounded wait, reusable.

    Where the platform can open a directory (POSIX) the lock is taken on the
    store directory's own inode first: a directory holding the log cannot be
    deleted or swapped while a writer runs, so exclusion never depends on a
    file anyone can delete (issue 29). ``log.lock`` is locked after it, for
    writers of earlier versions that lock only that file. Where there is no
    directory lock (Windows, or a filesystem that refuses one) ``log.lock``
    is the lock, and its identity is
    checked under it: one deleted or replaced since it was opened is
    reopened, so every writer meets on the file the path names.

    Not for concurrent use by several threads: each thread (or the owner's
    mutex) must hold its own instance's turn. ``close()`` releases the descriptors.
    """

    def __init__(self, path: Path, wait_s: float = limits.LOCK_WAIT_S, *, keep_open: bool = False,
                 create: bool = True) -> None:
        self.path = path
        self.wait_s = wait_s
        self.keep_open = keep_open
        # A reader's glance (Log.durable_end) creates nothing: an absent log.lock is not locked (the directory is).
        self.create = create
        self._fd: int | None = None
        self._dir_fd: int | None = None
        # Whether the directory is locked: not where the filesystem refuses a directory lock (then log.lock alone, checked).
        self._dir_lock = bool(_O_DIRECTORY)

    def __enter__(self) -> StoreLock:
        # With keep_open the descriptors stay open between acquisitions
        # (opening and closing them on every append would add system calls
        # to each write); the owner serialises its own threads, and every
        # StoreLock has its own descriptors, so two holders in one process
        # still exclude each other.
        deadline = time.monotonic() + self.wait_s
        if self._dir_lock:
            try:
                if self._dir_fd is None:
                    self._dir_fd = os.open(self.path.parent, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
                self._take(self._dir_fd, deadline, _flock_dir)
            except OSError:
                # A filesystem without directory locks (some network and FUSE ones): log.lock alone, its identity checked.
                self._dir_lock = False
                if self._dir_fd is not None:
                    os.close(self._dir_fd)
                    self._dir_fd = None
            except BaseException:
                if not self.keep_open:
                    self.close()
                raise
        try:
            while True:
                if self._fd is None:
                    try:
                        self._fd = open_fd(self.path, os.O_RDWR | os.O_CREAT if self.create else os.O_RDONLY)
                    except FileNotFoundError:
                        if self.create or not self._dir_lock:
                            raise
                        return self  # no log.lock for writers of earlier versions to hold: the directory's lock is the lock
                self._take(self._fd, deadline)
                if self._dir_lock or self._names_this_file(self._fd):
                    return self
                # Deleted or replaced while this descriptor was open: the
                # lock on it would exclude no one who opens the path now.
                _lock_calls()[1](self._fd)
                os.close(self._fd)
                self._fd = None
        except BaseException:
            if self._dir_fd is not None:
                _unflock_dir(self._dir_fd)
            if not self.keep_open:
                self.close()
            raise

    @property
    def file_fd(self) -> int | None:
        """The descriptor of ``log.lock`` (open read-write by a writer; None when not open)."""
        return self._fd

    def _take(self, fd: int, deadline: float, take: Callable[[int], bool] | None = None) -> None:
        """Lock ``fd`` with ``take`` (default: the file lock, ``_take_file``), waiting until ``deadline`` at most (LockTimeout)."""
        take = take or _take_file
        pause = 0.0005
        while True:
            if take(fd):
                return
            if time.monotonic() >= deadline:
                raise LockTimeout(
                    f"store busy: another writer has held {self.path} for over {self.wait_s:g} s; "
                    "nothing was written; retry (with the same client_op_id) or find the stuck process",
                    path=str(self.path),
                )
            # flock is not fair: a writer in a loop re-takes the lock within
            # microseconds of releasing it, so a waiter only wins if it looks
            # in that gap. A short pause that doubles up to a small cap keeps
            # a waiter's turn close behind a busy writer (the selftest's
            # concurrent_writers check needs both to progress) without spinning.
            time.sleep(pause)
            pause = min(pause * 2, 0.002)

    def _names_this_file(self, fd: int) -> bool:
        """Whether ``self.path`` still names the file open on ``fd``."""
        try:
            named = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (named.st_ino, named.st_dev) == (held.st_ino, held.st_dev)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        unlock = _lock_calls()[1]
        try:
            if self._fd is not None:  # None: closed while held (close() released it)
                unlock(self._fd)
        finally:
            try:
                if self._dir_fd is not None:
                    _unflock_dir(self._dir_fd)
            finally:
                if not self.keep_open:
                    self.close()

    def close(self) -> None:
        """Close the descriptors (releasing the lock if it is held)."""
        fd, self._fd = self._fd, None
        dir_fd, self._dir_fd = self._dir_fd, None
        try:
            if fd is not None:
                os.close(fd)
        finally:
            if dir_fd is not None:
                os.close(dir_fd)
