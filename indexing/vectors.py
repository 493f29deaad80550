"""The dense channel: vectors in DuckDB, an in-memory snapshot per project, a background embedder.

Vectors are keyed by (unit id, model identity) and record the content hash they were computed
from, so an updated unit is re-embedded and a changed model re-embeds everything. Search is an
exact inner product over the project's vectors, held in memory as a float32 snapshot (float16 on disk) that is
rebuilt when the project's rows or vectors change.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import duckdb
import numpy as np

from .embedder import Embedder
from .store import Store
from .units import Unit

log = logging.getLogger(__name__)
EMBED_BATCH = 64


@dataclass(frozen=True)
class DenseHit:
    unit_id: int
    rank: int
    score: float


@dataclass(frozen=True)
class DenseSnapshot:
    project: str
    key: tuple[int, int]  # (store generation, vector generation)
    ids: np.ndarray  # ascending unit ids
    matrix: np.ndarray  # (n, dim) float32 (stored as float16), rows L2-normalised

    def similarities(self, query: np.ndarray) -> np.ndarray:
        if len(self.ids) == 0:
            return np.zeros(0, dtype=np.float32)
        return self.matrix @ query.astype(np.float32)

    def search(self, query: np.ndarray, k: int, exclude: set[int] | frozenset[int] = frozenset()) -> list[DenseHit]:
        scores = self.similarities(query)
        if exclude and len(scores):
            scores = np.where(np.isin(self.ids, np.fromiter(exclude, dtype=np.int64)), -np.inf, scores)
        k = min(k, int(np.isfinite(scores).sum()))
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((self.ids[top], -scores[top]))]
        return [DenseHit(int(self.ids[p]), r, float(scores[p])) for r, p in enumerate(top, 1)]

    def lookup(self, query: np.ndarray, ids: list[int]) -> dict[int, float]:
        """Cosine similarity of the query with the given units that have a vector."""
        if not len(self.ids) or not ids:
            return {}
        wanted = np.asarray(ids, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.ids, wanted), 0, len(self.ids) - 1)
        ok = self.ids[pos] == wanted
        sims = self.matrix[pos[ok]] @ query
        return dict(zip(wanted[ok].tolist(), sims.tolist()))


class VectorStore:
    """Vector rows in the same DuckDB file as the units they describe."""

    def __init__(self, store: Store, model: str) -> None:
        self.store = store
        self.model = model

    def pending(self, limit: int, project: str | None = None) -> list[Unit]:
        """Units without a current vector for this model (new, updated, or a new model)."""
        where = "AND u.project = ?" if project else ""
        rows = self.store.cursor().execute(
            f"""SELECT u.id FROM units u LEFT JOIN vectors v
                ON v.unit_id = u.id AND v.model = ? AND v.content_hash = u.content_hash
                WHERE v.unit_id IS NULL {where} ORDER BY u.id LIMIT ?""",
            [self.model, *([project] if project else []), limit]).fetchall()
        ids = [r[0] for r in rows]
        return list(self.store.units_by_id(ids).values())

    def count_pending(self, project: str) -> int:
        return int(self.store.cursor().execute(
            """SELECT count(*) FROM units u LEFT JOIN vectors v
               ON v.unit_id = u.id AND v.model = ? AND v.content_hash = u.content_hash
               WHERE v.unit_id IS NULL AND u.project = ?""", [self.model, project]).fetchone()[0])

    def put(self, units: list[Unit], vectors: np.ndarray, hashes: list[str]) -> None:
        blobs = [v.astype(np.float16).tobytes() for v in vectors]
        projects = sorted({u.project for u in units})
        with self.store.transaction() as cur:
            cur.execute(
                """INSERT INTO vectors SELECT unnest(?::BIGINT[]), ?, unnest(?::VARCHAR[]), unnest(?::BLOB[])
                   ON CONFLICT (unit_id, model) DO UPDATE SET content_hash = excluded.content_hash,
                   vec = excluded.vec""", [[u.id for u in units], self.model, hashes, blobs])
            cur.execute("""INSERT INTO vector_state SELECT unnest(?::VARCHAR[]), ?, 1
                           ON CONFLICT (project, model) DO UPDATE SET generation = vector_state.generation + 1""",
                        [projects, self.model])

    def generation(self, project: str) -> int:
        row = self.store.cursor().execute("SELECT generation FROM vector_state WHERE project = ? AND model = ?",
                                          [project, self.model]).fetchone()
        return int(row[0]) if row else 0

    def load(self, project: str) -> tuple[np.ndarray, np.ndarray]:
        rows = self.store.cursor().execute(
            """SELECT u.id, v.vec FROM units u JOIN vectors v ON v.unit_id = u.id AND v.model = ?
               AND v.content_hash = u.content_hash WHERE u.project = ? ORDER BY u.id""",
            [self.model, project]).fetchall()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float16).astype(np.float32)
        return ids, matrix.reshape(len(rows), -1) if rows else matrix.reshape(0, 0)

    def drop_orphans(self) -> None:
        with self.store.transaction() as cur:
            cur.execute("DELETE FROM vectors WHERE unit_id NOT IN (SELECT id FROM units)")


class EmbeddingCache:
    """Vectors by (model, text hash) in a DuckDB file of their own, so repeated evaluation runs
    over fresh stores do not pay for the model again. One process at a time."""

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


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def embed_pending(vectors: VectorStore, embedder: Embedder, project: str | None = None,
                  cache: EmbeddingCache | None = None, limit: int | None = None,
                  progress: Callable[[int], None] | None = None) -> int:
    """Embed units that lack a current vector, in batches; returns how many were embedded."""
    done = 0
    while limit is None or done < limit:
        units = vectors.pending(EMBED_BATCH, project)
        if not units:
            break
        texts = [u.index_text() for u in units]
        vecs = _embed_with_cache(embedder, texts, cache)
        vectors.put(units, vecs, [u.content_hash for u in units])
        done += len(units)
        if progress:
            progress(len(units))
    return done


def _embed_with_cache(embedder: Embedder, texts: list[str], cache: EmbeddingCache | None) -> np.ndarray:
    if cache is None:
        return embedder.embed(texts)
    hashes = [text_hash(t) for t in texts]
    known = cache.get(embedder.identity, hashes)
    missing = [i for i, h in enumerate(hashes) if h not in known]
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    if missing:
        fresh = embedder.embed([texts[i] for i in missing])
        cache.put(embedder.identity, [hashes[i] for i in missing], fresh)
        out[missing] = fresh
    for i, h in enumerate(hashes):
        if h in known:
            out[i] = known[h]
    return out


class DenseIndex:
    """Hands out the current dense snapshot of a project."""

    def __init__(self, store: Store, embedder: Embedder) -> None:
        self.store = store
        self.embedder = embedder
        self.vectors = VectorStore(store, embedder.identity)
        self._cache: dict[str, DenseSnapshot] = {}
        self._lock = threading.Lock()

    def snapshot(self, project: str) -> DenseSnapshot:
        key = (self.store.generation(project), self.vectors.generation(project))
        snap = self._cache.get(project)
        if snap is None or snap.key != key:
            with self._lock:
                ids, matrix = self.vectors.load(project)
                snap = DenseSnapshot(project, key, ids, matrix)
                self._cache[project] = snap
        return snap


class DenseChannel:
    """The dense candidate channel: the query embedded once, searched over the snapshot."""

    name = "dense"

    def __init__(self, index: DenseIndex) -> None:
        self.index = index
        self._last: tuple[str, np.ndarray] | None = None

    def query_vector(self, query: str) -> np.ndarray:
        last = self._last
        if last is None or last[0] != query:
            last = (query, self.index.embedder.embed([query])[0])
            self._last = last
        return last[1]

    def search(self, project: str, query: str, k: int, exclude: set[int]) -> list[DenseHit]:
        return self.index.snapshot(project).search(self.query_vector(query), k, exclude)

    def score_units(self, project: str, query: str, ids: list[int]) -> dict[int, float]:
        """Cosine similarity of given units (absent for a unit not embedded yet)."""
        return self.index.snapshot(project).lookup(self.query_vector(query), ids)


class EmbeddingWorker:
    """Embeds new units in the background so `remember` never waits for the model."""

    def __init__(self, vectors: VectorStore, embedder: Embedder) -> None:
        self.vectors = vectors
        self.embedder = embedder
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agentmemrec-embedder", daemon=True)

    def start(self) -> "EmbeddingWorker":
        self._thread.start()
        self.notify()
        return self

    def notify(self) -> None:
        self._idle.clear()
        self._wake.set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=30)
            self._wake.clear()
            try:
                n = embed_pending(self.vectors, self.embedder, limit=10 * EMBED_BATCH)
                if n:
                    log.debug("embedded %d units", n)
                    self._wake.set()  # more may be waiting
                    continue
            except Exception:  # keep serving lexically; the next wake-up retries
                log.exception("background embedding failed")
            if not self._wake.is_set():
                self._idle.set()
