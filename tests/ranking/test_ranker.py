"""The learned ranker: features (missing is missing), training through the product's pipeline,
the model file's contract, cross-validated evaluation, graceful degradation, explanations."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace
from datetime import datetime

import numpy as np
import pytest
from mcp import Client

from agentmemrec.indexing.dense.models import models_dir
from agentmemrec.indexing.errors import StoreError
from agentmemrec.indexing.tokens import count_tokens
from agentmemrec.indexing.units import Unit
from agentmemrec.ranking import features as F
from agentmemrec.ranking.candidates import Candidate, ChannelHit
from agentmemrec.ranking.dates import query_dates
from agentmemrec.ranking.eval.train import ENSEMBLE
from agentmemrec.ranking.cross_encoder import OnnxReranker
from agentmemrec.ranking.learned import DECISION_SHOWN_TOKENS, LENGTH_COST, LearnedRanker, RankerModel, shipped_models
from agentmemrec.ranking.ranker import cross_encode
from agentmemrec.ranking.records import cross_text
from agentmemrec.ranking.memory import Memory
from agentmemrec.ranking.strength import SIGNAL_NAMES
from agentmemrec.server.app import create_server
from agentmemrec.server.cli import main

from helpers import PETS, call, settings_for, write_coding, write_locomo

T = datetime(2026, 5, 1)


def cand(uid: int, text: str, pool_rank: int, channels: dict, **unit) -> Candidate:
    return Candidate(Unit(uid, "p", unit.pop("kind", "turn"), text, unit.pop("tokens", 10), T, uid, **unit),
                     pool_rank, channels, 0.0)


def context(pool, scores, neighbours=None, query="What did Ana say about src/app/main.py in v2.3?", cross=None):
    return F.QueryContext(query, datetime(2026, 5, 3), 256, scores, neighbours or {}, F.query_keys(query),
                          cross or {}, pool)


def test_a_missing_source_is_nan_not_zero():
    pool = [cand(1, "hello", 1, {"bm25": ChannelHit(1, 3.0)}, session="s", speaker="Ana", role="user")]
    ctx = context(pool, {"bm25": {1: 3.0}})
    row = dict(zip(F.FEATURE_NAMES, F.feature_matrix(pool, ctx)[0]))
    for name in ("dense_cosine", "dense_cosine_z", "dense_rank", "cross_encoder_z", "neighbour_dense",
                 "session_best_dense_rank"):
        assert math.isnan(row[name]), name
    assert row["bm25_rank"] == math.log1p(1) and row["bm25_score_norm"] == 1.0
    assert row["speaker_in_query"] == 1.0 and row["age_days"] == pytest.approx(math.log1p(2))


def test_context_and_session_features():
    pool = [cand(1, "we changed src/app/main.py for v2.3", 1, {"bm25": ChannelHit(1, 4.0), "dense": ChannelHit(3, 0.5)},
                 session="s"),
            cand(2, "unrelated", 2, {"dense": ChannelHit(1, 0.9)}, session="s", kind="decision", status="rejected")]
    neighbours = {1: (None, 2, 0.0), 2: (1, 3, 0.5)}
    ctx = context(pool, {"bm25": {1: 4.0, 2: 0.0, 3: 2.0}, "dense": {1: 0.5, 2: 0.9, 3: 0.1}}, neighbours)
    rows = [dict(zip(F.FEATURE_NAMES, r)) for r in F.feature_matrix(pool, ctx)]
    assert rows[0]["key_overlap"] == pytest.approx(2 / 3)  # src/app/main.py and 2.3 of {ana, path, 2.3}
    assert rows[1]["session_best_bm25_rank"] == math.log1p(1)  # its session holds the top BM25 hit
    assert rows[1]["bm25_rank"] == math.log1p(257)  # beyond the run depth
    assert rows[1]["neighbour_bm25"] == pytest.approx(1.0)  # both neighbours: 4.0/4 and 2.0/4
    assert rows[0]["neighbour_dense"] == pytest.approx(0.9)
    assert rows[1]["decision_status"] == F.STATUS_CODES["rejected"] and rows[1]["kind"] == 1.0
    assert rows[0]["session_position"] == 0.0 and rows[1]["session_position"] == 0.5
    # a turn read with its neighbour: the mean of the two cosines, missing at a session's edge
    assert math.isnan(rows[0]["pair_prev_dense"]) and rows[0]["pair_next_dense"] == pytest.approx(0.7)
    assert rows[1]["pair_prev_dense"] == pytest.approx(0.7) and rows[1]["pair_next_dense"] == pytest.approx(0.5)
    assert rows[0]["pair_next_dense_z"] == pytest.approx(1.0)  # normalised over the pool: 0.7 and 0.5
    assert math.isnan(rows[1]["pair_prev_dense_z"])  # a single value has no spread to scale by


def test_question_and_text_cue_features():
    pool = [cand(1, "I finished two books last week, The Hobbit was great.", 1,
                 {"bm25": ChannelHit(1, 4.0), "dense": ChannelHit(2, 0.6)}, session="s"),
            cand(2, "Did you read anything good?", 2, {"bm25": ChannelHit(2, 1.0), "dense": ChannelHit(1, 0.8)},
                 session="s"),
            cand(3, "My dog loves the park.", 3, {"bm25": ChannelHit(3, 2.0), "dense": ChannelHit(3, 0.2)},
                 session="t")]
    ctx = context(pool, {"bm25": {1: 4.0, 2: 1.0, 3: 2.0}, "dense": {1: 0.6, 2: 0.8, 3: 0.2}},
                  query="What books has Tim read?")
    rows = [dict(zip(F.FEATURE_NAMES, r)) for r in F.feature_matrix(pool, ctx)]
    assert [r["is_question"] for r in rows] == [0.0, 1.0, 0.0]
    assert [r["time_cue"] for r in rows] == [1.0, 0.0, 0.0]
    assert rows[0]["term_overlap"] == pytest.approx(1 / 4)  # book of {book, has, read, tim}
    assert rows[1]["term_overlap"] == pytest.approx(1 / 4)  # read
    assert all(r["query_wants_many"] == 1.0 and r["query_asks_when"] == 0.0 for r in rows)
    assert rows[0]["dense_gap_session"] == pytest.approx(-0.2) and rows[1]["dense_gap_session"] == 0.0
    assert rows[0]["dense_rank_in_session"] == math.log1p(1) and rows[2]["dense_rank_in_session"] == 0.0
    assert rows[1]["bm25_gap_session"] == pytest.approx(-3 / 4) and rows[2]["bm25_gap_session"] == 0.0


def test_a_query_that_names_a_time_measures_each_unit_from_that_time():
    at = [datetime(2023, 5, 7, 15), datetime(2023, 5, 9), datetime(2023, 4, 1)]
    pool = [cand(i + 1, "we went hiking", i + 1, {"bm25": ChannelHit(i + 1, 1.0)}) for i in range(3)]
    pool = [replace(c, unit=replace(c.unit, at=t)) for c, t in zip(pool, at)]

    def gaps(query: str, now: datetime = datetime(2023, 5, 20)) -> list[float]:
        ctx = replace(context(pool, {"bm25": {1: 1.0, 2: 1.0, 3: 1.0}}, query=query), now=now)
        return list(F.feature_matrix(pool, ctx)[:, F.FEATURE_NAMES.index("date_gap")])

    assert gaps("What did Ana do on 7 May 2023?") == pytest.approx([0.0, math.log1p(1), math.log1p(36)])
    assert gaps("what happened in April 2023") == pytest.approx([math.log1p(6 + 15 / 24), math.log1p(8), 0.0])
    # relative times resolve against the query's time: "yesterday" of 8 May 2023 is the 7th
    assert gaps("what did we do yesterday?", now=datetime(2023, 5, 8, 9))[0] == 0.0
    assert all(math.isnan(g) for g in gaps("Where did Ana go hiking?"))  # names no time: missing


@pytest.mark.parametrize("query, day", [
    ("the call on 2023-05-07", "2023-05-07"), ("on the 7th of May", "2023-05-07"), ("May 7th, 2023", "2023-05-07"),
    ("a week ago", "2023-05-13"), ("last Friday", "2023-05-19"), ("on Monday", "2023-05-15"),
    ("two days ago", "2023-05-18"), ("in March", "2023-03-15"), ("in December", "2022-12-15")])
def test_the_times_a_query_names_resolve_to_the_days_they_mean(query, day):
    now = datetime(2023, 5, 20, 12)  # a Saturday
    ranges = query_dates(query, now)
    assert len(ranges) == 1 and ranges[0][0] <= datetime.fromisoformat(day) < ranges[0][1], ranges


def test_without_an_embedder_the_session_dense_features_are_missing():
    pool = [cand(1, "hello?", 1, {"bm25": ChannelHit(1, 3.0)}, session="s")]
    row = dict(zip(F.FEATURE_NAMES, F.feature_matrix(pool, context(pool, {"bm25": {1: 3.0}}))[0]))
    assert math.isnan(row["dense_gap_session"]) and math.isnan(row["dense_rank_in_session"])
    assert math.isnan(row["pair_prev_dense"]) and math.isnan(row["pair_next_dense_z"])
    assert set(F.DENSE_FEATURES) >= {"dense_gap_session", "dense_rank_in_session", "pair_prev_dense",
                                     "pair_next_dense", "pair_prev_dense_z", "pair_next_dense_z"}


def train(home, dataset: str, data, out) -> None:
    mp = pytest.MonkeyPatch()
    mp.setenv("AGENTMEMREC_HOME", str(home))
    try:
        assert main(["train", dataset, str(data), "--out", str(out), "--allow-small"]) == 0
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def trained(minilm_home, tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    for i in range(4):
        write_locomo(data / f"conv-{i}.json", seed=i)
    out = tmp_path_factory.mktemp("model") / "ranker.json"
    train(minilm_home, "locomo", data, out)
    return data, out


def test_the_model_file_records_what_it_was_trained_with(trained):
    _, out = trained
    doc = json.loads(out.read_text())
    assert doc["features"] == list(F.FEATURE_NAMES)
    assert doc["embedder"].startswith("minilm@") and doc["reranker"] is None
    assert doc["questions"] == 4 * 14
    assert doc["metrics"]["best_iteration"] >= 1 and "ndcg@10" in doc["metrics"]["valid"]
    assert len(doc["models"]) == doc["ensemble"]["size"] == ENSEMBLE  # boosters averaged
    model = RankerModel.read(out)
    assert model.trained_for(doc["embedder"], None) and model.mismatch(doc["embedder"], None) is None
    assert "Retrain for them" in model.mismatch(None, None) and not model.uses_reranker


def test_training_again_on_the_same_data_gives_the_same_boosters(trained, minilm_home, tmp_path):
    """A shipped ranker can be rebuilt from its documented command, and a figure measured twice
    agrees: the trees depend on the data and the seed, not on how the threads summed."""
    data, out = trained
    again = tmp_path / "again.json"
    train(minilm_home, "locomo", data, again)
    first, second = json.loads(out.read_text()), json.loads(again.read_text())
    assert second["models"] == first["models"]
    assert second["params"]["deterministic"] is True


def test_the_model_file_records_exactly_which_files_it_was_trained_on(trained):
    data, out = trained
    [locomo] = json.loads(out.read_text())["data"]
    assert locomo["dataset"] == "locomo"
    assert {f["name"]: f["sha256"] for f in locomo["files"]} == {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in data.glob("*.json")}
    assert len(json.loads(out.read_text())["data_sha256"]) == 64


def test_each_shipped_model_records_the_development_files_it_was_trained_on():
    models = shipped_models()
    assert {"embedder-ranker.json", "lexical-ranker.json"} <= {m.meta["file"] for m in models}
    for model in models:
        names = set(model.trained_on().values())
        assert {"conv-26.json", "conv-30.json", "conv-41.json", "conv-42.json", "conv-43.json"} <= names


def test_eval_of_full_on_the_models_own_training_data_is_refused_with_the_cv_hint(
        trained, minilm_home, monkeypatch, tmp_path, capsys):
    data, out = trained
    monkeypatch.setenv("AGENTMEMREC_HOME", str(minilm_home))
    renamed = tmp_path / "renamed.json"  # the same content under another name is the same data
    renamed.write_bytes((data / "conv-2.json").read_bytes())
    for target in (data, renamed):
        assert main(["eval", "locomo", str(target), "--variant", "full", "--ranker-model", str(out),
                     "--budget", "400"]) == 2
        err = capsys.readouterr().err
        assert "was trained on" in err and "--cv K" in err
    unseen = tmp_path / "unseen.json"
    write_locomo(unseen, seed=11)
    assert main(["eval", "locomo", str(unseen), "--variant", "full", "--ranker-model", str(out),
                 "--budget", "400"]) == 0


def test_a_model_for_other_features_is_refused(trained, tmp_path):
    _, out = trained
    doc = json.loads(out.read_text())
    doc["features"] = doc["features"][:-1]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(StoreError, match="other features"):
        RankerModel.read(bad)


@pytest.mark.timeout(900)  # 6 variants x 2 folds x 5 boosters: minutes when the 2 cores are shared
def test_cross_validated_full_variant_is_reported_with_its_ablation(trained, minilm_home, monkeypatch, tmp_path, capsys):
    data, _ = trained
    monkeypatch.setenv("AGENTMEMREC_HOME", str(minilm_home))
    out = tmp_path / "r.json"
    assert main(["eval", "locomo", str(data), "--variant", "rrf", "--variant", "full", "--cv", "2",
                 "--ablation", "--budget", "400", "--json", str(out)]) == 0
    records = json.loads(out.read_text())["records"]
    assert [r["variant"] for r in records] == ["rrf", "full", "full-no-relevance", "full-no-context",
                                               "full-no-question", "full-no-coding", "full-no-session"]
    assert all(r["questions"] == 56 for r in records)
    err = capsys.readouterr().err  # the long training shows where it is, fold by fold, on stderr
    assert "full: fold 2/2" in err and "full-no-session: fold 1/2" in err and "5/5" in err


def test_without_an_embedder_the_model_still_ranks_and_explains(trained, home):
    data, out = trained
    memory = Memory.open(home, ranker_model=out)
    assert isinstance(memory.ranker, LearnedRanker)
    memory.remember("p", [{"kind": "turn", "text": t, "session": "s1", "ref": f"r{i}"}
                          for i, t in enumerate(["Rex is a dog", "Rex turned out to be a cat", "lunch"])])
    slate = memory.recall("p", "What animal is Rex?")
    assert {i.unit.ref for i in slate.items} >= {"r0", "r1"}
    why = memory.explain(slate.slate_id, {"p"})
    first = why["candidates"][0]
    assert first["features"]["dense_cosine"] is None and first["features"]["bm25_rank"] is not None
    assert why["ranker"] == "lambdarank"
    assert any(c.get("top_features") for c in why["candidates"] if c["outcome"] == "in_slate")
    assert any("trained with embedder minilm@" in n for n in why["notes"])
    memory.close()


def test_a_damaged_ranker_file_falls_back_to_fusion_order(home, tmp_path):
    bad = tmp_path / "ranker.json"
    bad.write_text("{not json")
    memory = Memory.open(home, ranker_model=bad)
    assert memory.ranker.name == "pool-order"
    assert any("cannot read ranker model" in n for n in memory.notes("p"))
    memory.close()


def write_askers(path, seed: int) -> None:
    """A conversation where pool order must fail and the features make the answer plain: for each
    pet, twenty turns (more than a 200-token slate holds) ask about where it sleeps, in the question's own words (BM25 and the embedder
    rank them first), and one turn, in fewer of those words, tells it."""
    import random
    rng = random.Random(seed)
    conv: dict = {"speaker_a": "Ana", "speaker_b": "Bo"}
    qa = []
    for s, pet in enumerate(PETS[:6], start=1):
        place = rng.choice(["blue basket", "attic", "garage", "red sofa", "laundry room", "porch"])
        rows = [{"speaker": "Bo", "dia_id": f"D{s}:{t}",
                 "text": rng.choice([f"Where does {pet} sleep?", f"Where does {pet} sleep at night?",
                                     f"Does {pet} sleep well? Where does {pet} sleep?"]) + f" ({t})"}
                for t in range(1, 21)]  # numbered: a slate shows a repeated text once
        rows.insert(rng.randint(0, 20), {"speaker": "Ana", "dia_id": f"D{s}:21", "text": f"{pet} naps in the {place}."})
        conv[f"session_{s}_date_time"] = f"10:00 am on {s} May, 2023"
        conv[f"session_{s}"] = rows
        qa.append({"question": f"Where does {pet} sleep?", "answer": place, "evidence": [f"D{s}:21"], "category": 4})
    path.write_text(json.dumps({**conv, "qa": qa}))


class Scores:
    """A model that gives each row the score it is told (the ranker's order is what is tested)."""

    def __init__(self, scores):
        self.scores = np.array(scores, dtype=float)

    def predict(self, x):
        return self.scores[: len(x)]


def test_a_long_decision_pays_for_the_excerpt_a_slate_shows_not_for_its_whole_length():
    pool = [cand(1, "adr", 1, {}, kind="decision", tokens=6000), cand(2, "turn", 2, {}, tokens=6000),
            cand(3, "adr", 3, {}, kind="decision", tokens=DECISION_SHOWN_TOKENS), cand(4, "x", 4, {}, tokens=10)]
    by_id = {sc.unit.id: sc.score for sc in LearnedRanker(None).order(pool, np.zeros((4, len(F.FEATURE_NAMES))),
                                                                      Scores([1.0, 1.0, 1.0, 0.0]))}
    assert by_id[1] == by_id[3] > by_id[2]


LEDGER = ("Context:\n" + "\n\n".join(f"Finding {i}: the nightly ledger export and the settlement files disagree on "
                                      "rounding and timing; each mismatch costs an analyst an hour." for i in range(8))
          + "\n\nAlternatives:\nApache Jena was considered for the configuration store and dropped, because its "
          "RDF store needs a JVM-wide lock.\n\nDecision:\nReconciliation flags a row above one cent.")


def test_the_cross_encoder_reads_the_blocks_of_a_long_decision_that_bear_on_the_query(default_home):
    reranker = OnnxReranker(models_dir(default_home) / "ms-marco-MiniLM-L-12-v2", device="cpu", max_tokens=128)
    query = "why was Apache Jena dropped for the configuration store?"
    adr = Unit(1, "p", "decision", LEDGER, count_tokens(LEDGER), T, 1, title="Ledger checks", status="accepted")
    text = cross_text(adr, F.content_terms(query), 128)
    assert text.startswith("Ledger checks\nAlternatives:\nApache Jena") and text.count("Finding") == 8
    [read] = cross_encode(reranker, query, [Candidate(adr, 1, {}, 0.0)]).values()
    [first_lines] = reranker.score(query, [adr.index_text()])
    assert read > first_lines + 3
    short = replace(adr, text="Reconciliation flags a row above one cent.\n\nContext:\nRounding.", tokens=14)
    assert cross_text(short, F.content_terms(query), 128) == short.index_text()  # within the window: as written


def test_a_unit_many_times_a_slate_items_length_pays_for_its_length_in_the_ranking():
    lengths = (1024, 100, 300, 250, 2048, 40)
    pool = [cand(i, f"unit {i}", i, {}, tokens=n) for i, n in enumerate(lengths, 1)]
    scores = [1.0, 0.9, 0.55, 0.44, 3.0, 0.0]
    ranked = LearnedRanker(None).order(pool, np.zeros((len(pool), len(F.FEATURE_NAMES))), Scores(scores))
    # the 1,024-token unit falls below shorter ones that scored up to half a point lower; the
    # 300-token one pays little and stays above the 250-token one (no cost up to 256 tokens); the
    # 2,048-token one's clear lead survives
    assert [sc.unit.id for sc in ranked] == [5, 2, 3, 4, 1, 6]
    cost = LENGTH_COST * np.std(scores)
    by_id = {sc.unit.id: sc.score for sc in ranked}
    assert by_id[1] == pytest.approx(1.0 - cost * math.log(4)) and by_id[2] == 0.9 and by_id[4] == 0.44
    assert LearnedRanker(None).order(pool, np.zeros((len(pool), 1)))[0].unit.id == 1  # no model: pool order


def test_the_learned_ranker_beats_pool_order_where_the_features_must_decide(minilm_home, monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTMEMREC_HOME", str(minilm_home))
    (tmp_path / "train").mkdir()
    for i in range(3):
        write_askers(tmp_path / "train" / f"conv-{i}.json", seed=i)
    write_askers(tmp_path / "held-out.json", seed=3)  # ranked by a model that never saw it
    model, out = tmp_path / "ranker.json", tmp_path / "r.json"
    assert main(["train", "locomo", str(tmp_path / "train"), "--out", str(model), "--allow-small"]) == 0
    assert main(["eval", "locomo", str(tmp_path / "held-out.json"), "--variant", "rrf", "--variant", "full",
                 "--ranker-model", str(model), "--budget", "200", "--json", str(out)]) == 0
    slate = {r["variant"]: r["slate_completeness"] for r in json.loads(out.read_text())["records"]}
    assert slate["rrf"] <= 0.5 and slate["full"] >= 5 / 6, slate


@pytest.fixture(scope="module")
def trained_coding(minilm_home, tmp_path_factory):
    data = tmp_path_factory.mktemp("coding") / "coding.json"
    write_coding(data)
    train(minilm_home, "coding", data, data.parent / "ranker.json")
    return data, data.parent / "ranker.json"


def test_training_on_coding_questions_fits_the_evidence_strength(trained_coding):
    _, out = trained_coding
    strength = RankerModel.read(out).strength
    assert strength is not None and set(strength.names) <= set(SIGNAL_NAMES)
    assert "top_dense" in strength.names  # the embedder was there when it was fitted


@pytest.mark.anyio
async def test_recall_slate_reports_the_evidence_strength(trained_coding, minilm_home, tmp_path):
    data, out = trained_coding
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to(minilm_home / "models")
    items = json.loads(data.read_text())["projects"]["alpha-api"]["items"]
    settings = replace(settings_for(home, "alpha-api"), ranker_model=out)
    async with Client(create_server(settings)) as client:
        await call(client, "remember", items=items)
        slate = await call(client, "recall_slate", query="Which cache do we use now?")
    assert 0.0 <= slate["evidence_strength"] <= 1.0


@pytest.mark.timeout(900)
def test_cross_validated_coding_eval_reports_the_strength_auroc(trained_coding, minilm_home, monkeypatch, tmp_path):
    data, _ = trained_coding
    monkeypatch.setenv("AGENTMEMREC_HOME", str(minilm_home))
    out = tmp_path / "r.json"
    assert main(["eval", "coding", str(data), "--variant", "full", "--cv", "2", "--budget", "2700",
                 "--json", str(out)]) == 0
    [rec] = json.loads(out.read_text())["records"]
    assert 0.0 <= rec["evidence_strength_auroc"] <= 1.0 and rec["leaked_questions"] == []
    assert rec["unanswerable"]["questions"] == 26


def test_threads_predict_what_one_thread_predicts():
    """A pool from THREADS_FROM_ROWS rows is scored by its boosters side by side: the same scores."""
    from agentmemrec.ranking import learned
    model = learned.RankerModel.shipped("embedder-ranker.json")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(learned.THREADS_FROM_ROWS + 44, len(F.FEATURE_NAMES)))
    x[rng.random(x.shape) < 0.1] = np.nan
    one = np.concatenate([model.predict(x[i:i + 100]) for i in range(0, len(x), 100)])  # one thread each
    assert np.array_equal(model.predict(x), one)
