"""What memory holds, read-only: the projects and their units by kind, one unit by ref, the
decisions in force (`ranking/digest.py`). For people (`agentmemrec ls|show|stats`) and for
agents (the read-only tools), never part of a slate."""

from __future__ import annotations

from typing import Any

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.store.protocol import Store
from agentmemrec.indexing.units import TRAIL, Unit, check_names, check_project, id_hint


def show(store: Store, project: str, ref: str) -> list[Unit]:
    """Every chunk of the item a ref (or an id, '#42') names, in order."""
    check_project(project)
    [ref] = check_names([ref], "ref")
    store.refresh(project)  # its units are read through the cache: another process's rewrite is in it
    ids = store.ids_for(project, ref)
    if not ids:
        raise InputError(f"{ref!r} names no unit in project {project!r}{id_hint(ref)}; pass a ref, or "
                         "an id written '#42', that a slate or a listing showed for this project")
    return sorted(store.units(project, ids).values(), key=lambda u: u.chunk)


COPIED = ("session", "role", "speaker", "title", "status", "path")  # item fields a unit keeps as they were


def export_items(store: Store, project: str, after: int | None = None, count: int = 1000) -> dict[str, Any]:
    """The project's items as `remember` takes them (one JSON object a line of `agentmemrec
    import`), `count` at a time in the order they were first written: the next ones after the
    item whose first unit's id is `after` (None: from the first). "next" is where the following
    call starts (None: none is left). A decision's `supersedes` names the replaced decision's
    ref; one without a ref cannot be named in another store, so that link is left out and
    counted in "unlinked". Embeddings, explanations and tokens are not items: an import embeds
    again."""
    check_project(project)
    groups = store.items_after(project, -1 if after is None else after, count)
    replaced = store.units(project, [g[0].supersedes for g in groups if g[0].supersedes is not None])
    items, unlinked = [], 0
    for chunks in groups:
        first = chunks[0]
        item: dict[str, Any] = {
            "kind": first.kind, "ref": None if first.kind == "note" and first.ref == first.path else first.ref,
            "text": note_text(chunks) if first.kind == "note" else "\n\n".join(u.text for u in chunks),
            "at": first.at.isoformat(), **{f: getattr(first, f) for f in COPIED}}
        if first.supersedes is not None:  # a decision: the replaced one by its ref, which another store knows
            old = replaced.get(first.supersedes)
            item["supersedes"] = old.ref if old else None
            unlinked += item["supersedes"] is None
        items.append({k: v for k, v in item.items() if v is not None})
    return {"items": items, "read": sum(map(len, groups)), "unlinked": unlinked,
            "next": groups[-1][0].id if len(groups) == count else None}


def note_text(chunks: list[Unit]) -> str:
    """A note's text again from its chunks: each heading trail (`Deploys > Rollback`) as the
    Markdown headings it was split at, one level per step."""
    out: list[str] = []
    trail: list[str] = []
    for chunk in chunks:
        steps = chunk.heading.split(TRAIL) if chunk.heading else []
        if steps != trail:
            kept = next((i for i, (a, b) in enumerate(zip(trail, steps)) if a != b), min(len(trail), len(steps)))
            out += [f"{'#' * (level + 1)} {name}" for level, name in enumerate(steps) if level >= kept]
            trail = steps
        out.append(chunk.text)
    return "\n\n".join(out)
