"""What a check gets and how it fails: its context, ``expect`` and ``need``."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retained.errors import RetainedError
from retained.store import Store


class CheckFailed(Exception):
    """A check found its claim false; the message is the reason shown."""


class NotAvailable(CheckFailed):
    """The feature a check exercises is not there; the check fails, saying so."""

    def __init__(self, what: str) -> None:
        super().__init__(f"not available: {what}")


@dataclass
class Context:
    """What a check gets: its own store directory and the injected faults."""

    name: str
    work: Path
    store_factory: Callable[..., Any] = Store
    faults: Mapping[str, Callable[[Context], None]] = field(default_factory=dict)
    python: str = sys.executable
    _stores: list[Any] = field(default_factory=list)

    @property
    def directory(self) -> Path:
        """The store directory (created by retained itself on the first write)."""
        return self.work / "store"

    @property
    def log_path(self) -> Path:
        return self.directory / "log.jsonl"

    def store(self, **kwargs: Any) -> Any:
        """A new Store on this check's directory, closed when the check ends."""
        s = self.store_factory(self.directory, **kwargs)
        self._stores.append(s)
        return s

    def fault(self, point: str) -> None:
        """Run the fault injected at ``<check>.<point>``, if any (tests of the checks)."""
        hook = self.faults.get(f"{self.name}.{point}")
        if hook is not None:
            hook(self)

    def close(self) -> None:
        for s in self._stores:
            try:
                s.close()
            except (RetainedError, OSError, sqlite3.Error):
                pass
        self._stores.clear()


def expect(condition: bool, reason: str) -> None:
    """Fail the check with ``reason`` unless ``condition`` holds (never stripped by -O)."""
    if not condition:
        raise CheckFailed(reason)


def need(obj: Any, attr: str, what: str) -> Any:
    """``obj.attr``, or fail the check as not available."""
    found = getattr(obj, attr, None)
    if found is None:
        owner = "Store" if isinstance(obj, Store) else type(obj).__name__
        raise NotAvailable(f"{owner}.{attr} is missing ({what})")
    return found
