"""How strongly the memory answers a query: the probability that a confirmed answer is stored.

A slate is always filled, so its contents cannot tell "nothing relevant is stored" from a weak
match. The evidence strength is a logistic model over a few query-level signals read off the
ranking: how close the best candidates are in meaning and words (absolute measures, unlike the
per-query normalised ranking features), and whether the best match is a decision nobody
confirmed (proposed or rejected: "did we approve X?" has no confirmed answer when X was only
proposed). It is fitted on answerable and unanswerable questions (ranking/eval/train.py) and
stored in the ranker's model file, since its inputs depend on the models that made them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from agentmemrec.ranking.ranker import ScoredCandidate

UNCONFIRMED = ("proposed", "rejected")
NAN = float("nan")


def _feature(sc: ScoredCandidate, name: str) -> float:
    value = (sc.features or {}).get(name)
    return NAN if value is None or value != value else float(value)


def _best(ranked: Sequence[ScoredCandidate], name: str, k: int) -> float:
    values = [v for sc in ranked[:k] if not math.isnan(v := _feature(sc, name))]
    return max(values) if values else NAN


def unconfirmed(sc: ScoredCandidate) -> bool:
    """A decision whose stored status is proposed or rejected (a superseded one was confirmed once)."""
    return sc.unit.kind == "decision" and sc.unit.status in UNCONFIRMED and sc.unit.superseded_by is None


def top_dense(ranked: Sequence[ScoredCandidate]) -> float:
    """Cosine of the best-ranked candidate: absolute, so a query about nothing stored scores low."""
    return _feature(ranked[0], "dense_cosine")


def best_dense_top5(ranked: Sequence[ScoredCandidate]) -> float:
    return _best(ranked, "dense_cosine", 5)


def best_term_overlap_top3(ranked: Sequence[ScoredCandidate]) -> float:
    """Share of the query's content words found in one of the three best candidates."""
    return _best(ranked, "term_overlap", 3)


def best_key_overlap_top3(ranked: Sequence[ScoredCandidate]) -> float:
    """Share of the query's identifiers, paths, versions and names found in one of the three best."""
    return _best(ranked, "key_overlap", 3)


def top_unconfirmed(ranked: Sequence[ScoredCandidate]) -> float:
    return float(unconfirmed(ranked[0]))


def unconfirmed_top3(ranked: Sequence[ScoredCandidate]) -> float:
    return float(sum(unconfirmed(sc) for sc in ranked[:3]))


Signal = Callable[[Sequence[ScoredCandidate]], float]
SIGNALS: tuple[Signal, ...] = (top_dense, best_dense_top5, best_term_overlap_top3, best_key_overlap_top3,
                               top_unconfirmed, unconfirmed_top3)
SIGNAL_NAMES: tuple[str, ...] = tuple(f.__name__ for f in SIGNALS)


def signals(ranked: Sequence[ScoredCandidate]) -> np.ndarray:
    """The signals of one ranking (NaN where a source is missing); None-safe for an empty one."""
    if not ranked:
        return np.full(len(SIGNALS), NAN)
    return np.array([f(ranked) for f in SIGNALS], dtype=np.float64)


@dataclass(frozen=True)
class StrengthModel:
    """Standardised logistic regression; a missing signal takes its training mean (contributes 0)."""

    names: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float

    def predict(self, ranked: Sequence[ScoredCandidate]) -> float:
        """0 for an empty ranking (nothing eligible matched), else the fitted probability."""
        if not ranked:
            return 0.0
        return self.probability(signals(ranked))

    def probability(self, x: np.ndarray) -> float:
        index = [SIGNAL_NAMES.index(n) for n in self.names]
        z = (x[index] - np.array(self.mean)) / np.array(self.scale)
        z = np.where(np.isnan(z), 0.0, z)
        return float(1.0 / (1.0 + math.exp(-(self.intercept + float(z @ np.array(self.coef))))))

    def to_meta(self) -> dict[str, Any]:
        return {"signals": list(self.names), "mean": list(self.mean), "scale": list(self.scale),
                "coef": list(self.coef), "intercept": self.intercept}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any] | None) -> "StrengthModel | None":
        """The model stored in a ranker file; None if the file has none or names unknown signals."""
        if not meta or any(n not in SIGNAL_NAMES for n in meta.get("signals", ["?"])):
            return None
        return cls(tuple(meta["signals"]), tuple(meta["mean"]), tuple(meta["scale"]), tuple(meta["coef"]),
                   float(meta["intercept"]))
