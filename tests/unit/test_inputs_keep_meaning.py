"""Every input keeps its meaning on the way in (issue 15): numbers, empty text, import identity.

Real subprocesses for the command line, real stores for the library.
"""

from __future__ import annotations

import json

import pytest

from retained import Store, limits
from retained.core import json_input
from retained.errors import ImportRefused, InvalidRecord

from ..conftest import run_cli

BIG = "123456789012345678901234567890"


def _log(store_dir):
    path = store_dir / "log.jsonl"
    return path.read_bytes() if path.exists() else b""


# -- 1. integers stay exact or are refused -------------------------------------


def test_issue_15_loads_exact_keeps_big_integers_and_names_out_of_range_numbers():
    assert json_input.loads_exact(f'{{"n": {BIG}}}') == {"n": int(BIG)}
    assert json_input.loads_exact(b'[1.5, -2, 9223372036854775807]') == [1.5, -2, 2**63 - 1]
    for text in ("1e400", "-1e400", "9" * 5000):
        with pytest.raises(json_input.NotJSON, match="^number out of range"):
            json_input.loads_exact(text)
    for text in ("NaN", "Infinity", "x", "{"):
        with pytest.raises(json_input.NotJSON, match="^not JSON"):
            json_input.loads_exact(text)


@pytest.mark.parametrize("value, words", [
    (BIG, "integer outside 64 bits"),
    (f"[1, {{\"a\": -{BIG}}}]", "integer outside 64 bits"),
    ("1e400", "number out of range"),
])
def test_issue_15_cli_field_refuses_an_integer_it_cannot_keep_exact(store_dir, value, words):
    out = run_cli("write", "x", "--field", f"big={value}", "--json", env_dir=store_dir)
    assert out.returncode == 2, out.stdout
    assert words in out.stderr and "not JSON" not in out.stderr
    assert json.loads(out.stdout)["error"]["code"] == "invalid_argument"
    assert _log(store_dir) == b""


def test_issue_15_cli_field_keeps_64_bit_integers_exact(store_dir):
    out = run_cli("write", "x", "--field", f"hi={limits.INT_MAX}", "--field", f"lo={limits.INT_MIN}", env_dir=store_dir)
    assert out.returncode == 0, out.stderr
    rec = json.loads(_log(store_dir))
    assert (rec["hi"], rec["lo"]) == (limits.INT_MAX, limits.INT_MIN)


@pytest.mark.parametrize("line, words", [
    (f'{{"text": "a", "n": {BIG}}}', "field n: integer outside 64 bits"),
    (f'{{"text": "a", "deep": {{"list": [{BIG}]}}}}', "field deep.list[0]: integer outside 64 bits"),
    ('{"text": "a", "n": 1e400}', "number out of range"),
    ('{"text": "a", "n": ' + "7" * 5000 + "}", "number out of range"),
])
@pytest.mark.parametrize("dry_run", [False, True])
def test_issue_15_jsonl_import_refuses_numbers_it_cannot_keep_exact(tmp_path, line, words, dry_run):
    f = tmp_path / "in.jsonl"
    f.write_text('{"text": "fine"}\n' + line + "\n", encoding="utf-8")
    s = Store(tmp_path / "s")
    with pytest.raises(ImportRefused) as err:
        s.import_file(f, dry_run=dry_run)
    assert err.value.line == 2 and words in err.value.message
    assert _log(tmp_path / "s") == b""


def test_issue_15_memory_import_refuses_a_big_integer(tmp_path):
    f = tmp_path / "memory.jsonl"
    f.write_text(f'{{"type": "entity", "name": "a", "entityType": "t", "observations": [], "n": {BIG}}}\n', encoding="utf-8")
    out = run_cli("import", str(f), "--dry-run", "--dir", str(tmp_path / "s"))
    assert out.returncode == 2 and "integer outside 64 bits" in out.stderr, out.stderr


@pytest.mark.parametrize("dry_run", [False, True])
def test_issue_15_a_lone_surrogate_in_an_import_refuses_the_file_before_any_batch(tmp_path, dry_run):
    f = tmp_path / "in.jsonl"
    f.write_text("".join(f'{{"text": "ok {i}"}}\n' for i in range(5)) + '{"text": "a", "k": "b\\ud800"}\n', encoding="utf-8")
    s = Store(tmp_path / "s")
    with pytest.raises(InvalidRecord) as err:
        s.import_file(f, batch=2, dry_run=dry_run)
    assert "line 6" in err.value.message and "lone surrogate (U+D800)" in err.value.message
    assert err.value.path == "k"
    assert _log(tmp_path / "s") == b""


# -- 3. one empty-text rule ---------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_issue_15_empty_text_is_refused_by_the_library_and_the_cli(store_dir, text):
    with Store(store_dir) as s:
        with pytest.raises(InvalidRecord) as err:
            s.write(text)
        assert err.value.path == "text" and "empty" in err.value.message
        with pytest.raises(InvalidRecord):
            s.write_batch([{"text": "fine"}, {"text": text}])
    out = run_cli("write", text, "--json", env_dir=store_dir)
    assert out.returncode == 2 and json.loads(out.stdout)["error"]["code"] == "invalid_argument", out.stderr
    assert "field text: is empty" in out.stderr
    piped = run_cli("write", "-", env_dir=store_dir, input=text)
    assert piped.returncode == 2 and "field text: is empty" in piped.stderr
    assert _log(store_dir) == b""


def test_issue_15_empty_text_refuses_a_jsonl_or_memory_import(tmp_path):
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"text": "fine"}\n{"text": " "}\n', encoding="utf-8")
    memory = tmp_path / "memory.jsonl"
    memory.write_text('{"type": "entity", "name": "a", "entityType": "t", "observations": ["ok", ""]}\n', encoding="utf-8")
    s = Store(tmp_path / "s")
    for f, line in ((plain, 2), (memory, 1)):
        with pytest.raises(ImportRefused) as err:
            s.import_file(f)
        assert err.value.line == line and "field text: is empty" in err.value.message
    assert _log(tmp_path / "s") == b""


BELOW = str(limits.INT_MIN - 1)  # -9223372036854775809: 19 digits, which orjson reads as a float


def test_issue_29_loads_exact_keeps_integers_just_below_the_64_bit_range_exact():
    assert json_input.loads_exact(BELOW) == limits.INT_MIN - 1 and type(json_input.loads_exact(BELOW)) is int
    assert json_input.loads_exact(f'{{"n": {BELOW}, "m": {limits.INT_MIN}}}') == {"n": limits.INT_MIN - 1, "m": limits.INT_MIN}
    assert json_input.loads_exact("-9999999999999999999") == -9999999999999999999


@pytest.mark.parametrize("value", [BELOW, "-9999999999999999999", f"[{BELOW}]"])
def test_issue_29_cli_field_refuses_an_integer_below_the_64_bit_range(store_dir, value):
    out = run_cli("write", "x", "--field", f"n={value}", "--json", env_dir=store_dir)
    assert out.returncode == 2, out.stdout
    assert "integer outside 64 bits" in out.stderr
    assert _log(store_dir) == b""


def test_issue_29_import_refuses_an_integer_below_the_64_bit_range(tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text(f'{{"text": "a", "n": {BELOW}}}\n', encoding="utf-8")
    with pytest.raises(ImportRefused) as err:
        Store(tmp_path / "s").import_file(f)
    assert "field n: integer outside 64 bits" in err.value.message
    assert _log(tmp_path / "s") == b""
