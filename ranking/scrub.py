"""Redacting what is already stored: text written before a pattern existed, or with redaction
off (`agentmemrec redact`). Units are rewritten in place by the store (`Store.rewrite`), embedded
again, and their old words leave the indexes saved on disk; the queries that saved explanations
keep are redacted too."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable

from agentmemrec.indexing.redact import redact, redact_fields
from agentmemrec.indexing.units import TEXT_FIELDS, Unit, check_project

if TYPE_CHECKING:
    from agentmemrec.ranking.memory import Memory

SAVED_QUERIES = ("query", "dense_query")  # an explanation's fields that keep the query's text
REDACT_SPAN = 5000  # units `agentmemrec redact` reads per call (one transaction each): its progress bar's steps


def redact_stored(memory: Memory, project: str, dry_run: bool = False, after: int | None = None,
                  span: int | None = None) -> dict[str, Any]:
    """Redact a project's stored units, each whose text fields hold a secret rewritten in place
    (its id and ref kept), and the queries of its saved explanations. A secret in a ref or a
    path, which name the item, cannot be replaced: those units are listed instead. `dry_run` says
    what would change and changes nothing.

    With `span`, one window: the project's next `span` units after id `after` (None: from its
    first), in one transaction, and "next" in the report is where the following window starts
    (None when this call found no unit left, and redacted the saved queries instead). A caller
    that shows progress calls it window after window; an interrupted run keeps the windows done."""
    check_project(project)
    counts: Counter[str] = Counter()
    named: list[Unit] = []
    read = 0

    def change(unit: Unit) -> dict[str, str]:
        nonlocal read
        read += 1
        if any(redact(value).counts for value in (unit.ref, unit.path) if value):
            named.append(unit)
        new, found = redact_fields(vars(unit), TEXT_FIELDS)
        counts.update(found)
        return new

    def saved_query(payload: str) -> str | None:
        explanation = json.loads(payload)
        new, _ = redact_fields(explanation, SAVED_QUERIES)  # counted as explanations, not as secrets
        return json.dumps({**explanation, **new}) if new else None

    window = None if span is None else memory.store.id_window(project, -1 if after is None else after, span)
    changed = memory.store.rewrite(project, change, dry_run, ids=window) if span is None or window else []
    queries = 0
    if window is None:  # the whole project, or the call after its last window
        memory.slates.flush()  # an explanation still queued is saved first
        queries = memory.store.rewrite_slates(project, saved_query, dry_run)
    if changed and not dry_run:
        memory.rewritten(project, [u.id for u, _ in changed])
        memory.purge(project)
    return {"project": project, "dry_run": dry_run, "redacted": dict(counts), "queries": queries,
            "units": [{"id": u.id, "ref": u.ref, "kind": u.kind, "fields": sorted(new)} for u, new in changed],
            "named_by_a_secret": [{"id": u.id, "ref": u.ref, "kind": u.kind} for u in named],
            "read": read, "next": window[1] if window else None}


def redact_in_windows(window: Callable[[int | None], dict[str, Any]], on_read: Callable[[int], Any]) -> dict[str, Any]:
    """`window(after)`, a call of `redact_stored` with a span, from the first window until the call
    past the last; `on_read(n)` after each with the units it read. One report for the project."""
    merged: dict[str, Any] = {"redacted": Counter(), "units": [], "named_by_a_secret": [], "read": 0}
    after = None
    while True:
        part = window(after)
        on_read(part["read"])
        merged["read"] += part["read"]
        merged["redacted"].update(part["redacted"])
        merged["units"] += part["units"]
        merged["named_by_a_secret"] += part["named_by_a_secret"]
        if part["next"] is None:  # the last call: it redacted the saved queries
            return {**part, **merged, "redacted": dict(merged["redacted"])}
        after = part["next"]
