"""The dense channel and fusion, with a deterministic stand-in embedder (the ONNX one has its own
tests in test_models.py): background embedding, lexical fallback, model change, forget."""

from __future__ import annotations

import logging
import threading

import numpy as np

from agentmemrec.indexing.dense.backfill import EMBED_BATCH, EmbeddingWorker, embed_pending
from agentmemrec.indexing.dense.embedder import BATCH
from agentmemrec.indexing.dense.index import DenseChannel, DenseIndex
from agentmemrec.indexing.errors import StoreUnavailable
from agentmemrec.indexing.lexical.index import Bm25Channel, LexicalIndex
from agentmemrec.indexing.store.duckdb_store import DuckDBStore
from agentmemrec.indexing.units import validate_batch
from agentmemrec.ranking.candidates import fuse, rrf_score
from agentmemrec.ranking.memory import Memory

from helpers import BagOfWords


def memory_with(tmp_path, embedder, background: bool) -> Memory:
    store = DuckDBStore(tmp_path / "m.duckdb")
    dense = DenseIndex(store, embedder)
    worker = EmbeddingWorker(dense.vectors, embedder).start() if background else None
    return Memory(store, [Bm25Channel(LexicalIndex(store, tmp_path / "idx")), DenseChannel(dense)],
                  dense=dense, worker=worker)


def test_rrf_matches_its_formula_and_keeps_each_channels_rank():
    class H:
        def __init__(self, uid, rank): self.unit_id, self.rank, self.score = uid, rank, 1.0
    kept, cut = fuse({"bm25": [H(1, 1), H(2, 2)], "dense": [H(2, 1), H(3, 2)]}, pool_size=2)
    assert [uid for uid, _, _ in kept] == [2, 1]
    assert kept[0][1] == rrf_score([2, 1]) == 1 / 62 + 1 / 61
    assert kept[0][2]["bm25"].rank == 2 and kept[0][2]["dense"].rank == 1
    assert cut == {"dense": {3: 2}}


def test_recall_before_embedding_is_lexical_and_says_how_many_wait(tmp_path):
    memory = memory_with(tmp_path, BagOfWords(), background=False)
    memory.remember("p", [{"kind": "turn", "text": "kafka partitions payment events"}])
    slate = memory.recall("p", "kafka partitions")
    assert [i.unit.text for i in slate.items] == ["kafka partitions payment events"]
    assert any("1 units not yet embedded" in n for n in slate.notes)
    why = memory.explain(slate.slate_id, {"p"})
    assert why["candidates"][0]["channels"].keys() == {"bm25"}
    assert embed_pending(memory.dense.vectors, memory.dense.embedder) == 1
    assert memory.notes("p") == []
    # the explanation of the first slate still says why it had no dense ranks
    assert any("not yet embedded" in n for n in memory.explain(slate.slate_id, {"p"})["notes"])
    later = memory.recall("p", "kafka partitions")
    assert later.notes == ()
    why = memory.explain(later.slate_id, {"p"})
    assert why["candidates"][0]["channels"].keys() == {"bm25", "dense"} and why["notes"] == []
    memory.close()


def test_background_worker_embeds_without_remember_waiting(tmp_path):
    memory = memory_with(tmp_path, BagOfWords(), background=True)
    memory.remember("p", [{"kind": "turn", "text": f"note number {i} about caching"} for i in range(150)])
    assert memory.worker.wait_idle(timeout=60)
    assert memory.dense.vectors.count_pending("p") == 0 and memory.notes("p") == []
    assert len(memory.dense.snapshot("p").ids) == 150
    memory.close()


def test_dense_channel_finds_what_bm25_cannot(tmp_path):
    memory = memory_with(tmp_path, BagOfWords(), background=False)
    memory.remember("p", [{"kind": "turn", "ref": "a", "text": "deploying deploys deployment"},
                          {"kind": "turn", "ref": "b", "text": "unrelated lunch menu"}])
    embed_pending(memory.dense.vectors, memory.dense.embedder)
    hits = memory.channels[1].search("p", "Deploying", 5, set())
    assert hits[0].unit_id == memory.store.ids_for("p", "a")[0] and hits[0].score > 0.5
    memory.close()


def test_updated_units_are_re_embedded_and_forgotten_ones_leave_the_snapshot(tmp_path):
    memory = memory_with(tmp_path, BagOfWords(), background=False)
    memory.remember("p", [{"kind": "turn", "ref": "a", "text": "alpha beta"},
                          {"kind": "turn", "ref": "b", "text": "gamma delta"}])
    embed_pending(memory.dense.vectors, memory.dense.embedder)
    memory.remember("p", [{"kind": "turn", "ref": "a", "text": "epsilon zeta"}])
    assert memory.dense.vectors.count_pending("p") == 1
    embed_pending(memory.dense.vectors, memory.dense.embedder)
    hits = memory.channels[1].search("p", "epsilon", 1, set())
    assert hits[0].unit_id == memory.store.ids_for("p", "a")[0] and hits[0].score > 0.5
    memory.forget("p", ["b"])
    assert len(memory.dense.snapshot("p").ids) == 1
    memory.close()


def test_a_new_model_re_embeds_everything(tmp_path):
    memory = memory_with(tmp_path, BagOfWords(identity="bow@1"), background=False)
    memory.remember("p", [{"kind": "turn", "text": f"item {i}"} for i in range(5)])
    embed_pending(memory.dense.vectors, memory.dense.embedder)
    other = DenseIndex(memory.store, BagOfWords(dim=32, identity="bow@2"))
    assert other.vectors.count_pending("p") == 5
    embed_pending(other.vectors, other.embedder)
    assert other.snapshot("p").dim == 32 and len(other.snapshot("p").ids) == 5
    memory.close()


def test_as_of_and_project_filters_apply_to_the_dense_channel(tmp_path):
    memory = memory_with(tmp_path, BagOfWords(), background=False)
    memory.remember("p", [{"kind": "turn", "ref": "old", "text": "cache eviction policy", "at": "2026-01-01"},
                          {"kind": "turn", "ref": "new", "text": "cache eviction policy lru", "at": "2026-03-01"}])
    memory.remember("q", [{"kind": "turn", "text": "cache eviction policy lru lfu"}])
    embed_pending(memory.dense.vectors, memory.dense.embedder)
    slate = memory.recall("p", "cache eviction policy lru", as_of="2026-02-01")
    assert [i.unit.ref for i in slate.items] == ["old"]
    memory.close()


def test_a_server_loads_its_project_first_then_embeds_in_the_background(tmp_path):
    memory = memory_with(tmp_path, BagOfWords(), background=False)
    memory.remember("p", [{"kind": "turn", "text": f"note {i} about retries"} for i in range(40)])
    memory.start_embedding(warm="p")
    assert memory.worker.wait_idle(timeout=60)
    assert memory.channels[0].index.loaded("p") and memory.dense.vectors.count_pending("p") == 0
    memory.close()


class Gated(BagOfWords):
    """Holds its first batch until the worker has been asked to stop (as a slow model would
    still be embedding when the server closes)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.worker: EmbeddingWorker | None = None

    def embed(self, texts: list[str]) -> np.ndarray:
        if self.calls == 0:
            self.started.set()
            assert self.worker is not None and self.worker._stop.wait(10)  # until close asks it to stop
        return super().embed(texts)


def test_close_stops_the_embedder_within_one_model_batch_and_leaves_the_rest_pending(tmp_path, caplog):
    """A close used to wait for a whole transaction of 256 units (a minute of long texts on two
    cores): it now waits for the model batch in progress, stores it, and the rest stays pending."""
    embedder = Gated()
    memory = memory_with(tmp_path, embedder, background=False)
    memory.remember("p", [{"kind": "turn", "text": f"note {i} about kafka" + " word" * (i % 7)}
                          for i in range(3 * EMBED_BATCH)])
    embedder.worker = memory.worker = EmbeddingWorker(memory.dense.vectors, embedder).start()
    assert embedder.started.wait(10)
    memory.close()  # the worker is inside its first model batch of a pass of 640 units
    assert not memory.worker._thread.is_alive() and embedder.calls == 1
    assert "background embedding failed" not in caplog.text
    reopened = memory_with(tmp_path, BagOfWords(), background=False)
    assert reopened.dense.vectors.count_pending("p") == 3 * EMBED_BATCH - BATCH
    assert embed_pending(reopened.dense.vectors, reopened.dense.embedder) == 3 * EMBED_BATCH - BATCH
    slate = reopened.recall("p", "note 5 about kafka")  # every unit found by both channels, none missing
    assert slate.notes == () and reopened.dense.vectors.count_pending("p") == 0
    reopened.close()


def test_the_dense_query_leaves_out_the_projects_speakers(tmp_path):
    """A name in a question says whose turns to read: the ranker's speaker features use it. To
    the embedder it would be a topic, and the turns that carry it are the other side's replies
    addressing that person."""
    memory = memory_with(tmp_path, BagOfWords(), background=False)
    memory.remember("p", [
        {"kind": "turn", "ref": "pottery", "speaker": "Melanie", "text": "I joined a pottery class"},
        {"kind": "turn", "ref": "reply", "speaker": "Caroline", "text": "Wow Melanie, so cool. Melanie, tell me more"}])
    memory.remember("q", [{"kind": "turn", "ref": "other", "speaker": "Gina", "text": "Gina's store opened"}])
    embed_pending(memory.dense.vectors, memory.dense.embedder)
    dense = memory.channels[1]
    ids = {ref: memory.store.ids_for("p", ref)[0] for ref in ("pottery", "reply")}

    slate = memory.recall("p", "What class did Melanie's friend join, Melanie?")
    why = memory.explain(slate.slate_id, {"p"})
    assert why["dense_query"] == "What class did friend join, ?"
    ranks = {c["ref"]: c["channels"]["dense"]["rank"] for c in why["candidates"] if "dense" in c["channels"]}
    assert ranks["pottery"] == 1 and ranks["reply"] == 2
    # with the names kept, the embedder would have put the reply first
    kept = memory.dense.snapshot("p").search(memory.dense.embedder.embed(
        ["What class did Melanie's friend join, Melanie?"])[0], 2, set())
    assert kept[0].unit_id == ids["reply"]
    assert dense.score_units("p", "melanie class", [ids["pottery"]]) == \
        dense.score_units("p", "class", [ids["pottery"]])

    assert dense.query_text("p", "Melanie?") == "Melanie?"  # nothing but a name: left whole
    assert dense.query_text("p", "what did Gina open") == "what did Gina open"  # another project's speaker
    assert dense.query_text("q", "what did Gina open") == "what did open"
    memory.remember("p", [{"kind": "turn", "ref": "jon", "speaker": "Jon", "text": "the studio opened"}])
    assert dense.query_text("p", "when did jon open the studio") == "when did open the studio"  # a new speaker
    memory.close()


class Outage:
    """A store's vector rows, while `down` unreachable as a PostgreSQL store in an outage is."""

    def __init__(self, rows) -> None:
        self.rows, self.down, self.model = rows, True, rows.model

    def claim(self):
        if self.down:
            raise StoreUnavailable("the PostgreSQL store at db:5432/memory cannot be reached (no connection)")
        return self.rows.claim()

    def __getattr__(self, name):
        return getattr(self.rows, name)


def test_an_outage_costs_the_background_embedder_one_log_line_not_a_traceback_per_retry(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="agentmemrec.indexing.dense.backfill")
    store = DuckDBStore(tmp_path / "m.duckdb")
    store.write("p", validate_batch([{"kind": "turn", "text": "kafka partitions"}]))
    rows = Outage(store.vectors("bow@1"))
    worker = EmbeddingWorker(rows, BagOfWords()).start()
    for _ in range(3):  # three retries during the outage
        assert worker.wait_idle(timeout=60)
        worker.notify()
    assert worker.wait_idle(timeout=60)
    rows.down = False
    worker.notify()
    assert worker.wait_idle(timeout=60) and rows.count_pending("p") == 0  # embedded once it is back
    worker.stop()
    store.close()
    said = [r for r in caplog.records if r.name == "agentmemrec.indexing.dense.backfill"]
    assert [r.getMessage() for r in said] == [
        "background embedding waits for the store: the PostgreSQL store at db:5432/memory cannot be reached "
        "(no connection)", "the store answers again: background embedding resumes"]
    assert not any(r.exc_info for r in said)


def test_a_tie_at_the_cut_off_keeps_the_lower_ids(tmp_path):
    """Units of the same words tie exactly; which tied rows argpartition returned depended on the
    CPU's sort kernel, so a pool's last places (and the exact-recall records) moved between machines."""
    store, embedder = DuckDBStore(tmp_path / "m.duckdb"), BagOfWords()
    rng = np.random.default_rng(5)
    texts = ["cache eviction policy", "cache eviction", "policy review notes", "eviction"]
    store.write("p", validate_batch([{"kind": "turn", "ref": f"r{i}", "text": texts[t]}
                                     for i, t in enumerate(rng.integers(0, 4, 600))]))
    embed_pending(store.vectors(embedder.identity), embedder)
    snap = DenseIndex(store, embedder).snapshot("p")
    query = embedder.embed(["cache eviction policy"])[0]
    assert len(snap.ids) == 600
    every = sorted(zip(snap.similarities(query).tolist(), snap._row_ids.tolist()), key=lambda s: (-s[0], s[1]))
    for k in (7, 150, 151, 299, 420):
        assert [h.unit_id for h in snap.exact_search(query, k)] == [i for _, i in every[:k]]
    store.close()
