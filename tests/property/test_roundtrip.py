"""Property tests: anything valid round-trips byte-exact; anything invalid changes nothing (L1, L4)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retained import Store, limits
from retained.core import record
from retained.errors import InvalidRecord
from retained.safety.guard import Guard


# The guard removes <private> spans under every policy (tested in test_guard);
# this property is about the log keeping what it is given, so such text is
# left out and the secret policy is off.
def _plain(s: str) -> bool:
    return "private" not in s.lower()

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=limits.INT_MIN, max_value=limits.INT_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40).filter(_plain)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8).filter(_plain), children, max_size=4),
    max_leaves=20,
)
field_names = st.text(min_size=1, max_size=12).filter(
    lambda k: k not in record.RESERVED_FIELDS | record.API_FIELDS and _plain(k)
)

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    text=st.text(max_size=300).filter(_plain).filter(str.strip),  # a note's text is never empty
    fields=st.dictionaries(field_names, json_values, max_size=5),
    scope=st.none() | st.text(min_size=1, max_size=20).filter(_plain),
)
def test_any_valid_record_round_trips_byte_exact(text, fields, scope):
    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "s", guard=Guard("off"))
        proof = store.write(text, fields=fields, scope=scope)
        (entry,) = store.get([proof["seq"]])
        rec = entry["record"]
        assert rec["text"] == text
        for key, value in fields.items():
            assert rec[key] == value
        data = (Path(d) / "s" / "log.jsonl").read_bytes()
        line = data[proof["offset"] : proof["offset"] + proof["length"]]
        assert line == record.canonical(rec) + b"\n"
        assert record.classify(line[:-1])[0] == record.RECORD
        store.close()


def _deep(n: int) -> object:
    v: object = 0
    for _ in range(n):
        v = {"k": v}
    return v


bad_values = st.sampled_from(
    [
        float("nan"),
        float("inf"),
        -float("inf"),
        2**64,
        -(2**63) - 1,
        "lone \ud83d surrogate",
        {3: "int key"},
        {"nested": [1, float("nan")]},
        _deep(limits.DEPTH_MAX + 2),
        b"raw bytes",
        {1.5, 2.5},
    ]
)


@SETTINGS
@given(
    good=st.dictionaries(field_names, json_values, max_size=3),
    bad_key=field_names,
    bad=bad_values,
    reserved=st.sampled_from(sorted(record.RESERVED_FIELDS | record.API_FIELDS)),
    use_reserved=st.booleans(),
)
def test_any_invalid_input_is_refused_and_the_log_is_unchanged(good, bad_key, bad, reserved, use_reserved):
    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "s")
        store.write("before")
        path = Path(d) / "s" / "log.jsonl"
        before = path.read_bytes()
        fields = dict(good)
        if use_reserved:
            fields[reserved] = "x"
        else:
            fields[bad_key] = bad
        try:
            store.write("attempt", fields=fields)
        except InvalidRecord as exc:
            assert exc.code in ("invalid_argument", "reserved_field")
            assert "nothing was written" in exc.message
        else:
            raise AssertionError(f"accepted invalid fields {fields!r}")
        assert path.read_bytes() == before
        store.close()
