"""The DuckDB store: one file per home, the default backend for one developer.

DuckDB lets one process open a file for writing (`server/owner.py` makes the others forward to
it), so generation numbers are cached in the process and forgotten after each local write;
derived indexes may keep their files beside the store. The SQL itself is `sql_store`'s.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import duckdb
import numpy as np

from agentmemrec.indexing.errors import StoreError, StoreLocked
from agentmemrec.indexing.store.generations import Generations
from agentmemrec.indexing.store.migrations import MIGRATIONS, check_known
from agentmemrec.indexing.store.protocol import Vectors, WriteResult
from agentmemrec.indexing.store.sql_store import Cursor, SqlStore
from agentmemrec.indexing.store.vectors import SqlVectors
from agentmemrec.indexing.store.writes import Prepared, now
from agentmemrec.indexing.units import Unit

__all__ = ["MIGRATIONS", "DatabaseError", "DuckDBStore", "id_filter"]

DatabaseError = duckdb.Error  # what a failing query raises; the process boundary maps it to StoreError


def _open_error(path: Path, exc: duckdb.Error) -> StoreError:
    if "Could not set lock" in str(exc):
        return StoreLocked(f"the memory store {path} is open in another program: {exc}")
    if (path.exists() and not os.access(path, os.R_OK | os.W_OK)) or "Permission denied" in str(exc):
        return StoreError(f"cannot open the memory store {path}: permission denied (the file is not "
                          f"damaged); make it readable and writable by you: chmod 600 {path}")
    return StoreError(f"cannot open the memory store {path}: {exc}. Move the damaged file aside "
                      "to start an empty store, or put a backup in its place")


# DuckDB's own memory (buffer cache, ART indexes, query state; more spills to disk). The indexes
# the server searches live in their own snapshots, so caching table blocks beside them only
# doubles what a million stored vectors cost: 80% of RAM by default, here a fixed cap.
MEMORY_LIMIT = "512MB"
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


class DuckDBStore(SqlStore):
    """One DuckDB file. Thread-safe: a cursor per call, writes serialised by a lock."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = duckdb.connect(str(self.path))
        except duckdb.Error as exc:
            raise _open_error(self.path, exc) from exc
        self._write_lock = threading.Lock()
        super().__init__()
        try:
            if self.path.stat().st_uid == os.getuid():  # the rows are the user's alone, whatever the umask
                os.chmod(self.path, 0o600)
            self._conn.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
            self.generations = Generations.of(self.path)
            self.generations.clear()
            self._migrate()
        except duckdb.Error as exc:  # e.g. a truncated file fails at its first read
            self._conn.close()
            raise _open_error(self.path, exc) from exc
        except StoreError:
            self._conn.close()
            raise

    def close(self) -> None:
        self._conn.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        return self._conn.cursor()

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.cursor().execute(sql, params).fetchall()

    @property
    def index_dir(self) -> Path:
        return self.path.parent / "index"

    def _migrate(self) -> None:
        cur = self.cursor()
        cur.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(version INTEGER PRIMARY KEY, applied_at TIMESTAMP NOT NULL)")
        done = {v for (v,) in cur.execute("SELECT version FROM schema_migrations").fetchall()}
        check_known(done, len(MIGRATIONS), str(self.path))
        for version, sql in enumerate(MIGRATIONS, start=1):
            if version not in done:
                with self.transaction() as tx:
                    tx.execute(sql)
                    tx.execute("INSERT INTO schema_migrations VALUES (?, ?)", [version, now()])

    @property
    def schema_version(self) -> int:
        return len(MIGRATIONS)

    def vectors(self, model: str) -> DuckDBVectors:
        return DuckDBVectors(self, model)

    def _write_prepared(self, project: str, prepared: list[Prepared]) -> list[WriteResult]:
        """DuckDB is columnar, so the batch is planned in Python and written with bulk statements
        rather than one per row. Rows taken to be new are inserted plainly: DuckDB checks the
        unique key through its index, while an upsert joins against the whole table. Content
        already stored makes that insert fail; the batch is then written again as an upsert."""
        try:
            return self._write_once(project, prepared, fast=True)
        except duckdb.ConstraintException:
            return self._write_once(project, prepared, fast=False)

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
                try:
                    cur.execute("ROLLBACK")
                except duckdb.Error:  # a COMMIT that failed (a full disk) has ended it: keep its error
                    pass
                raise
            finally:
                if project is not None:
                    self.generations.forget(("units", project))
                    self.generations.forget(("rows",))

    @contextmanager
    def reading(self) -> Iterator[duckdb.DuckDBPyConnection]:
        cur = self.cursor()
        cur.execute("BEGIN")
        try:
            yield cur
        finally:
            cur.execute("COMMIT")

    def id_filter(self, column: str, ids: list[int]) -> tuple[str, list[Any]]:
        return id_filter(column, ids, self.total_units())

    def total_units(self) -> int:
        """Units in every project (what a scan of the table reads)."""
        def load() -> int:
            return int(self.fetch_one("SELECT coalesce(sum(units), 0) FROM projects")[0])
        return self.generations.get(("rows",), load)


class DuckDBVectors(SqlVectors):
    """Vectors as float16 BLOBs, read back column-wise (`fetchnumpy`: no tuple per row)."""

    def put(self, units: list[Unit], vectors: np.ndarray, hashes: list[str]) -> None:
        """New rows are inserted plainly (an upsert joins against the whole table); a unit that
        already has a row for this model (its text changed) makes the batch an upsert."""
        blobs = [v.astype(np.float16).tobytes() for v in vectors]
        try:
            self._put(units, blobs, hashes, upsert=False)
        except duckdb.ConstraintException:
            self._put(units, blobs, hashes, upsert=True)

    def _put(self, units: list[Unit], blobs: list[bytes], hashes: list[str], upsert: bool) -> None:
        conflict = ("ON CONFLICT (unit_id, model) DO UPDATE SET content_hash = excluded.content_hash, "
                    "vec = excluded.vec") if upsert else ""
        try:
            with self.store.transaction() as cur:
                cur.execute(  # a unit forgotten while it was being embedded gets no vector
                    f"""INSERT INTO vectors SELECT * FROM (SELECT unnest(?::BIGINT[]) AS unit_id, ?,
                        unnest(?::VARCHAR[]), unnest(?::BLOB[])) v WHERE v.unit_id IN (SELECT id FROM units)
                        {conflict}""", [[u.id for u in units], self.model, hashes, blobs])
                self._bump(cur, units)
        finally:
            self._forget(units)

    def _current(self, cur: Cursor, project: str, where: str, params: list[Any]) -> Vectors | None:
        found = cur.execute(
            f"""SELECT u.id, v.vec FROM units u JOIN vectors v ON v.unit_id = u.id AND v.model = ?
                AND v.content_hash = u.content_hash WHERE u.project = ? AND {where} ORDER BY u.id""",
            [self.model, project, *params]).fetchnumpy()  # columns as arrays: no tuple per row
        if not len(found["id"]):
            return None
        flat = np.frombuffer(b"".join(found["vec"]), dtype=np.float16)
        return Vectors(found["id"].astype(np.int64), flat.reshape(len(found["id"]), -1).astype(np.float32))
