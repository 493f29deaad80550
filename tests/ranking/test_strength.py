"""The evidence strength: named signals read off a ranking, a logistic model fitted on answerable
and unanswerable questions, stored in and read back from a ranker file."""

from __future__ import annotations

import math
from datetime import datetime

import numpy as np
import pytest

from agentmemrec.indexing.units import Unit
from agentmemrec.ranking.candidates import Candidate
from agentmemrec.ranking.eval.train import logistic
from agentmemrec.ranking.ranker import ScoredCandidate
from agentmemrec.ranking.strength import SIGNAL_NAMES, StrengthModel, signals

T = datetime(2026, 5, 1)


def scored(uid: int, dense: float | None, kind: str = "turn", status: str | None = None, **features) -> ScoredCandidate:
    unit = Unit(uid, "p", kind, "x", 5, T, uid, status=status)
    return ScoredCandidate(Candidate(unit, uid, {}, 0.0), 1.0 / uid, uid,
                           {"dense_cosine": dense, "term_overlap": 0.5, "key_overlap": None, **features})


def test_signals_read_absolute_similarity_and_unconfirmed_decisions():
    ranked = [scored(1, 0.62, "decision", "proposed"), scored(2, 0.71), scored(3, None, "decision", "rejected")]
    s = dict(zip(SIGNAL_NAMES, signals(ranked)))
    assert s["top_dense"] == 0.62 and s["best_dense_top5"] == 0.71
    assert s["top_unconfirmed"] == 1.0 and s["unconfirmed_top3"] == 2.0
    assert s["best_term_overlap_top3"] == 0.5 and math.isnan(s["best_key_overlap_top3"])  # no key in the query
    assert np.isnan(signals([])).all()


def test_a_fitted_strength_orders_questions_and_survives_the_model_file():
    rng = np.random.default_rng(0)
    answerable = rng.normal(0.7, 0.05, 60)
    unanswerable = rng.normal(0.45, 0.05, 20)
    x = np.full((80, len(SIGNAL_NAMES)), np.nan)  # only top_dense observed: the rest are left out
    x[:, 0] = np.concatenate([answerable, unanswerable])
    y = np.array([1.0] * 60 + [0.0] * 20)
    model = logistic(x, y, SIGNAL_NAMES)
    assert model.names == ("top_dense",) and model.coef[0] > 0
    again = StrengthModel.from_meta(model.to_meta())
    high, low = again.predict([scored(1, 0.75)]), again.predict([scored(1, 0.40)])
    assert 0.9 < high <= 1.0 and 0.0 <= low < 0.1
    assert again.predict([]) == 0.0  # nothing eligible matched the query
    assert again.predict([scored(1, None)]) == pytest.approx(again.probability(np.full(len(SIGNAL_NAMES), np.nan)))


def test_no_strength_without_both_kinds_of_question_or_for_unknown_signals():
    assert logistic(np.ones((5, len(SIGNAL_NAMES))), np.ones(5), SIGNAL_NAMES) is None
    assert StrengthModel.from_meta({"signals": ["cosmic_rays"], "mean": [0], "scale": [1], "coef": [1],
                                    "intercept": 0}) is None
    assert StrengthModel.from_meta(None) is None
