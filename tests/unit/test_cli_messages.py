"""The command line points the way (issue 15): missing stores, bad paths, arguments, messages.

Real subprocesses of ``python -m retained``; a real pseudo-terminal where a TTY matters.
"""

from __future__ import annotations

import json

import pytest

from retained import Store, errors

from ..conftest import run_cli

READ_COMMANDS = [
    ["verify"], ["head"], ["list"], ["get", "1"], ["search", "x"], ["stats"], ["export"], ["rebuild"],
    ["backup", "DEST"], ["redact", "1", "--reason", "r"],
]


# -- 7. a command that reads a store that is not there says so -----------------


@pytest.mark.parametrize("argv", READ_COMMANDS, ids=lambda a: a[0])
def test_issue_15_a_read_command_on_a_missing_store_says_no_store_and_fails(tmp_path, argv):
    missing = tmp_path / "nope"
    argv = [str(tmp_path / "dest") if a == "DEST" else a for a in argv]
    out = run_cli(*argv, "--dir", str(missing), "--json")
    assert out.returncode == 1, (argv, out.stdout, out.stderr)
    assert f"no store at {missing}" in out.stderr
    assert json.loads(out.stdout)["error"]["code"] == "no_store"
    assert not missing.exists(), "a read command created the store directory"


def test_issue_15_a_write_still_creates_the_store_and_then_reads_work(tmp_path):
    store_dir = tmp_path / "new"
    assert run_cli("write", "first", "--dir", str(store_dir)).returncode == 0
    out = run_cli("verify", "--dir", str(store_dir))
    assert out.returncode == 0 and "verify: ok" in out.stdout


# -- 8. a store path that is a file --------------------------------------------


@pytest.mark.parametrize("argv", [["write", "x"], ["list"], ["verify"]])
def test_issue_15_a_store_path_that_is_a_file_is_named_as_a_file(tmp_path, argv):
    path = tmp_path / "a-file"
    path.write_text("not a store\n", encoding="utf-8")
    out = run_cli(*argv, env_dir=path)
    assert out.returncode == 1, out.stderr
    assert f"{path} is a file, not a store directory" in out.stderr and "File exists" not in out.stderr
    with pytest.raises(errors.NoStore):
        Store(path)
    assert path.read_text(encoding="utf-8") == "not a store\n"
