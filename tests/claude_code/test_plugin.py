"""The Claude Code plugin, installed and used by real Claude Code, offline.

The repository is added as a local marketplace and the plugin installed with
Claude Code's own commands (``claude plugin marketplace add``, ``claude plugin
install``) into a temporary HOME; then ``claude -p`` sessions run against the
stand-in. The plugin runs the test venv's retained (``RETAINED_BIN``, which
the plugin's launcher honours first); the store is that HOME's ``~/.retained``,
the default, which no plugin setting names.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.claude_code.conftest import CC, VENV_BIN
from tests.claude_code.standin import Request, find_tool, result_text, text, tool_use

REPO_MARKETPLACE = "retained"
PLUGIN = "retained@retained"
TOOL_PREFIX = "mcp__plugin_retained_retained__"
SEEDED = "the deploy key lives in the vault, never in the repository"
FACT = "the staging database is pg-staging-2 on port 5433"


def _install(cc: CC) -> None:
    cc.env["RETAINED_BIN"] = str(VENV_BIN / "retained")
    repo = str(Path(__file__).resolve().parents[2])
    added = cc.claude("plugin", "marketplace", "add", repo)
    assert f"marketplace: {REPO_MARKETPLACE}" in added.stdout, added.stdout
    installed = cc.claude("plugin", "install", PLUGIN)
    assert f"installed plugin: {PLUGIN}" in installed.stdout, installed.stdout
    # Claude Code copies the plugin into its cache: the hook script linked from
    # hooks/ must arrive there as the file itself.
    record = json.loads((cc.home / ".claude" / "plugins" / "installed_plugins.json").read_text())
    [entry] = record["plugins"][PLUGIN]
    copied = Path(entry["installPath"]) / "scripts" / "session-start.sh"
    assert not copied.is_symlink() and copied.read_bytes() == (Path(repo) / "hooks" / "session-start.sh").read_bytes()


def _store_records(cc: CC) -> list[dict]:
    listed = cc.retained("list", "--json", "--limit", "100")
    return [entry["record"] for entry in json.loads(listed.stdout)["records"]]


def _log_digest(cc: CC) -> str:
    logs = sorted(p for p in cc.store.rglob("*.jsonl") if p.is_file())
    assert logs, f"no log in {cc.store}"
    return hashlib.sha256(b"".join(p.read_bytes() for p in logs)).hexdigest()


def _echo_last_result(body: dict) -> list[dict]:
    """A scripted turn: say what the last tool returned."""
    return [text("tool said: " + result_text(Request("POST", "/v1/messages", {}, body).tool_results()[-1]))]


def test_the_plugin_brings_the_brief_the_tools_and_the_skill_and_writes_land_with_claude_codes_name(cc):
    # Filed under the project the session runs in (as capture files turns): the brief of that project shows it.
    cc.retained("write", SEEDED, "--scope", json.loads(cc.retained("scope", "--json").stdout)["scope"])
    _install(cc)

    # Session 1: the brief is in the first request; a scripted memory_write lands, and its proof goes back to the model.
    cc.standin.add(lambda body: [text("Saving that."), tool_use(find_tool(body, "memory_write"), {"text": FACT, "kind": "fact"})],
                   _echo_last_result)
    mark = cc.standin.mark()
    proc = cc.claude("-p", "remember where the staging database is", "--allowedTools", TOOL_PREFIX + "memory_write")
    main = cc.standin.messages(mark, main=True)
    saw = "\n".join(cc.standin.summary(mark))
    assert len(main) == 2 and not cc.standin.errors, saw + str(cc.standin.errors)
    first = main[0]
    assert SEEDED in first.text(), "the SessionStart hook's brief reaches the model request"
    assert {TOOL_PREFIX + n for n in ("memory_write", "memory_search", "memory_checkpoint", "memory_forget")} <= set(first.tool_names())
    assert "retained-memory" in first.text(), "the plugin's skill is offered to the model"

    records = _store_records(cc)
    written = [r for r in records if r["text"] == FACT]
    assert len(written) == 1, records
    record = written[0]
    assert record["client"] == {"name": "claude-code", "version": cc.code.version}
    assert record["kind"] == "fact"
    results = main[1].tool_results()
    assert len(results) == 1 and results[0]["tool_use_id"] == main[0].reply[1]["id"]
    proof = json.loads(result_text(results[0]))
    assert (proof["seq"], proof["hash"], proof["prev"]) == (record["seq"], record["hash"], record["prev"])
    assert proof["hash"] in proc.stdout

    # Session 2: memory_search from a scripted turn finds it, and the model receives it.
    cc.standin.add(lambda body: [tool_use(find_tool(body, "memory_search"), {"query": "staging database port"})], _echo_last_result)
    mark = cc.standin.mark()
    proc = cc.claude("-p", "where is the staging database?", "--allowedTools", TOOL_PREFIX + "memory_search")
    main = cc.standin.messages(mark, main=True)
    assert len(main) == 2, "\n".join(cc.standin.summary(mark))
    assert FACT in main[0].text(), "the new record is in the second session's brief too"
    found = result_text(main[1].tool_results()[0])
    hits = json.loads(found)["results"]
    # The best hit is the record written in session 1 (captured turns, when capture is on, rank below it).
    assert (hits[0]["seq"], hits[0]["record"]["hash"]) == (record["seq"], record["hash"]), found
    assert FACT in proc.stdout

    # Uninstalling the plugin leaves the store and every record; the next session has no brief.
    before = _log_digest(cc)
    count = len(_store_records(cc))
    removed = cc.claude("plugin", "uninstall", PLUGIN)
    assert "uninstalled" in removed.stdout.lower(), removed.stdout
    listed = cc.claude("plugin", "list", "--json")
    assert PLUGIN not in listed.stdout, listed.stdout
    assert _log_digest(cc) == before
    assert len(_store_records(cc)) == count
    cc.retained("verify")
    cc.standin.add([text("No memory here.")])
    mark = cc.standin.mark()
    cc.claude("-p", "anything remembered?")
    after = cc.standin.messages(mark, main=True)
    assert len(after) == 1 and SEEDED not in after[0].text() and not any(n.startswith(TOOL_PREFIX) for n in after[0].tool_names())


def test_the_plugins_capture_hooks_record_the_prompt_and_the_reply_once_each(cc):
    _install(cc)
    prompt = "the release train leaves on Thursdays at 16:00"
    reply = "Understood: Thursdays at 16:00."
    cc.standin.add([text(reply)])
    cc.claude("-p", prompt)
    texts = [r.get("text", "") for r in _store_records(cc)]
    assert sum(prompt in t for t in texts) == 1, texts
    assert sum(reply in t for t in texts) == 1, texts
    cc.retained("verify")


def test_the_plugins_hooks_hand_each_event_of_a_turn_to_retained_capture_once(cc, tmp_path):
    """Claude Code's real payloads reach ``retained capture`` through the plugin, one call per event.

    ``RETAINED_BIN`` is a wrapper: ``capture`` keeps its stdin in a file of
    its own (what capture would have read); every other command is the test
    venv's retained. So this holds whether or not capture exists yet.
    """
    events = tmp_path / "events"
    events.mkdir()
    wrapper = tmp_path / "retained-wrapper"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = capture ]; then cat > "$(mktemp {events}/event.XXXXXX)"; exit 0; fi\n'
                       f'exec {VENV_BIN / "retained"} "$@"\n')
    wrapper.chmod(0o755)
    _install(cc)
    cc.env["RETAINED_BIN"] = str(wrapper)
    cc.retained("write", SEEDED)
    prompt, reply = "the release train leaves on Thursdays at 16:00", "Understood: Thursdays at 16:00."
    cc.standin.add([text(reply)])
    proc = cc.claude("-p", prompt)
    assert proc.stdout.strip() == reply
    assert SEEDED in cc.standin.messages(main=True)[0].text(), "SessionStart went to the brief, not to capture"
    got = [json.loads(p.read_text()) for p in sorted(events.iterdir())]
    by_event: dict[str, list[dict]] = {}
    for event in got:
        by_event.setdefault(event["hook_event_name"], []).append(event)
    assert sorted(by_event) == ["SessionEnd", "Stop", "UserPromptSubmit"], got
    assert all(len(v) == 1 for v in by_event.values()), got
    assert by_event["UserPromptSubmit"][0]["prompt"] == prompt
    assert by_event["Stop"][0]["last_assistant_message"] == reply
    sessions = {e["session_id"] for e in got}
    assert len(sessions) == 1 and cc.standin.messages(main=True)[0].headers["x-claude-code-session-id"] in sessions


def test_claude_codes_own_validator_passes_the_marketplace_and_the_plugin_with_no_warning(cc):
    repo = Path(__file__).resolve().parents[2]
    for path in (repo, repo / "plugin"):
        proc = cc.claude("plugin", "validate", "--strict", str(path))
        assert "Validation passed" in proc.stdout and "warning" not in proc.stdout.lower(), proc.stdout
