"""Vectors by (model, text hash) in a DuckDB file of their own, so repeated evaluation runs over
fresh stores do not pay for the model again."""

from __future__ import annotations

import threading
from pathlib import Path

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

    def close(self) -> None:
        self.conn.close()
