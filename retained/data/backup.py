"""A consistent copy of a store: taken under the lock, verified, then renamed into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import blake3
import orjson

from retained import limits
from retained.core import chain
from retained.core.files import fsync_dir, inside, is_link, open_fd, open_read, write_all, write_synced
from retained.core.lines import utc_now
from retained.core.log import LOG_NAME, Log
from retained.errors import BackupFailed, BackupRefused

BACKUP_MANIFEST = "backup.json"


def _is_backup_dir(path: Path) -> bool:
    names = os.listdir(path)
    return all(n in (LOG_NAME, BACKUP_MANIFEST) or n.startswith(LOG_NAME + ".torn-") for n in names)


def _copy_file(src: BinaryIO, dest: Path, length: int) -> None:
    fd = open_fd(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        remaining = length
        while remaining > 0:
            chunk = src.read(min(limits.SCAN_CHUNK_BYTES, remaining))
            if not chunk:
                break
            write_all(fd, chunk)
            remaining -= len(chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    if remaining:
        raise BackupFailed(f"{dest}: the source ended {remaining} bytes early while it was copied under the lock", path=str(dest))


def backup(log: Log, dest: str | os.PathLike[str], *, force: bool = False) -> dict[str, Any]:
    """Copy the log (and its quarantined tails) to ``dest`` under the store lock, then verify the copy.

    The lock is the appenders' own (``log.lock``), so no record can be added,
    and no line redacted, while the bytes are copied: the copy is the log as
    of one moment. The index is not copied (it is derived: ``retained
    rebuild`` recreates it). The copy is written into a new directory beside
    ``dest`` and renamed into place; files are 0600, directories 0700. A
    ``backup.json`` manifest records the head and the log's blake3.

    Raises:
        BackupRefused: ``dest`` is the store, inside it, holds it, or already
            holds a backup (pass ``force`` to replace a backup; a directory
            holding anything else is never replaced).
        BackupFailed: the copy does not verify or its head differs.
    """
    src_dir = log.directory.resolve()
    dest = Path(dest).expanduser()
    target = dest.resolve()
    if inside(target, src_dir):
        raise BackupRefused(f"backup destination {dest} is inside the store {src_dir}; choose a directory outside it", path=str(dest))
    if inside(src_dir, target):
        raise BackupRefused(f"backup destination {dest} contains the store {src_dir}; choose a directory of its own", path=str(dest))
    if not log.exists():
        raise BackupRefused(f"no log at {log.path}: nothing to back up", path=str(log.path))
    replacing = False
    if target.exists():
        if not target.is_dir():
            raise BackupRefused(f"backup destination {dest} exists and is not a directory; choose a new path", path=str(dest))
        if os.listdir(target):
            if not _is_backup_dir(target):
                raise BackupRefused(
                    f"backup destination {dest} holds files that are not a retained backup; nothing was copied; choose a new path",
                    path=str(dest),
                )
            if not force:
                raise BackupRefused(
                    f"backup destination {dest} already holds a backup; nothing was copied; pass --force to replace it",
                    path=str(dest),
                )
            replacing = True
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    os.chmod(staging, 0o700)
    try:
        with log.exclusive():  # a still log: no append lands while it is copied
            with open_read(log.path) as f:
                size = os.fstat(f.fileno()).st_size
                seq, head_hash, _ = log.tail(stop=size)
                _copy_file(f, staging / LOG_NAME, size)
            quarantined = log.quarantined()
            for q in quarantined:
                with open_read(log.directory / q["file"]) as f:
                    _copy_file(f, staging / q["file"], q["bytes"])
        copy = Log(staging)
        report = chain.walk(copy.scan(), LOG_NAME)
        if (report.head_seq, report.head_hash) != (seq, head_hash) or copy.size() != size:
            raise BackupFailed(
                f"the copy in {staging} does not match the source: head seq {report.head_seq} vs {seq}, "
                f"{copy.size()} bytes vs {size}; the copy is left there for inspection",
                path=str(staging),
            )
        hasher = blake3.blake3()
        with open_read(staging / LOG_NAME) as f:
            while chunk := f.read(limits.SCAN_CHUNK_BYTES):
                hasher.update(chunk)
        manifest = {
            "created": utc_now(),
            "source": str(src_dir),
            "head": {"seq": seq, "hash": head_hash},
            "log_bytes": size,
            "log_blake3": hasher.hexdigest(),
            "quarantined": [q["file"] for q in quarantined],
            "verify": {"ok": report.ok, "records": report.records, "findings": len(report.findings)},
        }
        fd = open_fd(staging / BACKUP_MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        write_synced(fd, orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
        fsync_dir(staging)
        if replacing:
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            # A leftover under that name (an interrupted run, or a planted
            # link) is removed, never followed: rmtree and unlink act on the
            # name itself.
            if is_link(old) or old.is_file():
                os.unlink(old)
            elif old.is_dir():
                shutil.rmtree(old)
            os.replace(target, old)
            os.replace(staging, target)
            shutil.rmtree(old)
        elif target.exists():
            os.rmdir(target)  # empty: checked above
            os.replace(staging, target)
        else:
            os.replace(staging, target)
        fsync_dir(target.parent)
    except BackupFailed:
        raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {
        "ok": report.ok,
        "path": str(target),
        "head": {"seq": seq, "hash": head_hash},
        "records": report.records,
        "log_bytes": size,
        "log_blake3": manifest["log_blake3"],
        "quarantined": manifest["quarantined"],
        "findings": report.findings,
        "replaced": replacing,
    }
