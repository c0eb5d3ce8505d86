"""The write guard: secrets refused or redacted, private spans removed, nothing else touched.

The corpus (tests/data/guard_corpus.jsonl, written by make_guard_corpus.py)
stores every fake credential in parts, ``{"$join": [...]}``, so that no whole
credential-shaped string sits in the repository; ``load_corpus`` joins them.
Secrets built in this module are assembled the same way, at test time.
"""

from __future__ import annotations

import copy
import doctest
import json
import string
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retained.errors import InvalidRecord, RetainedError, SecretDetected
from retained.safety import credentials
from retained.safety import guard as guard_module
from retained.safety.guard import Guard, find_secrets, remove_private

CORPUS = Path(__file__).resolve().parents[1] / "data" / "guard_corpus.jsonl"

B62 = string.ascii_letters + string.digits
# Fake credentials, assembled from parts (see the module docstring).
GH_TOKEN = "gh" + "p_" + "Zq3v9XkL2mB7nT4wR8yC1dF6gH0jK5sA" + "pQ2e"
AWS_KEY = "AK" + "IA" + "QX7TZ2K9WM4B" + "R6YD"
STRIPE_KEY = "sk" + "_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
PEM_KEY = (
    "-----BEGIN " + "RSA PRIVATE KEY-----\n"
    + "MIIEowIBAAKCAQEA7f1k3Jq9xZ2m8WbT4vR6yN0pL5sH3gD1cK8aQ2eU9iO7tY4w\n"
    + "Xr2LmZ0vTn5KfWb7YcJd4HsPa1GeUiQ8oBz3NxVk6Ej9Rt2Wm5Lq8Ys1Hd4Gf7Ka\n"
    + "-----END " + "RSA PRIVATE KEY-----"
)


def _join(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$join"}:
            return "".join(_join(part) for part in value["$join"])
        return {k: _join(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_join(v) for v in value]
    return value


def _stored_whole(value: Any) -> bool:
    """Whether some string leaf of a stored secret row is not split into parts."""
    if isinstance(value, str):
        return True
    if isinstance(value, dict):
        if set(value) == {"$join"}:
            return False
        return any(_stored_whole(v) for k, v in value.items() if k not in {"type", "project_id", "client_email", "private_key_id"})
    if isinstance(value, list):
        return any(_stored_whole(v) for v in value if not (isinstance(v, str) and len(v) < 16))
    return False


def load_corpus() -> list[dict[str, Any]]:
    rows = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        rows.append({**row, "raw": row["value"], "value": _join(row["value"])})
    return rows


def as_fields(value: Any) -> dict[str, Any]:
    return {"text": value} if isinstance(value, str) else value


def corpus_figures(policy: str = "redact") -> dict[str, Any]:
    """Recall and false-positive rate of the guard over the corpus."""
    g = Guard(policy=policy)
    hit = {True: 0, False: 0}
    total = {True: 0, False: 0}
    kind_ok = 0
    for row in load_corpus():
        total[row["secret"]] += 1
        if policy == "refuse":
            try:
                g.apply(as_fields(row["value"]))
                kinds: set[str] = set()
            except SecretDetected as exc:
                kinds = {exc.kind}
        else:
            kinds = {r["kind"] for r in g.apply(as_fields(row["value"])).redactions}
        if kinds:
            hit[row["secret"]] += 1
            kind_ok += row["secret"] and row["kind"] in kinds
    return {
        "secrets": total[True],
        "benign": total[False],
        "recall": hit[True] / total[True],
        "false_positive_rate": hit[False] / total[False],
        "kind_agreement": kind_ok / max(1, hit[True]),
    }


def secret_spans(value: Any) -> list[str]:
    """The secret parts of a corpus value, as the guard delimits them."""
    if isinstance(value, str):
        return [value[f.start : f.end] for f in find_secrets(value)]
    if isinstance(value, dict):
        spans = []
        for k, v in value.items():
            named = isinstance(v, str) and credentials._SECRET_KEY_NAME.search(k) and not find_secrets(v)
            spans += [v] if named else secret_spans(v)
        return spans
    if isinstance(value, list):
        return [s for v in value for s in secret_spans(v)]
    return []


# -- the corpus ---------------------------------------------------------------


def test_corpus_is_big_enough_and_stores_no_secret_whole():
    rows = load_corpus()
    secrets = [r for r in rows if r["secret"]]
    benign = [r for r in rows if not r["secret"]]
    assert len(secrets) >= 60
    assert len(benign) >= 220
    assert not [r["note"] for r in secrets if _stored_whole(r["raw"])]


def test_corpus_recall_is_at_least_95_percent_and_false_positives_at_most_2_percent():
    figures = corpus_figures("redact")
    assert figures["recall"] >= 0.95, figures
    assert figures["false_positive_rate"] <= 0.02, figures


def test_refuse_and_redact_agree_on_the_corpus():
    assert corpus_figures("refuse")["recall"] == corpus_figures("redact")["recall"]
    assert corpus_figures("refuse")["false_positive_rate"] == corpus_figures("redact")["false_positive_rate"]


def test_corpus_kinds_mostly_name_the_provider():
    assert corpus_figures("redact")["kind_agreement"] >= 0.9


# -- refuse ---------------------------------------------------------------------


def test_refuse_raises_secret_detected_with_path_and_kind():
    with pytest.raises(SecretDetected) as info:
        Guard().apply({"text": f"my token is {GH_TOKEN}", "scope": "proj-a"})
    exc = info.value
    assert isinstance(exc, RetainedError)
    assert exc.code == "secret_detected"
    assert exc.path == "text"
    assert exc.kind == "github_token"
    assert exc.to_dict()["code"] == "secret_detected"
    assert "text" in str(exc) and "github_token" in str(exc)


def test_refuse_names_a_nested_field_path():
    fields = {"text": "deploy notes", "x-origin": {"meta": [1, {"token": f"see {AWS_KEY}"}]}}
    with pytest.raises(SecretDetected) as info:
        Guard("refuse").apply(fields)
    assert info.value.path == "fields.x-origin.meta[1].token"
    assert info.value.kind == "aws_access_key"


def test_refuse_names_body_and_counts_every_finding():
    with pytest.raises(SecretDetected) as info:
        Guard("refuse").apply({"text": "ok", "body": f"{AWS_KEY} and {STRIPE_KEY}"})
    assert info.value.path == "body"
    assert [f["kind"] for f in info.value.findings] == ["aws_access_key", "stripe_key"]
    assert "1 more" in str(info.value)


def _windows(secret: str, n: int = 8) -> set[str]:
    return {secret[i : i + n] for i in range(len(secret) - n + 1)}


def test_refusal_never_contains_the_secret_or_any_8_char_piece_of_it():
    g = Guard("refuse")
    checked = 0
    for row in load_corpus():
        if not row["secret"]:
            continue
        with pytest.raises(SecretDetected) as info:
            g.apply(as_fields(row["value"]))
        exc = info.value
        shown = " ".join([str(exc), repr(exc), json.dumps(exc.to_dict()), json.dumps(exc.findings), exc.path])
        for secret in secret_spans(row["value"]):
            leaked = [w for w in _windows(secret) if w in shown]
            assert not leaked, (row["note"], exc.path)
        checked += 1
    assert checked >= 60


def test_a_secret_used_as_a_dict_key_is_not_shown_in_the_path():
    fields = {"x-origin": {GH_TOKEN: {"note": f"again {STRIPE_KEY}"}}}
    with pytest.raises(SecretDetected) as info:
        Guard("refuse").apply(fields)
    shown = str(info.value) + json.dumps(info.value.findings)
    assert not [w for w in _windows(GH_TOKEN) | _windows(STRIPE_KEY) if w in shown]
    assert info.value.path == "fields.x-origin (a key)"
    assert info.value.findings[1] == {"path": "fields.x-origin.[secret:github_token].note", "kind": "stripe_key"}


def test_refuse_leaves_the_input_untouched():
    fields = {"text": f"key {AWS_KEY}", "tags": ["a", {"b": STRIPE_KEY}]}
    before = copy.deepcopy(fields)
    with pytest.raises(SecretDetected):
        Guard("refuse").apply(fields)
    assert fields == before


# -- redact ------------------------------------------------------------------------


def test_redact_replaces_each_secret_and_reports_path_and_kind():
    fields = {
        "text": f"aws {AWS_KEY} and github {GH_TOKEN}.",
        "body": "nothing here",
        "x-origin": {"pem": PEM_KEY, "list": ["fine", f"pay {STRIPE_KEY}"]},
    }
    res = Guard("redact").apply(fields)
    assert res.fields["text"] == "aws [secret:aws_access_key] and github [secret:github_token]."
    assert res.fields["body"] == "nothing here"
    assert res.fields["x-origin"]["pem"] == "[secret:private_key]"
    assert res.fields["x-origin"]["list"] == ["fine", "pay [secret:stripe_key]"]
    assert res.redactions == [
        {"path": "text", "kind": "aws_access_key"},
        {"path": "text", "kind": "github_token"},
        {"path": "fields.x-origin.pem", "kind": "private_key"},
        {"path": "fields.x-origin.list[1]", "kind": "stripe_key"},
    ]
    assert res.private_spans_removed == 0


def test_redacted_output_holds_no_piece_of_any_corpus_secret_and_passes_the_guard_again():
    g = Guard("redact")
    for row in load_corpus():
        if not row["secret"]:
            continue
        res = g.apply(as_fields(row["value"]))
        stored = json.dumps(res.fields)
        for secret in secret_spans(row["value"]):
            assert secret not in stored, row["note"]
        assert Guard("refuse").apply(res.fields).fields == res.fields, row["note"]


def test_redact_replaces_a_secret_dict_key():
    res = Guard("redact").apply({"x-origin": {GH_TOKEN: 1, "plain": 2}})
    assert res.fields == {"x-origin": {"[secret:github_token]": 1, "plain": 2}}
    assert res.redactions == [{"path": "fields.x-origin (a key)", "kind": "github_token"}]


def test_redacted_keys_that_collide_are_kept_apart():
    other = "gh" + "p_" + "Ab3v9XkL2mB7nT4wR8yC1dF6gH0jK5sAqQ2e"
    res = Guard("redact").apply({"m": {GH_TOKEN: 1, other: 2}})
    assert res.fields["m"] == {"[secret:github_token]": 1, "[secret:github_token]#2": 2}


def test_redact_leaves_benign_corpus_strings_unchanged():
    g = Guard("redact")
    changed = [r["value"] for r in load_corpus() if not r["secret"] and g.apply(as_fields(r["value"])).fields != as_fields(r["value"])]
    # A benign row with a private span is changed on purpose; any other change is a false positive.
    assert all("<private>" in json.dumps(v) for v in changed), changed


# -- off -------------------------------------------------------------------------------


def test_off_passes_secrets_through_but_still_removes_private_spans():
    fields = {"text": f"{AWS_KEY} <private>pin 1234</private>", "n": 3}
    res = Guard("off").apply(fields)
    assert res.fields == {"text": f"{AWS_KEY} ", "n": 3}
    assert res.private_spans_removed == 1
    assert res.redactions == []


def test_unknown_policy_is_an_error_naming_the_choices():
    with pytest.raises(InvalidRecord) as info:
        Guard("warn")
    assert "refuse, redact, off" in str(info.value)


# -- allow-list ---------------------------------------------------------------------


def test_allow_list_keeps_a_listed_literal_and_still_catches_others():
    g = Guard("refuse", allow=frozenset({AWS_KEY}))
    assert g.apply({"text": f"the sample key {AWS_KEY} from the docs"}).fields["text"].endswith("docs")
    with pytest.raises(SecretDetected):
        g.apply({"text": f"the sample key {AWS_KEY} and {GH_TOKEN}"})


def test_allow_list_matches_a_whole_string_value():
    value = f"postgres://app:{'S3cure' + '77Pw'}@db/app"
    assert Guard("refuse", allow={value}).apply({"text": value}).fields == {"text": value}
    with pytest.raises(SecretDetected):
        Guard("refuse").apply({"text": value})


def test_allow_list_applies_to_the_secret_part_of_a_match():
    password = "S3cure" + "77Pw"
    g = Guard("redact", allow={password})
    assert g.apply({"text": f"postgres://app:{password}@db/app"}).redactions == []


# -- private spans --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kept", "spans"),
    [
        ("a<private>b</private>c", "ac", 1),
        ("<private>x</private> and <private>y</private>!", " and !", 2),
        ("<PRIVATE>x</Private>keep<Private >y</ PRIVATE >", "keep", 2),
        ("a<private>b<private>c</private>d</private>e", "ae", 1),
        ("before <private>never closed\nsecond line", "before ", 1),
        ("line1\n<private>\nmulti\nline\n</private>\nline3", "line1\n\nline3", 1),
        ('x<private reason="pin">1234</private>y', "xy", 1),
        ("a stray </private> closer is kept", "a stray </private> closer is kept", 0),
        ("no tags at all", "no tags at all", 0),
        ("<privateer>ship</privateer>", "<privateer>ship</privateer>", 0),
        ("a<private></private>b", "ab", 1),
    ],
)
def test_private_spans_are_removed_whatever_the_case_nesting_or_closing(text, kept, spans):
    assert remove_private(text) == (kept, spans)


def test_private_spans_are_removed_from_every_string_in_nested_fields_and_counted():
    fields = {
        "text": "t<private>1</private>",
        "body": "<private>2</private>b",
        "scope": "proj-a",
        "x-origin": {"notes": ["n<private>3</private>", {"deep": "<private>4"}], "n": 5},
    }
    for policy in ("refuse", "redact", "off"):
        res = Guard(policy).apply(fields)
        assert res.fields == {"text": "t", "body": "b", "scope": "proj-a", "x-origin": {"notes": ["n", {"deep": ""}], "n": 5}}
        assert res.private_spans_removed == 4


def test_a_secret_inside_a_private_span_is_removed_not_refused():
    res = Guard("refuse").apply({"text": f"deploy with <private>{GH_TOKEN}</private> today"})
    assert res.fields["text"] == "deploy with  today"
    assert res.private_spans_removed == 1


def test_an_unclosed_private_span_cannot_leak_what_follows():
    res = Guard("refuse").apply({"text": f"note <Private>{GH_TOKEN}\nand more"})
    assert res.fields["text"] == "note "


# -- what the guard leaves alone ------------------------------------------------------


def test_non_string_values_are_untouched_and_the_input_is_not_mutated():
    big = 2**63
    nested = {"ints": [1, big, -3], "f": 1.5, "b": True, "none": None, "s": "plain <private>x</private>"}
    fields = {"text": "hello", "x": nested, "t": (1, "two")}
    before = copy.deepcopy(fields)
    res = Guard("redact").apply(fields)
    assert fields == before
    assert res.fields is not fields
    assert res.fields["x"]["ints"] == [1, big, -3]
    assert res.fields["x"]["f"] == 1.5 and res.fields["x"]["b"] is True and res.fields["x"]["none"] is None
    assert res.fields["x"]["s"] == "plain "
    assert res.fields["t"] == (1, "two")


def test_a_text_with_thousands_of_secrets_is_redacted_whole():
    keys = ["AK" + "IA" + f"{i:016d}" for i in range(3000)]
    res = Guard("redact").apply({"body": " ".join(keys)})
    assert res.fields["body"] == " ".join(["[secret:aws_access_key]"] * 3000)
    assert len(res.redactions) == 3000


def test_a_random_client_op_id_is_not_taken_for_a_secret():
    op_id = "q8Xr2LmZ0vTn5KfWb7YcJd4HsPa1GeUi"
    res = Guard("refuse").apply({"text": "note", "client_op_id": op_id})
    assert res.fields == {"text": "note", "client_op_id": op_id}
    with pytest.raises(SecretDetected):
        Guard("refuse").apply({"text": f"note {op_id}"})


def test_nesting_beyond_the_limit_is_refused_with_the_path():
    value: Any = "leaf"
    for _ in range(guard_module.limits.DEPTH_MAX + 2):
        value = [value]
    with pytest.raises(InvalidRecord) as info:
        Guard("refuse").apply({"deep": value})
    assert info.value.code == "invalid_argument"
    assert info.value.path.startswith("fields.deep[0]")


def test_retained_hashes_records_and_uuids_are_not_secrets():
    line = Path(__file__).resolve().parents[1] / "data" / "guard_corpus.jsonl"
    assert line.exists()
    h = "168c85b9359ad105b365ef2916c5370ad868a2a103eeaa79343ab073cb1131ba"
    fields = {"text": f"head {h}", "prev": h, "ids": ["0b1f6471-1bf0-4dda-aec3-111122223333"]}
    assert Guard("refuse").apply(fields).fields == fields


def test_the_module_examples_run():
    result = doctest.testmod(guard_module)
    assert result.failed == 0 and result.attempted >= 4
    result = doctest.testmod(credentials)
    assert result.failed == 0 and result.attempted >= 3


# -- properties ---------------------------------------------------------------------------

WORDS = ["the", "a", "log", "record", "index", "search", "memory", "agent", "store", "note", "deploy", "staging", "production", "fix", "bug", "test", "key", "token", "password", "secret", "value", "write", "read", "verify", "chain", "hash", "seq", "scope", "brief", "session", "client", "server", "python", "sqlite", "fsync", "lock", "append", "retry", "error", "message", "user", "team", "meeting", "friday", "monday", "is", "was", "be", "will", "can", "should", "not", "and", "or", "but", "if", "then", "with", "for", "from", "into", "over", "under", "about", "after"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(WORDS),
            st.integers(0, 9999).map(str),
            st.sampled_from([",", ".", ":", ";", "-", "(", ")", "'", '"', "!", "?", "\n"]),
        ),
        max_size=80,
    )
)
def test_prose_from_ordinary_words_is_never_flagged(tokens):
    text = " ".join(tokens)
    assert find_secrets(text) == []


@settings(max_examples=200, deadline=None)
@given(
    before=st.lists(st.sampled_from(WORDS), max_size=20).map(" ".join),
    after=st.lists(st.sampled_from(WORDS), max_size=20).map(" ".join),
    body=st.text(alphabet=B62, min_size=36, max_size=36),
    sep=st.sampled_from([" ", "\n", " (", ": ", ' "', "='"]),
)
def test_a_token_embedded_anywhere_in_prose_is_found(before, after, body, sep):
    token = "gh" + "p_" + body
    text = f"{before}{sep}{token} {after}"
    found = find_secrets(text)
    assert [(text[f.start : f.end], f.kind) for f in found] == [(token, "github_token")]


# -- the fast test for untouched records ---------------------------------------------

FAST_ALPHABET = string.ascii_letters + string.digits + " _-+/.~%:=<>\"'\\\n\tpé#{}[],"


def _apply_unchanged(g: Guard, fields: dict[str, Any]) -> bool:
    try:
        res = g.apply(fields)
    except SecretDetected:
        return False
    return res.fields == fields and res.private_spans_removed == 0 and not res.redactions


FAST_KEYS = st.one_of(
    st.sampled_from(["text", "scope", "kind", "source", "client_op_id", "author", "token", "n", "hash", "api_key",
                     "private_key", "apikey", "seq"]),
    st.text(FAST_ALPHABET, max_size=20),
)
# Pieces of code, assignments and provider prefixes, some split by whitespace (issues 29 and 31).
CODE_BITS = ["x=1", "timeout=30", "key=", "api_key=", "sig=", "Basic", "YWI6Y2Q=", "AKIA", "QX7T", "Z2K9WM4B",
             "ghp_", "sk-", "sk_live_", "xoxb-", "MIIE", "eyJ", "Zq3v9XkL", "R6YD", "\n", "\t", '"', "(", ")", "#",
             "def", "return", "client.get(url,", "==", "://", "a:b", "password", "-", "compassion", "tokens", "is key",
             "api key", "Speaker:", ":", "passwords", "secret_key", "credentials"]
# URLs whose tails hold long runs, with what makes one hold a secret mixed in (issue 31): userinfo, a webhook,
# query parameters named like secrets, provider prefixes, random tokens, a "://" with no scheme before it.
URL_BITS = ["https://", "http://", "git+ssh://", "://", " ://", "\n://", "example.com", "db.example.com", "user:", "a:b@",
            "@", "/", "docs", "page-3", "?", "&", "#", "=", "ref", "notes", "sig", "auth", "signature", "token",
            "hooks", "webhook", "q8Xr2LmZ0vTn5KfWb7YcJd4HsPa1GeUi", "Zq3v9XkLR6YDQX7TZ2K9WM4B", "AKIA", "ABIA",
            "ghp_", "glrt-", "shpat_", "eyJ", "SG.", "Q~", "==", "MIIE", "k_live_", "sk-", "bearer ", "key", "-u ",
            "%2F", "~", "\"", " "]
FAST_LEAVES = st.one_of(
    st.text(FAST_ALPHABET, max_size=60),
    st.lists(st.sampled_from(URL_BITS), max_size=16).map("".join),
    st.builds(lambda a, b, c: f"{a} https://example.com/{b}?{c}", st.sampled_from(WORDS),
              st.text(B62 + "-_/.~%", min_size=16, max_size=48), st.lists(st.sampled_from(URL_BITS), max_size=6).map("".join)),
    st.lists(st.sampled_from(CODE_BITS), max_size=14).map(" ".join),
    st.lists(st.sampled_from(CODE_BITS), max_size=8).map("".join),
    st.lists(st.sampled_from(WORDS), max_size=30).map(" ".join),
    st.text(B62, min_size=10, max_size=48),
    st.text("0123456789abcdef", min_size=60, max_size=68),
    st.sampled_from(["2026-11-29T15:24:34.565308Z", "2026-11-29T15:24:34Z", "x 2026-11-29T15:24:34Z",
                     "2026-11-29T15:24:34+01:00", "password 2026-11-29T15:24:34Z"]),
    st.text("0123456789abcdefABCDEF", min_size=64, max_size=64),
    st.builds(lambda a, b: f"{a} {b}", st.sampled_from(WORDS), st.text("0123456789abcdef", min_size=64, max_size=64)),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.none(),
)
FAST_VALUES = st.recursive(
    FAST_LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(FAST_KEYS, inner, max_size=3)),
    max_leaves=8,
)


@settings(max_examples=600, deadline=None)
@given(policy=st.sampled_from(["refuse", "redact", "off"]), fields=st.dictionaries(FAST_KEYS, FAST_VALUES, max_size=6))
def test_untouched_is_never_true_where_apply_would_change_or_refuse(policy, fields):
    g = Guard(policy)
    quick = g.untouched(fields)
    if quick:
        assert _apply_unchanged(g, fields)
    assert g.untouched(fields, orjson.dumps(fields)) == quick  # the store passes the bytes it encoded


def test_untouched_says_no_for_every_corpus_secret_and_yes_for_plain_notes():
    g = Guard("refuse")
    for row in load_corpus():
        if row["secret"]:
            assert not g.untouched(as_fields(row["value"])), row["raw"]
    plain = {"kind": "note", "text": "the deploy moved to friday after the staging fix", "scope": "proj-3",
             "author": "agent-2", "n": 7, "client_op_id": "0b1f6471-1bf0-4dda-aec3-111122223333"}
    assert g.untouched(plain)
    for changed in ("see <private>pin 1234</private>", "password is hunter2hunter2", "api_key=b c", "see ://x.io",
                    "see https://bob:hunter2x@x.io/a", "https://x.io/hooks/abc", "https://x.io/?sig=1", "https://x.io/?Auth=1",
                    "go\n://x.io/" + "q8Xr2LmZ0vTn5KfWb7YcJd4HsPa1GeUi", "https://x.io/eyJhbGciOiJIUzI1NiJ9", "https://x.io/a==",
                    "https://x.io/?t=glrt-" + "x" * 20, "https://x.io/ABIA" + "B" * 16, "x https://x.io/key-abc",
                    "api key: x", "Authorization: Basic x", "curl -u a:b", "run " + "x" * 16, "x sig=abc",
                    "caf\u00e9 au lait", "bell\x07here", "back\\slash", "y " * 2100, "AKIA QX7T", "use ghp_ ab",
                    "a key=v", "Jon: my passphrase is hunter2X", "the password\tfoo", "a\nsecret_key: x", 'say "token" x',
                    "Caroline: the api key x", "see https://x.io/?tokenId=" + "q8Xr2LmZ0vTn5KfW"):
        assert not g.untouched({**plain, "text": changed}), changed
    # An "=" without a key's name, sig= or Basic beside it, and the escapes of a newline, a tab or a quote,
    # cannot make a secret (issue 31): code and text with line breaks take the fast path.
    for code in ("a=b c", "tab\there", 'def f(x, retries=3):\n    return client.get(url, timeout=30)  # "retry"'):
        assert g.untouched({**plain, "text": code}), code
    # A colon without a URL, curl's -u, a key's name or Basic beside it cannot make a secret (issue 31):
    # conversation turns and times take the fast path.
    # Nor do a secret's name inside a word and a "key" that names no key: only a whole name with a value
    # after it, or a key named as credentials._KEY_PREFIX says, can start a match.
    for turn in ("Caroline: I went to the support group yesterday.", "we met at 10:30, then: lunch", "note: x",
                 "Mel: her compassion passed to the kids", "Jon: tokens, secrets, credentials.", "Caroline: it is key, the key."):
        assert g.untouched({**plain, "text": turn}), turn
    # A URL whose tail holds long runs but no userinfo, webhook, query secret or rule's hint (issue 31).
    for url in ("see https://example.com/docs/page-12?ref=notes#part-3", "Jon: https://github.com/org/retained-memory/pull/31",
                "see https://x.io", "a\nhttps://en.wikipedia.org/wiki/Write-ahead_logging\tb"):
        assert g.untouched({**plain, "text": url}), url
    digest = "99c5aa0cbf6c318315a330dbebfe1cb6769bca8e57da71d7a8e550bd5ec5eaf3"
    provenance = {"seq": 4, "hash": digest, "ts": "2026-11-29T15:24:34.565308Z",
                  "client": {"name": "retained-cli", "version": "0.1.0"}}
    assert g.untouched({**plain, "imported": provenance})
    assert g.untouched({**plain, "refs": [[1, 2], {"a": "b"}]})
    assert not g.untouched({**plain, "imported": {**provenance, "api_key": digest}})
    assert not g.untouched({**plain, "text": f"digest {digest}"})
    assert not g.untouched({**plain, "hash": digest.upper()})
    deep: Any = "leaf"
    for _ in range(guard_module.limits.DEPTH_MAX + 2):
        deep = [deep]
    assert not g.untouched({**plain, "deep": deep})
    assert Guard("off").untouched({**plain, "text": "password=hunter2hunter2"})
    assert not Guard("off").untouched({**plain, "text": "<private>x</private>"})
    for name in credentials._NAMES:  # every secret name find_secrets looks for sends a record to apply()
        assert not g.untouched({**plain, "text": f"the {name.upper()} moved"}), name


def test_untouched_with_urls_agrees_with_apply_on_every_corpus_string():
    """The URL fast path (issue 31) is exact on real formats: every corpus string (secrets and hard benign ones),
    put in a URL's path, query and fragment and after one, is let through only where apply() changes nothing."""
    g = Guard("refuse")
    texts = []
    for row in load_corpus():
        for piece in _strings(row["value"]):
            texts += [f"see https://example.com/docs/{piece}", f"see https://example.com/a?ref={piece}#x",
                      f"https://example.com/a#{piece} ok", f"see https://example.com/a then {piece}"]
    fast = 0
    for text in texts:
        fields = {"kind": "note", "text": text, "scope": "s"}
        if g.untouched(fields):
            fast += 1
            assert _apply_unchanged(g, fields), text
    assert fast > len(texts) // 10  # the hard benign strings in URLs do take the fast path


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_the_quiet_exit_finds_what_the_full_scan_finds(monkeypatch):
    """``credentials.quiet`` only spares work (issue 31): every string of the corpus, alone and as a speaker's
    turn, gets the same findings with the exit as with every rule run."""
    texts = []
    for row in load_corpus():
        for s in _strings(row["value"]):
            texts += [s, f"Caroline: {s}", f"at 10:30: {s}"]
    texts += ["Caroline: I went to the support group yesterday.", "key: abcdefgh12", "Authorization: Basic dXNlcjpwYXNz",
              "curl -u admin:hunter2x https://x.io", "see http://bob:hunter2x@db.example.com: done",
              "basic YWI6Y2Q=", "x = 1; api_key = 'q8Xr2LmZ0vTn'", "retries=3, timeout=30"]
    fast = [credentials.find_secrets(t) for t in texts]
    monkeypatch.setattr(credentials, "quiet", lambda text, folded: False)
    full = [credentials.find_secrets(t) for t in texts]
    assert fast == full
    assert sum(bool(f) for f in full) > len(texts) // 6  # the set holds many secrets, with colons beside them
