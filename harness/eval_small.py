"""A built-in 12-question retrieval check: hit@1 and hit@3 through retained's Store.search.

Twelve short memories and twelve questions, one per memory: six share words
with the memory they want, six are paraphrases that share none of its content
words. A lexical search should find the first six; the paraphrases show what
only meaning-based retrieval (embeddings) can find.

    python -m harness eval            # with the larger eval, when present
    python -m harness eval small --json

RETAINED_EMBED_URL and RETAINED_EMBED_MODEL (and the other RETAINED_EMBED_*
settings) make it embed the memories and search in hybrid mode.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

MEMORIES = [
    "The production database is PostgreSQL 16 running on the host db-east-2.",
    "Deploys go out on Tuesdays and Thursdays after the 10:00 standup; never on Fridays.",
    "Maya prefers code review comments phrased as questions rather than commands.",
    "The API rate limit for free accounts is 60 requests per minute.",
    "We chose SQLite in WAL mode for the local cache because it needs no server process.",
    "The flaky test test_upload_resume fails when the temp directory is on tmpfs.",
    "Ravi is on parental leave until March 3; route billing questions to Chen.",
    "The mobile app's minimum supported iOS version is 15.",
    "Customer invoices are generated on the first business day of each month.",
    "The staging cluster shuts down every night at 22:00 UTC to save costs.",
    "Passwords are hashed with argon2id at a memory cost of 64 MiB.",
    "The logo's brand color is teal #0F766E; avoid pure black text on it.",
]

# (question, index of the memory it wants, "shared" or "paraphrase")
QUESTIONS = [
    ("Which host runs the production PostgreSQL database?", 0, "shared"),
    ("What is the API rate limit for free accounts?", 3, "shared"),
    ("Why does test_upload_resume fail?", 5, "shared"),
    ("What minimum iOS version does the mobile app support?", 7, "shared"),
    ("When are customer invoices generated?", 8, "shared"),
    ("How are passwords hashed?", 10, "shared"),
    ("Which weekdays are we allowed to ship releases to users?", 1, "paraphrase"),
    ("How does she like feedback on pull requests to be worded?", 2, "paraphrase"),
    ("Why did the team pick an embedded engine for keeping data on the device?", 4, "paraphrase"),
    ("Who should handle payment inquiries while a colleague is away with a newborn?", 6, "paraphrase"),
    ("When is the pre-production environment powered off each evening?", 9, "paraphrase"),
    ("What shade is used for the company emblem?", 11, "paraphrase"),
]

assert len(MEMORIES) == 12 and len(QUESTIONS) == 12
assert sum(1 for _, _, group in QUESTIONS if group == "shared") == 6
assert sorted(want for _, want, _ in QUESTIONS) == list(range(12))


def _seq(entry: Mapping[str, Any]) -> int | None:
    if isinstance(entry.get("seq"), int):
        return entry["seq"]
    record = entry.get("record")
    return record.get("seq") if isinstance(record, dict) else None


def run(k: int = 3, embed_settings: dict[str, str] | None = None) -> dict[str, Any]:
    """Write the memories into a temporary store, ask every question, count the hits.

    With ``embed_settings`` (the RETAINED_EMBED_* variables) the store embeds
    the memories first and searches in hybrid mode when the embedder answers.
    """
    from retained.store import Store

    rows: list[dict[str, Any]] = []
    mode = None
    settings = dict(embed_settings or {})
    with (
        tempfile.TemporaryDirectory(prefix="retained-eval-small-") as directory,
        Store(directory, embed_settings=settings) as store,
    ):
        seqs = [store.write(text)["seq"] for text in MEMORIES]
        if settings:
            store.hybrid.backfill()
        for question, want, group in QUESTIONS:
            reply = store.search(question, k=k)
            mode = mode or reply.get("mode")
            if reply.get("mode_reason"):
                mode = f"{reply.get('mode')} ({reply['mode_reason']})"
            ranked = [_seq(entry) for entry in reply.get("results", [])]
            rank = ranked.index(seqs[want]) + 1 if seqs[want] in ranked else None
            rows.append({"question": question, "group": group, "rank": rank, "returned": len(ranked)})

    def score(group: str | None) -> dict[str, Any]:
        chosen = [row for row in rows if group is None or row["group"] == group]
        hit1 = sum(1 for row in chosen if row["rank"] == 1)
        hit3 = sum(1 for row in chosen if row["rank"] is not None and row["rank"] <= 3)
        return {"questions": len(chosen), "hit@1": hit1, "hit@3": hit3}

    return {"shared": score("shared"), "paraphrase": score("paraphrase"), "all": score(None),
            "mode": mode, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args, _ = parser.parse_known_args(argv)
    embed = {key: value for key, value in os.environ.items() if key.startswith("RETAINED_EMBED_")}
    try:
        result = run(embed_settings=embed)
    except ImportError as exc:
        print(f"eval_small: skipped, retained's Store.search is not importable ({exc})", file=sys.stderr)
        return 0
    if args.json:
        print(json.dumps({"eval_small": result}, ensure_ascii=False))
        return 0
    print(f"eval_small: 12 questions over 12 memories, k=3{', mode ' + str(result['mode']) if result['mode'] else ''}")
    for group in ("shared", "paraphrase", "all"):
        s = result[group]
        print(f"  {group:<10} hit@1 {s['hit@1']}/{s['questions']}  hit@3 {s['hit@3']}/{s['questions']}")
    for row in result["rows"]:
        if row["rank"] != 1:
            found = f"rank {row['rank']}" if row["rank"] else f"not in top 3 ({row['returned']} returned)"
            print(f"  miss@1 [{row['group']}] {row['question']} -> {found}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
