"""Vectors in PostgreSQL: pgvector `halfvec` rows, the same float16 values the DuckDB store keeps.

A batch is written as text (each float16 printed exactly, so PostgreSQL stores the very value
DuckDB would), and read back in bulk through a binary COPY whose fixed-width rows numpy decodes
at once: no Python object per vector. One process embeds at a time: `claim` is a session-level
advisory lock per model, which the database drops if that process dies.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from agentmemrec.indexing.store.protocol import Vectors
from agentmemrec.indexing.store.vectors import SqlVectors
from agentmemrec.indexing.units import Unit

if TYPE_CHECKING:
    from agentmemrec.indexing.store.postgres_store import PostgresStore
    from agentmemrec.indexing.store.sql_store import Cursor

COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


def halfvec_text(vector: np.ndarray) -> str:
    """pgvector's text form of a vector rounded to float16, exactly (repr round-trips)."""
    return "[" + ",".join(map(repr, vector.astype(np.float16).astype(np.float64).tolist())) + "]"


def decode_copy(data: bytes) -> Vectors | None:
    """Rows of (id bigint, vec halfvec) from a binary COPY: each row has the same width."""
    if not data.startswith(COPY_SIGNATURE):
        raise ValueError("not a binary COPY stream")
    start = len(COPY_SIGNATURE) + 8 + int.from_bytes(data[15:19], "big")  # flags, extension length
    body = data[start:-2]  # the trailer is -1 as int16
    if not body:
        return None
    dim = int.from_bytes(body[18:20], "big")
    row = np.dtype([("fields", ">i2"), ("id_len", ">i4"), ("id", ">i8"), ("vec_len", ">i4"),
                    ("dim", ">i2"), ("unused", ">i2"), ("vec", ">f2", (dim,))])
    rows = np.frombuffer(body, dtype=row)
    return Vectors(rows["id"].astype(np.int64), rows["vec"].astype(np.float32))


class PgVectors(SqlVectors):
    store: PostgresStore

    def put(self, units: list[Unit], vectors: np.ndarray, hashes: list[str]) -> None:
        try:
            with self.store.transaction() as cur:
                # a unit forgotten while it was being embedded gets no vector: a forget holds its
                # project's lock, so once these are held every forget is committed or not begun
                for key in sorted(self.store.lock_key("project", p) for p in {u.project for u in units}):
                    cur.execute("SELECT pg_advisory_xact_lock(?)", [key])  # in one order: no deadlock
                ids = [u.id for u in units]
                cur.execute(
                    """INSERT INTO vectors SELECT * FROM (SELECT unnest(?::BIGINT[]) AS unit_id, ?,
                       unnest(?::VARCHAR[]), unnest(?::VARCHAR[])::halfvec) v WHERE v.unit_id IN
                       (SELECT id FROM units WHERE id = ANY(?::BIGINT[])) ON CONFLICT (unit_id, model) DO UPDATE
                       SET content_hash = excluded.content_hash, vec = excluded.vec""",
                    [ids, self.model, hashes, [halfvec_text(v) for v in vectors], ids])
                self._bump(cur, units)
        finally:
            self._forget(units)

    def _current(self, cur: Cursor, project: str, where: str, params: list[Any]) -> Vectors | None:
        sql = (f"COPY (SELECT u.id, v.vec FROM units u JOIN vectors v ON v.unit_id = u.id AND v.model = %s "
               f"AND v.content_hash = u.content_hash WHERE u.project = %s AND {where.replace('?', '%s')} "
               "ORDER BY u.id) TO STDOUT (FORMAT BINARY)")
        with cur.cursor.copy(sql, [self.model, project, *params]) as copy:
            return decode_copy(b"".join(bytes(block) for block in copy))

    @contextmanager
    def claim(self) -> Iterator[bool]:
        """Whether this process embeds now; held until the pass ends (or the process dies)."""
        key = self.store.lock_key("embedding", self.model)
        with self.store.connection() as conn:
            ours = bool(conn.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()[0])
            try:
                yield ours
            finally:
                if ours and not conn.closed:
                    conn.execute("SELECT pg_advisory_unlock(%s)", [key])
