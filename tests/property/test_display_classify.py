"""The brief reader's classification (standard library JSON) gives exactly the storage core's answer (L1, L3)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retained import limits
from retained.brief import reader
from retained.core import record

from .test_roundtrip import field_names, json_values

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CLIENT = {"name": "t", "version": "0"}


def _line(text: str, fields: dict) -> bytes:
    content = record.make_content(text=text, fields=fields)
    return record.seal(content, seq=7, prev=record.ZERO_HASH, ts="2026-11-29T12:00:00.000000Z", client=CLIENT).line[:-1]


def _same(content: bytes) -> None:
    full = record.classify(content)
    fast = reader.classify(content)
    assert (fast[0], fast[2], fast[3]) == (full[0], full[2], full[3])
    if full[0] in (record.RECORD, record.REDACTED):
        assert fast[1] == full[1]


@SETTINGS
@given(text=st.text(max_size=200).filter(str.strip), fields=st.dictionaries(field_names, json_values, max_size=5))
def test_fast_and_full_classification_agree_on_any_record(text, fields):
    _same(_line(text, fields))


@SETTINGS
@given(
    text=st.text(max_size=80).filter(str.strip),  # a note's text is never empty
    fields=st.dictionaries(field_names, json_values, max_size=3),
    where=st.floats(min_value=0, max_value=1, exclude_max=True),
    bit=st.integers(min_value=0, max_value=7),
)
def test_fast_and_full_classification_agree_on_any_flipped_bit(text, fields, where, bit):
    line = bytearray(_line(text, fields))
    i = int(where * len(line))
    line[i] ^= 1 << bit
    _same(bytes(line))


def test_floats_the_standard_encoder_spells_differently_still_classify_as_records():
    content = _line("x", {"big": 1e16, "small": 1e-7, "neg": -2.5e-300, "int_max": limits.INT_MAX})
    assert reader.classify(content)[0] == record.RECORD
