"""Indexes that follow writes through the change log equal indexes rebuilt from the rows, for
any sequence of writes, updates, renames and forgets; the log and the merge policy."""

from __future__ import annotations

import random

import bm25s
import numpy as np

from agentmemrec.indexing.dense.backfill import embed_pending
from agentmemrec.indexing.dense.index import DenseIndex
from agentmemrec.indexing.lexical.index import LexicalIndex
from agentmemrec.indexing.lexical.postings import BM25_PARAMS, tokenize
from agentmemrec.indexing.segments import Segments, merge_count
from agentmemrec.indexing.store import changes
from agentmemrec.indexing.store.duckdb_store import DuckDBStore
from agentmemrec.indexing.units import validate_batch

from helpers import BagOfWords

WORDS = ("bazel cache deploy helm chart kafka broker retry queue lock schema index token session "
         "rollback canary webhook payload timeout").split()
QUERIES = ["bazel cache", "kafka broker retry", "helm chart rollback", "session token token", "lunch"]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 9))) or "the and of"  # stopwords only


def _step(store: DuckDBStore, rng: random.Random, step: int) -> None:
    """One random change: new turns (some sharing a ref with an older one), a forget, a rename."""
    refs = [r for (r,) in store.cursor().execute("SELECT ref FROM units WHERE project = 'p' AND ref IS NOT NULL").fetchall()]
    action = rng.choice(["write", "write", "write", "forget", "rename"] if refs else ["write"])
    if action == "write":
        items = [{"kind": "turn", "ref": rng.choice(refs) if refs and rng.random() < 0.3 else f"r{step}-{i}",
                  "text": _text(rng), "session": f"s{rng.randint(0, 3)}"} for i in range(rng.randint(1, 4))]
        store.write("p", validate_batch(list({it["ref"]: it for it in items}.values())))
    elif action == "forget":
        store.forget("p", [rng.choice(refs)])
    else:
        store.rename_ref("p", rng.choice(refs), f"renamed-{step}", f"docs/{rng.choice(WORDS)}.md")


def test_a_lexical_index_that_follows_writes_equals_one_rebuilt_from_the_rows(tmp_path):
    store, rng = DuckDBStore(tmp_path / "m.duckdb"), random.Random(7)
    store.write("q", validate_batch([{"kind": "turn", "text": "kafka broker in another project"}]))
    following = LexicalIndex(store, tmp_path / "idx")
    for step in range(60):
        _step(store, rng, step)
        snap = following.snapshot("p")
        rebuilt = LexicalIndex(store, tmp_path / f"rebuilt-{step}").rebuild("p")
        np.testing.assert_array_equal(snap.ids, rebuilt.ids)
        for query in QUERIES:
            assert snap.search(query, 5) == rebuilt.search(query, 5)
            assert snap.score_units(query, snap.ids.tolist()) == rebuilt.score_units(query, rebuilt.ids.tolist())
    _, texts, _ = store.index_rows("p")
    reference = bm25s.BM25(**BM25_PARAMS)
    reference.index([t or [""] for t in tokenize(texts)], show_progress=False)
    for query in QUERIES:
        tokens = [t for t in tokenize([query])[0] if t in reference.vocab_dict]
        expected = reference.get_scores(tokens) if tokens else np.zeros(len(texts))
        np.testing.assert_allclose(snap.scores(query), expected, rtol=1e-6)
    assert len(snap.segments.parts) <= 8
    store.close()


def test_a_lexical_index_saved_mid_way_catches_up_after_a_restart(tmp_path, monkeypatch):
    monkeypatch.setattr("agentmemrec.indexing.lexical.index.PERSIST_ROWS", 4)
    store, rng = DuckDBStore(tmp_path / "m.duckdb"), random.Random(3)
    index = LexicalIndex(store, tmp_path / "idx")
    for step in range(30):
        _step(store, rng, step)
        index.snapshot("p")
    restarted = LexicalIndex(store, tmp_path / "idx").snapshot("p")
    rebuilt = LexicalIndex(store, tmp_path / "rebuilt").rebuild("p")
    for query in QUERIES:
        assert restarted.search(query, 8) == rebuilt.search(query, 8)
    store.close()


def test_an_index_purged_after_forgets_scores_as_one_rebuilt_and_keeps_no_dead_word(tmp_path, monkeypatch):
    monkeypatch.setattr("agentmemrec.indexing.lexical.index.PERSIST_ROWS", 4)
    store, rng = DuckDBStore(tmp_path / "m.duckdb"), random.Random(13)
    index = LexicalIndex(store, tmp_path / "idx")
    store.write("p", validate_batch([{"kind": "turn", "ref": "slip", "text": "zebra unseal kafka"}]))
    index.snapshot("p")
    store.forget("p", ["slip"])
    index.purge("p")
    saved = b"".join(f.read_bytes() for f in (tmp_path / "idx").rglob("*") if f.is_file())
    assert b"zebra" not in saved and b"kafka" not in saved
    for step in range(40):
        _step(store, rng, step)
        if step % 5 == 0:  # the forgotten word comes back in a new unit
            store.write("p", validate_batch([{"kind": "turn", "text": f"zebra {rng.choice(WORDS)} {step}"}]))
        index.purge("p")
        rebuilt = LexicalIndex(store, tmp_path / f"rebuilt-{step}").rebuild("p")
        for snap in (index.snapshot("p"), LexicalIndex(store, tmp_path / "idx").snapshot("p")):  # and restarted
            for query in QUERIES + ["zebra"]:
                assert snap.search(query, 8) == rebuilt.search(query, 8)
    store.close()


def test_a_rebuild_in_chunks_equals_one_in_a_single_part(tmp_path, monkeypatch):
    store, rng = DuckDBStore(tmp_path / "m.duckdb"), random.Random(5)
    for step in range(20):
        _step(store, rng, step)
    whole = LexicalIndex(store, tmp_path / "whole").rebuild("p")
    monkeypatch.setattr(changes, "SCAN_CHUNK", 3)
    chunked = LexicalIndex(store, tmp_path / "chunked").rebuild("p")
    assert len(chunked.segments.parts) > 1
    for query in QUERIES:
        assert chunked.search(query, 10) == whole.search(query, 10)
    store.close()


def test_an_index_older_than_the_change_log_is_rebuilt(tmp_path):
    store = DuckDBStore(tmp_path / "m.duckdb")
    store.write("p", validate_batch([{"kind": "turn", "text": "bazel cache"}]))
    index = LexicalIndex(store, tmp_path / "idx")
    index.snapshot("p")
    store.write("p", validate_batch([{"kind": "turn", "text": "bazel remote cache"}]))
    store.cursor().execute("UPDATE projects SET logged_from = generation")  # as a store migrated just now
    assert store.changes_since("p", 1) is None
    assert len(index.snapshot("p").search("bazel", 5)) == 2
    store.close()


def test_a_dense_index_that_follows_writes_and_new_vectors_equals_a_fresh_load(tmp_path):
    store, rng = DuckDBStore(tmp_path / "m.duckdb"), random.Random(11)
    embedder = BagOfWords()
    following = DenseIndex(store, embedder)
    query = embedder.embed(["kafka broker retry"])[0]
    for step in range(40):
        _step(store, rng, step)
        if rng.random() < 0.6:  # vectors arrive later than the rows, as from the background worker
            embed_pending(following.vectors, embedder, limit=rng.randint(1, 6))
        snap, fresh = following.snapshot("p"), DenseIndex(store, embedder).snapshot("p")
        np.testing.assert_array_equal(snap.ids, fresh.ids)
        ids = snap.ids.tolist()
        got, expected = snap.lookup(query, ids), fresh.lookup(query, ids)
        assert got.keys() == expected.keys()
        np.testing.assert_allclose([got[i] for i in ids], [expected[i] for i in ids], rtol=1e-6)
        assert {h.unit_id for h in snap.search(query, len(ids))} == set(ids)
    store.close()


def test_parts_merge_like_a_binary_counter():
    assert merge_count([100, 1], [100, 1]) == 0
    assert merge_count([100, 1, 1], [100, 1, 1]) == 2
    assert merge_count([100, 4, 2, 1, 1], [100, 4, 2, 1, 1]) == 4
    assert merge_count([100, 10], [300, 10]) == 2  # a mostly dead part is merged away


def test_a_write_that_adds_no_row_leaves_equal_loaded_parts_unmerged():
    # A load makes parts of equal windows; a write that only removes must not copy them all.
    windows = [8192] * 12 + [8191]
    assert merge_count(windows, [8192] * 13, added=False) == 0
    assert merge_count(windows, [8192] * 12 + [20000], added=False) == 1  # unless mostly dead


class _Ids:
    def __init__(self, ids: list[int]) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)


def _merge(parts, dead):
    ids = np.concatenate([p.ids[~d] if d is not None else p.ids for p, d in zip(parts, dead)])
    return _Ids(sorted(ids.tolist()))


def test_many_single_writes_keep_few_parts_and_every_id_live_once():
    segs: Segments = Segments()
    for i in range(1, 2000):
        if i % 7 == 0:  # an update: the old row dies, the new one is added
            segs = segs.without(np.array([i // 2]))
            segs = segs.plus(_Ids([i // 2]), _merge)
        segs = segs.plus(_Ids([i]), _merge)
    live = np.concatenate([p.ids[~d] if d is not None else p.ids for p, d in zip(segs.parts, segs.dead)])
    assert sorted(live.tolist()) == list(range(1, 2000)) and len(segs.parts) <= 12
