"""recovery.py: exactly one row of the table applies to every end of log."""

from __future__ import annotations

import itertools

from retained.core import recovery


def test_every_state_matches_exactly_one_row():
    for empty, newline in itertools.product([True, False], repeat=2):
        rows = [r for r in recovery.TABLE if recovery.matches(r, empty, newline)]
        assert len(rows) == 1, (empty, newline, rows)


def test_only_an_unterminated_tail_is_ever_truncated():
    assert recovery.decide(False, False).action == "quarantine"
    assert recovery.decide(False, True).action == "accept"
    assert recovery.decide(True, False).action == "accept"


def test_quarantine_names_do_not_collide():
    names = {recovery.quarantine_name("log.jsonl", 10, a) for a in range(3)}
    assert names == {"log.jsonl.torn-10", "log.jsonl.torn-10.1", "log.jsonl.torn-10.2"}
