"""retained: agent memory whose writes are provable.

An append-only, hash-chained JSONL log is the store of record; everything else
(the search index, vectors, the brief) is derived from it. Importing this
package never imports ``mcp``, and imports nothing else until a name is used:
every entry point imports this package first, the session-start brief's
(``brief.reader``) included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from retained.errors import (
    InvalidRecord,
    LockTimeout,
    NotFound,
    ReadBackMismatch,
    RecordTooLarge,
    ReservedField,
    RetainedError,
    WriteFailed,
)
from retained.version import __version__

__all__ = [
    "InvalidRecord",
    "LockTimeout",
    "NotFound",
    "ReadBackMismatch",
    "RecordTooLarge",
    "ReservedField",
    "RetainedError",
    "Store",
    "WriteFailed",
    "__version__",
]

if TYPE_CHECKING:
    from retained.store import Store


def __getattr__(name: str) -> Any:
    # PEP 562: ``from retained import Store`` works as ever, but only loads
    # the storage core when someone asks for it: the one name kept lazy, as
    # every entry point (the brief's too) imports this package first.
    if name == "Store":
        from retained.store import Store

        return Store
    raise AttributeError(f"module 'retained' has no attribute {name!r}")
