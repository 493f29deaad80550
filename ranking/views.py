"""What memory holds, read-only: the projects and their units by kind, one unit by ref, the
decisions in force (`ranking/digest.py`). For people (`agentmemrec ls|show|stats`) and for
agents (the read-only tools), never part of a slate."""

from __future__ import annotations

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.store.protocol import Store
from agentmemrec.indexing.units import Unit, check_names, check_project, id_hint


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
