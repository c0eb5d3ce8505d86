"""The write guard sees through disguises (issue 29, point 7).

tests/data/guard_evasions.jsonl (written by make_guard_evasions.py) holds
fake credentials in disguise (format characters, compatibility forms, broken
or missing PEM armour, keys split by whitespace) and benign text in many
scripts, code, URLs and prose about keys. Every row is written through a real
store under the default policy: at least 95 % of the evasions must be
refused and at most 2 % of the benign texts, and what is stored is the
original text, disguise characters and all.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from pathlib import Path
from typing import Any

import orjson
import pytest

from retained import Store
from retained.errors import SecretDetected
from retained.safety import credentials
from retained.safety.guard import Guard, find_secrets

EVASIONS = Path(__file__).resolve().parents[1] / "data" / "guard_evasions.jsonl"


def load() -> list[dict[str, Any]]:
    rows = []
    for line in EVASIONS.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        value = row["value"]
        rows.append({**row, "raw": value, "value": "".join(value["$join"]) if isinstance(value, dict) else value})
    return rows


def test_the_corpus_is_big_enough_and_stores_no_secret_whole():
    rows = load()
    secrets = [r for r in rows if r["secret"]]
    assert len(secrets) >= 60
    assert len(rows) - len(secrets) >= 200
    for r in secrets:
        assert isinstance(r["raw"], dict) and all(len(p) <= 10 for p in r["raw"]["$join"]), r["disguise"]
    assert len({r["disguise"].split(":")[0] for r in secrets}) >= 5  # format chars, NFKC, split, PEM, ...


def test_evasions_are_refused_and_benign_texts_stored_as_they_are(tmp_path):
    rows = load()
    store = Store(tmp_path / "store")
    refused = {True: 0, False: 0}
    total = {True: 0, False: 0}
    missed, wrongly = [], []
    try:
        for r in rows:
            total[r["secret"]] += 1
            try:
                proof = store.write(r["value"], scope="evasions")
            except SecretDetected:
                refused[r["secret"]] += 1
                (wrongly if not r["secret"] else []).append(r["disguise"])
                continue
            if r["secret"]:
                missed.append(r["disguise"])
            stored = orjson.loads(store.log.read_at(proof["offset"], proof["length"]))
            assert stored["text"] == r["value"], r["disguise"]  # the original, not its normalised form
    finally:
        store.close()
    rate = refused[True] / total[True]
    false_positives = refused[False] / total[False]
    sys.stdout.write(
        f"\nguard evasions: {refused[True]}/{total[True]} refused ({rate:.1%}); "
        f"benign: {refused[False]}/{total[False]} refused ({false_positives:.1%})\n"
    )
    assert rate >= 0.95, f"evasions stored: {missed}"
    assert false_positives <= 0.02, f"benign texts refused: {wrongly}"


def test_the_fast_test_never_lets_an_evasion_through():
    g = Guard("refuse")
    for r in load():
        if r["secret"] and find_secrets(r["value"]):
            assert not g.untouched({"text": r["value"]}), r["disguise"]


def test_redact_replaces_the_disguised_secret_and_keeps_the_rest():
    g = Guard("redact")
    for r in load():
        if not r["secret"]:
            continue
        result = g.apply({"text": r["value"]})
        text = result.fields["text"]
        assert "[secret:" in text, r["disguise"]
        assert not find_secrets(text), r["disguise"]  # what is stored passes the guard again
    zw = "the deploy key is AK\u200bIA" + "QX7TZ2K9WM4B" + "R6YD for now"
    assert g.apply({"text": zw}).fields["text"] == "the deploy key is [secret:aws_access_key] for now"
    wide = "token \uff21\uff2b\uff29\uff21" + "".join(chr(ord(c) + 0xFEE0) for c in "QX7TZ2K9WM4BR6YD") + " please"
    assert g.apply({"text": wide}).fields["text"] == "token [secret:aws_access_key] please"
    split = "use AKIA QX7T Z2K9 " + "WM4B R6YD in CI"
    assert g.apply({"text": split}).fields["text"] == "use [secret:aws_access_key] in CI"


def test_private_spans_still_remove_a_disguised_secret():
    evasion = next(r["value"] for r in load() if r["secret"] and r["disguise"] == "pem:zwsp_in_header")
    result = Guard("refuse").apply({"text": f"keep <private>{evasion}</private> this"})
    assert result.fields["text"] == "keep  this" and result.private_spans_removed == 1


def test_the_allow_list_applies_to_a_disguised_value():
    value = "AK\u200bIA" + "QX7TZ2K9WM4B" + "R6YD"
    assert find_secrets(value)
    assert not find_secrets(value, frozenset({value}))


@pytest.mark.parametrize(
    "text",
    [
        "begin the private key rotation at noon, see commit 3f9a2b1c4d5e6f708192a3b4c5d6e7f8091a2b3c",
        "AKIA is the prefix of an AWS access key id and ASIA of a temporary one",
        "sk-learn is a library; the task-list is long",
        "Zo\u00eb: caf\u00e9 \u2615\ufe0f with \U0001f468\u200d\U0001f469\u200d\U0001f467 at 10\u00a0am",
    ],
)
def test_benign_texts_near_the_new_rules_are_not_secrets(text):
    assert find_secrets(text) == []


def test_every_format_character_is_ignored():
    """Unicode category Cf as this Python knows it, all in credentials.IGNORABLE."""
    missing = [f"U+{c:04X}" for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"
               and not credentials.IGNORABLE.match(chr(c))]
    assert missing == []


@pytest.mark.parametrize("where", ["start", "boundary", "end"])
def test_a_disguised_secret_inside_a_long_text_is_found_wherever_it_sits(where):
    """A long text is normalised in overlapping pieces: a disguise across a piece's edge is still seen."""
    filler = "Caroline: the pottery class was lovely \u2019 and the kids painted a sunset \U0001f305.\n"
    size = credentials._PIECE_CHARS * 3
    body = (filler * (size // len(filler) + 1))[:size]
    at = {"start": 0, "boundary": credentials._PIECE_CHARS - 20, "end": size - 10}[where]
    for r in (r for r in load() if r["secret"] and not r["disguise"].startswith("split")):
        if not find_secrets(r["value"]):
            continue  # the corpus test counts what the guard misses; here only where the text sits matters
        text = body[:at] + " " + r["value"] + " " + body[at:]
        assert find_secrets(text), (where, r["disguise"])
