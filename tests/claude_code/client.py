"""Real Claude Code for the tests: installed from npm once, run offline against the stand-in.

``install()`` puts ``@anthropic-ai/claude-code`` in a cache directory
(``RETAINED_TEST_CLAUDE_CODE_DIR``, default ``~/.cache/retained-tests/claude-code``),
one sub-directory per requested version (``RETAINED_TEST_CLAUDE_CODE_VERSION``,
default ``latest``), and reuses it on later runs without asking npm again. It
installs into a fresh directory and renames it into place, so two test runs
installing at once both end with one whole install.

``ClaudeCode.run()`` starts ``claude`` with a temporary HOME (so its settings,
plugins and transcripts are the test's), ``ANTHROPIC_BASE_URL`` pointing at the
stand-in, a dummy API key, and Claude Code's switches for no telemetry, no
auto-update, no error reports and no non-essential traffic. Nothing of the
caller's environment reaches it but PATH, the locale and what the test passes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "@anthropic-ai/claude-code"
INSTALL_TIMEOUT_S = 900
RUN_TIMEOUT_S = 240  # one claude session, hooks and MCP server start included, on a loaded machine
DUMMY_API_KEY = "sk-ant-api03-standin-dummy-key-not-a-secret"

# Claude Code's environment variables for a quiet, offline session.
OFFLINE_ENV = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
}
# RETAINED_EMBED_LOCAL: the test's choice about the embedded model (tests/conftest.py) reaches the servers and hooks.
PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "TMPDIR", "RETAINED_ANCHOR_DIR", "RETAINED_EMBED_LOCAL")


class Unavailable(Exception):
    """Claude Code cannot be installed or run here; the message says why."""


@dataclass(frozen=True)
class ClaudeCode:
    """One installed Claude Code: its ``claude`` command and the version it reports (``2.1.197``)."""

    bin: Path
    version: str

    def env(self, home: Path, base_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}
        env.update(OFFLINE_ENV)
        env.update({
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": DUMMY_API_KEY,
        })
        env.update(extra or {})
        return env

    def run(self, *args: str, home: Path, base_url: str, cwd: Path, env: dict[str, str] | None = None,
            input: str | None = None, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """``claude ARGS`` in ``cwd``, as described in the module's docstring; its output captured."""
        return subprocess.run([str(self.bin), *args], cwd=cwd, env=self.env(home, base_url, env), input=input,
                              capture_output=True, text=True, timeout=timeout)


def cache_root() -> Path:
    configured = os.environ.get("RETAINED_TEST_CLAUDE_CODE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "retained-tests" / "claude-code"


def _version_of(claude: Path) -> str:
    try:
        proc = subprocess.run([str(claude), "--version"], capture_output=True, text=True, timeout=120,
                              env={k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ} | OFFLINE_ENV)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{claude} --version did not run: {exc}") from exc
    found = re.match(r"\s*(\d+\.\d+\.\d+\S*)", proc.stdout)
    if proc.returncode != 0 or found is None:
        raise Unavailable(f"{claude} --version exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-500:]}")
    return found.group(1)


def install() -> ClaudeCode:
    """The cached Claude Code, installed from npm first when it is not there yet.

    Raises:
        Unavailable: node or npm is missing, npm could not install the package,
            or the installed ``claude`` does not report a version.
    """
    wanted = os.environ.get("RETAINED_TEST_CLAUDE_CODE_VERSION") or "latest"
    target = cache_root() / wanted
    claude = target / "node_modules" / ".bin" / "claude"
    if claude.exists():
        return ClaudeCode(claude, _version_of(claude))
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise Unavailable(f"{tool} is not on PATH, so {PACKAGE} cannot be installed (install Node.js 18 or later)")
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh = target.with_name(f".{target.name}.installing-{os.getpid()}")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir()
    spec = PACKAGE if wanted == "latest" else f"{PACKAGE}@{wanted}"
    try:
        proc = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(fresh), spec],
                              capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(fresh, ignore_errors=True)
        raise Unavailable(f"npm install {spec} did not finish: {exc}") from exc
    if proc.returncode != 0:
        shutil.rmtree(fresh, ignore_errors=True)
        raise Unavailable(f"npm install {spec} exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-800:]}")
    _version_of(fresh / "node_modules" / ".bin" / "claude")
    try:
        fresh.rename(target)
    except OSError:  # another run installed it first: keep theirs
        shutil.rmtree(fresh, ignore_errors=True)
    return ClaudeCode(claude, _version_of(claude))
