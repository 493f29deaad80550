"""The DuckDB store: the truth every index is derived from.

Rows are keyed by (project, key): `ref:<ref>#<chunk>` for items with a client ref, otherwise
`hash:<content hash>#<chunk>`, so writing the same ref updates in place and writing identical
content again stores nothing new. Each project has a generation number, bumped by every change,
that derived indexes record and are checked against.
"""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

import duckdb

from .errors import InputError, StoreError, StoreLocked
from .generations import Generations
from .units import Chunk, Item, Unit, check_project, chunk_item, content_hash

MIGRATIONS: list[str] = [
    # 1: units, per-project generations, saved slate explanations
    """
    CREATE SEQUENCE unit_ids START 1;
    CREATE SEQUENCE unit_seq START 1;
    CREATE TABLE units (
        id BIGINT PRIMARY KEY DEFAULT nextval('unit_ids'),
        project VARCHAR NOT NULL,
        key VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,
        ref VARCHAR,
        chunk INTEGER NOT NULL,
        content_hash VARCHAR NOT NULL,
        text VARCHAR NOT NULL,
        tokens INTEGER NOT NULL,
        session VARCHAR, role VARCHAR, speaker VARCHAR, title VARCHAR, status VARCHAR,
        supersedes BIGINT, superseded_by BIGINT, path VARCHAR, heading VARCHAR,
        recorded_at TIMESTAMP NOT NULL,
        seq BIGINT NOT NULL,
        written_at TIMESTAMP NOT NULL,
        UNIQUE (project, key)
    );
    CREATE TABLE projects (project VARCHAR PRIMARY KEY, generation BIGINT NOT NULL,
                           units BIGINT NOT NULL DEFAULT 0);
    CREATE TABLE slates (slate_id VARCHAR PRIMARY KEY, project VARCHAR NOT NULL,
                         created_at TIMESTAMP NOT NULL, payload VARCHAR NOT NULL);
    """,
    # 2: dense vectors, keyed by unit, model identity and the content they were computed from
    """
    CREATE TABLE vectors (unit_id BIGINT NOT NULL, model VARCHAR NOT NULL,
                          content_hash VARCHAR NOT NULL, vec BLOB NOT NULL,
                          PRIMARY KEY (unit_id, model));
    CREATE TABLE vector_state (project VARCHAR NOT NULL, model VARCHAR NOT NULL,
                               generation BIGINT NOT NULL, PRIMARY KEY (project, model));
    """,
    # 3: bearer tokens for the HTTP transport: only a hash of each secret is kept
    """
    CREATE TABLE tokens (name VARCHAR PRIMARY KEY, secret_sha256 VARCHAR NOT NULL UNIQUE,
                         projects VARCHAR[] NOT NULL, created_at TIMESTAMP NOT NULL);
    """,
    # 4: change logs, so derived indexes catch up with a write instead of rebuilding; a log
    # reaches back to `logged_from` (the generation at which this migration ran)
    """
    CREATE TABLE unit_changes (project VARCHAR NOT NULL, generation BIGINT NOT NULL,
                               unit_id BIGINT NOT NULL);
    CREATE TABLE vector_changes (project VARCHAR NOT NULL, model VARCHAR NOT NULL,
                                 generation BIGINT NOT NULL, unit_id BIGINT NOT NULL);
    ALTER TABLE projects ADD COLUMN logged_from BIGINT DEFAULT 0;
    UPDATE projects SET logged_from = generation;
    ALTER TABLE vector_state ADD COLUMN logged_from BIGINT DEFAULT 0;
    UPDATE vector_state SET logged_from = generation;
    """,
]

UNIT_ID = re.compile(r"#?[0-9]{1,18}")  # ASCII digits only ('¹'.isdigit()), and within BIGINT
DatabaseError = duckdb.Error  # what a failing query raises; the process boundary maps it to StoreError
UNIT_COLUMNS = ("id, project, kind, text, tokens, recorded_at, seq, ref, chunk, session, role, speaker, "
                "title, status, supersedes, superseded_by, path, heading, content_hash")


@dataclass(frozen=True)
class WriteResult:
    """What one item became: its unit ids (several for a chunked note) and what happened."""

    ref: str | None
    ids: tuple[int, ...]
    outcome: str  # "stored" | "updated" | "unchanged"


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


@dataclass(frozen=True)
class _Prepared:
    item: Item
    hash: str
    chunks: list[Chunk]


def _row_to_unit(row: tuple[Any, ...]) -> Unit:
    return Unit(*row)


def _open_error(path: Path, exc: duckdb.Error) -> StoreError:
    if "Could not set lock" in str(exc):
        return StoreLocked(f"the memory store {path} is open in another program: {exc}")
    return StoreError(f"cannot open the memory store {path}: {exc}. Move the damaged file aside "
                      "to start an empty store, or put a backup in its place")


UPSERT = """ON CONFLICT (project, key) DO UPDATE SET
    content_hash = excluded.content_hash, text = excluded.text, tokens = excluded.tokens,
    session = excluded.session, role = excluded.role, speaker = excluded.speaker,
    title = excluded.title, status = excluded.status, path = excluded.path,
    heading = excluded.heading, recorded_at = excluded.recorded_at, written_at = excluded.written_at
    WHERE NOT starts_with(excluded.key, 'hash:')  -- same content: nothing to write"""

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
        self._unit_cache: dict[str, tuple[int, dict[int, Unit]]] = {}
        self._cache_lock = threading.Lock()
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
            if version in done:
                continue
            cur.execute("BEGIN")
            cur.execute(sql)
            cur.execute("INSERT INTO schema_migrations VALUES (?, ?)", [version, _now()])
            cur.execute("COMMIT")

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
        prepared = [_Prepared(it, content_hash(it), chunk_item(it)) for it in items]
        try:
            return self._write_once(project, prepared, fast=True)
        except duckdb.ConstraintException:
            return self._write_once(project, prepared, fast=False)

    def _write_once(self, project: str, prepared: list["_Prepared"], fast: bool) -> list[WriteResult]:
        with self._write_lock:
            cur = self.cursor()
            cur.execute("BEGIN")
            try:
                removed: list[int] = []
                results = self._write_batch(cur, project, prepared, removed, fast)
                changed = [i for r in results if r.outcome != "unchanged" for i in r.ids]
                if changed or removed:
                    self._bump(cur, project, changed + removed)
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            finally:
                self.generations.forget(("units", project))
                self.generations.forget(("rows",))
        return results

    def _write_batch(self, cur: duckdb.DuckDBPyConnection, project: str, batch: list["_Prepared"],
                     removed: list[int], fast: bool = False) -> list[WriteResult]:
        # Items without a ref are keyed by their content: the insert itself finds one already
        # stored (the unique key), so only refs are looked up first.
        named = [p.item.supersedes for p in batch if p.item.supersedes]  # found in the same read
        by_ref = self._existing_by_ref(cur, project, [p.item.ref for p in batch if p.item.ref] + named)
        by_hash: dict[str, tuple[int, ...]] = {}
        plans: list[tuple[_Prepared, str, tuple[int, ...] | list[str]]] = []
        rows: list[tuple[Any, ...]] = []
        shrunk: list[tuple[str, int]] = []
        same: dict[str, int] = {}  # key -> id of chunks whose stored row already has this content
        rehash: list[tuple[str, int]] = []
        for p in batch:
            item = p.item
            old = by_ref.get(item.ref, []) if item.ref else []
            if old and old[0][1] != item.kind:
                raise InputError(f"ref {item.ref!r} already names a {old[0][1]}, not a "
                                 f"{item.kind}; use another ref or forget it first")
            if old and all(row[2] == p.hash for row in old):
                plans.append((p, "unchanged", tuple(r[0] for r in old)))
                continue
            if not item.ref and p.hash in by_hash:
                plans.append((p, "unchanged", by_hash[p.hash]))
                continue
            keys = [f"ref:{item.ref}#{c.index}" if item.ref else f"hash:{p.hash}#{c.index}"
                    for c in p.chunks]
            if not item.ref:
                by_hash[p.hash] = ()  # a second identical item in this batch is not stored again
            new_rows = [self._row(item, p.hash, key, c) for key, c in zip(keys, p.chunks)]
            kept = self._unchanged_chunks(cur, project, item, new_rows) if old else {}
            rows.extend(r for r in new_rows if r[0] not in kept)  # only changed chunks are rewritten
            rehash.extend((p.hash, uid) for uid in kept.values())
            same.update(kept)
            if len(old) > len(p.chunks):
                shrunk.append((item.ref, len(p.chunks)))
            plans.append((p, "updated" if old else "stored", keys))
        existing = {key for p, outcome, keys in plans if outcome == "updated" for key in keys}
        fresh = [r for r in rows if r[0] not in existing]
        ids = {**same, **self._bulk_upsert(cur, project, fresh, upsert=not fast),
               **self._bulk_upsert(cur, project, [r for r in rows if r[0] in existing])}
        plans = [(p, "unchanged", ()) if outcome == "stored" and not p.item.ref and keys[0] not in ids
                 else (p, outcome, keys) for p, outcome, keys in plans]  # content already stored
        for chash, uid in rehash:
            cur.execute("UPDATE units SET content_hash = ? WHERE id = ?", [chash, uid])
        for ref, keep in shrunk:
            removed.extend(r[0] for r in cur.execute(
                "DELETE FROM units WHERE project = ? AND ref = ? AND chunk >= ? RETURNING id",
                [project, ref, keep]).fetchall())
        stored_before = self._existing_by_hash(cur, project, [p.hash for p, _, k in plans if not k])
        known = {ref: (rows[0][0], rows[0][1]) for ref, rows in by_ref.items()}  # ref -> (first id, kind)
        known.update({p.item.ref: (ids[k[0]], p.item.kind) for p, outcome, k in plans
                      if p.item.ref and outcome != "unchanged" and k[0] in ids})
        results = []
        for p, outcome, keys_or_ids in plans:
            unit_ids = tuple(keys_or_ids) if outcome == "unchanged" else tuple(ids[k] for k in keys_or_ids)
            unit_ids = unit_ids or stored_before[p.hash]  # stored earlier, or earlier in this batch
            if outcome != "unchanged" and p.item.kind == "decision":
                self._link_supersession(cur, project, unit_ids[0], p.item.supersedes, known)
            results.append(WriteResult(p.item.ref, unit_ids, outcome))
        return results

    @staticmethod
    def _row(item: Item, chash: str, key: str, chunk: Any) -> tuple[Any, ...]:
        return (key, item.kind, item.ref, chunk.index, chash, chunk.text, chunk.tokens, item.session,
                item.role, item.speaker, item.title, item.status, item.path, chunk.heading,
                item.at or _now())

    def _existing_by_ref(self, cur: duckdb.DuckDBPyConnection, project: str, refs: list[str]
                         ) -> dict[str, list[tuple[int, str, str, int]]]:
        out: dict[str, list[tuple[int, str, str, int]]] = {}
        if refs:
            for uid, ref, kind, chash, chunk in cur.execute(
                    "SELECT id, ref, kind, content_hash, chunk FROM units WHERE project = ? AND ref IN "
                    "(SELECT unnest(?)) ORDER BY ref, chunk", [project, refs]).fetchall():
                out.setdefault(ref, []).append((uid, kind, chash, chunk))
        return out

    def _existing_by_hash(self, cur: duckdb.DuckDBPyConnection, project: str, hashes: list[str]
                          ) -> dict[str, tuple[int, ...]]:
        out: dict[str, list[int]] = {}
        if hashes:
            for chash, uid in cur.execute(
                    "SELECT content_hash, id FROM units WHERE project = ? AND ref IS NULL AND "
                    "content_hash IN (SELECT unnest(?)) ORDER BY chunk", [project, hashes]).fetchall():
                out.setdefault(chash, []).append(uid)
        return {h: tuple(ids) for h, ids in out.items()}

    def _bulk_upsert(self, cur: duckdb.DuckDBPyConnection, project: str,
                     rows: list[tuple[Any, ...]], upsert: bool = True) -> dict[str, int]:
        if not rows:
            return {}
        cols = list(zip(*rows))
        types = ["VARCHAR", "VARCHAR", "VARCHAR", "INTEGER", "VARCHAR", "VARCHAR", "INTEGER", "VARCHAR",
                 "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "TIMESTAMP"]
        selects = ", ".join(f"unnest(?::{t}[])" for t in types)
        returned = cur.execute(
            f"""
            INSERT INTO units (project, key, kind, ref, chunk, content_hash, text, tokens, session,
                role, speaker, title, status, path, heading, recorded_at, seq, written_at)
            SELECT ?, {selects}, nextval('unit_seq'), ? {UPSERT if upsert else ""}
            RETURNING key, id
            """, [project, *[list(c) for c in cols], _now()]).fetchall()
        return {key: int(uid) for key, uid in returned}

    def _link_supersession(self, cur: duckdb.DuckDBPyConnection, project: str, new_id: int,
                           supersedes: str | None, known: dict[str, tuple[int, str]]) -> None:
        old = cur.execute("SELECT supersedes FROM units WHERE id = ?", [new_id]).fetchone()[0]
        if old is not None:  # an update in place may change or drop the link
            cur.execute("UPDATE units SET superseded_by = NULL WHERE id = ? AND superseded_by = ?",
                        [old, new_id])
        target = None
        if supersedes is not None:
            target = self._resolve(cur, project, supersedes, kind="decision", known=known)
            if target == new_id or new_id in self._chain_down(cur, target):
                raise InputError(f"supersedes={supersedes!r} would make a cycle of decisions; "
                                 "a decision cannot supersede itself or one of its successors")
        cur.execute("UPDATE units SET supersedes = ? WHERE id = ?", [target, new_id])
        if target is not None:
            cur.execute("UPDATE units SET superseded_by = ? WHERE id = ?", [new_id, target])

    def _chain_down(self, cur: duckdb.DuckDBPyConnection, start: int) -> set[int]:
        seen: set[int] = set()
        current: int | None = start
        while current is not None and current not in seen:
            seen.add(current)
            row = cur.execute("SELECT supersedes FROM units WHERE id = ?", [current]).fetchone()
            current = row[0] if row else None
        return seen

    def _resolve(self, cur: duckdb.DuckDBPyConnection, project: str, ref_or_id: str,
                 kind: str | None = None, known: dict[str, tuple[int, str]] | None = None) -> int:
        """A client ref, or a unit id written as '#123' or '123', to the unit id (first chunk);
        `known` holds refs already read (ref -> first id, kind)."""
        if known and ref_or_id in known:
            uid, found = known[ref_or_id]
            if kind is not None and found != kind:
                raise InputError(f"{ref_or_id!r} is a {found}; only a {kind} can be named here")
            return uid
        ids = self._resolve_all(cur, project, ref_or_id)
        if not ids:
            raise InputError(f"{ref_or_id!r} names no unit in project {project!r}; "
                             "pass a ref or id that recall_slate returned for this project")
        if kind is not None:
            found = cur.execute("SELECT kind FROM units WHERE id = ?", [ids[0]]).fetchone()[0]
            if found != kind:
                raise InputError(f"{ref_or_id!r} is a {found}; only a {kind} can be named here")
        return ids[0]

    def _resolve_all(self, cur: duckdb.DuckDBPyConnection, project: str, ref_or_id: str) -> list[int]:
        rows = cur.execute("SELECT id FROM units WHERE project = ? AND ref = ? ORDER BY chunk",
                           [project, ref_or_id]).fetchall()
        if not rows and UNIT_ID.fullmatch(ref_or_id):
            rows = cur.execute("SELECT id FROM units WHERE project = ? AND id = ?",
                               [project, int(ref_or_id.lstrip("#"))]).fetchall()
        return [r[0] for r in rows]

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor inside one write transaction, serialised with every other write."""
        with self._write_lock:
            cur = self.cursor()
            cur.execute("BEGIN")
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise

    def ids_for(self, project: str, ref_or_id: str) -> list[int]:
        """The unit ids a ref (all chunks) or an id names in a project; empty if none."""
        return self._resolve_all(self.cursor(), project, ref_or_id)

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
        with self._write_lock:
            cur = self.cursor()
            cur.execute("BEGIN")
            try:
                resolved = {r: self._resolve_all(cur, project, r) for r in refs}
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
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            finally:
                self.generations.forget(("units", project))
                self.generations.forget(("rows",))
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
        cur = self.cursor()
        cur.execute("BEGIN")  # one snapshot for rows and generation
        rows = cur.execute(f"SELECT {UNIT_COLUMNS} FROM units WHERE project = ? ORDER BY id",
                           [project]).fetchall()
        gen = cur.execute("SELECT generation FROM projects WHERE project = ?", [project]).fetchone()
        cur.execute("COMMIT")
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
        cache = self._cached_units(project) if cur is None else {}
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

    def _cached_units(self, project: str) -> dict[int, Unit]:
        """The unit cache of the project's current generation. After a write it starts from the
        previous one without the units the change log names, and without decisions (whose
        supersession links change with other decisions' writes)."""
        generation = self.generation(project)
        with self._cache_lock:
            entry = self._unit_cache.get(project)
        if entry is not None and entry[0] == generation:
            return entry[1]
        changed = self.changed_between(project, entry[0], generation) if entry else None
        kept = {} if changed is None else {i: u for i, u in entry[1].items()
                                           if i not in changed and u.kind != "decision"}
        with self._cache_lock:
            self._unit_cache[project] = (generation, kept)
        return kept

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

    def _unchanged_chunks(self, cur: duckdb.DuckDBPyConnection, project: str, item: Item,
                         rows: list[tuple[Any, ...]]) -> dict[str, int]:
        """The planned rows (see `_row`) whose stored row already holds the same content and
        fields, as key -> id: an edit to one section of a note rewrites only that chunk, and the
        others keep their recording time. An explicit `at` that differs rewrites them all."""
        stored = {row[0]: row[1:] for row in cur.execute(
            "SELECT key, id, kind, ref, chunk, text, tokens, session, role, speaker, title, status, "
            "path, heading, recorded_at FROM units WHERE project = ? AND ref = ?",
            [project, item.ref]).fetchall()}
        kept = {}
        for row in rows:  # row: key, kind, ref, chunk, hash, text, ..., heading, at
            old = stored.get(row[0])  # id, kind, ref, chunk, text, ..., heading, recorded_at
            same = old is not None and old[1:4] == row[1:4] and old[4:13] == row[5:14]
            if same and (item.at is None or old[13] == item.at):
                kept[row[0]] = int(old[0])
        return kept

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
        with self._write_lock:
            cur = self.cursor()
            cur.execute("BEGIN")
            try:
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
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            finally:
                self.generations.forget(("units", project))
                self.generations.forget(("rows",))
        return sorted(ids)


@dataclass(frozen=True)
class SourceRow:
    """What the store holds for one item of a source: its ref, path, kind and content hash."""

    ref: str
    path: str
    kind: str
    content_hash: str
