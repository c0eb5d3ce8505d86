"""hooks/session-start.sh run as a real subprocess: it prints the brief or one line, and exits 0.

Each test builds its own PATH (a directory of symlinks) so that "retained is
not installed", "no timeout(1)" and "no python" are real conditions. Every
wait is bounded by the subprocess timeout; nothing asserts on wall-clock time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from retained import Store

REPO = Path(__file__).resolve().parent.parent.parent
HOOK = REPO / "hooks" / "session-start.sh"
SETTINGS = REPO / "hooks" / "claude-code-settings.json"
VENV_BIN = Path(sys.executable).parent
TOOLS = ("head", "cut", "tr", "sed", "sleep")
WAIT_S = 60


def _bin(tmp_path: Path, *, timeout: bool = True, retained: bool = False, python: str | None = None,
         extra: dict[str, str] | None = None) -> Path:
    """A PATH directory with only the tools named here."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for tool in (*TOOLS, *(("timeout",) if timeout else ())):
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"{tool} is not installed here")
        (d / tool).symlink_to(found)
    if retained:
        (d / "retained").symlink_to(VENV_BIN / "retained")
    if python is not None:
        (d / "python3").symlink_to(python)
    for name, body in (extra or {}).items():
        (d / name).write_text(body)
        (d / name).chmod(0o755)
    return d


def _env(path: str, store_dir: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RETAINED_", "PYTHON"))}
    env["RETAINED_ANCHOR_DIR"] = os.environ["RETAINED_ANCHOR_DIR"]  # the test's own (tests/conftest.py)
    env["PATH"] = path
    if store_dir is not None:
        env["RETAINED_DIR"] = str(store_dir)
    env.update(extra)
    return env


def _run(env: dict[str, str], *args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/sh", str(HOOK), *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=WAIT_S,
        check=False,
    )


@pytest.fixture
def full_store(tmp_path: Path) -> Path:
    d = tmp_path / "store"
    with Store(d) as s:
        s.checkpoint("release 0.1", summary="the log and the index are done")
        # No scope, as memory_write writes them: the hook's brief reads them in whatever project it runs.
        s.write_batch([{"text": f"note {i}: " + "detail " * 40} for i in range(60)])
    return d


def test_hook_prints_the_brief_with_retained_on_path(tmp_path: Path, full_store: Path) -> None:
    env = _env(str(_bin(tmp_path, retained=True)), full_store)
    proc = _run(env, stdin='{"session_id":"s1","hook_event_name":"SessionStart","source":"startup"}')
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Memory brief from retained")
    assert lines[1].startswith("#1 checkpoint")
    assert "past the 1500-token budget" in lines[-1]
    assert len(proc.stdout) < 10_000


@pytest.mark.parametrize(("source", "budget"), [("compact", 600), ("resume", 1000), ("clear", 1500), ("fork", 1500)])
def test_hook_adapts_the_budget_to_the_session_source(tmp_path: Path, full_store: Path, source: str, budget: int) -> None:
    env = _env(str(_bin(tmp_path, retained=True)), full_store)
    proc = _run(env, stdin=json.dumps({"hook_event_name": "SessionStart", "source": source}, indent=2))
    assert proc.returncode == 0, proc.stderr
    assert f"past the {budget}-token budget" in proc.stdout.splitlines()[-1]


def test_hook_claude_format_is_the_session_start_json(tmp_path: Path, full_store: Path) -> None:
    env = _env(str(_bin(tmp_path, retained=True)), full_store)
    proc = _run(env, "claude", stdin='{"source":"startup"}')
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1 and len(proc.stdout) < 10_000
    data = json.loads(proc.stdout)
    assert data["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert data["hookSpecificOutput"]["additionalContext"].startswith("Memory brief from retained")


def test_hook_with_a_bogus_retained_dir_prints_one_line_and_exits_0(tmp_path: Path) -> None:
    bogus = tmp_path / "no" / "such" / "store"
    env = _env(str(_bin(tmp_path, retained=True)), bogus)
    for fmt in ("text", "claude"):
        proc = _run(env, fmt)
        assert proc.returncode == 0, proc.stderr
        assert len(proc.stdout.splitlines()) == 1
        text = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"] if fmt == "claude" else proc.stdout
        assert f"no store at {bogus}" in text
    assert not bogus.exists()


def test_hook_on_a_damaged_store_prints_one_line_and_exits_0(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    (damaged / "log.jsonl").mkdir(parents=True)
    proc = _run(_env(str(_bin(tmp_path, retained=True)), damaged))
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1
    assert "could not be read" in proc.stdout


def test_hook_on_an_empty_store_prints_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _run(_env(str(_bin(tmp_path, retained=True)), empty))
    assert proc.returncode == 0 and proc.stdout == f"retained memory: no records yet in {empty}.\n"


def test_hook_without_retained_and_with_a_python_that_cannot_import_it(tmp_path: Path, full_store: Path) -> None:
    system_python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if Path(p).exists()), None)
    if system_python is None:
        pytest.skip("no python3 outside the test environment")
    check = subprocess.run([system_python, "-c", "import retained"], capture_output=True, env=_env("/usr/bin:/bin", None),
                           cwd=tmp_path, timeout=WAIT_S, check=False)
    if check.returncode == 0:
        pytest.skip(f"{system_python} can import retained here")
    env = _env(str(_bin(tmp_path, python=system_python)), full_store)
    for fmt in ("text", "claude"):
        proc = _run(env, fmt, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert len(proc.stdout.splitlines()) == 1
        line = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"] if fmt == "claude" else proc.stdout
        assert line.startswith("retained memory: not available (python3 exited with status 1)")


def test_hook_without_retained_and_without_python(tmp_path: Path, full_store: Path) -> None:
    env = _env(str(_bin(tmp_path)), full_store)
    proc = _run(env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "retained memory: not available (no retained command and no python3 on PATH); no brief.\n"


def test_hook_runs_python_m_retained_when_there_is_no_retained_command(tmp_path: Path, full_store: Path) -> None:
    env = _env(str(_bin(tmp_path)), full_store, RETAINED_PYTHON=sys.executable)
    proc = _run(env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Memory brief from retained")


def test_hook_runs_retained_bin_before_any_retained_on_path(tmp_path: Path, full_store: Path) -> None:
    """RETAINED_BIN (what `retained hook install` writes) names the install to run, whatever PATH holds."""
    broken = {"retained": "#!/bin/sh\nexit 3\n"}
    env = _env(str(_bin(tmp_path, extra=broken)), full_store, RETAINED_BIN=str(VENV_BIN / "retained"))
    proc = _run(env, "claude", stdin='{"source":"startup"}')
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"].startswith("Memory brief from retained")


def test_hook_with_a_retained_bin_that_is_not_executable_prints_one_line(tmp_path: Path, full_store: Path) -> None:
    missing = tmp_path / "gone" / "retained"
    env = _env(str(_bin(tmp_path, retained=True)), full_store, RETAINED_BIN=str(missing))
    proc = _run(env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"retained memory: not available (RETAINED_BIN names {missing}, which is not an executable file); no brief.\n"


def test_hook_works_without_a_timeout_command(tmp_path: Path, full_store: Path) -> None:
    env = _env(str(_bin(tmp_path, timeout=False, retained=True)), full_store)
    proc = _run(env, stdin='{"source":"compact"}')
    assert proc.returncode == 0, proc.stderr
    assert "past the 600-token budget" in proc.stdout.splitlines()[-1]


@pytest.mark.parametrize("with_timeout", [True, False])
def test_hook_stops_a_brief_that_hangs(tmp_path: Path, full_store: Path, with_timeout: bool) -> None:
    hang = {"retained": "#!/bin/sh\nexec sleep 30\n"}
    env = _env(str(_bin(tmp_path, timeout=with_timeout, extra=hang)), full_store, RETAINED_HOOK_TIMEOUT="1")
    proc = _run(env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "retained memory: the brief did not finish within 1 seconds; no brief.\n"


def test_hook_reports_a_failing_retained_in_one_line(tmp_path: Path, full_store: Path) -> None:
    broken = {"retained": "#!/bin/sh\necho 'Traceback (most recent call last):' >&2\necho partial\nexit 3\n"}
    env = _env(str(_bin(tmp_path, extra=broken)), full_store)
    proc = _run(env)
    assert proc.returncode == 0
    assert proc.stdout == "retained memory: not available (retained exited with status 3); no brief.\n"


def test_hook_does_not_wait_for_stdin_that_never_closes(tmp_path: Path, full_store: Path) -> None:
    env = _env(str(_bin(tmp_path, retained=True)), full_store)
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(["/bin/sh", str(HOOK)], stdin=r, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        os.close(r)
        out, _err = proc.communicate(timeout=WAIT_S)
    finally:
        os.close(w)
    assert proc.returncode == 0
    assert out.decode().startswith("Memory brief from retained")


def test_hook_ignores_garbage_on_stdin_and_a_bad_budget(tmp_path: Path, full_store: Path) -> None:
    env = _env(str(_bin(tmp_path, retained=True)), full_store, RETAINED_BRIEF_BUDGET="lots")
    proc = _run(env, "bogus-format", stdin='not json "source": "$(rm -rf /)"\x00\x01' * 100)
    assert proc.returncode == 0, proc.stderr
    assert "past the 1500-token budget" in proc.stdout.splitlines()[-1]


def test_hook_is_valid_posix_sh() -> None:
    proc = subprocess.run(["/bin/sh", "-n", str(HOOK)], capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert proc.returncode == 0, proc.stderr
    assert HOOK.read_text().startswith("#!/bin/sh\n")
    assert os.access(HOOK, os.X_OK)


def test_claude_code_settings_example_runs_the_hook() -> None:
    settings = json.loads(SETTINGS.read_text())
    (entry,) = settings["hooks"]["SessionStart"]
    (hook,) = entry["hooks"]
    assert hook["type"] == "command"
    assert "session-start.sh" in hook["command"] and hook["command"].endswith(" claude")
    assert hook["timeout"] >= 10


@pytest.mark.parametrize("with_timeout", [True, False])
def test_hook_runs_under_bash_in_posix_mode(tmp_path: Path, full_store: Path, with_timeout: bool) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed here")
    env = _env(str(_bin(tmp_path, timeout=with_timeout, retained=True)), full_store)
    proc = subprocess.run([bash, "--posix", str(HOOK), "claude"], input='{"source":"resume"}', capture_output=True,
                          text=True, env=env, timeout=WAIT_S, check=False)
    assert proc.returncode == 0, proc.stderr
    context = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "past the 1000-token budget" in context.splitlines()[-1]


def test_hook_with_stdin_or_stdout_closed_still_exits_0(tmp_path: Path, full_store: Path) -> None:
    env = _env(str(_bin(tmp_path, retained=True)), full_store)
    closed_stdin = subprocess.run(["/bin/sh", "-c", f'exec 0<&-; exec /bin/sh "{HOOK}"'], capture_output=True,
                                  text=True, env=env, timeout=WAIT_S, check=False)
    assert closed_stdin.returncode == 0, closed_stdin.stderr
    assert closed_stdin.stdout.startswith("Memory brief from retained")
    closed_stdout = subprocess.run(["/bin/sh", "-c", f'exec 1>&-; exec /bin/sh "{HOOK}"'], input="", capture_output=True,
                                   text=True, env=env, timeout=WAIT_S, check=False)
    assert closed_stdout.returncode == 0
