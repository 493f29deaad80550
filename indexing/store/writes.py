"""Writing a batch: planned in Python, written with bulk statements.

Each item becomes new rows, an update of the rows its ref names, or nothing (the same content is
stored already). DuckDB is columnar, so the rows of a batch go in with one `INSERT ... SELECT
unnest(...)` rather than one statement per row. Also here: refs and ids resolved to units, and the
supersession links between decisions, which a write may create, change or refuse (a cycle).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.store.protocol import WriteResult
from agentmemrec.indexing.tokens import count_tokens
from agentmemrec.indexing.units import TEXT_FIELDS, UNIT_ID, Chunk, Item, Unit, content_hash, id_hint

if TYPE_CHECKING:
    from agentmemrec.indexing.store.sql_store import Cursor


def now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


@dataclass(frozen=True)
class Prepared:
    item: Item
    hash: str
    chunks: list[Chunk]


UPSERT = """ON CONFLICT (project, key) DO UPDATE SET
    content_hash = excluded.content_hash, text = excluded.text, tokens = excluded.tokens,
    session = excluded.session, role = excluded.role, speaker = excluded.speaker,
    title = excluded.title, status = excluded.status, path = excluded.path,
    heading = excluded.heading, recorded_at = excluded.recorded_at, written_at = excluded.written_at
    WHERE NOT starts_with(excluded.key, 'hash:')  -- same content: nothing to write"""


def write_batch(cur: Cursor, project: str, batch: list[Prepared],
                removed: list[int], fast: bool = False) -> list[WriteResult]:
    """Write a prepared batch inside the caller's transaction; the ids of chunks a shorter note
    no longer has are appended to `removed`. `fast`: new rows are inserted plainly (DuckDB checks
    the unique key through its index) instead of upserted (a join against the whole table)."""
    # Items without a ref are keyed by their content: the insert itself finds one already
    # stored (the unique key), so only refs are looked up first.
    named = [p.item.supersedes for p in batch if p.item.supersedes]  # found in the same read
    by_ref = _existing_by_ref(cur, project, [p.item.ref for p in batch if p.item.ref] + named)
    by_hash: dict[str, tuple[int, ...]] = {}
    plans: list[tuple[Prepared, str, tuple[int, ...] | list[str]]] = []
    rows: list[tuple[Any, ...]] = []
    shrunk: list[tuple[str, int]] = []
    same: dict[str, int] = {}  # key -> id of chunks whose stored row already has this content
    rehash: list[tuple[str, int]] = []
    for position, p in enumerate(batch, 1):
        item = p.item
        old = by_ref.get(item.ref, []) if item.ref else []
        if old and old[0][1] != item.kind:
            raise InputError(f"item {position}: ref {item.ref!r} already names a {old[0][1]}, not a "
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
        # rewritten without `at`, a decision keeps the date it was decided, a turn when it was said
        # (a note's date is its last edit)
        at = item.at or (old[0][4] if old and item.kind != "note" else None)
        new_rows = [_row(item, p.hash, key, c, at) for key, c in zip(keys, p.chunks)]
        kept = _unchanged_chunks(cur, project, item, new_rows) if old else {}
        rows.extend(r for r in new_rows if r[0] not in kept)  # only changed chunks are rewritten
        rehash.extend((p.hash, uid) for uid in kept.values())
        same.update(kept)
        if len(old) > len(p.chunks):
            shrunk.append((item.ref, len(p.chunks)))
        plans.append((p, "updated" if old else "stored", keys))
    existing = {key for p, outcome, keys in plans if outcome == "updated" for key in keys}
    fresh = [r for r in rows if r[0] not in existing]
    ids = {**same, **_bulk_upsert(cur, project, fresh, upsert=not fast),
           **_bulk_upsert(cur, project, [r for r in rows if r[0] in existing])}
    plans = [(p, "unchanged", ()) if outcome == "stored" and not p.item.ref and keys[0] not in ids
             else (p, outcome, keys) for p, outcome, keys in plans]  # content already stored
    for chash, uid in rehash:
        cur.execute("UPDATE units SET content_hash = ? WHERE id = ?", [chash, uid])
    for ref, keep in shrunk:
        removed.extend(r[0] for r in cur.execute(
            "DELETE FROM units WHERE project = ? AND ref = ? AND chunk >= ? RETURNING id",
            [project, ref, keep]).fetchall())
    stored_before = _existing_by_hash(cur, project, [p.hash for p, _, k in plans if not k])
    known = {ref: (rows[0][0], rows[0][1]) for ref, rows in by_ref.items()}  # ref -> (first id, kind)
    known.update({p.item.ref: (ids[k[0]], p.item.kind) for p, outcome, k in plans
                  if p.item.ref and outcome != "unchanged" and k[0] in ids})
    results = []
    for position, (p, outcome, keys_or_ids) in enumerate(plans, 1):  # a plan per item, in order
        unit_ids = tuple(keys_or_ids) if outcome == "unchanged" else tuple(ids[k] for k in keys_or_ids)
        unit_ids = unit_ids or stored_before[p.hash]  # stored earlier, or earlier in this batch
        if outcome != "unchanged" and p.item.kind == "decision":
            try:
                _link_supersession(cur, project, unit_ids[0], p.item.supersedes, known)
            except InputError as exc:
                raise InputError(f"item {position}, field 'supersedes': {exc}") from None
        results.append(WriteResult(p.item.ref, unit_ids, outcome))
    return results

def _row(item: Item, chash: str, key: str, chunk: Any, at: datetime | None) -> tuple[Any, ...]:
    return (key, item.kind, item.ref, chunk.index, chash, chunk.text, chunk.tokens, item.session,
            item.role, item.speaker, item.title, item.status, item.path, chunk.heading,
            at or now())

def _existing_by_ref(cur: Cursor, project: str, refs: list[str]
                      ) -> dict[str, list[tuple[int, str, str, int, datetime]]]:
    """ref -> its chunks' (id, kind, content hash, chunk, recorded_at)."""
    out: dict[str, list[tuple[int, str, str, int, datetime]]] = {}
    if refs:
        for uid, ref, kind, chash, chunk, at in cur.execute(
                "SELECT id, ref, kind, content_hash, chunk, recorded_at FROM units WHERE project = ? AND ref IN "
                "(SELECT unnest(?::VARCHAR[])) ORDER BY ref, chunk", [project, refs]).fetchall():
            out.setdefault(ref, []).append((uid, kind, chash, chunk, at))
    return out

def _existing_by_hash(cur: Cursor, project: str, hashes: list[str]
                       ) -> dict[str, tuple[int, ...]]:
    out: dict[str, list[int]] = {}
    if hashes:
        for chash, uid in cur.execute(
                "SELECT content_hash, id FROM units WHERE project = ? AND ref IS NULL AND "
                "content_hash IN (SELECT unnest(?::VARCHAR[])) ORDER BY chunk", [project, hashes]).fetchall():
            out.setdefault(chash, []).append(uid)
    return {h: tuple(ids) for h, ids in out.items()}

def _bulk_upsert(cur: Cursor, project: str,
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
        """, [project, *[list(c) for c in cols], now()]).fetchall()
    return {key: int(uid) for key, uid in returned}

def _link_supersession(cur: Cursor, project: str, new_id: int,
                      supersedes: str | None, known: dict[str, tuple[int, str]]) -> None:
    old = cur.execute("SELECT supersedes FROM units WHERE id = ?", [new_id]).fetchone()[0]
    target = None
    if supersedes is not None:
        target = _resolve(cur, project, supersedes, kind="decision", known=known)
        if target == new_id or new_id in _chain_down(cur, target):
            raise InputError(f"supersedes={supersedes!r} would make a cycle of decisions; "
                             "a decision cannot supersede itself or one of its successors")
    cur.execute("UPDATE units SET supersedes = ? WHERE id = ?", [target, new_id])
    refresh_superseded_by(cur, {old, target} - {None})  # an update in place may change or drop the link


# A successor replaces the decision it names once it is adopted: accepted, or superseded in its
# turn (so it was in force). A proposal or a rejection keeps its link but replaces nothing.
ADOPTED = ("accepted", "superseded")


def refresh_superseded_by(cur: Cursor, ids: set[int] | list[int]) -> None:
    """Set each decision's `superseded_by` from the links that remain: its newest adopted
    successor, or none."""
    if ids:
        cur.execute("UPDATE units SET superseded_by = (SELECT max(s.id) FROM units s WHERE "
                    "s.supersedes = units.id AND s.status IN (?, ?)) "
                    "WHERE id IN (SELECT unnest(?::BIGINT[]))", [*ADOPTED, sorted(ids)])


def unlink_forgotten(cur: Cursor, ids: list[int]) -> None:
    """Before units are forgotten: a decision whose successor goes passes to that successor's own
    successors (a chain loses a link, not its end), and no link names a forgotten unit. One left
    with no adopted successor stays replaced (stored as superseded, its successor not recorded):
    forgetting a record does not undo the decision it recorded."""
    gone = set(ids)
    replaced = dict(cur.execute("SELECT id, supersedes FROM units WHERE id IN (SELECT unnest(?::BIGINT[])) "
                                "AND supersedes IS NOT NULL", [ids]).fetchall())
    affected = set(replaced.values())
    for uid, target in replaced.items():
        while target in gone:  # several links of one chain forgotten together
            target = replaced.get(target)
        if target is not None:
            cur.execute("UPDATE units SET supersedes = ? WHERE supersedes = ?", [target, uid])
    was_replaced = {r[0] for r in cur.execute("SELECT id FROM units WHERE superseded_by IN "
                                              "(SELECT unnest(?::BIGINT[]))", [ids]).fetchall()} - gone
    for column in ("superseded_by", "supersedes"):
        cur.execute(f"UPDATE units SET {column} = NULL WHERE {column} IN (SELECT unnest(?::BIGINT[]))", [ids])
    cur.execute("UPDATE units SET supersedes = NULL WHERE id IN (SELECT unnest(?::BIGINT[]))", [ids])
    refresh_superseded_by(cur, [i for i in (affected | was_replaced) - gone if i is not None])
    if was_replaced:
        cur.execute("UPDATE units SET status = 'superseded' WHERE superseded_by IS NULL AND "
                    "id IN (SELECT unnest(?::BIGINT[]))", [sorted(was_replaced)])

def _chain_down(cur: Cursor, start: int) -> set[int]:
    seen: set[int] = set()
    current: int | None = start
    while current is not None and current not in seen:
        seen.add(current)
        row = cur.execute("SELECT supersedes FROM units WHERE id = ?", [current]).fetchone()
        current = row[0] if row else None
    return seen

def _resolve(cur: Cursor, project: str, ref_or_id: str,
             kind: str | None = None, known: dict[str, tuple[int, str]] | None = None) -> int:
    """A client ref, or a unit id written as '#123' or '123', to the unit id (first chunk);
    `known` holds refs already read (ref -> first id, kind)."""
    if known and ref_or_id in known:
        uid, found = known[ref_or_id]
        if kind is not None and found != kind:
            raise InputError(f"{ref_or_id!r} is a {found}; only a {kind} can be named here")
        return uid
    ids = resolve_all(cur, project, ref_or_id)
    if not ids:
        raise InputError(f"{ref_or_id!r} names no unit in project {project!r}{id_hint(ref_or_id)}; pass a "
                         "ref, or an id written '#42', that a slate showed for this project")
    if kind is not None:
        found = cur.execute("SELECT kind FROM units WHERE id = ?", [ids[0]]).fetchone()[0]
        if found != kind:
            raise InputError(f"{ref_or_id!r} is a {found}; only a {kind} can be named here")
    return ids[0]

def resolve_all(cur: Cursor, project: str, ref_or_id: str) -> list[int]:
    """The units a name stands for: '#42' is the unit with id 42 (ASCII digits, within BIGINT),
    anything else a ref (all its chunks). Never one for the other: a retried forget of a ref that
    is a number must not remove the unit that number is the id of."""
    if UNIT_ID.fullmatch(ref_or_id):
        rows = cur.execute("SELECT id FROM units WHERE project = ? AND id = ?",
                           [project, int(ref_or_id[1:])]).fetchall()
    else:
        rows = cur.execute("SELECT id FROM units WHERE project = ? AND ref = ? ORDER BY chunk",
                           [project, ref_or_id]).fetchall()
    return [r[0] for r in rows]

def _unchanged_chunks(cur: Cursor, project: str, item: Item,
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


def rewrite_units(cur: Cursor, project: str, changed: list[tuple[Unit, dict[str, str]]]) -> list[int]:
    """Give units new values of their text fields in place (`SqlStore.rewrite`); every chunk of
    their items gets a content hash of the item's new text (`_rewritten_hash`), and a new key
    where the item has no ref. Returns the ids of every chunk touched."""
    new = {u.id: fields for u, fields in changed}
    wrong = {name for fields in new.values() for name in fields} - set(TEXT_FIELDS)
    if wrong:
        raise ValueError(f"only the text fields {TEXT_FIELDS} are rewritten in place, not {sorted(wrong)}")
    units = {u.id: u for u, _ in changed}
    taken: set[str] = set()  # keys given in this rewrite
    touched = []
    for ref, chash in sorted({(u.ref, None if u.ref else u.content_hash) for u, _ in changed}, key=str):
        rows = cur.execute("SELECT id, chunk, text FROM units WHERE project = ? AND "
                           + ("ref = ?" if ref else "ref IS NULL AND content_hash = ?") + " ORDER BY chunk",
                           [project, ref or chash]).fetchall()
        texts = [new.get(uid, {}).get("text", text) for uid, _, text in rows]
        first = rows[0][0]
        fresh = _rewritten_hash(units[first], new[first]) if len(rows) == 1 and first in units else None
        key = f"hash:{fresh}#0"
        if fresh is None or not ref and (key in taken or cur.execute(
                "SELECT count(*) FROM units WHERE project = ? AND key = ?", [project, key]).fetchone()[0]):
            # the first chunk's id makes it the item's own: two items redacted alike stay two
            fresh = hashlib.sha256("\x1f".join(["rewritten", str(first), *texts]).encode("utf-8")).hexdigest()
        for (uid, chunk, _), text in zip(rows, texts):
            fields = {**new.get(uid, {}), "content_hash": fresh}
            if uid in new:
                fields["tokens"] = count_tokens(text)
            if not ref:
                fields["key"] = f"hash:{fresh}#{chunk}"
                taken.add(fields["key"])
            cur.execute(f"UPDATE units SET {', '.join(f'{name} = ?' for name in fields)} WHERE id = ?",
                        [*fields.values(), uid])
            touched.append(uid)
    return touched


def _rewritten_hash(unit: Unit, fields: dict[str, str]) -> str | None:
    """The content hash a write of the rewritten item would give it, so that writing that item
    again (an import repeated, redacted this time) finds it stored: for a one-chunk item whose
    stored fields give back its stored hash, with or without its time (whether the writer gave
    one). None for any other (a decision's `supersedes` was the writer's text, say)."""
    for at in (None, unit.at):
        item = Item(unit.kind, unit.text, unit.ref, unit.session, unit.role, unit.speaker, at, unit.title,
                    unit.status, None, unit.path)
        if content_hash(item) == unit.content_hash:
            return content_hash(replace(item, **{k: v for k, v in fields.items() if k != "heading"}))
    return None
