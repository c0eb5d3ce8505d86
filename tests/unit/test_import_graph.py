"""No import cycle anywhere in retained/: the graph of its imports, read with ``ast``, is acyclic.

Edges are the imports of one module of the package by another, relative
(``from . import x``, ``from .x import y``) or absolute (``retained.x``).
``from . import x`` is an edge to the module ``x``, not to the package; a name
taken from the package itself (``from . import __version__``) is an edge to
``retained``.

Two graphs are checked. The first holds the imports run when a module is
imported: those at module level, in classes and under ``if``/``try``, and
those under ``if TYPE_CHECKING:`` too (a cycle of types still ties two
modules together for a reader and a type checker). The second adds the
imports inside functions (lazy imports, deferred to keep a cost such as
orjson or mcp off a fast path): a lazy import is for speed, never to hide a
cycle, so the package keeps that graph acyclic as well.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from ..conftest import REPO


def _modules(root: Path) -> dict[str, Path]:
    """``{dotted name: file}`` for every module of the package at ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: dict[str, Path]) -> set[str]:
    """The modules of the package an import statement loads."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if source not in known:
        return set()
    subs = {f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in known}
    # A name that is not a submodule is taken from `source` itself.
    return subs | ({source} if len(subs) < len(node.names) else set())


def import_graph(root: Path, *, lazy: bool) -> dict[str, set[str]]:
    """Edges importer -> imported among the modules of the package at ``root``."""
    known = _modules(root)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"

        def visit(nodes: list[Any], name: str = name, is_package: bool = is_package) -> None:
            for node in nodes:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    graph[name] |= _targets(node, name, is_package, known) - {name}
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if lazy:
                        visit([n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))])
                else:
                    # Blocks of if / try / with / for / while / class / match, and their handlers and cases.
                    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                        children = getattr(node, field, None)
                        if isinstance(children, list):
                            visit([c for c in children if isinstance(c, (ast.stmt, ast.ExceptHandler, ast.match_case))])

        visit(tree.body)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component that has one (Tarjan), each as a path of module names."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return components


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_the_graph_finds_cycles_of_every_kind_of_import(tmp_path: Path) -> None:
    """The checks below could pass by reading nothing: a package made with cycles shows they see them."""
    root = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from . import b\n",
        "b.py": "from .c import thing\n",
        "c.py": "import pkg.a\nthing = 1\n",
        "d.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from .e import E\n",
        "e.py": "from . import d\nclass E: ...\n",
        "f.py": "def later():\n    from .g import x\n    return x\n",
        "g.py": "from .f import later\nx = 1\n",
        "h.py": "from . import a\n",  # imports into a cycle, is not in one
        "sub/__init__.py": "from .. import h\n",
    })
    assert cycles(import_graph(root, lazy=False)) == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.d", "pkg.e"]]
    assert cycles(import_graph(root, lazy=True)) == [
        ["pkg.a", "pkg.b", "pkg.c"], ["pkg.d", "pkg.e"], ["pkg.f", "pkg.g"]]
    assert import_graph(root, lazy=False)["pkg.sub"] == {"pkg.h"}


def test_no_import_cycle_among_the_imports_run_at_import_time() -> None:
    graph = import_graph(REPO / "retained", lazy=False)
    assert "retained.index.schema" in graph["retained.index.writer"]  # the graph holds the package's real edges
    assert cycles(graph) == []


def test_no_import_cycle_even_through_imports_inside_functions() -> None:
    graph = import_graph(REPO / "retained", lazy=True)
    assert "retained.index.verify" in graph["retained.index.writer"]  # Index.verify imports it when it runs
    assert cycles(graph) == []


def test_the_index_read_model_imports_only_how_store_files_are_opened() -> None:
    """The brief's fast path imports it; of retained/ it needs only files (which opens no store file
    through a link, and is on that path already) and what files raises."""
    graph = import_graph(REPO / "retained", lazy=True)
    assert graph["retained.index.schema"] == {"retained.core.files"}
    assert graph["retained.core.files"] == {"retained.errors"}
    assert graph["retained.errors"] == set()
