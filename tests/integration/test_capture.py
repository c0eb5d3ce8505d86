"""``retained capture`` run as the host runs it: one real process per hook event, JSON on stdin.

The events are shaped as Claude Code sends them (hook_event_name, session_id,
transcript_path, cwd, and each event's own fields). Every test reads the log
and the ledger the processes left behind; none depends on timing (the busy
store is a lock held for the whole run of the capture process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from retained.core.lock import StoreLock

VENV_BIN = Path(sys.executable).parent
RETAINED = VENV_BIN / "retained"
WAIT_S = 60


def _env(store: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_")}
    env.update(RETAINED_DIR=str(store), RETAINED_ANCHOR_DIR="off", **more)
    return env


def capture(store: Path, event: dict | str | bytes, *args: str, cwd: Path | None = None,
            **env: str) -> subprocess.CompletedProcess:
    data = event if isinstance(event, bytes) else (event if isinstance(event, str) else json.dumps(event)).encode()
    return subprocess.run([str(RETAINED), "capture", *args], input=data, capture_output=True, env=_env(store, **env),
                          cwd=cwd or store.parent, timeout=WAIT_S, check=False)


def cli(store: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(RETAINED), *args], capture_output=True, env=_env(store), cwd=cwd or store.parent,
                          timeout=WAIT_S, check=False)


def records(store: Path) -> list[dict]:
    path = store / "log.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def status(store: Path) -> dict:
    proc = cli(store, "capture", "status", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=WAIT_S,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit and a second worktree beside it (``<repo>-wt``)."""
    root = tmp_path / "proj"
    root.mkdir()
    _git("init", "-q", cwd=root)
    (root / "f").write_text("x", encoding="utf-8")
    _git("add", "f", cwd=root)
    _git("commit", "-q", "-m", "one", cwd=root)
    _git("worktree", "add", "-q", str(tmp_path / "proj-wt"), cwd=root)
    return root


def prompt(session: str, prompt_id: str, text: str, cwd: Path, transcript: str = "/nowhere.jsonl") -> dict:
    return {"hook_event_name": "UserPromptSubmit", "session_id": session, "transcript_path": transcript,
            "cwd": str(cwd), "prompt": text, "prompt_id": prompt_id, "permission_mode": "default"}


def stop(session: str, text: str, cwd: Path) -> dict:
    return {"hook_event_name": "Stop", "session_id": session, "transcript_path": "/nowhere.jsonl", "cwd": str(cwd),
            "stop_hook_active": False, "last_assistant_message": text}


def test_prompt_and_reply_are_records_with_session_speaker_event_host_and_the_project_scope(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    first = capture(store, prompt("sess-1", "p-1", "the deploy target is staging", repo))
    reply = capture(store, stop("sess-1", "Noted: staging is the target.", tmp_path / "proj-wt"))
    assert (first.returncode, first.stdout, reply.returncode, reply.stdout) == (0, b"", 0, b"")
    user, assistant = records(store)
    assert (user["text"], user["speaker"], user["event"], user["session"], user["kind"]) == (
        "the deploy target is staging", "user", "UserPromptSubmit", "sess-1", "turn")
    assert (assistant["speaker"], assistant["event"], assistant["turn"]) == ("assistant", "Stop", "p-1")
    assert user["host"]["name"] == "claude-code" and user["client"]["name"] == "retained-capture"
    assert user["span"] == {"event": "UserPromptSubmit", "field": "prompt", "transcript": "/nowhere.jsonl"}
    # The reply came from the other worktree: one repository, one project.
    assert user["scope"] == assistant["scope"] == str(repo.resolve())
    assert user["client_op_id"] == "cap:claude-code:sess-1:p-1:user"
    assert assistant["client_op_id"] == "cap:claude-code:sess-1:p-1:assistant"


def test_a_repeated_event_is_recorded_once_and_the_ledger_says_deduplicated(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    event = prompt("sess-1", "p-1", "remember the port is 8443", repo)
    for _ in range(3):
        assert capture(store, event).returncode == 0
    assert [r["text"] for r in records(store)] == ["remember the port is 8443"]
    got = status(store)
    assert (got["totals"]["received"], got["totals"]["captured"], got["totals"]["deduplicated"]) == (3, 1, 2)
    lines = (store / "capture" / "ledger.jsonl").read_bytes().splitlines()
    assert [orjson.loads(x)["outcome"] for x in lines] == ["captured", "deduplicated", "deduplicated"]


def test_a_secret_in_a_prompt_is_replaced_and_private_text_never_reaches_the_log(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    secret = "AKIA" + "QWERTYUIOPASDFGH"
    proc = capture(store, prompt("s", "p", f"use key {secret} <private>pin quokka</private> for the bucket", repo))
    assert proc.returncode == 0 and proc.stdout == b""
    raw = (store / "log.jsonl").read_bytes()
    assert secret.encode() not in raw and b"quokka" not in raw and b"[secret:aws_access_key]" in raw
    got = status(store)["totals"]
    assert (got["captured"], got["redactions"], got["private_spans"]) == (1, 1, 1)
    only_private = capture(store, prompt("s", "p2", "<private>all of it</private>", repo))
    assert only_private.returncode == 0
    assert status(store)["reasons"]["skipped"] == {"private_only": 1}
    assert len(records(store)) == 1


def test_bad_input_exits_zero_writes_nothing_and_is_counted(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    for event in (b"not json", b"[1, 2]", json.dumps({"hook_event_name": "Stop"}).encode()):
        proc = capture(store, event)
        assert (proc.returncode, proc.stdout) == (0, b"")
    end = capture(store, {"hook_event_name": "SessionEnd", "session_id": "s", "reason": "exit", "cwd": str(repo)})
    assert (end.returncode, end.stdout) == (0, b"")
    assert records(store) == []
    got = status(store)
    assert got["totals"]["received"] == got["totals"]["skipped"] == 4 and got["adds_up"]
    assert got["reasons"]["skipped"]["nothing_to_keep"] == 1


def test_capture_turned_off_records_nothing_and_counts_the_event(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    assert capture(store, prompt("s", "p", "hello there", repo), RETAINED_CAPTURE="off").returncode == 0
    assert records(store) == []
    assert status(store)["reasons"]["skipped"] == {"disabled": 1}


def test_a_lock_held_past_the_budget_sends_the_event_to_the_spool_and_retry_writes_it(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    assert capture(store, prompt("s", "p-0", "first turn", repo)).returncode == 0
    with StoreLock(store / "log.lock", 1.0):
        proc = capture(store, prompt("s", "p-1", "written while the store was busy", repo), "--lock-wait-s", "0.2")
        assert (proc.returncode, proc.stdout) == (0, b"")
        assert b"spooled" in proc.stderr
    spooled = list((store / "capture" / "spool").iterdir())
    assert len(spooled) == 1 and (spooled[0].stat().st_mode & 0o777) == 0o600
    assert (store / "capture").stat().st_mode & 0o777 == 0o700
    mid = status(store)
    assert (mid["totals"]["spooled"], mid["spool_files"], mid["adds_up"]) == (1, 1, True)
    assert [r["text"] for r in records(store)] == ["first turn"]
    retry = cli(store, "capture", "--retry", "--json")
    assert retry.returncode == 0, retry.stderr
    assert [r["text"] for r in records(store)] == ["first turn", "written while the store was busy"]
    after = status(store)
    assert (after["totals"]["received"], after["totals"]["captured"], after["totals"]["spooled"]) == (2, 2, 0)
    assert after["spool_files"] == 0 and after["adds_up"]


def test_the_next_event_retries_the_spool(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    store.mkdir()
    with StoreLock(store / "log.lock", 1.0):
        assert capture(store, prompt("s", "p-1", "busy turn", repo), "--lock-wait-s", "0.1").returncode == 0
    assert capture(store, prompt("s", "p-2", "next turn", repo)).returncode == 0
    assert sorted(r["text"] for r in records(store)) == ["busy turn", "next turn"]
    assert status(store)["totals"]["captured"] == 2


def test_codex_notify_passes_the_event_as_an_argument(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    event = {"type": "agent-turn-complete", "thread-id": "th-1", "turn-id": "t-1", "cwd": str(repo),
             "input-messages": ["rename the module"], "last-assistant-message": "Renamed it to capture."}
    proc = subprocess.run([str(RETAINED), "capture", json.dumps(event)], capture_output=True, env=_env(store),
                          stdin=subprocess.DEVNULL, timeout=WAIT_S, check=False)
    assert (proc.returncode, proc.stdout) == (0, b""), proc.stderr
    got = records(store)
    assert [(r["speaker"], r["text"], r["host"]["name"]) for r in got] == [
        ("user", "rename the module", "codex"), ("assistant", "Renamed it to capture.", "codex")]


def test_the_generic_shape_and_the_json_entry_on_request(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    event = {"host": "myagent", "host_version": "1.2", "session": "g-1", "turn": "t-9", "cwd": str(repo),
             "messages": [{"speaker": "user", "text": "what is the port"}, {"speaker": "assistant", "text": "8443"}]}
    proc = capture(store, event, "--json")
    entry = json.loads(proc.stdout)
    assert (entry["outcome"], entry["records"], entry["host"]) == ("captured", 2, "myagent")
    assert records(store)[1]["host"] == {"name": "myagent", "version": "1.2"}


def test_scope_prints_the_project_identity_and_why(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    main = json.loads(cli(store, "scope", "--json", cwd=repo).stdout)
    other = json.loads(cli(store, "scope", "--json", cwd=tmp_path / "proj-wt").stdout)
    assert main["scope"] == other["scope"] == str(repo.resolve()) and other["source"] == "git"
    plain = tmp_path / "plain"
    plain.mkdir()
    assert json.loads(cli(store, "scope", "--json", cwd=plain).stdout)["source"] == "directory"
    (repo / ".retained-scope").write_text("billing-service\n", encoding="utf-8")
    named = json.loads(cli(store, "scope", "--json", cwd=repo).stdout)
    assert (named["scope"], named["source"]) == ("billing-service", "file")


def test_stats_and_the_viewers_health_page_show_the_ledger(tmp_path: Path, repo: Path):
    from retained import Store
    from retained.viewer import pages

    store = tmp_path / "store"
    capture(store, prompt("s", "p-1", "kept turn", repo))
    capture(store, b"not json <script>")
    shown = cli(store, "stats")
    assert shown.returncode == 0, shown.stderr
    assert b"capture: received 2 = captured 1 + deduplicated 0 + skipped 1 + spooled 0 + failed 0" in shown.stdout
    as_json = json.loads(cli(store, "stats", "--json").stdout)
    assert as_json["capture"]["totals"]["received"] == 2 and as_json["capture"]["adds_up"]
    with Store(store) as s:
        html = pages.health(s.stats(), None, {})
    assert "<h2>Capture</h2>" in html and "adds up" in html and "<script>" not in html


def test_the_brief_in_the_project_starts_with_where_its_last_session_stopped(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    capture(store, prompt("old-session", "p-0", "an older session's question", repo))
    cli(store, "write", "a note written by hand in between", cwd=repo)
    for i in range(1, 4):
        capture(store, prompt("sess-9", f"p-{i}", f"question number {i} about the release", repo))
        capture(store, {**stop("sess-9", f"answer number {i}: ship on friday", repo), "prompt_id": f"p-{i}"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    capture(store, prompt("other-project", "x-1", "a turn of another project", elsewhere))
    seqs = {r["text"]: r["seq"] for r in records(store)}
    from retained import Store

    with Store(store) as s:
        s.forget([seqs["answer number 2: ship on friday"]], reason="wrong")

    shown = cli(store, "brief", cwd=tmp_path / "proj-wt")  # another worktree: the same project
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    head, rest = text.split("\n", 1)
    assert head.startswith("Where the last session of this project stopped (claude-code session sess-9")
    section = rest.split("Memory brief from retained", 1)[0]
    assert "question number 1" in section and "answer number 3: ship on friday" in section
    assert section.index("question number 3") < section.index("answer number 3")  # oldest first
    assert "answer number 2" not in section  # retracted
    assert "another project" not in section and "older session" not in section
    plain = cli(store, "brief", cwd=elsewhere).stdout.decode()
    assert plain.startswith("Where the last session of this project stopped (claude-code session other-project")
    off = subprocess.run([str(RETAINED), "brief"], capture_output=True, env=_env(store, RETAINED_CAPTURE="off"),
                         cwd=repo, timeout=WAIT_S, check=False)
    assert off.stdout.startswith(b"Memory brief from retained")


def test_the_generic_shape_keeps_a_speakers_name_and_time(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    event = {"host": "locomo", "session": "c-1", "turn": "D1:1", "cwd": str(repo),
             "messages": [{"speaker": "user", "text": "I adopted a dog", "name": "Caroline", "at": "8 May 2023"}]}
    assert capture(store, event).returncode == 0
    (rec,) = records(store)
    assert (rec["speaker"], rec["name"], rec["at"], rec["turn"]) == ("user", "Caroline", "8 May 2023", "D1:1")
    bad = capture(store, {**event, "messages": [{"speaker": "user", "text": "x", "name": 7}]})
    assert bad.returncode == 0 and len(records(store)) == 1
    assert "bad_event: field messages[0].name" in json.dumps(status(store)["reasons"])


def test_a_compaction_summary_and_a_subagents_result_are_recorded(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    compact = {"hook_event_name": "PostCompact", "session_id": "s", "cwd": str(repo), "transcript_path": "/t.jsonl",
               "trigger": "auto", "compact_summary": "We moved the deploy to staging-7 and fixed the CI key."}
    sub = {"hook_event_name": "SubagentStop", "session_id": "s", "cwd": str(repo), "agent_id": "ag-1",
           "agent_type": "Explore", "last_assistant_message": "Found 3 call sites of deploy()."}
    assert capture(store, compact).returncode == 0 and capture(store, sub).returncode == 0
    summary, result = records(store)
    assert (summary["kind"], summary["event"], summary["speaker"]) == ("summary", "PostCompact", "assistant")
    assert (result["kind"], result["event"], result["turn"], result["span"]["agent_type"]) == (
        "turn", "SubagentStop", "ag-1", "Explore")
    assert result["client_op_id"] == "cap:claude-code:s:ag-1:subagent"


def test_an_event_capture_itself_cannot_handle_is_spooled_counted_and_written_by_the_retry(tmp_path: Path, repo: Path):
    store = tmp_path / "store"
    store.mkdir()
    broken = capture(store, prompt("s", "p-1", "kept through a bad setting", repo), RETAINED_RECORD_BYTES_MAX="lots")
    assert (broken.returncode, broken.stdout) == (0, b"") and b"spooled: internal: InvalidRecord" in broken.stderr
    assert records(store) == [] and status(store)["totals"]["spooled"] == 1
    assert cli(store, "capture", "--retry").returncode == 0
    assert [r["text"] for r in records(store)] == ["kept through a bad setting"]
    got = status(store)["totals"]
    assert (got["received"], got["captured"], got["spooled"]) == (1, 1, 0)


def test_the_hook_imports_only_what_one_write_needs(tmp_path: Path, repo: Path):
    """The hook's start-up is most of its time: none of the brief, the command line, the verify walk or the index."""
    store = tmp_path / "store"
    data = json.dumps(prompt("s-imports", "p-1", "the deploy target is staging", repo)).encode()
    proc = subprocess.run([sys.executable, "-X", "importtime", str(RETAINED), "capture"], input=data,
                          capture_output=True, env=_env(store), cwd=repo, timeout=WAIT_S, check=False)
    assert proc.returncode == 0 and len(records(store)) == 1, proc.stderr[-2000:]
    names = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.decode().splitlines()
             if line.startswith("import time:") and "|" in line}
    assert "retained.capture.run" in names  # the listing is real
    unwanted = {n for n in names if n.split(".")[0] in ("mcp", "portalocker", "argparse", "multiprocessing")
                or n.startswith(("retained.brief", "retained.cli.commands", "retained.core.chain", "retained.index",
                                 "retained.vectors"))}
    assert unwanted == set()
