"""The fixture itself: real Claude Code runs a whole session against the stand-in, and its hooks run.

Each test here is one ``claude -p`` session (about a second when the machine
is idle); the install is shared by the whole run.
"""

from __future__ import annotations

import json

from tests.claude_code.standin import END_OF_SCRIPT, text


def test_a_print_session_sends_its_prompt_to_the_stand_in_and_prints_the_scripted_reply(cc):
    cc.standin.add([text("Hello from the stand-in.")])
    proc = cc.claude("-p", "hello there, stand-in")
    main = cc.standin.messages(main=True)
    summary = "\n".join(cc.standin.summary())
    assert len(main) == 1, summary
    request = main[0]
    assert request.headers["user-agent"].startswith(f"claude-cli/{cc.code.version} "), request.headers
    assert request.headers["x-api-key"].startswith("sk-ant-api03-standin"), "the dummy key, not a real one"
    assert request.body["stream"] is True
    assert request.body["messages"][0]["role"] == "user"
    assert "hello there, stand-in" in request.text()
    assert request.tool_names(), "a conversation request offers Claude Code's tools"
    assert proc.stdout.strip() == "Hello from the stand-in."
    assert cc.standin.remaining() == 0
    assert END_OF_SCRIPT not in proc.stdout


def test_the_session_start_hook_installed_by_retained_puts_the_brief_in_the_model_request(cc):
    # No scope, as memory_write writes: the brief shows it in any project.
    cc.retained("write", "the deploy key lives in the vault, never in the repo")
    installed = cc.retained("hook", "install", "--claude", "--json")
    settings = json.loads((cc.home / ".claude" / "settings.json").read_text())
    assert "session-start.sh" in json.dumps(settings["hooks"]["SessionStart"]), installed.stdout

    cc.standin.add([text("Noted.")])
    proc = cc.claude("-p", "what do you remember?")
    main = cc.standin.messages(main=True)
    assert len(main) == 1, "\n".join(cc.standin.summary())
    seen = main[0].text()
    assert "the deploy key lives in the vault, never in the repo" in seen, seen[:4000]
    assert "what do you remember?" in seen
    assert proc.stdout.strip() == "Noted."


def test_a_scripted_tool_use_runs_the_tool_and_the_next_request_holds_its_result(cc):
    (cc.project / "notes.txt").write_text("the answer is 42\n")
    cc.standin.add(
        [text("Reading it."), {"type": "tool_use", "name": "Read", "input": {"file_path": str(cc.project / "notes.txt")}}],
        [text("It says 42.")],
    )
    proc = cc.claude("-p", "read notes.txt", "--allowedTools", "Read")
    main = cc.standin.messages(main=True)
    assert len(main) == 2, "\n".join(cc.standin.summary())
    results = main[1].tool_results()
    assert len(results) == 1 and results[0]["tool_use_id"] == main[0].reply[1]["id"]
    assert "the answer is 42" in json.dumps(results[0])
    assert proc.stdout.strip() == "It says 42."
