"""``Store.list`` filters and pages (issue 16): by kind, scope, client and UTC day, before or after a seq.

The store is a real log written line by line as an append would seal it,
with chosen times and writers; every filter is checked against the records
the test wrote, once through the index and once through the log alone.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from retained import Store
from retained.core import record
from retained.errors import InvalidRecord

CLIENTS = [{"name": "agent-a", "version": "1"}, {"name": "agent-b", "version": "2"}, {"name": "agent-a", "version": "3"}]
DAYS = ["2026-01-30", "2026-01-31", "2026-02-01", "2026-02-02"]


def _build(store_dir: Path, n: int = 40) -> list[dict]:
    """n records: day i*4//n, client i%3, scope p{i%2}, every 7th a checkpoint; returns them in seq order."""
    store_dir.mkdir(mode=0o700)
    prev, out = record.ZERO_HASH, []
    with open(store_dir / "log.jsonl", "wb") as f:
        for i in range(n):
            seq = i + 1
            kind = "checkpoint" if seq % 7 == 0 else "note"
            content = record.make_content(text=f"record {seq}", kind=kind, scope=f"p{seq % 2}", store_kind=True)
            ts = f"{DAYS[i * len(DAYS) // n]}T{i % 24:02d}:00:00.000000Z"
            sealed = record.seal(content, seq=seq, prev=prev, ts=ts, client=CLIENTS[seq % 3])
            f.write(sealed.line)
            prev = sealed.hash
            out.append({"seq": seq, "kind": kind, "scope": f"p{seq % 2}", "client": CLIENTS[seq % 3]["name"], "day": ts[:10]})
    return out


def _expected(rows: list[dict], limit: int, *, kind=None, scope=None, client=None, since=None, until=None,
              before=None, after=None) -> tuple[list[int], int]:
    match = [r["seq"] for r in rows
             if (kind is None or r["kind"] == kind) and (scope is None or r["scope"] == scope)
             and (client is None or r["client"] == client) and (since is None or r["day"] >= since)
             and (until is None or r["day"] <= until) and (before is None or r["seq"] < before)
             and (after is None or r["seq"] > after)]
    page = match[:limit] if after is not None else match[-limit:] if limit else []
    return sorted(page, reverse=True), len(match)


FILTERS = [
    {},
    {"client": "agent-a"},
    {"client": "agent-b", "scope": "p1"},
    {"kind": "checkpoint"},
    {"since": "2026-01-31"},
    {"until": "2026-01-31"},
    {"since": "2026-02-01", "until": "2026-02-01", "client": "agent-a"},
    {"before": 20},
    {"after": 20},
    {"after": 5, "before": 30, "scope": "p0"},
    {"client": "nobody"},
    {"since": "2027-01-01"},
]


@pytest.mark.parametrize("through", ["index", "log alone"])
def test_list_filters_and_pages_give_exactly_the_records_that_match(tmp_path: Path, through: str):
    rows = _build(tmp_path / "store")
    if through == "log alone":
        (tmp_path / "store" / "index.sqlite3").mkdir()  # an index that cannot be opened: the log answers
    with Store(tmp_path / "store") as store:
        for filters, limit in itertools.product(FILTERS, (0, 3, 100)):
            got = store.list(limit=limit, **filters)
            seqs, total = _expected(rows, limit, **filters)
            assert [r["seq"] for r in got["records"]] == seqs, (filters, limit)
            assert (got["total_matches"], got["returned"], got["more"]) == (total, len(seqs), total - len(seqs))
            assert got["left_out"]["beyond_limit"] == total - len(seqs)


def test_paging_with_before_and_after_walks_every_record_once_each_way(tmp_path: Path):
    rows = _build(tmp_path / "store", 23)
    with Store(tmp_path / "store") as store:
        older, page = [], store.list(limit=5, client="agent-a")
        while page["records"]:
            older += [r["seq"] for r in page["records"]]
            page = store.list(limit=5, client="agent-a", before=page["records"][-1]["seq"])
        newer, page = [], store.list(limit=5, client="agent-a", after=0)
        while page["records"]:
            newer = [r["seq"] for r in page["records"]] + newer
            page = store.list(limit=5, client="agent-a", after=page["records"][0]["seq"])
    expected = [r["seq"] for r in reversed(rows) if r["client"] == "agent-a"]
    assert older == expected
    assert newer == expected


@pytest.mark.parametrize(("filters", "field"), [
    ({"since": "2026-02-30"}, "since"), ({"until": "yesterday"}, "until"), ({"since": "2026-2-1"}, "since"),
    ({"before": -1}, "before"), ({"after": "3"}, "after"), ({"client": 3}, "client"), ({"limit": -1}, "limit"),
])
def test_a_malformed_filter_is_refused_naming_its_field(tmp_path: Path, filters: dict, field: str):
    _build(tmp_path / "store", 3)
    with Store(tmp_path / "store") as store, pytest.raises(InvalidRecord, match=f"field {field}:"):
        store.list(**filters)
