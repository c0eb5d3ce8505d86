"""Shared fixtures: real store directories under tmp_path, real files."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retained import Store

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
# The record-format vectors: the repository's own (made by harness/make_vectors.py), and the
# shared ones beside the repository when they are there (the tests check both, and that they agree).
VECTORS = REPO / "tests" / "vectors"
SHARED_VECTORS = SHARED / "vectors"
VECTOR_DIRS = [VECTORS, *([SHARED_VECTORS] if SHARED_VECTORS.is_dir() else [])]


class NoProcesses:
    """A multiprocessing context in a sandbox that forbids starting processes (everything else is fork's)."""

    def __init__(self) -> None:
        self._fork = multiprocessing.get_context("fork")

    def __getattr__(self, name: str):
        return getattr(self._fork, name)

    def Process(self, *args, **kwargs):  # the name multiprocessing contexts give it
        raise PermissionError(1, "starting a process is not permitted here")


@pytest.fixture(autouse=True)
def anchor_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Anchors recorded by the command line and the server (they read RETAINED_ANCHOR_DIR) stay in the test's tmp."""
    path = tmp_path_factory.mktemp("anchors")
    monkeypatch.setenv("RETAINED_ANCHOR_DIR", str(path))
    return path


# Also for the whole session: a module- or session-scoped fixture (the viewer's, the Claude Code
# client's) starts its server before any function-scoped fixture runs, and a viewer that found the
# model would fill vectors in the background and turn its searches hybrid whenever it got there first.
os.environ["RETAINED_EMBED_LOCAL"] = "0"


@pytest.fixture(autouse=True)
def embedded_model_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded model (retained[semantic]) stays unused unless a test unsets this; its tests do."""
    monkeypatch.setenv("RETAINED_EMBED_LOCAL", "0")


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(store_dir: Path):
    s = Store(store_dir)
    yield s
    s.close()


@pytest.fixture
def filled_store(store: Store):
    """A store with 10 notes, seq 1..10."""
    for i in range(1, 11):
        store.write(f"note number {i}", scope="even" if i % 2 == 0 else "odd")
    return store


def run_cli(*args: str, env_dir: Path | None = None, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``python -m retained`` as a real subprocess."""
    env = dict(os.environ)
    if env_dir is not None:
        env["RETAINED_DIR"] = str(env_dir)
    return subprocess.run(
        [sys.executable, "-m", "retained", *args],
        capture_output=True,
        text=True,
        env=env,
        input=input,
        timeout=timeout,
        cwd=REPO,
    )
