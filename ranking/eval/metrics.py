"""Evidence-selection metrics, as defined in the evaluation data's README, and the coding set's
checks.

For a question with evidence set E, candidate pool P and slate S:
pool completeness = share with E subset of P; slate completeness = share with E subset of S;
conditional ranking completeness = slate completeness among questions whose pool was complete;
evidence recall = mean of |E and S| / |E|. These are over answerable questions; multi-evidence
completeness is slate completeness among those with |E| >= 2.

Unanswerable questions (no confirmed answer stored) count in the checks that hold for every
slate (no unit of another project, proposed and rejected decisions shown as such, no superseded
decision without its successor) and in how well the evidence strength separates them from the
answerable ones (AUROC: the probability that an answerable question scores above an unanswerable
one, ties counting half).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

from agentmemrec.ranking.render import SlateInputs
from agentmemrec.ranking.slate import Slate


@dataclass(frozen=True)
class Outcome:
    """One question under one variant and budget."""

    category: str
    evidence: frozenset[str]
    pool: frozenset[str]
    slate: frozenset[str]
    lost_to: str | None = None  # for a complete pool but incomplete slate: "ranking" or "budget"
    qid: str = ""
    answerable: bool = True
    leaked: int = 0  # units of another project in the slate
    misshown: int = 0  # proposed or rejected decisions in the slate not shown as such
    orphaned: int = 0  # superseded decisions in the slate without their successor
    strength: float | None = None  # the slate's evidence strength
    missing_pool_ranks: tuple[int | None, ...] = ()  # pool ranks of the evidence not in the slate (None: not in it)
    slate_items: int = 0
    unmatched_decisions: int = 0  # decisions in the slate, not evidence, that no channel matched (`unmatched`)

    @property
    def pool_complete(self) -> bool:
        return self.evidence <= self.pool

    @property
    def slate_complete(self) -> bool:
        return self.evidence <= self.slate

    @property
    def recall(self) -> float:
        return len(self.evidence & self.slate) / len(self.evidence)


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def pool_completeness(outcomes: Iterable[Outcome]) -> float | None:
    return _share([o.pool_complete for o in outcomes])


def slate_completeness(outcomes: Iterable[Outcome]) -> float | None:
    return _share([o.slate_complete for o in outcomes])


def conditional_ranking_completeness(outcomes: Iterable[Outcome]) -> float | None:
    return _share([o.slate_complete for o in outcomes if o.pool_complete])


def evidence_recall(outcomes: Iterable[Outcome]) -> float | None:
    values = [o.recall for o in outcomes]
    return sum(values) / len(values) if values else None


def auroc(positives: list[float], negatives: list[float]) -> float | None:
    """Mann-Whitney estimate of P(positive scores above negative), ties counting half."""
    if not positives or not negatives:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


POOL_RANK_BINS = ((1, 16), (17, 64), (65, 128), (129, None))


def missing_by_pool_rank(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """Where the evidence missing from slates sat in the pool: how deep a cross-encoder or a
    larger budget would have to reach for it."""
    ranks = [r for o in outcomes for r in o.missing_pool_ranks]
    out = {f"{lo}-{hi}" if hi else f"{lo}+": sum(r is not None and lo <= r <= (hi or r) for r in ranks)
           for lo, hi in POOL_RANK_BINS}
    out["not_in_pool"] = sum(r is None for r in ranks)
    return out


def summarize(all_outcomes: list[Outcome]) -> dict[str, Any]:
    outcomes = [o for o in all_outcomes if o.answerable]
    failures = [o for o in outcomes if not o.slate_complete]
    multi = [o for o in outcomes if len(o.evidence) >= 2]
    out: dict[str, Any] = {
        "questions": len(outcomes),
        "pool_completeness": pool_completeness(outcomes),
        "slate_completeness": slate_completeness(outcomes),
        "conditional_ranking_completeness": conditional_ranking_completeness(outcomes),
        "evidence_recall": evidence_recall(outcomes),
        "lost_never_in_pool": sum(not o.pool_complete for o in failures),
        "lost_in_ranking": sum(o.pool_complete and o.lost_to == "ranking" for o in failures),
        "lost_to_budget": sum(o.pool_complete and o.lost_to == "budget" for o in failures),
        "multi_evidence_questions": len(multi),
        "multi_evidence_completeness": slate_completeness(multi),
        "missing_evidence_by_pool_rank": missing_by_pool_rank(failures),
        "slate_items_p50": statistics.median(o.slate_items for o in outcomes) if outcomes else None,
        "unmatched_decisions_per_slate": statistics.mean(o.unmatched_decisions for o in outcomes) if outcomes else None,
        "leaked_questions": sorted(o.qid for o in all_outcomes if o.leaked),
        "misshown_questions": sorted(o.qid for o in all_outcomes if o.misshown),
        "orphaned_questions": sorted(o.qid for o in all_outcomes if o.orphaned),
    }
    unanswerable = [o for o in all_outcomes if not o.answerable]
    if unanswerable:
        shown = [o for o in unanswerable if o.evidence]
        out["unanswerable"] = {
            "questions": len(unanswerable), "with_unconfirmed_decision": len(shown),
            "unconfirmed_decision_in_slate": slate_completeness(shown),
            "nothing_stored": len(unanswerable) - len(shown),
        }
        strong = [o.strength for o in outcomes if o.strength is not None]
        out["evidence_strength_auroc"] = auroc(strong, [o.strength for o in unanswerable if o.strength is not None])
        out["evidence_strength_auroc_by_kind"] = {
            "nothing_stored": auroc(strong, [o.strength for o in unanswerable if not o.evidence and o.strength is not None]),
            "unconfirmed_decision": auroc(strong, [o.strength for o in shown if o.strength is not None])}
    return out


def by_category(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[o.category].append(o)
    return {cat: summarize(group) for cat, group in sorted(groups.items())}


STATUS_MARKS = {"proposed": "(proposed, not confirmed,", "rejected": "(REJECTED,"}


def slate_violations(slate: Slate, project: str, inputs: SlateInputs) -> tuple[int, int, int]:
    """What a slate must never do, counted from what a client receives (its items and rendered
    context): (units of another project, proposed or rejected decisions whose rendered line does
    not say so, superseded decisions shown without their successor)."""
    leaked = sum(it.unit.project != project for it in slate.items)
    lines = {line.split("]", 1)[0].split()[0][2:]: line for line in slate.context.splitlines()
             if line.startswith("[#")}
    ids = {it.unit.id for it in slate.items}
    misshown = orphaned = 0
    for it in slate.items:
        line = lines.get(str(it.unit.id), "")
        if it.status in STATUS_MARKS and STATUS_MARKS[it.status] not in line:
            misshown += 1
        if it.status == "superseded":
            chain = inputs.successors.get(it.unit.id, ())
            orphaned += not chain or chain[0].id not in ids or f"SUPERSEDED by #{chain[0].id}" not in line
    return leaked, misshown, orphaned
