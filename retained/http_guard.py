"""The HTTP access guard: which hosts, origins and bearer tokens may reach the store over HTTP.

`HttpGuard` is an ASGI wrapper that checks the Host header (DNS rebinding), a
browser's Origin (this server's own, or one the user allowed) and, when one is
set, the token, before the application sees a request. ``serve`` binds, wraps
and runs an ASGI application behind it, within `Bounds`: the MCP server's
streamable HTTP transport and the viewer both run so. Standard library only at
import; ``serve`` imports uvicorn when called.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
DEFAULT_PORTS = {"http": 80, "https": 443}
# The cookie a browser keeps the token in, once given as ?token= (the viewer only).
TOKEN_COOKIE = "retained_token"
# How long Ctrl-C waits for open requests and streams before the server closes them.
SHUTDOWN_WAIT_S = 3

Origin = tuple[str, str, int]

TOKEN_CHARS_MIN = 16  # a shorter RETAINED_TOKEN is guessable by a patient client
HEADER_READ_S = 10.0  # a request's line and headers must arrive within this (slow-header attacks)
CONNECTIONS_MAX = 512  # open connections in all; beyond it a new one is answered 503 and closed
CLIENT_CONNECTIONS_MAX = 64  # open connections from one address
TOKEN_FAILURES_MAX = 20  # wrong tokens one address may send within TOKEN_FAILURE_WINDOW_S before a 429
TOKEN_FAILURE_WINDOW_S = 60.0
TOKEN_FAILURE_CLIENTS_MAX = 10_000  # addresses remembered for that count (oldest forgotten first)


class Bounds:
    """The limits ``serve`` holds a server to before a request reaches the guard, and why: docs/mcp.md (HTTP)."""

    def __init__(self, *, header_read_s: float = HEADER_READ_S, connections_max: int = CONNECTIONS_MAX,
                 client_connections_max: int = CLIENT_CONNECTIONS_MAX, token_failures_max: int = TOKEN_FAILURES_MAX,
                 token_failure_window_s: float = TOKEN_FAILURE_WINDOW_S) -> None:
        self.header_read_s = header_read_s
        self.connections_max = connections_max
        self.client_connections_max = client_connections_max
        self.token_failures_max = token_failures_max
        self.token_failure_window_s = token_failure_window_s


def token_problem(token: str | None) -> str | None:
    """Why ``token`` (RETAINED_TOKEN) cannot guard a server, or None when it can (or none is set)."""
    if token is None:
        return None
    if any(c.isspace() for c in token):
        return ("RETAINED_TOKEN holds whitespace, which a client's header would not carry intact; "
                "use the one `retained token` prints")
    if len(token) < TOKEN_CHARS_MIN:
        return (f"RETAINED_TOKEN is {len(token)} characters, under the minimum of {TOKEN_CHARS_MIN}: it could be "
                "guessed; use the one `retained token` prints")
    return None


def is_loopback(host: str) -> bool:
    """True for an address or name that only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def refusal(host: str, token: str | None) -> str | None:
    """Why a server must not bind ``host`` (reachable from other machines, no token set; a weak token), or None when it may."""
    problem = token_problem(token)
    if problem is not None:
        return f"refusing to serve: {problem}"
    if token is None and not is_loopback(host):
        return (f"refusing to serve on {host}: it is reachable from other machines; set RETAINED_TOKEN to a long "
                "random secret (clients then send 'Authorization: Bearer <token>') or bind 127.0.0.1")
    return None


def host_name(value: str) -> str:
    """The host part of a Host header or origin authority, lower case, without port or brackets."""
    value = value.strip().lower().split("/", 1)[0]
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def allowed_hosts(bind: str, extra: Iterable[str] = ()) -> set[str]:
    """The host names a server bound to ``bind`` answers to.

    Loopback, the address it is bound to (or this machine's name for a
    wildcard bind), and any ``extra`` name (``--allow-host``).
    """
    hosts = set(LOOPBACK_HOSTS)
    hosts.add(socket.gethostname().lower() if bind in ("0.0.0.0", "::", "") else bind.lower().strip("[]"))
    hosts.update(host_name(h) for h in extra)
    return hosts


def parse_origin(value: str) -> Origin | None:
    """``(scheme, host, port)`` of an Origin header or an ``--allow-origin`` value; None if it is not one.

    The port defaults to the scheme's (80, 443); ``null``, a path, user
    information or a scheme other than http and https is not an origin a
    browser page of this server can have.
    """
    scheme, sep, rest = value.strip().lower().partition("://")
    if not sep or scheme not in DEFAULT_PORTS:
        return None
    rest = rest[:-1] if rest.endswith("/") else rest
    if not rest or any(c in rest for c in "/?#@ \\"):
        return None
    port_text = ""
    if rest.startswith("["):
        host, bracket, after = rest[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            return None
        port_text = after[1:]
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    elif ":" in rest:
        return None  # an IPv6 address must be bracketed in an origin
    else:
        host = rest
    if not host:
        return None
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            return None
        return scheme, host, int(port_text)
    return scheme, host, DEFAULT_PORTS[scheme]


def allowed_origins(hosts: Iterable[str], port: int, extra: Iterable[str] = ()) -> set[Origin]:
    """The origins a server listening on ``port`` accepts: ``http://`` each of its ``hosts`` on that port, and ``extra``.

    Raises:
        ValueError: an ``extra`` value is not an origin (``scheme://host[:port]``).
    """
    origins = {("http", h, port) for h in hosts}
    for value in extra:
        parsed = parse_origin(value)
        if parsed is None:
            raise ValueError(f"--allow-origin {value!r} is not an origin; give scheme://host[:port], "
                             "e.g. https://memory.example.org")
        origins.add(parsed)
    return origins


def origin_text(origin: Origin) -> str:
    """An origin as a browser sends it (no default port)."""
    scheme, host, port = origin
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + ("" if DEFAULT_PORTS[scheme] == port else f":{port}")


class HttpGuard:
    """ASGI wrapper: Host and Origin checks (DNS rebinding, cross-site and cross-port requests), then the token.

    Runs before the wrapped application sees the request. The token is
    compared in constant time and never logged. With ``token_cookie`` a
    browser may also give the token once as ``?token=``: the reply is a
    redirect to the same page without it that sets an HttpOnly, SameSite
    cookie holding it, which later requests carry.
    """

    def __init__(self, app: Any, *, token: str | None, hosts: set[str], origins: set[Origin],
                 token_cookie: bool = False, bounds: Bounds | None = None) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.hosts = hosts
        self.origins = origins
        self.token_cookie = token_cookie
        self.bounds = bounds or Bounds()
        self.failures: dict[str, deque[float]] = {}  # address -> times of its recent wrong tokens

    def _refused_for_failures(self, client: str) -> float:
        """Seconds ``client`` must still wait after too many wrong tokens (0: it may try)."""
        times = self.failures.get(client)
        if times is None:
            return 0.0
        window = self.bounds.token_failure_window_s
        now = time.monotonic()
        while times and now - times[0] >= window:
            times.popleft()
        if not times:
            del self.failures[client]
            return 0.0
        return window - (now - times[0]) if len(times) >= self.bounds.token_failures_max else 0.0

    def _failed(self, client: str) -> None:
        times = self.failures.pop(client, None) or deque(maxlen=self.bounds.token_failures_max)
        times.append(time.monotonic())
        self.failures[client] = times  # re-inserted: the dict stays ordered oldest first
        while len(self.failures) > TOKEN_FAILURE_CLIENTS_MAX:
            del self.failures[next(iter(self.failures))]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        if host_name(headers.get("host", "")) not in self.hosts:
            await _reply(send, 421, "host not allowed: this server answers only to its own names; add one with --allow-host")
            return
        origin = headers.get("origin")
        if origin is not None and parse_origin(origin) not in self.origins:
            await _reply(send, 403, "origin not allowed: only pages of this server (same scheme, host and port) "
                                    "may call it; add another with --allow-origin")
            return
        if self.token is not None:
            client = (scope.get("client") or ("?", 0))[0]
            wait = self._refused_for_failures(client)
            if wait:
                await _reply(send, 429, f"too many wrong tokens from {client}: {self.bounds.token_failures_max} within "
                                        f"{self.bounds.token_failure_window_s:g} s; try again in {wait:.0f} s",
                             {"retry-after": str(max(1, round(wait)))})
                return
            if not self._token_ok(headers):
                if self.token_cookie and await self._take_query_token(scope, send):
                    return
                self._failed(client)
                challenge = {"www-authenticate": 'Bearer realm="retained"'}
                await _reply(send, 401, "missing or wrong bearer token", challenge)
                return
        await self.app(scope, receive, send)

    def _same(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.strip().encode("utf-8", "replace"), self.token)

    def _token_ok(self, headers: dict[str, str]) -> bool:
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self._same(value):
            return True
        if self.token_cookie:
            for part in headers.get("cookie", "").split(";"):
                name, _, value = part.strip().partition("=")
                if name == TOKEN_COOKIE and self._same(unquote(value)):
                    return True
        return False

    async def _take_query_token(self, scope: dict[str, Any], send: Any) -> bool:
        """Answer ``?token=<the token>`` with a redirect that sets the cookie; False when no right token was given."""
        pairs = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [v for k, v in pairs if k == "token"]
        if len(given) != 1 or not self._same(given[0]):
            return False
        rest = urlencode([(k, v) for k, v in pairs if k != "token"])
        # One leading slash: "//evil.example" would be a link to another host (an open redirect).
        location = "/" + quote(scope.get("path", "/").lstrip("/\\")) + (f"?{rest}" if rest else "")
        cookie = f"{TOKEN_COOKIE}={quote(given[0], safe='')}; HttpOnly; SameSite=Strict; Path=/"
        await _reply(send, 303, "token accepted; the browser keeps it in a cookie",
                     {"location": location, "set-cookie": cookie, "cache-control": "no-store"})
        return True


async def _reply(send: Any, status: int, text: str, extra: dict[str, str] | None = None) -> None:
    body = (text + "\n").encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Listening:
    """Where a server listens, as ``serve`` tells its caller before it serves."""

    def __init__(self, host: str, port: int, hosts: set[str], origins: set[Origin]) -> None:
        self.host = host
        self.port = port
        self.hosts = hosts
        self.origins = origins

    def url(self, path: str = "/") -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}{path}"


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0 picks a free port).

    Raises:
        OSError: the address cannot be bound (in use, not this machine's).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: a response's head and body are
        # separate small writes, and with Nagle's algorithm the body would
        # wait for the client's delayed acknowledgement of the head.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def serve(
    make_app: Callable[[Listening], Any],
    sock: socket.socket,
    *,
    token: str | None,
    allow_hosts: Iterable[str] = (),
    allow_origins: Iterable[str] = (),
    token_cookie: bool = False,
    on_ready: Callable[[Listening], None] | None = None,
    log_level: str = "warning",
    bounds: Bounds | None = None,
) -> None:
    """Serve ``make_app(listening)`` on the bound ``sock`` behind `HttpGuard` until stopped.

    The origins are those of the port actually bound (a port of 0 is known
    only then); ``on_ready`` is called once, before the first request.

    Raises:
        ValueError: an ``allow_origins`` value is not an origin.
    """
    import anyio
    import uvicorn

    host = sock.getsockname()[0]
    hosts = allowed_hosts(host, allow_hosts)
    listening = Listening(host, sock.getsockname()[1], hosts, allowed_origins(hosts, sock.getsockname()[1], allow_origins))
    bounds = bounds or Bounds()
    guarded = HttpGuard(make_app(listening), token=token, hosts=hosts, origins=listening.origins,
                        token_cookie=token_cookie, bounds=bounds)
    if on_ready is not None:
        on_ready(listening)
    # A client holding a stream open (an MCP GET, a browser tab) would otherwise keep Ctrl-C waiting for it.
    config = uvicorn.Config(guarded, log_config=None, access_log=False, lifespan="on", log_level=log_level,
                            timeout_graceful_shutdown=SHUTDOWN_WAIT_S)
    config.load()
    config.http_protocol_class = _bounded(config.http_protocol_class, bounds)
    anyio.run(uvicorn.Server(config).serve, [sock])


_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
         b"retry-after: 1\r\ncontent-length: %d\r\n\r\n%s")


def _bounded(base: Any, bounds: Bounds) -> Any:
    """uvicorn's HTTP protocol class ``base`` with ``bounds`` on connections and on the time headers may take.

    A connection over a cap is answered 503 and closed before anything is
    parsed. The header timer runs from the connection's start, and again
    from the end of each response (a keep-alive connection's next request);
    it stops when a request's headers are complete (uvicorn then starts its
    request cycle). The request body and a response stream are not timed:
    an authenticated MCP stream may stay open.
    """
    open_by_client: dict[str, int] = {}
    counted: set[int] = set()

    class Bounded(base):
        _header_timer: Any = None
        _timed_cycle: Any = None
        _peer: str | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            peer = (self.client or ("?", 0))[0]
            total = len(counted)
            if total >= bounds.connections_max or open_by_client.get(peer, 0) >= bounds.client_connections_max:
                which = ("the server's" if total >= bounds.connections_max
                         else f"this client's ({bounds.client_connections_max})")
                body = f"too many open connections: {which} limit is reached; close one and retry\n".encode()
                transport.write(_BUSY % (len(body), body))
                transport.close()
                return
            self._peer = peer
            open_by_client[peer] = open_by_client.get(peer, 0) + 1
            counted.add(id(self))
            self._time_headers()

        def _time_headers(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._timed_cycle = self.cycle
            self._header_timer = self.loop.call_later(bounds.header_read_s, self._headers_too_slow)

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.cycle is self._timed_cycle and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._header_timer is not None and self.cycle is not self._timed_cycle:
                self._header_timer.cancel()  # a request's headers are complete
                self._header_timer = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._peer is not None and not self.transport.is_closing():
                self._time_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            if self._peer is not None and id(self) in counted:
                counted.discard(id(self))
                left = open_by_client.get(self._peer, 1) - 1
                if left > 0:
                    open_by_client[self._peer] = left
                else:
                    open_by_client.pop(self._peer, None)
            super().connection_lost(exc)

    Bounded.__name__ = Bounded.__qualname__ = f"Bounded{base.__name__}"
    return Bounded
