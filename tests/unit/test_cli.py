"""The command line as a person and a script use it: real subprocesses."""

from __future__ import annotations

import json

from ..conftest import run_cli


def test_write_prints_the_proof_and_get_returns_the_record(store_dir):
    out = run_cli("write", "the deploy target is staging", "--scope", "proj-a", "--field", "priority=2", "--json", env_dir=store_dir)
    assert out.returncode == 0, out.stderr
    proof = json.loads(out.stdout)
    assert proof["seq"] == 1 and proof["duplicate"] is False
    got = json.loads(run_cli("get", "1", "--json", env_dir=store_dir).stdout)
    rec = got["records"][0]["record"]
    assert rec["text"] == "the deploy target is staging" and rec["priority"] == 2
    assert rec["client"]["name"] == "retained-cli"


def test_write_reads_text_from_stdin(store_dir):
    out = run_cli("write", "-", "--json", env_dir=store_dir, input="from stdin\nsecond line")
    assert out.returncode == 0, out.stderr
    rec = json.loads(run_cli("get", "1", "--json", env_dir=store_dir).stdout)["records"][0]["record"]
    assert rec["text"] == "from stdin\nsecond line"


def test_dir_flag_overrides_the_environment(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli("write", "x", "--dir", str(b), env_dir=a).returncode == 0
    assert (b / "log.jsonl").exists() and not a.exists()


def test_bad_input_exits_2_names_the_field_and_writes_nothing(store_dir):
    run_cli("write", "first", env_dir=store_dir)
    before = (store_dir / "log.jsonl").read_bytes()
    for args in (
        ["write", "x", "--field", "seq=5"],
        ["write", "x", "--field", "n=NaN"],
        ["write", "x", "--field", "broken"],
        ["write", "x", "--supersedes", "99"],
        ["write", "x", "--kind", "retract"],
    ):
        out = run_cli(*args, "--json", env_dir=store_dir)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.startswith("retained: ")
        err = json.loads(out.stdout)["error"]
        assert err["code"] in ("reserved_field", "invalid_argument", "not_found")
    assert (store_dir / "log.jsonl").read_bytes() == before


def test_client_op_id_makes_a_cli_retry_a_duplicate(store_dir):
    first = json.loads(run_cli("write", "once", "--client-op-id", "k1", "--json", env_dir=store_dir).stdout)
    again = json.loads(run_cli("write", "once", "--client-op-id", "k1", "--json", env_dir=store_dir).stdout)
    assert again["duplicate"] is True and again["seq"] == first["seq"]


def test_checkpoint_list_head_and_verify(store_dir):
    run_cli("write", "a note", env_dir=store_dir)
    cp = json.loads(run_cli("checkpoint", "shipped 0.1", "--summary", "core done", "--json", env_dir=store_dir).stdout)
    listed = json.loads(run_cli("list", "--limit", "1", "--json", env_dir=store_dir).stdout)
    assert listed["records"][0]["record"]["kind"] == "checkpoint"
    assert listed["total_matches"] == 2 and listed["left_out"]["beyond_limit"] == 1
    head = json.loads(run_cli("head", "--json", env_dir=store_dir).stdout)
    assert (head["seq"], head["hash"]) == (cp["seq"], cp["hash"])
    out = run_cli("verify", env_dir=store_dir)
    assert out.returncode == 0 and "verify: ok" in out.stdout


def _tamper(store_dir, transform):
    path = store_dir / "log.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(transform(lines)))


def _report(store_dir):
    out = run_cli("verify", "--json", env_dir=store_dir)
    return out.returncode, json.loads(out.stdout)


def _five(store_dir):
    for i in range(5):
        run_cli("write", f"record {i}", env_dir=store_dir)


def test_verify_names_a_flipped_byte_in_a_middle_line(store_dir):
    _five(store_dir)
    _tamper(store_dir, lambda ls: [*ls[:2], ls[2].replace(b"record 2", b"record 7"), *ls[3:]])
    code, rep = _report(store_dir)
    assert code == 1 and rep["first_bad_seq"] == 3
    assert rep["findings"][0]["kind"] == "hash_mismatch"
    assert rep["findings"][0]["offset"] == sum(len(x) for x in (store_dir / "log.jsonl").read_bytes().splitlines(keepends=True)[:2])


def test_verify_names_a_deleted_line(store_dir):
    _five(store_dir)
    _tamper(store_dir, lambda ls: [*ls[:2], *ls[3:]])
    code, rep = _report(store_dir)
    assert code == 1 and rep["first_bad_seq"] == 4
    assert "seq jumps from 2 to 4" in rep["findings"][0]["message"]


def test_verify_names_two_swapped_lines(store_dir):
    _five(store_dir)
    _tamper(store_dir, lambda ls: [ls[0], ls[2], ls[1], *ls[3:]])
    code, rep = _report(store_dir)
    assert code == 1 and rep["first_bad_seq"] == 3


def test_verify_reports_a_foreign_line_without_failing(store_dir):
    _five(store_dir)
    _tamper(store_dir, lambda ls: [*ls, b'{"from":"another program"}\n'])
    code, rep = _report(store_dir)
    assert code == 0 and rep["ok"] and len(rep["foreign"]) == 1
    text = run_cli("verify", env_dir=store_dir).stdout
    assert "1 foreign line kept and skipped by the chain" in text


def test_every_command_has_help_ending_with_an_example():
    import argparse

    from retained.cli.commands import build_parser

    assert run_cli("--help").returncode == 0
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    commands = sorted(sub.choices)
    assert {"write", "checkpoint", "get", "list", "verify", "head", "serve"} <= set(commands)
    reference = (__import__("pathlib").Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    for command in commands:
        h = run_cli(command, "--help")
        assert h.returncode == 0, command
        assert "example: retained" in h.stdout.strip().splitlines()[-1], command
        assert "--json" in h.stdout, command
        assert f"\n## retained {command}\n" in reference, f"docs/cli.md has no entry for {command}"


def test_unknown_command_is_a_usage_error():
    assert run_cli("frobnicate").returncode == 2


def _corrected_and_retracted(store_dir):
    """Seq 1 superseded by 2, seq 3 retracted by 4, then a checkpoint (5): written through the CLI."""
    for args in (
        ["write", "the deploy target is staging", "--scope", "proj-a"],
        ["write", "the deploy target is production", "--scope", "proj-a", "--supersedes", "1", "--source", "chat"],
        ["write", "a guess that was wrong"],
    ):
        assert run_cli(*args, env_dir=store_dir).returncode == 0
    from retained import Store

    with Store(store_dir) as store:  # forget has no CLI verb of its own; the Store is its door
        store.forget([3], "the user took it back")
    assert run_cli("checkpoint", "deploy settled", env_dir=store_dir).returncode == 0


def test_get_around_shows_a_timeline_with_superseded_by_and_retracted_by(store_dir):
    _corrected_and_retracted(store_dir)
    out = run_cli("get", "--around", "2", "--window", "1", env_dir=store_dir)
    assert out.returncode == 0, out.stderr
    heads = [line for line in out.stdout.splitlines() if line.startswith("#")]
    assert [h.split()[0] for h in heads] == ["#1", "#2", "#3"]
    assert "superseded_by=#2" in heads[0] and "scope=proj-a" in heads[0]
    assert "supersedes=#1" in heads[1] and "source=chat" in heads[1]
    assert "retracted_by=#4" in heads[2]
    assert out.stdout.splitlines()[-1] == "3 record(s) returned; 0 older and 2 newer not shown"
    got = json.loads(run_cli("get", "--around", "2", "--window", "1", "--json", env_dir=store_dir).stdout)
    assert [e["seq"] for e in got["records"]] == [1, 2, 3]
    assert got["records"][0]["superseded_by"] == [2] and got["records"][2]["retracted_by"] == [4]
    assert (got["returned"], got["more"], got["more_before"], got["more_after"]) == (3, 2, 0, 2)
    default = json.loads(run_cli("get", "--around", "5", "--json", env_dir=store_dir).stdout)
    assert [e["seq"] for e in default["records"]] == [1, 2, 3, 4, 5]  # window 5 by default


def test_list_and_get_show_the_links_memory_get_shows(store_dir):
    _corrected_and_retracted(store_dir)
    out = run_cli("list", env_dir=store_dir)
    assert out.returncode == 0, out.stderr
    heads = {line.split()[0]: line for line in out.stdout.splitlines() if line.startswith("#")}
    assert list(heads) == ["#5", "#4", "#3", "#2", "#1"]
    assert "superseded_by=#2" in heads["#1"] and "retracted_by=#4" in heads["#3"]
    assert "retracts=#3" in heads["#4"] and "reason=the user took it back" in heads["#4"]
    listed = json.loads(run_cli("list", "--limit", "4", "--json", env_dir=store_dir).stdout)
    by_seq = {e["seq"]: e for e in listed["records"]}
    assert by_seq[3]["retracted_by"] == [4] and by_seq[2]["record"]["supersedes"] == [1]
    assert listed["more"] == 1 and "1 more match(es) not shown" in run_cli("list", "--limit", "4", env_dir=store_dir).stdout
    got = run_cli("get", "1", "3", env_dir=store_dir).stdout
    assert "superseded_by=#2" in got and "retracted_by=#4" in got


def test_get_needs_seqs_or_around_but_not_both(store_dir):
    _corrected_and_retracted(store_dir)
    for args, words in (
        (["get"], "give one or more SEQ, or --around SEQ"),
        (["get", "1", "--around", "2"], "not both"),
        (["get", "1", "--window", "2"], "--window goes with --around"),
        (["get", "--around", "2", "--window", "101"], "field window"),
        (["get", "--around", "99"], "no record with seq 99"),
    ):
        out = run_cli(*args, "--json", env_dir=store_dir)
        assert out.returncode == 2, (args, out.stderr)
        assert words in out.stderr, (args, out.stderr)
        assert json.loads(out.stdout)["error"]["code"] in ("invalid_argument", "not_found")
