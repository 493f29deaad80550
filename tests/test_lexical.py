"""The BM25 channel: equal to bm25s itself, derived from the rows, restart- and damage-safe."""

from __future__ import annotations

import bm25s
import numpy as np

from agentmemrec.indexing.lexical import BM25_PARAMS, LexicalIndex, tokenize
from agentmemrec.indexing.store import Store
from agentmemrec.indexing.units import validate_batch
from agentmemrec.ranking.memory import Memory

DOCS = ["The build uses Bazel and remote caching.", "We deploy with Helm to the staging cluster.",
        "Bazel remote cache lives in S3.", "Lunch is at noon.", "Helm charts live in deploy/charts."]


def _store(tmp_path) -> Store:
    store = Store(tmp_path / "m.duckdb")
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


def test_index_is_reused_after_restart_and_rebuilt_after_a_change(tmp_path):
    store = _store(tmp_path)
    LexicalIndex(store, tmp_path / "idx").snapshot("p")
    current = (tmp_path / "idx" / "p" / "CURRENT").read_text()
    fresh = LexicalIndex(store, tmp_path / "idx")
    assert fresh._load("p", store.generation("p")) is not None  # the persisted snapshot is valid
    fresh.snapshot("p")
    assert (tmp_path / "idx" / "p" / "CURRENT").read_text() == current
    store.write("p", validate_batch([{"kind": "turn", "text": "Bazel 7 upgrade is done."}]))
    assert len(fresh.snapshot("p").ids) == len(DOCS) + 1
    assert (tmp_path / "idx" / "p" / "CURRENT").read_text() != current
    assert len([d for d in (tmp_path / "idx" / "p").iterdir() if d.is_dir()]) == 1  # old snapshot gone
    store.close()


def test_a_damaged_index_is_rebuilt_from_the_rows(tmp_path):
    store = _store(tmp_path)
    LexicalIndex(store, tmp_path / "idx").snapshot("p")
    snap_dir = tmp_path / "idx" / "p" / (tmp_path / "idx" / "p" / "CURRENT").read_text()
    (snap_dir / "ids.npy").write_bytes(b"garbage")
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
