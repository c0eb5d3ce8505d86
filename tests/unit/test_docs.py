"""The README and docs/ say what is true: links resolve, snippets parse, examples run as written.

The README's commands and its Python example are run for real (in temporary
stores, never in ~/.retained); docs/settings.md must name every RETAINED_*
variable the code reads; code comments in retained/ carry no timings.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tokenize
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, REPO / "BENCHMARKS.md", REPO / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]
VENV_BIN = Path(sys.executable).parent
WAIT_S = 120
DEMO = "/tmp/retained-demo"


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def _prose(text: str) -> str:
    """The text without fenced blocks and inline code, where links live."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slugs(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings (lower case, punctuation dropped, spaces to hyphens, -N for repeats)."""
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6} +(.+?) *#*$", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M), re.M):
        base = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slugs_follow_githubs_rules() -> None:
    text = "# The proof, in one example\n## `retained redact SEQ --reason TEXT`\n## Conformance: retained and server-memory\n## Tools\n## Tools\n"
    assert slugs(text) == {"the-proof-in-one-example", "retained-redact-seq---reason-text",
                           "conformance-retained-and-server-memory", "tools", "tools-1"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves_to_a_file_and_anchor(page: Path) -> None:
    text = _text(page)
    links = re.findall(r"\]\(([^)\s]+)\)", _prose(text))
    problems = []
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue  # http:, https:, mailto:
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            problems.append(f"{link}: no {path.relative_to(REPO) if REPO in path.parents else path}")
            continue
        if anchor and anchor not in slugs(_text(path) if path.is_file() else ""):
            problems.append(f"{link}: no heading #{anchor} in {path.name}")
    assert not problems, problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_json_and_toml_block_parses(page: Path) -> None:
    problems = []
    for n, (lang, body) in enumerate(_blocks(_text(page))):
        try:
            if lang == "json":
                json.loads(body)
            elif lang == "toml":
                tomllib.loads(body)
        except ValueError as exc:
            problems.append(f"{page.name} block {n + 1} ({lang}): {exc}")
    assert not problems, problems


def test_the_docs_have_a_page_for_every_subject() -> None:
    for name in ("format", "search", "embeddings", "brief", "mcp", "secrets", "erasure", "data", "selftest",
                 "harness", "settings", "cli", "python", "claude-code"):
        assert (DOCS / f"{name}.md").is_file(), name
        assert f"docs/{name}.md" in _text(README), f"the README does not link docs/{name}.md"


# -- the README ---------------------------------------------------------------


def test_the_readme_is_short() -> None:
    assert len(_text(README)) <= 12_000


def test_the_readme_test_command_is_exactly_what_ci_runs() -> None:
    (first, second) = _blocks(_text(README))[0][1].strip().splitlines()
    ci = [line for line in _text(REPO / ".ci" / "run").splitlines() if line.startswith("python3 -m venv")]
    assert ci == [second]
    assert "pytest" in second and "[test]" in second


def _demo_env(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    home, store = tmp_path / "home", tmp_path / "demo-store"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_")}
    env.update(HOME=str(home), PATH=f"{VENV_BIN}{os.pathsep}/usr/bin:/bin")
    return env, home, store


def test_the_readme_first_command_runs_the_main_job_on_a_named_demo_store(tmp_path: Path) -> None:
    """Issue: the first command must never leave a record in the user's real ~/.retained."""
    (first, _second) = _blocks(_text(README))[0][1].strip().splitlines()
    steps = [s.strip() for s in first.split("&&")]
    assert steps[0] == "python3 -m venv .venv" and steps[1].startswith(".venv/bin/pip install")
    runs = [s for s in steps if ".venv/bin/retained" in s]
    assert [s.split()[-1] for s in runs][-1] == "verify" and any(" write " in s for s in runs)
    for step in runs:
        assert step.startswith(f"RETAINED_DIR={DEMO} ") or f"--dir {DEMO}" in step, step
    env, home, store = _demo_env(tmp_path)
    for step in runs:  # the installed commands, from this test's install, on a temporary stand-in for the demo store
        command = step.replace(".venv/bin/", f"{VENV_BIN}/").replace(DEMO, str(store))
        proc = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=WAIT_S, check=False)
        assert proc.returncode == 0, (step, proc.stderr)
    assert (store / "log.jsonl").is_file()
    assert not (home / ".retained").exists()


_HEX = re.compile(r"\b[0-9a-f]{64}\b")
_TS = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z\b")


def _shape(line: str) -> str:
    return _TS.sub("<ts>", _HEX.sub("<hash>", line.rstrip()))


def test_the_readme_proof_example_runs_as_written(tmp_path: Path) -> None:
    """Each `$` command of the console example, in order; its printed lines appear in that order (hashes and times aside)."""
    (console,) = [body for lang, body in _blocks(_text(README)) if lang == "console"][:1]
    env, home, store = _demo_env(tmp_path)
    steps: list[tuple[str, list[str]]] = []
    for line in console.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    codes = []
    for command, expected in steps:
        command = re.sub(r"/tmp/retained-[a-z]+", str(store), command)
        m = re.fullmatch(r"export (\w+)=(\S+)(\s+#.*)?", command)
        if m:
            env[m.group(1)] = m.group(2)
            continue
        proc = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=WAIT_S, check=False)
        codes.append(proc.returncode)
        got = [_shape(x) for x in proc.stdout.splitlines()]
        for want in (_shape(x) for x in expected):
            matches = [i for i, g in enumerate(got) if g == want or (want.endswith(" ...") and g.startswith(want[:-4]))]
            assert matches, f"{command!r} printed {proc.stdout!r}; the README shows {want!r}"
            got = got[matches[0] + 1 :]
    assert codes[:-1] == [0] * (len(codes) - 1) and codes[-1] == 1, codes  # the last verify finds the edit
    assert "--supersedes" in console and all("--scope" in c for c, _ in steps if "--supersedes" in c)
    assert not (home / ".retained").exists()


@pytest.mark.parametrize("page", [README, DOCS / "python.md"], ids=lambda p: p.name)
def test_the_python_example_works_as_written(tmp_path: Path, page: Path) -> None:
    (code,) = [body for lang, body in _blocks(_text(page)) if lang == "python" and body.startswith("from retained import Store")]
    assert "~" not in code and len(code.strip().splitlines()) <= 6
    store = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-c", code.replace(DEMO, str(store))], capture_output=True, text=True,
                          cwd=tmp_path, timeout=WAIT_S, check=False)
    assert proc.returncode == 0, proc.stderr
    seq, offset, length, digest = proc.stdout.split()
    line = (store / "log.jsonl").read_bytes()[int(offset) : int(offset) + int(length)]
    assert line.endswith(b"\n") and json.loads(line)["hash"] == digest and json.loads(line)["seq"] == int(seq) == 1


# -- settings and comments ----------------------------------------------------


def test_every_environment_variable_the_code_reads_is_in_the_settings_page() -> None:
    names = set()
    for path in [*(REPO / "retained").rglob("*.py"), *(REPO / "hooks").iterdir(), *(REPO / "plugin" / "scripts").iterdir()]:
        if path.is_file():
            names.update(n for n in re.findall(r"RETAINED_[A-Z0-9_]+", path.read_text(encoding="utf-8")) if not n.endswith("_"))
    assert {"RETAINED_DIR", "RETAINED_TOKEN", "RETAINED_EMBED_URL", "RETAINED_HOOK_TIMEOUT"} <= names
    page = _text(DOCS / "settings.md")
    missing = sorted(n for n in names if f"`{n}`" not in page)
    assert not missing, f"docs/settings.md does not describe {missing}"


_TIMING = re.compile(r"\d[\d.,]*\s*(?:-|–)?\s*[\d.]*\s*(?:ms|µs|us|ns|milliseconds?|microseconds?)\b|\d\s*(?:rec|records)/s\b")


def _comments(path: Path) -> list[tuple[int, str]]:
    import ast

    src = path.read_text(encoding="utf-8")
    found = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found += [(node.body[0].lineno + i, line) for i, line in enumerate(doc.splitlines())]
    return found


def test_timing_pattern_catches_what_it_should() -> None:
    for text in ("# costs 21 us a call", "# 0.35-0.45 s ... 12 ms", "# ~10 µs of a lock", "# 20,000 rec/s"):
        assert _TIMING.search(text), text
    for text in ("# the default is 10 s", "# 64 KiB chunks", "# ms-dos paths"):
        assert not _TIMING.search(text), text


def test_no_measured_timing_in_code_comments() -> None:
    """A comment says why; BENCHMARKS.md says how fast."""
    hits = []
    for path in sorted((REPO / "retained").rglob("*.py")):
        hits += [f"{path.relative_to(REPO)}:{n}: {line.strip()}" for n, line in _comments(path) if _TIMING.search(line)]
    assert not hits, "\n".join(hits)
