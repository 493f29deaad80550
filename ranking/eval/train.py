"""Training the LambdaRank model and measuring it honestly (cross-validated).

Pools come from the product's own pipeline (the evaluation harness with the features-only
ranker); evidence units are labelled relevant; one LightGBM group per question; early stopping
on a held-out part of the training questions. Missing sources are simulated during training
(dense features dropped from a share of the groups) so the model degrades gracefully when no
embedder is installed. Cross-validation trains on k-1 folds (by conversation for LoCoMo, by
project for the coding set, by question for LongMemEval), with any other datasets added to every
training fold, and ranks the held-out fold with that model.

The evidence-strength model (ranking/strength.py) is fitted on the questions of the datasets
that label unanswerable ones, each ranked by the booster ensemble it ships with.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Sequence

import lightgbm as lgb
import numpy as np
from tqdm import tqdm

from agentmemrec.ranking.cross_encoder import Reranker
from agentmemrec.ranking.eval.benchmarks import data_digest
from agentmemrec.ranking.eval.evaluate import Kept, VariantRun, record_selection
from agentmemrec.ranking.features import DENSE_FEATURES, FEATURE_NAMES, GROUP_OF
from agentmemrec.ranking.learned import LearnedRanker, RankerModel
from agentmemrec.ranking.memory import Selection
from agentmemrec.ranking.ranker import ScoredCandidate
from agentmemrec.ranking.strength import SIGNAL_NAMES, StrengthModel, signals

PARAMS: dict[str, Any] = {
    "objective": "lambdarank", "metric": "ndcg", "ndcg_eval_at": [10, 30], "learning_rate": 0.05,
    "num_leaves": 31, "min_data_in_leaf": 20, "feature_fraction": 0.9, "bagging_fraction": 0.9,
    "bagging_freq": 1, "lambdarank_truncation_level": 64, "verbose": -1, "num_threads": 2,
    # the same data and seed give the same trees: sums over threads in a fixed order (row-wise
    # histograms), so a retrained ranker or a rerun cross-validation repeats to the last digit
    "deterministic": True, "force_row_wise": True,
}
ROUNDS, PATIENCE = 600, 50
ENSEMBLE = 5  # boosters per model, seeds seed .. seed + ENSEMBLE - 1, scores averaged
DENSE_DROPOUT = 0.3
STRENGTH_L2 = 1.0


@dataclass(frozen=True)
class Group:
    kept: Kept
    x: np.ndarray
    y: np.ndarray

    @property
    def fold_key(self) -> tuple[str, str]:
        """What stays together when folds or a validation part are drawn: a conversation (LoCoMo)
        or a project (the coding set), whose questions share one history."""
        return self.kept.case_id, self.kept.question.project


def to_group(kept: Kept) -> Group:
    ranked = kept.selection.ranked
    x = np.array([[sc.features[n] for n in FEATURE_NAMES] for sc in ranked],
                 dtype=np.float64).reshape(len(ranked), len(FEATURE_NAMES))
    y = np.array([int(sc.unit.ref in kept.question.evidence) for sc in ranked], dtype=np.int32)
    return Group(kept, x, y)


def masked(x: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """The feature matrix with the named features missing."""
    out = x.copy()
    out[:, [FEATURE_NAMES.index(n) for n in names]] = np.nan
    return out


def _stack(groups: Sequence[Group], drop: Sequence[str], rng: random.Random, dropout: float) -> lgb.Dataset:
    xs, ys, sizes = [], [], []
    for g in groups:
        variants = [masked(g.x, drop)] if drop else [g.x]
        if dropout and rng.random() < dropout:
            variants.append(masked(g.x, [*drop, *DENSE_FEATURES]))
        for x in variants:
            xs.append(x)
            ys.append(g.y)
            sizes.append(len(g.y))
    return lgb.Dataset(np.vstack(xs), np.concatenate(ys), group=sizes, feature_name=list(FEATURE_NAMES),
                       free_raw_data=False)


def usable(groups: Sequence[Group]) -> list[Group]:
    """The groups LambdaRank learns from: at least one relevant and one other candidate."""
    return [g for g in groups if 0 < g.y.sum() < len(g.y)]


def fit(groups: Sequence[Group], drop: Sequence[str] = (), seed: int = 0, valid_share: float = 0.2,
        dropout: float = DENSE_DROPOUT) -> tuple[lgb.Booster, dict[str, Any]]:
    """LambdaRank on the usable groups."""
    usable_groups = usable(groups)
    rng = random.Random(seed)
    cases = sorted({g.fold_key for g in usable_groups})
    # hold out whole conversations when there are enough of them, else a share of the questions
    key = (lambda g: g.fold_key) if len(cases) >= 10 else (lambda g: g.kept.question.qid)
    keys = sorted({key(g) for g in usable_groups})
    rng.shuffle(keys)
    held = set(keys[: max(1, int(len(keys) * valid_share))])
    train = [g for g in usable_groups if key(g) not in held]
    valid = [g for g in usable_groups if key(g) in held]
    dtrain = _stack(train, drop, rng, dropout)
    dvalid = _stack(valid, drop, rng, 0.0)
    booster = lgb.train({**PARAMS, "seed": seed}, dtrain, ROUNDS, valid_sets=[dvalid],
                        callbacks=[lgb.early_stopping(PATIENCE, verbose=False)])
    best = {k: round(v, 4) for k, v in booster.best_score.get("valid_0", {}).items()}
    return booster, {"train_groups": len(train), "valid_groups": len(valid),
                     "best_iteration": booster.best_iteration, "valid": best}


def folds_of(groups: Sequence[Group], k: int, by_case: bool, seed: int) -> list[set[str]]:
    """Question ids per fold: whole conversations or projects together, or single questions."""
    def key(g: Group) -> Any:
        return g.fold_key if by_case else g.kept.question.qid
    keys = sorted({key(g) for g in groups})
    random.Random(seed).shuffle(keys)
    buckets = [set(keys[i::k]) for i in range(k)]
    return [{g.kept.question.qid for g in groups if key(g) in b} for b in buckets]


def cross_validate(groups: Sequence[Group], name: str, budgets: Sequence[int], k: int, by_case: bool,
                   drop: Sequence[str] = (), seed: int = 0,
                   per_question: list[dict[str, Any]] | None = None, extra: Sequence[Group] = (),
                   matched_only: bool = False, without_pull: bool = False) -> VariantRun:
    """Each fold ranked by a model that never saw it (trained on the other folds and on `extra`,
    other datasets), its evidence strength fitted the same way; slates built and scored as in `eval`,
    and with `without_pull` also in its `twin` (`VariantRun.unpulled`)."""
    run = VariantRun(name, {b: [] for b in budgets}, {b: [] for b in budgets}, matched_only=matched_only)
    run.twin = run.unpulled() if without_pull else None
    for i, fold in enumerate(folds_of(groups, k, by_case, seed)):
        train = [g for g in groups if g.kept.question.qid not in fold] + list(extra)
        boosters, _ = train_ensemble(train, drop, seed, desc=f"{name}: fold {i + 1}/{k}")
        model = RankerModel(boosters, {})
        strength = fit_strength(train, model, drop)
        for g in (g for g in groups if g.kept.question.qid in fold):
            t0 = time.perf_counter()
            ranked = rank_group(g, model, drop)
            ms = g.kept.select_ms + (time.perf_counter() - t0) * 1000
            selection = _with_ranking(g.kept.selection, ranked, strength.predict(ranked) if strength else None)
            record_selection(run, g.kept.case_id, g.kept.question, selection, ms, budgets, per_question)
    return run


def rank_group(g: Group, model: RankerModel, drop: Sequence[str] = ()) -> list[ScoredCandidate]:
    return LearnedRanker(None).order([sc.candidate for sc in g.kept.selection.ranked],
                                     masked(g.x, drop) if drop else g.x, model)


def _with_ranking(selection: Selection, ranked: list, strength: float | None) -> Selection:
    return replace(selection, ranked=ranked, strength=strength)


def fit_strength(groups: Sequence[Group], model: RankerModel, drop: Sequence[str] = ()) -> StrengthModel | None:
    """The evidence-strength model for `model`'s rankings, fitted on the groups of every case that
    labels unanswerable questions (None if there is none)."""
    labelled = {g.kept.case_id for g in groups if not g.kept.question.answerable}
    chosen = [g for g in groups if g.kept.case_id in labelled]
    if not chosen:
        return None
    x = np.array([signals(rank_group(g, model, drop)) for g in chosen])
    y = np.array([float(g.kept.question.answerable) for g in chosen])
    return logistic(x, y, SIGNAL_NAMES)


def logistic(x: np.ndarray, y: np.ndarray, names: Sequence[str], l2: float = STRENGTH_L2,
             steps: int = 50) -> StrengthModel | None:
    """L2-regularised logistic regression by Newton's method on standardised signals; a signal
    never seen (all NaN) is left out, a missing value counts as the mean."""
    if y.min() == y.max():
        return None
    keep = [j for j in range(x.shape[1]) if np.isfinite(x[:, j]).any()]
    xs = x[:, keep]
    mean, scale = np.nanmean(xs, axis=0), np.nanstd(xs, axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    z = np.hstack([np.ones((len(y), 1)), np.nan_to_num((xs - mean) / scale)])
    penalty = np.diag([0.0] + [l2] * len(keep))
    w = np.zeros(z.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-z @ w))
        step = np.linalg.solve(z.T @ (z * (p * (1 - p))[:, None]) + penalty, z.T @ (p - y) + penalty @ w)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return StrengthModel(tuple(names[j] for j in keep), tuple(mean.round(6)), tuple(scale.round(6)),
                         tuple(w[1:].round(6)), round(float(w[0]), 6))


def refit(groups: Sequence[Group], rounds: int, seed: int = 0, drop: Sequence[str] = ()) -> lgb.Booster:
    """Train on every group for the number of rounds early stopping chose on a held-out part."""
    return lgb.train({**PARAMS, "seed": seed}, _stack(usable(groups), drop, random.Random(seed), DENSE_DROPOUT),
                     max(rounds, 1))


def fit_and_refit(groups: Sequence[Group], drop: Sequence[str] = (), seed: int = 0
                  ) -> tuple[lgb.Booster, dict[str, Any]]:
    """Early stopping on held-out questions picks the number of rounds, then the model is trained
    on all the groups for that many rounds (a model fit on 80% of them ranks worse)."""
    held_out, metrics = fit(groups, drop, seed)
    return refit(groups, held_out.best_iteration, seed, drop), metrics


def train_ensemble(groups: Sequence[Group], drop: Sequence[str] = (), seed: int = 0,
                   size: int = ENSEMBLE, desc: str = "train") -> tuple[tuple[lgb.Booster, ...], list[dict[str, Any]]]:
    """What `train` ships and cross-validation measures: `size` boosters, each fit and refit with
    its own seed (its own held-out split, bagging and dense dropout); a bar on stderr counts them."""
    bar = tqdm(range(size), desc=desc, unit="booster", file=sys.stderr, mininterval=1.0)
    fitted = [fit_and_refit(groups, drop, seed + i) for i in bar]
    return tuple(b for b, _ in fitted), [m for _, m in fitted]


def train_model(groups: Sequence[Group], data: list[dict[str, Any]], embedder: str | None,
                reranker: Reranker | None, seed: int = 0) -> RankerModel:
    """An ensemble of boosters (see `train_ensemble`), each trained on all the questions for the
    number of rounds early stopping chose for it on held-out conversations."""
    boosters, metrics = train_ensemble(groups, seed=seed)
    gain = np.sum([b.feature_importance("gain") for b in boosters], axis=0)
    importance = dict(zip(FEATURE_NAMES, gain.round(1).tolist()))
    strength = fit_strength(groups, RankerModel(boosters, {}))
    meta = {"embedder": embedder, "reranker": reranker.identity if reranker else None,
            "rerank_depth": reranker.limit if reranker else 0,
            "rerank_tokens": reranker.max_tokens if reranker else None,
            "data": data, "data_sha256": data_digest(data), "metrics": metrics[0],
            "strength": strength.to_meta() if strength else None,
            "ensemble": {"size": len(boosters), "best_iterations": [m["best_iteration"] for m in metrics]},
            "questions": len(groups), "params": PARAMS, "dense_dropout": DENSE_DROPOUT,
            "feature_gain": importance, "groups": sorted(set(GROUP_OF.values())),
            "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    return RankerModel(boosters, meta)
