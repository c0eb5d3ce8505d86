"""The union: this store's search, and each mirror's, merged into one ranking with each record's origin.

Each mirror has its own derived index (in ``mirrors/<store id>/``, built
from its verified log and caught up like the store's), searched with
the same query and options; local results carry ``origin`` with ``local``:
true. ``origin``, ``id`` and reading a pulled record: docs/sync.md, Search,
get. The I2 accounting holds over the union: what every part matched, and
what the merge left beyond ``k`` or over ``max_tokens``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from retained.core import anchors
from retained.errors import InvalidRecord, NotFound
from retained.sync import layout, mirror

_COUNTED = ("superseded", "retracted", "unreadable", "beyond_k", "over_budget")
# A store id as a reader may give it: whole (32 hex digits), or its first 8 or more (``from=MACHINE/STOREID8``).
_STORE_ID_GIVEN = re.compile(r"[0-9a-f]{8,32}\Z")
_FIELD = "field store_id (`--from` on the command line)"


def merge(directory: Path, reply: dict[str, Any], query: str, options: dict[str, Any],
          opener: Callable[[Path], Any]) -> dict[str, Any]:
    """``reply`` (this store's search) with every mirror's results merged in by score; unchanged when there are none.

    ``opener(directory)``: a store over a mirror (the caller's ``Store`` class: a mirror is read as a store of its
    own, never written, with no anchors and lexical search).
    """
    found = mirror.mirrors(directory)
    if not found:
        return reply
    local_sid = anchors.store_id(directory, create=False)
    k = options.get("k", 10)
    max_tokens = options.get("max_tokens")
    results = [dict(r, origin={"store_id": local_sid, "machine": None, "local": True}) for r in reply.get("results", ())]
    left = {name: int((reply.get("left_out") or {}).get(name, 0)) for name in _COUNTED}
    total = int(reply.get("total_matches", 0))
    searched = []
    for sid, mdir, meta in found:
        with opener(mdir) as other:
            part = other.search(query, **options)
        searched.append({"store_id": sid, "machine": meta.get("machine"), "seq": meta.get("seq"),
                         "matches": part.get("total_matches", 0)})
        total += int(part.get("total_matches", 0))
        for name in _COUNTED:
            left[name] += int((part.get("left_out") or {}).get(name, 0))
        origin = {"store_id": sid, "machine": meta.get("machine"), "local": False}
        results.extend(dict(r, origin=origin, id=f"{sid}:{r['seq']}") for r in part.get("results", ()))
    results.sort(key=lambda r: -float(r.get("score") or 0.0))
    kept: list[dict[str, Any]] = []
    tokens = 0
    for n, r in enumerate(results):
        if n >= k:
            left["beyond_k"] += len(results) - n
            break
        cost = int(r.get("tokens") or 0)
        if max_tokens is not None and kept and tokens + cost > max_tokens:
            left["over_budget"] += len(results) - n
            break
        kept.append(r)
        tokens += cost
    out = dict(reply)
    out.update(results=kept, returned=len(kept), total_matches=total, left_out=left, tokens=tokens, union=searched)
    return out


def resolve(directory: Path, given: object) -> tuple[str, dict[str, Any]] | None:
    """The pulled store ``given`` names, ``(store id, mirror.json)``; None when it names this store.

    ``given``: a store id, or its first 8 or more hex digits (the text forms
    show ``from=MACHINE/STOREID8``) when they begin one store's id only.

    Raises:
        InvalidRecord: ``given`` is not a store id or a prefix of one, or the prefix begins more than one store's id.
        NotFound: no store ``given`` was pulled here.
    """
    if not isinstance(given, str) or _STORE_ID_GIVEN.match(given) is None:
        shown = repr(given)[:40] if isinstance(given, str) else type(given).__name__
        raise InvalidRecord(f"{_FIELD}: must be a store id (32 hex digits, a result's origin.store_id) or its first "
                            f"8 or more (from=MACHINE/STOREID8), got {shown}; nothing was read", path="store_id")
    found = [(sid, meta) for sid, _, meta in mirror.mirrors(directory) if sid.startswith(given)]
    local_sid = anchors.store_id(directory, create=False)
    local = local_sid is not None and local_sid.startswith(given)
    if len(found) + local > 1:
        names = ", ".join([*([f"{local_sid} (this store)"] if local else []), *(sid for sid, _ in found)])
        raise InvalidRecord(f"{_FIELD}: {given} begins more than one store's id ({names}); give more of it, "
                            "or the whole id", path="store_id")
    if local:
        return None
    if not found:
        raise NotFound(f"{_FIELD}: no store {given} was pulled into {directory}; run `retained sync` (its report "
                       "names the store ids it pulled), or leave store_id out to read this store", path="store_id")
    return found[0]


def read(directory: Path, sid: str, meta: dict[str, Any], opener: Callable[[Path], Any], fn: Callable[[Any], Any]) -> Any:
    """``fn(store)`` over the mirror of the pulled store ``sid`` (``resolve``'s answer), its records marked with their
    ``origin`` and ``id``: a list of entries (``get``) or a reply holding ``records`` (``timeline``)."""
    origin = {"store_id": sid, "machine": meta.get("machine"), "local": False}

    def mark(entries: Any) -> list[dict[str, Any]]:
        return [dict(e, origin=origin, id=f"{sid}:{e['seq']}") for e in entries]

    with opener(layout.mirror_dir(directory, sid)) as other:
        got = fn(other)
    return mark(got) if isinstance(got, list) else dict(got, records=mark(got["records"]))
