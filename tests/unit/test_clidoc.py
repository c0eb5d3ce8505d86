"""docs/cli.md is generated from the argument parser and never out of date."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from retained.cli import doc as clidoc
from retained.cli.commands import build_parser

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "cli.md"


def test_docs_cli_md_is_what_the_parser_generates() -> None:
    assert PAGE.read_text(encoding="utf-8") == clidoc.render(), (
        "docs/cli.md is out of date with retained.cli.commands.build_parser(); run: python -m retained.cli.doc"
    )


def test_every_subcommand_and_option_is_in_the_reference() -> None:
    """Walks the parser independently of the renderer: nested commands included."""
    text = PAGE.read_text(encoding="utf-8")
    seen = 0

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        nonlocal seen
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    path = (*words, name)
                    seen += 1
                    assert f"\n## retained {' '.join(path)}\n" in text, path
                    section = text.split(f"\n## retained {' '.join(path)}\n", 1)[1].split("\n## ", 1)[0]
                    for option in child._actions:
                        if option.option_strings and option.option_strings != ["-h", "--help"]:
                            if option.option_strings[-1] in ("--dir", "--json"):
                                continue  # described once, at the top
                            assert option.option_strings[-1] in section, (path, option.option_strings)
                    walk(child, path)

    walk(build_parser(), ())
    assert seen >= 19
    assert "| `--dir DIR` |" in text and "| `--json` |" in text


def test_a_new_command_appears_without_touching_the_generator() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    extra = sub.add_parser("frobnicate", help="frobnicate the store", description="frobnicate the store",
                           epilog="example: retained frobnicate --level 3")
    extra.add_argument("--level", type=int, default=1, help="how hard")
    nested = extra.add_subparsers(dest="what").add_parser("twice", help="frobnicate twice")
    nested.add_argument("target", metavar="SEQ", nargs="+", type=int, help="which records")
    text = clidoc.render(parser)
    assert "| [`frobnicate`](#retained-frobnicate) | frobnicate the store |" in text
    assert "\n## retained frobnicate twice\n" in text and "retained frobnicate twice SEQ [SEQ ...]" in text
    assert "| `--level LEVEL` | how hard | `1` |" in text
    assert "Example: `retained frobnicate --level 3`" in text


def test_check_mode_reports_a_stale_page(tmp_path: Path) -> None:
    stale = tmp_path / "cli.md"
    stale.write_text("# old\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "retained.cli.doc", "--check", str(stale)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "out of date" in proc.stderr and "python -m retained.cli.doc" in proc.stderr
    fresh = tmp_path / "fresh.md"
    assert subprocess.run([sys.executable, "-m", "retained.cli.doc", str(fresh)], timeout=60, check=False).returncode == 0
    assert fresh.read_text(encoding="utf-8") == clidoc.render()
    assert subprocess.run([sys.executable, "-m", "retained.cli.doc", "--check", str(fresh)], timeout=60,
                          check=False).returncode == 0
