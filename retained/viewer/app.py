"""The viewer's web application: read-only routes over ``Store``, and ``retained view`` serving them.

What it answers and refuses, and its headers: docs/viewer.md (access is the
HTTP MCP server's, ``retained.http_guard``). An edge: ``serve`` reads the
environment and prints; ``retained.viewer.pages`` formats the pages;
Starlette and uvicorn (which come with mcp) are imported only here.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from retained import http_guard, limits, paths
from retained.brief import compose as brief
from retained.core import pool
from retained.errors import InvalidRecord, NotFound, RecordDamaged, RetainedError
from retained.settings import http_settings, store_options
from retained.store import Store
from retained.sync import layout
from retained.viewer import pages

PAGE_DEFAULT = 50  # records per timeline page
PAGE_MAX = 500
NEIGHBOURS = 3  # records shown on each side of a record, in its scope
CHAIN_MAX = 50  # records followed along a supersede chain, each way
K_MAX = 100
BUDGET_MAX = 10_000_000  # tokens: a brief or search budget past this is a typo, not a wish
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; "
       "frame-ancestors 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    # same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" with the
    # page's own form POST (run verify), which the Origin check must then refuse.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
FAVICON = (b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" '
           b'fill="#2f5d8a"/><path d="M4 4h8v2H4zm0 3h8v2H4zm0 3h5v2H4z" fill="#fff"/></svg>')


class BadRequest(Exception):
    """A query parameter the viewer cannot use (400)."""


class ReadOnly:
    """ASGI wrapper: GET and HEAD only (405 otherwise), the security headers, and the route's time."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD") and not (scope["method"] == "POST" and scope["path"] == "/verify"):
            allow = b"GET, HEAD, POST" if scope["path"] == "/verify" else b"GET, HEAD"
            await _plain(send, 405, b"method not allowed: the viewer is read-only; it answers GET and HEAD "
                         b"(and a POST to /verify from its own page)\n", [(b"allow", allow)])
            return
        if scope["method"] == "POST" and not any(k.lower() == b"origin" for k, _ in scope.get("headers", ())):
            # The guard refuses a foreign Origin; a POST without one did not come from the viewer's page.
            await _plain(send, 403, b"running verify needs the button on the viewer's own page "
                         b"(a POST with its Origin); nothing was run\n", [])
            return
        started = time.perf_counter()

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                ms = (time.perf_counter() - started) * 1000
                extra = [*SECURITY_HEADERS, (b"server-timing", f"app;dur={ms:.2f}".encode())]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _plain(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        *headers, (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
        *SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": body})


class VerifyRun:
    """One verify of the store on a thread of its own (with its own Store), and its progress."""

    def __init__(self, directory: Path, options: dict[str, Any]) -> None:
        self.directory = directory
        self.options = options
        self.started = time.monotonic()
        self.state = "running"
        self.done_bytes = 0
        self.total_bytes = 0
        self.report: Mapping[str, Any] | None = None
        self.error: str | None = None
        self.seconds = 0.0
        self.finished_at = ""
        self.thread = threading.Thread(target=self._run, name="retained-view-verify", daemon=True)
        self.thread.start()

    def _progress(self, done: int, total: int) -> None:
        self.done_bytes, self.total_bytes = done, total

    def _run(self) -> None:
        try:
            with Store(self.directory, **self.options) as store:
                self.report = store.verify(progress=self._progress, workers=pool.cpu_workers())
            self.state = "done"
        except Exception as exc:  # noqa: BLE001 - the page reports any failure of the run instead of losing it
            self.error = f"{type(exc).__name__}: {exc}"
            self.state = "failed"
        finally:
            self.seconds = time.monotonic() - self.started
            self.finished_at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    def snapshot(self) -> dict[str, Any]:
        seconds = self.seconds if self.state != "running" else time.monotonic() - self.started
        return {"state": self.state, "done_bytes": self.done_bytes, "total_bytes": self.total_bytes,
                "report": self.report, "error": self.error, "seconds": seconds, "finished_at": self.finished_at}


class Viewer:
    """The routes, over one Store shared by every request (one at a time) and the last verify run."""

    def __init__(self, directory: Path, options: dict[str, Any]) -> None:
        self.directory = directory
        self.options = options  # with anchoring as set: for verify runs, which record the head they judged
        # The pages' own Store never anchors: that would make store.id and
        # anchor files on a GET (the index still follows the log, as for any reader).
        # It follows the store as the MCP server does: records without a vector
        # are embedded on a background thread, stopped by close (Ctrl-C).
        self.store = Store(directory, **{**options, "anchor_dir": None, "follow_writes": True})
        self.lock = threading.Lock()  # one request at a time on the shared Store
        try:
            self.store.follow()
        except (RetainedError, sqlite3.Error, OSError):
            pass  # the index cannot be opened: the pages say so, and the vectors wait for a usable one
        self.run: VerifyRun | None = None
        self.run_lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            self.store.close()

    def routes(self) -> list[Route]:
        return [
            Route("/", self._checked(self.timeline), methods=["GET"]),
            Route("/search", self._checked(self.search), methods=["GET"]),
            Route("/record/{seq:int}", self._checked(self.record), methods=["GET"]),
            Route("/health", self._checked(self.health), methods=["GET"]),
            Route("/verify", self._checked(self.verify), methods=["GET"]),
            Route("/verify", self._checked(self.run_verify), methods=["POST"]),
            Route("/brief", self._checked(self.brief), methods=["GET"]),
            Route("/style.css", self.style, methods=["GET"]),
            Route("/favicon.svg", self.favicon, methods=["GET"]),
        ]

    # -- the frame around each page ------------------------------------------

    def _checked(self, route: Any) -> Any:
        """``route`` with its parameters' errors as the 400 page, and anything unforeseen as a 500 page (no traceback)."""

        def answer(request: Request) -> Response:
            try:
                return route(request)
            except BadRequest as exc:
                status, message = 400, str(exc)
            except Exception as exc:  # noqa: BLE001 - the edge: reported on the page and on stderr, never a traceback
                print(f"retained: viewer: {request.url.path}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                status, message = 500, f"{type(exc).__name__}: {exc}"
            where = {"directory": str(self.directory), "head": None}
            return HTMLResponse(pages.error(status, message, where), status_code=status)

        return answer

    def _answer(self, build: Any) -> Response:
        """Call ``build(where)`` under the lock; a bad parameter is a 400 page, an unknown seq a 404."""
        with self.lock:
            where: dict[str, Any] = {"directory": str(self.directory), "head": None}
            try:
                where["head"] = self.store.head()
                return HTMLResponse(build(where), headers={"cache-control": "no-store"})
            except (BadRequest, RetainedError, OSError) as exc:
                # The first kind that fits; a damaged record is there but cannot be read: a 500 with the finding.
                status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 500)
                return HTMLResponse(pages.error(status, _message(exc), where), status_code=status)

    # -- pages -------------------------------------------------------------------

    def timeline(self, request: Request) -> Response:
        q = request.query_params
        params: dict[str, Any] = {name: _text(q, name) for name in pages.TIMELINE_FILTERS}
        params["limit"] = _int(q, "limit", PAGE_DEFAULT, 1, PAGE_MAX)
        params["limit_default"] = PAGE_DEFAULT
        params["before"] = _int(q, "before", None, 0, limits.SEQ_MAX)
        params["after"] = _int(q, "after", None, 0, limits.SEQ_MAX) if params["before"] is None else None

        def build(where: dict[str, Any]) -> str:
            result = self.store.list(limit=params["limit"], kind=params["kind"], scope=params["scope"],
                                     client=params["client"], since=params["since"], until=params["until"],
                                     before=params["before"], after=params["after"])
            return pages.timeline(result, params, where)

        return self._answer(build)

    def search(self, request: Request) -> Response:
        q = request.query_params
        params: dict[str, Any] = {
            "q": _text(q, "q"),
            "scope": _text(q, "scope"),
            "k": _int(q, "k", limits.SEARCH_K_DEFAULT, 1, K_MAX),
            "max_tokens": _int(q, "max_tokens", None, 1, BUDGET_MAX),
            "superseded": bool(_text(q, "superseded")),
            "retracted": bool(_text(q, "retracted")),
        }

        def build(where: dict[str, Any]) -> str:
            reply = None
            if params["q"] is not None:
                reply = self.store.search(params["q"], k=params["k"], max_tokens=params["max_tokens"],
                                          scope=params["scope"], include_superseded=params["superseded"],
                                          include_retracted=params["retracted"])
            return pages.search(reply, params, where)

        return self._answer(build)

    def record(self, request: Request) -> Response:
        seq = int(request.path_params["seq"])
        store_id = _text(request.query_params, "from")  # a store pulled by `retained sync`

        def build(where: dict[str, Any]) -> str:
            if seq < 1:
                raise NotFound(f"no record with seq {seq}; seqs start at 1")
            (entry,) = self.store.get([seq], store_id=store_id)
            sid = pages.pulled_from(entry)
            if sid is None:
                scope = entry["record"].get("scope")
                scope = scope if isinstance(scope, str) else None
                older = self.store.list(limit=NEIGHBOURS, scope=scope, before=seq)["records"]
                newer = self.store.list(limit=NEIGHBOURS, scope=scope, after=seq)["records"]
                log_path = where["head"]["log"]
            else:
                # A pulled store's neighbours: the records next to it in that store (its timeline), newest first.
                near = self.store.timeline(seq, window=NEIGHBOURS, store_id=sid)["records"]
                older = [e for e in near if e["seq"] < seq][::-1]
                newer = [e for e in near if e["seq"] > seq][::-1]
                log_path = str(layout.mirror_dir(self.directory, sid) / "log.jsonl")
            return pages.record(entry, older=older, newer=newer, chain=self._chain(entry, sid),
                                log_path=log_path, where=where)

        return self._answer(build)

    def _chain(self, entry: Mapping[str, Any], store_id: str | None = None) -> list[Mapping[str, Any]]:
        """The records ``entry`` corrects and that correct it, oldest first (each way at most ``CHAIN_MAX``)."""
        found: dict[int, Mapping[str, Any]] = {entry["seq"]: entry}
        for step in ("back", "forward"):
            frontier: Sequence[Mapping[str, Any]] = [entry]
            for _ in range(CHAIN_MAX):
                wanted: list[int] = []
                for e in frontier:
                    linked = e["record"].get("supersedes") if step == "back" else e.get("superseded_by")
                    wanted += [s for s in (linked or ()) if type(s) is int and s > 0 and s not in found]
                if not wanted:
                    break
                frontier = self.store.get(sorted(set(wanted)), missing_ok=True, store_id=store_id)
                found.update((e["seq"], e) for e in frontier)
        return [found[s] for s in sorted(found)]

    def health(self, request: Request) -> Response:
        return self._answer(lambda where: pages.health(self.store.stats(workers=pool.cpu_workers()), self._run_state(), where))

    def verify(self, request: Request) -> Response:
        return self._answer(lambda where: pages.verify(self._run_state(), where))

    def run_verify(self, request: Request) -> Response:
        """Start a verify run (the one POST; ``ReadOnly`` let it through only with an Origin the guard accepted)."""
        with self.run_lock:
            if self.run is None or self.run.state != "running":
                self.run = VerifyRun(self.directory, self.options)
        # The page that shows the run is a plain GET: reloading it never starts another.
        return RedirectResponse("/verify", status_code=303)

    def _run_state(self) -> dict[str, Any] | None:
        with self.run_lock:
            return None if self.run is None else self.run.snapshot()

    def brief(self, request: Request) -> Response:
        q = request.query_params
        budget, scope = _int(q, "budget", limits.BRIEF_BUDGET_DEFAULT, 0, BUDGET_MAX), _text(q, "scope")
        params = {"budget": budget, "scope": scope}

        def build(where: dict[str, Any]) -> str:
            result = self.store.brief(budget, scope)
            return pages.brief(result, brief.render_text(result), params, where)

        return self._answer(build)

    def style(self, request: Request) -> Response:
        css = resources.files("retained.viewer").joinpath("style.css").read_bytes()
        return Response(css, media_type="text/css", headers={"cache-control": "max-age=300"})

    def favicon(self, request: Request) -> Response:
        return Response(FAVICON, media_type="image/svg+xml", headers={"cache-control": "max-age=86400"})


# A page's status for what stopped it (else 500).
_STATUS = ((BadRequest, 400), (InvalidRecord, 400), (RecordDamaged, 500), (NotFound, 404))


def _message(exc: Exception) -> str:
    return exc.message if isinstance(exc, RetainedError) else str(exc)


def _text(q: Any, name: str) -> str | None:
    return (q.get(name) or "").strip() or None


def _int(q: Any, name: str, default: int | None, low: int, high: int | None) -> int | None:
    raw = _text(q, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"parameter {name}: {raw[:40]!r} is not a whole number") from None
    if value < low or (high is not None and value > high):
        top = f" to {high}" if high is not None else " or more"
        raise BadRequest(f"parameter {name}: {value} is out of range; give {low}{top}")
    return value


def build_app(directory: Path | str, options: dict[str, Any] | None = None) -> Any:
    """The viewer as an ASGI application (GET only, security headers) over the store at ``directory``.

    Not guarded: ``serve`` puts the access guard in front of it.
    """
    viewer = Viewer(Path(directory), dict(options or {}))

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        yield
        viewer.close()

    app = Starlette(routes=viewer.routes(), lifespan=lifespan)
    app.state.viewer = viewer
    return ReadOnly(app)


# -- retained view -------------------------------------------------------------------


def serve(args: Any) -> int:
    """``retained view``: serve the viewer until interrupted; print its URL (``--json``: as JSON)."""
    token = os.environ.get("RETAINED_TOKEN") or None
    refusal = http_guard.refusal(args.host, token)
    if refusal:
        print(f"retained: {refusal}", file=sys.stderr)
        return 2
    try:
        options = store_options()
        bounds, _ = http_settings()
        http_guard.allowed_origins((), 0, args.allow_origin or ())  # a malformed --allow-origin is a usage error
    except (InvalidRecord, ValueError) as exc:
        print(f"retained: {_message(exc)}", file=sys.stderr)
        return 2
    directory = paths.store_dir(args.dir)
    try:
        with Store(directory, **{**options, "anchor_dir": None}) as probe:
            present = probe.exists()
    except RetainedError as exc:  # NoStore: a file, not a directory
        print(f"retained: {exc.message}", file=sys.stderr)
        return 1
    if not present:
        print(f"retained: no store at {directory}: nothing was written there yet; check --dir or RETAINED_DIR "
              "(`retained write` creates a store; the viewer only reads)", file=sys.stderr)
        return 1
    try:
        sock = http_guard.bind(args.host, args.port)
    except OSError as exc:
        print(f"retained: cannot listen on {args.host}:{args.port}: {exc.strerror}; choose another --port",
              file=sys.stderr)
        return 1

    def ready(listening: http_guard.Listening) -> None:
        url = listening.url("/")
        if args.json:
            print(json.dumps({"url": url, "host": listening.host, "port": listening.port, "store": str(directory),
                              "token_required": token is not None}), flush=True)
        else:
            print(url, flush=True)
        note = (f"; a token is required: open {url}?token=<RETAINED_TOKEN> once, the browser keeps it"
                if token else "")
        print(f"retained: viewing {directory} (read-only) at {url}; Ctrl-C stops{note}", file=sys.stderr, flush=True)
        if args.open:
            _open_browser(url)

    try:
        http_guard.serve(lambda _listening: build_app(directory, options), sock, token=token,
                         allow_hosts=args.allow_host or (), allow_origins=args.allow_origin or (),
                         token_cookie=True, on_ready=ready, bounds=bounds)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0


def _open_browser(url: str) -> None:
    """Open ``url`` in this machine's web browser, if it has one (``$BROWSER`` is honoured); never waits for it."""
    import webbrowser

    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        print(f"retained: no web browser found here; open {url} yourself", file=sys.stderr, flush=True)
        return
    threading.Thread(target=browser.open, args=(url,), name="retained-view-open", daemon=True).start()
