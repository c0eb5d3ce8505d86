"""Capture with real Claude Code, offline: hooks installed by `retained hook install --claude` into a temporary HOME.

Two ``claude -p`` sessions run against the loopback stand-in. The first
session's prompt and reply land in the store with its session id and the
project's scope (the project is a git repository); a secret typed in the
prompt is not in the log; the second session's request to the model holds
them (the SessionStart brief); the transcript Claude Code wrote, imported
afterwards, records nothing twice; the ledger adds up.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.claude_code.conftest import CC
from tests.claude_code.standin import text

SECRET = "AKIA" + "ZXCVBNMASDFGHJKL"
PROMPT = f"remember: the deploy target is staging-7, and the CI key is {SECRET}"
REPLY = "Noted: deploys go to staging-7."


def _git_init(path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=path, check=True, capture_output=True, timeout=60)


def _records(cc: CC) -> list[dict]:
    log = cc.store / "log.jsonl"
    return [json.loads(line) for line in log.read_bytes().splitlines()] if log.exists() else []


def test_a_real_session_is_captured_once_under_the_project_and_the_next_session_is_briefed_with_it(cc: CC):
    _git_init(cc.project)
    installed = json.loads(cc.retained("hook", "install", "--claude", "--json").stdout)
    assert installed["events"]["UserPromptSubmit"] == "added" and installed["events"]["Stop"] == "added"

    cc.standin.add([text(REPLY)])
    first = cc.claude("-p", PROMPT)
    assert first.stdout.strip() == REPLY

    turns = [r for r in _records(cc) if r.get("kind") == "turn"]
    assert [(r["speaker"], r["event"]) for r in turns] == [("user", "UserPromptSubmit"), ("assistant", "Stop")], turns
    user, assistant = turns
    assert "staging-7" in user["text"] and "[secret:aws_access_key]" in user["text"]
    assert assistant["text"] == REPLY
    assert SECRET.encode() not in (cc.store / "log.jsonl").read_bytes()
    session = user["session"]
    assert assistant["session"] == session and assistant["turn"] == user["turn"]
    transcripts = list((cc.home / ".claude" / "projects").rglob(f"{session}.jsonl"))
    assert len(transcripts) == 1, "the record's session is Claude Code's session id (its transcript's name)"
    scope = json.loads(cc.retained("scope", "--json").stdout)
    assert scope["source"] == "git" and user["scope"] == assistant["scope"] == scope["scope"]
    assert user["host"]["name"] == "claude-code" and user["host"]["version"] == cc.code.version

    # The transcript Claude Code wrote, imported after live capture, adds nothing: same ids.
    imported = json.loads(cc.retained("capture", "import", str(cc.home / ".claude" / "projects"), "--json").stdout)
    assert (imported["turns"], imported["captured"], imported["deduplicated"]) == (2, 0, 2), imported
    assert len([r for r in _records(cc) if r.get("kind") == "turn"]) == 2

    # Session 2: the model's first request holds what session 1 said, through the brief.
    cc.standin.add([text("It is staging-7.")])
    mark = cc.standin.mark()
    cc.claude("-p", "where do deploys go?")
    seen = cc.standin.messages(mark, main=True)[0].text()
    assert "the deploy target is staging-7" in seen and REPLY in seen, seen[:4000]
    assert f"Where the last session of this project stopped (claude-code session {session}" in seen
    assert SECRET not in seen

    status = json.loads(cc.retained("capture", "status", "--json").stdout)
    totals = status["totals"]
    assert status["adds_up"] and totals["failed"] == 0 and totals["spooled"] == 0
    assert totals["received"] == totals["captured"] + totals["deduplicated"] + totals["skipped"]
    assert totals["captured"] == 4 and totals["redactions"] == 1  # two turns per session
    # received 8 = captured 4 (two turns a session) + deduplicated 2 (the import) + skipped 2 (the SessionEnds)
    assert (totals["received"], totals["deduplicated"], totals["skipped"]) == (8, 2, 2), totals
