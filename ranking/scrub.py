"""Redacting what is already stored: text written before a pattern existed, or with redaction
off (`agentmemrec redact`). Units are rewritten in place by the store (`Store.rewrite`), embedded
again, and their old words leave the indexes saved on disk; the queries that saved explanations
keep are redacted too."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from agentmemrec.indexing.redact import redact, redact_fields
from agentmemrec.indexing.units import TEXT_FIELDS, Unit, check_project

if TYPE_CHECKING:
    from agentmemrec.ranking.memory import Memory

SAVED_QUERIES = ("query", "dense_query")  # an explanation's fields that keep the query's text


def redact_stored(memory: Memory, project: str, dry_run: bool = False) -> dict[str, Any]:
    """Redact a project's stored units, each whose text fields hold a secret rewritten in place
    (its id and ref kept), and the queries of its saved explanations. A secret in a ref or a
    path, which name the item, cannot be replaced: those units are listed instead. `dry_run` says
    what would change and changes nothing."""
    check_project(project)
    counts: Counter[str] = Counter()
    named: list[Unit] = []

    def change(unit: Unit) -> dict[str, str]:
        if any(redact(value).counts for value in (unit.ref, unit.path) if value):
            named.append(unit)
        new, found = redact_fields(vars(unit), TEXT_FIELDS)
        counts.update(found)
        return new

    def saved_query(payload: str) -> str | None:
        explanation = json.loads(payload)
        new, _ = redact_fields(explanation, SAVED_QUERIES)  # counted as explanations, not as secrets
        return json.dumps({**explanation, **new}) if new else None

    changed = memory.store.rewrite(project, change, dry_run)
    memory.slates.flush()  # an explanation still queued is saved first
    queries = memory.store.rewrite_slates(project, saved_query, dry_run)
    if changed and not dry_run:
        memory.rewritten(project, [u.id for u, _ in changed])
        memory.purge(project)
    return {"project": project, "dry_run": dry_run, "redacted": dict(counts), "queries": queries,
            "units": [{"id": u.id, "ref": u.ref, "kind": u.kind, "fields": sorted(new)} for u, new in changed],
            "named_by_a_secret": [{"id": u.id, "ref": u.ref, "kind": u.kind} for u in named]}
