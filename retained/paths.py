"""Where a store lives: the default store directory, and how a given one is read.

The one place that knows ``$RETAINED_DIR`` and ``~/.retained``. The edges
(the CLI, the MCP server, the brief's fast path) call ``store_dir``; the
library itself never reads the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DEFAULT_NAME = ".retained"  # the store's directory under the home directory


def chosen_dir(given: str | os.PathLike[str] | None = None, environ: Mapping[str, str] = os.environ) -> Path | None:
    """The store directory the user named (``given``, i.e. ``--dir``, else ``$RETAINED_DIR``), ``~`` expanded; None for the default."""
    chosen = given or environ.get("RETAINED_DIR")
    return Path(chosen).expanduser() if chosen else None


def store_dir(given: str | os.PathLike[str] | None = None, environ: Mapping[str, str] = os.environ) -> Path:
    """The store directory: ``given`` (``--dir``), else ``$RETAINED_DIR``, else ``~/.retained``; ``~`` expanded."""
    return chosen_dir(given, environ) or Path.home() / DEFAULT_NAME
