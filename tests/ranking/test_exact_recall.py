"""The recall path's speed-ups are meant to be exact: on a fixed store, every query's features,
ranking and slates are the ones recorded before them (tests/ranking/exact_recall.json,
written by the per-candidate features and the slate builder as they were)."""

import json
from pathlib import Path

import numpy as np
import pytest
from exact_fixture import AS_OF, QUERIES, open_memory, recall_record

from agentmemrec.ranking.memory import Memory

RECORDED = json.loads((Path(__file__).parent / "exact_recall.json").read_text())


@pytest.fixture(scope="module", params=["cold", "warmed"])
def records(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> list[dict]:
    """Recalls on a fresh memory, and on one warmed as a server warms it at start (newest units,
    their text features and item lines, session order read beforehand)."""
    memory = open_memory(tmp_path_factory.mktemp("exact"))
    try:
        if request.param == "warmed":
            memory = Memory(memory.store, memory.channels, memory.ranker, memory.config, memory.dense)
            memory.warm("main")
        return [recall_record(memory, q) for q in QUERIES]
    finally:
        memory.close()


def test_the_recorded_queries_are_the_fixtures():
    assert RECORDED["as_of"] == AS_OF and [r["query"] for r in RECORDED["queries"]] == QUERIES


@pytest.mark.parametrize("i", range(len(QUERIES)))
def test_features_ranking_and_slates_are_as_recorded(records, i):
    now, then = records[i], RECORDED["queries"][i]
    as_array = lambda rows: np.array(rows, dtype=np.float64)  # None -> NaN  # noqa: E731
    np.testing.assert_allclose(as_array(now["features"]), as_array(then["features"]), rtol=0, atol=2e-6)
    assert now["ranked"] == then["ranked"]
    assert now["slates"] == then["slates"]


def test_a_slate_is_the_same_whatever_its_id(tmp_path):
    """Slate ids are digits, which always cost the same tokens: recalls of one query give the same
    items and token count under different ids (hex ids took 19 to 28 tokens of the first line, so
    the room left for items moved from one recall to the next)."""
    memory = open_memory(tmp_path)
    try:
        slates = [memory.recall("main", QUERIES[0], 700, AS_OF) for _ in range(12)]
    finally:
        memory.close()
    assert len({s.slate_id for s in slates}) == 12
    assert len({(s.tokens_used, tuple(it.unit.id for it in s.items)) for s in slates}) == 1
