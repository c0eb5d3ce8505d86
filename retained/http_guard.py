"""The HTTP access guard: which hosts, origins and bearer tokens may reach the store over HTTP.

An ASGI wrapper that runs before the application sees a request: the Host
header must name this server (DNS rebinding), a browser's Origin must be one
of its own names (no cross-site request), and, when a token is set, the
request must carry it as a bearer token (compared in constant time, never
logged). The MCP server's streamable HTTP transport runs behind it; any other
HTTP face of a store reuses it. Standard library only.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def is_loopback(host: str) -> bool:
    """True for an address or name that only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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


class HttpGuard:
    """ASGI wrapper: Host and Origin checks (DNS rebinding), then the bearer token.

    Runs before the wrapped application sees the request. The token is
    compared in constant time and never logged.
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
        if host_name(headers.get("host", "")) not in self.hosts:
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
        return bool(sep) and scheme in ("http", "https") and host_name(rest) in self.hosts


async def _reply(send: Any, status: int, text: str, extra: dict[str, str] | None = None) -> None:
    body = (text + "\n").encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
