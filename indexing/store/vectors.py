"""Vector rows beside the units they describe.

Vectors are keyed by (unit id, model identity) and record the content hash they were computed
from, so an updated unit is re-embedded and a changed model re-embeds everything
(indexing/dense/backfill.py). Each project's vector generation moves with every batch stored,
with the units it covered in a change log, so the dense snapshot (indexing/dense/index.py)
follows new vectors without reloading. `SqlVectors` is the SQL both backends share; how a
vector is stored and read back in bulk is each backend's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Collection, Iterator

import numpy as np

from agentmemrec.indexing.store.changes import changed_ids, generation_and_log
from agentmemrec.indexing.store.protocol import VectorKey, Vectors
from agentmemrec.indexing.units import Unit

if TYPE_CHECKING:
    from agentmemrec.indexing.store.sql_store import Cursor, SqlStore

WINDOW = 65_536  # unit ids per read while loading or scanning for pending units


class SqlVectors(ABC):
    """A store's vectors for one model identity."""

    def __init__(self, store: SqlStore, model: str) -> None:
        self.store = store
        self.model = model
        self._pending: dict[str, tuple[VectorKey, int]] = {}  # project -> (generations, count)

    @abstractmethod
    def put(self, units: list[Unit], vectors: np.ndarray, hashes: list[str]) -> None:
        """Store vectors; each project's vector generation moves on, with the units in its log."""

    @abstractmethod
    def _current(self, cur: Cursor, project: str, where: str, params: list[Any]) -> Vectors | None:
        """The current vectors of a project's units matching `where` (over `u`, the units)."""

    def claim(self) -> AbstractContextManager[bool]:
        return nullcontext(True)  # one process owns an embedded store: nobody else embeds

    def pending_windows(self, project: str | None = None, only: Collection[int] | None = None) -> Iterator[list[Unit]]:
        """Units without a current vector for this model (new, updated, or a new model), a window
        of ids at a time, so each read touches a bounded slice of the tables; with `only`, those
        of them with these ids (the others' texts are not read)."""
        where = "AND u.project = ?" if project else ""
        lo, hi = self.store.fetch_one(f"SELECT min(id), max(id) FROM units u WHERE true {where}",
                                      [project] if project else [])
        for start in range(lo or 0, (hi or -1) + 1, WINDOW):
            rows = self.store.fetch(
                f"""SELECT u.id FROM units u LEFT JOIN vectors v ON v.unit_id = u.id AND v.model = ?
                    AND v.content_hash = u.content_hash AND v.unit_id BETWEEN ? AND ?
                    WHERE v.unit_id IS NULL AND u.id BETWEEN ? AND ? {where} ORDER BY u.id""",
                [self.model, start, start + WINDOW - 1, start, start + WINDOW - 1,
                 *([project] if project else [])])
            ids = [r[0] for r in rows if only is None or r[0] in only]
            if ids:
                units = self.store.units_by_id(ids)
                yield [units[i] for i in ids if i in units]

    def count_pending(self, project: str) -> int:
        """Units of a project without a current vector, counted again only when a write or a
        batch of vectors moved it (every recall's notes ask, while the backfill runs)."""
        key = (self.store.generation(project), self.generation(project))
        held = self._pending.get(project)
        if held is None or held[0] != key:
            held = key, int(self.store.fetch_one(
                """SELECT count(*) FROM units u LEFT JOIN vectors v
                   ON v.unit_id = u.id AND v.model = ? AND v.content_hash = u.content_hash
                   WHERE v.unit_id IS NULL AND u.project = ?""", [self.model, project])[0])
            self._pending[project] = held
        return held[1]

    def _bump(self, cur: Cursor, units: list[Unit]) -> None:
        """Inside `put`'s transaction: each project's next vector generation, with its units logged."""
        projects = sorted({u.project for u in units})
        generations = dict(cur.execute(
            """INSERT INTO vector_state (project, model, generation) SELECT unnest(?::VARCHAR[]), ?, 1
               ON CONFLICT (project, model) DO UPDATE SET generation = vector_state.generation + 1
               RETURNING project, generation""", [projects, self.model]).fetchall())
        cur.execute("INSERT INTO vector_changes SELECT unnest(?::VARCHAR[]), ?, unnest(?::BIGINT[]), "
                    "unnest(?::BIGINT[])", [[u.project for u in units], self.model,
                                            [generations[u.project] for u in units], [u.id for u in units]])
        for project in projects:
            self.store._moved(cur, ("vectors", project, self.model))

    def _forget(self, units: list[Unit]) -> None:
        for project in {u.project for u in units}:
            self.store.generations.forget(("vectors", project, self.model))

    def generation(self, project: str) -> int:
        def load() -> int:
            row = self.store.fetch_one("SELECT generation FROM vector_state WHERE project = ? AND model = ?",
                                       [project, self.model])
            return int(row[0]) if row else 0
        return self.store.generations.get(("vectors", project, self.model), load)

    def _key(self, cur: Cursor, project: str) -> tuple[VectorKey, VectorKey]:
        """((store generation, vector generation), the generations their logs reach back to)."""
        generation, logged = generation_and_log(cur, project)
        row = cur.execute("SELECT generation, logged_from FROM vector_state WHERE project = ? AND model = ?",
                          [project, self.model]).fetchone()
        vgen, vlogged = (int(row[0]), int(row[1] or 0)) if row else (0, 0)
        return (generation, vgen), (logged, vlogged)

    def load(self, project: str) -> tuple[VectorKey, list[Vectors]]:
        """Every current vector of a project, a window of ids per part (no copy of the whole)."""
        with self.store.reading() as cur:
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

    def changes_since(self, project: str, key: VectorKey) -> tuple[VectorKey, np.ndarray, Vectors | None] | None:
        """Units whose rows or vectors changed after `key`, with the current vectors of those that
        have one; None when the logs do not reach back that far."""
        with self.store.reading() as cur:
            now, logged = self._key(cur, project)
            if not all(lg <= k <= n for lg, k, n in zip(logged, key, now)):
                return None
            ids = set(changed_ids(cur, project, key[0]))
            ids.update(r[0] for r in cur.execute(
                "SELECT unit_id FROM vector_changes WHERE project = ? AND model = ? AND generation > ?",
                [project, self.model, key[1]]).fetchall())
            changed = sorted(ids)
            where, params = self.store.id_filter("u.id", changed) if changed else ("false", [])
            return now, np.asarray(changed, dtype=np.int64), self._current(cur, project, where, params)


def drop_vectors(cur: Cursor, ids: list[int]) -> None:
    """Inside the transaction that removes units: their vectors (and the text hashes beside them),
    for every model."""
    if ids:
        cur.execute("DELETE FROM vectors WHERE unit_id IN (SELECT unnest(?::BIGINT[]))", [ids])
