"""The command-line edge: ``retained <command>``, its generated reference and the hook installer; thin over ``Store``.

``build_parser`` and ``main`` are loaded on first use: the capture hook
(``cli.capture_cmd``) runs on every prompt and reply and needs neither.
"""

__all__ = ["build_parser", "main"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from retained.cli import commands

        return getattr(commands, name)
    raise AttributeError(f"module 'retained.cli' has no attribute {name!r}")
