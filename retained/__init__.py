"""retained: agent memory whose writes are provable.

An append-only, hash-chained JSONL log is the store of record; everything else
(the search index, vectors, the brief) is derived from it. Importing this
package never imports ``mcp``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import (  # noqa: E402
    InvalidRecord,
    LockTimeout,
    NotFound,
    ReadBackMismatch,
    RecordTooLarge,
    ReservedField,
    RetainedError,
    WriteFailed,
)
from .store import Store  # noqa: E402

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
