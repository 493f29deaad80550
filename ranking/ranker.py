"""Stage 3: ranking the pool. `Ranker` is the seam the learned LambdaRank model fills; until a
model is configured the pool order (RRF over the channels) is the ranking."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from .candidates import Candidate


@dataclass(frozen=True)
class ScoredCandidate:
    candidate: Candidate
    score: float
    rank: int  # 1-based final rank
    features: Mapping[str, float | None] | None = None

    @property
    def unit(self):  # noqa: ANN201 - a Unit; shorthand used by the slate builder
        return self.candidate.unit


class Ranker(Protocol):
    name: str

    def rank(self, query: str, candidates: Sequence[Candidate]) -> list[ScoredCandidate]: ...


class PoolOrderRanker:
    """Keeps the fused pool order; the score is the fusion score."""

    name = "pool-order"

    def rank(self, query: str, candidates: Sequence[Candidate]) -> list[ScoredCandidate]:
        ordered = sorted(candidates, key=lambda c: c.pool_rank)
        return [ScoredCandidate(c, c.fused, i) for i, c in enumerate(ordered, 1)]
