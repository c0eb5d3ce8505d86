"""Sync against a real S3 server (SeaweedFS on 127.0.0.1): publish, incremental sync, pull + verify, each beside its floor.

Measured in one run, interleaved A B A B over several rounds (min / median / max):

- ``publish``: ``Store.sync`` of a store of N records (a log built as an
  append would seal it) to a fresh prefix: create-only segments and the
  head by compare-and-swap; against ``upload_bare``: the same log cut into
  the same segment sizes, each uploaded with a plain PUT. Target: <= 1.5x.
- ``incremental``: 100 new records written, then ``Store.sync`` (publish
  and the pull's listing); the sync alone is timed. Target: <= 200 ms.
- ``incremental_pull``: another store that mirrors those N records pulls
  the 100 new ones (``Store.sync``: the walk of the new segment only, the
  append, its own listing).
- ``pull_verify``: a new store's ``Store.sync`` that pulls the N records
  into its mirror and verifies the chain (``chain.verify_file``); against
  ``download_bare``: the same segments downloaded one after another, every
  line parsed (``orjson.loads``) and hashed (``blake3``). Target: <= 2x.
  Also against ``download_bare_parallel``: the same, with the segments
  downloaded as the pull does, ``mirror.DOWNLOADS`` at a time (the stricter floor).

    python -m harness bench sync [--records 100000] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import seaweed
from harness.bench_verify import build_log
from harness.figures import spread

TARGET = {"publish_ratio": 1.5, "incremental_s": 0.2, "pull_verify_ratio": 2.0}


def _segments(path: Path, segment_bytes: int) -> list[bytes]:
    """The log cut at line ends into pieces of about ``segment_bytes``, as the publish cuts it."""
    data = path.read_bytes()
    out, start = [], 0
    while start < len(data):
        end = data.rfind(b"\n", start, start + segment_bytes) + 1
        if end <= start:
            end = data.index(b"\n", start + segment_bytes) + 1
        out.append(data[start:end])
        start = end
    return out


def run(records: int, rounds: int) -> dict[str, Any]:
    import blake3
    import orjson

    from retained import Store
    from retained.sync import layout, mirror

    work = Path(tempfile.mkdtemp(prefix="retained-bench-sync-"))
    server = seaweed.start(work)
    try:
        client = server.client()
        client.create_bucket(Bucket="bench")
        source = work / "source"
        size = build_log(source, records)
        pieces = _segments(source / "log.jsonl", layout.SEGMENT_BYTES)
        times: dict[str, list[float]] = {k: [] for k in ("publish", "upload_bare", "incremental", "pull_verify", "download_bare",
                                                          "download_bare_parallel", "incremental_pull")}
        published = None
        for r in range(rounds):
            # A: publish a copy of the store (a new store id) to a new prefix.
            d = work / f"pub{r}"
            shutil.copytree(source, d)
            with Store(d) as store:
                t0 = time.perf_counter()
                rep = store.sync(f"s3://bench/p{r}", client=client, machine="bench", pull=False)
                times["publish"].append(time.perf_counter() - t0)
                assert rep["ok"] and rep["published"]["records"] == records, rep["findings"]
            # B: the same bytes, the same pieces, plain PUTs.
            t0 = time.perf_counter()
            for i, piece in enumerate(pieces):
                client.put_object(Bucket="bench", Key=f"bare{r}/{i:06d}", Body=piece)
            times["upload_bare"].append(time.perf_counter() - t0)
            published = (d, f"s3://bench/p{r}")
        assert published is not None
        d, remote = published
        with Store(d) as store, Store(work / "follower") as follower:
            rep = follower.sync(remote, client=client, machine="follower", publish_own=False)
            assert rep["ok"] and rep["pulled"][0]["records"] == records, rep["findings"]
            for r in range(rounds * 2):
                store.write_batch([{"text": f"incremental note {r}-{i}"} for i in range(100)])
                t0 = time.perf_counter()
                rep = store.sync(remote, client=client, machine="bench")
                times["incremental"].append(time.perf_counter() - t0)
                assert rep["ok"] and rep["published"]["records"] == 100, rep["findings"]
                t0 = time.perf_counter()
                rep = follower.sync(remote, client=client, machine="follower", publish_own=False)
                times["incremental_pull"].append(time.perf_counter() - t0)
                assert rep["ok"] and rep["pulled"][0]["records"] == 100, rep["findings"]
        # Pull: the first prefix (only the N records) into a new store each round, against a bare download.
        keys = [k["Key"] for k in client.list_objects_v2(Bucket="bench", Prefix="p0/stores/", MaxKeys=1000)["Contents"]
                if "/seg/" in k["Key"]]
        for r in range(rounds):
            d = work / f"pull{r}"
            with Store(d) as store:
                t0 = time.perf_counter()
                rep = store.sync("s3://bench/p0", client=client, machine="bench", publish_own=False)
                times["pull_verify"].append(time.perf_counter() - t0)
                assert rep["ok"] and rep["pulled"][0]["records"] == records, rep["findings"]
            for name, threads in (("download_bare", 1), ("download_bare_parallel", mirror.DOWNLOADS)):
                t0 = time.perf_counter()
                n = 0
                with ThreadPoolExecutor(max_workers=threads) as pool:
                    for body in pool.map(lambda k: client.get_object(Bucket="bench", Key=k)["Body"].read(), keys):
                        for line in body.splitlines():
                            orjson.loads(line)
                            blake3.blake3(line).hexdigest()
                            n += 1
                times[name].append(time.perf_counter() - t0)
                assert n == records
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, Any] = {"records": records, "log_bytes": size, "segments": len(pieces), "rounds": rounds,
                           "seconds": {k: spread(v) for k, v in times.items()}}
    med = {k: out["seconds"][k]["median"] for k in times}
    out["ratios"] = {"publish_over_upload_bare": round(med["publish"] / med["upload_bare"], 2),
                     "pull_verify_over_download_bare": round(med["pull_verify"] / med["download_bare"], 2),
                     "pull_verify_over_download_bare_parallel": round(med["pull_verify"] / med["download_bare_parallel"], 2)}
    out["targets"] = TARGET
    out["met"] = {"publish": out["ratios"]["publish_over_upload_bare"] <= TARGET["publish_ratio"],
                  "incremental": med["incremental"] <= TARGET["incremental_s"],
                  "pull_verify": out["ratios"]["pull_verify_over_download_bare"] <= TARGET["pull_verify_ratio"]}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench sync", description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:
        result = run(args.records, args.rounds)
    except seaweed.Unavailable as exc:
        print(f"bench sync: skipped: {exc}", file=sys.stderr)
        return 0
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['records']} records, {result['log_bytes']} bytes, {result['segments']} segments, {result['rounds']} rounds")
    for name, s in result["seconds"].items():
        print(f"  {name:14s} min {s['min']:.3f} s  median {s['median']:.3f} s  max {s['max']:.3f} s")
    for name, ratio in result["ratios"].items():
        print(f"  {name}: {ratio}x")
    print(f"  met: {result['met']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
