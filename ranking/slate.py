"""Stage 4: the slate. Walk the ranking and add each unit whose rendered size, headers included,
fits the remaining budget; skip what does not fit and go on. A turn of a session the slate shows
already walks a few places higher (`SESSION_PULL`). The rendered context (`ranking/render.py`)
groups items into sections (decisions, notes, then sessions in chronological order).

Turns over 1,024 tokens and notes are stored in parts of a few hundred tokens, but a decision is
one record (its status and supersession belong to the whole), and an ADR with its context and
consequences often runs past a hook's budget (1,000 to 3,000 tokens), so it could never be shown.
A decision whose item takes more than a share of the budget is shown as an excerpt (`excerpt`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator, Literal, Mapping, Sequence

from agentmemrec.indexing.lru import memo, memo_by_text, text_size
from agentmemrec.indexing.tokens import count_tokens, truncate
from agentmemrec.indexing.units import Unit
from agentmemrec.ranking.features import content_terms, text_facts
from agentmemrec.ranking.ranker import ScoredCandidate
from agentmemrec.ranking.records import blocks
from agentmemrec.ranking.render import (
    SlateInputs,
    display_status,
    header,
    preamble,
    quoted_if_markup,
    render,
    render_item,
    section,
)

SLATE_SHARE = 2  # a decision's item takes at most 1/2 of a slate's budget, longer ones are excerpted
MIN_EXCERPT = 150  # ... and at least this many tokens, when it is cut to what is left of the budget
HEADER_RESERVE = 8  # room kept for the section header a decision may open

Outcome = Literal["in_slate", "in_slate_as_successor", "skipped_over_budget",
                  "left_out_superseded", "duplicate_in_slate", "left_out_unmatched"]
DUPLICATE_MIN_WORDS = 8  # shorter turns ("Yes, I did!") say little alone and are never merged
# A slate built with `matched_only` (the hook's) takes a decision only on some sign that it bears
# on the question: BM25 ranks it within MATCHED_WITHIN["bm25"] or the dense channel within
# MATCHED_WITHIN["dense"], the time the question names covers it, or the question asks about
# decisions. Without one, only the ranker's prior for decisions put it there: it learned from the
# coding set, where half the questions ask about a decision, that decisions often answer, and in a
# project with many it fills a small slate with decisions about something else (docs/coding-benchmark.md).
MATCHED_WITHIN = {"bm25": 10, "dense": 100}
# A turn of a session the slate shows, costing no more than the candidate next in line with that
# one's header, walks SESSION_PULL places higher: ahead of up to SESSION_PULL - 1 candidates that would
# open a section. Its header is paid, and an answer told over several turns of one session needs them
# all (docs/evaluation.md, "The session pull").
SESSION_PULL = 5
ASKS_DECISIONS_RE = re.compile(r"\b(?:decid\w*|decisions?|adrs?)\b", re.I)


@dataclass(frozen=True)
class SlateItem:
    unit: Unit
    rank: int | None  # None for a successor pulled in from outside the ranking
    tokens: int
    status: str | None  # the decision status shown (effective at as_of)


@dataclass(frozen=True)
class Slate:
    slate_id: str
    project: str
    budget: int
    context: str
    tokens_used: int
    items: tuple[SlateItem, ...]
    outcomes: Mapping[int, Outcome] = field(default_factory=dict)
    fixed_tokens: int = 0  # preamble
    notes: tuple[str, ...] = ()  # what limited the selection (models missing, units not yet embedded)
    top_score: float | None = None  # the ranker's score of its first candidate: how strong the evidence is
    evidence_strength: float | None = None  # P(a confirmed answer is stored), ranking/strength.py
    top_relevance: float | None = None  # the best cross-encoder logit among the candidates it scored


def duplicate_key(unit: Unit) -> tuple[str, str] | None:
    """A turn's or a note's text, case and spacing aside, when long enough to say something alone:
    a slate shows it once (the same deploy command pasted into thirty sessions would fill it)."""
    if unit.kind == "decision":
        return None
    words = unit.text.lower().split()
    return (unit.kind, " ".join(words)) if len(words) >= DUPLICATE_MIN_WORDS else None


def unmatched(sc: ScoredCandidate, asks_decisions: bool) -> bool:
    """Whether `sc` is a decision with no sign that it bears on the question (`MATCHED_WITHIN`):
    every channel that found it ranks it past its limit (a channel without one counts as a sign),
    the question's time (the ranker's `date_gap`, when it has it) does not cover it, and the
    question does not ask about decisions."""
    if sc.unit.kind != "decision" or asks_decisions or (sc.features or {}).get("date_gap") == 0:
        return False
    hits = sc.candidate.channels
    return bool(hits) and all(hit.rank > MATCHED_WITHIN.get(name, hit.rank) for name, hit in hits.items())


def build_slate(slate_id: str, project: str, ranked: Sequence[ScoredCandidate], budget: int,
                inputs: SlateInputs, strength: float | None = None, query: str = "",
                matched_only: bool = False, pull: int = SESSION_PULL) -> Slate:
    """Greedy fill in rank order (`_walk`'s). A superseded decision enters only together with its successor
    chain; if the chain does not fit, the superseded decision is left out. A unit whose text is
    already in the slate (`duplicate_key`) is skipped. With `matched_only`, so is a decision
    that nothing but the ranker's prior put where it ranks (`unmatched`). `pull` is the session
    pull (`SESSION_PULL`; 0 walks in rank order, as `eval --ablation session-pull` measures)."""
    used = count_tokens(preamble(slate_id, project) + "\n")
    fixed = used
    costs = _Costs(inputs)
    limit, terms = budget // SLATE_SHARE, content_terms(query)
    asks_decisions = bool(ASKS_DECISIONS_RE.search(query))
    chosen: list[tuple[Unit, int | None]] = []
    chosen_ids: set[int] = set()
    open_sections: set[tuple] = set()
    outcomes: dict[int, Outcome] = {}
    groups: list[list[int]] = []  # ids added together, to undo the last group if needed
    rank_of = {sc.unit.id: sc.rank for sc in ranked}  # a successor keeps its own rank, if ranked
    shown: dict[tuple[str, str], int] = {}  # duplicate_key -> id of the unit in the slate
    twins: dict[int, int] = {}  # a skipped duplicate's id -> its twin's
    for sc in _walk(ranked, open_sections, costs, pull):
        if sc.unit.id in chosen_ids:
            continue
        if matched_only and unmatched(sc, asks_decisions):
            outcomes[sc.unit.id] = "left_out_unmatched"
            continue
        key = duplicate_key(sc.unit)
        if key in shown:
            outcomes[sc.unit.id], twins[sc.unit.id] = "duplicate_in_slate", shown[key]
            continue
        # a long decision is cut to what is left of the budget, if less than its share but not little
        room = budget - used - HEADER_RESERVE
        fit = min(limit, room) if room >= MIN_EXCERPT else limit
        unit = excerpt(sc.unit, fit, inputs, terms)
        group = [unit] + [excerpt(s, fit, inputs, terms) for s in inputs.successors.get(unit.id, ())
                          if s.id not in chosen_ids]
        cost, sections = costs.group(group, open_sections)
        if cost <= budget - used:
            used += cost
            open_sections |= sections
            for i, member in enumerate(group):
                chosen.append((member, rank_of.get(member.id)))
                chosen_ids.add(member.id)
                outcomes[member.id] = "in_slate" if i == 0 else "in_slate_as_successor"
                if (member_key := duplicate_key(member)) is not None:
                    shown.setdefault(member_key, member.id)
            groups.append([m.id for m in group])
        else:
            superseded = len(group) > 1
            alone = costs.group([unit], open_sections)[0] if superseded else cost
            outcomes[unit.id] = ("left_out_superseded" if superseded and alone <= budget - used
                                 else "skipped_over_budget")
    return _finish(slate_id, project, budget, chosen, outcomes, groups, inputs, fixed, costs, strength, twins)


def _walk(ranked: Sequence[ScoredCandidate], open_sections: set[tuple], costs: "_Costs", pull: int
          ) -> Iterator[ScoredCandidate]:
    """The candidates in rank order, except that when the next would open a section, a turn of a session in
    `open_sections` (as it is when the next is asked for) costing no more than the next with its header counts
    `pull` places higher: the first such among the next `pull` goes first (at `pull` down it ties, and loses)."""
    pending = list(ranked)
    while pending:
        key, size = costs.item(pending[0].unit)
        pick = 0
        if key not in open_sections:
            size += costs.header(key)
            items = (costs.item(pending[i].unit) + (i,) for i in range(1, min(len(pending), pull)))
            pick = next((i for turn_key, tokens, i in items
                         if turn_key[0] == 2 and turn_key in open_sections and tokens <= size), 0)
        yield pending.pop(pick)


MARK_RESERVE = 40  # tokens kept for the excerpt's last line


def excerpt(unit: Unit, limit: int, inputs: SlateInputs, terms: frozenset[str] = frozenset()) -> Unit:
    """`unit` if it is not a decision or its item takes at most `limit` tokens; else a copy whose
    text is an excerpt that fits. Blocks are taken in three runs: its decision section's blocks
    up to the first that does not fit (cut, if none fits whole); then the other blocks that share
    the query's `terms`, the most shared first, each that fits; then the rest from the record's
    start up to the first that does not fit. They are shown in the record's order, with '…' where
    blocks are left out and a last line naming the whole record's size and where to read it. The
    copy keeps the id, so the slate, `explain_selection` and `forget` name the record."""
    if unit.kind != "decision" or item_tokens(unit, inputs) <= limit:
        return unit
    parts = blocks(unit.text)
    rest = [i for i, (_, deciding) in enumerate(parts) if not deciding]
    shared = {i: len(text_facts(parts[i][0])[0] & terms) for i in rest} if terms else {}
    asked = sorted((i for i in rest if shared.get(i)), key=lambda i: -shared[i])
    runs = [([i for i, (_, deciding) in enumerate(parts) if deciding], True), (asked, False),
            ([i for i in rest if i not in asked], True)]  # (blocks, whether the run ends at one too big)
    room = limit - item_tokens(replace(unit, text=""), inputs) - MARK_RESERVE
    texts: dict[int, str] = {}
    for run, ends in runs:
        for i in run:
            cost = piece_tokens(parts[i][0]) + 2  # and the blank line between blocks, indented
            if cost <= room:
                texts[i] = parts[i][0]
                room -= cost
            elif not texts and room > 8:  # nothing fits whole: the beginning of the first block
                texts[i] = truncate(parts[i][0], room - 4).rstrip() + " …"
                room = 0
            elif ends:
                break
    where = f"show_unit #{unit.id}" + (f" or the file {quoted_if_markup(unit.path)}" if unit.path else "")
    mark = f"[excerpt of a {piece_tokens(unit.text)}-token record; read it whole with {where}]"
    taken = list(texts)
    while True:
        shown: list[str] = []
        last = -1
        for i in sorted(taken):
            shown += ["…", texts[i]] if i > last + 1 else [texts[i]]
            last = i
        short = replace(unit, text="\n\n".join([*shown, mark]))
        if item_tokens(short, inputs) <= limit or not taken:
            return short
        taken.pop()  # the pieces' count was an estimate: leave out the last block taken


@memo_by_text(16 << 20)  # a line holds a unit's text: bounded by bytes, not lines
def piece_tokens(text: str) -> int:
    """Tokens of one rendered line or header: the same items recur within a recall and across
    recalls, and counting is most of what building a slate costs."""
    return count_tokens(text)


# An item line's tokens by unit: a turn's or a note's line is its unit's alone, and a unit read
# from the store's cache is the same object from one recall to the next (a new row is a new one).
_ITEM_TOKENS = memo(16 << 20, lambda _, entry: text_size(entry[0].text) + 200)


def item_tokens(unit: Unit, inputs: SlateInputs) -> int:
    if unit.kind == "decision":  # its line shows its status and successors: the rendered line is the key
        return piece_tokens(render_item(unit, inputs) + "\n")
    found = _ITEM_TOKENS.get(unit.id)
    if found is not None and found[0] is unit:
        return found[1]
    tokens = count_tokens(render_item(unit, inputs) + "\n")
    _ITEM_TOKENS.put(unit.id, (unit, tokens))
    return tokens


def warm_item_tokens(units: Iterable[Unit]) -> None:
    """Count the units' item lines now (a warm start), not at the first slate that meets them."""
    for unit in units:
        if unit.kind != "decision":
            item_tokens(unit, SlateInputs({}, {}))  # a turn's or a note's line reads no inputs


class _Costs:
    """Each unit's section and rendered size, worked out once per slate: the walk meets every
    candidate of the ranking, and the ones skipped over budget are asked about twice."""

    def __init__(self, inputs: SlateInputs) -> None:
        self.inputs = inputs
        self._items: dict[tuple[int, str], tuple[tuple, int]] = {}  # (id, text) -> (section key, item tokens)
        self._headers: dict[tuple, int] = {}  # section key -> header tokens

    def item(self, unit: Unit) -> tuple[tuple, int]:
        found = self._items.get((unit.id, unit.text))  # by text too: an excerpt's size depends on the room left
        if found is None:
            key = section(unit, self.inputs)
            if key not in self._headers:
                self._headers[key] = piece_tokens(header(key) + "\n")
            found = self._items[unit.id, unit.text] = key, item_tokens(unit, self.inputs)
        return found

    def header(self, key: tuple) -> int:
        return self._headers[key]  # `item` has met a unit of the section

    def group(self, group: Sequence[Unit], open_sections: set[tuple]) -> tuple[int, set[tuple]]:
        cost, new = 0, set()
        for unit in group:
            key, tokens = self.item(unit)
            if key not in open_sections and key not in new:
                new.add(key)
                cost += self._headers[key]
            cost += tokens
        return cost, new


def _finish(slate_id: str, project: str, budget: int, chosen: list[tuple[Unit, int | None]],
            outcomes: dict[int, Outcome], groups: list[list[int]], inputs: SlateInputs,
            fixed: int, costs: _Costs, strength: float | None, twins: Mapping[int, int]) -> Slate:
    # Token counts of pieces are an estimate of the whole (BPE can merge across a boundary):
    # the rendered text is counted once more and the last groups undone until it fits.
    while True:
        units = [u for u, _ in chosen]
        context = render(slate_id, project, units, inputs)
        used = count_tokens(context)
        if used <= budget or not groups:
            break
        dropped = set(groups.pop())
        chosen = [(u, r) for u, r in chosen if u.id not in dropped]
        outcomes.update({i: "skipped_over_budget" for i in dropped})
        outcomes.update({i: "skipped_over_budget" for i, twin in twins.items() if twin in dropped})
    items = tuple(SlateItem(u, r, costs.item(u)[1], display_status(u, inputs)) for u, r in chosen)
    return Slate(slate_id, project, budget, context, used, items, outcomes, fixed, evidence_strength=strength)
