"""``python -m retained`` and the ``retained`` console script: the session-start brief first, else the command line.

Both entry points start here, so the hook's path (``retained brief``, which
``hooks/session-start.sh`` runs at every session start) imports only what the
brief needs; every other command imports ``retained.cli.commands``.
"""

import os
import sys

from retained.interrupt import exit_on_interrupt

# Only an entry point imports this module. From here on Ctrl-C exits at once and
# quietly, whatever import it lands in; ``cli.main`` gives the short commands
# their KeyboardInterrupt back once it knows the command (see ``retained.interrupt``).
exit_on_interrupt()


def _brief() -> int | None:
    """``python -m retained --brief`` with plain options, without importing the command line.

    The brief runs at every session start, and argparse with every command's
    parser costs about as much as the brief itself. The options are read by
    ``brief.parse_args``; anything else (help, a malformed option) returns
    None and goes through ``cli.main``, which reports it.
    """
    argv = sys.argv[1:]
    if not argv or not (argv[0] in ("--brief", "brief") or argv[0].startswith("--brief=")):
        return None
    # The brief's modules (light: see ``retained.brief.reader``), imported
    # here so that capture's path, which runs on every turn, skips them.
    from retained.brief import compose as brief
    from retained.brief.session import session_brief
    from retained.paths import store_dir

    rest = argv[1:] if "=" not in argv[0] else ["--budget" + argv[0][len("--brief") :], *argv[1:]]
    opts = brief.parse_args(rest)
    if opts is None:
        return None
    from retained.capture.scope import read_scope

    project = _project()
    scope, and_unscoped = read_scope(opts["scope"], project, opts["all_scopes"])
    result = session_brief(store_dir(opts["dir"]), opts["budget"], scope, and_unscoped=and_unscoped,
                           environ=os.environ, never_fail=True, project=project)
    try:
        sys.stdout.buffer.write(brief.output(result, "json" if opts["json"] else opts["format"]))
        sys.stdout.flush()
    except BrokenPipeError:
        return 1
    return 0


def _capture() -> int | None:
    """``retained capture ...`` without the parser of every other command: it runs on every prompt and reply."""
    argv = sys.argv[1:]
    if not argv or argv[0] != "capture" or "-h" in argv or "--help" in argv:
        return None
    from retained.cli.capture_cmd import main as capture_main

    return capture_main(argv[1:])


def _project() -> str | None:
    """The project the session starts in (``retained scope``), for the brief's "last session" part; None when off."""
    from retained.capture.scope import project

    found = project(os.environ, os.getcwd())
    return None if found is None else found.scope


def main() -> int:
    """The ``retained`` command: the brief's or capture's fast path, or ``cli.main``."""
    code = _brief()
    if code is None:
        code = _capture()
    if code is None:
        # Deferred: the command line (argparse, the Store, orjson) is what the brief's path never imports.
        from retained.cli.commands import main as cli_main

        code = cli_main()
    return code


def serve_main() -> int:
    """The ``retained-mcp`` command: the MCP server (this module's import made Ctrl-C quiet)."""
    from retained.mcp.server import main as server_main

    return server_main()


if __name__ == "__main__":
    sys.exit(main())
