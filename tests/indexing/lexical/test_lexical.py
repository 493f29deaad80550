"""The BM25 channel: equal to bm25s itself, derived from the rows, restart- and damage-safe."""

from __future__ import annotations

import bm25s
import numpy as np
import pytest

from agentmemrec.indexing.lexical.index import LexicalIndex
from agentmemrec.indexing.lexical.postings import BM25_PARAMS, tokenize
from agentmemrec.indexing.store.duckdb_store import DuckDBStore
from agentmemrec.indexing.units import validate_batch
from agentmemrec.ranking.memory import Memory

DOCS = ["The build uses Bazel and remote caching.", "We deploy with Helm to the staging cluster.",
        "Bazel remote cache lives in S3.", "Lunch is at noon.", "Helm charts live in deploy/charts."]


def _store(tmp_path) -> DuckDBStore:
    store = DuckDBStore(tmp_path / "m.duckdb")
    store.write("p", validate_batch([{"kind": "note", "path": f"n{i}.md", "text": t} for i, t in enumerate(DOCS)]))
    return store


def test_scores_equal_bm25s_used_directly(tmp_path):
    store = _store(tmp_path)
    snap = LexicalIndex(store, tmp_path / "idx").snapshot("p")
    _, texts, _ = store.index_rows("p")
    reference = bm25s.BM25(**BM25_PARAMS)
    reference.index(tokenize(texts), show_progress=False)
    for query in ["bazel remote cache", "helm deploy", "noon lunch"]:
        np.testing.assert_allclose(snap.scores(query), reference.get_scores(tokenize([query])[0]), rtol=1e-6)
    store.close()


def test_zero_score_units_never_fill_the_top_k(tmp_path):
    store = _store(tmp_path)
    hits = LexicalIndex(store, tmp_path / "idx").snapshot("p").search("bazel", k=5)
    assert len(hits) == 2 and all(h.score > 0 for h in hits)
    store.close()


def test_a_tie_at_the_cut_off_keeps_the_lower_ids(tmp_path):
    """Units of the same words score the same: the top k ranks a tie by id and cuts it there too,
    as the dense channel does (indexing/topk.py), whatever the machine's sort kernel."""
    store = DuckDBStore(tmp_path / "m.duckdb")
    rng = np.random.default_rng(5)
    texts = ["cache eviction policy", "cache eviction", "policy review notes", "eviction", "lunch at noon"]
    store.write("p", validate_batch([{"kind": "note", "path": f"n{i}.md", "text": texts[t]}
                                     for i, t in enumerate(rng.integers(0, 5, 600))]))
    snap = LexicalIndex(store, tmp_path / "idx").snapshot("p")
    scores, ids = snap.scores("cache eviction policy"), snap._row_ids
    every = sorted(((s, i) for s, i in zip(scores.tolist(), ids.tolist()) if s > 0), key=lambda s: (-s[0], s[1]))
    for k in (7, 150, 151, 299, 420, 600):
        assert [h.unit_id for h in snap.search("cache eviction policy", k)] == [i for _, i in every[:k]]
    assert snap.search("cache eviction policy", 0) == []
    store.close()


def test_index_is_reused_after_restart_and_follows_a_write_without_a_rebuild(tmp_path, monkeypatch):
    store = _store(tmp_path)
    LexicalIndex(store, tmp_path / "idx").snapshot("p")
    fresh = LexicalIndex(store, tmp_path / "idx")
    monkeypatch.setattr(fresh, "rebuild", lambda project: pytest.fail("rebuilt from the rows"))
    assert len(fresh.snapshot("p").ids) == len(DOCS)  # the saved index, loaded
    store.write("p", validate_batch([{"kind": "turn", "text": "Bazel 7 upgrade is done."}]))
    snap = fresh.snapshot("p")  # caught up through the change log
    assert len(snap.ids) == len(DOCS) + 1 and snap.search("bazel upgrade", 1)[0].unit_id == max(snap.ids)
    store.close()


def test_a_damaged_index_is_rebuilt_from_the_rows(tmp_path):
    store = _store(tmp_path)
    LexicalIndex(store, tmp_path / "idx").snapshot("p")
    next((tmp_path / "idx" / "p" / "parts").glob("part-*.npz")).write_bytes(b"garbage")
    hits = LexicalIndex(store, tmp_path / "idx").snapshot("p").search("helm", k=3)
    assert len(hits) == 2
    store.close()


def test_deleted_units_never_come_back_after_restart(home):
    memory = Memory.open(home)
    memory.remember("p", [{"kind": "turn", "ref": "gone", "text": "kubernetes secret rotation"},
                          {"kind": "turn", "ref": "kept", "text": "kubernetes node pools"}])
    assert len(memory.recall("p", "kubernetes").items) == 2
    memory.forget("p", ["gone"])
    memory.close()
    memory = Memory.open(home)
    slate = memory.recall("p", "kubernetes secret rotation")
    assert [i.unit.ref for i in slate.items] == ["kept"]
    memory.close()


@pytest.mark.parametrize(("query", "wanted"), [
    ("keepalive expiry", "keepalive_expiry"), ("keepalive_expiry", "keepalive expiry"),
    ("rate limit per minute", "RATE_LIMIT_PER_MINUTE"), ("response class", "JSONResponse"),
    ("2.3.1", "v2.3.1"), ("v2.3.1", "2.3.1"),
])
def test_identifiers_match_by_their_parts_and_versions_whole(tmp_path, query, wanted):
    store = DuckDBStore(tmp_path / "m.duckdb")
    texts = [f"we set {wanted} in the config", "the v2.4.0 release notes", "lunch is at noon"]
    store.write("p", validate_batch([{"kind": "note", "path": f"n{i}.md", "text": t} for i, t in enumerate(texts)]))
    scores = LexicalIndex(store, tmp_path / "idx").snapshot("p").scores(query)
    assert scores[0] > 0 and scores[1] == 0 and scores[2] == 0  # not `v2` in another version
    store.close()
