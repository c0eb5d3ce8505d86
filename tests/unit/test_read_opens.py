"""Reads through the index are batched (issue 25): the log is opened a bounded number of times per Store call.

Every open of the log file in this process is counted (``os.open`` and
``open`` on its path), around real calls on a real store: one catch-up per
call (which reads the line at the index's mark) and one read of the log for
the records the reply holds, whatever their number.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from retained import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s") as s:
        for i in range(40):
            s.write(f"note {i} about apples and pears", scope="odd" if i % 2 else None)
        s.write("apples are green, not red", supersedes=[3])
        s.forget([4], "wrong")
        yield s


@pytest.fixture
def opens(store: Store, monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], object]], int]:
    """``opens(call)``: how many times ``call()`` opens the store's log (after one call to warm up)."""
    log = os.fspath(store.log.path)
    count = [0]
    real_os_open, real_open = os.open, builtins.open

    def os_open(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        count[0] += os.fspath(path) == log if isinstance(path, (str, os.PathLike)) else 0
        return real_os_open(path, *args, **kwargs)

    def py_open(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        count[0] += os.fspath(path) == log if isinstance(path, (str, os.PathLike)) else 0
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", py_open)

    def measure(call: Callable[[], object]) -> int:
        call()
        count[0] = 0
        call()
        return count[0]

    return measure


def test_a_get_of_20_records_opens_the_log_at_most_twice(store: Store, opens) -> None:
    got = store.get(list(range(1, 21)))
    assert [e["seq"] for e in got] == list(range(1, 21))
    assert got[2]["superseded_by"] == [41] and got[3]["retracted_by"] == [42]
    assert opens(lambda: store.get(list(range(1, 21)))) <= 2


def test_a_search_for_5_opens_the_log_at_most_3_times(store: Store, opens) -> None:
    reply = store.search("apples", k=5, include_superseded=True)
    assert reply["returned"] == 5
    assert reply["returned"] + sum(reply["left_out"].values()) == reply["total_matches"]
    assert opens(lambda: store.search("apples", k=5)) <= 3


def test_a_search_with_context_reads_the_neighbours_in_one_more_open(store: Store, opens) -> None:
    reply = store.search("apples", k=5, context=2)
    assert reply["context"]["included"] > 0
    assert all(len(r["context"]) <= 2 for r in reply["results"])
    assert opens(lambda: store.search("apples", k=5, context=2)) <= 4


def test_a_listing_of_20_opens_the_log_at_most_twice_and_carries_links(store: Store, opens) -> None:
    listed = store.list(limit=40)
    by_seq = {e["seq"]: e for e in listed["records"]}
    assert by_seq[3]["superseded_by"] == [41]
    assert opens(lambda: store.list(limit=20)) <= 2


def test_a_timeline_opens_the_log_a_bounded_number_of_times(store: Store, opens) -> None:
    # head() reads the log's tail once; the records around come through one get.
    assert opens(lambda: store.timeline(20, window=10)) <= 3
