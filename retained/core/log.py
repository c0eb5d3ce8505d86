"""The append-only log file: the only writer of ``log.jsonl``.

It keeps the log's invariants L1-L6 (docs/format.md; cited by id in tests and
comments): one canonical record per line (L1), ``seq`` without gaps (L2),
``prev`` naming the previous chained record's ``hash`` (L3), no
acknowledgement before write, fsync and a byte-exact read-back (L4), an index
derived from the log alone (L5) and holding only durable bytes (L6,
``Log.durable_end``). ``Log.append`` is the one way into the file; the crash
cases it defends are listed there.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import suppress
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

import orjson

from retained import limits
from retained.core import record, recovery
from retained.core.files import copy_aside, create_exclusive, fsync_dir, open_fd, open_read
from retained.core.lines import LOG_NAME, Line, open_log, segments_reverse, size_of
from retained.core.lines import read_at as read_bytes_at
from retained.core.lock import StoreLock
from retained.errors import (
    LockTimeout,
    LogUnusable,
    NotFound,
    OpIdConflict,
    ReadBackMismatch,
    RetainedError,
    StoreDamaged,
    WriteFailed,
)

if TYPE_CHECKING:
    from retained.replies import Placed, WriteProof

# The mark in log.lock (Log._publish): magic, inode, end, seq, hash, line offset, digest (of a long last
# line; zeros otherwise), then the crc32 of those bytes. Binary: packing it costs less than formatting.
_MARK = struct.Struct("<4sQQQ64sQ64s")
_MARK_MAGIC = b"rtm1"
_CRC = struct.Struct("<I")
_MARK_DIGEST_BYTES = 64 * 1024  # a last line this long is recognised by the digest of its bytes, not parsed again


class Published(NamedTuple):
    """What the last append published in ``log.lock`` (`Log._publish`)."""

    ino: int
    end: int  # the log is durable up to here
    seq: int  # the last line's: the tail
    hash: str
    line_offset: int
    digest: str | None  # of the last line's bytes, when it is long (_MARK_DIGEST_BYTES)
_pwrite = getattr(os, "pwrite", None)  # POSIX; elsewhere no mark is published and readers fsync for themselves

LOCK_NAME = "log.lock"


def make_line(offset: int, raw: bytes) -> Line:
    """Classify one line (``raw`` with its newline; without one it is a torn tail)."""
    if not raw.endswith(b"\n"):
        return Line(offset, raw, record.TORN, None, None, None, "unterminated last line")
    return Line(offset, raw, *record.classify(raw[:-1]))


_PREAD = hasattr(os, "pread")  # not on Windows


def pread(fd: int, length: int, offset: int) -> bytes:
    """Read exactly what is there at ``offset``; short only at end of file."""
    if _PREAD:
        data = os.pread(fd, length, offset) if length > 0 else b""
        while data and len(data) < length:  # cut short: read on until the end of the file
            chunk = os.pread(fd, length - len(data), offset + len(data))
            if not chunk:
                break
            data += chunk
        return data
    # Windows has no pread; the caller holds the lock or the descriptor is its own, so seeking is safe.
    os.lseek(fd, offset, os.SEEK_SET)
    parts = []
    while length > 0:
        chunk = os.read(fd, length)
        if not chunk:
            break
        parts.append(chunk)
        length -= len(chunk)
    return b"".join(parts)


class Log:
    """The log file of one store directory.

    Reading needs no lock (readers ignore a torn tail, which is how an append
    in progress looks). Appending takes the store lock.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        record_bytes_max: int = limits.RECORD_BYTES_MAX,
        lock_wait_s: float = limits.LOCK_WAIT_S,
        group_commit: bool = True,
    ) -> None:
        self.directory = Path(directory).expanduser()  # "~/x" is the home directory, as on the command line
        self.path = self.directory / LOG_NAME
        self._path_s = os.fspath(self.path)  # for the stat on every append: a str skips pathlib's conversion
        self.lock_path = self.directory / LOCK_NAME
        self.record_bytes_max = record_bytes_max
        self.lock_wait_s = lock_wait_s
        self._mutex = threading.Lock()
        self._fd: int | None = None
        self._ino: int | None = None
        self._unusable: str | None = None
        # Tail cache: (seq, hash, offset, length) of the last chained line (offset -1: none), valid while the file
        # has this (inode, size).
        self._tail_key: tuple[int, int] | None = None
        self._tail: tuple[int, str, int, int] = (0, record.ZERO_HASH, -1, 0)
        # The last line this handle appended, as it read it back: (its tail tuple, its bytes). The next append
        # reads the record before its own lines again; bytes equal to these hold that seq and hash (no parse).
        self._tail_line: tuple[tuple[int, str, int, int], bytes] | None = None
        # (inode, end): this handle's last append or fsync made the file durable up to end (see durable_end).
        self._durable: tuple[int, int] = (-1, 0)
        # client_op_id -> proof, complete up to _ops_end on inode _ops_ino.
        self._ops: Any = {}  # a dict, or a caller's complete map (assume_ops)
        self._ops_end = 0
        self._ops_ino: int | None = None
        # One lock descriptor per Log, reused by every append (see lock.py).
        self._lock = StoreLock(self.lock_path, lock_wait_s, keep_open=True)
        # Group commit (see _commit_grouped): requests queued for the next leader, and whether one leads.
        self.group_commit = group_commit
        self._group = threading.Lock()
        self._queue: list[_Request] = []
        self._leading = False
        # Callers whose records are durable, woken by the next leader once its
        # own fsync is under way (see _commit_grouped).
        self._waking: list[_Request] = []

    # -- reading -----------------------------------------------------------

    def size(self) -> int:
        return size_of(self.path)

    def exists(self) -> bool:
        return self.path.exists()

    def open_read(self) -> BinaryIO | None:
        """The log opened for reading (never through a link), or None when there is none yet."""
        return open_log(self.path)

    def scan(self, start: int = 0, stop: int | None = None, *, containing: bytes | None = None) -> Iterator[Line]:
        """Every line from ``start`` (a line boundary) up to ``stop``, oldest first, classified.

        The lines of :meth:`segments` (same arguments), each made a `Line`.
        """
        for offset, raw in self.segments(start, stop, containing=containing):
            yield make_line(offset, raw)

    def segments(
        self, start: int = 0, stop: int | None = None, *, containing: bytes | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """``(offset, bytes)`` of every line from ``start`` (a line boundary) up to ``stop``, unparsed.

        ``stop`` defaults to the size when the reading begins, so it ends even
        while writers append. Memory holds one chunk and one line at a time.
        Bytes after the last newline come last, without one (a torn tail).
        With ``containing``, only the complete lines holding those bytes are
        yielded (a torn tail always is): a search in the chunk is far cheaper
        than parsing and hashing every line.
        """
        f = self.open_read()
        if f is None:
            return
        with f:
            if stop is None:
                stop = os.fstat(f.fileno()).st_size
            f.seek(start)
            base = start  # file offset of data[0]
            data = b""
            remaining = stop - start
            while remaining > 0:
                chunk = f.read(min(limits.SCAN_CHUNK_BYTES, remaining))
                if not chunk:
                    break
                remaining -= len(chunk)
                data = data + chunk if data else chunk
                i = 0
                while True:
                    nl = data.find(b"\n", i)
                    if nl == -1:
                        break
                    if containing is None or data.find(containing, i, nl) != -1:
                        yield base + i, data[i : nl + 1]
                    i = nl + 1
                base += i
                data = data[i:]
            if data:
                yield base, data

    def scan_reverse(self, stop: int | None = None) -> Iterator[Line]:
        """Every line before ``stop``, newest first (a torn tail first, if any)."""
        f = self.open_read()
        if f is None:
            return
        with f:
            if stop is None:
                stop = os.fstat(f.fileno()).st_size
            for offset, raw in segments_reverse(f, stop):
                yield make_line(offset, raw)

    def durable_end(self, wanted: int, *, wait_s: float = 0.0) -> int:
        """How much of the log's first ``wanted`` bytes is known durable (L6): readers index no further.

        In docs/format.md's order (the index holds only durable bytes): up to
        the end of this handle's own last append or fsync (an fsync makes every
        byte before it durable, whoever wrote it), else the end the last append
        published (`_publish`: the common case, one small read), else, with
        the store lock free (an append holds it from its write through its
        fsync; tried once, or for ``wait_s``), the size read under it, fsynced
        now. Where there is no lock to take (a read-only store, no right to
        create ``log.lock``) or it is held past a ``wait_s`` (a backup, an
        import), the fsync alone makes the bytes durable; held with ``wait_s``
        0, only what this handle knew before: the rest waits for a later read.
        """
        try:
            ino = os.stat(self._path_s).st_ino
        except FileNotFoundError:
            return 0
        known_ino, known_end = self._durable
        if known_ino == ino and wanted <= known_end:
            return wanted
        published = self._published()
        if published is not None and published.ino == ino:
            if wanted <= published.end:
                return wanted
            if published.end > known_end or known_ino != ino:
                known_ino, known_end = published.ino, published.end
        f = self.open_read()
        if f is None:
            return 0
        with f:
            fd = f.fileno()
            try:
                with StoreLock(self.lock_path, wait_s, create=False):
                    size = os.fstat(fd).st_size
            except LockTimeout:
                if not wait_s:
                    return min(wanted, known_end) if known_ino == ino else 0
                size = os.fstat(fd).st_size  # held past the wait (a backup, an import): the fsync below alone
            except (OSError, RetainedError):
                size = os.fstat(fd).st_size  # no lock to take here (read-only, a link): the fsync below alone
            with suppress(OSError):  # not from here (a platform without fsync on a read-only handle): as read under the lock
                os.fsync(fd)
            self._durable = (os.fstat(fd).st_ino, size)
        return min(wanted, size)

    def _publish(self, last_line: bytes) -> None:
        """Publish the end and the tail of the append just made, for other processes (`durable_end`, `_recover_tail`).

        The mark of docs/format.md#the-write-path (step 5; its fields are
        `_MARK`'s), written under the lock after the read-back and before any
        caller is acknowledged, at offset 0 of ``log.lock``, which every writer
        holds open read-write. A reader that finds it torn, missing or naming
        another file looks for itself.
        """
        fd = self._lock.file_fd
        if fd is None or _pwrite is None:
            return
        seq, h, line_offset, length = self._tail
        # A long last line gets the digest of its bytes: a new process checks those instead of parsing it again.
        line_digest = record.digest(last_line).encode() if len(last_line) >= _MARK_DIGEST_BYTES else b""
        body = _MARK.pack(_MARK_MAGIC, self._ino or 0, line_offset + length, seq, h.encode(), line_offset, line_digest)
        try:
            _pwrite(fd, body + _CRC.pack(zlib.crc32(body)), 0)
        except OSError:
            pass  # a hint: without it readers fsync for themselves and writers read the tail

    def _unpublish(self) -> None:
        """Clear the mark (under the lock): the file no longer ends as it says."""
        fd = self._lock.file_fd
        if fd is not None and _pwrite is not None:
            with suppress(OSError):
                _pwrite(fd, bytes(_MARK.size + _CRC.size), 0)

    def _published(self) -> Published | None:
        """The last `_publish`'s mark; None when there is none to trust."""
        try:
            fd = open_fd(self.lock_path, os.O_RDONLY)
        except (OSError, RetainedError):
            return None
        try:
            data = os.read(fd, _MARK.size + _CRC.size)
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(data) != _MARK.size + _CRC.size or _CRC.unpack_from(data, _MARK.size)[0] != zlib.crc32(data[: _MARK.size]):
            return None
        magic, ino, end, seq, h, line_offset, line_digest = _MARK.unpack_from(data)
        if magic != _MARK_MAGIC:
            return None
        return Published(ino, end, seq, h.decode("ascii", "replace"), line_offset,
                         line_digest.decode("ascii", "replace") if line_digest.strip(b"\0") else None)

    def read_at(self, offset: int, length: int) -> bytes:
        """The bytes of one line, as an index remembers its place."""
        return read_bytes_at(self.path, offset, length)

    def read_many(self, places: list[tuple[int, int]]) -> list[bytes]:
        """The bytes at each ``(offset, length)``, read through one open file (b"" for each if there is no log)."""
        f = self.open_read()
        if f is None:
            return [b""] * len(places)
        with f:
            fd = f.fileno()  # one read each, of the line's bytes alone (a buffered read would fill its buffer)
            return [pread(fd, length, offset) for offset, length in places]

    def line_at(self, offset: int, length: int) -> Line:
        return make_line(offset, self.read_at(offset, length))

    def tail(self, stop: int | None = None) -> tuple[int, str, int]:
        """``(seq, hash, end offset)`` of the last valid chained line.

        Reads backwards from the end, never the whole log unless the whole log
        has no valid record. Foreign and damaged lines are passed over: the
        chain skips them.
        """
        line = next((line for line in self.scan_reverse(stop) if line.chained), None)
        return (0, record.ZERO_HASH, 0) if line is None else (line.seq, line.hash, line.end)

    def quarantined(self) -> list[dict[str, Any]]:
        """Torn tails set aside by earlier appends, with their sizes."""
        out: list[dict[str, Any]] = []
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return out
        prefix = LOG_NAME + ".torn-"
        for name in names:
            if name.startswith(prefix):
                offset_text = name[len(prefix) :].split(".")[0]
                size = (self.directory / name).stat().st_size
                out.append({"file": name, "offset": int(offset_text) if offset_text.isdigit() else None, "bytes": size})
        return out

    # -- appending ---------------------------------------------------------

    @property
    def unusable(self) -> str | None:
        return self._unusable

    def close(self) -> None:
        with self._mutex:
            self._close_fd()
            self._lock.close()

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None
        self._ino = None
        self._tail_key = None

    def _forget_file(self) -> None:
        """Drop every cached fact about the file: descriptor, tail, the client_op_id map."""
        self._close_fd()
        self._ops = {}
        self._ops_end = 0
        self._ops_ino = None

    def reopen(self) -> None:
        """Forget every cached fact and the poisoned state; the next append re-reads the file."""
        with self._mutex:
            self._forget_file()
            self._unusable = None

    def _poison(self, why: str) -> None:
        self._unusable = why
        with suppress(OSError):
            self._close_fd()

    def _ensure_fd(self) -> tuple[int, bool, int]:
        """The append descriptor, reopened if the file was replaced (redaction renames a new log in); whether it was created; its size.

        The size comes from the same stat when the path still names the open
        file (the lock is held: no writer moves it in between), so an append
        makes one system call fewer than a stat and an fstat.
        """
        try:
            st = os.stat(self._path_s)
        except FileNotFoundError:
            st = None
        if st is not None and st.st_nlink > 1:
            # Another name for the same file can rewrite the log behind the store's back, and the redaction
            # flow's rename would silently split the two apart.
            raise StoreDamaged(
                f"{self.path} has {st.st_nlink} hard links: another name can change the log; nothing was written; "
                f"remove the other link (find it with `find / -samefile {self.path}`) or copy the log to a file of "
                "its own",
                path=str(self.path),
            )
        if self._fd is not None and st is not None and st.st_ino == self._ino:
            return self._fd, False, st.st_size
        self._close_fd()
        created = st is None
        fd = open_fd(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        self._fd = fd
        opened = os.fstat(fd)
        self._ino = opened.st_ino
        return fd, created, opened.st_size

    def _make_durable(self, fd: int, created: bool) -> None:
        """fsync the log; on its first creation its directory entry too.

        Without the directory fsync a power cut could lose the whole file
        after seq 1 was acknowledged.
        """
        os.fsync(fd)
        if created:
            fsync_dir(self.directory)

    def _set_aside(self, fd: int, start: int, end: int) -> str:
        """Copy the log's bytes ``[start, end)`` to a new quarantine file, then truncate the log to ``start``.

        Used only for bytes that were never acknowledged (a torn tail, or
        lines this append wrote that failed their link check). The copy comes
        first, fsynced with its directory entry: a crash between the two
        steps leaves a copy and the bytes, and the next append does this
        again under another name. A copy that cannot be written whole is
        removed, so a full disk leaves no empty quarantine files behind.
        """
        data = pread(fd, end - start, start)
        name = copy_aside(self.directory, lambda attempt: recovery.quarantine_name(LOG_NAME, start, attempt), data)
        os.ftruncate(fd, start)
        os.fsync(fd)
        self._tail_key = None
        return name

    def _recover_tail(self, fd: int, size: int) -> int:
        """Apply recovery.py's table to the log's end; returns the size after it, with its tail in ``_tail``."""
        if self._tail_key == (self._ino or 0, size):
            # The file ends where this handle's last append or tail read left
            # it: a whole line, read back, ending in a newline (T0/T1).
            return size
        mark = self._published()
        if mark is not None and mark.digest is not None and (mark.ino, mark.end) == (self._ino or 0, size) \
                and 0 <= mark.line_offset < size and record.digest(pread(fd, size - mark.line_offset, mark.line_offset)) \
                == mark.digest:
            # It ends with the very bytes another process's last append read back and linked (its mark,
            # `_publish`): the same tail, without parsing a long last line again (a new process's first
            # write after a 4 MB record). The read-back still checks the link on the bytes (L3).
            self._tail = (mark.seq, mark.hash, mark.line_offset, size - mark.line_offset)
            self._tail_key = (self._ino or 0, size)
            return size
        ends_with_newline = size > 0 and pread(fd, 1, size - 1) == b"\n"
        row = recovery.decide(size == 0, ends_with_newline)
        if row.action != "accept":
            with open_read(self.path) as f:
                torn_offset, _ = next(segments_reverse(f, size))
            self._set_aside(fd, torn_offset, size)
            size = torn_offset
        return self._drop_unlinked(fd, size)

    def _drop_unlinked(self, fd: int, size: int) -> int:
        """Set aside whole last lines that do not continue the chain; returns the size after it, tail cached.

        A chained last line whose seq is not above the chained line before it
        was never acknowledged: every acknowledged line was read back linked to
        the last chained line before it (L3, ``_read_back``). Such a line is
        left by a writer that ran beside another (a lock taken on a deleted
        ``log.lock`` by an earlier version) and failed its read-back; chained
        onto, it would make one permanent finding of an unacknowledged write.
        """
        while True:
            last = before = None
            for line in self.scan_reverse(size):
                if line.chained:
                    if last is not None:
                        before = line
                        break
                    last = line
            if last is None or before is None or last.seq > before.seq or last.end != size:
                self._tail = (0, record.ZERO_HASH, -1, 0) if last is None else (last.seq, last.hash, last.offset, last.length)
                self._tail_key = (self._ino or 0, size)
                return size
            self._set_aside(fd, last.offset, size)
            size = last.offset

    def _ops_lookup(self, client_op_id: str, size: int) -> Placed | None:
        """The proof of an earlier write with this client_op_id, if any.

        Built by one scan per process and then extended from where it ended,
        so a retry is recognised across processes and restarts.
        """
        if self._ops_ino != self._ino or self._ops_end > size:
            self._ops = {}
            self._ops_end = 0
            self._ops_ino = self._ino
        if self._ops_end == size:
            # Nothing appended since the last look (the common case inside a
            # batch): the map is complete, no need to open the file again.
            return self._ops.get(client_op_id)
        end = size
        # Canonical JSON has no space after a key, and a quote inside a string
        # is escaped, so every record with the field holds these exact bytes.
        for line in self.scan(start=self._ops_end, stop=size, containing=b'"client_op_id":'):
            if line.status == record.TORN:
                end = line.offset
                break
            if line.status == record.RECORD:
                op = line.record.get("client_op_id")
                if isinstance(op, str) and op not in self._ops:
                    self._ops[op] = proof_of(line)
        self._ops_end = end
        return self._ops.get(client_op_id)

    def assume_ops(self, known: Any, end: int) -> None:
        """Take ``known`` as the complete client_op_id map of the log up to byte ``end``.

        For a caller that keeps its own map of the log's ids (capture keeps
        one in ``capture/ops.sqlite3``): a short-lived process then need not scan the whole
        log for retries before its first append. ``known`` answers ``get``,
        ``in``, item assignment and ``update`` as a dict does; whatever the
        log gains after ``end`` is still scanned under the lock as usual,
        and a replaced or shorter file drops ``known``.
        """
        try:
            ino = os.stat(self._path_s).st_ino
        except FileNotFoundError:
            return
        with self._mutex:
            self._ops = known
            self._ops_end = end
            self._ops_ino = ino

    def _check_usable(self) -> None:
        if self._unusable is not None:
            raise LogUnusable(
                f"an earlier write on this handle failed ({self._unusable}); "
                "reopen the log to re-read its state, then retry",
                path=str(self.path),
            )

    def append(
        self,
        contents: list[record.Content],
        *,
        client: dict[str, Any],
        ts: str | None = None,
        op_reuse: str = "conflict",
    ) -> list[WriteProof]:
        """Append records and return their proofs once they are durable.

        The one way into the file (a single write is a batch of one), by the
        steps of docs/format.md#the-write-path, its group commit (with
        ``group_commit``) and its client_op_id rule included; a client_op_id
        used earlier in the same batch counts as in the log. With ``op_reuse``
        ``"duplicate"`` (import, whose ids name a source record whatever is
        asked of its copy) a reused id with other content is a duplicate, not
        an OpIdConflict.

        Crash cases, each at its step:

        - killed before ``os.write``: nothing changed.
        - killed during ``os.write`` or a short write: an unterminated tail, never
          acknowledged; the next append sets it aside and truncates (recovery.py T2).
        - killed after ``os.write``, before or during ``fsync``: the line may or may
          not survive a power cut; it was not acknowledged either way. If it
          survives whole it is a valid record and the chain continues from it.
        - ``fsync`` or read-back fails: no acknowledgement, and the handle is
          poisoned (LogUnusable) because the page cache may now disagree with the
          disk; reopening re-derives every cached fact from the file.

        Returns:
            One proof per content, in order: seq, hash, prev, offset, length,
            ts, duplicate.

        Raises:
            InvalidRecord / RecordTooLarge: nothing written.
            NotFound: a ``supersedes`` seq does not exist yet; nothing written.
            OpIdConflict: a client_op_id names an earlier record with other content; that record's request wrote nothing.
            LockTimeout: nothing written.
            WriteFailed / ReadBackMismatch: nothing acknowledged; handle unusable.
            LogUnusable: an earlier failure on this handle; call reopen().
        """
        req = _Request(contents, client, ts, op_reuse == "conflict")
        if self.group_commit:
            self._commit_grouped(req)
        else:
            with self._mutex:
                self._commit([req])
        return req.result()

    def _commit_grouped(self, req: _Request) -> None:
        """Queue ``req``; the first caller to find no leader writes everything queued so far.

        A waiting caller sleeps on its own latch (a lock it holds, released
        once by another thread: cheaper than an Event, which builds a
        condition and a waiter lock on every wait). The leader hands the lead
        to the first caller that queued meanwhile (which writes everything
        queued by then), so no thread wakes only to find it must wait again.
        The callers it wrote for are woken exactly once: at once when nobody
        is queued, otherwise by the next leader as its fsync starts. Their
        records are durable and read back either way; waking them while the
        next group's fsync runs, and not while its leader seals, stats, locks
        and writes, means the interpreter lock is free when they need it,
        instead of being handed back and forth at each of the leader's
        system calls. The leader releases the first latch only, and each
        caller woken releases the next one's (`_wake`): a release that wakes
        a thread costs microseconds on a busy machine, a dozen of them on
        the leader's path is most of its work per group.
        """
        with self._group:
            if self._leading:
                woken = threading.Lock()
                woken.acquire()  # released once: by the leader that wrote it, or to hand it the lead
            else:
                woken = None
            req.woken = woken
            self._queue.append(req)
            self._leading = True
        interrupted = None
        if woken is not None:
            interrupted = _wait(woken)
            if req.done:
                # A leader wrote it (or failed it) while this thread waited: wake the next caller it wrote for.
                if req.after is not None:
                    req.after.woken.release()  # type: ignore[union-attr]  # every caller in a chain has a latch
                if interrupted is not None:
                    raise interrupted
                return
            # Otherwise the lead was handed to this caller: it writes what is
            # queued, itself included, and nobody waits on its latch any more.
            req.woken = None
        with self._group:
            batch, self._queue = self._queue, []
        try:
            with self._mutex:
                self._commit(batch)
        finally:
            # Callers of the group before, if this commit never reached its fsync.
            self._wake_durable()
            with self._group:
                for r in batch:
                    r.done = True
                heir = self._queue[0] if self._queue else None
                self._leading = heir is not None
                waiting = [r for r in batch if r.woken is not None]
                if heir is not None:
                    self._waking.extend(waiting)  # the heir wakes them as its fsync starts
                    waiting = []
            _wake(waiting)
            if heir is not None and heir.woken is not None:
                heir.woken.release()
        if interrupted is not None:
            raise interrupted

    def _wake_durable(self) -> None:
        """Wake the callers whose records a previous group made durable."""
        if not self._waking:
            return
        with self._group:
            waiting, self._waking = self._waking, []
        _wake(waiting)

    def _commit(self, batch: list[_Request]) -> None:
        """Append the records of ``batch`` (this thread holds ``_mutex``); each request gets its proofs or an error."""
        try:
            self._check_usable()
            if self._fd is None and not self.directory.is_dir():
                # Once the log is open its directory exists; a stat per append
                # is a measurable share of the write path.
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            with self._lock:
                self._append_locked(batch)
        except BaseException as exc:  # noqa: BLE001 - handed to every caller whose records it concerns
            for req in batch:
                if req.error is None and (req.proofs is None or req.wrote):
                    req.error = exc
                    req.proofs = None

    def exclusive(self) -> Exclusive:
        """Hold the log under its lock: ``with log.exclusive() as held: held.append(...); held.replace(...)``.

        For the one flow that rewrites the file (redaction) and for copies
        that must see a still log (backup): nothing else appends in between.

        Raises (on entering):
            LockTimeout: another writer held the lock too long; nothing done.
            LogUnusable: an earlier failure on this handle; call reopen().
        """
        return Exclusive(self)

    def _append_locked(self, batch: list[_Request]) -> None:
        """The pipeline, under the lock: tail, seal, one write, fsync, read-back, link check, then proofs.

        Raises on a failure that concerns every request with records to
        write (nothing acknowledged); a request refused on its own content
        gets ``req.error`` and takes no seq.
        """
        try:
            fd, created, size = self._ensure_fd()
        except IsADirectoryError as exc:
            raise StoreDamaged(f"{self.path} is a directory, not a log file; move it aside") from exc
        try:
            size = self._recover_tail(fd, size)
        except OSError as exc:
            raise WriteFailed(
                f"setting aside the unacknowledged tail of {self.path} failed ({exc.strerror or exc}); "
                "nothing was written; free space or fix the device, then retry",
                path=str(self.path),
            ) from exc
        tail = self._tail  # _recover_tail left it for this size
        tail_seq, tail_hash = tail[0], tail[1]

        # Seal every record before anything is written: a bad one refuses its request.
        seq, prev, offset = tail_seq, tail_hash, size
        stamp = record.utc_now()
        lines: list[bytes] = []
        new_ops: dict[str, Placed] = {}
        for req in batch:
            mark = (seq, prev, offset, len(lines))
            added: list[str] = []
            try:
                req.proofs, (seq, prev, offset) = self._seal(req, stamp, size, (seq, prev, offset), lines, new_ops, added)
            except RetainedError as exc:
                # Refused on its own content: its records take no seq.
                seq, prev, offset, n = mark
                del lines[n:]
                for op in added:
                    del new_ops[op]
                req.error = exc
                req.proofs = None
                continue
            req.wrote = len(lines) > mark[3]
        if not lines:
            return
        what = f"seq {seq}" if len(lines) == 1 else f"the batch seq {tail_seq + 1}..{seq}"
        data = lines[0] if len(lines) == 1 else b"".join(lines)
        self._write_durable(fd, data, created, what)
        self._read_back(fd, lines, data, size, tail, what)

        self._tail = (seq, prev, offset - len(lines[-1]), len(lines[-1]))
        self._tail_line = (self._tail, lines[-1]) if len(lines[-1]) < _MARK_DIGEST_BYTES else None
        self._tail_key = self._durable = (self._ino or 0, offset)
        self._publish(lines[-1])
        if new_ops and self._ops_ino == self._ino and self._ops_end == size:
            self._ops.update(new_ops)
            self._ops_end = offset

    def _seal(
        self,
        req: _Request,
        stamp: str,
        size: int,
        at: tuple[int, str, int],
        lines: list[bytes],
        new_ops: dict[str, Placed],
        added: list[str],
    ) -> tuple[list[WriteProof], tuple[int, str, int]]:
        """Seal one request's records from chain position ``at``: their lines go to ``lines``; returns their proofs and the new position."""
        seq, prev, offset = at
        proofs: list[WriteProof] = []
        contents = req.contents
        batch = len(contents) > 1
        ts = req.ts or stamp
        for i, content in enumerate(contents):
            fields = content.fields
            op = fields.get("client_op_id")
            if op is not None:
                earlier = new_ops.get(op) or self._ops_lookup(op, size)
                if earlier is not None:
                    if req.conflicts:
                        self._check_same(op, earlier, fields, lines, size)
                    proofs.append({**earlier, "duplicate": True})
                    continue
            for target in fields.get("supersedes", ()):
                if target > seq:
                    where = f" when record {i + 1} of the batch is written" if batch else ""
                    raise NotFound(
                        f"field supersedes: seq {target} does not exist{where} (the newest record is seq {seq}); "
                        "nothing was written",
                        seq=target,
                        path="supersedes",
                    )
            sealed = record.seal(
                content, seq=seq + 1, prev=prev, ts=ts, client=req.client, record_bytes_max=self.record_bytes_max
            )
            line = sealed.line
            proof: Placed = {"seq": seq + 1, "hash": sealed.hash, "prev": prev, "offset": offset, "length": len(line),
                             "ts": ts}
            if op is not None:
                new_ops[op] = proof
                added.append(op)
            proofs.append({**proof, "duplicate": False})
            lines.append(line)
            seq, prev, offset = seq + 1, sealed.hash, offset + len(line)
        return proofs, (seq, prev, offset)

    def _check_same(self, op: str, earlier: Placed, fields: dict[str, Any], lines: list[bytes], size: int) -> None:
        """Raise OpIdConflict when the record ``earlier`` proves holds other caller content than ``fields``.

        The first record is read from the file, or from this batch's lines
        when it is one of them; one that cannot be read as a record any more
        (damaged since) is left as the duplicate it was.
        """
        offset = earlier["offset"]
        if offset >= size:
            found = make_line(offset, b"".join(lines)[offset - size : offset - size + earlier["length"]])
        else:
            found = self.line_at(offset, earlier["length"])
        if found.status != record.RECORD:
            return
        first = {k: v for k, v in found.record.items() if k not in record.RESERVED_FIELDS}
        if record.canonical(first) == record.canonical(fields):
            return
        differ = sorted(k for k in first.keys() | fields.keys() if k not in first or k not in fields or first[k] != fields[k])
        raise OpIdConflict(
            f"client_op_id {op!r} was already used by seq {earlier['seq']} (hash {earlier['hash'][:12]}…) "
            f"with other content (differs in {', '.join(differ) or 'encoding'}); nothing was written; "
            "a retry must resend the same record, a new record needs a new client_op_id",
            seq=earlier["seq"],
            hash=earlier["hash"],
            path="client_op_id",
        )

    def _write_durable(self, fd: int, data: bytes, created: bool, what: str) -> None:
        """Write ``data`` at the end with one ``os.write`` (pieces only past 1 GiB), then fsync.

        One write on an O_APPEND descriptor: the kernel places it at the end
        as a unit with respect to other O_APPEND writers on POSIX. A short
        count leaves an unterminated tail that recovery T2 sets aside; it is
        never completed by a second write, which another writer could have
        overtaken. Any failure poisons the handle: what reached the file is
        unknown until it is read again.
        """
        try:
            view = memoryview(data)
            while view:
                piece = view[: limits.WRITE_BYTES_MAX]
                written = os.write(fd, piece)
                if written != len(piece):
                    self._poison(f"short write ({written} of {len(piece)} bytes)")
                    raise WriteFailed(
                        f"short write to {self.path}: {written} of {len(piece)} bytes for {what}; "
                        "nothing was acknowledged; the partial line is set aside by the next append; "
                        "a full disk writes short: free space, then retry",
                        path=str(self.path),
                        expected=len(piece),
                        observed=written,
                    )
                view = view[written:]
        except OSError as exc:
            self._poison(f"write failed: {exc.strerror or exc}")
            raise WriteFailed(
                f"writing {what} to {self.path} failed ({exc.strerror or exc}); nothing was acknowledged; "
                "free space or fix the device, then retry",
                path=str(self.path),
            ) from exc
        try:
            self._wake_durable()
            self._make_durable(fd, created)
        except OSError as exc:
            self._poison(f"fsync failed: {exc.strerror or exc}")
            raise WriteFailed(
                f"fsync of {self.path} failed ({exc.strerror or exc}) after writing {what}; "
                "nothing was acknowledged; the device may be failing",
                path=str(self.path),
            ) from exc

    def _read_back(
        self, fd: int, lines: list[bytes], data: bytes, size: int, tail: tuple[int, str, int, int], what: str
    ) -> None:
        """Check what the file now holds at ``size``: the bytes, then every link (L3, L4).

        Read from the file, not from our buffer, at the offset the lines must
        occupy. The record before them is read back too, in the same read
        when it ends where they begin, and its stored seq and hash must be
        the ones they link to: a line that another program rewrote in place
        since this handle read the tail is caught here, not by a later
        verify. Any failure poisons the handle and acknowledges nothing.
        """
        tail_seq, tail_hash, tail_offset, tail_length = tail
        end = size + len(data)
        start = tail_offset if tail_offset >= 0 and tail_offset + tail_length == size else size
        try:
            back = pread(fd, end - start, start)
            if tail_offset >= 0 and start == size:
                before = pread(fd, tail_length, tail_offset)
            else:
                before = back[: size - start]
        except OSError as exc:
            self._poison(f"read-back failed: {exc.strerror or exc}")
            raise ReadBackMismatch(
                f"reading back {what} at byte {size} of {self.path} failed ({exc.strerror or exc}); "
                "nothing was acknowledged",
                path=str(self.path),
                offset=size,
            ) from exc
        mine = back[size - start :]
        if mine != data:
            self._poison("read-back mismatch")
            first = next((i for i, (a, b) in enumerate(zip(mine, data, strict=False)) if a != b), min(len(mine), len(data)))
            raise ReadBackMismatch(
                f"read-back of {what} at byte {size} of {self.path} differs from what was written "
                f"(first difference at byte {size + first}; {len(mine)} of {len(data)} bytes came back); "
                "nothing was acknowledged; run `retained verify`",
                path=str(self.path),
                offset=size,
                expected=len(data),
                observed=len(mine),
            )
        # The chain fields, read again from the bytes that came back (the
        # second of two paths for L3; the first is seal()).
        problem = None
        known = self._tail_line  # parsing is a function of the bytes: the same bytes as a line proven before, the same fields
        if tail_offset >= 0 and not (known is not None and known[0] == tail and known[1] == before) and (
            _link_fields(before)[::2] != (tail_seq, tail_hash)
        ):
            problem = f"the record before it is no longer seq {tail_seq} with hash {tail_hash[:12]}…"
        seq, prev, pos = tail_seq, tail_hash, 0
        for line in lines if problem is None else ():
            found = _link_fields(mine[pos : pos + len(line)])
            if found[0] != seq + 1 or found[1] != prev:
                problem = f"seq {seq + 1} read back as seq {found[0]} with prev {str(found[1])[:12]}…"
                break
            seq, prev, pos = seq + 1, found[2], pos + len(line)
        if problem is not None:
            self._unlinked(fd, size, end, what, problem)

    def _unlinked(self, fd: int, size: int, end: int, what: str, problem: str) -> None:
        """Raise for lines that landed but do not link; set them aside while the file still ends with them."""
        self._unpublish()  # the tail it named did not hold: the next append reads the file
        note = ""
        try:
            if os.fstat(fd).st_size == end:
                note = f"; the lines were set aside as {self._set_aside(fd, size, end)}"
        except OSError as exc:
            note = f"; setting them aside failed ({exc.strerror or exc})"
        self._poison("read-back does not link")
        raise ReadBackMismatch(
            f"{what} read back from byte {size} of {self.path} does not link: {problem}; "
            f"nothing was acknowledged{note}; run `retained verify`",
            path=str(self.path),
            offset=size,
        )

    def _replace_locked(self, suffix: str, write: Callable[[BinaryIO, int], None], check: Callable[[Path], None]) -> None:
        """Replace the whole file: write a temporary beside it, fsync, check, rename, fsync the directory.

        ``write(source, fd)`` streams the new content into ``fd`` from the
        current log; ``check(path)`` raises if the temporary is not what it
        must be (the log is then untouched). A leftover temporary of an
        interrupted run is removed first (unlink never follows a symlink) and
        the new one is created exclusively.
        """
        tmp = self.directory / (LOG_NAME + suffix)
        fd = create_exclusive(tmp)
        try:
            try:
                with open_read(self.path) as source:
                    write(source, fd)
                # Durable before it may replace the log.
                os.fsync(fd)
            finally:
                os.close(fd)
            check(tmp)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
            raise
        os.replace(tmp, self.path)
        fsync_dir(self.directory)
        # Every cached fact (descriptor, tail, offsets) belonged to the old file.
        self._forget_file()


def _wait(latch: threading.Lock) -> BaseException | None:
    """Acquire ``latch``; what a signal handler raised meanwhile (the main thread's Ctrl-C) is returned once it is held.

    Whoever the latch is released to has a duty: wake the next caller of its
    group, or lead. A caller that left on an interrupt would leave them
    waiting for ever; it leaves once its group is written, and raises then.
    """
    interrupted = None
    while True:
        try:
            latch.acquire()
        except BaseException as exc:  # noqa: BLE001 - raised by the caller once the latch is held
            interrupted = interrupted or exc
            continue
        return interrupted


def _wake(waiting: list[_Request]) -> None:
    """Wake callers whose requests are done: release the first latch, and each caller woken releases the next."""
    if not waiting:
        return
    for r, after in pairwise(waiting):
        r.after = after
    waiting[0].woken.release()  # type: ignore[union-attr]  # only callers with a latch are waiting


class _Request:
    """One caller's records on their way into the file, and what came of them."""

    __slots__ = ("after", "client", "conflicts", "contents", "done", "error", "proofs", "ts", "woken", "wrote")

    def __init__(self, contents: list[record.Content], client: dict[str, Any], ts: str | None, conflicts: bool = True) -> None:
        self.contents = contents
        self.conflicts = conflicts
        self.client = client
        self.ts = ts
        self.proofs: list[WriteProof] | None = None
        self.error: BaseException | None = None
        self.wrote = False  # some of its records are among the lines written
        self.done = False
        self.woken: threading.Lock | None = None
        self.after: _Request | None = None  # the next caller to wake once this one is woken (_wake)

    def result(self) -> list[WriteProof]:
        if self.error is not None:
            raise self.error
        if self.proofs is None:
            raise LogUnusable("an append ended without a proof or an error; reopen the log and retry")
        return self.proofs


class Exclusive:
    """The log held under its lock by one caller (see ``Log.exclusive``): a context manager."""

    __slots__ = ("_log",)

    def __init__(self, log: Log) -> None:
        self._log = log

    def __enter__(self) -> Exclusive:
        log = self._log
        log._mutex.acquire()
        try:
            log._check_usable()
            log._lock.__enter__()
        except BaseException:
            log._mutex.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        log = self._log
        try:
            log._lock.__exit__(None, None, None)
        finally:
            log._mutex.release()

    def append(self, contents: list[record.Content], *, client: dict[str, Any], ts: str | None = None) -> list[WriteProof]:
        """``Log.append`` without taking the lock again: the same pipeline."""
        req = _Request(contents, client, ts)
        try:
            self._log._append_locked([req])
        except BaseException as exc:  # noqa: BLE001 - raised below, as for any caller
            req.error = exc
        return req.result()

    def replace(self, suffix: str, write: Callable[[BinaryIO, int], None], check: Callable[[Path], None]) -> None:
        """Replace the whole file through a temporary named log.jsonl + ``suffix`` (see ``Log._replace_locked``)."""
        self._log._replace_locked(suffix, write, check)


def _link_fields(raw: bytes) -> tuple[Any, Any, Any]:
    """``(seq, prev, hash)`` as a stored line holds them; Nones where it holds no such object."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, None, None
    if type(obj) is not dict:
        return None, None, None
    return obj.get("seq"), obj.get("prev"), obj.get("hash")


def proof_of(line: Line) -> Placed:
    """The proof fields of a stored chained line."""
    if not line.chained:
        raise ValueError(f"the line at byte {line.offset} is {line.status}, not a chained record: it has no proof")
    rec = line.record
    return {
        "seq": line.seq,
        "hash": line.hash,
        "prev": rec["prev"],
        "offset": line.offset,
        "length": line.length,
        "ts": rec.get("ts"),
    }
