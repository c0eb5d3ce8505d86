"""The union: this store's search, and each mirror's, merged into one ranking with each record's origin.

Each mirror has its own derived index (in ``mirrors/<store id>/``, built
from its verified log and caught up like the store's), searched with
the same query and options. Results from the mirrors carry ``origin``
(``store_id``, ``machine``, ``local``: false) and ``id`` (``STORE_ID:SEQ``;
``retained get SEQ --from STORE_ID`` reads one); local results carry ``origin`` with
``local``: true. The I2 accounting holds over the union: what every part
matched, and what the merge left beyond ``k`` or over ``max_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from retained.core import anchors
from retained.errors import NotFound
from retained.sync import layout, mirror

_COUNTED = ("superseded", "retracted", "unreadable", "beyond_k", "over_budget")


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


def get(directory: Path, sid: str, seqs: list[int], opener: Callable[[Path], Any], *,
        missing_ok: bool = False) -> list[dict[str, Any]]:
    """Records of the mirrored store ``sid`` by seq, each with its ``origin`` and ``id``.

    Raises:
        NotFound: no store ``sid`` was pulled here, or a seq is not in its mirror (unless ``missing_ok``).
    """
    meta = next((m for s, _, m in mirror.mirrors(directory) if s == sid), None)
    if meta is None:
        raise NotFound(f"no store {sid} was pulled into {directory}; run `retained sync`, and see the store ids it reports",
                       path="store_id")
    with opener(layout.mirror_dir(directory, sid)) as other:
        entries = other.get(seqs, missing_ok=missing_ok)
    origin = {"store_id": sid, "machine": meta.get("machine"), "local": False}
    return [dict(e, origin=origin, id=f"{sid}:{e['seq']}") for e in entries]
