"""The learned ranker: a LightGBM LambdaRank model over the features in features.py.

The model file is one JSON document: the LightGBM models' text (a small ensemble of boosters
trained with different seeds, whose scores are averaged) plus what it was trained with and on
(feature names, embedder and reranker identities, data, metrics). Loading checks the feature
names (a mismatch is an error: the file belongs to another version).

Three rankers ship, one per configuration: the default CPU set with its cross-encoder, its
embedder without the cross-encoder, and BM25 alone (nothing installed). `choose_ranker` picks
the one trained with the active models' weights; any other models get the closest shipped one
and a note that says so and how to retrain.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import lightgbm as lgb
import numpy as np

from agentmemrec.indexing.errors import StoreError
from agentmemrec.ranking import compiled
from agentmemrec.ranking.candidates import Candidate
from agentmemrec.ranking.cross_encoder import Reranker
from agentmemrec.ranking.features import FEATURE_NAMES, QueryContext, feature_matrix, query_keys, units_needing_scores
from agentmemrec.ranking.ranker import RankingContext, ScoredCandidate, cross_encode, in_order
from agentmemrec.ranking.strength import StrengthModel

log = logging.getLogger(__name__)
FORMAT = 2  # 2: a list of boosters ("models"), averaged
# Most models first: `choose_ranker` falls back along this order.
SHIPPED = ("cpu-ranker.json", "embedder-ranker.json", "lexical-ranker.json")
RETRAIN = ("agentmemrec train locomo DATA --also longmemeval DATA --out my-ranker.json, then serve with "
           "--ranker-model my-ranker.json (docs/ranker.md)")
# From a few hundred rows (the default pool is 512) the boosters predict side by side, each on one
# thread that takes the next when free: about half the time on two idle cores, and no slower than
# one thread when another process holds a core. LightGBM's own threads split the rows evenly, so
# they wait for the busy core and were slower than one thread then. Below, one after the other.
THREADS_FROM_ROWS = 256
_HELPERS = min(os.cpu_count() or 1, 4) - 1  # beside the calling thread
_BOOSTERS = ThreadPoolExecutor(max_workers=max(_HELPERS, 1), thread_name_prefix="booster")
ROW_NAMES = (*FEATURE_NAMES, "cross_encoder")  # a ranked candidate's features, with the raw logit
# Stage 4 fills a fixed budget, so a unit several times a typical item's length takes the room of
# several that may hold evidence, and a larger budget can let it in ahead of evidence that a smaller
# budget kept. The model scores relevance alone; past LONG_UNIT_TOKENS, each e-fold of length costs
# a unit LENGTH_COST standard deviations of its query's scores. Shorter units (every LoCoMo turn
# and coding item) keep the model's order; a note chunk (about 320 at most) pays about 0.11 at most.
# docs/evaluation.md measures it.
LONG_UNIT_TOKENS, LENGTH_COST = 256, 0.5
# A decision longer than half a slate is shown as an excerpt of that size (ranking/slate.py): it
# costs at most half the default budget, whatever its length.
DECISION_SHOWN_TOKENS = 1350


@dataclass(frozen=True)
class RankerModel:
    boosters: tuple[lgb.Booster, ...]
    meta: dict[str, Any]
    # the boosters as machine code, once `compile` has them (the same scores, bit for bit)
    _compiled: list[Callable[[np.ndarray], np.ndarray]] = field(default_factory=list, compare=False, repr=False)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The mean of the boosters' scores: one LightGBM model's ranking varies by about a point of
        slate completeness with its seed; the average varies less and ranks better."""
        fns = self._compiled
        if fns:
            x = np.ascontiguousarray(x, dtype=np.float64)
            return np.mean(self._each(lambda i: fns[i](x), len(x)), axis=0)
        return np.mean(self._each(lambda i: self.boosters[i].predict(x, num_threads=1), len(x)), axis=0)

    def compile(self, folder: Path | None = None) -> threading.Thread | None:
        """Predict with the boosters compiled to machine code once they are (ranking/compiled.py:
        from the cache `folder`, else compiled in the background; LightGBM predicts meanwhile).
        The thread that does it; None without lleaves."""
        return compiled.prepare(self.boosters, self._use, folder)

    def _use(self, fns: list[Callable[[np.ndarray], np.ndarray]]) -> None:
        self._compiled[:] = fns  # one assignment: a reader sees none or all; a second compile replaces

    @property
    def code(self) -> str:
        """What predicts: `compiled` boosters or `lightgbm`."""
        return "compiled" if self._compiled else "lightgbm"

    @cached_property
    def strength(self) -> StrengthModel | None:
        """The evidence-strength model fitted with this ranker, if the file has one."""
        return StrengthModel.from_meta(self.meta.get("strength"))

    def contributions(self, x: np.ndarray) -> np.ndarray:
        """Per-feature contributions to `predict` (SHAP values are additive, so they average too)."""
        return np.mean(self._each(lambda i: self.boosters[i].predict(x, pred_contrib=True, num_threads=1)[:, :-1],
                                  len(x)), axis=0)

    def _each(self, fn: Callable[[int], np.ndarray], rows: int) -> list[np.ndarray]:
        """fn of every booster's index, in booster order. From THREADS_FROM_ROWS rows the calling
        thread and the pool's each take the next booster when free (LightGBM and the compiled code
        release the GIL while they predict), so a thread on a busy core takes fewer."""
        if rows < THREADS_FROM_ROWS or len(self.boosters) < 2 or _HELPERS == 0:
            return [fn(i) for i in range(len(self.boosters))]
        out: list[np.ndarray | None] = [None] * len(self.boosters)
        todo, lock = iter(range(len(self.boosters))), threading.Lock()

        def work() -> None:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                out[i] = fn(i)
        helpers = [_BOOSTERS.submit(work) for _ in range(_HELPERS)]
        work()
        for helper in helpers:
            helper.result()
        return out  # type: ignore[return-value]

    def save(self, path: Path) -> None:
        doc = {**self.meta, "format": FORMAT, "features": list(FEATURE_NAMES),
               "models": [b.model_to_string() for b in self.boosters]}
        path.write_text(json.dumps(doc))

    def trained_on(self) -> dict[str, str] | None:
        """SHA-256 -> name of every file the model was trained on; None if its file predates
        recording them."""
        data = self.meta.get("data") or []
        if not all(isinstance(d, dict) for d in data):
            return None
        return {f["sha256"]: f["name"] for d in data for f in d["files"]}

    @classmethod
    def shipped(cls, name: str) -> "RankerModel":
        return cls.read(Path(str(resources.files(__package__).joinpath(f"models/{name}"))), name)

    @classmethod
    def read(cls, path: Path, name: str | None = None) -> "RankerModel":
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read ranker model {path}: {exc}; retrain it: {RETRAIN}") from exc
        if doc.get("format") != FORMAT or doc.get("features") != list(FEATURE_NAMES):
            raise StoreError(f"ranker model {path} was trained on other features or by another version "
                             f"(format {doc.get('format')}, features {doc.get('features')}); retrain it: {RETRAIN}")
        meta = {k: v for k, v in doc.items() if k not in ("models", "features", "format")}
        return cls(tuple(lgb.Booster(model_str=m) for m in doc["models"]), {**meta, "file": name or str(path)})

    @property
    def uses_reranker(self) -> bool:
        return self.meta.get("reranker") is not None

    @property
    def rerank_depth(self) -> int:
        """How many candidates (in pool order) its cross-encoder feature was trained on."""
        return int(self.meta.get("rerank_depth") or 0)

    @property
    def rerank_tokens(self) -> int | None:
        """Where each (query, unit) pair was cut for the cross-encoder (None: the model's maximum)."""
        return self.meta.get("rerank_tokens")

    def trained_for(self, embedder: str | None, reranker: str | None) -> bool:
        """Trained with these weights (the same weights installed under another name match)."""
        return (weights_of(self.meta.get("embedder")), weights_of(self.meta.get("reranker"))) == \
            (weights_of(embedder), weights_of(reranker))

    def mismatch(self, embedder: str | None, reranker: str | None) -> str | None:
        """What a reader must know when the active models are not the ones it was trained with."""
        if self.trained_for(embedder, reranker):
            return None
        if reranker and not self.uses_reranker and self.trained_for(embedder, None):
            # its scores are exactly as trained: the only news is a cross-encoder that does nothing
            return (f"ranker {self.meta['file']} does not use a cross-encoder, so the cross-encoder is not run: no "
                    f"shipped ranker uses the active {reranker} with embedder {embedder or 'none'}, and "
                    f"{self.meta['file']} ranks as it was trained. To rank with the cross-encoder, train a ranker "
                    f"for these models: {RETRAIN}")
        unused = " (the cross-encoder is not run: this ranker does not use it)" if reranker and not self.uses_reranker else ""
        return (f"ranker {self.meta['file']} was trained with embedder {self.meta.get('embedder') or 'none'} and "
                f"cross-encoder {self.meta.get('reranker') or 'none'}; the active ones are {embedder or 'none'} and "
                f"{reranker or 'none'}{unused}, so its scores may be off. Retrain for them: {RETRAIN}")


def shipped_models() -> list[RankerModel]:
    """The shipped rankers in SHIPPED's order (a configuration whose ranker is not trained yet
    has no file, and its models fall back to the closest one)."""
    folder = resources.files(__package__).joinpath("models")
    return [RankerModel.shipped(name) for name in SHIPPED if folder.joinpath(name).is_file()]


def choose_ranker(embedder: str | None, reranker: str | None, path: Path | None = None
                  ) -> tuple[RankerModel, str | None]:
    """The ranker for the active models and the note to give (None when it was trained with
    them): `path` if given; else the shipped ranker trained with these weights; else the closest
    one, for the same kinds of model (an embedder or not, then a cross-encoder or not)."""
    if path is not None:
        model = RankerModel.read(path)
        return model, model.mismatch(embedder, reranker)
    models = shipped_models()
    for model in models:
        if model.trained_for(embedder, reranker):
            return model, None
    same_embedder = [m for m in models if (m.meta.get("embedder") is None) == (embedder is None)]
    same_kinds = [m for m in same_embedder if m.uses_reranker == (reranker is not None)]
    model = (same_kinds or same_embedder or models[-1:])[0]
    return model, model.mismatch(embedder, reranker)


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

    def without_reranker(self) -> "LearnedRanker":
        """This ranker with no cross-encoder score (its feature missing): while it cannot be run."""
        return LearnedRanker(self.model)

    def rank(self, candidates: Sequence[Candidate], ctx: RankingContext) -> list[ScoredCandidate]:
        if not candidates:
            return []
        cross = cross_encode(self.reranker, ctx.query, candidates) if self.reranker else {}
        return self.order(candidates, feature_matrix(candidates, build_context(candidates, ctx, cross)), cross=cross)

    def order(self, candidates: Sequence[Candidate], x: np.ndarray, model: RankerModel | None = None,
              cross: Mapping[int, float] | None = None) -> list[ScoredCandidate]:
        """Sort by model score less its length cost (ties: pool order); keep each candidate's
        features, with the cross-encoder's raw logit where it ran (`cross_encoder`, for the
        explanation)."""
        model = model or self.model
        if model is not None:
            scores = model.predict(x)
            scores = scores - length_cost(scores, candidates)
        else:
            scores = -np.array([c.pool_rank for c in candidates], dtype=float)
        order = np.lexsort((np.fromiter((c.pool_rank for c in candidates), np.int64, len(candidates)), -scores)).tolist()
        rows, cross = x.tolist(), cross or {}
        for row, c in zip(rows, candidates):
            row.append(cross.get(c.unit.id))
        return in_order([(candidates[i], float(scores[i])) for i in order], [dict(zip(ROW_NAMES, rows[i])) for i in order])

    def strength(self, ranked: Sequence[ScoredCandidate]) -> float | None:
        """The model file's evidence strength for this ranking; None without a model or a fitted one."""
        fitted = self.model.strength if self.model is not None else None
        return round(fitted.predict(ranked), 4) if fitted is not None else None

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


def length_cost(scores: np.ndarray, candidates: Sequence[Candidate]) -> np.ndarray:
    """What each candidate's length costs its score (LENGTH_COST): 0 up to LONG_UNIT_TOKENS; a
    decision is charged the size of its excerpt at most."""
    tokens = np.fromiter((min(c.unit.tokens, DECISION_SHOWN_TOKENS) if c.unit.kind == "decision" else c.unit.tokens
                          for c in candidates), np.float64, len(candidates))
    return LENGTH_COST * float(scores.std()) * np.log(np.maximum(1.0, tokens / LONG_UNIT_TOKENS))


def weights_of(identity: str | None) -> str | None:
    """The part of a model identity ('name@hash') that names its weights."""
    return identity.rpartition("@")[2] if identity else None
