"""The Claude Code plugin's files and its launcher (plugin/scripts/retained-launch), run as real subprocesses.

Each test builds its own PATH (a directory of symlinks) so that "no retained"
and "no Python" are real conditions; the first-run virtualenv is made for
real by python3 -m venv and pip, from a small wheel built here (offline).
The real-client tests are in tests/claude_code/test_plugin.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from retained.version import __version__

REPO = Path(__file__).resolve().parent.parent.parent
PLUGIN = REPO / "plugin"
LAUNCH = PLUGIN / "scripts" / "retained-launch"
TOOLS = ("sh", "dirname", "tr", "find", "mkdir", "rm", "sleep", "head", "cut", "sed", "timeout", "setsid", "nohup", "cat")
WAIT_S = 300  # the first-run install (a venv and pip) on a loaded machine
CAPTURE_EVENTS = ("UserPromptSubmit", "Stop", "SubagentStop", "PostCompact", "SessionEnd")


def _bin(tmp_path: Path, **scripts: str) -> Path:
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for tool in TOOLS:
        found = shutil.which(tool)
        if found is not None:
            (d / tool).symlink_to(found)
    for name, body in scripts.items():
        (d / name).write_text(body)
        (d / name).chmod(0o755)
    return d


def _run(tmp_path: Path, *args: str, path: Path, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": str(path), "HOME": str(tmp_path / "home"), "RETAINED_PLUGIN_VENV": str(tmp_path / "share" / "plugin-venv")}
    full.update(env)
    return subprocess.run(["/bin/sh", str(LAUNCH), *args], env=full, input=stdin, capture_output=True, text=True, timeout=WAIT_S)


def _context(stdout: str) -> str:
    lines = stdout.strip().splitlines()
    assert len(lines) == 1, stdout
    return json.loads(lines[0])["hookSpecificOutput"]["additionalContext"]


def _recorder(log: Path) -> str:
    """A stand-in retained that appends its arguments (and stdin) to LOG."""
    return f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\ncat >> {log}\n'


# -- the plugin's files --------------------------------------------------------------


def test_the_plugin_the_launcher_and_the_package_carry_one_version():
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    launcher = re.search(r"^VERSION=(\S+)$", LAUNCH.read_text(), re.M)
    assert launcher is not None
    assert manifest["version"] == launcher.group(1) == __version__


def test_the_marketplace_lists_the_plugin_directory():
    market = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
    entries = {p["name"]: p["source"] for p in market["plugins"]}
    assert entries == {"retained": "./plugin"}
    assert (REPO / entries["retained"] / ".claude-plugin" / "plugin.json").is_file()


def test_every_hook_and_the_server_go_through_the_launcher_and_none_names_a_store():
    hooks = json.loads((PLUGIN / "hooks" / "hooks.json").read_text())["hooks"]
    assert set(hooks) == {"SessionStart", *CAPTURE_EVENTS}
    for event, groups in hooks.items():
        [entry] = [h for g in groups for h in g["hooks"]]
        assert entry["command"] == f'sh "${{CLAUDE_PLUGIN_ROOT}}/scripts/retained-launch" --hook {event}'
        assert 0 < entry["timeout"] <= 15
    server = json.loads((PLUGIN / ".mcp.json").read_text())["mcpServers"]["retained"]
    assert server["args"] == ["${CLAUDE_PLUGIN_ROOT}/scripts/retained-launch", "serve"]
    # Claude Code waits for it before the first model request, and keeps its tools out of tool search.
    assert server["alwaysLoad"] is True
    for path in PLUGIN.rglob("*"):
        if path.is_file():
            assert "RETAINED_DIR=" not in path.read_text(), f"{path}: the store is the user's default, never set by the plugin"


def test_the_plugin_captures_the_events_retained_hook_install_does_with_the_same_timeouts():
    from retained.cli import hook_install

    events = hook_install.CAPTURE_EVENTS
    hooks = json.loads((PLUGIN / "hooks" / "hooks.json").read_text())["hooks"]
    plugin = {event: groups[0]["hooks"][0]["timeout"] for event, groups in hooks.items() if event != "SessionStart"}
    assert plugin == dict(events)
    assert hooks["SessionStart"][0]["hooks"][0]["timeout"] == hook_install.HOOK_TIMEOUT_S


def test_the_plugins_session_start_script_is_the_packages_hook():
    assert (PLUGIN / "scripts" / "session-start.sh").resolve() == (REPO / "hooks" / "session-start.sh").resolve()


# -- which retained ------------------------------------------------------------------


def test_retained_bin_comes_first_then_retained_on_path(tmp_path):
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    (tmp_path / "chosen").write_text(_recorder(first))
    (tmp_path / "chosen").chmod(0o755)
    path = _bin(tmp_path, retained=_recorder(second))
    assert _run(tmp_path, "serve", "--flag", path=path, RETAINED_BIN=str(tmp_path / "chosen")).returncode == 0
    assert first.read_text().splitlines()[0] == "serve --flag" and not second.exists()
    assert _run(tmp_path, "serve", path=path).returncode == 0
    assert second.read_text().splitlines()[0] == "serve"


def test_session_start_runs_the_packages_hook_with_the_retained_found(tmp_path):
    log = tmp_path / "calls.log"
    path = _bin(tmp_path, retained=_recorder(log))
    proc = _run(tmp_path, "--hook", "SessionStart", path=path, stdin='{"source": "compact"}')
    assert proc.returncode == 0
    # session-start.sh asked for the brief, with its compact budget, in Claude Code's format.
    assert log.read_text().splitlines()[0] == "brief --budget 600 --format claude"


def test_a_capture_event_hands_the_hosts_json_to_retained_capture_and_exits_0_even_when_it_fails(tmp_path):
    log = tmp_path / "calls.log"
    path = _bin(tmp_path, retained=_recorder(log) + "exit 3\n")
    event = '{"hook_event_name": "Stop", "last_assistant_message": "done"}'
    proc = _run(tmp_path, "--hook", "Stop", path=path, stdin=event)
    assert proc.returncode == 0
    assert log.read_text().splitlines() == ["capture", event]


def test_capture_turned_off_runs_nothing_and_the_brief_stays(tmp_path):
    log = tmp_path / "calls.log"
    path = _bin(tmp_path, retained=_recorder(log))
    for value in ("off", "0", "false"):
        for event in CAPTURE_EVENTS:
            assert _run(tmp_path, "--hook", event, path=path, RETAINED_PLUGIN_CAPTURE=value).returncode == 0
    assert not log.exists()
    assert _run(tmp_path, "--hook", "SessionStart", path=path, RETAINED_PLUGIN_CAPTURE="off").returncode == 0
    assert log.read_text().startswith("brief ")


# -- nothing to run --------------------------------------------------------------------


def test_without_retained_or_python_a_hook_says_so_in_one_line_and_exits_0(tmp_path):
    path = _bin(tmp_path)  # no retained, no python3
    proc = _run(tmp_path, "--hook", "SessionStart", path=path)
    assert proc.returncode == 0
    assert _context(proc.stdout).startswith("retained memory: not available (no retained command and no Python 3.11 or later on PATH")
    proc = _run(tmp_path, "--hook", "UserPromptSubmit", path=path, stdin='{"prompt": "hi"}')
    assert (proc.returncode, proc.stdout) == (0, "")
    assert "not available" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = _run(tmp_path, "serve", path=path)
    assert proc.returncode == 1 and "not available" in proc.stderr
    assert not (tmp_path / "share").exists(), "nothing is made when there is nothing to make it with"


def test_a_retained_bin_that_is_not_executable_is_named_and_the_hook_exits_0(tmp_path):
    proc = _run(tmp_path, "--hook", "SessionStart", path=_bin(tmp_path), RETAINED_BIN=str(tmp_path / "nowhere"))
    assert proc.returncode == 0
    assert f"RETAINED_BIN names {tmp_path / 'nowhere'}" in _context(proc.stdout)


def test_an_old_python_does_not_count(tmp_path):
    old = "#!/bin/sh\nexit 1\n"  # answers the version check as Python 3.10 would: not >= 3.11
    path = _bin(tmp_path, python3=old)
    proc = _run(tmp_path, "--hook", "SessionStart", path=path)
    assert proc.returncode == 0 and "no Python 3.11 or later" in _context(proc.stdout)


# -- the first-run virtualenv ------------------------------------------------------------


def _fake_wheel(tmp_path: Path) -> Path:
    """A wheel whose console script ``retained`` prints its arguments: pip installs it offline."""
    files = {
        "fake_retained.py": 'import sys\n\ndef main():\n    print("fake retained", " ".join(sys.argv[1:]))\n',
        "fake_retained-0.1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: fake-retained\nVersion: 0.1.0\n",
        "fake_retained-0.1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "fake_retained-0.1.0.dist-info/entry_points.txt": "[console_scripts]\nretained = fake_retained:main\n",
    }
    record = []
    for name, body in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(body.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(body.encode())}")
    record.append("fake_retained-0.1.0.dist-info/RECORD,,")
    files["fake_retained-0.1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
    wheel = tmp_path / "fake_retained-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, body in files.items():
            z.writestr(name, body)
    return wheel


def test_with_only_python_the_first_run_makes_a_virtualenv_outside_the_plugin_and_then_uses_it(tmp_path):
    python = shutil.which("python3")
    if python is None:
        pytest.skip("python3 is not on PATH here")
    base = Path(sys.base_prefix) / "bin" / "python3"
    python = str(base) if base.exists() else python
    path = _bin(tmp_path)
    (path / "python3").symlink_to(python)
    env = {"RETAINED_PLUGIN_SPEC": f"--no-index {_fake_wheel(tmp_path)}", "RETAINED_PLUGIN_INSTALL_WAIT": str(WAIT_S - 30),
           "PIP_NO_INPUT": "1", "PIP_CONFIG_FILE": os.devnull}
    venv = tmp_path / "share" / "plugin-venv"

    # A hook does not wait: it starts the install and says so.
    proc = _run(tmp_path, "--hook", "SessionStart", path=path, **env)
    assert proc.returncode == 0
    assert _context(proc.stdout).startswith(f"retained memory: installing retained into {venv} (first run")
    # The server waits for it (bounded), then runs the installed retained.
    proc = _run(tmp_path, "serve", path=path, **env)
    assert proc.returncode == 0, proc.stderr + (tmp_path / "share" / "plugin-venv.log").read_text()
    assert proc.stdout.strip() == "fake retained serve"
    assert (venv / ".retained-ready").is_file() and not (tmp_path / "share" / "plugin-venv.lock").exists()
    # Later hooks use it at once.
    proc = _run(tmp_path, "--hook", "SessionStart", path=path, **env)
    assert proc.stdout.strip() == "fake retained brief --budget 1500 --format claude"


def test_a_failed_first_run_install_is_said_and_not_retried_at_every_event(tmp_path):
    python = Path(sys.base_prefix) / "bin" / "python3"
    if not python.exists():
        pytest.skip(f"no base interpreter at {python}")
    path = _bin(tmp_path)
    (path / "python3").symlink_to(python)
    env = {"RETAINED_PLUGIN_SPEC": f"--no-index {tmp_path / 'missing.whl'}", "PIP_NO_INPUT": "1", "PIP_CONFIG_FILE": os.devnull}
    share = tmp_path / "share"
    proc = _run(tmp_path, "serve", path=path, **env)  # waits for the install, which fails
    assert proc.returncode == 1 and "not installed yet" in proc.stderr, proc.stderr
    assert (share / "plugin-venv.failed").is_file() and not (share / "plugin-venv" / ".retained-ready").exists()
    log = (share / "plugin-venv.log").read_text()
    assert "missing.whl" in log, log
    proc = _run(tmp_path, "--hook", "SessionStart", path=path, **env)
    assert proc.returncode == 0
    assert _context(proc.stdout).startswith(f"retained memory: installing retained into {share / 'plugin-venv'} failed (see ")
    assert (share / "plugin-venv.log").read_text() == log, "no second install was started"
    (share / "plugin-venv.failed").unlink()
    proc = _run(tmp_path, "--hook", "SessionStart", path=path, **env)
    assert _context(proc.stdout).startswith(f"retained memory: installing retained into {share / 'plugin-venv'} (first run")
    assert _run(tmp_path, "serve", path=path, **env).returncode == 1  # waits for that install to end (and fail again)
    assert (share / "plugin-venv.failed").is_file()
