"""The DuckDB store: the truth every index is derived from.

Rows are keyed by (project, key): `ref:<ref>#<chunk>` for items with a client ref, otherwise
`hash:<content hash>#<chunk>`, so writing the same ref updates in place and writing identical
content again stores nothing new. Each project has a generation number, bumped by every change,
that derived indexes record and are checked against.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator

import duckdb

from agentmemrec.indexing.errors import InputError, StoreError, StoreLocked
from agentmemrec.indexing.store.generations import CarriedCache, Generations
from agentmemrec.indexing.store.migrations import MIGRATIONS
from agentmemrec.indexing.store.writes import Prepared, WriteResult, now, resolve_all, write_batch
from agentmemrec.indexing.units import Item, Unit, check_project, chunk_item, content_hash

__all__ = ["MIGRATIONS", "DatabaseError", "SourceRow", "Store", "WriteResult", "id_filter"]

DatabaseError = duckdb.Error  # what a failing query raises; the process boundary maps it to StoreError
UNIT_COLUMNS = ("id, project, kind, text, tokens, recorded_at, seq, ref, chunk, session, role, speaker, "
                "title, status, supersedes, superseded_by, path, heading, content_hash")


def _row_to_unit(row: tuple[Any, ...]) -> Unit:
    return Unit(*row)


def _open_error(path: Path, exc: duckdb.Error) -> StoreError:
    if "Could not set lock" in str(exc):
        return StoreLocked(f"the memory store {path} is open in another program: {exc}")
    return StoreError(f"cannot open the memory store {path}: {exc}. Move the damaged file aside "
                      "to start an empty store, or put a backup in its place")


# DuckDB's own memory (buffer cache, ART indexes, query state; more spills to disk). The indexes
# the server searches live in their own snapshots, so caching table blocks beside them only
# doubles what a million stored vectors cost: 80% of RAM by default, here a fixed cap.
MEMORY_LIMIT = "512MB"
UNIT_CACHE = 50_000  # units kept per project (a few tens of MB); the cache is dropped when full
INDEX_SCAN_MAX = 2048  # DuckDB probes the primary key's index for a literal IN list up to this size
# Measured here: a literal list costs DuckDB about 0.07 ms per id (planning and one index probe
# each), a scan about 0.07 ms per thousand rows; so a scan wins below a thousand rows per id.
SCAN_ROWS_PER_ID = 1000


def id_filter(column: str, ids: list[int], table_rows: int | None = None) -> tuple[str, list[Any]]:
    """`column IN (...)` for unit ids: a literal list (an index lookup) when short and the table
    large, else a join against the list (a scan). Ids are ints, so the literal text is safe."""
    small_table = table_rows is not None and table_rows < SCAN_ROWS_PER_ID * len(ids)
    if len(ids) <= INDEX_SCAN_MAX and not small_table:
        return f"{column} IN ({', '.join(str(int(i)) for i in ids)})", []
    return f"{column} IN (SELECT unnest(?::BIGINT[]))", [list(ids)]


class Store:
    """One DuckDB file. Thread-safe: a cursor per call, writes serialised by a lock."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = duckdb.connect(str(self.path))
        except duckdb.Error as exc:
            raise _open_error(self.path, exc) from exc
        self._write_lock = threading.Lock()
        # units kept per project; decisions are not carried (their supersession links change
        # with other decisions' writes)
        self._units: CarriedCache[int, Unit] = CarriedCache(
            self.generation, self.changed_between,
            lambda _, units, changed: {i: u for i, u in units.items()
                                       if i not in changed and u.kind != "decision"})
        try:
            self._conn.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
            self.generations = Generations.of(self.path)
            self.generations.clear()
            self._migrate()
        except duckdb.Error as exc:  # e.g. a truncated file fails at its first read
            self._conn.close()
            raise _open_error(self.path, exc) from exc

    def close(self) -> None:
        self._conn.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        return self._conn.cursor()

    def _migrate(self) -> None:
        cur = self.cursor()
        cur.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(version INTEGER PRIMARY KEY, applied_at TIMESTAMP NOT NULL)")
        done = {v for (v,) in cur.execute("SELECT version FROM schema_migrations").fetchall()}
        for version, sql in enumerate(MIGRATIONS, start=1):
            if version not in done:
                with self.transaction() as tx:
                    tx.execute(sql)
                    tx.execute("INSERT INTO schema_migrations VALUES (?, ?)", [version, now()])

    @property
    def schema_version(self) -> int:
        return len(MIGRATIONS)

    # ---- writes -------------------------------------------------------------------------------

    def write(self, project: str, items: list[Item]) -> list[WriteResult]:
        """Store a validated batch in one transaction: all items or none.

        DuckDB is columnar, so the batch is planned in Python and written with bulk statements
        rather than one per row. Rows taken to be new are inserted plainly: DuckDB checks the
        unique key through its index, while an upsert joins against the whole table. Content
        already stored makes that insert fail; the batch is then written again as an upsert."""
        check_project(project)
        prepared = [Prepared(it, content_hash(it), chunk_item(it)) for it in items]
        try:
            return self._write_once(project, prepared, fast=True)
        except duckdb.ConstraintException:
            return self._write_once(project, prepared, fast=False)

    def _write_once(self, project: str, prepared: list[Prepared], fast: bool) -> list[WriteResult]:
        with self.transaction(project) as cur:
            removed: list[int] = []
            results = write_batch(cur, project, prepared, removed, fast)
            changed = [i for r in results if r.outcome != "unchanged" for i in r.ids]
            if changed or removed:
                self._bump(cur, project, changed + removed)
        return results

    @contextmanager
    def transaction(self, project: str | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor inside one write transaction, serialised with every other write. A write to a
        project's units names it, so its cached generation is forgotten once the write is over."""
        with self._write_lock:
            cur = self.cursor()
            cur.execute("BEGIN")
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            finally:
                if project is not None:
                    self.generations.forget(("units", project))
                    self.generations.forget(("rows",))

    @contextmanager
    def reading(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor inside one read transaction: everything read through it is one snapshot."""
        cur = self.cursor()
        cur.execute("BEGIN")
        try:
            yield cur
        finally:
            cur.execute("COMMIT")

    def ids_for(self, project: str, ref_or_id: str) -> list[int]:
        """The unit ids a ref (all chunks) or an id names in a project; empty if none."""
        return resolve_all(self.cursor(), project, ref_or_id)

    def _bump(self, cur: duckdb.DuckDBPyConnection, project: str, ids: Iterable[int]) -> None:
        """The project's next generation, with the units it changed (written, rewritten, renamed
        or removed) in the change log."""
        count = cur.execute("SELECT count(*) FROM units WHERE project = ?", [project]).fetchone()[0]
        generation = cur.execute(
            "INSERT INTO projects (project, generation, units) VALUES (?, 1, ?) ON CONFLICT (project) "
            "DO UPDATE SET generation = projects.generation + 1, units = excluded.units "
            "RETURNING generation", [project, count]).fetchone()[0]
        cur.execute("INSERT INTO unit_changes SELECT ?, ?, unnest(?::BIGINT[])",
                    [project, generation, sorted(set(ids))])

    def forget(self, project: str, refs: list[str]) -> list[int]:
        """Remove units by ref or id; unknown names fail the whole call and remove nothing."""
        check_project(project)
        with self.transaction(project) as cur:
            resolved = {r: resolve_all(cur, project, r) for r in refs}
            missing = [r for r, ids in resolved.items() if not ids]
            if missing:
                raise InputError(f"nothing to forget for {missing} in project {project!r}; "
                                 "pass refs or ids as remember/recall_slate returned them")
            ids = sorted({i for found in resolved.values() for i in found})
            cur.execute("UPDATE units SET superseded_by = NULL WHERE superseded_by IN "
                        "(SELECT unnest(?))", [ids])
            cur.execute("UPDATE units SET supersedes = NULL WHERE supersedes IN "
                        "(SELECT unnest(?))", [ids])
            cur.execute("DELETE FROM units WHERE id IN (SELECT unnest(?))", [ids])
            self._bump(cur, project, ids)
        return ids

    # ---- reads --------------------------------------------------------------------------------

    def generation(self, project: str) -> int:
        def load() -> int:
            row = self.cursor().execute("SELECT generation FROM projects WHERE project = ?",
                                        [project]).fetchone()
            return int(row[0]) if row else 0
        return self.generations.get(("units", project), load)

    def total_units(self) -> int:
        """Units in every project (what a scan of the table reads)."""
        def load() -> int:
            return int(self.cursor().execute("SELECT coalesce(sum(units), 0) FROM projects").fetchone()[0])
        return self.generations.get(("rows",), load)

    def projects(self) -> dict[str, int]:
        rows = self.cursor().execute(
            "SELECT project, count(*) FROM units GROUP BY project ORDER BY project").fetchall()
        return {p: int(n) for p, n in rows}

    def index_rows(self, project: str) -> tuple[list[int], list[str], int]:
        """Every unit of a project as (ids, index texts), with the generation they belong to."""
        with self.reading() as cur:  # one snapshot for rows and generation
            rows = cur.execute(f"SELECT {UNIT_COLUMNS} FROM units WHERE project = ? ORDER BY id",
                               [project]).fetchall()
            gen = cur.execute("SELECT generation FROM projects WHERE project = ?", [project]).fetchone()
        units = [_row_to_unit(r) for r in rows]
        return [u.id for u in units], [u.index_text() for u in units], int(gen[0]) if gen else 0

    def units(self, project: str, ids: Iterable[int],
              cur: duckdb.DuckDBPyConnection | None = None) -> dict[int, Unit]:
        """A project's units by id (others' ids are left out). Outside a transaction (`cur`), read
        through a cache of the project's current generation: a pool's units are mostly the ones
        recent recalls fetched, and DuckDB takes ~40 ms to look up 512 ids."""
        ids = list(ids)
        if not ids:
            return {}
        cache = self._units.current(project) if cur is None else {}
        found = {i: u for i in ids if (u := cache.get(i)) is not None}
        missing = [i for i in ids if i not in found]
        if missing:
            where, params = id_filter("id", missing, self.total_units())
            rows = (cur or self.cursor()).execute(  # by id alone: a project filter turns the lookup into a scan
                f"SELECT {UNIT_COLUMNS} FROM units WHERE {where}", params).fetchall()
            fetched = {r[0]: _row_to_unit(r) for r in rows if r[1] == project}
            if len(cache) + len(fetched) > UNIT_CACHE:
                cache.clear()
            cache.update(fetched)
            found.update(fetched)
        return found

    def changed_between(self, project: str, since: int, generation: int) -> set[int] | None:
        """Units the change log names after `since` up to `generation`; None when it does not
        reach back that far."""
        if since > generation:
            return None
        cur = self.cursor()
        row = cur.execute("SELECT logged_from FROM projects WHERE project = ?", [project]).fetchone()
        if row is None or (row[0] or 0) > since:
            return None
        return {r[0] for r in cur.execute(
            "SELECT unit_id FROM unit_changes WHERE project = ? AND generation > ? AND generation <= ?",
            [project, since, generation]).fetchall()}

    def units_by_id(self, ids: Iterable[int]) -> dict[int, Unit]:
        """Units by id in any project: for maintenance work (embedding), never for a request."""
        ids = list(ids)
        if not ids:
            return {}
        where, params = id_filter("id", ids)
        rows = self.cursor().execute(f"SELECT {UNIT_COLUMNS} FROM units WHERE {where}", params).fetchall()
        return {r[0]: _row_to_unit(r) for r in rows}

    def ineligible_ids(self, project: str, as_of: datetime | None) -> set[int]:
        """Units recorded after `as_of` (none when as_of is None)."""
        if as_of is None:
            return set()
        rows = self.cursor().execute("SELECT id FROM units WHERE project = ? AND recorded_at > ?",
                                     [project, as_of]).fetchall()
        return {r[0] for r in rows}

    def count_units(self, project: str) -> int:
        return int(self.cursor().execute("SELECT count(*) FROM units WHERE project = ?",
                                         [project]).fetchone()[0])

    def units_outside(self, project: str) -> int:
        """How many units other projects hold, from the per-project counters (no row is read)."""
        row = self.cursor().execute("SELECT coalesce(sum(units), 0) FROM projects "
                                    "WHERE project <> ?", [project]).fetchone()
        return int(row[0])

    # ---- sources that write on their own (note watcher) ---------------------------------------

    def sources(self, project: str, ref_prefixes: tuple[str, ...], path_prefix: str = ""
                ) -> list["SourceRow"]:
        """Every item whose ref starts with one of `ref_prefixes` and whose path lies under
        `path_prefix` ('' for all): the units a source such as the note watcher owns."""
        like = " OR ".join("starts_with(ref, ?)" for _ in ref_prefixes) or "false"
        rows = self.cursor().execute(
            f"SELECT ref, path, kind, content_hash FROM units WHERE project = ? AND chunk = 0 "
            f"AND path IS NOT NULL AND starts_with(path, ?) AND ({like}) ORDER BY ref",
            [project, path_prefix, *ref_prefixes]).fetchall()
        return [SourceRow(*row) for row in rows]

    def rename_ref(self, project: str, old_ref: str, new_ref: str, path: str | None) -> list[int]:
        """Give an item (all its chunks) a new ref and path in place, keeping its unit ids: a
        renamed file keeps its identity. Refused if `new_ref` is taken or `old_ref` unknown."""
        check_project(project)
        with self.transaction(project) as cur:
            taken = cur.execute("SELECT count(*) FROM units WHERE project = ? AND ref = ?",
                                [project, new_ref]).fetchone()[0]
            if taken:
                raise InputError(f"ref {new_ref!r} already exists in project {project!r}")
            ids = [r[0] for r in cur.execute(
                "UPDATE units SET ref = ?, key = 'ref:' || ? || '#' || CAST(chunk AS VARCHAR), "
                "path = coalesce(?, path) WHERE project = ? AND ref = ? RETURNING id",
                [new_ref, new_ref, path, project, old_ref]).fetchall()]
            if not ids:
                raise InputError(f"ref {old_ref!r} names nothing in project {project!r}")
            self._bump(cur, project, ids)
        return sorted(ids)


@dataclass(frozen=True)
class SourceRow:
    """What the store holds for one item of a source: its ref, path, kind and content hash."""

    ref: str
    path: str
    kind: str
    content_hash: str
