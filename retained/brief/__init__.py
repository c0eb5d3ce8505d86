"""The session-start brief (docs/brief.md): ``compose`` builds it, ``reader`` reads the store within the start-up budget."""

from retained.brief.compose import DEFAULT_BUDGET, build_brief, output, render_text, unavailable

__all__ = ["DEFAULT_BUDGET", "build_brief", "output", "render_text", "unavailable"]
