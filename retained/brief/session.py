"""The one way into the brief: the Store, the command line, the hook's fast path and the MCP prompt call it.

A caller that starts a session (``never_fail``: the hook, ``retained brief``)
gets an ``unreadable`` brief instead of an exception: a brief must never fail its host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retained import limits
from retained.brief import compose
from retained.errors import InvalidRecord

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping
    from typing import Any


def session_brief(
    directory: str | os.PathLike[str],
    budget: int | None = None,
    scope: str | None = None,
    *,
    and_unscoped: bool = False,
    anchor_dir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    never_fail: bool = False,
    project: str | None = None,
) -> dict[str, Any]:
    """The brief of the store at ``directory`` (``compose.build_brief`` says each argument); ``budget`` None is the default.

    ``environ``: the settings an edge read (``os.environ``); the anchor
    directory comes from them (``anchors.dir_from``) unless ``anchor_dir``
    is given.

    Raises:
        InvalidRecord: ``budget`` or ``scope`` is malformed (with ``never_fail`` too: that is the caller's mistake).
    """
    budget = limits.BRIEF_BUDGET_DEFAULT if budget is None else budget
    try:
        if anchor_dir is None and environ is not None:
            from retained.core.anchors import dir_from

            anchor_dir = dir_from(environ)
        return compose.build_brief(directory, budget, scope, and_unscoped=and_unscoped, anchor_dir=anchor_dir,
                                   project=project)
    except InvalidRecord:
        raise
    except Exception as exc:
        if not never_fail:
            raise
        return compose.unavailable(directory, f"{type(exc).__name__}: {exc}", budget=budget, scope=scope,
                                   and_unscoped=and_unscoped)
