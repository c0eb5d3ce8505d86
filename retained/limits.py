"""Every numeric bound retained enforces, each with the reason for its value."""

from __future__ import annotations

# A canonical record line may be this large. Generous so a pasted document or a
# 1 MiB note fits; small enough that one record can never exhaust memory.
RECORD_BYTES_MAX = 16 * 1024 * 1024

# Containers nested deeper than this are refused: orjson's own limit is 254 and
# nothing an agent writes needs more; a stated limit gives a clear error.
DEPTH_MAX = 64

# orjson encodes integers in this range exactly; outside it a value could not
# round-trip byte-exact, so it is refused instead.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1

# A seq (and any count compared with one) is a SQLite INTEGER in the index: a
# signed 64-bit number. A larger one names no record and cannot be looked up.
SEQ_MAX = 2**63 - 1

# How long an appender waits for the OS lock before reporting "store busy".
LOCK_WAIT_S = 10.0

# Backwards reads of the log go in chunks this size (tail finding, newest-first
# listing). Large enough that a typical tail is found in one read.
TAIL_CHUNK_BYTES = 64 * 1024

# Forward scans read this much at a time; memory stays flat in the log's size.
SCAN_CHUNK_BYTES = 1024 * 1024

# A client_op_id is an idempotency key, not a payload.
CLIENT_OP_ID_CHARS_MAX = 200

# The largest single os.write of an append: Linux writes at most about 2 GiB
# per call and macOS refuses larger counts, so a huge batch goes in pieces.
WRITE_BYTES_MAX = 1024 * 1024 * 1024

# A timeline (get --around, memory_get around=) shows this many records on each
# side by default, and reads at most 2 * TIMELINE_WINDOW_MAX + 1 records.
TIMELINE_WINDOW_DEFAULT = 5
TIMELINE_WINDOW_MAX = 100

# Neighbouring records one search result may carry as context; more is a timeline (get --around).
CONTEXT_MAX = 50

# Bounds every edge (the command line and the MCP tools) accepts alike: a search's k, a listing's
# limit, a scope's length (a scope is never empty: no scope is the absence of one).
SEARCH_K_MAX = 200
LIST_LIMIT_MAX = 500
SCOPE_CHARS_MAX = 200

# Results a search returns unless asked for more: a page a person or an agent reads whole.
SEARCH_K_DEFAULT = 10

# Tokens the session-start brief may use unless told: about 6 KB of text, a
# useful start of a session without crowding the context (and well within the
# brief's output cap).
BRIEF_BUDGET_DEFAULT = 1500

# The kinds of record the store writes itself, each through its own verb
# (checkpoint, forget, redact, quarantine, anchor --accept): a caller's write
# may not use them (record.make_content refuses them).
STORE_KINDS = ("checkpoint", "retract", "redaction", "quarantine", "anchor_accept")
# Records whose text is about other records (a retraction's, a redaction's):
# no vector is made for them.
MARKER_KINDS = ("retract", "redaction")

# How the bounds relate, checked at import (explicit raises: `python -O` strips asserts).
if SCAN_CHUNK_BYTES < TAIL_CHUNK_BYTES:
    raise ImportError("limits: SCAN_CHUNK_BYTES must be at least TAIL_CHUNK_BYTES")
if RECORD_BYTES_MAX <= SCAN_CHUNK_BYTES:
    raise ImportError("limits: RECORD_BYTES_MAX must exceed SCAN_CHUNK_BYTES (scans cope with lines longer than a chunk)")
if WRITE_BYTES_MAX < RECORD_BYTES_MAX:
    raise ImportError("limits: WRITE_BYTES_MAX must hold at least one whole record (one write per line)")
# The related-records step reads no more of a text than this (its subject is in its first words): a 4 MB
# write costs it what a short one does, and a step left for a later read keeps no more of the text.
RELATED_TEXT_CHARS = 2000
