"""docs/architecture.md is held to the code: each never-import rule, and each function the map names.

The rules are read from the table under "What must never import what" in
that page, so the page and this test cannot disagree: a row added there is
checked here, and a row that names no module of the package fails. Imports
are read with ``ast`` from every module of ``retained/``, wherever they
stand: at module level, inside functions (lazy imports) and under ``if
TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import NamedTuple

import pytest

from ..conftest import REPO
from .test_import_graph import _modules as modules  # {dotted name: file} of a package

MAP = REPO / "docs" / "architecture.md"
RULES_HEADING = "## What must never import what"
_CODE = re.compile(r"`([^`]+)`")


class Rule(NamedTuple):
    number: str
    importers: tuple[str, ...]
    never: tuple[str, ...]
    allowed: tuple[str, ...]
    why: str


def rules(text: str) -> list[Rule]:
    """The rows of the rules table of the map: ``| # | these modules | never import | except | why |``."""
    section = text.split(RULES_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert header == ["#", "these modules", "never import", "except", "why"], header
    out = []
    for line in rows[2:]:  # past the header and its |---| line
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        number, importers, never, allowed, why = cells
        out.append(Rule(number, tuple(_CODE.findall(importers)), tuple(_CODE.findall(never)),
                        tuple(_CODE.findall(allowed)), why))
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in the file, each resolved to the module it loads.

    ``from a import b`` loads ``a.b`` when that is a module of the package,
    else ``a``; a module outside the package is named as written.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.append((node.lineno, sub if sub in known else source))
    return found


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _part(module: str) -> str:
    """The part a module of the package belongs to: ``retained.core.log`` -> ``retained.core``."""
    return ".".join(module.split(".")[:2])


def breaches(rule: Rule, root: Path) -> list[str]:
    """Every import in the package at ``root`` that ``rule`` forbids, as ``file:line: importer imports module``."""
    known = modules(root)
    out = []
    for name, path in known.items():
        if not any(_under(name, prefix) for prefix in rule.importers):
            continue
        for line, target in imports(name, path, known):
            if _under(target, _part(name)) and _part(name) != root.name:
                continue  # a part may import its own modules
            if any(_under(target, p) for p in rule.never) and not any(_under(target, p) for p in rule.allowed):
                out.append(f"{path.relative_to(root.parent)}:{line}: {name} imports {target}")
    return out


RULES = rules(MAP.read_text(encoding="utf-8"))


def test_the_map_states_the_rules_in_one_table_that_names_real_modules() -> None:
    """A rule that names no module of the package (a typo, a part since moved) would pass by checking nothing."""
    assert len(RULES) >= 13
    assert [r.number for r in RULES] == [str(i) for i in range(1, len(RULES) + 1)]
    known = set(modules(REPO / "retained"))
    for rule in RULES:
        assert rule.importers and rule.never and rule.why, rule
        assert "retained" not in rule.importers, f"rule {rule.number}: name the parts, not the whole package"
        for prefix in (*rule.importers, *rule.allowed, *(p for p in rule.never if p.startswith("retained"))):
            assert any(_under(m, prefix) for m in known), f"rule {rule.number}: no module {prefix} in retained/"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"rule-{r.number}")
def test_each_never_import_rule_of_the_map_holds(rule: Rule) -> None:
    assert breaches(rule, REPO / "retained") == []


def test_the_rule_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The check above could pass by reading nothing: a package that breaks rules in each way shows it sees them."""
    root = tmp_path / "retained"
    files = {
        "__init__.py": "",
        "errors.py": "",
        "core/__init__.py": "",
        "core/log.py": "from retained.core import record\nimport sqlite3\n",  # own part: fine; sqlite3: not
        "core/record.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from retained.index.schema import Mark\n",
        "core/files.py": "def later():\n    from .. import store\n    return store\n",
        "core/json_input.py": "from retained.errors import InvalidRecord\n",
        "index/__init__.py": "",
        "index/schema.py": "",
        "store.py": "",
        "cli/__init__.py": "",
        "cli/commands.py": "from retained.core import json_input\nimport retained.core.log\nfrom retained.core.files import x\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    core = Rule("1", ("retained.core",), ("retained",), ("retained.errors",), "")
    assert breaches(core, root) == [
        "retained/core/files.py:2: retained.core.files imports retained.store",
        "retained/core/record.py:3: retained.core.record imports retained.index.schema",
    ]
    assert breaches(Rule("2", ("retained.core",), ("sqlite3",), (), ""), root) == [
        "retained/core/log.py:2: retained.core.log imports sqlite3"]
    edges = Rule("3", ("retained.cli",), ("retained.core",), ("retained.core.json_input", "retained.core.files"), "")
    assert breaches(edges, root) == ["retained/cli/commands.py:2: retained.cli.commands imports retained.core.log"]


# -- the functions the map names ---------------------------------------------------------

_NAMED = re.compile(r"`((?:retained|tests)/[\w/]+\.py):([\w.]+)`")
_PATHS = re.compile(r"`((?:retained|tests|harness|docs)/[\w/.-]*)`")


def _defined(path: Path) -> set[str]:
    """Every function and class of a module, methods as ``Class.method``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        if isinstance(node, ast.ClassDef):
            out |= {f"{node.name}.{n.name}" for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):  # tools defined inside a function
            out |= {f"{node.name}.{n.name}" for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return out


def test_every_function_and_file_the_map_names_exists() -> None:
    """The walks name ``file.py:Function``; a rename that leaves the map behind fails here."""
    text = MAP.read_text(encoding="utf-8")
    named = _NAMED.findall(text)
    assert len(named) >= 40
    missing = [f"{file}:{name}" for file, name in named
               if not (REPO / file).is_file() or name not in _defined(REPO / file)]
    assert missing == []
    paths = [p for p in _PATHS.findall(text) if not (REPO / p.rstrip("/")).exists()]
    assert paths == []


# -- module docstrings ---------------------------------------------------------------------

_PY_REF = re.compile(r"[\w/.-]+\.py\b")
_DOTTED_REF = re.compile(r"\bretained(?:\.\w+)+")


def test_every_module_docstring_says_what_it_owns_and_names_only_modules_that_exist() -> None:
    """The docstring opens with what the module owns in a few lines; a file or module it names is still there.

    After a reorganisation a docstring that still says ``index_search.py`` or
    ``retained.transfer`` sends a reader to nothing.
    """
    known = modules(REPO / "retained")
    basenames = {path.name for path in known.values()}
    top = known["retained"].read_text(encoding="utf-8")  # names the package itself exports (retained.__version__)
    problems = []
    for name, path in known.items():
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        if not doc:
            problems.append(f"{name}: no module docstring")
            continue
        if len(doc.split("\n\n")[0].splitlines()) > 3:
            problems.append(f"{name}: the opening paragraph is over 3 lines")
        for ref in _PY_REF.findall(doc):
            if not (REPO / ref).is_file() and Path(ref).name not in basenames:
                problems.append(f"{name}: names {ref}, which does not exist")
        for ref in _DOTTED_REF.findall(doc):
            parts = ref.split(".")
            # a module, or a name defined in one (retained.brief.build_brief), or the packaged hooks
            if not any(".".join(parts[:i]) in known for i in range(2, len(parts) + 1)) and ref != "retained.hooks" \
                    and not (len(parts) == 2 and parts[1] in top):
                problems.append(f"{name}: names {ref}, which does not exist")
    assert problems == []
