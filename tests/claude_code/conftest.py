"""Fixtures for running real Claude Code offline: the installed client, the stand-in, a temporary HOME.

``claude_code`` installs ``@anthropic-ai/claude-code`` from npm once (see
client.py) and skips, saying why, where that cannot be done; with
``RETAINED_TEST_REQUIRE_CLAUDE_CODE=1`` (CI sets it) it fails instead, so CI
never passes by skipping. ``standin`` is a fresh loopback Messages API per
test (standin.py). ``cc`` puts them together with a temporary HOME (the store
is that HOME's ``~/.retained``, the default) and a project directory::

    def test_something(cc):
        cc.standin.add([text("hi")])
        proc = cc.claude("-p", "hello")
        assert "hello" in cc.standin.messages(main=True)[0].text()
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.claude_code.client import ClaudeCode, Unavailable, install
from tests.claude_code.standin import StandIn

VENV_BIN = Path(sys.executable).parent  # the test venv's retained


@pytest.fixture(scope="session")
def claude_code() -> ClaudeCode:
    try:
        return install()
    except Unavailable as exc:
        if os.environ.get("RETAINED_TEST_REQUIRE_CLAUDE_CODE"):
            pytest.fail(f"Claude Code is required here (RETAINED_TEST_REQUIRE_CLAUDE_CODE is set) but unavailable: {exc}")
        pytest.skip(f"real Claude Code is not available: {exc}")


@pytest.fixture
def standin() -> Iterator[StandIn]:
    with StandIn() as server:
        yield server


@dataclass
class CC:
    """One test's Claude Code world: the client, the stand-in, a HOME, a project directory, the store."""

    code: ClaudeCode
    standin: StandIn
    home: Path
    project: Path
    env: dict[str, str]  # added to every claude and retained command run here

    @property
    def store(self) -> Path:
        return Path(self.env["RETAINED_DIR"]) if "RETAINED_DIR" in self.env else self.home / ".retained"

    def claude(self, *args: str, input: str | None = None, env: dict[str, str] | None = None,
               check: bool = True) -> subprocess.CompletedProcess[str]:
        """``claude ARGS`` in the project directory; with ``check`` a non-zero exit fails the test, showing what the stand-in saw."""
        proc = self.code.run(*args, home=self.home, base_url=self.standin.url, cwd=self.project,
                             env=self.env | (env or {}), input=input)
        if check and proc.returncode != 0:
            pytest.fail(f"claude {' '.join(args)} exited {proc.returncode}\nstdout: {proc.stdout[-2000:]}\n"
                        f"stderr: {proc.stderr[-2000:]}\nstand-in saw:\n" + "\n".join(self.standin.summary()))
        return proc

    def retained(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The test venv's ``retained ARGS`` with this HOME (so ``hook install`` writes this HOME's settings)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_")}
        env["RETAINED_ANCHOR_DIR"] = os.environ["RETAINED_ANCHOR_DIR"]
        if "RETAINED_EMBED_LOCAL" in os.environ:  # the test's choice about the embedded model (tests/conftest.py)
            env["RETAINED_EMBED_LOCAL"] = os.environ["RETAINED_EMBED_LOCAL"]
        env["HOME"] = str(self.home)
        env.update(self.env)
        proc = subprocess.run([str(VENV_BIN / "retained"), *args], cwd=self.project, env=env, input=input,
                              capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            pytest.fail(f"retained {' '.join(args)} exited {proc.returncode}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}")
        return proc


@pytest.fixture
def cc(claude_code: ClaudeCode, standin: StandIn, tmp_path: Path) -> CC:
    home = tmp_path / "home"
    project = tmp_path / "project"
    home.mkdir(mode=0o700)
    project.mkdir(mode=0o700)
    return CC(code=claude_code, standin=standin, home=home, project=project, env={})
