"""Moving one store into another: `agentmemrec migrate --to postgresql://...`.

Rows go project by project in id order, a window at a time; each window is one transaction in
the target that moves the project's generation like any write, so replicas already serving the
target catch up. A row is keyed by (project, key) there as everywhere, so a second run copies
nothing that is already there and an interrupted run resumes where it stopped. A key the target
holds with other content (another developer's unit under the same ref, or one changed here since
the last run) is a conflict: it is reported and left as the target has it, and no link is made
to or from it. A key forgotten in the target (`forgotten_keys`) is left out and counted: a forget
there is not undone by the next run. Unit ids are the target's own (a team database holds other
developers' units): supersession links are mapped once a project's rows are in, and only fill
links the target does not have, and vectors follow under the new ids, so nothing is embedded
again. Tokens (only their hashes) come too, those whose projects are all among the ones copied; a
name the target holds with another secret, or a secret revoked there, is reported and left out;
a secret revoked here that the target still accepts is reported.
Saved explanations do not come: they explain recalls the old store answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.store.sql_store import SqlStore
from agentmemrec.indexing.units import check_project

WINDOW = 2000  # rows per transaction in the target
COLUMNS = ("key, kind, ref, chunk, content_hash, text, tokens, session, role, speaker, title, status, "
           "path, heading, recorded_at, written_at")
TYPES = ("VARCHAR", "VARCHAR", "VARCHAR", "INTEGER", "VARCHAR", "VARCHAR", "INTEGER", "VARCHAR", "VARCHAR",
         "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "TIMESTAMP", "TIMESTAMP")


@dataclass
class Moved:
    """What a run copied, and what the target held already (from an earlier run, or its own)."""

    units: int = 0
    units_there: int = 0
    links: int = 0
    vectors: int = 0
    tokens: int = 0
    tokens_there: int = 0
    forgotten: int = 0  # units left out: forgotten in the target, never brought back
    conflicts: list[str] = field(default_factory=list)  # project/ref held with other content there
    tokens_left: list[str] = field(default_factory=list)  # "name (why)"
    tokens_revoked: list[str] = field(default_factory=list)  # revoked in the source, accepted by the target


def units_to_move(source: SqlStore, projects: list[str] | None = None) -> dict[str, int]:
    """Units per project to copy; a project named that is not a project name or not in the
    source is refused (nothing is copied)."""
    counts = source.projects()
    unknown = [p for p in projects or () if check_project(p) not in counts]
    if unknown:
        raise InputError(f"no project {', '.join(map(repr, unknown))} in this store; its projects: "
                         f"{', '.join(sorted(counts)) or 'none'} (nothing was copied)")
    return {p: n for p, n in counts.items() if projects is None or p in projects}


def migrate(source: SqlStore, target: SqlStore, projects: list[str] | None = None,
            progress: Callable[[int], None] = lambda n: None) -> Moved:
    """Copy `projects` (default: all), and the tokens that reach only those, into `target`."""
    moved = Moved()
    chosen = units_to_move(source, projects)
    for project in chosen:
        ids = _copy_units(source, target, project, moved, progress)
        _copy_links(source, target, project, ids, moved)
        _copy_vectors(source, target, project, ids, moved)
    _copy_tokens(source, target, set(chosen) if projects else None, moved)
    return moved


def _copy_tokens(source: SqlStore, target: SqlStore, projects: set[str] | None, moved: Moved) -> None:
    held = dict(target.fetch("SELECT name, secret_sha256 FROM tokens"))
    revoked = {h for (h,) in target.fetch("SELECT secret_sha256 FROM revoked_tokens")}
    # a secret revoked here after an earlier run copied it: said, not revoked there, where the
    # team may depend on it
    revoked_here = {h for (h,) in source.fetch("SELECT secret_sha256 FROM revoked_tokens")}
    moved.tokens_revoked = sorted(name for name, secret in held.items() if secret in revoked_here)
    for name, secret, names, at in source.fetch("SELECT name, secret_sha256, projects, created_at FROM tokens"):
        if projects is not None and not set(names) <= projects:
            moved.tokens_left.append(f"{name} (it reaches projects not copied)")
        elif secret in revoked:
            moved.tokens_left.append(f"{name} (revoked in the target)")
        elif held.get(name, secret) != secret:
            moved.tokens_left.append(f"{name} (the target has another token of that name)")
        elif name in held:
            moved.tokens_there += 1
        else:
            moved.tokens += target.add_token(name, secret, list(names), at)


def _copy_units(source: SqlStore, target: SqlStore, project: str, moved: Moved,
                progress: Callable[[int], None]) -> dict[int, int]:
    """Every unit of the project into the target; returns source id -> target id for the units
    the target now holds with the same content (a conflicting key maps to nothing)."""
    ids: dict[int, int] = {}
    last = -1
    # a unit forgotten in the target stays forgotten (unless someone there wrote it again)
    forgotten = {k for (k,) in target.fetch("SELECT key FROM forgotten_keys WHERE project = ?", [project])}
    while rows := source.fetch(f"SELECT id, {COLUMNS} FROM units WHERE project = ? AND id > ? ORDER BY id LIMIT ?",
                               [project, last, WINDOW]):
        last = rows[-1][0]
        columns = [list(col) for col in zip(*(r[1:] for r in rows if r[1] not in forgotten))]
        with target.transaction(project) as cur:
            # seq is the target's, taken in the source's id order: it orders turns recorded at
            # the same time as the source did
            inserted = [r[0] for r in cur.execute(
                f"INSERT INTO units (project, {COLUMNS}, seq) SELECT ?, "
                f"{', '.join(f'unnest(?::{t}[])' for t in TYPES)}, nextval('unit_seq') "
                "ON CONFLICT (project, key) DO NOTHING RETURNING id", [project, *columns]).fetchall()
            ] if columns else []
            if inserted:
                target._bump(cur, project, inserted)
            found = {key: (uid, chash) for key, uid, chash in cur.execute(
                "SELECT key, id, content_hash FROM units WHERE project = ? AND key IN "
                "(SELECT unnest(?::VARCHAR[]))", [project, [r[1] for r in rows]]).fetchall()}
        there = [r for r in rows if r[1] in found]
        same = [r for r in there if found[r[1]][1] == r[5]]  # r[5]: the source's content_hash
        ids.update((r[0], found[r[1]][0]) for r in same)
        moved.conflicts.extend(dict.fromkeys(f"{project}/{r[3] or r[1]}" for r in there if found[r[1]][1] != r[5]))
        moved.forgotten += len(rows) - len(there)
        moved.units += len(inserted)
        moved.units_there += len(same) - len(inserted)
        progress(len(rows))
    return ids


def _copy_links(source: SqlStore, target: SqlStore, project: str, ids: dict[int, int], moved: Moved) -> None:
    """Supersession links, mapped to the target's ids (a link may name a later unit)."""
    links = source.fetch("SELECT id, supersedes, superseded_by FROM units WHERE project = ? AND "
                         "(supersedes IS NOT NULL OR superseded_by IS NOT NULL)", [project])
    if not links:
        return
    # a link between two units the target holds with the same content, filling only an empty
    # link there: a teammate's own supersession is never undone
    kept = [(ids[i], ids.get(s), ids.get(b)) for i, s, b in links if i in ids]
    if not kept:
        return
    mapped = [list(col) for col in zip(*kept)]
    with target.transaction(project) as cur:
        changed = [r[0] for r in cur.execute(
            "UPDATE units SET supersedes = coalesce(units.supersedes, m.s), "
            "superseded_by = coalesce(units.superseded_by, m.b) FROM (SELECT unnest(?::BIGINT[]) AS id, "
            "unnest(?::BIGINT[]) AS s, unnest(?::BIGINT[]) AS b) m WHERE units.id = m.id AND "
            "((units.supersedes IS NULL AND m.s IS NOT NULL) OR (units.superseded_by IS NULL AND m.b IS NOT NULL)) "
            "RETURNING units.id", mapped).fetchall()]
        if changed:
            target._bump(cur, project, changed)
    moved.links += len(changed)


def _copy_vectors(source: SqlStore, target: SqlStore, project: str, ids: dict[int, int], moved: Moved) -> None:
    """Each model's current vectors, under the target's ids, where the target lacks them and
    holds the same content (a row the target had already under the key may say something else)."""
    for (model,) in source.fetch("SELECT DISTINCT model FROM vectors"):
        _, parts = source.vectors(model).load(project)
        rows = target.vectors(model)
        for part in parts:
            for start in range(0, len(part.ids), WINDOW):
                old = part.ids[start:start + WINDOW].tolist()
                hashes = {u.id: u.content_hash for u in source.units_by_id(old).values()}
                wanted = {ids[i]: k for k, i in enumerate(old, start) if i in ids}
                back = {ids[i]: i for i in old if i in ids}
                units = {i: u for i, u in target.units_by_id(_lacking(target, model, list(wanted))).items()
                         if u.content_hash == hashes.get(back[i])}
                if units:
                    order = sorted(units)
                    rows.put([units[i] for i in order], part.matrix[np.array([wanted[i] for i in order])],
                             [units[i].content_hash for i in order])
                    moved.vectors += len(order)


def _lacking(target: SqlStore, model: str, ids: list[int]) -> list[int]:
    """The target units among `ids` without a current vector for `model`."""
    if not ids:
        return []
    where, params = target.id_filter("u.id", ids)
    return [r[0] for r in target.fetch(
        f"SELECT u.id FROM units u LEFT JOIN vectors v ON v.unit_id = u.id AND v.model = ? "
        f"AND v.content_hash = u.content_hash WHERE v.unit_id IS NULL AND {where}", [model, *params])]
