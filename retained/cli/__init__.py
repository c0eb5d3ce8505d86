"""The command-line edge: ``retained <command>``, its generated reference and the hook installer; thin over ``Store``."""

from retained.cli.commands import build_parser, main

__all__ = ["build_parser", "main"]
