"""Stage 3: ranking the pool. `Ranker` is the seam: pool order (RRF over the channels), the
cross-encoder alone, or the learned LambdaRank model over the features (ranking/learned.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

from agentmemrec.indexing.store.sessions import SessionSnapshot
from agentmemrec.ranking.candidates import Candidate, Channel
from agentmemrec.ranking.features import content_terms
from agentmemrec.ranking.records import cross_text

if TYPE_CHECKING:
    from agentmemrec.ranking.cross_encoder import Reranker


@dataclass(frozen=True)
class ScoredCandidate:
    candidate: Candidate
    score: float
    rank: int  # 1-based final rank
    features: Mapping[str, float | None] | None = None
    contributions: Mapping[str, float] | None = None  # per-feature share of the score

    @property
    def unit(self) -> Any:  # a Unit; shorthand used by the slate builder
        return self.candidate.unit


@dataclass(frozen=True)
class RankingContext:
    """What a ranker may read besides the candidates: the request and where the units live."""

    project: str
    query: str
    as_of: datetime | None
    depth: int  # how deep each channel was run
    sessions: SessionSnapshot
    channels: Sequence[Channel]


class Ranker(Protocol):
    name: str

    def rank(self, candidates: Sequence[Candidate], ctx: RankingContext) -> list[ScoredCandidate]: ...

    def strength(self, ranked: Sequence[ScoredCandidate]) -> float | None:
        """How strongly the ranking answers the query (ranking/strength.py); None if unknown."""
        ...


def in_order(ordered: Sequence[tuple[Candidate, float]], features: Sequence[Mapping | None] | None = None,
             contributions: Sequence[Mapping | None] | None = None) -> list[ScoredCandidate]:
    return [ScoredCandidate(c, s, i, features[i - 1] if features else None,
                            contributions[i - 1] if contributions else None)
            for i, (c, s) in enumerate(ordered, 1)]


class PoolOrderRanker:
    """Keeps the fused pool order; the score is the fusion score."""

    name = "pool-order"

    def rank(self, candidates: Sequence[Candidate], ctx: RankingContext) -> list[ScoredCandidate]:
        return in_order([(c, c.fused) for c in sorted(candidates, key=lambda c: c.pool_rank)])

    def strength(self, ranked: Sequence[ScoredCandidate]) -> float | None:
        return None  # fusion scores are not comparable across queries


def cross_encode(reranker: "Reranker", query: str, candidates: Sequence[Candidate]) -> dict[int, float]:
    """Cross-encoder logits for the first `reranker.limit` candidates in pool order (all of them
    on a GPU); the others are not scored."""
    head = sorted(candidates, key=lambda c: c.pool_rank)[: reranker.limit]
    terms = content_terms(query)
    scores = reranker.score(query, [cross_text(c.unit, terms, reranker.max_tokens) for c in head])
    return {c.unit.id: float(s) for c, s in zip(head, scores)}


class CrossEncoderRanker:
    """Orders the scored candidates by cross-encoder score; unscored ones follow in pool order."""

    name = "cross-encoder"

    def __init__(self, reranker: "Reranker") -> None:
        self.reranker = reranker

    def rank(self, candidates: Sequence[Candidate], ctx: RankingContext) -> list[ScoredCandidate]:
        scores = cross_encode(self.reranker, ctx.query, candidates)
        floor = min(scores.values(), default=0.0)
        ordered = sorted(candidates, key=lambda c: (c.unit.id not in scores, -scores.get(c.unit.id, 0.0), c.pool_rank))
        pairs = [(c, scores.get(c.unit.id, floor - c.pool_rank)) for c in ordered]  # unscored sit below
        return in_order(pairs, [{"cross_encoder": scores.get(c.unit.id)} for c in ordered])

    def strength(self, ranked: Sequence[ScoredCandidate]) -> float | None:
        return None  # no calibration fitted for logits alone
