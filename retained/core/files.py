"""How the store opens its own files: never through a symbolic link, new ones exclusively, 0600.

Every file of a store (the log, its lock, quarantined tails, temporaries of a
rewrite, the index and its companions) is opened through here. A link
planted at one of those names could otherwise make a write land on, or a
truncation hit, whatever the link points at. Where the platform has
``O_NOFOLLOW`` the kernel refuses the link as it opens; elsewhere (Windows) an
``lstat`` looks first, which leaves a race the platform offers no way to close.

Standard library only: the session-start brief's reader opens the log through here.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from retained.errors import LinkRefused

O_BINARY = getattr(os, "O_BINARY", 0)
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def refused(path: str | os.PathLike[str]) -> LinkRefused:
    name = os.fspath(path)
    try:
        target = os.readlink(name)
    except OSError:
        target = "?"
    return LinkRefused(
        f"{name} is a symbolic link (to {target}); retained opens no store file through a link, so nothing "
        "was read or written through it and its target is untouched; replace the link with the file itself",
        path=name,
    )


def is_link(path: str | os.PathLike[str]) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def refuse_links(*paths: str | os.PathLike[str]) -> None:
    """Raise LinkRefused for the first of ``paths`` that is a symbolic link.

    For files opened by code that cannot be told not to follow links (SQLite
    and the files it creates beside a database).
    """
    for path in paths:
        if is_link(path):
            raise refused(path)


def open_fd(path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
    """``os.open`` that refuses a symbolic link at ``path`` (LinkRefused)."""
    if not O_NOFOLLOW and is_link(path):
        raise refused(path)
    try:
        return os.open(path, flags | O_NOFOLLOW | O_BINARY, mode)
    except OSError as exc:
        # Linux and the BSDs say ELOOP for a link under O_NOFOLLOW; some say EMLINK.
        if exc.errno in (errno.ELOOP, errno.EMLINK) and is_link(path):
            raise refused(path) from None
        raise


def open_read(path: str | os.PathLike[str]) -> BinaryIO:
    """A store file opened for reading, never through a link; FileNotFoundError when absent."""
    fd = open_fd(path, os.O_RDONLY)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)  # e.g. IsADirectoryError: the descriptor would leak
        raise


def inside(path: str | os.PathLike[str], directory: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``directory`` or lies below it, both resolved (False when one cannot be resolved)."""
    try:
        return Path(path).resolve().is_relative_to(Path(directory).resolve())
    except OSError:
        return False


def create_exclusive(path: str | os.PathLike[str]) -> int:
    """A new file of the store's (0600) for writing, opened exclusively.

    A leftover of an interrupted run under that name is removed first:
    unlink never follows a link, and O_EXCL refuses whatever appears there
    in between, so no write can land on a link's target.
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)


def writable_by_others(path: str | os.PathLike[str]) -> int | None:
    """The permission bits of ``path`` when its group or others may write it; None otherwise, or when absent.

    Whoever may write the store directory may replace the log (rename a file
    over it) whatever the log's own mode; POSIX only (Windows has no such bits).
    """
    if os.name == "nt":
        return None
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None
    return mode if mode & 0o022 else None


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (a new file of the store's own, never the log)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def replace_with(path: Path, data: bytes, tmp: Path) -> None:
    """Put a new file of the store's (0600) holding ``data`` at ``path``: written as ``tmp`` beside it
    (``create_exclusive``), fsynced, renamed over ``path``, the directory fsynced."""
    write_synced(create_exclusive(tmp), data)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def copy_aside(directory: Path, name_for: Callable[[int], str], data: bytes) -> str:
    """Keep ``data`` in a new file of ``directory``, the first free of ``name_for(0)``, ``name_for(1)``, ...; returns its name.

    Created exclusively (never over an earlier copy), fsynced with its
    directory entry; a copy that cannot be written whole is removed, so a full
    disk leaves no empty file behind.
    """
    for attempt in itertools.count():
        name = name_for(attempt)
        try:
            fd = open_fd(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            break
        except FileExistsError:
            continue
    try:
        write_synced(fd, data)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(directory / name)
        raise
    fsync_dir(directory)
    return name


def write_synced(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd``, fsync it, and close it (closed whatever happens)."""
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a create, rename or truncate in ``path`` durable (POSIX only).

    Windows cannot open a directory for fsync; NTFS journals the metadata.
    """
    if os.name == "nt":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
