"""Adapters: how each probe maps onto one server's own tools and file format."""

from __future__ import annotations

from .base import Adapter, NotApplicable

ADAPTERS = ("retained", "server-memory")


def get(name: str) -> Adapter:
    """Return the adapter called ``name``."""
    if name == "retained":
        from .retained import RetainedAdapter

        return RetainedAdapter()
    if name in ("server-memory", "server_memory"):
        from .server_memory import ServerMemoryAdapter

        return ServerMemoryAdapter()
    raise NotApplicable(f"unknown adapter {name!r}; expected one of: {', '.join(ADAPTERS)}")


__all__ = ["ADAPTERS", "Adapter", "NotApplicable", "get"]
