"""The MCP tools: the six ``memory_*`` tools, the brief as a prompt and a resource, and their errors.

Each tool is a few lines over one ``Store`` method: its typed, described
arguments (the SDK turns them into the input schema), the call, and the reply
as structured content (the Store's dict, shaped as ``retained.shapes``
declares) with its text form from ``retained.render``. A failure becomes a
``ToolError`` whose message starts with a stable code (the store's, from
``retained.errors``, or ``os_error`` / ``internal_error``) and says what to do. ``mcp`` and ``pydantic`` are imported only when the tools
are built (``tool_specs``), never when this module is imported.
"""

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from retained import limits, render
from retained.core import pool
from retained.shapes import Found, Proof, Records, Report

if TYPE_CHECKING:
    from retained.replies import WriteProof
    from retained.store import Store

T = TypeVar("T")

log = logging.getLogger("retained.mcp.server")

GET_LIMIT_DEFAULT = 20
IDS_MAX = 500
CLIENT_FIELD_CHARS_MAX = 200  # a client name or version longer than this is cut

# Kinds the store writes through its own tools; memory_write refuses them.
OWN_KINDS = {"checkpoint": "memory_checkpoint", "retract": "memory_forget", "redaction": "retained redact (CLI)",
             "quarantine": "retained quarantine (CLI)"}


def client_stamp(client_params: Any) -> dict[str, str]:
    """The `client` field for a record, from the client's initialize handshake.

    A client that did not identify itself is stamped as "unknown": the stamp
    always comes from the connection, never from a tool argument.
    """
    info = getattr(client_params, "client_info", None)
    name = getattr(info, "name", None) or "unknown"
    version = getattr(info, "version", None) or "unknown"
    return {"name": str(name)[:CLIENT_FIELD_CHARS_MAX], "version": str(version)[:CLIENT_FIELD_CHARS_MAX]}


class Memory:
    """The server's handle on one store, opened on first use and shared by every handler.

    Opening lazily keeps start-up free of storage work (no scan, no index
    catch-up before the first call). Calls are not serialised here: handlers
    run in worker threads, and the Store is made for sharing -- its writes
    from concurrent handlers join one group commit (one fsync for those that
    arrive together, each acknowledged with its own proof), its index is
    guarded by its own lock, and other processes are serialised by the
    store's file lock.
    """

    def __init__(self, directory: Path, options: dict[str, Any] | None = None) -> None:
        self.directory = directory
        self.options = dict(options or {})
        self._store: Store | None = None  # function scope: not evaluated at run time
        self._lock = threading.Lock()

    def run(self, fn: "Callable[[Store], T]") -> T:
        """Call ``fn(store)`` with the store open (opened once, under the lock)."""
        store = self._store
        if store is None:
            with self._lock:
                if self._store is None:
                    from retained.store import Store

                    self._store = Store(self.directory, **self.options)
                store = self._store
        return fn(store)

    def close(self) -> None:
        """Close the store if it was opened (its index connection, its log handle)."""
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()


def _bounded(reply: Mapping[str, Any], bytes_max: int) -> dict[str, Any]:
    """``reply`` (a Records reply) cut to records of ``bytes_max`` stored bytes in all (at least one), saying what was cut.

    The bound is the record limit: a reply carries at most one largest
    record's worth (500 records of 16 MiB would otherwise be one reply of
    8 GB), and the first record always comes back whole.

    What was cut is counted in ``more`` and named in ``left_out_for_size``
    (their seqs, and how to read them), so the reply still accounts for
    every record it matched (I2).
    """
    got = dict(reply)
    entries = got["records"]
    total = 0
    for i, entry in enumerate(entries):
        total += int(entry.get("length") or 0)
        if i and total > bytes_max:
            cut = entries[i:]
            got["records"] = entries[:i]
            got["returned"] = i
            got["more"] = got.get("more", 0) + len(cut)
            got["left_out_for_size"] = {
                "seqs": [e["seq"] for e in cut],
                "reply_bytes_max": bytes_max,
                "message": f"{len(cut)} record(s) left out: the reply holds at most {bytes_max} bytes of records; "
                           "read them with memory_get ids=[...] in smaller groups",
            }
            break
    return got


def _as_tool_error(tool: str, exc: BaseException) -> Exception:
    """The ToolError for a failure, with the stable code first."""
    from mcp.server.mcpserver.exceptions import ToolError

    from retained.errors import RetainedError

    if isinstance(exc, RetainedError):
        return ToolError(f"{exc.code}: {exc}")
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


def invalid_params(argument: str, message: str) -> Exception:
    """The JSON-RPC invalid-params error for a bad ``argument`` of a request other than a tool call."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS

    return MCPError(INVALID_PARAMS, f"invalid_argument: {message}", {"code": "invalid_argument", "argument": argument})


def describe_validation(exc: Any) -> str:
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


def tool_specs(memory: Memory) -> list[tuple[Any, str, Any]]:
    """The six tools over ``memory``'s store, each as ``(function, title, annotations)``, for registration."""
    from typing import Annotated

    from mcp.server.mcpserver import Context
    from mcp_types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import Field

    from retained.settings import related_on

    ask_related = related_on()  # RETAINED_RELATED, read once: the server's writes ask for related records or never

    def result(structured: Mapping[str, Any], text: str) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=dict(structured))

    def call(tool: str, fn: "Callable[[Store], T]") -> T:
        try:
            return memory.run(fn)
        except Exception as exc:  # noqa: BLE001 - the edge: every failure becomes a coded tool error
            raise _as_tool_error(tool, exc) from None

    def session_key(ctx: Context) -> str:
        """Whose writes a read speaks for: the one stdio connection; over HTTP, the session its Mcp-Session-Id names,
        or, where the protocol has none, the client (its name and version from the handshake) on its host."""
        request = getattr(ctx.request_context, "request", None)
        if request is None:
            return "stdio"
        session = request.headers.get("mcp-session-id")
        if session:
            return f"http session {session}"
        client = client_stamp(ctx.session.client_params)
        return f"http {request.client.host if request.client else ''} {client['name']} {client['version']}"

    def with_writes(ctx: Context, reply: Mapping[str, Any], text: str) -> CallToolResult:
        """A read's reply with what the session's writes may correct (``Store.related_to_writes``), when they left any."""
        if not ask_related:
            return result(reply, text)
        try:
            found = memory.run(lambda store: store.related_to_writes(session_key(ctx)))
        except Exception:  # a hint the read adds never fails the read
            log.exception("the related steps of this session's writes failed; the read is answered without them")
            return result(reply, text)
        if found is None:
            return result(reply, text)
        return result({**reply, "related_to_writes": found}, "\n".join([text, *render.related_to_writes(found)]))

    def proof_result(proof: "WriteProof") -> CallToolResult:
        structured = {"duplicate": False, **proof}
        return result(structured, render.proof(structured))

    # Strict: a seq is a whole number as sent, never true/false or "3".
    Seq = Annotated[
        int, Field(ge=1, le=limits.SEQ_MAX, strict=True, description="a record's seq (its id, from a proof or a result)")
    ]
    Scope = Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=limits.SCOPE_CHARS_MAX,
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
                max_length=limits.CLIENT_OP_ID_CHARS_MAX,
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
        supersedes=[old seq]; to withdraw one, use memory_forget. Your next
        memory_search or memory_get names earlier records a write looks like it
        may correct (related_to_writes), so you can supersede them. Credentials are
        refused (secret_detected); text inside <private>...</private> is not stored.
        The writer (client, from the connection) and the time (ts) are stamped by the
        server and cannot be set by arguments.
        """
        if kind in OWN_KINDS:
            raise _invalid(f"kind '{kind}' is written by {OWN_KINDS[kind]}, not memory_write; nothing was written")
        client = client_stamp(ctx.session.client_params)
        proof = call("memory_write", lambda store: store.write(
            text, kind=kind, scope=scope, source=source, body=body, fields=fields, supersedes=supersedes,
            client_op_id=client_op_id, client=client, related=ask_related, later=session_key(ctx),
        ))
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
        return proof_result(call("memory_checkpoint", lambda store: store.checkpoint(label, summary=summary, scope=scope,
                                                                                   client=client)))

    def memory_get(
        ctx: Context,
        ids: Annotated[
            list[Seq] | None,
            Field(min_length=1, max_length=IDS_MAX, description="exact seqs to read; not_found if one does not exist"),
        ] = None,
        limit: Annotated[
            int, Field(ge=1, le=limits.LIST_LIMIT_MAX, description="how many records at most, newest first (without ids)")
        ] = GET_LIMIT_DEFAULT,
        kind: Annotated[
            str | None, Field(min_length=1, description="only records of this kind, e.g. checkpoint")
        ] = None,
        scope: Scope = None,
        around: Annotated[
            int | None,
            Field(ge=1, le=limits.SEQ_MAX, strict=True,
                  description="a seq: return the records just before and after it (a timeline)"),
        ] = None,
        window: Annotated[
            int, Field(ge=0, le=limits.TIMELINE_WINDOW_MAX, description="with around: how many records on each side")
        ] = limits.TIMELINE_WINDOW_DEFAULT,
        store_id: Annotated[
            str | None,
            Field(min_length=8, max_length=32, pattern="^[0-9a-f]+$",
                  description="with ids or around: read another store's records, pulled by `retained sync` (a result's "
                              "origin.store_id, or its first 8 hex digits); default this store"),
        ] = None,
    ) -> Annotated[CallToolResult, Records]:
        """Read full records from the log.

        - ids=[seq, ...]: exactly those records, in that order.
        - around=SEQ: the record and up to `window` records on each side, oldest
          first, to see what happened around it.
        - neither: the newest records first, optionally only one kind or scope,
          up to `limit`.
        - store_id (with ids or around): in another store pulled by `retained
          sync`, as a search result's origin names it; its records carry origin.

        Each record shows who wrote it (client) and when (ts). A corrected record
        carries superseded_by and a forgotten one retracted_by; both stay readable
        here. The reply says how many more matching records were not returned
        (more; more_before / more_after for around).
        """
        if ids is not None and around is not None:
            raise _invalid("give ids or around, not both; nothing was read")
        if store_id is not None and ids is None and around is None:
            raise _invalid("store_id goes with ids=[...] or around=SEQ (seqs of that store, as its search results "
                           "give them); nothing was read")
        got: Mapping[str, Any]
        if around is not None:
            got = call("memory_get", lambda store: store.timeline(around, window=window, store_id=store_id))
        elif ids is not None:
            entries = call("memory_get", lambda store: store.get(ids, store_id=store_id))
            got = {"records": entries, "returned": len(entries), "more": 0}
        else:
            got = call("memory_get", lambda store: store.list(limit=limit, kind=kind, scope=scope))
        got = _bounded(got, memory.options.get("record_bytes_max") or limits.RECORD_BYTES_MAX)
        return with_writes(ctx, got, render.records(got, whole=True))

    def memory_search(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, max_length=2000, description="words to look for, in plain language")],
        k: Annotated[int, Field(ge=1, le=limits.SEARCH_K_MAX, description="how many results at most")] = limits.SEARCH_K_DEFAULT,
        scope: Scope = None,
        max_tokens: Annotated[
            int | None, Field(ge=1, description="a budget for the results' text, in estimated tokens")
        ] = None,
        include_superseded: Annotated[
            bool,
            Field(description="also return records that later records superseded (retracted ones stay hidden)"),
        ] = False,
        context: Annotated[
            int, Field(ge=0, le=limits.CONTEXT_MAX, description="also return up to this many records of each result's "
                                                          "scope around it (a conversation's turns), within max_tokens")
        ] = 0,
    ) -> Annotated[CallToolResult, Found]:
        """Find memories by their words (and by meaning, when embeddings are configured), best first.

        Use it before answering from memory or before writing something that may
        already be recorded. Superseded and retracted records are hidden unless
        include_superseded is true. Each result is a full record read from the log
        and checked against its hash, with its client and ts (when max_tokens is
        smaller than the best result alone, that result is cut to the part around
        the query's words, marked cut, with how to read it whole).

        The reply always says what it left out and why: total_matches, returned,
        and left_out counts (beyond_k, over_budget, superseded, retracted), with
        returned + left out = matched. If much was left out, search again with a
        larger k or max_tokens, or a narrower query or scope.
        """
        found = call("memory_search", lambda store: store.search(
            query, k=k, scope=scope, max_tokens=max_tokens, include_superseded=include_superseded, context=context,
        ))
        return with_writes(ctx, found, render.search(found, query=query, max_tokens=max_tokens, whole=True))

    def memory_verify() -> Annotated[CallToolResult, Report]:
        """Check the store's integrity and return the report.

        Recomputes the hash chain over the whole log (each record's hash and its
        link to the one before) and compares the log with the search index in both
        directions. Every finding is listed: the first bad seq or offset and why,
        foreign or damaged lines, set-aside torn tails, index drift. ok=true means
        no findings. It reads the whole log: use it when something looks wrong or
        before relying on the log as evidence, not on every turn.
        """
        # The server is an edge started by a guarded entry point: it asks for workers, as `retained verify` does.
        report = call("memory_verify", lambda store: store.verify(workers=pool.cpu_workers()))
        return result(report, render.verify(report))

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
        return proof_result(call("memory_forget", lambda store: store.forget(ids, reason=reason, client=client)))

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
    return specs


INSTRUCTIONS = (
    "retained is a durable memory: an append-only, hash-chained log. Search it (memory_search) before "
    "answering from memory; write what should outlive the session (memory_write), one idea per record; "
    "correct by writing a new record with supersedes, withdraw with memory_forget; leave a memory_checkpoint "
    "at the end of a task. Every write returns a proof only after the record is on disk; every read says "
    "what it left out."
)


BRIEF_URI = "retained://brief"
BRIEF_BUDGET_MAX = 100_000


def add_brief(server: Any, memory: Memory) -> None:
    """Expose the session-start brief as the prompt "brief" and the resource retained://brief.

    The brief is read-only and takes no lock; retained.brief.compose is imported on
    first use, so start-up does not pay for it.
    """
    import importlib.util
    from typing import Annotated

    from pydantic import Field

    if importlib.util.find_spec("retained.brief.compose") is None:
        return

    def brief_text_of(budget: int | None, scope: str | None) -> str:
        import os

        from retained.brief import compose as brief
        from retained.brief.session import session_brief

        # A brief read here starts a session as the hook's does, so it records
        # the head it read in the same place (docs/anchors.md).
        return brief.render_text(session_brief(memory.directory, budget, scope or None, environ=os.environ))

    brief_text = (
        "What this memory holds, for the start of a session: checkpoints first, then other records, "
        f"newest first, within a token budget (default {limits.BRIEF_BUDGET_DEFAULT}); it always says how many "
        "records it left out and why. Optional: budget (tokens), scope (one project or topic)."
    )

    @server.prompt(name="brief", title="Session brief", description=brief_text)
    def brief_prompt(
        budget: Annotated[str, Field(description=f"how many tokens the brief may use (default {limits.BRIEF_BUDGET_DEFAULT})")] = "",
        scope: Annotated[str, Field(description="only records of this project or topic")] = "",
    ) -> str:
        value = budget.strip()
        if value and (not value.isdigit() or int(value) > BRIEF_BUDGET_MAX):
            raise invalid_params("budget", f"budget must be a whole number of tokens from 0 to {BRIEF_BUDGET_MAX}")
        return brief_text_of(int(value) if value else None, scope.strip() or None)

    @server.resource(BRIEF_URI, name="brief", title="Session brief", mime_type="text/plain")
    def brief_resource() -> str:
        """The session-start brief with the default budget: checkpoints first, newest first, what was left out."""
        return brief_text_of(None, None)

