"""ADR files as decisions: the formats in the wild, status mapping and supersession links."""

from __future__ import annotations

import pytest

from agentmemrec.indexing.sources.adr import parse_adr
from agentmemrec.indexing.sources.notes import Doc
from agentmemrec.indexing.sources.watcher import desired_items

NYGARD = """# 2. Use Kafka for payment events

Date: 2026-03-02

## Status

Accepted

Supersedes [1. Use RabbitMQ](0001-use-rabbitmq.md)

## Context

Throughput.

## Decision

Kafka.
"""


def docs(**files: str) -> dict[str, Doc]:
    out = {}
    for name, text in files.items():
        path = f"docs/adr/{name}.md"
        out[path] = Doc(path, text, parse_adr(path, text))
    return out


@pytest.mark.parametrize(("text", "word", "status"), [
    ("# T\n\n## Status\n\nProposed\n", "proposed", "proposed"),
    ("---\nstatus: \"accepted\"\n---\n# T\n", "accepted", "accepted"),
    ("# T\n\n**Status:** Rejected\n", "rejected", "rejected"),
    ("# T\n\n* Status: deprecated\n", "deprecated", "superseded"),
    ("T\n=\n\n:Status: Superseded by ADR-0009\n", "superseded", "superseded"),
    ("# T\n\nNo status line at all.\n", "accepted", "accepted"),
])
def test_status_is_read_from_every_common_format(text, word, status):
    adr = parse_adr("docs/adr/0004-t.md", text)
    assert (adr.status_word, adr.status, adr.number) == (word, status, 4)


def test_a_nygard_record_becomes_a_decision_without_its_status_section():
    adr = parse_adr("doc/adr/0002-use-kafka.md", NYGARD)
    assert (adr.title, adr.date, adr.supersedes) == ("2. Use Kafka for payment events",
                                                     "2026-03-02T00:00:00", (1,))
    assert adr.body == "Context:\nThroughput.\n\nDecision:\nKafka."


@pytest.mark.parametrize("path", ["docs/notes/ideas.md", "docs/adr/README.md", "adr/template.md"])
def test_other_files_are_not_decisions(path):
    assert parse_adr(path, "# Ideas\n\nStatus: in progress\n\nText.") is None


def test_links_resolve_from_either_side_and_never_close_a_cycle():
    items = desired_items(docs(**{
        "0001-rabbit": "# 1. Rabbit\n\nStatus: Superseded by ADR-0002\n",
        "0002-kafka": "# 2. Kafka\n\nStatus: Accepted\n",
        "0003-a": "# 3. A\n\nSupersedes ADR-0004\n",
        "0004-b": "# 4. B\n\nSupersedes ADR-0003\n",
        "0005-c": "# 5. C\n\nSupersedes ADR-0042\n",  # names a record that does not exist
    }))
    assert items["adr:0002"]["supersedes"] == "adr:0001"
    assert [items[r].get("supersedes") for r in ("adr:0003", "adr:0004")] == ["adr:0004", None]
    assert "supersedes" not in items["adr:0005"] and "supersedes" not in items["adr:0001"]


def test_two_files_with_one_number_keep_distinct_refs():
    items = desired_items(docs(**{"0007-a": "# 7. A\n\nStatus: Accepted\n",
                                  "0007-b": "# 7. B\n\nStatus: Accepted\n"}))
    assert set(items) == {"adr:0007", "adr:docs/adr/0007-b.md"}


def test_long_pathological_lines_parse_quickly():
    text = "# " + " #" * 60_000 + "\nStatus: " + " \t" * 60_000 + "\nSupersedes " + "](" * 50_000
    assert parse_adr("docs/adr/0001-x.md", text).number == 1
