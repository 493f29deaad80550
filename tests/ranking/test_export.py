"""A project's items written out as `remember` items (`agentmemrec export`), on both backends."""

from __future__ import annotations

from agentmemrec.ranking.memory import Memory
from agentmemrec.ranking.views import export_items

from helpers import BOTH

NOTE = ("Read this first.\n\n# Deploys\nArgo CD syncs main.\n\n## Rollback\n`argo rollback payments`\n\n"
        "### Steps\n1. find the revision\n\n2. roll back\n\n# Other\n" + "A long paragraph of words. " * 120)
ITEMS = [
    {"kind": "decision", "ref": "adr-1", "title": "RabbitMQ", "text": "Payment events go over RabbitMQ.",
     "at": "2026-01-10T09:00:00Z"},
    {"kind": "turn", "session": "s1", "speaker": "dana", "text": "the retry budget is 3", "at": "2026-05-01T10:00:00Z"},
    {"kind": "turn", "session": "s1", "role": "assistant", "text": "Noted: 3 retries with jitter."},
    {"kind": "note", "path": "docs/deploy.md", "text": NOTE},
    {"kind": "note", "ref": "file:docs/adr.md", "path": "docs/adr.md", "text": "# ADRs\nNumbered, never edited."},
    {"kind": "turn", "ref": "log-1", "session": "s2", "role": "tool",
     "text": "\n\n".join(f"line {i}: " + "trace " * 180 for i in range(8))},  # stored in parts
    {"kind": "decision", "ref": "adr-2", "title": "Kafka", "supersedes": "adr-1", "at": "2026-04-14T09:00:00Z",
     "text": "Payment events move to Kafka."},
    {"kind": "decision", "title": "Loki", "text": "Maybe Loki."},
]


def stored(memory: Memory, project: str) -> list[tuple]:
    """What a project holds, ids aside: each unit's fields, its item's time (a later chunk's own
    time is when the write reached it), and the refs of the decisions it replaces and that replace it."""
    units: list = []
    memory.store.scan_units(project, units.extend)
    ref_of = {u.id: u.ref or f"#{u.title}" for u in units}
    first_at = {(u.ref or u.content_hash): u.at for u in units if u.chunk == 0}
    return [(u.kind, u.ref, u.chunk, u.text, u.tokens, u.session, u.role, u.speaker, u.title, u.status, u.path,
             u.heading, first_at[u.ref or u.content_hash], ref_of.get(u.supersedes), ref_of.get(u.superseded_by))
            for u in units]


@BOTH
def test_an_export_written_into_another_project_holds_the_same_units(home, store_url):
    memory = Memory.open(home, store_url=store_url, background=False)
    [loki] = memory.remember("p", ITEMS)[-1].ids  # a decision without a ref, and one that replaces it:
    memory.remember("p", [{"kind": "decision", "title": "No ref", "text": "Logs go to Loki.",
                           "supersedes": f"#{loki}"}])
    parts, after = [], None
    while not parts or after is not None:  # three items a call, as the command asks for its windows
        parts.append(export_items(memory.store, "p", after, 3))
        after = parts[-1]["next"]
    items = [item for part in parts for item in part["items"]]
    assert [len(part["items"]) for part in parts] == [3, 3, 3, 0]
    assert sum(part["read"] for part in parts) == memory.store.count_units("p") > len(items) == 9
    assert sum(part["unlinked"] for part in parts) == 1  # "No ref" replaces a decision without a ref
    note = next(i for i in items if i.get("path") == "docs/deploy.md")
    assert "ref" not in note and note["text"].startswith("Read this first.\n\n# Deploys\n\nArgo CD")
    assert next(i for i in items if i.get("ref") == "adr-2")["supersedes"] == "adr-1"
    memory.remember("copy", items)
    original, copy = stored(memory, "p"), stored(memory, "copy")
    unlinked = [row for row in original if row[8] in ("No ref", "Loki")]
    assert [row[13:] for row in unlinked] == [(None, "#No ref"), ("#Loki", None)]  # the link the copy lacks
    assert copy == [row[:13] + (None, None) if row in unlinked else row for row in original]
    memory.close()
