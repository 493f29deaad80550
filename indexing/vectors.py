"""The dense channel: vectors in DuckDB, an in-memory snapshot per project that follows writes.

Vectors are keyed by (unit id, model identity) and record the content hash they were computed
from, so an updated unit is re-embedded and a changed model re-embeds everything (indexing/
backfill.py). Search is an exact inner product over the project's current vectors, held in
memory as float32 (float16 on disk) in a few immutable parts (indexing/segments.py): a write or
a new batch of vectors marks the changed units' old rows dead and adds a part for their current
vectors, found through the change logs, so nothing is reloaded whole after the first load.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator, Sequence

import duckdb
import numpy as np

from .changes import changed_ids, generation_and_log, reading
from .embedder import Embedder
from .segments import Segments, keep_rows
from .store import Store, id_filter
from .units import Unit

log = logging.getLogger(__name__)
WINDOW = 65_536  # unit ids per read while loading or scanning for pending units


@dataclass(frozen=True)
class DenseHit:
    unit_id: int
    rank: int
    score: float


@dataclass(frozen=True)
class Vectors:
    """One part: unit ids (ascending) and their L2-normalised vectors as float32 rows."""

    ids: np.ndarray
    matrix: np.ndarray


def merge_vectors(parts: Sequence[Vectors], dead: Sequence[np.ndarray | None]) -> Vectors:
    """The live rows of several parts as one part, ids ascending."""
    keep = [keep_rows(d, len(p.ids)) for p, d in zip(parts, dead)]
    ids = np.concatenate([p.ids[k] for p, k in zip(parts, keep)])
    dest = np.empty(len(ids), dtype=np.int64)
    dest[np.argsort(ids, kind="stable")] = np.arange(len(ids))
    matrix = np.empty((len(ids), parts[0].matrix.shape[1]), dtype=np.float32)
    start = 0
    for p, k, d in zip(parts, keep, dead):
        matrix[dest[start:start + len(k)]] = p.matrix if d is None else p.matrix[k]
        start += len(k)
    return Vectors(np.sort(ids), matrix)


@dataclass(frozen=True)
class DenseSnapshot:
    project: str
    key: tuple[int, int]  # (store generation, vector generation)
    segments: Segments[Vectors]
    dim: int

    @cached_property
    def _row_ids(self) -> np.ndarray:
        parts = self.segments.parts
        return np.concatenate([p.ids for p in parts]) if parts else np.zeros(0, np.int64)

    @cached_property
    def ids(self) -> np.ndarray:
        """Units with a current vector, ascending."""
        return np.sort(self._row_ids[self._rows(np.unique(self._row_ids))[0]])

    def _rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts = self.segments.offsets()
        found = self.segments.locate(ids)
        if not found:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return (np.concatenate([starts[i] + pos for i, pos, _ in found]),
                np.concatenate([w for _, _, w in found]))

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Cosine with every row, parts end to end; dead rows -inf."""
        q = query.astype(np.float32)
        out = [p.matrix @ q if d is None else np.where(d, -np.inf, p.matrix @ q).astype(np.float32)
               for p, d in zip(self.segments.parts, self.segments.dead)]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def search(self, query: np.ndarray, k: int, exclude: set[int] | frozenset[int] = frozenset()) -> list[DenseHit]:
        scores = self.similarities(query)
        if exclude and len(scores):
            scores[self._rows(np.sort(np.fromiter(exclude, dtype=np.int64)))[0]] = -np.inf
        k = min(k, int(np.isfinite(scores).sum()))
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k]
        ids = self._row_ids
        top = top[np.lexsort((ids[top], -scores[top]))]
        return [DenseHit(int(ids[p]), r, float(scores[p])) for r, p in enumerate(top, 1)]

    def lookup(self, query: np.ndarray, ids: list[int]) -> dict[int, float]:
        """Cosine similarity of the query with the given units that have a vector."""
        if not ids:
            return {}
        wanted = np.asarray(sorted(set(ids)), dtype=np.int64)
        out: dict[int, float] = {}
        for i, pos, which in self.segments.locate(wanted):
            sims = self.segments.parts[i].matrix[pos] @ query.astype(np.float32)
            out.update(zip(wanted[which].tolist(), sims.tolist()))
        return out

    def advanced(self, key: tuple[int, int], changed: np.ndarray, fresh: Vectors) -> "DenseSnapshot":
        return DenseSnapshot(self.project, key, self.segments.without(changed).plus(fresh, merge_vectors),
                             self.dim or fresh.matrix.shape[1])


class VectorStore:
    """Vector rows in the same DuckDB file as the units they describe."""

    def __init__(self, store: Store, model: str) -> None:
        self.store = store
        self.model = model

    def pending_windows(self, project: str | None = None) -> Iterator[list[Unit]]:
        """Units without a current vector for this model (new, updated, or a new model), a window
        of ids at a time, so each read touches a bounded slice of the tables."""
        where = "AND u.project = ?" if project else ""
        cur = self.store.cursor()
        lo, hi = cur.execute(f"SELECT min(id), max(id) FROM units u WHERE true {where}",
                             [project] if project else []).fetchone()
        for start in range(lo or 0, (hi or -1) + 1, WINDOW):
            rows = cur.execute(
                f"""SELECT u.id FROM units u LEFT JOIN vectors v ON v.unit_id = u.id AND v.model = ?
                    AND v.content_hash = u.content_hash AND v.unit_id BETWEEN ? AND ?
                    WHERE v.unit_id IS NULL AND u.id BETWEEN ? AND ? {where} ORDER BY u.id""",
                [self.model, start, start + WINDOW - 1, start, start + WINDOW - 1,
                 *([project] if project else [])]).fetchall()
            if rows:
                units = self.store.units_by_id([r[0] for r in rows])
                yield [units[r[0]] for r in rows if r[0] in units]

    def count_pending(self, project: str) -> int:
        return int(self.store.cursor().execute(
            """SELECT count(*) FROM units u LEFT JOIN vectors v
               ON v.unit_id = u.id AND v.model = ? AND v.content_hash = u.content_hash
               WHERE v.unit_id IS NULL AND u.project = ?""", [self.model, project]).fetchone()[0])

    def put(self, units: list[Unit], vectors: np.ndarray, hashes: list[str]) -> None:
        """Store vectors; each project's vector generation moves on, with the units in its log.
        New rows are inserted plainly (an upsert joins against the whole table); a unit that
        already has a row for this model (its text changed) makes the batch an upsert."""
        blobs = [v.astype(np.float16).tobytes() for v in vectors]
        try:
            self._put(units, blobs, hashes, upsert=False)
        except duckdb.ConstraintException:
            self._put(units, blobs, hashes, upsert=True)

    def _put(self, units: list[Unit], blobs: list[bytes], hashes: list[str], upsert: bool) -> None:
        projects = sorted({u.project for u in units})
        conflict = ("ON CONFLICT (unit_id, model) DO UPDATE SET content_hash = excluded.content_hash, "
                    "vec = excluded.vec") if upsert else ""
        try:
            with self.store.transaction() as cur:
                cur.execute(
                    f"""INSERT INTO vectors SELECT unnest(?::BIGINT[]), ?, unnest(?::VARCHAR[]),
                        unnest(?::BLOB[]) {conflict}""", [[u.id for u in units], self.model, hashes, blobs])
                generations = dict(cur.execute(
                    """INSERT INTO vector_state (project, model, generation) SELECT unnest(?::VARCHAR[]), ?, 1
                       ON CONFLICT (project, model) DO UPDATE SET generation = vector_state.generation + 1
                       RETURNING project, generation""", [projects, self.model]).fetchall())
                cur.execute("INSERT INTO vector_changes SELECT unnest(?::VARCHAR[]), ?, unnest(?::BIGINT[]), "
                            "unnest(?::BIGINT[])", [[u.project for u in units], self.model,
                                                    [generations[u.project] for u in units], [u.id for u in units]])
        finally:
            for project in projects:
                self.store.generations.forget(("vectors", project, self.model))

    def generation(self, project: str) -> int:
        def load() -> int:
            row = self.store.cursor().execute("SELECT generation FROM vector_state WHERE project = ? AND model = ?",
                                              [project, self.model]).fetchone()
            return int(row[0]) if row else 0
        return self.store.generations.get(("vectors", project, self.model), load)

    def _key(self, cur: duckdb.DuckDBPyConnection, project: str) -> tuple[tuple[int, int], tuple[int, int]]:
        """((store generation, vector generation), the generations their logs reach back to)."""
        generation, logged = generation_and_log(cur, project)
        row = cur.execute("SELECT generation, logged_from FROM vector_state WHERE project = ? AND model = ?",
                          [project, self.model]).fetchone()
        vgen, vlogged = (int(row[0]), int(row[1] or 0)) if row else (0, 0)
        return (generation, vgen), (logged, vlogged)

    def _current(self, cur: duckdb.DuckDBPyConnection, project: str, where: str, params: list) -> Vectors | None:
        found = cur.execute(
            f"""SELECT u.id, v.vec FROM units u JOIN vectors v ON v.unit_id = u.id AND v.model = ?
                AND v.content_hash = u.content_hash WHERE u.project = ? AND {where} ORDER BY u.id""",
            [self.model, project, *params]).fetchnumpy()  # columns as arrays: no tuple per row
        if not len(found["id"]):
            return None
        flat = np.frombuffer(b"".join(found["vec"]), dtype=np.float16)
        return Vectors(found["id"].astype(np.int64), flat.reshape(len(found["id"]), -1).astype(np.float32))

    def load(self, project: str) -> tuple[tuple[int, int], list[Vectors]]:
        """Every current vector of a project, a window of ids per part (no copy of the whole)."""
        with reading(self.store) as cur:
            key, _ = self._key(cur, project)
            lo, hi = cur.execute("SELECT min(id), max(id) FROM units WHERE project = ?", [project]).fetchone()
            parts: list[Vectors] = []
            pieces: list[Vectors] = []
            for start in range(lo or 0, (hi or -1) + 1, WINDOW):
                piece = self._current(cur, project, "u.id BETWEEN ? AND ? AND v.unit_id BETWEEN ? AND ?",
                                      [start, start + WINDOW - 1] * 2)
                pieces += [piece] if piece is not None else []
                if sum(len(p.ids) for p in pieces) >= WINDOW // 2 or (pieces and start + WINDOW > (hi or 0)):
                    parts.append(pieces[0] if len(pieces) == 1 else Vectors(
                        np.concatenate([p.ids for p in pieces]), np.concatenate([p.matrix for p in pieces])))
                    pieces = []
        return key, parts

    def changes_since(self, project: str, key: tuple[int, int]
                      ) -> tuple[tuple[int, int], np.ndarray, Vectors | None] | None:
        """Units whose rows or vectors changed after `key`, with the current vectors of those that
        have one; None when the logs do not reach back that far."""
        with reading(self.store) as cur:
            now, logged = self._key(cur, project)
            if not all(lg <= k <= n for lg, k, n in zip(logged, key, now)):
                return None
            ids = set(changed_ids(cur, project, key[0]))
            ids.update(r[0] for r in cur.execute(
                "SELECT unit_id FROM vector_changes WHERE project = ? AND model = ? AND generation > ?",
                [project, self.model, key[1]]).fetchall())
            changed = sorted(ids)
            where, params = id_filter("u.id", changed) if changed else ("false", [])
            return now, np.asarray(changed, dtype=np.int64), self._current(cur, project, where, params)

    def drop_orphans(self) -> None:
        with self.store.transaction() as cur:
            cur.execute("DELETE FROM vectors WHERE unit_id NOT IN (SELECT id FROM units)")


class DenseIndex:
    """Hands out the current dense snapshot of a project, catching up with writes and new vectors."""

    def __init__(self, store: Store, embedder: Embedder) -> None:
        self.store = store
        self.embedder = embedder
        self.vectors = VectorStore(store, embedder.identity)
        self._cache: dict[str, DenseSnapshot] = {}
        self._lock = threading.Lock()

    def snapshot(self, project: str) -> DenseSnapshot:
        key = (self.store.generation(project), self.vectors.generation(project))
        snap = self._cache.get(project)
        if snap is not None and snap.key == key:
            return snap
        with self._lock:
            snap = self._cache.get(project)
            if snap is None or snap.key != key:
                snap = self._advance(project, snap)
                self._cache[project] = snap
            return snap

    def _advance(self, project: str, snap: DenseSnapshot | None) -> DenseSnapshot:
        found = self.vectors.changes_since(project, snap.key) if snap is not None else None
        if snap is None or found is None or len(found[1]) > max(WINDOW, snap.segments.live // 2):
            key, parts = self.vectors.load(project)
            return DenseSnapshot(project, key, Segments(tuple(parts), (None,) * len(parts)), self.embedder.dim)
        key, changed, fresh = found
        return snap.advanced(key, changed, fresh or Vectors(np.zeros(0, np.int64),
                                                              np.zeros((0, self.embedder.dim), np.float32)))


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
