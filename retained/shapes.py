"""The shapes of the Store's replies that the MCP tools publish as their output schemas.

Each is a ``TypedDict`` of what a ``Store`` method returns (the CLI's
``--json`` prints the same dicts). The MCP SDK turns them into each tool's
output schema, so a client sees the fields below as structured content.
"""

from typing import Any, NotRequired, TypedDict

from retained.replies import Placed


class Proof(Placed):
    """What a write returns (``Store.write``, ``checkpoint``, ``forget``): where the record is and how it links."""

    duplicate: bool
    notices: NotRequired[list[str]]


class Found(TypedDict):
    """What a search returns (``Store.search``): ranked records and what was left out, and why.

    returned + sum(left_out.values()) == total_matches.
    """

    results: list[dict[str, Any]]
    total_matches: int
    returned: int
    left_out: dict[str, int]


class Report(TypedDict):
    """What verify returns (``Store.verify``): ok, every finding, and the counts behind them."""

    ok: bool
    findings: list[dict[str, Any]]


class Records(TypedDict):
    """What a read returns (``Store.get`` by seq, ``Store.timeline``, ``Store.list``): full records and how many more matched.

    Each entry is {"seq", "offset", "length", "record": the stored record with
    its client and ts}, plus "superseded_by" / "retracted_by" when they apply,
    and "origin" ({"store_id", "machine", "local": false}) and "id"
    ("STORE_ID:SEQ") for a record of another store pulled by `retained sync`.
    """

    records: list[dict[str, Any]]
    returned: int
    more: int
    total_matches: NotRequired[int]
    more_before: NotRequired[int]
    more_after: NotRequired[int]
    left_out_for_size: NotRequired[dict[str, Any]]
