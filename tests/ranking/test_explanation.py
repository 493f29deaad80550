"""An explanation is saved packed (ranking/explanation.py); read back, it says for every pool
candidate exactly what the recall decided, and explanations saved before packing still read."""

import json
from datetime import datetime

import pytest
from exact_fixture import AS_OF, POOL, QUERIES, open_memory

from agentmemrec.ranking.explanation import unpack
from agentmemrec.ranking.render import display_status
from agentmemrec.ranking.slate import HEADER_RESERVE, item_tokens


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory):
    memory = open_memory(tmp_path_factory.mktemp("explain"))
    yield memory
    memory.close()


@pytest.mark.parametrize("query, budget", [(QUERIES[0], 2700), (QUERIES[1], 600), (QUERIES[2], 300)])
def test_every_candidate_reads_back_as_the_recall_ranked_and_placed_it(memory, query, budget):
    slate = memory.recall("main", query, budget, as_of=AS_OF, pool_size=POOL)
    selection = memory.select("main", query, datetime.fromisoformat(AS_OF), POOL)  # the same ranking
    why = memory.explain(slate.slate_id, {"main"})
    ranks = [it.rank for it in slate.items if slate.outcomes[it.unit.id] == "in_slate"]
    first, cutoff = min(ranks), max(ranks)
    assert len(why["candidates"]) == len(selection.ranked) == POOL
    for c, sc in zip(why["candidates"], selection.ranked):
        outcome = slate.outcomes.get(sc.unit.id, "skipped_over_budget")
        assert (c["id"], c["rank"], c["pool_rank"], c["score"], c["tokens"]) == \
            (sc.unit.id, sc.rank, sc.candidate.pool_rank, sc.score, sc.unit.tokens)
        assert c["channels"] == {n: {"rank": h.rank, "score": h.score} for n, h in sc.candidate.channels.items()}
        assert c["outcome"] == outcome and c["status"] == display_status(sc.unit, selection.inputs)
        too_large = sc.unit.kind != "decision" and \
            item_tokens(sc.unit, selection.inputs) + HEADER_RESERVE > budget - slate.fixed_tokens
        assert c["lost_to"] == (None if outcome != "skipped_over_budget" else
                                "budget" if sc.rank < first or sc.rank < cutoff or too_large else "ranking")
        assert c["features"].keys() == sc.features.keys()
        for name, value in sc.features.items():
            assert (c["features"][name] is None) == (value is None or value != value)  # NaN: null
            assert value is None or value != value or c["features"][name] == pytest.approx(value, abs=1e-4)
    assert {"in_slate", "skipped_over_budget"} <= {c["outcome"] for c in why["candidates"]}
    beyond = unpack(memory.slates.load(slate.slate_id)[1])["beyond_pool"]
    assert {n: {int(k): v for k, v in ids.items()} for n, ids in beyond.items()} == selection.pool.cut_off


def test_a_fact_below_the_pool_is_diagnosed_with_its_channel_ranks(memory):
    selection = memory.select("main", QUERIES[3], datetime.fromisoformat(AS_OF), POOL)
    channel, beyond = next(iter(selection.pool.cut_off.items()))
    uid, rank = next(iter(beyond.items()))
    slate = memory.recall("main", QUERIES[3], as_of=AS_OF, pool_size=POOL)
    [found] = memory.explain(slate.slate_id, {"main"}, [f"#{uid}"])["diagnosis"]
    assert found["stage"] == "never_in_pool" and found["units"][0]["channel_ranks"][channel] == rank


def test_an_explanation_saved_before_packing_still_explains(memory):
    [uid] = memory.store.ids_for("main", "#1")
    old = {"slate_id": "s_00000000beef", "query": "q", "budget": 2700, "as_of": None, "ranker": "lambdarank",
           "channels": ["bm25"], "models": {}, "pool_size": 64,
           "tokens": {"used": 40, "preamble": 20, "items": 15, "headers": 5}, "successors": [],
           "excluded_as_of": 0, "feature_names": ["bm25_rank", "dense_cosine"],
           "candidates": [{"id": uid, "rank": 1, "pool_rank": 1, "status": None, "score": 0.5, "tokens": 15,
                           "outcome": "in_slate", "lost_to": None, "channels": {"bm25": {"rank": 1, "score": 2.0}},
                           "features": [1.0, None]}],
           "beyond_pool": {"bm25": {"7": 130}}, "notes": []}
    memory.store.save_slates([(old["slate_id"], "main", datetime.now(), json.dumps(old))], 500)
    why = memory.explain(old["slate_id"], {"main"}, ["#1"])
    [c] = why["candidates"]
    assert c["id"] == uid and c["features"] == {"bm25_rank": 1.0, "dense_cosine": None}
    assert why["diagnosis"][0]["stage"] == "in_slate"
