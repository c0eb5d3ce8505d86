"""The command line points the way (issue 15): missing stores, bad paths, arguments, messages.

Real subprocesses of ``python -m retained``; a real pseudo-terminal where a TTY matters.
"""

from __future__ import annotations

import json

import pytest

from retained import Store, errors

from ..conftest import run_cli

READ_COMMANDS = [
    ["verify"], ["head"], ["list"], ["get", "1"], ["search", "x"], ["stats"], ["export", "-o", "DEST"], ["rebuild"],
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


# -- 9. an index the user cannot open ------------------------------------------


def _spoil_index(store_dir):
    """Make the index impossible to open, as a root-owned 0600 file is for its user.

    Running as root, no file mode keeps us out, so a directory takes the
    index's name: SQLite cannot open it either ("unable to open database file").
    """
    import os

    index = store_dir / "index.sqlite3"
    for name in ("index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm"):
        (store_dir / name).unlink(missing_ok=True)
    if os.geteuid() == 0:
        index.mkdir()
    else:
        index.write_bytes(b"")
        index.chmod(0)
    return index


def test_issue_15_search_answers_from_the_log_when_the_index_cannot_be_opened(store_dir):
    with Store(store_dir) as s:
        s.write("the deploy target is staging", scope="proj-a")
        s.write("the user prefers dark mode")
        s.search("deploy")
    index = _spoil_index(store_dir)
    out = run_cli("search", "deploy target", "--scope", "proj-a", "--json", env_dir=store_dir)
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert [r["record"]["text"] for r in reply["results"]] == ["the deploy target is staging"]
    assert reply["total_matches"] == 1 and "answered from the log" in reply["mode_reason"]
    assert str(index) in reply["mode_reason"]
    text = run_cli("search", "dark", env_dir=store_dir)
    assert text.returncode == 0 and "dark mode" in text.stdout and "answered from the log" in text.stdout
    assert "Traceback" not in text.stderr


def test_issue_15_rebuild_and_verify_name_an_unopenable_index_and_the_fix(store_dir):
    with Store(store_dir) as s:
        s.write("a note")
    index = _spoil_index(store_dir)
    out = run_cli("rebuild", "--json", env_dir=store_dir)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    error = json.loads(out.stdout)["error"]
    assert error["code"] == "index_unavailable"
    assert str(index) in error["message"] and "safe to delete" in error["message"] and "retained rebuild" in error["message"]
    verify = run_cli("verify", env_dir=store_dir)
    assert verify.returncode == 1 and str(index) in verify.stdout and "safe to delete" in verify.stdout


# -- 10. a damaged line can be moved aside, keeping its bytes -------------------


def test_issue_15_quarantine_moves_a_hand_appended_line_aside_and_verify_passes_again(store_dir):
    with Store(store_dir) as s:
        s.write("before the damage")
        s.search("before")  # an index exists, so its offsets must follow the rewrite
    log = store_dir / "log.jsonl"
    offset = log.stat().st_size
    with open(log, "ab") as f:
        f.write(b"a note pasted by hand\n")
    with Store(store_dir) as s:
        s.write("after the damage, a zebra")
    out = run_cli("verify", env_dir=store_dir)
    assert out.returncode == 1 and f"retained quarantine {offset}" in out.stdout

    moved = run_cli("quarantine", str(offset), "--reason", "pasted by hand", "--json", env_dir=store_dir)
    assert moved.returncode == 0, moved.stderr
    result = json.loads(moved.stdout)
    kept = store_dir / result["file"]
    assert kept.read_bytes() == b"a note pasted by hand\n" and (kept.stat().st_mode & 0o777) == 0o600
    assert b"pasted by hand\n" not in log.read_bytes().replace(b'"reason":"pasted by hand"', b"")
    assert run_cli("verify", env_dir=store_dir).returncode == 0

    with Store(store_dir) as s:
        rec = s.get([result["record"]["seq"]])[0]
        assert rec["offset"] == result["record"]["offset"]
        assert rec["record"]["kind"] == "quarantine" and rec["record"]["reason"] == "pasted by hand"
        assert rec["record"]["quarantined"]["offset"] == offset and rec["record"]["quarantined"]["length"] == 22
        assert [r["record"]["text"] for r in s.search("zebra")["results"]] == ["after the damage, a zebra"]
        from retained.brief import compose as brief

        assert "moved a damaged line" not in brief.render_text(s.brief())  # bookkeeping, not a memory
    again = run_cli("quarantine", str(offset), env_dir=store_dir)
    assert again.returncode == 2 and "nothing was changed" in again.stderr


def test_issue_15_quarantine_refuses_a_line_that_claims_a_seq_or_is_not_damaged(store_dir):
    with Store(store_dir) as s:
        s.write("first")
        s.write("second")
        s.write("third")
    log = store_dir / "log.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    tampered = lines[1].replace(b"second", b"SECOND")
    log.write_bytes(lines[0] + tampered + lines[2])
    before = log.read_bytes()
    for offset, words in ((len(lines[0]), "claims seq 2"), (0, "not a damaged one"), (3, "no line starts at byte 3")):
        out = run_cli("quarantine", str(offset), env_dir=store_dir)
        assert out.returncode == 2 and words in out.stderr, out.stderr
    assert log.read_bytes() == before
    assert sorted(p.name for p in store_dir.iterdir() if "quarantine" in p.name) == []


# -- 11. bare `retained` on a terminal; stopping the server ---------------------


def _on_a_terminal(*args, signal_after=None, timeout=60.0):
    """Run ``python -m retained ARGS`` with a pseudo-terminal as stdin, stdout and stderr.

    Returns (exit status, everything it printed, seconds from the signal to
    the exit or None). With ``signal_after`` (a signal number), the signal
    is sent once the process has printed or a second has passed.
    """
    import os
    import pty
    import select
    import subprocess
    import sys
    import time

    from ..conftest import REPO

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "retained", *args], stdin=slave, stdout=slave, stderr=slave,
                            cwd=REPO, close_fds=True)
    os.close(slave)
    out = b""
    signalled = None
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    try:
        while time.monotonic() < deadline:
            if signal_after is not None and signalled is None and time.monotonic() - started > 1.0:
                proc.send_signal(signal_after)
                signalled = time.monotonic()
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # the terminal closed: the process is gone
                    chunk = b""
                if chunk:
                    out += chunk
                    continue
            if proc.poll() is not None:
                break
        status = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        stopped = None if signalled is None else time.monotonic() - signalled
        return status, out.decode("utf-8", "replace"), stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_issue_15_bare_retained_on_a_terminal_prints_short_help_instead_of_hanging(tmp_path):
    status, out, _ = _on_a_terminal(timeout=30.0)
    assert status == 0, out
    assert "MCP server" in out and "retained write" in out and "retained --help" in out


def test_issue_15_serve_on_a_terminal_stops_on_ctrl_c():
    """The signal lands wherever a second after the start finds the server (importing, or serving): issue 29.1."""
    import signal

    status, out, stopped = _on_a_terminal("serve", signal_after=signal.SIGINT, timeout=120.0)
    assert stopped is not None, out
    assert status == 130 and "Traceback" not in out, out


# -- 12. the command line reads what a person types -----------------------------


def test_issue_15_a_value_starting_with_a_dash_is_explained(store_dir):
    run_cli("write", "prefers dark mode", env_dir=store_dir)
    out = run_cli("search", "-dark", env_dir=store_dir)
    assert out.returncode == 2 and "'-dark' was read as an option" in out.stderr
    assert "retained search -- '-dark'" in out.stderr
    assert run_cli("search", "--", "-dark", env_dir=store_dir).returncode == 0
    plain = run_cli("write", env_dir=store_dir)
    assert plain.returncode == 2 and "read as an option" not in plain.stderr


def test_an_option_the_command_lacks_is_named_with_the_one_meant_and_nothing_is_written(store_dir):
    out = run_cli("write", "prefers dark mode", "--fields", '{"n": 1}', env_dir=store_dir)
    assert out.returncode == 2
    assert "retained write has no option --fields: did you mean --field?" in out.stderr, out.stderr
    assert "usage: retained write" in out.stderr and "read as an option" not in out.stderr
    assert not (store_dir / "log.jsonl").exists()
    # A value of a global option that happens to be a command's name does not pick the command.
    out = run_cli("--dir", "list", "search", "dark", "--limt", "3", env_dir=store_dir)
    assert out.returncode == 2 and "retained search has no option --limt" in out.stderr, out.stderr
    assert "usage: retained search" in out.stderr


def test_a_file_named_where_only_an_option_takes_one_is_shown_with_the_option(store_dir, tmp_path):
    run_cli("write", "prefers dark mode", env_dir=store_dir)
    out = run_cli("export", str(tmp_path / "out.jsonl"), env_dir=store_dir)
    assert out.returncode == 2 and f"use -o: retained export -o {tmp_path / 'out.jsonl'}" in out.stderr, out.stderr
    assert not (tmp_path / "out.jsonl").exists()
    assert run_cli("export", "-o", str(tmp_path / "out.jsonl"), env_dir=store_dir).returncode == 0


def test_issue_15_global_options_may_come_before_the_command(tmp_path):
    store_dir = tmp_path / "s"
    assert run_cli("--dir", str(store_dir), "write", "hello").returncode == 0
    out = run_cli("--dir", str(store_dir), "--json", "list")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["records"][0]["record"]["text"] == "hello"
    # The command's own --dir wins over one given before it.
    other = tmp_path / "other"
    assert run_cli("--dir", str(store_dir), "write", "there", "--dir", str(other)).returncode == 0
    assert (other / "log.jsonl").exists()


# -- 13. text output shows what a caller set, write says what the guard did ----


def test_issue_15_text_output_shows_every_field_a_caller_set(store_dir):
    run_cli("write", "first", env_dir=store_dir)
    out = run_cli("write", "the fix <private>the token</private> is here", "--source", "notes.md", "--supersedes", "1",
                  "--field", "priority=2", env_dir=store_dir)
    assert out.returncode == 0 and "1 <private> span(s) removed" in out.stdout
    found = run_cli("search", "notes.md", env_dir=store_dir).stdout
    head = [line for line in found.splitlines() if line.startswith("#2 ")][0]
    assert "source=notes.md" in head and "supersedes=#1" in head and "priority=2" in head


# -- 14. messages --------------------------------------------------------------


def test_issue_15_the_size_error_names_the_setting_a_cli_user_can_change(store_dir):
    import os
    import subprocess
    import sys

    from ..conftest import REPO

    env = {**os.environ, "RETAINED_DIR": str(store_dir), "RETAINED_RECORD_BYTES_MAX": "100"}
    out = subprocess.run([sys.executable, "-m", "retained", "write", "x" * 200], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=60)
    assert out.returncode == 2 and "RETAINED_RECORD_BYTES_MAX" in out.stderr, out.stderr


def test_issue_15_a_byte_order_mark_is_accepted_and_counts_agree_in_number(tmp_path):
    f = tmp_path / "bom.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"text": "from a BOM file"}\n')
    out = run_cli("import", str(f), "--dir", str(tmp_path / "s"))
    assert out.returncode == 0, out.stderr
    assert "imported 1 of 1 record from" in out.stdout and "1 record written" in out.stderr
    assert "1 records" not in out.stdout + out.stderr
    verify = run_cli("verify", "--dir", str(tmp_path / "s"))
    assert verify.stdout.startswith("1 record, head seq 1")


def test_issue_15_a_lone_surrogate_in_a_field_is_named_as_such(store_dir):
    out = run_cli("write", "x", "--field", 'k="a\\ud800"', env_dir=store_dir)
    assert out.returncode == 2 and "field k: holds a lone surrogate (U+D800)" in out.stderr
    assert "not JSON" not in out.stderr


@pytest.mark.parametrize("argv, words", [
    (["serve", "--json"], "--json does not apply"),
    (["selftest", "--dir", "somewhere"], "--dir does not apply"),
    (["export", "--json"], "--json cannot be"),
])
def test_issue_15_options_a_command_would_ignore_are_refused(store_dir, argv, words):
    run_cli("write", "x", env_dir=store_dir)
    out = run_cli(*argv, env_dir=store_dir, input="")
    assert out.returncode == 2 and words in out.stderr, out.stderr


def test_issue_15_every_argument_of_every_command_has_help():
    import argparse

    from retained.cli.commands import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [f"{name} {action.dest}" for name, parser in sub.choices.items() for action in parser._actions
               if not action.help and not isinstance(action, argparse._HelpAction)]
    assert missing == []
