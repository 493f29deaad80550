"""The parts of a long record: its blank-line blocks, which of them hold the decision, and what a
cross-encoder reads of it.

A decision is stored whole, as one record (its status and supersession belong to the whole), so a
long one (an ADR with its context and consequences runs to 1,000-3,000 tokens) is longer than the
cross-encoder's window (128 tokens with the default set) and than a hook's slate. The slate shows
it as an excerpt (`slate.excerpt`); the cross-encoder reads the blocks that bear on the query
first, as passage-level rerankers score a long document by its best passage.
"""

from __future__ import annotations

import re

from agentmemrec.indexing.units import Unit
from agentmemrec.ranking.features import text_facts

# A block that opens a section: a Markdown heading, or a `Heading:` line alone (as ADRs are stored)
_HEADING = re.compile(r"^\s*(?:#{1,6}\s+(?P<md>.+?)[\s#]*|(?P<label>[A-Z][\w /&'()-]{0,60}):)\s*$")
# ... and one that holds the decision itself (Nygard's "Decision", MADR's "Decision Outcome")
_DECISION = re.compile(r"^(?:\d+[.)]?\s*)?(?:the\s+)?(?:decision(?:\s+outcome)?|outcome|resolution|chosen option)s?$",
                       re.IGNORECASE)


def blocks(text: str) -> list[tuple[str, bool]]:
    """Blank-line separated blocks, each with whether it lies in a section that holds the decision."""
    out, deciding = [], False
    for block in (b.strip("\r\n") for b in re.split(r"\n[ \t\r]*\n", text) if b.strip()):
        if (m := _HEADING.match(block.splitlines()[0])):
            deciding = bool(_DECISION.match((m["md"] or m["label"]).strip(" *_:")))
        out.append((block, deciding))
    return out


def cross_text(unit: Unit, terms: frozenset[str], window: int) -> str:
    """What the cross-encoder reads of a unit: its index text, except for a decision longer than
    the window, whose blocks follow its title and path in this order: those that share most of the
    query's `terms`, then its decision section, then the rest as written. The window then holds
    the passage that bears on the query, not only the record's first lines."""
    text = unit.index_text()
    if unit.kind != "decision" or unit.tokens <= window:
        return text
    parts = blocks(unit.text)
    shared = [len(text_facts(block)[0] & terms) for block, _ in parts]  # terms memoised per text
    order = sorted(range(len(parts)), key=lambda i: (-shared[i], not parts[i][1], i))
    return "\n".join([p for p in (unit.title, unit.path) if p] + [parts[i][0] for i in order])
