"""The static checks CI runs: ruff and mypy with the settings in pyproject.toml, and no assert in retained/.

An ``assert`` vanishes under ``python -O``: every runtime check in the
package is an explicit raise (InvariantBroken for retained's own
bookkeeping). The checkers come with the test extra; where one is missing
(a bare interpreter) its test says so and skips.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]' brings it)")
    return found


def test_ruff_passes_on_the_package_and_the_harness():
    proc = subprocess.run([_tool("ruff"), "check", "retained", "harness"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_passes_on_the_package_and_the_harness():
    proc = subprocess.run([_tool("mypy"), "--no-incremental"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_assert_carries_a_runtime_check_in_the_package():
    found = []
    for path in sorted((REPO / "retained").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assert):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == [], f"use an explicit raise (errors.InvariantBroken for retained's own bookkeeping): {found}"
