"""Vectors by (model, text hash) in a DuckDB file of their own, so repeated evaluation runs over
fresh stores do not pay for the model again: embeddings, and cross-encoder logits (one-wide rows
keyed by the query and the unit's text)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Callable

import duckdb
import numpy as np


class EmbeddingCache:
    """Vectors by (model, text hash) in a DuckDB file of their own, so repeated evaluation runs
    over fresh stores do not pay for the model again. One process at a time. Vectors are kept
    as float16, as the store's vectors table keeps them, so a store filled from a warm cache
    holds exactly the vectors a cold run stores."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = duckdb.connect(str(path))
        self.conn.execute("CREATE TABLE IF NOT EXISTS cache (model VARCHAR, hash VARCHAR, vec BLOB, "
                          "PRIMARY KEY (model, hash))")
        self._lock = threading.Lock()

    def get(self, model: str, hashes: list[str]) -> dict[str, np.ndarray]:
        with self._lock:
            rows = self.conn.execute("SELECT hash, vec FROM cache WHERE model = ? AND hash IN (SELECT unnest(?))",
                                     [model, hashes]).fetchall()
        return {h: np.frombuffer(v, dtype=np.float16).astype(np.float32) for h, v in rows}

    def put(self, model: str, hashes: list[str], vectors: np.ndarray) -> None:
        with self._lock:
            self.conn.execute("INSERT OR IGNORE INTO cache SELECT ?, unnest(?::VARCHAR[]), unnest(?::BLOB[])",
                              [model, hashes, [v.astype(np.float16).tobytes() for v in vectors]])

    def through(self, model: str, texts: list[str], compute: Callable[[list[int]], np.ndarray],
                width: int) -> np.ndarray:
        """Rows for `texts`: the cached ones, and `compute(indices)` for the others, which are kept."""
        hashes = [text_hash(t) for t in texts]
        known = self.get(model, hashes)
        missing = [i for i, h in enumerate(hashes) if h not in known]
        out = np.zeros((len(texts), width), dtype=np.float32)
        if missing:
            fresh = np.asarray(compute(missing), dtype=np.float32).reshape(len(missing), width)
            self.put(model, [hashes[i] for i in missing], fresh)
            out[missing] = fresh
        for i, h in enumerate(hashes):
            if h in known:
                out[i] = known[h]
        return out

    def close(self) -> None:
        self.conn.close()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
