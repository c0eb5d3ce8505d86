"""`retained hook install --claude` with the capture hooks: one entry per event, left out on request, idempotent.

The installed capture command is then run through /bin/sh with a hook event
on stdin, as Claude Code runs it, and the turn is in the store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from retained.cli import hook_install

WAIT_S = 60
CAPTURE_EVENTS = ["UserPromptSubmit", "Stop", "SubagentStop", "PostCompact", "SessionEnd"]


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_")}
    env.update(HOME=str(home), RETAINED_ANCHOR_DIR="off")
    return subprocess.run([sys.executable, "-m", "retained", *args], capture_output=True, text=True, env=env, cwd=home,
                          timeout=WAIT_S, check=False)


def _capture_entries(settings: dict, event: str) -> list[dict]:
    return [h for g in settings["hooks"].get(event, []) for h in g["hooks"] if hook_install.is_retained_capture(h.get("command"))]


def test_install_adds_a_capture_hook_per_event_beside_session_start_and_a_second_run_changes_nothing(tmp_path: Path):
    home, store = tmp_path / "home", tmp_path / "store"
    home.mkdir()
    path = home / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]},
                                "model": "x"}), encoding="utf-8")
    proc = _cli(home, "hook", "install", "--claude", "--dir", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["events"] == {"SessionStart": "added", **dict.fromkeys(CAPTURE_EVENTS, "added")}
    assert result["backup"] is not None and Path(result["backup"]).read_text(encoding="utf-8").startswith('{"hooks"')
    settings = json.loads(path.read_text(encoding="utf-8"))
    assert settings["model"] == "x"
    assert settings["hooks"]["Stop"][0]["hooks"][0]["command"] == "notify-send done"  # the user's own hook is kept
    for event in CAPTURE_EVENTS:
        (entry,) = _capture_entries(settings, event)
        assert entry["timeout"] == hook_install.CAPTURE_EVENTS[event]
        assert entry["command"].endswith(f"{Path(sys.executable).parent / 'retained'} capture")
    assert _capture_entries(settings, "SessionEnd")[0]["timeout"] <= 2  # Claude Code gives SessionEnd 1.5 s
    again = _cli(home, "hook", "install", "--claude", "--dir", str(store), "--json")
    assert json.loads(again.stdout)["action"] == "unchanged"
    # As Claude Code runs it: a shell, the event on stdin.
    (stop,) = _capture_entries(settings, "UserPromptSubmit")
    event = {"hook_event_name": "UserPromptSubmit", "session_id": "s-1", "cwd": str(home), "prompt": "use port 8443",
             "prompt_id": "p-1", "transcript_path": str(home / "t.jsonl")}
    ran = subprocess.run(["/bin/sh", "-c", stop["command"]], input=json.dumps(event), capture_output=True, text=True,
                         cwd=home, env={"PATH": "/usr/bin:/bin", "HOME": str(home)}, timeout=WAIT_S, check=False)
    assert (ran.returncode, ran.stdout) == (0, "")
    assert b"use port 8443" in (store / "log.jsonl").read_bytes()


def test_skip_leaves_an_event_out_and_removes_an_earlier_install_of_it(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    assert _cli(home, "hook", "install", "--claude").returncode == 0
    proc = _cli(home, "hook", "install", "--claude", "--skip", "SubagentStop", "--skip", "PostCompact", "--json")
    result = json.loads(proc.stdout)
    assert (result["events"]["SubagentStop"], result["events"]["PostCompact"], result["events"]["Stop"]) == (
        "removed", "removed", "unchanged")
    settings = json.loads((home / ".claude" / "settings.json").read_text(encoding="utf-8"))
    assert "SubagentStop" not in settings["hooks"] and len(_capture_entries(settings, "Stop")) == 1
    none = json.loads(_cli(home, "hook", "install", "--claude", "--no-capture", "--json").stdout)
    assert none["events"]["SessionStart"] == "unchanged"
    settings = json.loads((home / ".claude" / "settings.json").read_text(encoding="utf-8"))
    assert set(settings["hooks"]) == {"SessionStart"}


def test_print_shows_the_capture_hooks_and_writes_nothing(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    shown = _cli(home, "hook", "install", "--claude", "--print")
    assert shown.returncode == 0 and not (home / ".claude").exists()
    assert '"UserPromptSubmit"' in shown.stdout and " capture" in shown.stdout
