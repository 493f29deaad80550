"""Vector rows in the same DuckDB file as the units they describe.

Vectors are keyed by (unit id, model identity) and record the content hash they were computed
from, so an updated unit is re-embedded and a changed model re-embeds everything
(indexing/dense/backfill.py). Each project's vector generation moves with every batch stored,
with the units it covered in a change log, so the dense snapshot (indexing/dense/index.py)
follows new vectors without reloading."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import duckdb
import numpy as np

from agentmemrec.indexing.store.changes import changed_ids, generation_and_log
from agentmemrec.indexing.store.duckdb_store import Store, id_filter
from agentmemrec.indexing.units import Unit

WINDOW = 65_536  # unit ids per read while loading or scanning for pending units


@dataclass(frozen=True)
class Vectors:
    """One part: unit ids (ascending) and their L2-normalised vectors as float32 rows."""

    ids: np.ndarray
    matrix: np.ndarray


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

    def changes_since(self, project: str, key: tuple[int, int]
                      ) -> tuple[tuple[int, int], np.ndarray, Vectors | None] | None:
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
            where, params = id_filter("u.id", changed) if changed else ("false", [])
            return now, np.asarray(changed, dtype=np.int64), self._current(cur, project, where, params)

    def drop_orphans(self) -> None:
        with self.store.transaction() as cur:
            cur.execute("DELETE FROM vectors WHERE unit_id NOT IN (SELECT id FROM units)")
