"""The learned ranker: a LightGBM LambdaRank model over the features in features.py.

The model file is one JSON document: the LightGBM models' text (a small ensemble of boosters
trained with different seeds, whose scores are averaged) plus what it was trained with and on
(feature names, embedder and reranker identities, data, metrics). Loading checks the feature
names (a mismatch is an error: the file belongs to another version) and warns when the active
embedder or reranker differs from the ones it was trained with.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import lightgbm as lgb
import numpy as np

from agentmemrec.indexing.errors import StoreError
from agentmemrec.ranking.candidates import Candidate
from agentmemrec.ranking.cross_encoder import Reranker
from agentmemrec.ranking.features import FEATURE_NAMES, QueryContext, feature_matrix, query_keys, units_needing_scores
from agentmemrec.ranking.ranker import RankingContext, ScoredCandidate, cross_encode, in_order

log = logging.getLogger(__name__)
FORMAT = 2  # 2: a list of boosters ("models"), averaged
DEFAULT_MODEL = "default-ranker.json"
PREDICT_THREADS = 1  # a pool is ~128 rows: worker threads cost more than they save, most on a busy machine


@dataclass(frozen=True)
class RankerModel:
    boosters: tuple[lgb.Booster, ...]
    meta: dict[str, Any]

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The mean of the boosters' scores: one LightGBM model's ranking varies by about a point of
        slate completeness with its seed; the average varies less and ranks better."""
        return np.mean([b.predict(x, num_threads=PREDICT_THREADS) for b in self.boosters], axis=0)

    def contributions(self, x: np.ndarray) -> np.ndarray:
        """Per-feature contributions to `predict` (SHAP values are additive, so they average too)."""
        return np.mean([b.predict(x, pred_contrib=True, num_threads=PREDICT_THREADS)[:, :-1]
                        for b in self.boosters], axis=0)

    def save(self, path: Path) -> None:
        doc = {**self.meta, "format": FORMAT, "features": list(FEATURE_NAMES),
               "models": [b.model_to_string() for b in self.boosters]}
        path.write_text(json.dumps(doc))

    @classmethod
    def load(cls, path: Path | None = None) -> "RankerModel":
        """A model file, or the default one shipped in the package."""
        try:
            text = path.read_text() if path else resources.files(__package__).joinpath(
                f"models/{DEFAULT_MODEL}").read_text()
            doc = json.loads(text)
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read ranker model {path or DEFAULT_MODEL}: {exc}; retrain it with "
                             "'agentmemrec train'") from exc
        if doc.get("format") != FORMAT or doc.get("features") != list(FEATURE_NAMES):
            raise StoreError(f"ranker model {path or DEFAULT_MODEL} was trained on other features or by "
                             f"another version (format {doc.get('format')}, features {doc.get('features')}); "
                             "retrain it with 'agentmemrec train'")
        meta = {k: v for k, v in doc.items() if k not in ("models", "features", "format")}
        return cls(tuple(lgb.Booster(model_str=m) for m in doc["models"]), meta)

    def trained_on(self) -> dict[str, str] | None:
        """SHA-256 -> name of every file the model was trained on; None if its file predates
        recording them."""
        data = self.meta.get("data") or []
        if not all(isinstance(d, dict) for d in data):
            return None
        return {f["sha256"]: f["name"] for d in data for f in d["files"]}

    def check_models(self, embedder: str | None, reranker: str | None) -> list[str]:
        """Warnings when the active models are not the ones the ranker was trained with."""
        out = []
        for role, active in (("embedder", embedder), ("reranker", reranker)):
            trained = self.meta.get(role)
            if _weights(trained) != _weights(active):  # the same weights installed under another name match
                out.append(f"ranker trained with {role} {trained or 'none'}, running with {active or 'none'}: "
                           "its scores may be off; retrain with 'agentmemrec train'")
        return out


def build_context(candidates: Sequence[Candidate], ctx: RankingContext, cross: dict[int, float]) -> QueryContext:
    neighbours = ctx.sessions.neighbours
    ids = units_needing_scores(candidates, neighbours)
    scores = {ch.name: ch.score_units(ctx.project, ctx.query, ids) for ch in ctx.channels}
    now = ctx.as_of or datetime.now(timezone.utc).replace(tzinfo=None)
    return QueryContext(ctx.query, now, ctx.depth, scores, neighbours, query_keys(ctx.query), cross,
                        list(candidates))


class LearnedRanker:
    """Features, then the model's score; without a model it keeps pool order and only records
    the features (what training collects)."""

    name = "lambdarank"

    def __init__(self, model: RankerModel | None, reranker: Reranker | None = None) -> None:
        self.model = model
        self.reranker = reranker

    def features(self, candidates: Sequence[Candidate], ctx: RankingContext) -> np.ndarray:
        cross = cross_encode(self.reranker, ctx.query, candidates) if self.reranker else {}
        return feature_matrix(candidates, build_context(candidates, ctx, cross))

    def rank(self, candidates: Sequence[Candidate], ctx: RankingContext) -> list[ScoredCandidate]:
        if not candidates:
            return []
        return self.order(candidates, self.features(candidates, ctx))

    def order(self, candidates: Sequence[Candidate], x: np.ndarray, model: RankerModel | None = None
              ) -> list[ScoredCandidate]:
        """Sort by model score (ties: pool order); keep each candidate's features and the
        per-feature contributions to its score (LightGBM's SHAP values)."""
        model = model or self.model
        scores = (model.predict(x) if model is not None
                  else -np.array([c.pool_rank for c in candidates], dtype=float))
        order = sorted(range(len(candidates)), key=lambda i: (-scores[i], candidates[i].pool_rank))
        rows = x.tolist()
        return in_order([(candidates[i], float(scores[i])) for i in order],
                        [dict(zip(FEATURE_NAMES, rows[i])) for i in order])

    def top_features(self, rows: Sequence[Sequence[float]], n: int = 3) -> list[list[tuple[str, float]]]:
        """For each feature row, the features that most raised its score (LightGBM's per-prediction
        contributions, SHAP values), largest first."""
        if self.model is None or not rows:
            return [[] for _ in rows]
        contrib = self.model.contributions(np.asarray(rows, dtype=np.float64))
        out = []
        for row in contrib:
            best = np.argsort(-row)[:n]
            out.append([(FEATURE_NAMES[j], round(float(row[j]), 4)) for j in best if row[j] > 0])
        return out


def _weights(identity: str | None) -> str | None:
    """The part of a model identity ('name@hash') that names its weights."""
    return identity.rpartition("@")[2] if identity else None
