"""What an appender does with the log's last bytes before it appends.

``TABLE`` is the whole policy: each row names a state of the log's end (T0 an
empty file, T1 ending with ``\\n``, T2 bytes after the last ``\\n``), the
crash that leaves it, and the action. ``decide`` picks exactly one row for any
state (a test walks every combination). Nothing else is ever repaired: a
complete line that fails to parse or to verify (a flipped byte, a foreign
program's line, a hand edit) may be evidence. It is kept in place, reported by
verify with its offset, and skipped by the chain; the next record links to the
last valid record.
"""

from __future__ import annotations

from collections import namedtuple

from retained.errors import InvariantBroken

# empty / ends_with_newline: bool, or None for either; action: "accept" | "quarantine".
Row = namedtuple("Row", "name empty ends_with_newline action crash")

# Why T2 may truncate: an acknowledgement needs the whole line, newline included,
# read back after fsync, so bytes without their newline were never acknowledged to
# anyone. They are still copied aside (``log.jsonl.torn-<offset>``, fsynced) before
# the truncation, so nothing is lost even if that reasoning were wrong.
TABLE = (
    Row("T0", True, None, "accept", "none, or a crash before the first write"),
    Row("T1", False, True, "accept", "none, or a crash after a whole line landed"),
    Row("T2", False, False, "quarantine", "a crash or short write in the middle of an append"),
)


def matches(row: Row, empty: bool, ends_with_newline: bool) -> bool:
    return (row.empty is None or row.empty == empty) and (
        row.ends_with_newline is None or row.ends_with_newline == ends_with_newline
    )


def decide(empty: bool, ends_with_newline: bool) -> Row:
    """The one row of TABLE that applies to this end of log."""
    rows = [row for row in TABLE if matches(row, empty, ends_with_newline)]
    if len(rows) != 1:
        raise InvariantBroken(f"recovery: {len(rows)} rows of the table match (empty={empty}, ends_with_newline={ends_with_newline})")
    return rows[0]


def quarantine_name(log_name: str, offset: int, attempt: int, mark: str = ".torn-") -> str:
    """Name of the file that keeps a torn tail found at ``offset`` (``mark`` ".quarantine-": a damaged line set aside)."""
    base = f"{log_name}{mark}{offset}"
    return base if attempt == 0 else f"{base}.{attempt}"
