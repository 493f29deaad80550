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
                                                     "2026-03-02T00:00:00", ("0001-use-rabbitmq.md",))
    assert adr.body == "Context:\nThroughput.\n\nDecision:\nKafka."


def test_a_status_or_date_line_in_the_records_content_is_content():
    text = ("# 1. Invoice states\n\nDate: 2023-01-05\n\n## Status\n\nAccepted\n\n## Context\n\n"
            "Each invoice row has a state column:\n\nstatus: draft until sent, then open, then paid\n"
            "- date: the booking date in UTC\n\n## Decision\n\nWe model invoice state as an enum.\n")
    adr = parse_adr("doc/adr/0001-invoice-states.md", text)
    assert (adr.status, adr.date) == ("accepted", "2023-01-05T00:00:00")
    assert "status: draft until sent, then open, then paid" in adr.body
    assert "- date: the booking date in UTC" in adr.body and "Date: 2023" not in adr.body


def test_records_named_by_date_link_by_the_file_a_link_names_and_take_its_date():
    items = desired_items(docs(**{
        "20200916-use-redis-cache": "# Use Redis as the cache\n\n- Status: accepted\n- Date: 2020-09-16\n",
        "20200916-use-markdown-adrs": "# Use Markdown ADRs\n\n- Status: accepted\n- Date: 2020-09-16\n",
        "20201026-use-memcached": "# Use Memcached\n\n- Status: accepted\n- Date: 2020-10-26\n"
                                  "- Supersedes: [20200916-use-redis-cache](20200916-use-redis-cache.md)\n",
        "2023-01-10-use-rabbit": "# Use RabbitMQ for jobs\n\nStatus: accepted\n",
        "2023-03-01-use-sqs": "# Use SQS for jobs\n\nStatus: accepted\n\n"
                              "Supersedes [Use RabbitMQ for jobs](2023-01-10-use-rabbit.md)\n",
    }))
    links = {ref.rsplit("/", 1)[-1]: item.get("supersedes", "").rsplit("/", 1)[-1] for ref, item in items.items()}
    assert links["20201026-use-memcached.md"] == "20200916-use-redis-cache.md"
    assert links["2023-03-01-use-sqs.md"] == "2023-01-10-use-rabbit.md"
    assert links["20200916-use-markdown-adrs.md"] == ""  # a date is no ADR number to link by
    assert items["adr:docs/adr/2023-01-10-use-rabbit.md"]["at"] == "2023-01-10T00:00:00"


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
