"""The newer fact first: fact / correction pairs among filler, newer-first rate per phrasing.

harness/data/corrections.json holds 44 pairs in four phrasings (restated,
explicit, few_words, conversation) and 20 filler notes. Each run builds a
store: every fact, then the filler, then every correction (none written with
``supersedes``), and asks each pair's question through ``Store.search``
(k=10). A pair counts when both records are among the results; it is newer
first when the correction ranks above the fact. Each question is asked with
the newer-first step on and off (``Hybrid.newer_first``), alternately, in
the same process: the baseline of the same run.

Stores: ``notes`` (plain notes, one scope) and ``conversation`` (the same
texts as turns with a speaker, in one scope). Modes: ``lexical`` (no
embeddings) and ``semantic`` (the embedded model, ``retained[semantic]``,
when installed).

    python -m harness eval corrections [--json] [--modes lexical,semantic]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retained import Store

DATA = Path(__file__).resolve().parent / "data" / "corrections.json"
K = 10


def run(store_kind: str, mode: str, data: dict[str, Any], workdir: str) -> dict[str, Any]:
    settings = {"RETAINED_EMBED_LOCAL": "0"} if mode == "lexical" else {}
    speakers = ("Sam", "Alex")
    seqs: dict[int, tuple[int, int]] = {}
    with Store(Path(workdir) / f"{store_kind}-{mode}", embed_settings=settings) as store:
        def put(text: str, n: int) -> int:
            fields = {"speaker": speakers[n % 2]} if store_kind == "conversation" else None
            return store.write(text, scope="main", fields=fields)["seq"]

        facts = [put(p["fact"], i) for i, p in enumerate(data["pairs"])]
        for i, f in enumerate(data["filler"]):
            put(f, i)
        fixes = [put(p["correction"], i) for i, p in enumerate(data["pairs"])]
        seqs = {i: (a, b) for i, (a, b) in enumerate(zip(facts, fixes, strict=True))}
        if mode == "semantic":
            done = store.embed(backfill=True)
            if done.get("pending"):
                raise SystemExit(f"eval corrections: {done['pending']} records left without a vector: {done.get('error')}")
        tally: dict[str, dict[str, dict[str, int]]] = {
            side: defaultdict(lambda: {"pairs": 0, "both_found": 0, "newer_first": 0}) for side in ("on", "off")
        }
        modes = set()
        marked = wrong = links = 0
        for i, pair in enumerate(data["pairs"]):
            fact, fix = seqs[i]
            for side in (("on", "off") if i % 2 else ("off", "on")):
                store.hybrid.newer_first = side == "on"
                reply = store.search(pair["query"], k=K)
                modes.add(reply["mode"])
                order = [r["seq"] for r in reply["results"]]
                t = tally[side][pair["phrasing"]]
                t["pairs"] += 1
                if fact in order and fix in order:
                    t["both_found"] += 1
                    t["newer_first"] += order.index(fix) < order.index(fact)
                    if side == "on":
                        entry = reply["results"][order.index(fix)]
                        marked += fact in entry.get("may_correct", [])
                if side == "on":
                    # Links between records that are not a pair of the set: different subjects linked.
                    pair_of = {a: b for a, b in seqs.values()} | {b: a for a, b in seqs.values()}
                    wrong += sum(1 for r in reply["results"] for s in r.get("may_correct", []) if pair_of.get(r["seq"]) != s)
                    links += sum(len(r.get("may_correct", [])) for r in reply["results"])
        store.hybrid.newer_first = True
    out: dict[str, Any] = {"store": store_kind, "mode": mode, "search_modes": sorted(modes), "k": K,
                           "marked_may_correct": marked, "links": links, "links_not_a_pair": wrong}
    for side in ("on", "off"):
        per = dict(tally[side])
        both = sum(t["both_found"] for t in per.values())
        newer = sum(t["newer_first"] for t in per.values())
        out[f"newer_first_{side}"] = {
            "per_phrasing": per,
            "both_found": both,
            "newer_first": newer,
            "rate": round(newer / both, 3) if both else None,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="newer-first rate on fact / correction pairs, with the step on and off")
    p.add_argument("--modes", default="lexical,semantic")
    p.add_argument("--stores", default="notes,conversation")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    data = json.loads(DATA.read_text(encoding="utf-8"))
    from retained.vectors import local

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            if mode == "semantic" and not local.available():
                print("eval corrections: semantic skipped: pip install 'retained[semantic]'", file=sys.stderr)
                continue
            for kind in args.stores.split(","):
                results.append(run(kind, mode, data, tmp))
    report = {"eval_corrections": results, "pairs": len(data["pairs"]), "load_average_1m": round(os.getloadavg()[0], 2)}
    if args.json:
        print(json.dumps(report))
    else:
        for r in results:
            on, off = r["newer_first_on"], r["newer_first_off"]
            print(f"{r['store']:12} {r['mode']:8} newer first {on['newer_first']}/{on['both_found']} "
                  f"(step off, same run: {off['newer_first']}/{off['both_found']}); links {r['links']}, "
                  f"{r['links_not_a_pair']} between records that are not a pair")
            for ph, t in on["per_phrasing"].items():
                o = off["per_phrasing"][ph]
                print(f"    {ph:12} {t['newer_first']}/{t['both_found']} of {t['pairs']} (off {o['newer_first']}/{o['both_found']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
