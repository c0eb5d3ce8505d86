"""The Store's replies, typed: what a write, a get, a list, a timeline, a search and a verify return.

Each is a ``TypedDict`` that the code building the reply is annotated with,
so mypy checks every key where it is written and every read of one. The
edges print these dicts as they are (``--json``, MCP structured content);
``retained.shapes`` declares the part of them the MCP tools publish as
their output schemas (its ``Proof`` is a `Placed`). The package imports this
module for annotations only: nothing here runs on a read or a write.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class Placed(TypedDict):
    """Where a record is in the log and how it links to the one before: the proof without the write's notes."""

    seq: int
    hash: str
    prev: str
    offset: int
    length: int
    ts: str


class Notes(TypedDict, total=False):
    """What the write guard did to a record's content before it was stored."""

    private_spans_removed: int
    redactions: list[dict[str, Any]]


class WriteProof(Placed):
    """What a write returns once the record is durable (``Store.write``, ``write_batch``, ``checkpoint``, ``forget``)."""

    duplicate: bool  # a retry of a client_op_id already written: the first proof, nothing written
    private_spans_removed: NotRequired[int]
    redactions: NotRequired[list[dict[str, Any]]]
    notices: NotRequired[list[str]]
    related: NotRequired[list[dict[str, Any]]]


class WrittenRelated(TypedDict):
    """What a read says of the related steps its session's writes left for it (``Store.related_to_writes``)."""

    writes: list[dict[str, Any]]  # {"seq", "related": [{"seq", "ts", "text"}], "notice"} for each write that has some
    checked: int  # the writes whose step ran now
    not_checked: int  # the oldest dropped: more than writes.RELATED_LATER_MAX writes since the session's last read


class Links(TypedDict, total=False):
    """The later records naming one: those that supersede, retract or redact it, oldest first."""

    superseded_by: list[int]
    retracted_by: list[int]
    redacted_by: list[int]


class Entry(TypedDict):
    """A record read from the log at its place (checked against its hash where the index gave the place)."""

    seq: int
    offset: int
    length: int
    record: dict[str, Any]
    superseded_by: NotRequired[list[int]]
    retracted_by: NotRequired[list[int]]
    redacted_by: NotRequired[list[int]]
    score: NotRequired[float]  # search: higher is better
    tokens: NotRequired[int]  # search: its estimated cost
    ranks: NotRequired[dict[str, int | None]]  # hybrid search: its lexical and dense ranks
    context: NotRequired[list[Entry]]  # search with context: the records next to it in its scope
    may_correct: NotRequired[list[int]]  # search: older results this one may correct (index.corrections)
    may_be_corrected_by: NotRequired[list[int]]  # search: newer results that may correct this one
    cut: NotRequired[dict[str, Any]]  # search: the best result, alone over max_tokens, cut to an excerpt (documents.cut_to_fit)
    origin: NotRequired[dict[str, Any]]  # a record of a store pulled by `retained sync`: store_id, machine, local
    id: NotRequired[str]  # with origin: STORE_ID:SEQ


class Listing(TypedDict):
    """``Store.list``: newest first, and how many more matched (I2)."""

    records: list[Entry]
    returned: int
    total_matches: int  # every record the filters admit
    left_out: dict[str, int]
    more: NotRequired[int]  # total_matches - returned


class Timeline(TypedDict):
    """``Store.timeline``: a record and its neighbours, oldest first, and how many lie outside.

    Seqs are contiguous from 1 (L2), so what lies outside the window is a count, not a scan.
    """

    records: list[Entry]
    returned: int
    more: int
    more_before: int
    more_after: int


class ContextCount(TypedDict):
    """What a search's ``context`` included and what its budget left out."""

    asked: int
    included: int
    tokens: int
    over_budget: int


class Found(TypedDict):
    """``Store.search``: ranked records and the accounting ``returned + sum(left_out) == total_matches`` (I2)."""

    query: str
    results: list[Entry]
    total_matches: int
    returned: int
    left_out: dict[str, int]
    tokens: int
    index: dict[str, Any]  # what the index's catch-up did
    mode: NotRequired[str]  # lexical, hybrid or dense
    mode_reason: NotRequired[str | None]
    vectors: NotRequired[dict[str, Any]]
    without_vectors: NotRequired[int]  # matches ranked without a vector (not embedded yet, or lexical)
    context: NotRequired[ContextCount]


class Report(TypedDict):
    """``Store.verify``: the chain walk's counts and every finding, with the index, anchors and vectors checked."""

    ok: bool
    records: int
    head: dict[str, Any]
    bytes: int
    redacted: int
    foreign: int
    damaged: int
    torn_tail: Any
    first_bad_seq: int | None
    findings: list[dict[str, Any]]
    snapshot: dict[str, Any]
    quarantined: list[dict[str, Any]]
    log: str
    exists: bool
    anchors: dict[str, Any]
    index: dict[str, Any]
    vectors: NotRequired[dict[str, Any]]
