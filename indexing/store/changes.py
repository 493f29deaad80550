"""What derived indexes read from the store: every unit of a project, chunk by chunk, and the
units changed since a generation (the change log). Each runs on a cursor of one read
transaction, so it sees one snapshot of the store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from agentmemrec.indexing.store.protocol import Changes
from agentmemrec.indexing.units import Unit

if TYPE_CHECKING:
    from agentmemrec.indexing.store.sql_store import Cursor

SCAN_CHUNK = 50_000
UNIT_COLUMNS = ("id, project, kind, text, tokens, recorded_at, seq, ref, chunk, session, role, speaker, "
                "title, status, supersedes, superseded_by, path, heading, content_hash")  # a Unit's fields


def row_to_unit(row: tuple[Any, ...]) -> Unit:
    return Unit(*row)


def generation_and_log(cur: Cursor, project: str) -> tuple[int, int]:
    """The project's generation and the oldest generation its change log reaches back to."""
    row = cur.execute("SELECT generation, logged_from FROM projects WHERE project = ?", [project]).fetchone()
    return (int(row[0]), int(row[1] or 0)) if row else (0, 0)


def changed_ids(cur: Cursor, project: str, since: int) -> list[int]:
    return [r[0] for r in cur.execute(
        "SELECT DISTINCT unit_id FROM unit_changes WHERE project = ? AND generation > ? ORDER BY unit_id",
        [project, since]).fetchall()]


def changes_since(cur: Cursor, project: str, generation: int,
                  units_of: Callable[[list[int]], dict[int, Unit]]) -> Changes | None:
    """The units changed after `generation`; None when the log does not reach back that far
    (a store written before the log existed, or an index from another store)."""
    now, logged_from = generation_and_log(cur, project)
    if not logged_from <= generation <= now:
        return None
    ids = changed_ids(cur, project, generation)
    units = units_of(ids)
    return Changes(now, np.asarray(ids, dtype=np.int64), [units[i] for i in ids if i in units])


def scan_units(cur: Cursor, project: str, on_chunk: Callable[[list[Unit]], None],
               chunk: int | None = None, ids: tuple[int, int] | None = None) -> int:
    """Every unit of a project in id order (those with ids from `ids[0]` to `ids[1]`, if given),
    about `chunk` rows at a time (memory stays bounded), read by windows of ids so each query
    touches a bounded slice of the table; returns the generation they belong to."""
    chunk = chunk or SCAN_CHUNK
    generation, _ = generation_and_log(cur, project)
    lo, hi = ids or cur.execute("SELECT min(id), max(id) FROM units WHERE project = ?", [project]).fetchone()
    buffer: list[Unit] = []
    for start in range(lo or 0, (hi or -1) + 1, chunk):
        rows = cur.execute(f"SELECT {UNIT_COLUMNS} FROM units WHERE project = ? AND id BETWEEN ? AND ? "
                           "ORDER BY id", [project, start, min(start + chunk - 1, hi)]).fetchall()
        buffer.extend(row_to_unit(r) for r in rows)
        if len(buffer) >= chunk:
            on_chunk(buffer)
            buffer = []
    if buffer:
        on_chunk(buffer)
    return generation
