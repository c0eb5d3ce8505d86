"""The session-start brief: what the store holds, within a token budget.

``build_brief(store_dir, budget, scope)`` gives the ``--json`` document,
``render_text(result)`` its text; ``retained.brief.compose`` holds them, and
``retained.brief.reader`` reads the store for them within the start-up budget.
"""

from retained.brief.compose import DEFAULT_BUDGET, build_brief, output, render_text, unavailable

__all__ = ["DEFAULT_BUDGET", "build_brief", "output", "render_text", "unavailable"]
