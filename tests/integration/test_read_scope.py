"""The project is the scope when reading too (issue 26 point 3): ``retained search`` and ``retained brief`` run in a
project read its records and those with no scope; ``--scope`` and ``--all-scopes`` say otherwise.

Real ``retained`` processes in a temporary git repository (with a second worktree), a second repository and a
directory outside any repository, over one real store.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_capture import RETAINED, WAIT_S, _env, capture, prompt, repo  # noqa: F401 (fixture)


def run(store: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(RETAINED), *args], capture_output=True, env=_env(store, **env), cwd=cwd,
                          timeout=WAIT_S, check=False, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc


def texts(store: Path, cwd: Path, *args: str, **env: str) -> set[str]:
    """The texts ``retained search deploy`` finds run in ``cwd``."""
    reply = json.loads(run(store, cwd, "search", "deploy", "-k", "20", "--json", *args, **env).stdout)
    assert reply["returned"] == reply["total_matches"]
    return {r["record"]["text"] for r in reply["results"]}


def brief_texts(store: Path, cwd: Path, *args: str, **env: str) -> set[str]:
    reply = json.loads(run(store, cwd, "brief", "--json", *args, **env).stdout)
    assert reply["status"] == "ok"
    return {e["text"] for e in reply["included"] if "deploy" in e.get("text", "")}


@pytest.fixture
def places(tmp_path: Path, repo: Path) -> dict[str, Path]:  # noqa: F811 (the fixture imported above)
    """Project A (``repo``, worktree ``proj-wt``), project B (a second repository), a plain directory, one store,
    and a record of each (A's and B's captured there), plus one written with no scope."""
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=other, check=True, timeout=WAIT_S)
    plain = tmp_path / "plain"
    plain.mkdir()
    store = tmp_path / "store"
    for where, text in ((repo, "deploy from project A"), (other, "deploy from project B"),
                        (plain, "deploy from the plain directory")):
        assert capture(store, prompt("s-" + where.name, "p1", text, where), cwd=where).returncode == 0
    run(store, tmp_path, "write", "deploy note with no scope")
    return {"store": store, "a": repo, "a_worktree": tmp_path / "proj-wt", "b": other, "plain": plain}


A, B, PLAIN, NONE = ("deploy from project A", "deploy from project B", "deploy from the plain directory",
                     "deploy note with no scope")


def test_search_and_brief_in_a_project_read_its_records_and_the_unscoped_ones(places: dict[str, Path]) -> None:
    store = places["store"]
    for cwd in (places["a"], places["a_worktree"]):  # every worktree of one repository is one project
        assert texts(store, cwd) == {A, NONE}
        assert brief_texts(store, cwd) == {A, NONE}
    assert texts(store, places["b"]) == brief_texts(store, places["b"]) == {B, NONE}
    assert texts(store, places["plain"]) == brief_texts(store, places["plain"]) == {PLAIN, NONE}


def test_the_reply_and_the_text_say_which_scope_was_read(places: dict[str, Path]) -> None:
    store, a = places["store"], places["a"]
    scope = str(a.resolve())
    reply = json.loads(run(store, a, "search", "deploy", "--json").stdout)
    assert (reply["scope"], reply["and_unscoped"]) == (scope, True)
    text = run(store, a, "search", "deploy").stdout
    assert f'scope: this project\'s ("{scope}") and records with no scope; --all-scopes reads every scope' in text
    brief = json.loads(run(store, a, "brief", "--json").stdout)
    assert (brief["scope"], brief["and_unscoped"]) == (scope, True)
    # After where the project's last session stopped (capture's part) comes the brief's opening line.
    opening = next(line for line in run(store, a, "brief").stdout.splitlines() if line.startswith("Memory brief"))
    assert f'of project "{scope}" (and records with no scope)' in opening
    everything = json.loads(run(store, a, "search", "deploy", "--all-scopes", "--json").stdout)
    assert (everything["scope"], everything["and_unscoped"]) == (None, False)
    assert "scope:" not in run(store, a, "search", "deploy", "--all-scopes").stdout
    named = json.loads(run(store, a, "search", "deploy", "--scope", "x", "--json").stdout)
    assert (named["scope"], named["and_unscoped"]) == ("x", False)


def test_all_scopes_reads_everything_and_scope_reads_only_that_scope(places: dict[str, Path]) -> None:
    store, a = places["store"], places["a"]
    assert texts(store, a, "--all-scopes") == brief_texts(store, a, "--all-scopes") == {A, B, PLAIN, NONE}
    b_scope = str(places["b"].resolve())
    assert texts(store, a, "--scope", b_scope) == brief_texts(store, a, "--scope", b_scope) == {B}
    both = subprocess.run([str(RETAINED), "search", "deploy", "--scope", b_scope, "--all-scopes"], capture_output=True,
                          env=_env(store), cwd=a, timeout=WAIT_S, check=False, text=True)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_with_capture_off_every_scope_is_read_as_before(places: dict[str, Path]) -> None:
    store, a = places["store"], places["a"]
    assert json.loads(run(store, a, "scope", "--json").stdout)["reads"] == "project_and_unscoped"
    assert json.loads(run(store, a, "scope", "--json", RETAINED_CAPTURE="off").stdout)["reads"] == "every_scope"
    assert "search and brief read every scope" in run(store, a, "scope", RETAINED_CAPTURE="off").stdout
    assert texts(store, a, RETAINED_CAPTURE="off") == brief_texts(store, a, RETAINED_CAPTURE="off") == {A, B, PLAIN, NONE}
    assert json.loads(run(store, a, "search", "deploy", "--json", RETAINED_CAPTURE="off").stdout)["scope"] is None


def test_retained_scope_and_a_scope_file_name_the_project_read(places: dict[str, Path]) -> None:
    store, a = places["store"], places["a"]
    b_scope = str(places["b"].resolve())
    assert texts(store, a, RETAINED_SCOPE=b_scope) == brief_texts(store, a, RETAINED_SCOPE=b_scope) == {B, NONE}
    (places["plain"] / ".retained-scope").write_text(str(a.resolve()) + "\n", encoding="utf-8")
    assert texts(store, places["plain"]) == brief_texts(store, places["plain"]) == {A, NONE}


def test_a_read_without_an_index_applies_the_same_filter(places: dict[str, Path]) -> None:
    store = places["store"]
    for name in ("index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm"):
        (store / name).unlink(missing_ok=True)
    (store / "index.sqlite3").mkdir()  # an index that cannot be opened: the search answers from the log
    assert texts(store, places["a"]) == {A, NONE}
    assert brief_texts(store, places["a"]) == {A, NONE}
