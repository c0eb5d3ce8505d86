"""The MCP server: the six memory_* tools over stdio and streamable HTTP.

Each tool is a few lines over `Store`. This module is an edge: it reads the
environment, configures logging (stderr only: stdout is the protocol on
stdio) and exits. `mcp` is imported only inside `build_server()` and `main()`,
so importing `retained` never pays for it.
"""

import hmac
import ipaddress
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from retained import limits
from retained.documents import shown
from retained.index_search import CONTEXT_MAX

log = logging.getLogger("retained.server")

SERVER_NAME = "retained"
HTTP_PORT_DEFAULT = 8765
HTTP_PATH = "/mcp"
TEXT_PREVIEW_CHARS = 160  # per record in a tool's short text rendering
GET_LIMIT_DEFAULT = 20
GET_LIMIT_MAX = 500
WINDOW_DEFAULT = 5
WINDOW_MAX = 100
SEARCH_K_DEFAULT = 10
SEARCH_K_MAX = 200
IDS_MAX = 500
CLIENT_FIELD_CHARS_MAX = 200  # a client name or version longer than this is cut
HTTP_BODY_SLACK_BYTES = 1024 * 1024  # an HTTP request may exceed the record limit by the JSON-RPC envelope

# Kinds the store writes through its own tools; memory_write refuses them.
OWN_KINDS = {"checkpoint": "memory_checkpoint", "retract": "memory_forget", "redaction": "retained redact (CLI)"}

# The stable codes a tool error starts with ("Error executing tool NAME: CODE:
# sentence"). The store's codes (retained.errors) pass through unchanged;
# os_error, unavailable and internal_error are the server's own.
ERROR_CODES = (
    "invalid_argument",
    "reserved_field",
    "too_large",
    "not_found",
    "store_busy",
    "secret_detected",
    "write_failed",
    "readback_mismatch",
    "log_unusable",
    "store_damaged",
    "os_error",
    "unavailable",
    "internal_error",
)

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class Proof(TypedDict):
    """What a write returns: where the record is and how it links."""

    seq: int
    hash: str
    prev: str
    offset: int
    length: int
    ts: str
    duplicate: bool
    notices: NotRequired[list[str]]


class Found(TypedDict):
    """What memory_search returns: ranked records and what was left out, and why.

    returned + sum(left_out.values()) == total_matches.
    """

    results: list[dict[str, Any]]
    total_matches: int
    returned: int
    left_out: dict[str, int]


class Report(TypedDict):
    """What memory_verify returns: ok, every finding, and the counts behind them."""

    ok: bool
    findings: list[dict[str, Any]]


class Records(TypedDict):
    """What memory_get returns: full records and how many more matched.

    Each entry is {"seq", "offset", "length", "record": the stored record with
    its client and ts}, plus "superseded_by" / "retracted_by" when they apply.
    """

    records: list[dict[str, Any]]
    returned: int
    more: int
    total_matches: NotRequired[int]
    more_before: NotRequired[int]
    more_after: NotRequired[int]


def _preview(text: Any) -> str:
    line = " ".join(str(text or "").split())
    if len(line) > TEXT_PREVIEW_CHARS:
        line = line[: TEXT_PREVIEW_CHARS - 1] + "…"
    return line


def _render_record(entry: dict[str, Any], text_shown: tuple[str, str | None] | None = None) -> str:
    rec = entry.get("record") if isinstance(entry.get("record"), dict) else entry
    if rec.get("redacted"):
        return f"#{entry.get('seq')} [redacted]"
    client = rec.get("client") or {}
    who = f"{client.get('name', '?')} {client.get('version', '')}".strip()
    flags = ""
    for name in ("superseded_by", "retracted_by"):
        if entry.get(name):
            flags += f" {name.replace('_', ' ')} {entry[name]}"
    scope = f" [{rec['scope']}]" if rec.get("scope") else ""
    text = rec.get("text")
    if text is None and rec.get("kind") == "retract":
        text = f"retracts {rec.get('retracts')}: {rec.get('reason')}"
    if text_shown and text_shown[0]:
        text = text_shown[0] + (f"\n[{text_shown[1]}]" if text_shown[1] else "")
    else:
        text = _preview(text)
    return f"#{rec.get('seq')} {rec.get('kind', 'note')}{scope} {rec.get('ts', '')} by {who}{flags}: {text}"


def render_proof(proof: dict[str, Any]) -> str:
    """One line a person can read for a write's proof, then what the guard changed."""
    if proof.get("duplicate"):
        lines = [f"already recorded as seq {proof['seq']} (same client_op_id); nothing new was written"]
    else:
        lines = [f"recorded seq {proof['seq']} at {proof['ts']}, hash {proof['hash'][:12]}…, durable and read back"]
    spans = proof.get("private_spans_removed")
    if isinstance(spans, int) and spans:
        lines.append(f"note: {spans} <private> span(s) removed before storing")
    redactions = proof.get("redactions")
    if isinstance(redactions, list) and redactions:
        kinds = ", ".join(sorted({str(r.get("kind")) for r in redactions if isinstance(r, dict)}))
        lines.append(f"note: {len(redactions)} secret(s) replaced by [secret:<kind>] before storing ({kinds})")
    for notice in proof.get("notices") or ():
        lines.append(f"note: {notice}")
    return "\n".join(lines)


def render_records(result: dict[str, Any]) -> str:
    """A few lines a person can read for memory_get's result."""
    records = result["records"]
    texts = shown([r.get("record") or {} for r in records], None, None,
                  rest="the structured result holds the whole record")
    lines = [_render_record(r, t) for r, t in zip(records, texts, strict=True)]
    tail = f"{result['returned']} record(s) returned"
    if "more_before" in result:
        tail += f"; {result['more_before']} older and {result['more_after']} newer not shown"
    elif result["more"]:
        tail += f"; {result['more']} more match(es) not shown (raise limit or narrow kind/scope)"
    return "\n".join([*lines, tail])


def render_search(result: dict[str, Any], query: str | None = None, max_tokens: int | None = None) -> str:
    """memory_search's result as text: each record's whole text within the budget, cuts centred on the query."""
    entries = [(e, indent) for r in result.get("results", ())
               for e, indent in [(r, ""), *((c, "  | ") for c in r.get("context", ()))]]
    texts = shown([e.get("record") or {} for e, _ in entries], query, max_tokens)
    lines = [indent + _render_record(e, t) for (e, indent), t in zip(entries, texts, strict=True)]
    left = result.get("left_out") or {}
    why = ", ".join(f"{n} {reason}" for reason, n in left.items() if isinstance(n, int) and n)
    tail = f"{result.get('returned', len(lines))} of {result.get('total_matches', '?')} match(es) returned"
    if why:
        tail += f"; left out: {why}"
    context = result.get("context")
    if context:
        tail += f"; context: {context['included']} record(s) (| lines), {context['over_budget']} left out over budget"
    for notice in result.get("notices") or ():
        tail += f"\nnote: {notice}"
    return "\n".join([*lines, tail])


def render_verify(report: dict[str, Any]) -> str:
    """A few lines a person can read for memory_verify's report."""
    findings = report.get("findings") or []
    head = "store verified: no findings" if report.get("ok") else f"store has {len(findings)} finding(s)"
    counts = ", ".join(f"{k} {v}" for k, v in report.items() if isinstance(v, int) and not isinstance(v, bool))
    lines = [head + (f" ({counts})" if counts else "")]
    for finding in findings[:20]:
        lines.append(f"- {finding.get('message') or finding}" if isinstance(finding, dict) else f"- {finding}")
    if len(findings) > 20:
        lines.append(f"- … and {len(findings) - 20} more in the structured result")
    return "\n".join(lines)


def client_stamp(client_params: Any) -> dict[str, str]:
    """The `client` field for a record, from the client's initialize handshake.

    A client that did not identify itself is stamped as "unknown": the stamp
    always comes from the connection, never from a tool argument.
    """
    info = getattr(client_params, "client_info", None)
    name = getattr(info, "name", None) or "unknown"
    version = getattr(info, "version", None) or "unknown"
    return {"name": str(name)[:CLIENT_FIELD_CHARS_MAX], "version": str(version)[:CLIENT_FIELD_CHARS_MAX]}


def default_directory() -> Path:
    """The store directory: RETAINED_DIR, else ~/.retained."""
    env = os.environ.get("RETAINED_DIR")
    return Path(env).expanduser() if env else Path.home() / ".retained"


class _Memory:
    """The server's handle on one store: opened on first use, one call at a time.

    Opening lazily keeps start-up free of storage work (no scan, no index
    catch-up before the first call). The lock serialises this process's calls
    into the store; other processes are serialised by the store's file lock.
    """

    def __init__(self, directory: Path, options: dict[str, Any] | None = None) -> None:
        self.directory = directory
        self.options = dict(options or {})
        self._store: Any = None
        self._lock = threading.Lock()

    def run(self, fn: Any) -> Any:
        """Call ``fn(store)`` with the store open and this process's lock held."""
        with self._lock:
            if self._store is None:
                from retained.store import Store

                self._store = Store(self.directory, **self.options)
            return fn(self._store)

    def close(self) -> None:
        """Close the store if it was opened (its index connection, its log handle)."""
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        def go(store: Any) -> Any:
            fn = getattr(store, method, None)
            if fn is None:
                raise _Unavailable(f"{method} is not available in this version of retained")
            return fn(*args, **kwargs)

        return self.run(go)


def _timeline(store: Any, around: int, window: int) -> dict[str, Any]:
    """The record ``around`` and up to ``window`` records on each side, oldest first.

    Seqs are contiguous from 1 (L2), so what lies outside the window is a
    count, not a scan.
    """
    from retained.errors import NotFound

    low, high = max(1, around - window), around + window
    entries = store.get(list(range(low, high + 1)), missing_ok=True)
    if around not in {e["seq"] for e in entries}:
        raise NotFound(f"no record with seq {around}; nothing to show around it; see memory_get without arguments")
    head = store.head()["seq"] or 0
    return {
        "records": entries,
        "returned": len(entries),
        "more": (low - 1) + max(0, head - high),
        "more_before": low - 1,
        "more_after": max(0, head - high),
    }


def _newest(store: Any, limit: int, kind: str | None, scope: str | None) -> dict[str, Any]:
    """The newest records, each with its superseded_by / retracted_by links, and how many more match."""
    listed = store.list(limit=limit, kind=kind, scope=scope)
    seqs = [entry["seq"] for entry in listed["records"]]
    linked = {entry["seq"]: entry for entry in store.get(seqs, missing_ok=True)} if seqs else {}
    records = [linked.get(entry["seq"], entry) for entry in listed["records"]]
    return {**listed, "records": records, "more": listed["total_matches"] - listed["returned"]}


class _Unavailable(Exception):
    """A store feature this build does not have (e.g. search before the index)."""


def _as_tool_error(tool: str, exc: BaseException) -> Exception:
    """The ToolError for a failure, with the stable code first."""
    from mcp.server.mcpserver.exceptions import ToolError

    from retained.errors import RetainedError

    if isinstance(exc, RetainedError):
        return ToolError(f"{exc.code}: {exc}")
    if isinstance(exc, _Unavailable):
        return ToolError(f"unavailable: {exc}; upgrade retained or use another tool")
    if isinstance(exc, OSError):
        where = f" at {exc.filename}" if exc.filename else ""
        return ToolError(
            f"os_error: {tool} could not use the store{where}: {(exc.strerror or str(exc)).lower()}; "
            "nothing was acknowledged; check that the store directory is a directory, its permissions and free space"
        )
    log.error("%s failed unexpectedly", tool, exc_info=exc)
    return ToolError(
        f"internal_error: {tool} failed with {type(exc).__name__}; nothing was acknowledged; "
        "the server's stderr has the details"
    )


def _invalid(message: str) -> Exception:
    """An invalid_argument ToolError raised from a tool body (the SDK adds the tool's name)."""
    from mcp.server.mcpserver.exceptions import ToolError

    return ToolError(f"invalid_argument: {message}")


def _describe_validation(exc: Any) -> str:
    """A sentence naming each bad argument and what was expected, never its value."""
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        if err.get("type") == "missing":
            parts.append(f"argument '{loc}' is required")
        else:
            parts.append(f"argument '{loc}': {err.get('msg', 'invalid value').lower()}")
    more = len(exc.errors()) - len(parts)
    if more > 0:
        parts.append(f"and {more} more")
    return f"{'; '.join(parts)}; nothing was written; see the tool's input schema"


def build_server(directory: Path | str | None = None, options: dict[str, Any] | None = None) -> Any:
    """Build the MCPServer with the six memory tools (and the brief, if present).

    Args:
        directory: the store directory; default RETAINED_DIR or ~/.retained.
        options: keyword arguments for ``Store`` (see ``retained.settings.store_options``).
    """
    from typing import Annotated

    from mcp.server.mcpserver import Context
    from mcp_types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import Field

    memory = _Memory(Path(directory).expanduser() if directory else default_directory(), options)

    def result(structured: dict[str, Any], text: str) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)

    def call(tool: str, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return memory.call(method, *args, **kwargs)
        except Exception as exc:
            raise _as_tool_error(tool, exc) from None

    def run(tool: str, fn: Any) -> Any:
        try:
            return memory.run(fn)
        except Exception as exc:
            raise _as_tool_error(tool, exc) from None

    def proof_result(proof: dict[str, Any]) -> CallToolResult:
        structured = {"duplicate": False, **proof}
        return result(structured, render_proof(structured))

    # Strict: a seq is a whole number as sent, never true/false or "3".
    Seq = Annotated[int, Field(ge=1, strict=True, description="a record's seq (its id, from a proof or a result)")]
    Scope = Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=200,
            description="project or topic the memory belongs to, e.g. a repository name; reads can filter by it",
        ),
    ]

    def memory_write(
        ctx: Context,
        text: Annotated[str, Field(min_length=1, description="the memory itself, in plain words; search matches it")],
        kind: Annotated[
            str,
            Field(
                min_length=1,
                max_length=64,
                description="a label such as note, decision, preference, fact, todo (default note); "
                "checkpoint, retract and redaction belong to their own tools",
            ),
        ] = "note",
        scope: Scope = None,
        source: Annotated[
            str | None, Field(min_length=1, description="where it came from: conversation, a file path, a URL")
        ] = None,
        body: Annotated[str | None, Field(description="longer detail stored with the record")] = None,
        fields: Annotated[
            dict[str, Any] | None,
            Field(
                description="extra JSON fields stored verbatim at the top level; keys that collide with "
                "reserved fields (v, seq, ts, prev, hash, client, cd, redacted) or the arguments above "
                "are refused with reserved_field"
            ),
        ] = None,
        supersedes: Annotated[
            list[Seq] | None,
            Field(
                min_length=1,
                max_length=IDS_MAX,
                description="seqs of earlier records this one corrects or replaces; they then leave search "
                "(unless asked for) and show superseded_by",
            ),
        ] = None,
        client_op_id: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description="a unique id for this write (e.g. a UUID) to make retries safe: a repeat returns "
                "the first proof with duplicate=true and writes nothing",
            ),
        ] = None,
    ) -> Annotated[CallToolResult, Proof]:
        """Append one memory to the durable, hash-chained log and return its proof.

        Use it for what should outlive this session: facts learned, decisions and
        their reasons, user preferences, results. One idea per record.

        The reply comes only after the record was written, fsynced and read back
        byte for byte; its proof (seq, hash, prev, offset, length, ts) says where the
        record is and how it links to the one before it. No proof, no memory: on any
        error nothing was written.

        Records are never edited. To correct one, write the new version with
        supersedes=[old seq]; to withdraw one, use memory_forget. Credentials are
        refused (secret_detected); text inside <private>...</private> is not stored.
        The writer (client, from the connection) and the time (ts) are stamped by the
        server and cannot be set by arguments.
        """
        if kind in OWN_KINDS:
            raise _invalid(f"kind '{kind}' is written by {OWN_KINDS[kind]}, not memory_write; nothing was written")
        client = client_stamp(ctx.session.client_params)
        proof = call(
            "memory_write",
            "write",
            text,
            kind=kind,
            scope=scope,
            source=source,
            body=body,
            fields=fields,
            supersedes=supersedes,
            client_op_id=client_op_id,
            client=client,
            related=True,
        )
        return proof_result(proof)

    def memory_checkpoint(
        ctx: Context,
        label: Annotated[
            str,
            Field(min_length=1, max_length=500, description="a short name for this point, e.g. 'auth refactor: tests green'"),
        ],
        summary: Annotated[
            str | None,
            Field(description="where the work stands: what was done, what was decided, what is next"),
        ] = None,
        scope: Scope = None,
    ) -> Annotated[CallToolResult, Proof]:
        """Append a checkpoint: a labelled summary of where the work stands, so a later session can resume.

        Write one at the end of a task or before a long pause. Checkpoints come first
        in the session-start brief. Returns the proof, as memory_write does.
        """
        client = client_stamp(ctx.session.client_params)
        return proof_result(call("memory_checkpoint", "checkpoint", label, summary=summary, scope=scope, client=client))

    def memory_get(
        ids: Annotated[
            list[Seq] | None,
            Field(min_length=1, max_length=IDS_MAX, description="exact seqs to read; not_found if one does not exist"),
        ] = None,
        limit: Annotated[
            int, Field(ge=1, le=GET_LIMIT_MAX, description="how many records at most, newest first (without ids)")
        ] = GET_LIMIT_DEFAULT,
        kind: Annotated[
            str | None, Field(min_length=1, description="only records of this kind, e.g. checkpoint")
        ] = None,
        scope: Scope = None,
        around: Annotated[
            int | None,
            Field(ge=1, strict=True, description="a seq: return the records just before and after it (a timeline)"),
        ] = None,
        window: Annotated[
            int, Field(ge=0, le=WINDOW_MAX, description="with around: how many records on each side")
        ] = WINDOW_DEFAULT,
    ) -> Annotated[CallToolResult, Records]:
        """Read full records from the log.

        - ids=[seq, ...]: exactly those records, in that order.
        - around=SEQ: the record and up to `window` records on each side, oldest
          first, to see what happened around it.
        - neither: the newest records first, optionally only one kind or scope,
          up to `limit`.

        Each record shows who wrote it (client) and when (ts). A corrected record
        carries superseded_by and a forgotten one retracted_by; both stay readable
        here. The reply says how many more matching records were not returned
        (more; more_before / more_after for around).
        """
        if ids is not None and around is not None:
            raise _invalid("give ids or around, not both; nothing was read")
        if around is not None:
            got = run("memory_get", lambda store: _timeline(store, around, window))
        elif ids is not None:
            entries = call("memory_get", "get", ids)
            got = {"records": entries, "returned": len(entries), "more": 0}
        else:
            got = run("memory_get", lambda store: _newest(store, limit, kind, scope))
        return result(got, render_records(got))

    def memory_search(
        query: Annotated[str, Field(min_length=1, max_length=2000, description="words to look for, in plain language")],
        k: Annotated[int, Field(ge=1, le=SEARCH_K_MAX, description="how many results at most")] = SEARCH_K_DEFAULT,
        scope: Scope = None,
        max_tokens: Annotated[
            int | None, Field(ge=1, description="a budget for the results' text, in estimated tokens")
        ] = None,
        include_superseded: Annotated[
            bool,
            Field(description="also return records that later records superseded (retracted ones stay hidden)"),
        ] = False,
        context: Annotated[
            int, Field(ge=0, le=CONTEXT_MAX, description="also return up to this many records of each result's "
                                                          "scope around it (a conversation's turns), within max_tokens")
        ] = 0,
    ) -> Annotated[CallToolResult, Found]:
        """Find memories by their words (and by meaning, when embeddings are configured), best first.

        Use it before answering from memory or before writing something that may
        already be recorded. Superseded and retracted records are hidden unless
        include_superseded is true. Each result is a full record read from the log
        and checked against its hash, with its client and ts.

        The reply always says what it left out and why: total_matches, returned,
        and left_out counts (beyond_k, over_budget, superseded, retracted), with
        returned + left out = matched. If much was left out, search again with a
        larger k or max_tokens, or a narrower query or scope.
        """
        found = call(
            "memory_search",
            "search",
            query,
            k=k,
            scope=scope,
            max_tokens=max_tokens,
            include_superseded=include_superseded,
            context=context,
        )
        return result(found, render_search(found, query, max_tokens))

    def memory_verify() -> Annotated[CallToolResult, Report]:
        """Check the store's integrity and return the report.

        Recomputes the hash chain over the whole log (each record's hash and its
        link to the one before) and compares the log with the search index in both
        directions. Every finding is listed: the first bad seq or offset and why,
        foreign or damaged lines, set-aside torn tails, index drift. ok=true means
        no findings. It reads the whole log: use it when something looks wrong or
        before relying on the log as evidence, not on every turn.
        """
        report = call("memory_verify", "verify")
        return result(report, render_verify(report))

    def memory_forget(
        ctx: Context,
        ids: Annotated[
            list[Seq], Field(min_length=1, max_length=IDS_MAX, description="seqs of the records to retract")
        ],
        reason: Annotated[
            str, Field(min_length=1, max_length=2000, description="why, in a sentence a person can check later")
        ],
    ) -> Annotated[CallToolResult, Proof]:
        """Retract records that are wrong or must no longer be used.

        Appends one retract record naming them and the reason. Retracted records
        leave search and the session brief; they stay in the log, readable by
        memory_get with retracted_by. Nothing is erased (erasing bytes is a
        deliberate act of the store's owner: `retained redact`). To correct a record
        rather than withdraw it, write the new version with memory_write
        supersedes=[seq]. Returns the proof of the retract record.
        """
        client = client_stamp(ctx.session.client_params)
        return proof_result(call("memory_forget", "forget", ids, reason=reason, client=client))

    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    specs = [
        (memory_write, "Write a memory", writes),
        (memory_checkpoint, "Write a checkpoint", writes),
        (memory_get, "Read records", reads),
        (memory_search, "Search memories", reads),
        (memory_verify, "Verify the store", reads),
        (memory_forget, "Retract records", writes),
    ]
    import retained

    server = _server_class()(
        specs,
        SERVER_NAME,
        version=str(getattr(retained, "__version__", "0")),
        instructions=INSTRUCTIONS,
        log_level=_log_level(),
    )
    server.memory = memory
    _add_brief(server, memory)
    return server


def _server_class() -> Any:
    """MCPServer with lazily registered tools and coded argument errors."""
    import inspect

    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import ValidationError

    class RetainedServer(MCPServer):
        """Registers its tools on the first tools/list or tools/call.

        Building the tools' argument models and schemas costs more than the
        rest of start-up together; the initialize reply does not need them.
        """

        def __init__(self, specs: list[tuple[Any, str, Any]], *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._specs = specs
            self._params: dict[str, set[str]] = {}
            self.memory: Any = None  # the _Memory the tools use; closed when serving ends

        def _register_tools(self) -> None:
            if self._params:
                return
            for fn, title, hints in self._specs:
                description = inspect.cleandoc(fn.__doc__ or "")
                annotations = hints.model_copy(update={"title": title})
                self.add_tool(fn, title=title, description=description, annotations=annotations)
                params = inspect.signature(fn).parameters
                self._params[fn.__name__] = {name for name in params if name != "ctx"}

        async def list_tools(self) -> Any:
            self._register_tools()
            return await super().list_tools()

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            self._register_tools()
            known = self._params.get(name)
            unknown = sorted(str(k)[:40] for k in arguments if known is not None and k not in known)
            if unknown:
                raise ToolError(
                    f"Error executing tool {name}: invalid_argument: unknown argument(s) "
                    f"{', '.join(unknown[:5])}; accepted: {', '.join(sorted(known or ()))}; client and ts are "
                    "stamped by the server and cannot be set; nothing was written"
                )
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                if isinstance(exc.__cause__, ValidationError):
                    message = _describe_validation(exc.__cause__)
                    raise ToolError(f"Error executing tool {name}: invalid_argument: {message}") from exc.__cause__
                raise

    return RetainedServer


INSTRUCTIONS = (
    "retained is a durable memory: an append-only, hash-chained log. Search it (memory_search) before "
    "answering from memory; write what should outlive the session (memory_write), one idea per record; "
    "correct by writing a new record with supersedes, withdraw with memory_forget; leave a memory_checkpoint "
    "at the end of a task. Every write returns a proof only after the record is on disk; every read says "
    "what it left out."
)


BRIEF_URI = "retained://brief"
BRIEF_BUDGET_MAX = 100_000


def _add_brief(server: Any, memory: _Memory) -> None:
    """Expose the session-start brief as the prompt "brief" and the resource retained://brief.

    The brief is read-only and takes no lock; retained.brief is imported on
    first use, so start-up does not pay for it.
    """
    import importlib.util
    from typing import Annotated

    from pydantic import Field

    if importlib.util.find_spec("retained.brief") is None:
        return

    def render(budget: int | None, scope: str | None) -> str:
        from retained import brief

        result = brief.build_brief(memory.directory, brief.DEFAULT_BUDGET if budget is None else budget, scope or None)
        return brief.render_text(result)

    brief_text = (
        "What this memory holds, for the start of a session: checkpoints first, then other records, "
        "newest first, within a token budget (default 1500); it always says how many records it left "
        "out and why. Optional: budget (tokens), scope (one project or topic)."
    )

    @server.prompt(name="brief", title="Session brief", description=brief_text)
    def brief_prompt(
        budget: Annotated[str, Field(description="how many tokens the brief may use (default 1500)")] = "",
        scope: Annotated[str, Field(description="only records of this project or topic")] = "",
    ) -> str:
        value = budget.strip()
        if value and (not value.isdigit() or int(value) > BRIEF_BUDGET_MAX):
            from mcp.shared.exceptions import MCPError
            from mcp_types import INVALID_PARAMS

            raise MCPError(
                INVALID_PARAMS,
                f"invalid_argument: budget must be a whole number of tokens from 0 to {BRIEF_BUDGET_MAX}",
                {"code": "invalid_argument", "argument": "budget"},
            )
        return render(int(value) if value else None, scope.strip() or None)

    @server.resource(BRIEF_URI, name="brief", title="Session brief", mime_type="text/plain")
    def brief_resource() -> str:
        """The session-start brief with the default budget: checkpoints first, newest first, what was left out."""
        return render(None, None)


def _log_level() -> str:
    level = os.environ.get("RETAINED_LOG_LEVEL", "WARNING").upper()
    return level if level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL") else "WARNING"


def _configure_logging() -> None:
    # stdout carries JSON-RPC on stdio; everything we say goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=_log_level(), format="retained: %(levelname)s %(name)s: %(message)s")


def is_loopback(host: str) -> bool:
    """True for an address or name that only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _HttpGuard:
    """ASGI wrapper: Host and Origin checks (DNS rebinding), then the bearer token.

    Runs before the MCP transport sees the request. The token is compared in
    constant time and never logged.
    """

    def __init__(self, app: Any, *, token: str | None, hosts: set[str]) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.hosts = hosts

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        if _host_name(headers.get("host", "")) not in self.hosts:
            await _reply(send, 421, "host not allowed: this server answers only to its own names; add one with --allow-host")
            return
        origin = headers.get("origin")
        if origin is not None and not self._origin_ok(origin):
            await _reply(send, 403, "origin not allowed: cross-site requests are refused")
            return
        if self.token is not None:
            given = headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            ok = scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self.token)
            if not ok:
                challenge = {"www-authenticate": 'Bearer realm="retained"'}
                await _reply(send, 401, "missing or wrong bearer token", challenge)
                return
        await self.app(scope, receive, send)

    def _origin_ok(self, origin: str) -> bool:
        # A browser sends Origin; a page from any other site must not reach the store.
        scheme, sep, rest = origin.strip().lower().partition("://")
        return bool(sep) and scheme in ("http", "https") and _host_name(rest) in self.hosts


def _host_name(value: str) -> str:
    """The host part of a Host header or origin authority, lower case, without port or brackets."""
    value = value.strip().lower().split("/", 1)[0]
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


async def _reply(send: Any, status: int, text: str, extra: dict[str, str] | None = None) -> None:
    body = (text + "\n").encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main(
    *,
    directory: Path | str | None = None,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = HTTP_PORT_DEFAULT,
    allow_hosts: list[str] | tuple[str, ...] = (),
) -> int:
    """Serve MCP on stdio (default) or streamable HTTP; return the exit status."""
    _configure_logging()
    token = os.environ.get("RETAINED_TOKEN") or None
    if http and not is_loopback(host) and token is None:
        print(
            f"retained: refusing to serve on {host}: it is reachable from other machines; "
            "set RETAINED_TOKEN to a long random secret (clients then send 'Authorization: Bearer <token>') "
            "or bind 127.0.0.1",
            file=sys.stderr,
        )
        return 2
    from retained.errors import RetainedError
    from retained.settings import store_options

    try:
        # A long-lived server embeds new records on a background thread when
        # embeddings are configured; the acknowledgement never waits for it.
        options = {**store_options(), "follow_writes": True}
    except RetainedError as exc:
        print(f"retained: {exc}", file=sys.stderr)
        return 2
    server = build_server(directory, options)
    try:
        if not http:
            import anyio

            anyio.run(server.run_stdio_async)
            return 0
        body_max = options.get("record_bytes_max", limits.RECORD_BYTES_MAX) + HTTP_BODY_SLACK_BYTES
        return _serve_http(server, host=host, port=port, token=token, allow_hosts=allow_hosts, body_max=body_max)
    finally:
        server.memory.close()


def _serve_http(server: Any, *, host: str, port: int, token: str | None, allow_hosts: Any, body_max: int) -> int:
    import socket

    import anyio
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    # Host names this server answers to: loopback, the address it is bound to
    # (or this machine's name for a wildcard bind), and any --allow-host.
    hosts = set(LOOPBACK_HOSTS)
    hosts.add(socket.gethostname().lower() if host in ("0.0.0.0", "::", "") else host.lower().strip("[]"))
    hosts.update(_host_name(h) for h in allow_hosts)
    # The SDK's own Host/Origin check, given the same names, backs ours up.
    authorities = sorted(f"[{h}]" if ":" in h else h for h in hosts)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*authorities, *(f"{a}:*" for a in authorities)],
        allowed_origins=[f"{s}://{a}{p}" for s in ("http", "https") for a in authorities for p in ("", ":*")],
    )
    app = server.streamable_http_app(
        streamable_http_path=HTTP_PATH, transport_security=security, host=host, max_request_body_size=body_max
    )
    guarded = _HttpGuard(app, token=token, hosts=hosts)

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        print(f"retained: cannot listen on {host}:{port}: {exc.strerror}; choose another --port", file=sys.stderr)
        sock.close()
        return 1
    sock.listen(128)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    auth = "bearer token required" if token else "no token (loopback only)"
    print(f"retained: serving MCP on http://{shown}:{bound}{HTTP_PATH} ({auth})", file=sys.stderr, flush=True)
    config = uvicorn.Config(guarded, log_config=None, access_log=False, lifespan="on", log_level=_log_level().lower())
    anyio.run(uvicorn.Server(config).serve, [sock])
    return 0


def serve(args: Any) -> int:
    """Entry from ``retained serve`` (and bare ``retained``): options from the CLI's parser."""
    return main(
        directory=getattr(args, "dir", None),
        http=bool(getattr(args, "http", False)),
        host=getattr(args, "host", None) or "127.0.0.1",
        port=HTTP_PORT_DEFAULT if getattr(args, "port", None) is None else args.port,
        allow_hosts=getattr(args, "allow_host", None) or (),
    )
