"""A real embedding server on 127.0.0.1 for tests: the three protocols, deterministic vectors.

Vectors are a hashed bag of words: each lower-cased word adds +1 or -1 at a
position chosen by its blake2b digest, plus a small fixed bias so no vector is
zero. Texts sharing words are close, paraphrases are not (no model), and the
same text always gets the same vector, in any process.

Switches (plain attributes, changed between requests):
    delay_s        sleep this long before answering (to pass a read timeout)
    wrong_dim      answer vectors one dimension short
    non_numeric    put a string into the first vector
    nan            put NaN into the first vector (as JSON ``NaN``)
    wrong_count    drop the last vector of a batch
    fail_status    answer this HTTP status (e.g. 500) with a JSON error
    require_key    answer 401, echoing the key sent, unless the bearer token matches

``stop()`` closes the socket (connections are refused); ``start()`` binds the
same port again.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATHS = {
    "ollama": "/api/embed",
    "ollama-legacy": "/api/embeddings",
    "openai": "/v1/embeddings",
}
WORD = re.compile(r"\w+", re.UNICODE)


def hashed_vector(text: str, dim: int) -> list[float]:
    """The deterministic, unit-length bag-of-words vector of ``text``."""
    vec = [0.0] * dim
    vec[0] = 0.05  # the bias: an empty text still has a direction
    for word in WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        slot = int.from_bytes(digest[:4], "little") % dim
        vec[slot] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    owner: EmbedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up is expected here, not a failure


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib name)
        pass

    def _send(self, status: int, obj: Any) -> None:
        body = json.dumps(obj).encode("utf-8")  # allow_nan: the nan switch needs "NaN"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 (stdlib name)
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        payload = json.loads(self.rfile.read(length) or b"{}")
        with owner.lock:
            owner.requests.append({"path": self.path, "payload": payload})
        if owner.delay_s:
            time.sleep(owner.delay_s)
        if owner.require_key is not None:
            sent = self.headers.get("Authorization", "")
            if sent != f"Bearer {owner.require_key}":
                self._send(401, {"error": {"message": f"invalid api key: {sent.removeprefix('Bearer ')}"}})
                return
        if owner.fail_status:
            self._send(owner.fail_status, {"error": "embedder exploded (test switch)"})
            return
        path = self.path.split("?")[0]
        if path == PATHS["ollama-legacy"]:
            # The old endpoint does not normalise: scale its vectors away from unit length.
            vectors = owner.vectors([payload["prompt"]], scale=owner.legacy_scale)
            self._send(200, {"embedding": vectors[0] if vectors else []})
        elif path == PATHS["ollama"]:
            texts = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
            self._send(200, {"model": payload["model"], "embeddings": owner.vectors(texts)})
        elif path == PATHS["openai"]:
            texts = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
            data = [
                {"object": "embedding", "index": i, "embedding": v}
                for i, v in enumerate(owner.vectors(texts))
            ]
            data.reverse()  # clients must sort by index, not trust the order
            self._send(200, {"object": "list", "model": payload["model"], "data": data})
        else:
            self._send(404, {"error": f"unknown route {path}"})


class EmbedServer:
    """An HTTP embedding server in a thread on 127.0.0.1 (a free port, kept across restarts)."""

    def __init__(self, dim: int = 16) -> None:
        self.dim = dim
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.delay_s = 0.0
        self.wrong_dim = False
        self.non_numeric = False
        self.nan = False
        self.wrong_count = False
        self.fail_status = 0
        self.require_key: str | None = None
        self.legacy_scale = 3.5
        self.port = 0
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def url(self, protocol: str = "openai") -> str:
        return f"http://127.0.0.1:{self.port}{PATHS[protocol]}"

    def vectors(self, texts: list[str], scale: float = 1.0) -> list[list[Any]]:
        dim = self.dim - 1 if self.wrong_dim else self.dim
        out: list[list[Any]] = [[x * scale for x in hashed_vector(t, dim)] for t in texts]
        if self.non_numeric and out:
            out[0][0] = "0.5"
        if self.nan and out:
            out[0][0] = float("nan")
        if self.wrong_count and out:
            out.pop()
        return out

    def start(self) -> EmbedServer:
        httpd = _Server(("127.0.0.1", self.port), _Handler)
        httpd.owner = self
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def reset(self) -> None:
        self.delay_s = 0.0
        self.wrong_dim = self.non_numeric = self.nan = self.wrong_count = False
        self.fail_status = 0
        self.require_key = None
        with self.lock:
            self.requests.clear()

    def __enter__(self) -> EmbedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """Run the server in the foreground (``python tests/embed_server.py [port] [dim]``)."""
    import sys

    server = EmbedServer(dim=int(sys.argv[2]) if len(sys.argv) > 2 else 16)
    server.port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server.start()
    print(f"embed test server on http://127.0.0.1:{server.port} (dim {server.dim})", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
