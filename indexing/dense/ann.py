"""Approximate nearest neighbours for large projects: a usearch HNSW graph over a project's
vectors (int8 in the graph), so a dense search reads a few thousand vectors instead of all.

Below `ANN_MIN_UNITS` live vectors a project keeps the exact product (indexing/dense/index.py),
which is cheap there and needs no graph. Above it the graph is built off the request path (the
exact product answers until it is ready), follows every change the dense snapshot follows, and is
saved under the store's index folder, stamped with the vector generation it holds, so a restart
loads it and catches up from the change logs instead of building it again. The graph only
chooses which units a search reads: their scores are the exact cosines of the stored vectors.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import onnxruntime  # noqa: F401  # before usearch: usearch 2.26 loaded first makes onnxruntime 1.31's import crash the process
from usearch.index import Index

from agentmemrec.indexing.segments import keep_rows
from agentmemrec.indexing.store.protocol import Vectors

log = logging.getLogger(__name__)

ANN_MIN_UNITS = 200_000  # below, the exact float32 product is cheap: 9 ms at 100,000 (bench/ann_recall.py)
CONNECTIVITY = 16
EXPANSION_ADD = 128
EXPANSION_SEARCH = 1_024  # at least the channel's depth (twice the default pool of 512)
ADD_BATCH = 65_536

Key = tuple[int, int]  # (store generation, vector generation), as DenseSnapshot.key


def _new_index(dim: int) -> Index:
    return Index(ndim=dim, metric="ip", dtype="i8", connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD,
                 expansion_search=EXPANSION_SEARCH)


def _add(index: Index, ids: np.ndarray, matrix: np.ndarray) -> None:
    for start in range(0, len(ids), ADD_BATCH):
        index.add(ids[start:start + ADD_BATCH], np.asarray(matrix[start:start + ADD_BATCH], dtype=np.float32))


class ProjectAnn:
    """One project's graph. Built by `build` (in a background thread), kept current by `follow`
    (called with every change the snapshot applies, in order), searched by `nearest`."""

    def __init__(self, project: str, dim: int, path: Path | None) -> None:
        self.project, self.dim, self.path = project, dim, path
        self._index: Index | None = None
        self._pending: list[tuple[np.ndarray, Vectors | None]] | None = []  # changes while building
        self._lock = threading.Lock()
        self.ready = threading.Event()
        self.build_s: float | None = None
        self.source: str | None = None  # "disk", "built" or "failed", once ready

    def build(self, key: Key, parts: Sequence[Vectors], dead: Sequence[np.ndarray | None],
              catch_up: Callable[[Key], tuple[Key, np.ndarray, Vectors | None] | None]) -> None:
        """The graph of the snapshot at `key` (its parts and dead masks): loaded from disk when a
        saved graph can catch up from the logs, else built and saved. A failure is logged and
        leaves the project on the exact product."""
        try:
            self._build(key, parts, dead, catch_up)
        except Exception:
            with self._lock:
                self.source, self._pending = "failed", None
            log.exception("building the dense graph of %s failed; its searches stay exact", self.project)
        finally:
            self.ready.set()  # done: the graph, or the exact product for good

    def _build(self, key: Key, parts: Sequence[Vectors], dead: Sequence[np.ndarray | None],
               catch_up: Callable[[Key], tuple[Key, np.ndarray, Vectors | None] | None]) -> None:
        t0 = time.perf_counter()
        index = self._load(catch_up)
        self.source = "disk" if index is not None else "built"
        if index is None:
            index = _new_index(self.dim)
            for part, d in zip(parts, dead):
                keep = keep_rows(d, len(part.ids))
                _add(index, part.ids[keep], part.matrix[keep])
            self._save(index, key)
        with self._lock:
            for changed, fresh in self._pending or []:
                self._apply(index, changed, fresh)
            self._index, self._pending = index, None
        self.build_s = round(time.perf_counter() - t0, 2)
        log.info("dense graph of %s: %d vectors in %.1f s", self.project, len(index), self.build_s)

    def follow(self, changed: np.ndarray, fresh: Vectors | None) -> None:
        """Units whose vectors changed (removed from the graph) and their current vectors (added)."""
        with self._lock:
            if self._index is not None:
                self._apply(self._index, changed, fresh)
            elif self._pending is not None:  # still building (None: the build failed)
                self._pending.append((changed, fresh))

    @staticmethod
    def _apply(index: Index, changed: np.ndarray, fresh: Vectors | None) -> None:
        if len(changed):
            index.remove(changed)
        if fresh is not None and len(fresh.ids):
            _add(index, fresh.ids, fresh.matrix)

    def unsave(self) -> None:
        """Delete the saved graph and save this one no more (it holds removed vectors' bytes)."""
        with self._lock:
            path, self.path = self.path, None
        if path is not None:
            delete_saved(path)

    def nearest(self, query: np.ndarray, count: int) -> np.ndarray | None:
        """Unit ids of about the `count` nearest vectors (None until the graph is ready)."""
        with self._lock:
            if self._index is None:
                return None
            return self._index.search(query.astype(np.float32), count, threads=1).keys.astype(np.int64)

    # ---- on disk: the graph and the key it holds ------------------------------------------------

    def _load(self, catch_up: Callable[[Key], tuple[Key, np.ndarray, Vectors | None] | None]) -> Index | None:
        if self.path is None or not self.path.exists() or not _stamp(self.path).exists():
            return None
        try:
            stamp = json.loads(_stamp(self.path).read_text())
            found = catch_up(tuple(stamp["key"]))
            if found is None:
                return None  # the logs no longer reach back to the saved graph
            index = _new_index(self.dim)
            index.load(str(self.path))
        except (OSError, ValueError, KeyError, RuntimeError):
            log.warning("the saved dense graph of %s could not be loaded; building it again", self.project)
            return None
        now, changed, fresh = found
        self._apply(index, changed, fresh)
        if len(changed) > len(index) // 100:  # saved again, so the next restart has less to catch up
            self._save(index, now)
        return index

    def _save(self, index: Index, key: Key) -> None:
        path = self.path  # once: `unsave` may clear it meanwhile
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp")  # another process may save too
        index.save(str(tmp))
        os.replace(tmp, path)
        _stamp(path).write_text(json.dumps({"key": list(key), "vectors": len(index)}))


def _stamp(path: Path) -> Path:
    """Where a saved graph's key (the vector generation it holds) is written."""
    return path.with_suffix(".json")


def delete_saved(path: Path) -> None:
    """A saved graph and its stamp, deleted."""
    for file in (path, _stamp(path)):
        file.unlink(missing_ok=True)
