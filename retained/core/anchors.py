"""Anchors: the store's head recorded outside the store, so a log cut back or re-chained is caught.

An anchor is a head the store once had (seq, hash, log size, time), kept in
``<anchor dir>/<store id>.jsonl``, outside the store directory, where whoever
rewrites the log must also find and rewrite it. `record_head` and `Routine`
record heads, `load` and `check` find anchors off the chain (``rolled_back``,
``anchor_mismatch``), `settle` and `compact` rewrite the file. The anchor
directory is a setting the edges pass in (`dir_from`; library modules read no
environment); None turns anchoring off. What anchors prove, and what not:
docs/anchors.md. Standard library only (with ``core.files``): the
session-start brief records its head through here (see ``brief.reader``).
"""

from __future__ import annotations

import json
import os
import time
from collections import namedtuple
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from retained.core import files
from retained.core.lines import utc_now
from retained.errors import InvalidRecord, RetainedError

ID_NAME = "store.id"
FORMAT = 1
# An anchor file is read whole by verify; past this size it is reported, not read.
FILE_BYTES_MAX = 16 * 1024 * 1024
# The brief reads this much of the file's end to see whether its head is already there.
TAIL_BYTES = 4096
# Anchor files looked at for a header naming this store's directory (one per store the user has).
FILES_MAX = 10_000
# Anchors named one by one in an acceptance record (the count is always exact).
ACCEPT_LISTED_MAX = 100
_ID_BYTES = 16
_ID_WAIT_TRIES = 50  # a store.id being written by another process: re-read this many times, pausing between reads

Anchor = namedtuple("Anchor", "seq hash bytes time source file")
Anchor.__doc__ = """A head the store once had: ``seq``, ``hash``, ``bytes`` (log size), ``time``, ``source``, ``file``."""


class AnchorError(RetainedError):
    """An anchor file or the store id cannot be read or written; the log is untouched."""

    code = "anchor_failed"


def dir_from(environ: Mapping[str, str]) -> Path | None:
    """The anchor directory the settings in ``environ`` name (for the edges), or None when anchoring is off.

    The settings: docs/anchors.md, Where (``XDG_STATE_HOME`` counts only as
    an absolute path, as the XDG specification says).
    """
    explicit = environ.get("RETAINED_ANCHOR_DIR", "").strip()
    if explicit:
        return None if explicit.lower() == "off" else Path(explicit).expanduser()
    state = environ.get("XDG_STATE_HOME", "").strip()
    if state and os.path.isabs(state):
        return Path(state) / "retained"
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "state" / "retained"


def outside(anchor_dir: Path, store_dir: Path) -> Path:
    """``anchor_dir``, refused when it lies inside the store (or is it): anchors there would go with the log they check.

    Raises:
        InvalidRecord: the anchor directory is inside ``store_dir`` (nothing was read or written).
    """
    if files.inside(anchor_dir, store_dir.expanduser()):
        raise InvalidRecord(
            f"the anchor directory {anchor_dir} is inside the store {store_dir}: anchors there would be rolled back "
            "or deleted with the log they check; set RETAINED_ANCHOR_DIR (anchor_dir=) to a directory outside the store",
            path="anchor_dir",
        )
    return anchor_dir


def parse(spec: str) -> Anchor:
    """An anchor given as ``SEQ:HASH`` (as ``retained head`` prints it, e.g. saved in git or a ticket).

    Raises:
        InvalidRecord: not a positive seq and a 64-digit hex hash.
    """
    seq_text, sep, h = str(spec).strip().partition(":")
    h = h.strip().lower()
    if not sep or not seq_text.strip().isdigit() or int(seq_text) < 1 or len(h) != 64 or h.strip("0123456789abcdef"):
        raise InvalidRecord(
            f"anchor {spec!r}: expected SEQ:HASH, a seq from 1 and its 64-digit hex hash (see `retained head`)",
            path="anchor",
        )
    return Anchor(int(seq_text), h, None, None, "given", None)


# -- the store id --------------------------------------------------------------------


def store_id(directory: str | os.PathLike[str], *, create: bool = True) -> str | None:
    """The store's id from ``store.id``, made (random, 0600, exclusively) when absent and ``create``.

    None when there is none and it is not made, or the store directory does
    not exist (the id is never what creates a store).

    Raises:
        LinkRefused: ``store.id`` is a symbolic link.
        AnchorError: it cannot be read or written, or holds something else.
    """
    path = Path(directory) / ID_NAME
    for _ in range(_ID_WAIT_TRIES):
        try:
            with files.open_read(path) as f:
                text = f.read(256).decode("ascii", "replace").strip()
        except FileNotFoundError:
            if not create or not Path(directory).is_dir():
                return None
            made = _make_id(path)
            if made is not None:
                return made
            continue  # another process made it first: read theirs
        except OSError as exc:
            raise AnchorError(f"{path} cannot be read ({exc.strerror or exc}); the log is untouched", path=str(path)) from exc
        if len(text) == 2 * _ID_BYTES and not text.strip("0123456789abcdef"):
            return text
        if text:
            raise AnchorError(
                f"{path} holds {text[:40]!r}, not a store id (32 hex digits); move it aside and a new one is made, "
                "after which anchors are matched by the store's path",
                path=str(path),
            )
        # Empty: another process has created it and not yet written it.
        time.sleep(0.01)
    raise AnchorError(f"{path} stayed empty; remove it and retry", path=str(path))


def _make_id(path: Path) -> str | None:
    """Write a new id to ``path`` exclusively; None if another process created it first."""
    sid = os.urandom(_ID_BYTES).hex()
    try:
        fd = files.open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return None
    except OSError as exc:
        raise AnchorError(f"{path} cannot be created ({exc.strerror or exc}); free space or fix permissions",
                          path=str(path)) from exc
    try:
        files.write_synced(fd, (sid + "\n").encode("ascii"))
    except OSError as exc:
        os.unlink(path)
        raise AnchorError(f"{path} cannot be written ({exc.strerror or exc}); free space, then retry",
                          path=str(path)) from exc
    files.fsync_dir(path.parent)
    return sid


def anchor_file(anchor_dir: str | os.PathLike[str], sid: str) -> Path:
    """The store's anchor file: JSON lines, appended to.

    A header (``retained_anchors``, ``store_id``, ``store``: the store's
    directory, so a store whose id file was removed is still matched by its
    path), then anchors (``seq``, ``hash``, ``bytes``, ``time``, ``source``:
    what recorded it, e.g. verify or brief), and settle lines (``settled_to``:
    the anchors before that byte were accepted; ``by``: the acceptance record).
    """
    return Path(anchor_dir) / f"{sid}.jsonl"


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8") + b"\n"


def _header(sid: str, directory: Path) -> dict[str, Any]:
    return {"retained_anchors": FORMAT, "store_id": sid, "store": str(directory.resolve())}


def _open_append(path: Path) -> tuple[int, bool]:
    """The anchor file opened for appending (0600, never through a link), and whether it was just created."""
    flags = os.O_RDWR | os.O_APPEND
    try:
        return files.open_fd(path, flags), False
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        return files.open_fd(path, flags | os.O_CREAT | os.O_EXCL), True
    except FileExistsError:
        return files.open_fd(path, flags), False


# -- recording -----------------------------------------------------------------------


def record_head(
    anchor_dir: str | os.PathLike[str],
    directory: str | os.PathLike[str],
    seq: int,
    h: str,
    size: int,
    source: str,
    *,
    durable: bool = False,
) -> dict[str, Any]:
    """Append the head ``(seq, h, size)`` to the store's anchor file unless it already ends with it.

    The brief's path: the store id (one small read), the file's last few KiB
    (one read) and at most one write. ``durable`` also fsyncs (verify and
    accept; why not the brief: docs/anchors.md). Returns ``{"file",
    "store_id", "recorded"}``.

    Raises:
        LinkRefused / AnchorError: nothing recorded; the log is untouched.
    """
    directory = Path(directory)
    sid = store_id(directory)
    if sid is None:
        raise AnchorError(f"no store at {directory}: no head to anchor", path=str(directory))
    path = anchor_file(anchor_dir, sid)
    entry = {"seq": seq, "hash": h, "bytes": size}
    try:
        fd, created = _open_append(path)
        try:
            data = b""
            if created:
                data = _line(_header(sid, directory))
            else:
                end = os.fstat(fd).st_size
                os.lseek(fd, max(0, end - TAIL_BYTES), os.SEEK_SET)  # reads only: appends still go to the end
                tail = os.read(fd, min(TAIL_BYTES, end)) if end else b""
                if _last_head(tail) == (seq, h, size):
                    return {"file": str(path), "store_id": sid, "recorded": False}
                if tail and not tail.endswith(b"\n"):
                    # An append cut short (a crash): end it, so this line stays whole;
                    # verify reports the fragment as a line it cannot read.
                    data = b"\n"
            data += _line({**entry, "time": utc_now(), "source": source})
            files.write_all(fd, data)
            if durable:
                os.fsync(fd)
                if created:
                    files.fsync_dir(path.parent)
        finally:
            os.close(fd)
    except OSError as exc:
        raise AnchorError(
            f"recording the head in {path} failed ({exc.strerror or exc}); free space or fix the directory; "
            "the log is untouched",
            path=str(path),
        ) from exc
    return {"file": str(path), "store_id": sid, "recorded": True}


EVERY_RECORDS = 1000  # a write records the head when this many records were written since the last it recorded
EVERY_S = 300.0  # ... or this many seconds passed


class Routine:
    """The head recorded after writes, routinely: a process's first write, then at most every N records or S seconds.

    Why, and when: docs/anchors.md, When heads are recorded. A failure to
    record is not the write's (it was acknowledged already): the next one tries again.
    """

    def __init__(self, anchor_dir: Path, directory: Path, every: int = EVERY_RECORDS, every_s: float = EVERY_S) -> None:
        self.anchor_dir = anchor_dir
        self.directory = directory
        self.every = every
        self.every_s = every_s
        self._last: tuple[int, float] | None = None  # (seq, monotonic time) of the last head recorded here

    def after(self, seq: int, h: str, size: int) -> None:
        """Record ``(seq, h, size)``, the head after a write, when it is due."""
        now = time.monotonic()
        last = self._last
        if last is not None and seq - last[0] < self.every and now - last[1] < self.every_s:
            return
        try:
            record_head(self.anchor_dir, self.directory, seq, h, size, "write")
        except RetainedError:
            return
        self._last = (seq, now)


def _last_head(tail: bytes) -> tuple[Any, Any, Any] | None:
    """``(seq, hash, bytes)`` of the last complete anchor line in ``tail``, None if the last line is not one."""
    lines = tail.split(b"\n")
    if len(lines) < 2:
        return None
    try:
        obj = json.loads(lines[-2])
    except ValueError:
        return None
    if not isinstance(obj, dict) or "seq" not in obj:
        return None
    return obj.get("seq"), obj.get("hash"), obj.get("bytes")


# -- reading ----------------------------------------------------------------------------


class Loaded:
    """The anchors of one store: those still to check, and what was read.

    ``anchors``: every anchor not yet settled, oldest first, in every file
    that belongs to the store (its id's, and any whose header names its
    directory). ``files``: ``{path: bytes read}`` of those files. ``problems``:
    findings for what could not be read. ``history``: every anchor read,
    settled ones included (for listing).
    """

    __slots__ = ("anchor_dir", "anchors", "file", "files", "history", "problems", "store_id")

    def __init__(self, anchor_dir: Path, sid: str | None) -> None:
        self.anchor_dir = anchor_dir
        self.store_id = sid
        self.file = anchor_file(anchor_dir, sid) if sid else None
        self.files: dict[Path, int] = {}
        self.anchors: list[Anchor] = []
        self.history: list[dict[str, Any]] = []
        self.problems: list[dict[str, Any]] = []


def load(anchor_dir: str | os.PathLike[str], directory: str | os.PathLike[str]) -> Loaded:
    """Read every anchor of the store at ``directory`` (making its id if it has none yet).

    Unreadable files or lines become ``anchor_unreadable`` problems, never
    exceptions: a verify always reports.
    """
    anchor_dir = Path(anchor_dir)
    directory = Path(directory)
    problem = None
    try:
        sid = store_id(directory, create=False)
    except RetainedError as exc:  # a link, or something that is not an id
        sid, problem = None, _problem(str(directory / ID_NAME), exc.message)
    if sid is None and problem is None:
        try:
            sid = store_id(directory)
        except RetainedError:
            sid = None  # cannot be made here (a read-only store, a full disk): anchors are matched by path
    loaded = Loaded(anchor_dir, sid)
    if problem is not None:
        loaded.problems.append(problem)
    mine = str(directory.resolve())
    paths = []
    if loaded.file is not None:
        paths.append(loaded.file)
    try:
        names = sorted(os.listdir(anchor_dir))[:FILES_MAX]
    except FileNotFoundError:
        names = []
    except OSError as exc:
        loaded.problems.append(_problem(str(anchor_dir), f"the anchor directory cannot be listed ({exc.strerror or exc})"))
        names = []
    for name in names:
        path = anchor_dir / name
        if not name.endswith(".jsonl") or path == loaded.file:
            continue
        header = _read_header(path)
        if header is not None and header.get("store") == mine:
            paths.append(path)
    for path in paths:
        _read_file(loaded, path, own=path == loaded.file)
    return loaded


def _read_header(path: Path) -> dict[str, Any] | None:
    try:
        with files.open_read(path) as f:
            first = f.readline(4096)
        obj = json.loads(first)
    except (OSError, ValueError, RetainedError):
        return None
    return obj if isinstance(obj, dict) and "retained_anchors" in obj else None


def _read_file(loaded: Loaded, path: Path, *, own: bool) -> None:
    try:
        with files.open_read(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > FILE_BYTES_MAX:
                loaded.problems.append(_problem(str(path), f"{size} bytes, over the {FILE_BYTES_MAX} this reads; "
                                                "move it aside once verify reports nothing else"))
                return
            data = f.read(size)
    except FileNotFoundError:
        return
    except (OSError, RetainedError) as exc:
        reason = exc.message if isinstance(exc, RetainedError) else f"{exc.strerror or exc}"
        loaded.problems.append(_problem(str(path), f"cannot be read ({reason})"))
        return
    # Bytes after the last newline are an append cut short: never an anchor.
    complete = data[: data.rfind(b"\n") + 1]
    loaded.files[path] = len(complete)
    pending: list[tuple[Anchor, int, dict[str, Any]]] = []  # (anchor, its byte in the file, its history entry)
    bad: list[tuple[int, dict[str, Any]]] = []  # (byte in the file, problem)
    offset = 0
    for n, raw in enumerate(complete.splitlines(keepends=True)):
        start, offset = offset, offset + len(raw)
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            bad.append((start, _problem(str(path), f"line {n + 1} is not a JSON object")))
            continue
        if "retained_anchors" in obj:
            continue
        if "settled_to" in obj:
            # Everything before that byte was accepted, unreadable lines included.
            to = obj["settled_to"] if type(obj["settled_to"]) is int else -1
            for _, at, entry in pending:
                if at < to:
                    entry["settled_by"] = obj.get("by")
            pending = [p for p in pending if p[1] >= to]
            bad = [b for b in bad if b[0] >= to]
            continue
        seq, h = obj.get("seq"), obj.get("hash")
        if type(seq) is not int or seq < 1 or not isinstance(h, str) or len(h) != 64:
            bad.append((start, _problem(str(path), f"line {n + 1} is not an anchor (seq and 64-digit hash)")))
            continue
        anchor = Anchor(seq, h, obj.get("bytes"), obj.get("time"), obj.get("source"), str(path))
        entry = {"seq": seq, "hash": h, "bytes": anchor.bytes, "time": anchor.time, "source": anchor.source,
                 "file": str(path), "settled_by": None}
        loaded.history.append(entry)
        pending.append((anchor, start, entry))
    loaded.anchors.extend(a for a, _, _ in pending)
    loaded.problems.extend(problem for _, problem in bad)


def _problem(where: str, what: str) -> dict[str, Any]:
    return {"kind": "anchor_unreadable", "seq": None, "offset": None, "expected": "anchors", "observed": what,
            "message": f"anchor file {where}: {what}; anchors there cannot be checked"}


# -- checking -------------------------------------------------------------------------


def where(anchor: Anchor) -> str:
    """How a finding names an anchor: its time and source, or "the anchor given"."""
    if anchor.source == "given":
        return "the anchor given"
    return f"the anchor recorded {anchor.time or 'at an unknown time'} (by {anchor.source or 'unknown'})"


def check(anchors: Iterable[Anchor], watched: Mapping[int, list[str]], head_seq: int) -> list[dict[str, Any]]:
    """Findings for the anchors not on the chain whose head is ``head_seq``.

    ``watched``: the hashes the chain walk found at each anchor's seq.
    ``rolled_back``: the log now ends before the anchor's seq;
    ``anchor_mismatch``: that seq now holds another hash (the log was
    rewritten at or before it and re-chained). A head anchored more than
    once is reported once, with its oldest anchor.
    """
    findings = []
    seen = set()
    for a in anchors:
        if (a.seq, a.hash) in seen:
            continue  # the same head recorded again (by the brief, then the index...): one finding, the oldest
        seen.add((a.seq, a.hash))
        at = {"time": a.time, "source": a.source, "file": a.file}
        if a.seq > head_seq:
            findings.append({
                "kind": "rolled_back", "seq": a.seq, "offset": None, "expected": a.hash, "observed": head_seq,
                "anchor": at,
                "message": f"{where(a)} saw seq {a.seq} (hash {a.hash[:12]}...), but the log now ends at seq "
                f"{head_seq}: it was cut back or replaced by an older copy; restore the records from a backup, or "
                "run `retained anchor --accept` if this history is the one to keep",
            })
            continue
        found = watched.get(a.seq) or []
        if a.hash in found:
            continue
        now = f"hash {found[0][:12]}..." if found else "no valid record"
        findings.append({
            "kind": "anchor_mismatch", "seq": a.seq, "offset": None, "expected": a.hash,
            "observed": found[0] if found else None, "anchor": at,
            "message": f"{where(a)} saw seq {a.seq} with hash {a.hash[:12]}..., but seq {a.seq} now has {now}: "
            f"the log was rewritten at or before seq {a.seq} and its chain recomputed; restore it from a backup, "
            "or run `retained anchor --accept` if this history is the one to keep",
        })
    return findings


# -- rewriting -------------------------------------------------------------------------


def compact(loaded: Loaded, directory: str | os.PathLike[str], seq: int, h: str, size: int, source: str) -> None:
    """Rewrite the store's own anchor file as its header and the head ``(seq, h, size)``.

    Only after a check found every anchor on the chain: the head implies them
    all (a later rollback or re-chain below them also moves it). Lines another
    process appended since the file was read are kept after it.

    Raises:
        LinkRefused / AnchorError: the file is left as it was.
    """
    path = loaded.file
    if path is None or loaded.store_id is None:
        return
    body = _line(_header(loaded.store_id, Path(directory)))
    body += _line({"seq": seq, "hash": h, "bytes": size, "time": utc_now(), "source": source})
    _rewrite(path, body, loaded.files.get(path, 0))


def settle(loaded: Loaded, by: dict[str, Any]) -> None:
    """Mark every anchor read in ``loaded`` as accepted by the record ``by`` (a settle line in each file).

    Raises:
        LinkRefused / AnchorError: not every file was settled; the next verify still reports their anchors.
    """
    for path, read in loaded.files.items():
        line = _line({"settled_to": read, "time": utc_now(), "by": by})
        try:
            files.write_synced(files.open_fd(path, os.O_WRONLY | os.O_APPEND), line)
        except OSError as exc:
            raise AnchorError(f"settling the anchors in {path} failed ({exc.strerror or exc}); "
                              "run `retained anchor --accept` again", path=str(path)) from exc


def _rewrite(path: Path, body: bytes, read: int) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        newer = b""  # lines appended since it was read; none if it shrank (another rewrite)
        try:
            with files.open_read(path) as f:
                if os.fstat(f.fileno()).st_size >= read:
                    f.seek(read)
                    newer = f.read(FILE_BYTES_MAX)
        except FileNotFoundError:
            pass
        files.replace_with(path, body + newer[: newer.rfind(b"\n") + 1], tmp)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise AnchorError(f"rewriting {path} failed ({exc.strerror or exc}); it is left as it was",
                          path=str(path)) from exc


# -- listing ----------------------------------------------------------------------------


def listing_text(result: dict[str, Any]) -> str:
    """``Store.anchor``'s result as a few lines a person reads (``retained anchor``)."""
    head = result["head"]
    lines = [f"store id {result['store_id'] or '-'}; anchors in {result['file'] or result['dir']}",
             f"log head: seq {head['seq']} {head['hash'][:16]}... ({head['bytes']} bytes)"]
    for a in result["anchors"]:
        lines.append(f"  seq {a['seq']} {a['hash'][:16]}... recorded {a['time']} by {a['source']}: {a['state']}"
                     + ("" if a["file"] == result["file"] else f" (in {a['file']})"))
    for p in result["problems"]:
        lines.append(f"  PROBLEM {p['message']}")
    accepted = result.get("accepted")
    if accepted is not None:
        if accepted["record"] is None:
            lines.append(accepted["note"])
        else:
            rec = accepted["record"]
            lines.append(f"accepted the history as it is: {accepted['count']} anchors were off the chain; "
                         f"recorded as seq {rec['seq']} {rec['hash'][:16]}...")
    elif result["not_on_chain"]:
        lines.append(f"{result['not_on_chain']} anchors are not on the chain: see `retained verify`; "
                     "`retained anchor --accept` accepts the history as it is")
    else:
        lines.append("every anchor is on the chain")
    return "\n".join(lines)
