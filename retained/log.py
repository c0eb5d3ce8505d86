"""The append-only log file: the only writer of ``log.jsonl``.

Invariants (cited by id in tests and comments):

- L1: one canonical JSON record per line, ending in ``\\n``.
- L2: ``seq`` runs 1, 2, 3 over chained records with no gaps.
- L3: ``prev`` equals the previous chained record's ``hash``.
- L4: a write is acknowledged only after write, fsync, and a byte-exact
  read-back of the line at the offset it was written at.
- L5: the index is derived from the log alone, never the reverse.

Crash cases this module defends, each at its step in ``Log.append``:

- killed before ``os.write``: nothing changed.
- killed during ``os.write`` or a short write: an unterminated tail, never
  acknowledged; the next append sets it aside and truncates (recovery.py T2).
- killed after ``os.write``, before or during ``fsync``: the line may or may
  not survive a power cut; it was not acknowledged either way. If it
  survives whole it is a valid record and the chain continues from it.
- ``fsync`` or read-back fails: no acknowledgement, and the handle is
  poisoned (LogUnusable) because the page cache may now disagree with the
  disk; reopening re-derives every cached fact from the file.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from collections import namedtuple

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the brief path does not import typing
if TYPE_CHECKING:
    from typing import Any, BinaryIO

from . import limits, record, recovery
from .errors import LogUnusable, NotFound, ReadBackMismatch, StoreDamaged, WriteFailed
from .lock import StoreLock

LOG_NAME = "log.jsonl"
LOCK_NAME = "log.lock"
_O_BINARY = getattr(os, "O_BINARY", 0)


class Line(namedtuple("Line", "offset raw status record seq hash problem")):
    """One line of the log as found on disk, with what it is.

    ``status`` is record / redacted (a valid chained line), foreign (JSON
    without chain fields, written by another program), damaged (a complete
    line that fails to parse or verify) or torn (bytes after the last
    newline). ``seq`` and ``hash`` are what the line claims, also when damaged.
    A named tuple: scans build one per line, and tuple construction is the
    cheapest immutable record Python has (collections', not typing's: the
    brief path does not import typing).

    Fields: offset (int), raw (bytes), status (str), record (the parsed
    object or None), seq (int | None), hash (str | None), problem (str | None).
    """

    __slots__ = ()

    @property
    def length(self) -> int:
        return len(self.raw)

    @property
    def end(self) -> int:
        return self.offset + len(self.raw)

    @property
    def chained(self) -> bool:
        return self.status in _CHAINED


_CHAINED = frozenset({record.RECORD, record.REDACTED})


def make_line(offset: int, raw: bytes, *, fast_start: bool = False) -> Line:
    """Classify one line; ``fast_start=True`` uses record.classify_for_display (same answer, no orjson import)."""
    if not raw.endswith(b"\n"):
        return Line(offset, raw, record.TORN, None, None, None, "unterminated last line")
    classify = record.classify_for_display if fast_start else record.classify
    status, obj, seq, h, problem = classify(raw[:-1])
    return Line(offset, raw, status, obj, seq, h, problem)


def pread(fd: int, length: int, offset: int) -> bytes:
    """Read exactly what is there at ``offset``; short only at end of file."""
    if hasattr(os, "pread"):
        parts = []
        while length > 0:
            chunk = os.pread(fd, length, offset)
            if not chunk:
                break
            parts.append(chunk)
            length -= len(chunk)
            offset += len(chunk)
        return b"".join(parts)
    # Windows has no pread; the caller holds the lock, so seeking is safe.
    os.lseek(fd, offset, os.SEEK_SET)
    parts = []
    while length > 0:
        chunk = os.read(fd, length)
        if not chunk:
            break
        parts.append(chunk)
        length -= len(chunk)
    return b"".join(parts)


def fsync_dir(path: Path) -> None:
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


def segments_reverse(f: BinaryIO, end: int) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, bytes)`` of each line before ``end``, newest first.

    The first segment may lack its newline (a torn tail). Reads grow when a
    line is longer than a chunk, so a 16 MiB line costs a few reads, not
    hundreds.
    """
    pos = end
    carry = b""
    chunk = limits.TAIL_CHUNK_BYTES
    while True:
        n = min(chunk, pos)
        pos -= n
        f.seek(pos)
        data = f.read(n) + carry
        hi = len(data)
        while True:
            if hi == 0:
                if pos == 0:
                    return
                carry = b""
                break
            nl = data.rfind(b"\n", 0, hi - 1)
            if nl == -1:
                if pos == 0:
                    yield 0, data[:hi]
                    return
                carry = data[:hi]
                chunk *= 2
                break
            yield pos + nl + 1, data[nl + 1 : hi]
            hi = nl + 1


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
    ) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOG_NAME
        self._path_s = os.fspath(self.path)  # for the stat on every append: a str skips pathlib's conversion
        self.lock_path = self.directory / LOCK_NAME
        self.record_bytes_max = record_bytes_max
        self.lock_wait_s = lock_wait_s
        self._mutex = threading.Lock()
        self._fd: int | None = None
        self._ino: int | None = None
        self._unusable: str | None = None
        # Tail cache: valid while the file has this (inode, size).
        self._tail_key: tuple[int, int] | None = None
        self._tail: tuple[int, str] = (0, record.ZERO_HASH)
        # client_op_id -> proof, complete up to _ops_end on inode _ops_ino.
        self._ops: dict[str, dict[str, Any]] = {}
        self._ops_end = 0
        self._ops_ino: int | None = None
        self.recovered: list[dict[str, Any]] = []
        # One lock descriptor per Log, reused by every append (see lock.py).
        self._lock = StoreLock(self.lock_path, lock_wait_s, keep_open=True)

    # -- reading -----------------------------------------------------------

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def exists(self) -> bool:
        return self.path.exists()

    def _open_read(self) -> BinaryIO | None:
        try:
            return open(self.path, "rb")  # noqa: SIM115 - closed by callers' with
        except FileNotFoundError:
            return None
        except IsADirectoryError as exc:
            raise StoreDamaged(f"{self.path} is a directory, not a log file; move it aside") from exc

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
        f = self._open_read()
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

    def scan_reverse(self, stop: int | None = None, *, fast_start: bool = False) -> Iterator[Line]:
        """Every line before ``stop``, newest first (a torn tail first, if any).

        ``fast_start=True`` classifies with the standard library's JSON (the
        same checks; orjson is imported only for a line that needs it), for
        the session-start brief, whose whole run costs less than importing
        orjson.
        """
        f = self._open_read()
        if f is None:
            return
        with f:
            if stop is None:
                stop = os.fstat(f.fileno()).st_size
            for offset, raw in segments_reverse(f, stop):
                yield make_line(offset, raw, fast_start=fast_start)

    def read_at(self, offset: int, length: int) -> bytes:
        """The bytes of one line, as an index remembers its place."""
        f = self._open_read()
        if f is None:
            return b""
        with f:
            f.seek(offset)
            return f.read(length)

    def read_many(self, places: list[tuple[int, int]]) -> list[bytes]:
        """The bytes at each ``(offset, length)``, read through one open file (b"" for each if there is no log)."""
        f = self._open_read()
        if f is None:
            return [b""] * len(places)
        with f:
            out = []
            for offset, length in places:
                f.seek(offset)
                out.append(f.read(length))
            return out

    def line_at(self, offset: int, length: int) -> Line:
        return make_line(offset, self.read_at(offset, length))

    def tail(self, stop: int | None = None) -> tuple[int, str, int]:
        """``(seq, hash, end offset)`` of the last valid chained line.

        Reads backwards from the end, never the whole log unless the whole log
        has no valid record. Foreign and damaged lines are passed over: the
        chain skips them.
        """
        for line in self.scan_reverse(stop):
            if line.chained:
                assert line.seq is not None and line.hash is not None
                return line.seq, line.hash, line.end
        return 0, record.ZERO_HASH, 0

    def find(self, seq: int) -> Line:
        """The valid line holding ``seq``, by a scan (the index does this faster).

        Raises:
            NotFound: no valid chained line has that seq.
        """
        for line in self.scan():
            if line.chained and line.seq == seq:
                return line
        raise NotFound(f"no record with seq {seq} in {self.path}; see `retained list` for what exists", seq=seq)

    def quarantined(self) -> list[dict[str, Any]]:
        """Torn tails set aside by earlier appends, with their sizes."""
        out = []
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

    def reopen(self) -> None:
        """Forget every cached fact and the poisoned state; the next append re-reads the file."""
        with self._mutex:
            self._close_fd()
            self._unusable = None
            self._ops.clear()
            self._ops_end = 0
            self._ops_ino = None

    def _poison(self, why: str) -> None:
        self._unusable = why
        try:
            self._close_fd()
        except OSError:
            pass

    def _ensure_fd(self) -> tuple[int, bool]:
        """The append descriptor, reopened if the file was replaced (redaction renames a new log in)."""
        try:
            st = os.stat(self._path_s)
        except FileNotFoundError:
            st = None
        if self._fd is not None and st is not None and st.st_ino == self._ino:
            return self._fd, False
        self._close_fd()
        created = st is None
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | _O_BINARY, 0o600)
        self._fd = fd
        self._ino = os.fstat(fd).st_ino
        return fd, created

    def _make_durable(self, fd: int, created: bool) -> None:
        """fsync the log; on its first creation its directory entry too.

        Without the directory fsync a power cut could lose the whole file
        after seq 1 was acknowledged.
        """
        os.fsync(fd)
        if created:
            fsync_dir(self.directory)

    def _recover_tail(self, fd: int, size: int) -> int:
        """Apply recovery.py's table to the log's end; returns the size after it."""
        if self._tail_key == (self._ino or 0, size):
            # The file ends where this handle's last append or tail read left
            # it: a whole line, read back, ending in a newline (T0/T1).
            return size
        ends_with_newline = size > 0 and pread(fd, 1, size - 1) == b"\n"
        row = recovery.decide(size == 0, ends_with_newline)
        if row.action == "accept":
            return size
        assert row.name == "T2"
        with open(self.path, "rb") as f:
            torn_offset, _ = next(segments_reverse(f, size))
        torn = pread(fd, size - torn_offset, torn_offset)
        # Keep the bytes first (fsynced, with their directory entry), truncate
        # second: a crash between the two leaves a copy and the torn tail, and
        # the next append simply does this again under another name.
        attempt = 0
        while True:
            qpath = self.directory / recovery.quarantine_name(LOG_NAME, torn_offset, attempt)
            try:
                qfd = os.open(qpath, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY, 0o600)
                break
            except FileExistsError:
                attempt += 1
        try:
            view = memoryview(torn)
            while view:
                view = view[os.write(qfd, view) :]
            os.fsync(qfd)
        finally:
            os.close(qfd)
        fsync_dir(self.directory)
        os.ftruncate(fd, torn_offset)
        os.fsync(fd)
        self._tail_key = None
        self.recovered.append({"file": qpath.name, "offset": torn_offset, "bytes": len(torn)})
        return torn_offset

    def _current_tail(self, fd: int, size: int) -> tuple[int, str]:
        key = (self._ino or 0, size)
        if self._tail_key != key:
            seq, h, _ = self.tail(stop=size)
            self._tail = (seq, h)
            self._tail_key = key
        return self._tail

    def _ops_lookup(self, client_op_id: str, size: int) -> dict[str, Any] | None:
        """The proof of an earlier write with this client_op_id, if any.

        Built by one scan per process and then extended from where it ended,
        so a retry is recognised across processes and restarts.
        """
        if self._ops_ino != self._ino or self._ops_end > size:
            self._ops.clear()
            self._ops_end = 0
            self._ops_ino = self._ino
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

    def append(
        self,
        content: record.Content,
        *,
        client: dict[str, Any],
        ts: str | None = None,
    ) -> dict[str, Any]:
        """Append one record and return its proof once it is durable.

        Takes the lock, sets aside a torn tail, links to the last valid record,
        writes one line with one ``os.write`` on an O_APPEND descriptor,
        fsyncs, and compares the bytes read back at the written offset (L4).

        Returns:
            The proof: seq, hash, prev, offset, length, ts, duplicate.

        Raises:
            InvalidRecord / RecordTooLarge: nothing written.
            NotFound: a ``supersedes`` seq does not exist yet; nothing written.
            LockTimeout: nothing written.
            WriteFailed / ReadBackMismatch: no acknowledgement; handle unusable.
            LogUnusable: an earlier failure on this handle; call reopen().
        """
        with self._mutex:
            if self._unusable is not None:
                raise LogUnusable(
                    f"an earlier write on this handle failed ({self._unusable}); "
                    "reopen the log to re-read its state, then retry",
                    path=str(self.path),
                )
            if self._fd is None and not self.directory.is_dir():
                # Once the log is open its directory exists; a stat per append
                # is a measurable share of the write path.
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            with self._lock:
                return self._append_locked(content, client, ts)

    def _append_locked(self, content: record.Content, client: dict[str, Any], ts: str | None) -> dict[str, Any]:
        try:
            fd, created = self._ensure_fd()
        except IsADirectoryError as exc:
            raise StoreDamaged(f"{self.path} is a directory, not a log file; move it aside") from exc
        size = self._recover_tail(fd, os.fstat(fd).st_size)

        op = content.fields.get("client_op_id")
        if op is not None:
            earlier = self._ops_lookup(op, size)
            if earlier is not None:
                return {**earlier, "duplicate": True}

        tail_seq, tail_hash = self._current_tail(fd, size)
        for target in content.fields.get("supersedes", ()):
            if target > tail_seq:
                raise NotFound(
                    f"field supersedes: seq {target} does not exist (the newest record is seq {tail_seq}); nothing was written",
                    seq=target,
                    path="supersedes",
                )
        sealed = record.seal(
            content,
            seq=tail_seq + 1,
            prev=tail_hash,
            ts=ts or record.utc_now(),
            client=client,
            record_bytes_max=self.record_bytes_max,
        )
        line = sealed.line
        offset = size

        # One write on an O_APPEND descriptor: the kernel places it at the end
        # as a unit with respect to other O_APPEND writers on POSIX. A short
        # count leaves an unterminated tail that recovery T2 sets aside.
        try:
            written = os.write(fd, line)
        except OSError as exc:
            self._poison(f"write failed: {exc.strerror or exc}")
            raise WriteFailed(
                f"writing seq {tail_seq + 1} to {self.path} failed ({exc.strerror or exc}); nothing was acknowledged; "
                "free space or fix the device, then retry",
                path=str(self.path),
            ) from exc
        if written != len(line):
            self._poison(f"short write ({written} of {len(line)} bytes)")
            raise WriteFailed(
                f"short write to {self.path}: {written} of {len(line)} bytes for seq {tail_seq + 1}; "
                "nothing was acknowledged; the partial line is set aside by the next append",
                path=str(self.path),
                expected=len(line),
                observed=written,
            )
        try:
            self._make_durable(fd, created)
        except OSError as exc:
            self._poison(f"fsync failed: {exc.strerror or exc}")
            raise WriteFailed(
                f"fsync of {self.path} failed ({exc.strerror or exc}) after writing seq {tail_seq + 1}; "
                "nothing was acknowledged; the device may be failing",
                path=str(self.path),
            ) from exc

        # Read back from the file, not from our buffer, at the offset the line
        # must occupy; only bytes that come back equal are acknowledged.
        try:
            back = pread(fd, len(line), offset)
        except OSError as exc:
            self._poison(f"read-back failed: {exc.strerror or exc}")
            raise ReadBackMismatch(
                f"reading back seq {tail_seq + 1} at byte {offset} of {self.path} failed ({exc.strerror or exc}); "
                "nothing was acknowledged",
                path=str(self.path),
                offset=offset,
            ) from exc
        if back != line:
            self._poison("read-back mismatch")
            first = next((i for i, (a, b) in enumerate(zip(back, line)) if a != b), min(len(back), len(line)))
            raise ReadBackMismatch(
                f"read-back of seq {tail_seq + 1} at byte {offset} of {self.path} differs from what was written "
                f"(first difference at byte {offset + first}; {len(back)} of {len(line)} bytes came back); "
                "nothing was acknowledged; run `retained verify`",
                path=str(self.path),
                offset=offset,
                expected=len(line),
                observed=len(back),
            )
        # The chain link is checked on the bytes that came back, not only on
        # the object we built (the second of two paths for L3).
        status, obj, seq, h, problem = record.classify(back[:-1])
        if status != record.RECORD or seq != tail_seq + 1 or obj["prev"] != tail_hash or h != sealed.hash:
            self._poison("read-back does not link")
            raise ReadBackMismatch(
                f"seq {tail_seq + 1} read back from byte {offset} does not link to seq {tail_seq} "
                f"({problem or 'prev or seq differs'}); nothing was acknowledged; run `retained verify`",
                path=str(self.path),
                offset=offset,
            )

        new_size = offset + len(line)
        self._tail = (tail_seq + 1, sealed.hash)
        self._tail_key = (self._ino or 0, new_size)
        proof = {
            "seq": tail_seq + 1,
            "hash": sealed.hash,
            "prev": tail_hash,
            "offset": offset,
            "length": len(line),
            "ts": sealed.record["ts"],
        }
        if op is not None and self._ops_ino == self._ino and self._ops_end == offset:
            self._ops[op] = proof
            self._ops_end = new_size
        return {**proof, "duplicate": False}


    def append_batch(
        self,
        contents: list[record.Content],
        *,
        client: dict[str, Any],
    ) -> list[dict[str, Any]]:
        """Append many records under one lock with one fsync; return their proofs.

        Each record is chained to the one before it; the whole region is read
        back and compared byte for byte before any proof is returned (L4). A
        record whose client_op_id is already in the log (or earlier in the
        batch) is not appended again: its proof comes back with duplicate true.

        Raises what ``append`` raises; on a write, fsync or read-back failure no
        record of the batch is acknowledged.
        """
        with self._mutex:
            if self._unusable is not None:
                raise LogUnusable(
                    f"an earlier write on this handle failed ({self._unusable}); reopen the log, then retry",
                    path=str(self.path),
                )
            if self._fd is None and not self.directory.is_dir():
                # Once the log is open its directory exists; a stat per append
                # is a measurable share of the write path.
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            with self._lock:
                return self._append_batch_locked(contents, client)

    def _append_batch_locked(self, contents: list[record.Content], client: dict[str, Any]) -> list[dict[str, Any]]:
        fd, created = self._ensure_fd()
        size = self._recover_tail(fd, os.fstat(fd).st_size)
        seq, prev = self._current_tail(fd, size)
        start_seq = seq
        ts = record.utc_now()
        lines: list[bytes] = []
        proofs: list[dict[str, Any]] = []
        new_ops: dict[str, dict[str, Any]] = {}
        offset = size
        for content in contents:
            op = content.fields.get("client_op_id")
            if op is not None:
                earlier = new_ops.get(op) or self._ops_lookup(op, size)
                if earlier is not None:
                    proofs.append({**earlier, "duplicate": True})
                    continue
            for target in content.fields.get("supersedes", ()):
                if target > seq:
                    raise NotFound(
                        f"field supersedes: seq {target} does not exist when record {len(proofs) + 1} of the batch "
                        "is written; nothing was written",
                        seq=target,
                        path="supersedes",
                    )
            sealed = record.seal(content, seq=seq + 1, prev=prev, ts=ts, client=client, record_bytes_max=self.record_bytes_max)
            proof = {"seq": seq + 1, "hash": sealed.hash, "prev": prev, "offset": offset, "length": len(sealed.line), "ts": ts}
            if op is not None:
                new_ops[op] = proof
            proofs.append({**proof, "duplicate": False})
            lines.append(sealed.line)
            seq, prev, offset = seq + 1, sealed.hash, offset + len(sealed.line)
        if not lines:
            return proofs
        data = b"".join(lines)
        assert len(data) == offset - size
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view[: 8 * 1024 * 1024])
                if n <= 0:
                    raise OSError(0, "write returned 0")
                view = view[n:]
            self._make_durable(fd, created)
        except OSError as exc:
            self._poison(f"batch write failed: {exc.strerror or exc}")
            raise WriteFailed(
                f"writing a batch of {len(lines)} records (seq {start_seq + 1}..{seq}) to {self.path} failed "
                f"({exc.strerror or exc}); nothing was acknowledged; whole lines that landed are valid records, "
                "an unterminated tail is set aside by the next append",
                path=str(self.path),
            ) from exc
        back = pread(fd, len(data), size)
        if back != data:
            self._poison("batch read-back mismatch")
            raise ReadBackMismatch(
                f"read-back of the batch seq {start_seq + 1}..{seq} at byte {size} differs from what was written; "
                "nothing was acknowledged; run `retained verify`",
                path=str(self.path),
                offset=size,
            )
        self._tail = (seq, prev)
        self._tail_key = (self._ino or 0, offset)
        if self._ops_ino == self._ino and self._ops_end == size:
            self._ops.update(new_ops)
            self._ops_end = offset
        return proofs


def proof_of(line: Line) -> dict[str, Any]:
    """The proof fields of a stored chained line."""
    assert line.chained
    rec = line.record
    return {
        "seq": line.seq,
        "hash": line.hash,
        "prev": rec["prev"],
        "offset": line.offset,
        "length": line.length,
        "ts": rec.get("ts"),
    }

