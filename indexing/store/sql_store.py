"""The SQL both backends speak: one schema, one write path, one set of reads.

Rows are keyed by (project, key): `ref:<ref>#<chunk>` for items with a client ref, otherwise
`hash:<content hash>#<chunk>`, so writing the same ref updates in place and writing identical
content again stores nothing new. Each project has a generation number, bumped by every change,
that derived indexes record and are checked against; the units each change touched go to a log.

Statements use `?` placeholders and casts both DuckDB and PostgreSQL read (`?::BIGINT[]`). A
backend supplies connections and transactions, how a generation is cached and who hears that it
moved, and how vectors are kept (`duckdb_store`, `postgres_store`).
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.store.changes import UNIT_COLUMNS, changes_since, generation_and_log, row_to_unit, scan_units
from agentmemrec.indexing.store.generations import CarriedCache, Generations
from agentmemrec.indexing.store.protocol import Changes, Principal, SourceRow, VectorRows, WriteResult
from agentmemrec.indexing.store.vectors import drop_vectors
from agentmemrec.indexing.store.writes import Prepared, now, resolve_all, rewrite_units, unlink_forgotten, write_batch
from agentmemrec.indexing.units import Item, Unit, check_project, chunk_item, content_hash, id_hint

UNIT_CACHE_BYTES = 64 << 20  # per project: units weigh what their text does, up to 128 KiB each
WARM_UNITS = 50_000  # read at most this many at a warm start (about half the cache, at a typical 650 bytes)


def _unit_size(_: int, unit: Unit) -> int:
    return sys.getsizeof(unit.text) + 600  # the text and about a dozen short fields


class Cursor(Protocol):
    """What the shared SQL needs of a cursor (DuckDB's connection cursor, or psycopg's wrapped)."""

    def execute(self, sql: str, params: Sequence[Any] = ...) -> "Cursor": ...

    def fetchall(self) -> list[tuple[Any, ...]]: ...

    def fetchone(self) -> tuple[Any, ...] | None: ...


class SqlStore(ABC):
    """The shared SQL over a backend's cursors; see the module docstring."""

    generations: Generations

    def __init__(self) -> None:
        # units kept per project; decisions are not carried (their supersession links change
        # with other decisions' writes)
        self._units: CarriedCache[int, Unit] = CarriedCache(
            self.generation, self.changed_between,
            lambda _, units, changed: {i: u for i, u in units.items()
                                       if i not in changed and u.kind != "decision"},
            _unit_size, UNIT_CACHE_BYTES)

    # ---- what a backend supplies ----------------------------------------------------------------

    @abstractmethod
    def transaction(self, project: str | None = None) -> AbstractContextManager[Cursor]:
        """A cursor inside one write transaction; a write to a project's units names it."""

    @abstractmethod
    def reading(self) -> AbstractContextManager[Cursor]:
        """A cursor inside one read transaction: everything read through it is one snapshot."""

    @abstractmethod
    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one statement run on its own."""

    @abstractmethod
    def vectors(self, model: str) -> VectorRows: ...

    @abstractmethod
    def _write_prepared(self, project: str, prepared: list[Prepared]) -> list[WriteResult]: ...

    def id_filter(self, column: str, ids: list[int]) -> tuple[str, list[Any]]:
        """`column` among the unit ids `ids`."""
        return f"{column} IN (SELECT unnest(?::BIGINT[]))", [list(ids)]

    def _moved(self, cur: Cursor, key: tuple[str, ...]) -> None:
        """Inside a write transaction: a generation is moving (others may have to hear it)."""

    def fetch_one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = self.fetch(sql, params)
        return rows[0] if rows else None

    # ---- writes -------------------------------------------------------------------------------

    def write(self, project: str, items: list[Item]) -> list[WriteResult]:
        """Store a validated batch in one transaction: all items or none."""
        check_project(project)
        return self._write_prepared(project, [Prepared(it, content_hash(it), chunk_item(it)) for it in items])

    def _write_once(self, project: str, prepared: list[Prepared], fast: bool) -> list[WriteResult]:
        with self.transaction(project) as cur:
            removed: list[int] = []
            results = write_batch(cur, project, prepared, removed, fast)
            changed = [i for r in results if r.outcome != "unchanged" for i in r.ids]
            drop_vectors(cur, removed)  # the chunks a shorter note no longer has
            if changed or removed:
                self._bump(cur, project, changed + removed)
        return results

    def _bump(self, cur: Cursor, project: str, ids: Iterable[int]) -> None:
        """The project's next generation, with the units it changed (written, rewritten, renamed
        or removed) in the change log."""
        count = cur.execute("SELECT count(*) FROM units WHERE project = ?", [project]).fetchone()[0]
        generation = cur.execute(
            "INSERT INTO projects (project, generation, units) VALUES (?, 1, ?) ON CONFLICT (project) "
            "DO UPDATE SET generation = projects.generation + 1, units = excluded.units "
            "RETURNING generation", [project, count]).fetchone()[0]
        cur.execute("INSERT INTO unit_changes SELECT ?, ?, unnest(?::BIGINT[])",
                    [project, generation, sorted(set(ids))])
        self._moved(cur, ("units", project))

    def forget(self, project: str, refs: list[str]) -> list[int]:
        """Remove units by ref or id; unknown names fail the whole call and remove nothing."""
        check_project(project)
        with self.transaction(project) as cur:
            resolved = {r: resolve_all(cur, project, r) for r in refs}
            missing = [r for r, ids in resolved.items() if not ids]
            if missing:
                more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
                raise InputError(f"nothing to forget for {missing[:5]}{more} in project {project!r}"
                                 f"{''.join(map(id_hint, missing[:1]))}; "
                                 "pass refs, or ids written '#42', as a write or a slate returned them")
            ids = sorted({i for found in resolved.values() for i in found})
            unlink_forgotten(cur, ids)
            # their keys (never their text) stay, so a later migrate does not copy them back
            cur.execute("INSERT INTO forgotten_keys SELECT project, key, ? FROM units WHERE id IN "
                        "(SELECT unnest(?::BIGINT[])) ON CONFLICT DO NOTHING", [now(), ids])
            cur.execute("DELETE FROM units WHERE id IN (SELECT unnest(?::BIGINT[]))", [ids])
            drop_vectors(cur, ids)
            self._bump(cur, project, ids)
        return ids

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

    def rewrite(self, project: str, change: Callable[[Unit], Mapping[str, str]], dry_run: bool = False,
                ids: tuple[int, int] | None = None) -> list[tuple[Unit, dict[str, str]]]:
        """Rewrite a project's units in place (those with ids from `ids[0]` to `ids[1]`, if
        given), in one transaction: `change(unit)` gives new values of some of its text fields
        (`text`, `title`, `speaker`, `session`, `heading`), or none. A changed unit keeps its id
        and ref and is embedded again; it and the other chunks of its item get a new content hash,
        made from the new text (an item without a ref is keyed by it), so no hash of the old text
        is kept. Returns the changed units with their new values; `dry_run` writes nothing."""
        check_project(project)
        changed: list[tuple[Unit, dict[str, str]]] = []
        with self.reading() if dry_run else self.transaction(project) as cur:
            scan_units(cur, project, lambda units: changed.extend((u, dict(new)) for u in units if (new := change(u))),
                       ids=ids)
            if changed and not dry_run:
                self._bump(cur, project, rewrite_units(cur, project, changed))
                drop_vectors(cur, [u.id for u, _ in changed])
        return changed

    def rewrite_slates(self, project: str, change: Callable[[str], str | None], dry_run: bool = False) -> int:
        """Rewrite the saved explanations of a project's slates: `change` maps a payload to its new
        one, or to None. Returns how many changed; `dry_run` writes nothing."""
        with self.reading() if dry_run else self.transaction() as cur:
            rows = cur.execute("SELECT slate_id, payload FROM slates WHERE project = ?", [project]).fetchall()
            changed = [(new, slate_id) for slate_id, payload in rows if (new := change(payload)) is not None]
            for row in changed if not dry_run else ():
                cur.execute("UPDATE slates SET payload = ? WHERE slate_id = ?", list(row))
        return len(changed)

    # ---- what derived indexes follow ---------------------------------------------------------

    def refresh(self, project: str) -> None:
        """Before a recall: make the project's cached generations current, so that it sees every
        write acknowledged before it began. Nothing to do where every write goes through this
        process (DuckDB), which forgets them itself."""

    def generation(self, project: str) -> int:
        def load() -> int:
            row = self.fetch_one("SELECT generation FROM projects WHERE project = ?", [project])
            return int(row[0]) if row else 0
        return self.generations.get(("units", project), load)

    def changed_between(self, project: str, since: int, generation: int) -> set[int] | None:
        """Units the change log names after `since` up to `generation`; None when it does not
        reach back that far."""
        if since > generation:
            return None
        row = self.fetch_one("SELECT logged_from FROM projects WHERE project = ?", [project])
        if row is None or (row[0] or 0) > since:
            return None
        return {r[0] for r in self.fetch(
            "SELECT unit_id FROM unit_changes WHERE project = ? AND generation > ? AND generation <= ?",
            [project, since, generation])}

    def changes_since(self, project: str, generation: int) -> Changes | None:
        with self.reading() as cur:
            return changes_since(cur, project, generation, lambda ids: self._units_in(cur, project, ids))

    def scan_units(self, project: str, on_chunk: Callable[[list[Unit]], None], chunk: int | None = None) -> int:
        with self.reading() as cur:
            return scan_units(cur, project, on_chunk, chunk)

    # ---- reads --------------------------------------------------------------------------------

    def projects(self) -> dict[str, int]:
        rows = self.fetch("SELECT project, count(*) FROM units GROUP BY project ORDER BY project")
        return {p: int(n) for p, n in rows}

    def kind_counts(self) -> dict[str, dict[str, int]]:
        """Units of each kind in every project."""
        out: dict[str, dict[str, int]] = {}
        for project, kind, n in self.fetch("SELECT project, kind, count(*) FROM units GROUP BY project, kind "
                                           "ORDER BY project, kind"):
            out.setdefault(project, {})[kind] = int(n)
        return out

    def decisions(self, project: str) -> list[Unit]:
        """Every decision of a project, the most recently recorded first."""
        return [row_to_unit(r) for r in self.fetch(
            f"SELECT {UNIT_COLUMNS} FROM units WHERE project = ? AND kind = 'decision' "
            "ORDER BY recorded_at DESC, id DESC", [project])]

    @property
    def cached_bytes(self) -> int:
        """What the unit cache holds, all projects."""
        return self._units.nbytes

    def units(self, project: str, ids: Iterable[int]) -> dict[int, Unit]:
        """A project's units by id (others' ids are left out), read through a cache of the
        project's current generation: a pool's units are mostly the ones recent recalls fetched."""
        ids = list(ids)
        if not ids:
            return {}
        cache = self._units.current(project)
        found = {i: u for i in ids if (u := cache.get(i)) is not None}
        missing = [i for i in ids if i not in found]
        if missing:
            fetched = self._units_in(None, project, missing)
            cache.update(fetched)  # kept while they fit; this call returns them from `found`
            found.update(fetched)
        return found

    def warm_units(self, project: str) -> list[Unit]:
        """Read a project's newest units into the unit cache, until it is half full or holds them
        all: a pool's units are then found there from the first recall on. Returns them."""
        with self.reading() as cur:
            generation, _ = generation_and_log(cur, project)
            rows = cur.execute(f"SELECT {UNIT_COLUMNS} FROM units WHERE project = ? ORDER BY id DESC LIMIT ?",
                               [project, WARM_UNITS]).fetchall()
        if generation != self.generation(project):  # a write came since: the cache fills as recalls go
            return []
        cache, weight, warmed = self._units.current(project), 0, []
        for row in rows:
            unit = row_to_unit(row)
            weight += _unit_size(unit.id, unit)
            if weight > UNIT_CACHE_BYTES // 2:  # half: what recalls read keeps room
                break
            cache.put(unit.id, unit)
            warmed.append(unit)
        return warmed

    def _units_in(self, cur: Cursor | None, project: str, ids: list[int]) -> dict[int, Unit]:
        if not ids:
            return {}
        where, params = self.id_filter("id", ids)
        # by id alone: a project filter turns the lookup into a scan
        sql = f"SELECT {UNIT_COLUMNS} FROM units WHERE {where}"
        rows = cur.execute(sql, params).fetchall() if cur is not None else self.fetch(sql, params)
        return {r[0]: row_to_unit(r) for r in rows if r[1] == project}

    def units_by_id(self, ids: Iterable[int]) -> dict[int, Unit]:
        """Units by id in any project: for maintenance work (embedding), never for a request."""
        ids = list(ids)
        if not ids:
            return {}
        where, params = self.id_filter("id", ids)
        return {r[0]: row_to_unit(r) for r in self.fetch(f"SELECT {UNIT_COLUMNS} FROM units WHERE {where}", params)}

    def ids_for(self, project: str, ref_or_id: str) -> list[int]:
        """The unit ids a ref (all chunks) or an id names in a project; empty if none."""
        with self.reading() as cur:
            return resolve_all(cur, project, ref_or_id)

    def index_rows(self, project: str) -> tuple[list[int], list[str], int]:
        """Every unit of a project as (ids, index texts), with the generation they belong to."""
        units: list[Unit] = []
        generation = self.scan_units(project, units.extend)
        return [u.id for u in units], [u.index_text() for u in units], generation

    def ineligible_ids(self, project: str, as_of: datetime | None) -> set[int]:
        """Units recorded after `as_of` (none when as_of is None)."""
        if as_of is None:
            return set()
        return {r[0] for r in self.fetch("SELECT id FROM units WHERE project = ? AND recorded_at > ?",
                                         [project, as_of])}

    def count_units(self, project: str) -> int:
        return int(self.fetch_one("SELECT count(*) FROM units WHERE project = ?", [project])[0])

    def items_after(self, project: str, after: int, count: int) -> list[list[Unit]]:
        """The project's next `count` items whose first chunk's id is past `after`, in id order,
        each as its chunks in order (an item's chunks share its ref, or without one its hash)."""
        with self.reading() as cur:
            firsts = [row_to_unit(r) for r in cur.execute(
                f"SELECT {UNIT_COLUMNS} FROM units WHERE project = ? AND chunk = 0 AND id > ? ORDER BY id LIMIT ?",
                [project, after, count]).fetchall()]
            refs = [u.ref for u in firsts if u.ref]
            hashes = [u.content_hash for u in firsts if not u.ref]
            rest: dict[str | None, list[Unit]] = {}
            for row in cur.execute(  # the later chunks of notes and long turns, in one query
                    f"SELECT {UNIT_COLUMNS} FROM units WHERE project = ? AND chunk > 0 AND "
                    "(ref IN (SELECT unnest(?::VARCHAR[])) OR (ref IS NULL AND content_hash IN "
                    "(SELECT unnest(?::VARCHAR[])))) ORDER BY chunk", [project, refs, hashes]).fetchall():
                unit = row_to_unit(row)
                rest.setdefault(unit.ref or unit.content_hash, []).append(unit)
        return [[u, *rest.get(u.ref or u.content_hash, [])] for u in firsts]

    def id_window(self, project: str, after: int, count: int) -> tuple[int, int] | None:
        """The first and last ids of the project's next `count` units after id `after` (fewer
        where fewer are left); None when none is."""
        first, last = self.fetch_one("SELECT min(id), max(id) FROM (SELECT id FROM units WHERE project = ? "
                                     "AND id > ? ORDER BY id LIMIT ?) AS next_units", [project, after, count])
        return None if first is None else (int(first), int(last))

    def sources(self, project: str, ref_prefixes: tuple[str, ...], path_prefix: str = "") -> list[SourceRow]:
        """Every item whose ref starts with one of `ref_prefixes` and whose path lies under
        `path_prefix` ('' for all): the units a source such as the note watcher owns."""
        like = " OR ".join("starts_with(ref, ?)" for _ in ref_prefixes) or "false"
        rows = self.fetch(
            f"SELECT ref, path, kind, content_hash FROM units WHERE project = ? AND chunk = 0 "
            f"AND path IS NOT NULL AND starts_with(path, ?) AND ({like}) ORDER BY ref",
            [project, path_prefix, *ref_prefixes])
        return [SourceRow(*row) for row in rows]

    def session_rows(self, project: str, names: list[str] | None) -> list[tuple[int, str, datetime]]:
        """(id, session, recorded_at) of every unit in the named sessions (None: every session), in
        session order."""
        if names is None:
            return self.fetch("SELECT id, session, recorded_at FROM units WHERE project = ? AND session IS NOT NULL "
                              "ORDER BY session, recorded_at, seq, id", [project])
        return self.fetch(
            "SELECT id, session, recorded_at FROM units WHERE project = ? AND session IN "
            "(SELECT unnest(?::VARCHAR[])) ORDER BY session, recorded_at, seq, id", [project, names])

    def speakers(self, project: str, ids: set[int] | None = None) -> set[str]:
        """The names that speak in a project's turns (`speaker`), or in the units `ids`."""
        if ids is not None and not ids:
            return set()
        where, params = self.id_filter("id", sorted(ids)) if ids is not None else ("true", [])
        return {r[0] for r in self.fetch(f"SELECT DISTINCT speaker FROM units WHERE project = ? AND {where} "
                                         "AND speaker IS NOT NULL", [project, *params])}

    def sessions_of(self, project: str, ids: set[int]) -> set[str]:
        if not ids:
            return set()
        where, params = self.id_filter("id", sorted(ids))
        return {r[0] for r in self.fetch(f"SELECT DISTINCT session FROM units WHERE project = ? AND {where} "
                                         "AND session IS NOT NULL", [project, *params])}

    # ---- saved explanations and bearer tokens -------------------------------------------------

    def save_slates(self, rows: list[tuple[str, str, datetime, str]], keep: int) -> None:
        """Store (slate id, project, time, JSON) rows; each project keeps its newest `keep`."""
        with self.transaction() as cur:
            cur.execute("INSERT INTO slates SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), "
                        "unnest(?::TIMESTAMP[]), unnest(?::VARCHAR[])", [list(col) for col in zip(*rows)])
            for project in sorted({r[1] for r in rows}):  # explanations are for recent answers
                cur.execute("DELETE FROM slates WHERE project = ? AND slate_id NOT IN (SELECT slate_id "
                            "FROM slates WHERE project = ? ORDER BY created_at DESC LIMIT ?)",
                            [project, project, keep])

    def load_slate(self, slate_id: str) -> tuple[str, str] | None:
        row = self.fetch_one("SELECT project, payload FROM slates WHERE slate_id = ?", [slate_id])
        return (row[0], row[1]) if row else None

    def add_token(self, name: str, secret_sha256: str, projects: list[str], at: datetime) -> bool:
        """Record a token; False when the name is taken or the secret was revoked here."""
        with self.transaction() as cur:
            return bool(cur.execute(
                "INSERT INTO tokens SELECT ?, ?, ?::VARCHAR[], ? WHERE NOT EXISTS (SELECT 1 FROM revoked_tokens "
                "WHERE secret_sha256 = ?) ON CONFLICT DO NOTHING RETURNING name",
                [name, secret_sha256, projects, at, secret_sha256]).fetchall())

    def tokens(self) -> list[Principal]:
        return [Principal(n, tuple(p), at) for n, p, at in
                self.fetch("SELECT name, projects, created_at FROM tokens ORDER BY name")]

    def revoke_token(self, name: str) -> bool:
        """Remove a token, keeping its hash as revoked: its secret is never accepted again."""
        with self.transaction() as cur:
            gone = cur.execute("DELETE FROM tokens WHERE name = ? RETURNING secret_sha256", [name]).fetchall()
            for (secret,) in gone:
                cur.execute("INSERT INTO revoked_tokens VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                            [secret, name, datetime.now(timezone.utc).replace(tzinfo=None)])
            return bool(gone)

    def token(self, secret_sha256: str) -> Principal | None:
        row = self.fetch_one("SELECT name, projects, created_at FROM tokens WHERE secret_sha256 = ?",
                             [secret_sha256])
        return Principal(row[0], tuple(row[1]), row[2]) if row else None
