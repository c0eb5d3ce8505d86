"""Everything the docs promise works from a wheel, without a checkout.

The wheel is built from a copy of the sources, installed into a fresh
virtualenv in a temporary directory, and run from there with no path to this
repository: the conformance harness against retained, ``retained hook install
--claude --project``, and every MCP client snippet in README.md and
docs/mcp.md, each started from a shell whose PATH is only the install's bin.
Builds and installs once per run (about a minute); marked ``wheel``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest

from .conftest import TOOL_NAMES, WAIT_S

pytestmark = pytest.mark.wheel

REPO = Path(__file__).resolve().parents[2]
SNIPPET_FILES = ("README.md", "docs/mcp.md")
CLIENTS = ("Claude Code", "Claude Desktop", "Cursor", "VS Code", "Codex CLI", "Gemini CLI")
INSTALL_WAIT_S = 600  # a fresh virtualenv and the dependencies from the package index


# -- the snippets -------------------------------------------------------------


def _blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def _stdio_servers(config: dict[str, Any]) -> list[tuple[list[str], dict[str, str]]]:
    """(command and args, env) of each stdio server a client config file defines."""
    found = []
    for key in ("mcpServers", "servers", "mcp_servers"):
        for server in (config.get(key) or {}).values():
            if isinstance(server, dict) and "command" in server:
                found.append(([server["command"], *server.get("args", [])], dict(server.get("env", {}))))
    return found


def _command_line(line: str) -> list[str] | None:
    """The server command of a `claude|codex|gemini mcp add` line for a stdio server, else None."""
    words = shlex.split(line.split("#")[0])
    if words[:3] not in (["claude", "mcp", "add"], ["codex", "mcp", "add"], ["gemini", "mcp", "add"]):
        return None
    if "--transport" in words and words[words.index("--transport") + 1] != "stdio":
        return None
    if "--" in words:
        return words[words.index("--") + 1 :]
    rest, i = [], 3
    while i < len(words):  # gemini: options, then NAME COMMAND [ARGS...]
        if words[i] in ("-s", "--scope", "-e", "--env", "-t", "--transport"):
            i += 2
            continue
        rest.append(words[i])
        i += 1
    return rest[1:]


def snippets() -> list[tuple[str, list[str], dict[str, str]]]:
    """Every stdio server the docs tell a user to configure: (where, command and args, env)."""
    found = []
    for name in SNIPPET_FILES:
        for n, (lang, body) in enumerate(_blocks((REPO / name).read_text(encoding="utf-8"))):
            where = f"{name} block {n + 1} ({lang})"
            if lang == "json" and ("mcpServers" in body or '"servers"' in body):
                found += [(where, cmd, env) for cmd, env in _stdio_servers(json.loads(body))]
            elif lang == "toml" and "mcp_servers" in body:
                found += [(where, cmd, env) for cmd, env in _stdio_servers(tomllib.loads(body))]
            elif lang == "sh":
                for line in body.splitlines():
                    cmd = _command_line(line) if line.strip() else None
                    if cmd:
                        found.append((f"{where}: {line.strip()}", cmd, {}))
    return found


def test_the_docs_configure_every_client_and_every_snippet_is_collected() -> None:
    """Each client has its set-up in README.md and docs/mcp.md, and the snippets below are really found."""
    for name in SNIPPET_FILES:
        text = (REPO / name).read_text(encoding="utf-8")
        for client in CLIENTS:
            assert client in text, f"{name} does not say how to connect {client}"
    found = snippets()
    kinds = {(w.split(" block ")[0], w.split("(")[1].split(")")[0]) for w, _, _ in found}
    for name in SNIPPET_FILES:
        assert {(name, "json"), (name, "toml"), (name, "sh")} <= kinds, (name, kinds)
    assert any("claude mcp add" in w for w, _, _ in found) and any("codex mcp add" in w for w, _, _ in found)
    assert any("gemini mcp add" in w for w, _, _ in found)
    assert all(cmd for _, cmd, _ in found)


# -- the wheel ----------------------------------------------------------------


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that points at the checkout or a store."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RETAINED_", "PYTHON", "VIRTUAL_ENV", "PIP_REQUIRE"))
    }
    env.update(extra)
    return env


def _run(args: list[str], cwd: Path, timeout: float = WAIT_S * 4, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=_clean_env(**env), capture_output=True, text=True, timeout=timeout, check=False)
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A wheel built from a copy of the sources, installed into a fresh virtualenv outside the repository."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    for name in ("retained", "harness", "hooks"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = root / "dist"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)], root, INSTALL_WAIT_S)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("retained-*.whl")
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], root, INSTALL_WAIT_S)
    assert made.returncode == 0, made.stderr[-3000:]
    shutil.rmtree(src)  # nothing of the sources is left beside the install
    pip = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], root, INSTALL_WAIT_S)
    assert pip.returncode == 0, pip.stderr[-3000:]
    home = root / "home"
    home.mkdir()
    work = root / "work"
    work.mkdir()
    return {"root": root, "venv": venv, "bin": venv / "bin", "home": home, "work": work, "wheel": wheel}


def test_the_wheel_holds_every_module_of_the_package_the_harness_and_the_hook(installed: dict[str, Path]) -> None:
    """A subpackage added without its line in pyproject.toml would be missing from every install."""
    import zipfile

    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    want = {f"retained/{p.relative_to(REPO / 'retained')}" for p in (REPO / "retained").rglob("*.py")}
    want |= {f"retained/harness/{p.relative_to(REPO / 'harness')}" for p in (REPO / "harness").rglob("*.py")}
    want |= {"retained/hooks/session-start.sh", "retained/hooks/__init__.py", "retained/py.typed"}
    assert not {w for w in want if "__pycache__" not in w} - names


def test_the_wheel_runs_without_a_checkout(installed: dict[str, Path]) -> None:
    """retained, its harness and its hook come from site-packages, not from this repository."""
    python = installed["bin"] / "python"
    code = (
        "import json, retained, retained.harness, retained.hooks, retained.cli.hook_install as h;"
        "print(json.dumps([retained.__file__, retained.harness.__file__, str(h.hook_path())]))"
    )
    proc = _run([str(python), "-c", code], installed["work"], HOME=str(installed["home"]))
    assert proc.returncode == 0, proc.stderr
    paths = [Path(p) for p in json.loads(proc.stdout)]
    site = installed["venv"] / "lib"
    for path in paths:
        assert site in path.parents and REPO not in path.parents, path
    assert paths[2].name == "session-start.sh" and os.access(paths[2], os.X_OK)
    assert _run([str(python), "-c", "import harness"], installed["work"]).returncode != 0, "a top-level 'harness' was installed"
    for script in ("retained", "retained-mcp", "retained-harness"):
        assert (installed["bin"] / script).is_file(), script


def test_the_conformance_harness_from_the_wheel_passes_against_retained(installed: dict[str, Path]) -> None:
    proc = _run([str(installed["bin"] / "retained-harness"), "--adapter=retained", "--json"], installed["work"],
                HOME=str(installed["home"]), PATH=f"{installed['bin']}{os.pathsep}/usr/bin:/bin")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["counts"]["FAIL"] == 0 and report["counts"]["PASS"] >= 11, report["counts"]
    assert str(report["server_info"]).startswith("retained "), report["server_info"]
    assert str(installed["venv"]) in str(report["command"]), report["command"]  # the install's python -m retained


def test_hook_install_from_the_wheel_sets_up_claude_code_and_the_hook_prints_the_brief(installed: dict[str, Path]) -> None:
    project = installed["root"] / "project"
    project.mkdir()
    store = installed["root"] / "store"
    retained = installed["bin"] / "retained"
    env = {"HOME": str(installed["home"]), "PATH": "/usr/bin:/bin"}
    wrote = _run([str(retained), "write", "the deploy target is staging", "--dir", str(store)], installed["work"], **env)
    assert wrote.returncode == 0, wrote.stderr
    first = _run([str(retained), "hook", "install", "--claude", "--project", str(project), "--dir", str(store), "--json"],
                 installed["work"], **env)
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    settings_path = project / ".claude" / "settings.json"
    assert result["action"] == "added" and result["written"] and Path(result["path"]) == settings_path
    settings = json.loads(settings_path.read_text())
    (group,) = settings["hooks"]["SessionStart"]
    (hook,) = group["hooks"]
    command = hook["command"]
    assert str(installed["venv"]) in command and "session-start.sh" in command and str(REPO) not in command
    assert f"RETAINED_BIN={retained}" in command and f"RETAINED_DIR={store}" in command
    again = _run([str(retained), "hook", "install", "--claude", "--project", str(project), "--dir", str(store), "--json"],
                 installed["work"], **env)
    assert again.returncode == 0 and json.loads(again.stdout)["action"] == "unchanged"
    assert json.loads(settings_path.read_text()) == settings
    # The command as Claude Code runs it: a shell, the hook's JSON on stdin, a PATH without this install.
    ran = subprocess.run(["/bin/sh", "-c", command], input='{"source":"startup"}', capture_output=True, text=True,
                         cwd=project, env={"PATH": "/usr/bin:/bin", "HOME": str(installed["home"])}, timeout=WAIT_S,
                         check=False)
    assert ran.returncode == 0, ran.stderr
    context = json.loads(ran.stdout)["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("Memory brief from retained") and "the deploy target is staging" in context


def test_every_client_snippet_starts_the_server_with_only_the_install_bin_on_path(installed: dict[str, Path]) -> None:
    """Each snippet's command, from /bin/sh with PATH = the install's bin alone, serves exactly the six tools."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    found = snippets()
    assert len(found) >= 9, found
    failures: list[str] = []

    async def one(n: int, where: str, command: list[str], env: dict[str, str], limiter: anyio.CapacityLimiter) -> None:
        home = installed["root"] / f"home-snippet-{n}"
        home.mkdir()
        params = StdioServerParameters(
            command="/bin/sh",
            args=["-c", "exec " + shlex.join(command)],
            env={**env, "PATH": str(installed["bin"]), "HOME": str(home)},
            cwd=str(installed["work"]),
        )
        async with limiter:
            try:
                with anyio.fail_after(WAIT_S * 2):
                    async with Client(params) as client:
                        names = {t.name for t in (await client.list_tools()).tools}
            except Exception as exc:  # noqa: BLE001 - collected and reported with the snippet that failed
                failures.append(f"{where}: {shlex.join(command)} did not start: {type(exc).__name__}: {exc}")
                return
        if names != TOOL_NAMES:
            failures.append(f"{where}: {shlex.join(command)} lists {sorted(names)}")

    async def main() -> None:
        limiter = anyio.CapacityLimiter(3)
        async with anyio.create_task_group() as tg:
            for n, (where, command, env) in enumerate(found):
                tg.start_soon(one, n, where, command, env, limiter)

    anyio.run(main)
    assert not failures, "\n".join(failures)
