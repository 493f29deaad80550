"""Evidence-selection metrics, as defined in the evaluation data's README.

For a question with evidence set E, candidate pool P and slate S:
pool completeness = share with E subset of P; slate completeness = share with E subset of S;
conditional ranking completeness = slate completeness among questions whose pool was complete;
evidence recall = mean of |E and S| / |E|.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Outcome:
    """One question under one variant and budget."""

    category: str
    evidence: frozenset[str]
    pool: frozenset[str]
    slate: frozenset[str]
    lost_to: str | None = None  # for a complete pool but incomplete slate: "ranking" or "budget"

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


def summarize(outcomes: list[Outcome]) -> dict[str, float | int | None]:
    failures = [o for o in outcomes if not o.slate_complete]
    return {
        "questions": len(outcomes),
        "pool_completeness": pool_completeness(outcomes),
        "slate_completeness": slate_completeness(outcomes),
        "conditional_ranking_completeness": conditional_ranking_completeness(outcomes),
        "evidence_recall": evidence_recall(outcomes),
        "lost_never_in_pool": sum(not o.pool_complete for o in failures),
        "lost_in_ranking": sum(o.pool_complete and o.lost_to == "ranking" for o in failures),
        "lost_to_budget": sum(o.pool_complete and o.lost_to == "budget" for o in failures),
    }


def by_category(outcomes: list[Outcome]) -> dict[str, dict[str, float | int | None]]:
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[o.category].append(o)
    return {cat: summarize(group) for cat, group in sorted(groups.items())}
