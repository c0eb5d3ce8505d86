"""Smaller truths (issue 29, point 13): damaged records named as damaged, corrections keep their scope, a store's
own export adds nothing to it, the command line takes the bounds MCP takes, and ``retained forget``."""

from __future__ import annotations

import json

import pytest

from retained import Store
from retained.errors import NotFound, RecordDamaged

from ..conftest import run_cli


def _damage(store_dir, text: bytes) -> None:
    path = store_dir / "log.jsonl"
    data = path.read_bytes()
    assert data.count(text) == 1
    path.write_bytes(data.replace(text, text[:-2] + b'p"'))  # one byte changed: still JSON, the hash no longer holds


def test_issue_29_a_damaged_record_is_shown_as_damaged_with_its_finding(store):
    for text in ("one", "two", "three"):
        store.write(text)
    _damage(store.directory, b'"text":"two"')
    with pytest.raises(RecordDamaged) as err:
        Store(store.directory).get([2])
    assert err.value.code == "record_damaged" and err.value.seq == 2 and "hash does not recompute" in err.value.message
    assert "no record with seq" not in err.value.message
    with pytest.raises(NotFound, match="no record with seq 9"):
        Store(store.directory).get([9])
    out = run_cli("get", "2", "--json", env_dir=store.directory)
    assert out.returncode == 1 and json.loads(out.stdout)["error"]["code"] == "record_damaged"
    assert "seq 2 is damaged" in out.stderr and "byte" in out.stderr


def test_issue_29_a_correction_without_a_scope_keeps_the_scope_of_what_it_corrects(store):
    store.write("the deploy target is staging", scope="proj-a")
    store.write("the build uses make", scope="proj-b")
    fix = store.write("the deploy target is production", supersedes=[1])
    assert store.get([fix["seq"]])[0]["record"]["scope"] == "proj-a"
    assert any("scope 'proj-a' kept" in n for n in fix["notices"])
    mixed = store.write("both were wrong", supersedes=[1, 2])
    assert "scope" not in store.get([mixed["seq"]])[0]["record"]
    assert any("different scopes" in n for n in mixed["notices"])
    chosen = store.write("the target is prod", supersedes=[1], scope="elsewhere")
    assert store.get([chosen["seq"]])[0]["record"]["scope"] == "elsewhere" and "notices" not in chosen
    cli = run_cli("write", "production it is", "--supersedes", "1", "--json", env_dir=store.directory)
    assert cli.returncode == 0 and "kept" in json.loads(cli.stdout)["notices"][0]


def test_issue_29_importing_a_stores_own_export_into_itself_adds_nothing(store, tmp_path):
    store.write("one", scope="a")
    store.write("two", scope="a")
    store.write("two, corrected", supersedes=[2])
    store.export(tmp_path / "own.jsonl")
    size = (store.directory / "log.jsonl").stat().st_size
    result = store.import_file(tmp_path / "own.jsonl")
    assert (result["written"], result["duplicates"]) == (0, 3)
    assert (store.directory / "log.jsonl").stat().st_size == size
    # Another store takes it, and then a second import into that one adds nothing either.
    other = Store(tmp_path / "other")
    assert other.import_file(tmp_path / "own.jsonl")["written"] == 3
    assert other.import_file(tmp_path / "own.jsonl")["written"] == 0


@pytest.mark.parametrize("args, words", [
    (["search", "x", "-k", "0"], "-k: 0 is out of range: give 1 to 200"),
    (["search", "x", "-k", "201"], "give 1 to 200"),
    (["search", "x", "--scope", ""], "a scope cannot be empty"),
    (["search", "x", "--scope", "s" * 201], "at most 200 characters"),
    (["list", "--limit", "0"], "give 1 to 500"),
    (["list", "--limit", "501"], "give 1 to 500"),
    (["write", "x", "--scope", " "], "a scope cannot be empty"),
    (["search", "x", "--context", "51"], "give 0 to 50"),
])
def test_issue_29_the_command_line_takes_the_bounds_the_mcp_tools_take(filled_store, args, words):
    out = run_cli(*args, env_dir=filled_store.directory)
    assert out.returncode == 2 and words in out.stderr, out.stderr


def test_issue_29_retained_forget_retracts_records_from_the_command_line(filled_store):
    out = run_cli("forget", "3", "5", "--reason", "both were wrong", "--json", env_dir=filled_store.directory)
    assert out.returncode == 0, out.stderr
    proof = json.loads(out.stdout)
    rec = Store(filled_store.directory).get([proof["seq"]])[0]["record"]
    assert rec["kind"] == "retract" and rec["retracts"] == [3, 5] and rec["reason"] == "both were wrong"
    assert run_cli("forget", "3", env_dir=filled_store.directory).returncode == 2  # --reason is required
    missing = run_cli("forget", "99", "--reason", "x", env_dir=filled_store.directory)
    assert missing.returncode == 2 and "no record with seq 99" in missing.stderr
