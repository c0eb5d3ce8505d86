"""The edges stay thin: the CLI and the MCP server reach the store only through ``Store``.

Also the things each kept in one place: the default store directory (with
``~`` read as the home directory everywhere, the library included) and the
version.
"""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import retained
from retained import Store, paths
from retained.brief import compose as brief
from retained.core.log import Log

from ..conftest import REPO, run_cli

PACKAGE = REPO / "retained"
# The edges: command line, MCP server and its tools, the HTTP guard, the web viewer.
EDGES = sorted([*(PACKAGE / "cli").glob("*.py"), *(PACKAGE / "mcp").glob("*.py"), *(PACKAGE / "viewer").glob("*.py"),
                PACKAGE / "http_guard.py"])
# What a Store owns and an edge must not touch: its log, index and vectors. Which modules an
# edge may import is a rule of docs/architecture.md, checked by test_layers.py.
STORE_INSIDES = {"log", "index", "hybrid", "_index", "_hybrid", "_guarded", "_append", "_require"}


def _reach_past(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [f"{path.name}:{node.lineno}: .{node.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in STORE_INSIDES]


def test_the_cli_and_the_server_reach_the_store_only_through_store_methods():
    """No .log / .index / .hybrid of a store in any edge module."""
    assert len(EDGES) >= 8 and all(path.exists() for path in EDGES)
    found = [hit for path in EDGES for hit in _reach_past(path)]
    assert found == []


def test_the_reach_check_sees_each_way_past_the_store(tmp_path):
    """The check above would catch each attribute of a store's insides."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(store):\n    return store.log.path, store.hybrid, store.index\n", encoding="utf-8")
    hits = _reach_past(bad)
    assert len(hits) == 3, hits


def test_a_store_path_with_a_tilde_is_under_the_home_directory(tmp_path, monkeypatch):
    """Store, Log, build_brief and the default directory read "~" as the home directory, never as ./~."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    with Store("~/.retained-dir") as store:
        proof = store.write("written through a tilde path")
    assert (home / ".retained-dir" / "log.jsonl").exists()
    log = Log("~/.retained-dir")
    assert log.directory == home / ".retained-dir" and log.tail()[0] == proof["seq"]
    log.close()
    result = brief.build_brief("~/.retained-dir")
    assert result["status"] == "ok" and [e["seq"] for e in result["included"]] == [1]
    assert paths.store_dir("~/x") == home / "x"
    assert paths.store_dir(None, {"RETAINED_DIR": "~/y"}) == home / "y"
    assert paths.store_dir(None, {}) == home / ".retained"
    assert not (cwd / "~").exists()


def test_the_cli_and_the_brief_fast_path_read_a_tilde_store_dir(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "RETAINED_DIR": "~/mem"}
    base = {k: v for k, v in __import__("os").environ.items() if not k.startswith("RETAINED_")}
    for argv in (["write", "note one", "--json"], ["--brief"], ["brief", "--json"]):
        out = subprocess.run([sys.executable, "-m", "retained", *argv], capture_output=True, text=True,
                             env={**base, **env}, cwd=tmp_path, timeout=60)
        assert out.returncode == 0, (argv, out.stderr)
    assert (home / "mem" / "log.jsonl").exists() and not (tmp_path / "~").exists()
    assert "note one" in out.stdout


def test_the_version_is_written_once_and_read_everywhere():
    from retained.cli.commands import CLI_CLIENT
    from retained.store import DEFAULT_CLIENT

    version = retained.__version__
    assert DEFAULT_CLIENT["version"] == version and CLI_CLIENT["version"] == version
    assert importlib.metadata.version("retained") == version
    assert run_cli("--version").stdout.strip() == f"retained {version}"
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert 'attr = "retained.version.__version__"' in pyproject and f'version = "{version}"' not in pyproject
    written = [p.relative_to(PACKAGE).as_posix() for p in sorted(PACKAGE.rglob("*.py"))
               if f'"{version}"' in p.read_text(encoding="utf-8")]
    assert written == ["version.py"]


def test_the_default_store_directory_is_computed_in_one_function():
    """Only paths.py names ~/.retained or reads RETAINED_DIR in the package."""
    writers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if '"RETAINED_DIR"' in text or "'RETAINED_DIR'" in text or '".retained"' in text:
            writers.append(path.relative_to(PACKAGE).as_posix())
    assert writers == ["paths.py"]


@pytest.mark.parametrize("entry", ["retained", "retained.render", "retained.paths", "retained.brief.compose",
                                   "retained.brief.reader"])
def test_the_brief_path_imports_neither_orjson_nor_the_storage_core(entry):
    """The brief's reader and the leaf modules it needs: no orjson, portalocker, mcp or storage core (typing is fine)."""
    heavy = ('orjson', 'portalocker', 'mcp', 'retained.core.log', 'retained.core.record', 'retained.store')
    code = f"import sys, {entry}; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_store_timeline_and_list_count_what_they_leave_out(filled_store):
    """I2 for the reads the edges share: what lies outside a timeline or past a limit is counted."""
    from retained.errors import InvalidRecord, NotFound

    end = filled_store.timeline(10, window=0)
    assert [e["seq"] for e in end["records"]] == [10] and (end["more_before"], end["more_after"], end["more"]) == (9, 0, 9)
    start = filled_store.timeline(1, window=3)
    assert [e["seq"] for e in start["records"]] == [1, 2, 3, 4] and (start["more_before"], start["more_after"]) == (0, 6)
    for around, window, error in ((11, 1, NotFound), (2**70, 1, InvalidRecord), (0, 1, InvalidRecord), (True, 1, InvalidRecord),
                                  (3, -1, InvalidRecord), (3, 101, InvalidRecord), (3, "2", InvalidRecord)):
        with pytest.raises(error):
            filled_store.timeline(around, window=window)
    filled_store.write("note number 2, corrected", supersedes=[2], scope="even")
    listed = filled_store.list(limit=3, scope="even")
    assert [e["seq"] for e in listed["records"]] == [11, 10, 8]
    assert (listed["returned"], listed["total_matches"], listed["more"]) == (3, 6, 3)
    assert filled_store.timeline(2, window=0)["records"][0]["superseded_by"] == [11]


def test_the_brief_and_get_print_a_record_the_same_way(store):
    """One renderer: the brief's block for a record is what `retained get` prints for it."""
    from retained import render

    store.write("the deploy target is staging", scope="proj-a")
    store.write("the deploy target is production\nsince Monday", scope="proj-a", source="chat", supersedes=[1],
                body="decided in the weekly call")
    text = brief.render_text(brief.build_brief(store.directory))
    shown = render.record(store.get([2])[0])
    assert shown.startswith("#2 note ") and "supersedes=#1" in shown and "  since Monday" in shown
    assert shown in text
