"""Validation and encoding: bad input is refused with the field named (L1)."""

from __future__ import annotations

import pytest

from retained import limits
from retained.core import record
from retained.errors import InvalidRecord, RecordTooLarge, ReservedField

CLIENT = {"name": "test", "version": "0"}


def _seal(**kw):
    content = record.make_content(**kw)
    return record.seal(content, seq=1, prev=record.ZERO_HASH, ts=record.utc_now(), client=CLIENT)


@pytest.mark.parametrize("key", sorted(record.RESERVED_FIELDS))
def test_reserved_field_in_fields_is_refused_by_name(key):
    with pytest.raises(ReservedField) as err:
        record.make_content(text="x", fields={key: 1})
    assert err.value.code == "reserved_field"
    assert repr(key) in err.value.message


@pytest.mark.parametrize("key", sorted(record.API_FIELDS))
def test_api_field_inside_fields_is_refused_not_overwritten(key):
    with pytest.raises(ReservedField) as err:
        record.make_content(text="x", fields={key: "y"})
    assert f"pass it as {key}=" in err.value.message


@pytest.mark.parametrize(
    "value, path, words",
    [
        (float("nan"), "x", "not a JSON number"),
        ({"a": [1, float("inf")]}, "x.a[1]", "not a JSON number"),
        (-float("inf"), "x", "not a JSON number"),
        (2**64, "x", "outside 64 bits"),
        (-(2**63) - 1, "x", "outside 64 bits"),
        ({1: "a"}, "x", "not a string"),
        ({"t": (1, 2)}, "x.t", "tuple is not a JSON value"),
        (b"bytes", "x", "bytes is not a JSON value"),
    ],
)
def test_values_that_cannot_round_trip_are_refused_naming_the_path(value, path, words):
    with pytest.raises(InvalidRecord) as err:
        record.make_content(text="ok", fields={"x": value})
    assert err.value.path == path
    assert words in err.value.message
    assert "nothing was written" in err.value.message


def test_integer_bounds_are_inclusive():
    _seal(text="x", fields={"lo": limits.INT_MIN, "hi": limits.INT_MAX})


def test_lone_surrogate_is_refused_naming_the_field():
    with pytest.raises(InvalidRecord) as err:
        _seal(text="ok", fields={"meta": {"name": "bad \ud800 here"}})
    assert err.value.path == "meta.name"


def test_lone_surrogate_in_text_is_refused():
    with pytest.raises(InvalidRecord) as err:
        _seal(text="\udfff")
    assert err.value.path == "text"


def test_nesting_deeper_than_the_limit_is_refused():
    deep: object = "leaf"
    for _ in range(limits.DEPTH_MAX + 1):
        deep = [deep]
    with pytest.raises(InvalidRecord) as err:
        record.make_content(text="x", fields={"deep": deep})
    assert f"deeper than {limits.DEPTH_MAX}" in err.value.message


def test_nesting_just_under_the_limit_is_kept():
    deep: object = "leaf"
    for _ in range(limits.DEPTH_MAX - 2):
        deep = [deep]
    _seal(text="x", fields={"deep": deep})


def test_record_over_the_size_limit_is_refused_with_both_numbers():
    content = record.make_content(text="x" * 2000)
    with pytest.raises(RecordTooLarge) as err:
        record.seal(content, seq=1, prev=record.ZERO_HASH, ts="t", client=CLIENT, record_bytes_max=1000)
    assert err.value.code == "too_large"
    assert "over the limit of 1000 bytes" in err.value.message


@pytest.mark.parametrize("kind", sorted(record.STORE_KINDS))
def test_store_kinds_cannot_be_written_as_notes(kind):
    with pytest.raises(InvalidRecord):
        record.make_content(text="x", kind=kind)


@pytest.mark.parametrize(
    "kw",
    [
        {"text": 5},
        {"text": "x", "scope": 3},
        {"text": "x", "supersedes": "3"},
        {"text": "x", "supersedes": [0]},
        {"text": "x", "supersedes": [True]},
        {"text": "x", "client_op_id": ""},
        {"text": "x", "client_op_id": "x" * 201},
        {"text": "x", "fields": ["not", "a", "dict"]},
        {"text": "x", "kind": ""},
    ],
)
def test_api_arguments_of_the_wrong_shape_are_refused(kw):
    with pytest.raises(InvalidRecord):
        record.make_content(**kw)


def test_sealed_line_is_canonical_and_its_hash_recomputes():
    sealed = _seal(text="Zoë 🌙 \"q\"\n", fields={"x-origin": {"nested": [1, -2, 3.5, None, True]}})
    assert sealed.line == record.canonical(sealed.record) + b"\n"
    status, obj, seq, h, problem = record.classify(sealed.line[:-1])
    assert (status, seq, h, problem) == (record.RECORD, 1, sealed.hash, None)
    assert record.content_digest(obj) == sealed.cd


def test_redacted_form_keeps_the_chain_hash_valid():
    sealed = _seal(text="a secret to erase")
    red = record.redacted_form(sealed.record)
    status, _, seq, h, _ = record.classify(record.canonical(red))
    assert status == record.REDACTED and h == sealed.hash


@pytest.mark.parametrize(
    "line, status",
    [
        (b"not json", record.DAMAGED),
        (b'{"note":"appended by another program"}', record.FOREIGN),
        (b"[1,2]", record.FOREIGN),
        (b'{"seq":"1","prev":"x","hash":"y"}', record.DAMAGED),
    ],
)
def test_classify_tells_foreign_from_damaged(line, status):
    assert record.classify(line)[0] == status
