"""The dense graph of a large project (indexing/dense/ann.py), with the threshold lowered so a
small store counts as large: it finds what the exact product finds, scores exactly, follows
writes and forgets, and a restart loads it from disk instead of building it again."""

from __future__ import annotations

import hashlib
import random

import numpy as np

from agentmemrec.indexing.dense.backfill import embed_pending
from agentmemrec.indexing.dense.index import DenseIndex
from agentmemrec.indexing.store.duckdb_store import DuckDBStore
from agentmemrec.indexing.units import validate_batch

WORDS = [f"w{i}" for i in range(400)]


class WordVectors:
    """A text's vector: the sum of its words' fixed Gaussian vectors, normalised (no ties)."""

    identity, device, dim, query_instruction = "word-vectors@1", "cpu", 96, ""

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.split():
                out[i] += np.random.default_rng(int(hashlib.md5(word.encode()).hexdigest(), 16)).standard_normal(self.dim)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _fill(store: DuckDBStore, embedder: WordVectors, n: int, seed: int = 3) -> None:
    rng = random.Random(seed)
    items = [{"kind": "note", "path": f"docs/{seed}/n{i}.md", "text": " ".join(rng.choices(WORDS, k=8))} for i in range(n)]
    for start in range(0, n, 500):
        store.write("p", validate_batch(items[start:start + 500]))
    embed_pending(store.vectors(embedder.identity), embedder)


def _ready(index: DenseIndex):
    graph = index.graph("p")
    assert graph is not None and graph.ready.wait(timeout=120)
    return graph


def test_a_large_project_is_searched_through_its_graph_with_exact_scores(tmp_path):
    store, embedder = DuckDBStore(tmp_path / "m.duckdb"), WordVectors()
    _fill(store, embedder, 3_000)
    small = DenseIndex(store, embedder, ann_min_units=10_000)
    large = DenseIndex(store, embedder, ann_min_units=1_000)
    assert small.graph("p") is None
    _ready(large)
    snap = large.snapshot("p")
    assert snap.segments.parts[0].matrix.dtype == np.float16  # rows kept as the store keeps them
    overlap = []
    for text in ["w1 w2 w3", "w17 w230 w5 w99", "w300 w301"]:
        query = embedder.embed([text])[0]
        exact = small.snapshot("p").search(query, 100)
        found = snap.search(query, 100)
        assert snap.exact_search(query, 100) == exact  # float16 rows hold the store's values
        scores = snap.lookup(query, [h.unit_id for h in found])
        assert all(abs(h.score - scores[h.unit_id]) < 1e-6 for h in found)
        assert [h.score for h in found] == sorted((h.score for h in found), reverse=True)
        overlap.append(len({h.unit_id for h in exact} & {h.unit_id for h in found}) / 100)
    assert min(overlap) >= 0.9, overlap
    store.close()


def test_the_graph_follows_writes_and_forgets_and_is_loaded_again_after_a_restart(tmp_path):
    store, embedder = DuckDBStore(tmp_path / "m.duckdb"), WordVectors()
    _fill(store, embedder, 2_000)
    index = DenseIndex(store, embedder, ann_min_units=1_000)
    assert _ready(index).source == "built"
    query = embedder.embed(["zebra quartz lantern"])[0]
    [written] = store.write("p", validate_batch([{"kind": "note", "path": "new.md", "text": "zebra quartz lantern"}]))
    embed_pending(store.vectors(embedder.identity), embedder)
    [new_id] = written.ids
    assert index.snapshot("p").search(query, 5)[0].unit_id == new_id
    store.forget("p", ["new.md"])
    assert new_id not in {h.unit_id for h in index.snapshot("p").search(query, 50)}

    store.write("p", validate_batch([{"kind": "note", "path": "later.md", "text": "zebra quartz lantern again"}]))
    embed_pending(store.vectors(embedder.identity), embedder)
    restarted = DenseIndex(store, embedder, ann_min_units=1_000)
    graph = _ready(restarted)
    assert graph.source == "disk"  # saved after the first build, caught up from the logs
    assert graph.nearest(query, 1)[0] == restarted.snapshot("p").exact_search(query, 1)[0].unit_id
    store.close()


def test_a_project_that_grows_past_the_threshold_gets_its_graph_without_a_reload(tmp_path):
    store, embedder = DuckDBStore(tmp_path / "m.duckdb"), WordVectors()
    _fill(store, embedder, 1_000)
    index = DenseIndex(store, embedder, ann_min_units=1_200)
    assert index.graph("p") is None
    _fill(store, embedder, 300, seed=4)
    graph = _ready(index)
    [written] = store.write("p", validate_batch([{"kind": "note", "path": "z.md", "text": "zebra quartz lantern"}]))
    embed_pending(store.vectors(embedder.identity), embedder)
    query = embedder.embed(["zebra quartz lantern"])[0]
    assert index.snapshot("p").search(query, 1)[0].unit_id == written.ids[0]
    assert graph.nearest(query, 1)[0] == written.ids[0]
    store.close()


def test_a_purge_leaves_no_saved_graph_holding_a_forgotten_vector(tmp_path):
    store, embedder = DuckDBStore(tmp_path / "m.duckdb"), WordVectors()
    _fill(store, embedder, 1_200)
    [written] = store.write("p", validate_batch([{"kind": "note", "path": "slip.md", "text": "zebra quartz lantern"}]))
    embed_pending(store.vectors(embedder.identity), embedder)
    index = DenseIndex(store, embedder, ann_min_units=1_000)
    graph = _ready(index)
    stored = graph._index.get(written.ids[0], dtype=np.int8).tobytes()  # the vector as the graph keeps it
    saved = list((tmp_path / "index" / "dense").glob("*"))
    assert saved and any(stored in f.read_bytes() for f in saved)
    store.forget("p", ["slip.md"])
    index.snapshot("p")  # the graph follows: the vector is removed, which usearch only marks
    index.purge("p")
    assert all(stored not in f.read_bytes() for f in (tmp_path / "index" / "dense").glob("*"))
    query = embedder.embed(["zebra quartz lantern"])[0]
    assert written.ids[0] not in {h.unit_id for h in index.snapshot("p").search(query, 50)}
    restarted = DenseIndex(store, embedder, ann_min_units=1_000)
    assert _ready(restarted).source == "built"  # from the stored vectors, without the forgotten one
    assert all(stored not in f.read_bytes() for f in (tmp_path / "index" / "dense").glob("*"))
    store.close()
