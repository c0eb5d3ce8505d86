"""The MCP server: builds it (``build_server``) and serves it on stdio or streamable HTTP (``main``).

The tools live in ``retained.mcp.tools``, the HTTP access guard in
``retained.http_guard``, the stdio front (every request answered, signals
obeyed) in ``retained.mcp.stdio``, the text forms in ``retained.render``. This module is
an edge: it reads the environment, configures logging (stderr only: stdout is
the protocol on stdio) and exits. ``mcp`` is imported only inside
``build_server()`` and ``main()``, so importing ``retained`` never pays for it.
"""

import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from retained import limits, paths
from retained.http_guard import refusal
from retained.mcp.tools import INSTRUCTIONS, Memory, add_brief, tool_specs
from retained.version import __version__

SERVER_NAME = "retained"
HTTP_PORT_DEFAULT = 8765
HTTP_PATH = "/mcp"
HTTP_SESSIONS_MAX = 1000  # MCP sessions open at once over HTTP; a new one beyond it is refused
HTTP_BODY_SLACK_BYTES = 1024 * 1024  # a request (HTTP body, stdio line) may exceed the record limit by the JSON-RPC envelope


def build_server(directory: Path | str | None = None, options: dict[str, Any] | None = None) -> Any:
    """Build the MCPServer with the six memory tools and the brief.

    Args:
        directory: the store directory; default RETAINED_DIR or ~/.retained.
        options: keyword arguments for ``Store`` (see ``retained.settings.store_options``).
    """
    memory = Memory(paths.store_dir(directory), options)
    server = _server_class()(
        tool_specs(memory),
        SERVER_NAME,
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level=_log_level(),
    )
    server.memory = memory
    add_brief(server, memory)
    return server


def _server_class() -> Any:
    """MCPServer with lazily registered tools and coded argument errors."""
    import inspect

    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import ValidationError

    from retained.mcp.tools import describe_validation, invalid_params

    class RetainedServer(MCPServer):
        """Registers its tools on the first tools/list or tools/call.

        Building the tools' argument models and schemas costs more than the
        rest of start-up together; the initialize reply does not need them.
        """

        def __init__(self, specs: list[tuple[Any, str, Any]], *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._specs = specs
            self._params: dict[str, set[str]] = {}
            # `warm` may register the tools on its thread while the event loop asks for them.
            self._registering = threading.Lock()
            self.memory: Any = None  # the Memory the tools use; closed when serving ends

        def _register_tools(self) -> None:
            if self._params:
                return
            with self._registering:
                if self._params:
                    return
                params: dict[str, set[str]] = {}
                for fn, title, hints in self._specs:
                    description = inspect.cleandoc(fn.__doc__ or "")
                    annotations = hints.model_copy(update={"title": title})
                    self.add_tool(fn, title=title, description=description, annotations=annotations)
                    params[fn.__name__] = {name for name in inspect.signature(fn).parameters if name != "ctx"}
                self._params = params  # set whole, last: a non-empty _params means every tool is there

        async def list_tools(self) -> Any:
            self._register_tools()
            return await super().list_tools()

        async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
            known = sorted(p.name for p in await self.list_prompts())
            if name not in known:
                raise invalid_params("name", f"no prompt named {str(name)[:40]!r}; the prompts are: {', '.join(known)}")
            return await super().get_prompt(name, arguments, context)

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
                    message = describe_validation(exc.__cause__)
                    raise ToolError(f"Error executing tool {name}: invalid_argument: {message}") from exc.__cause__
                raise

    return RetainedServer


def warm(server: Any) -> None:
    """Do now what the first calls would otherwise wait for: register the tools, load the store's write path.

    Run on a thread once the HTTP server listens, where many clients may
    make their first call at once. Touches no file of the store; a failure
    here (a store directory that is a file...) is left for the first call
    to report, as it would have been.
    """
    from retained.errors import RetainedError

    log = logging.getLogger(__name__)
    try:
        server._register_tools()
        server.memory.run(lambda store: store.warm())
    except (RetainedError, OSError) as exc:  # the call that meets it reports it, with its code
        log.debug("warming up stopped (%s); the first call will say why", exc)
    else:
        log.debug("warmed up: tools registered, the write path loaded")


def _log_level() -> str:
    level = os.environ.get("RETAINED_LOG_LEVEL", "WARNING").upper()
    return level if level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL") else "WARNING"


def _configure_logging() -> None:
    # stdout carries JSON-RPC on stdio; everything we say goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=_log_level(), format="retained: %(levelname)s %(name)s: %(message)s")


def main(
    *,
    directory: Path | str | None = None,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = HTTP_PORT_DEFAULT,
    allow_hosts: list[str] | tuple[str, ...] = (),
    allow_origins: list[str] | tuple[str, ...] = (),
) -> int:
    """Serve MCP on stdio (default) or streamable HTTP; return the exit status."""
    _configure_logging()
    token = os.environ.get("RETAINED_TOKEN") or None
    if http and refusal(host, token):
        print(f"retained: {refusal(host, token)}", file=sys.stderr)
        return 2
    from retained.errors import RetainedError
    from retained.settings import http_settings, store_options

    try:
        # A long-lived server embeds new records on a background thread when
        # embeddings are configured; the acknowledgement never waits for it.
        options = {**store_options(), "follow_writes": True}
        bounds, session_idle_s = http_settings()
    except RetainedError as exc:
        print(f"retained: {exc}", file=sys.stderr)
        return 2
    server = build_server(directory, options)
    body_max = options.get("record_bytes_max", limits.RECORD_BYTES_MAX) + HTTP_BODY_SLACK_BYTES
    try:
        if not http:
            import anyio

            from retained.mcp import stdio as mcp_stdio

            return anyio.run(lambda: mcp_stdio.serve(server, line_bytes_max=body_max))
        return _serve_http(server, host=host, port=port, token=token, allow_hosts=allow_hosts,
                           allow_origins=allow_origins, body_max=body_max, bounds=bounds, session_idle_s=session_idle_s)
    finally:
        server.memory.close()


def _serve_http(server: Any, *, host: str, port: int, token: str | None, allow_hosts: Any, allow_origins: Any,
                body_max: int, bounds: Any, session_idle_s: float) -> int:
    from retained.http_guard import Listening, bind, origin_text, serve

    try:
        sock = bind(host, port)
    except OSError as exc:
        print(f"retained: cannot listen on {host}:{port}: {exc.strerror}; choose another --port", file=sys.stderr)
        return 1

    def make_app(listening: Listening) -> Any:
        from mcp.server.transport_security import TransportSecuritySettings

        # The SDK's own Host/Origin check, given the same names and origins, backs ours up.
        authorities = sorted(f"[{h}]" if ":" in h else h for h in listening.hosts)
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[*authorities, *(f"{a}:*" for a in authorities)],
            allowed_origins=sorted(origin_text(o) for o in listening.origins),
        )
        # Idle sessions close (each holds memory); a cap stops a client opening them without end.
        return server.streamable_http_app(
            streamable_http_path=HTTP_PATH, transport_security=security, host=host, max_request_body_size=body_max,
            session_idle_timeout=session_idle_s, max_sessions=HTTP_SESSIONS_MAX,
        )

    def ready(listening: Listening) -> None:
        auth = "bearer token required" if token else "no token (loopback only)"
        print(f"retained: serving MCP on {listening.url(HTTP_PATH)} ({auth})", file=sys.stderr, flush=True)
        threading.Thread(target=warm, args=(server,), name="retained-warm", daemon=True).start()

    try:
        serve(make_app, sock, token=token, allow_hosts=allow_hosts, allow_origins=allow_origins, on_ready=ready,
              log_level=_log_level().lower(), bounds=bounds)
    except ValueError as exc:
        print(f"retained: {exc}", file=sys.stderr)
        return 2
    finally:
        sock.close()
    return 0


def serve(args: Any) -> int:
    """Entry from ``retained serve`` (and bare ``retained``): options from the CLI's parser."""
    return main(directory=args.dir, http=args.http, host=args.host or "127.0.0.1", port=args.port,
                allow_hosts=args.allow_host or (), allow_origins=args.allow_origin or ())
