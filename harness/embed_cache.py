"""A disk cache in front of an Embedder, for evaluations that embed the same texts many times.

Only the harness uses it: the library never caches vectors outside the index.
Vectors are kept in a SQLite file keyed by (url, model, purpose, sha256 of the
text), so a second run of an evaluation costs no model time. The cache is an
ordinary embedder for ``retained.index.hybrid``: it has ``model``, ``dim``,
``status()`` and ``embed(texts, purpose=...)``.
"""

from __future__ import annotations

import hashlib
import sqlite3
from array import array
from pathlib import Path
from typing import Any

from retained.vectors.embed import Embedder


class CachedEmbedder:
    def __init__(self, embedder: Embedder, path: str | Path) -> None:
        self.inner = embedder
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.db = sqlite3.connect(self.path, check_same_thread=False)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS vec (key TEXT PRIMARY KEY, dim INTEGER NOT NULL, v BLOB NOT NULL)"
        )
        self.hits = 0
        self.misses = 0

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dim(self) -> int | None:
        return self.inner.dim

    @property
    def batch_size(self) -> int | None:
        """The inner embedder's texts per call (the embedded model's is 1), so a backfill calls it alike."""
        return getattr(self.inner, "batch_size", None)

    @property
    def breaker(self) -> Any:
        return self.inner.breaker

    def status(self) -> dict[str, Any]:
        return self.inner.status()

    def _key(self, text: str, purpose: str) -> str:
        raw = f"{self.inner.url}\0{self.inner.model}\0{purpose}\0{text}".encode()
        return hashlib.sha256(raw).hexdigest()

    def embed(self, texts: list[str], *, purpose: str = "passage") -> list[list[float]]:
        keys = [self._key(t, purpose) for t in texts]
        found: dict[str, list[float]] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for key, dim, blob in self.db.execute(f"SELECT key, dim, v FROM vec WHERE key IN ({marks})", chunk):
                arr = array("f")
                arr.frombytes(blob)
                found[key] = arr.tolist()
                if self.inner.dim is None:
                    self.inner.dim = dim
        todo = [i for i, k in enumerate(keys) if k not in found]
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        if todo:
            fresh = self.inner.embed([texts[i] for i in todo], purpose=purpose)
            rows = []
            for i, vec in zip(todo, fresh, strict=True):
                found[keys[i]] = vec
                rows.append((keys[i], len(vec), array("f", vec).tobytes()))
            with self.db:
                self.db.executemany("INSERT OR REPLACE INTO vec VALUES (?, ?, ?)", rows)
        return [found[k] for k in keys]

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text], purpose="query")[0]
