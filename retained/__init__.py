"""retained: agent memory whose writes are provable.

An append-only, hash-chained JSONL log is the store of record; everything else
(the search index, vectors, the brief) is derived from it. Importing this
package never imports ``mcp``, and imports nothing else until a name is used:
the session-start brief imports only the modules it needs.
"""

from __future__ import annotations

# Not `typing.TYPE_CHECKING`: the session-start brief imports this package,
# and importing typing would be work on its path for nothing at run time.
TYPE_CHECKING = False

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
    from typing import Any

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
    from retained.store import Store
    from retained.version import __version__


def __getattr__(name: str) -> Any:
    # PEP 562: ``from retained import Store`` works as ever, but only loads
    # the storage core when someone asks for it.
    if name == "__version__":
        from retained.version import __version__

        return __version__
    if name == "Store":
        from retained.store import Store

        return Store
    if name in __all__:
        from retained import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'retained' has no attribute {name!r}")
