"""I2: returned + left out == matched, for any records, query, k, budget and scope (a project's too)."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from retained import Store

WORDS = ["alpha", "beta", "gamma", "delta", "the", "is", "東京", "café"]
_text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
_records = st.lists(
    st.tuples(_text, st.sampled_from([None, "a", "b"]), st.integers(0, 4)), min_size=1, max_size=25
)


@settings(max_examples=40, deadline=None)
@given(
    records=_records,
    queries=st.lists(
        st.tuples(
            st.one_of(_text, st.text(max_size=12)),
            st.integers(0, 30),
            st.one_of(st.none(), st.integers(0, 60)),
            st.sampled_from([(None, False), ("a", False), ("b", False), ("c", False), ("a", True), ("c", True)]),
            st.booleans(),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    ),
    retract=st.lists(st.integers(1, 25), max_size=4),
)
def test_accounting_identity_holds(records, queries, retract):
    with tempfile.TemporaryDirectory() as d, Store(d) as s:
        items = []
        for i, (text, scope, sup) in enumerate(records, 1):
            item = {"text": text}
            if scope:
                item["scope"] = scope
            if sup and sup < i:
                item["supersedes"] = [sup]
            items.append(item)
        s.write_batch(items)
        targets = sorted({r for r in retract if r <= len(records)})
        if targets:
            s.forget(targets, "test")
        for text, k, budget, (scope, and_unscoped), inc_sup, inc_ret in queries:
            reply = s.search(text, k=k, max_tokens=budget, scope=scope, and_unscoped=and_unscoped,
                             include_superseded=inc_sup, include_retracted=inc_ret)
            left = reply["left_out"]
            assert reply["returned"] + sum(left.values()) == reply["total_matches"]
            assert all(v >= 0 for v in left.values())
            assert reply["returned"] <= k
            if budget is not None:
                assert reply["tokens"] <= budget
            for r in reply["results"]:
                found = r["record"].get("scope")
                assert scope is None or found == scope or (found is None and and_unscoped)
                if not inc_sup:
                    assert "superseded_by" not in r
                if not inc_ret:
                    assert "retracted_by" not in r
            if not inc_sup:
                assert left["superseded"] >= 0
            else:
                assert left["superseded"] == 0
            if inc_ret:
                assert left["retracted"] == 0
