"""The command-line reference, docs/cli.md, generated from ``retained.cli.commands.build_parser()``.

``python -m retained.cli.doc`` writes docs/cli.md (run it from the repository
root, or name the file); ``--check`` only compares and exits 1 when the file
is out of date. Every subcommand, nested ones included, is found by walking
the parser, so a new command appears without touching this module. The text
is built from the parser's own fields (option strings, metavars, choices,
defaults, help, the example in each epilog), not from argparse's help
formatter, so it does not change with the terminal width or the Python
version.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

DEFAULT_PATH = Path("docs") / "cli.md"
GENERATOR = "python -m retained.cli.doc"


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """``(words, summary, parser)`` for every subcommand, depth first, in the order they were added."""
    sub = _subparsers(parser)
    if sub is None:
        return
    summaries = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    for name, child in sub.choices.items():
        path = (*words, name)
        yield path, summaries.get(name, "") or (child.description or ""), child
        yield from commands(child, path)


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest.upper()


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _spelling(action: argparse.Action) -> str:
    """How the argument is written: ``--kind KIND``, ``-o, --output FILE``, ``SEQ [SEQ ...]``."""
    if not action.option_strings:
        meta = _metavar(action)
        return {"+": f"{meta} [{meta} ...]", "*": f"[{meta} ...]", "?": f"[{meta}]"}.get(str(action.nargs), meta)
    names = ", ".join(action.option_strings)
    return f"{names} {_metavar(action)}" if _takes_value(action) else names


def _usage_word(action: argparse.Action) -> str:
    if not action.option_strings:
        return _spelling(action)
    word = action.option_strings[-1] + (f" {_metavar(action)}" if _takes_value(action) else "")
    return word if action.required else f"[{word}]"


def _own_actions(parser: argparse.ArgumentParser, shared: set[tuple[str, ...]]) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and tuple(a.option_strings) not in shared
    ]


def _default(action: argparse.Action) -> str:
    value = action.default
    if value is None or value is False or value == argparse.SUPPRESS or not _takes_value(action):
        return ""
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _sentence(text: str) -> str:
    text = _cell(text)
    if not text:
        return text
    return text[0].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


def _example(parser: argparse.ArgumentParser) -> str:
    for line in (parser.epilog or "").splitlines():
        if line.startswith("example: "):
            return line[len("example: ") :]
    return ""


def _anchor(words: tuple[str, ...]) -> str:
    return "-".join(("retained", *words)).lower()


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """docs/cli.md as it should read for ``parser`` (default: the real one)."""
    if parser is None:
        from retained.cli.commands import build_parser

        parser = build_parser()
    found = list(commands(parser))
    leaves = [p for _, _, p in found if _subparsers(p) is None]
    # Options every command takes (--dir, --json) are described once, above.
    per_leaf = [{tuple(a.option_strings): a for a in p._actions if a.option_strings} for p in leaves]
    shared_keys = set.intersection(*(set(d) for d in per_leaf)) - {("-h", "--help")} if per_leaf else set()
    shared = sorted(shared_keys)
    out = [
        "# Command reference",
        "",
        f"<!-- Generated from retained.cli.commands.build_parser() by `{GENERATOR}`; do not edit by hand:",
        "     a test fails when this page and the parser disagree. -->",
        "",
        "Every command is `retained COMMAND ...` and equally `python -m retained COMMAND ...`.",
        "`retained` with no command runs the MCP server on stdio (`serve`). Exit status: 0 success,",
        "1 problems found or the operation failed, 2 a usage error or bad input; the reason goes to stderr.",
        "",
        "Options every command takes:",
        "",
        "| option | meaning |",
        "|---|---|",
    ]
    first = per_leaf[0] if per_leaf else {}
    for key in shared:
        action = first[key]
        out.append(f"| `{_spelling(action)}` | {_cell(action.help or '')} |")
    out += ["", "| command | does |", "|---|---|"]
    for words, summary, _ in found:
        out.append(f"| [`{' '.join(words)}`](#{_anchor(words)}) | {_cell(summary)} |")
    for words, summary, child in found:
        actions = _own_actions(child, set(shared_keys))
        usage = " ".join(["retained", *words, *(_usage_word(a) for a in actions if a.option_strings),
                          *(_usage_word(a) for a in actions if not a.option_strings)])
        if _subparsers(child) is not None:
            usage = " ".join(["retained", *words, "ACTION ..."])
        out += ["", f"## retained {' '.join(words)}", "", _sentence(child.description or summary), "", "```", usage, "```"]
        rows = [a for a in actions if not isinstance(a, argparse._SubParsersAction)]
        if rows:
            out += ["", "| argument | meaning | default |", "|---|---|---|"]
            for action in rows:
                meaning = action.help or ""
                if action.required and action.option_strings:
                    meaning = f"required; {meaning}"
                if isinstance(action, (argparse._AppendAction, argparse._AppendConstAction)):
                    meaning += " (repeatable)" if "repeatable" not in meaning else ""
                out.append(f"| `{_spelling(action)}` | {_cell(meaning)} | {_default(action)} |")
        example = _example(child)
        if example:
            out += ["", f"Example: `{example}`"]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = argparse.ArgumentParser(prog=GENERATOR, description="write docs/cli.md from the argument parser")
    args.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH, help=f"the file to write (default {DEFAULT_PATH})")
    args.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file is out of date")
    opts = args.parse_args(argv)
    text = render()
    if opts.check:
        current = opts.path.read_text(encoding="utf-8") if opts.path.exists() else ""
        if current != text:
            print(f"{opts.path} is out of date with the argument parser; run {GENERATOR}", file=sys.stderr)
            return 1
        return 0
    opts.path.parent.mkdir(parents=True, exist_ok=True)
    opts.path.write_text(text, encoding="utf-8")
    print(f"wrote {opts.path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
