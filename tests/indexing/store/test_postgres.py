"""The PostgreSQL store against the DuckDB store: the same writes give the same rows, BM25 and
dense scores, rankings and slates; several stores on one database (what replicas hold) see each
other's writes, serialise their writes per project and embed one at a time."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from datetime import datetime

import anyio
import numpy as np
import pytest

from agentmemrec.indexing.dense.backfill import EmbeddingWorker, embed_pending
from agentmemrec.indexing.dense.index import DenseChannel, DenseIndex
from agentmemrec.indexing.errors import InputError, StoreError
from agentmemrec.indexing.lexical.index import Bm25Channel, LexicalIndex
from agentmemrec.indexing.store.duckdb_store import DuckDBStore
from agentmemrec.indexing.store.pg_migrations import MIGRATIONS
from agentmemrec.indexing.store.postgres_store import PostgresStore, fresh_schema
from agentmemrec.indexing.units import validate_batch
from agentmemrec.ranking.learned import LearnedRanker, RankerModel
from agentmemrec.ranking.memory import Memory
from agentmemrec.ranking.slate import build_slate
from agentmemrec.ranking.views import show
from agentmemrec.server.cli import main

from helpers import BagOfWords

AS_OF = datetime(2027, 1, 1)
WORDS = ("kafka broker partition helm chart deploy canary rollback schema migration index token "
         "session cache redis queue retry timeout webhook payload").split()


def history(rng: random.Random, n: int) -> list[list[dict]]:
    """Batches of turns in sessions, decisions (some superseding others) and notes, all with refs."""
    batches, decisions = [], []
    for b in range(n):
        batch = []
        for i in range(rng.randint(1, 6)):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14)))
            kind = rng.choice(["turn", "turn", "turn", "decision", "note"])
            item = {"kind": kind, "ref": f"r{b}-{i}", "text": text, "at": f"2026-0{1 + b % 9}-1{i}T10:00:00Z"}
            if kind == "turn":
                item |= {"session": f"s{rng.randint(0, 4)}", "role": rng.choice(["user", "assistant"])}
            elif kind == "decision":
                if decisions and rng.random() < 0.4:
                    item["supersedes"] = decisions.pop(rng.randrange(len(decisions)))
                decisions.append(item["ref"])
            else:
                item["path"] = f"docs/{rng.choice(WORDS)}-{b}.md"
            batch.append(item)
        batches.append(batch)
    return batches


def memory_on(store, embedder) -> Memory:
    dense = DenseIndex(store, embedder)
    root = store.index_dir / "bm25" if store.index_dir else None
    return Memory(store, [Bm25Channel(LexicalIndex(store, root)), DenseChannel(dense)],
                  LearnedRanker(RankerModel.shipped("embedder-ranker.json")), dense=dense)


def test_the_same_writes_give_the_same_scores_rankings_and_slates_on_both_backends(tmp_path, pg_url):
    rng, embedder = random.Random(3), BagOfWords()
    memories = [memory_on(DuckDBStore(tmp_path / "m.duckdb"), embedder), memory_on(PostgresStore(pg_url), embedder)]
    for batch in history(rng, 25):
        for memory in memories:
            memory.remember("p", batch)
    for memory in memories:
        memory.forget("p", ["r3-0"])
        memory.store.rename_ref("p", "r4-0", "renamed", "docs/renamed.md")
        assert embed_pending(memory.dense.vectors, embedder) > 0
    for query in ["kafka broker partition", "helm chart rollback", "schema migration index", "lunch"]:
        selections = [m.select("p", query, AS_OF) for m in memories]  # ages count from as_of
        ranked = [[(sc.unit.ref, sc.rank, round(sc.score, 6), sc.candidate.channels, sc.features)
                   for sc in s.ranked] for s in selections]
        assert ranked[0]
        np.testing.assert_equal(ranked[0], ranked[1])  # features hold NaN for what is missing
        # the same slate id: its tokens count against the budget
        slates = [build_slate("s_000000000000", "p", s.ranked, 400, s.inputs) for s in selections]
        assert slates[0].context == slates[1].context and slates[0].items
    for memory in memories:
        memory.close()


def test_a_second_store_on_the_database_follows_writes_and_new_vectors(pg_url):
    embedder = BagOfWords()
    writer, reader = memory_on(PostgresStore(pg_url), embedder), memory_on(PostgresStore(pg_url), embedder)
    reader.recall("p", "kafka")  # the reader's indexes are built (empty) before the writes
    writer.remember("p", [{"kind": "turn", "ref": "k", "text": "kafka partitions payment events"}])
    embed_pending(writer.dense.vectors, embedder)

    async def caught_up() -> None:
        with anyio.fail_after(5):
            while not {i.unit.ref for i in reader.recall("p", "kafka partitions").items} == {"k"} \
                    or reader.dense.snapshot("p").ids.size != 1:
                await anyio.sleep(0.01)
    anyio.run(caught_up)
    writer.forget("p", ["k"])
    anyio.run(_until, lambda: not reader.recall("p", "kafka partitions").items)
    writer.close()
    reader.close()


async def _until(condition) -> None:
    with anyio.fail_after(5):
        while not condition():
            await anyio.sleep(0.01)


def test_concurrent_writers_to_one_project_are_serialised_and_store_each_content_once(pg_url):
    stores = [PostgresStore(pg_url) for _ in range(3)]
    errors: list[BaseException] = []

    def write(store: PostgresStore, seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(20):
                texts = rng.sample(WORDS, 4)  # the writers share content and refs
                store.write("p", validate_batch([{"kind": "turn", "text": t} for t in texts] +
                                                [{"kind": "turn", "ref": f"ref-{rng.randint(0, 5)}", "text": texts[0]}]))
        except BaseException as exc:
            errors.append(exc)
    threads = [threading.Thread(target=write, args=(s, i)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    rows = stores[0].fetch("SELECT key, count(*) FROM units WHERE project = 'p' GROUP BY key")
    assert rows and all(n == 1 for _, n in rows)
    assert stores[0].fetch_one("SELECT units FROM projects WHERE project = 'p'")[0] == len(rows)
    generations = [g for (g,) in stores[0].fetch("SELECT DISTINCT generation FROM unit_changes ORDER BY 1")]
    assert generations == list(range(1, stores[0].generation("p") + 1))  # one per committed write
    for store in stores:
        store.close()


def test_one_store_embeds_at_a_time_and_the_claim_passes_on(pg_url):
    first, second = PostgresStore(pg_url), PostgresStore(pg_url)
    first.write("p", validate_batch([{"kind": "turn", "text": "kafka partitions"}]))
    with first.vectors("bow@1").claim() as mine, second.vectors("bow@1").claim() as theirs:
        assert mine and not theirs
        assert embed_pending(second.vectors("bow@1"), BagOfWords()) == 0  # the first one is embedding
        with second.vectors("other@1").claim() as other_model:
            assert other_model
    with second.vectors("bow@1").claim() as theirs:
        assert theirs
    assert embed_pending(second.vectors("bow@1"), BagOfWords()) == 1
    first.close()
    second.close()


def test_migrations_are_numbered_and_applied_once_however_many_open_at_once(pg_url):
    stores = []
    threads = [threading.Thread(target=lambda: stores.append(PostgresStore(pg_url))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(stores) == 4
    versions = [v for (v,) in stores[0].fetch("SELECT version FROM schema_migrations ORDER BY 1")]
    assert versions == list(range(1, len(MIGRATIONS) + 1))
    for store in stores:
        store.close()


def test_vectors_come_back_as_the_float16_values_duckdb_keeps(tmp_path, pg_url):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(300, 48)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    loaded = []
    for store in (DuckDBStore(tmp_path / "m.duckdb"), PostgresStore(pg_url)):
        store.write("p", validate_batch([{"kind": "turn", "text": f"unit {i}"} for i in range(300)]))
        rows = store.vectors("m@1")
        [units] = list(rows.pending_windows("p"))
        rows.put(units, vectors, [u.content_hash for u in units])
        _, parts = rows.load("p")
        loaded.append(np.concatenate([p.matrix for p in parts]))
        store.close()
    np.testing.assert_array_equal(loaded[0], loaded[1])
    np.testing.assert_array_equal(loaded[1], vectors.astype(np.float16).astype(np.float32))


def test_an_unreachable_database_is_a_clear_store_error():
    with pytest.raises(StoreError, match="cannot open the PostgreSQL store at 127.0.0.1:1/memory"):
        PostgresStore("postgresql://someone:secret@127.0.0.1:1/memory")


def test_a_search_path_without_pgvectors_schema_is_refused_with_the_fix(pg_admin, home, capsys):
    """Before, the first migration failed with `type "halfvec" does not exist`."""
    name = f"team_{random.randrange(10 ** 9)}"
    fresh_schema(pg_admin, name)  # pgvector lives in public, as an administrator installed it
    url = f"{pg_admin}{'&' if '?' in pg_admin else '?'}options=-c%20search_path%3D{name}"
    assert main(["stats", "--store", url]) == 1
    err = capsys.readouterr().err
    assert f"is in schema public, which the URL's search_path leaves out: add it, as in " \
           f"?options=-c%20search_path%3D{name}%2Cpublic" in err and len(err.strip().splitlines()) == 1
    assert main(["stats", "--store", f"{url}%2Cpublic"]) == 0


def test_a_write_another_store_acknowledged_is_in_the_next_recall_before_its_notify_is_heard(pg_url, monkeypatch):
    """Read-your-write across replicas: before, a recall answered from the generation cached until
    the listener processed the write's NOTIFY, and missed the write (1 to 7 times in 40)."""
    embedder = BagOfWords()
    writer, reader = memory_on(PostgresStore(pg_url), embedder), memory_on(PostgresStore(pg_url), embedder)
    writer.remember("p", [{"kind": "turn", "ref": "old", "text": "redis caches sessions"}])
    anyio.run(_until, lambda: reader.store.generations.listening)
    assert [i.unit.ref for i in reader.recall("p", "redis caches").items] == ["old"]  # generations cached
    monkeypatch.setattr(reader.store.generations, "forget", lambda key: None)  # its NOTIFY not heard yet
    writer.remember("p", [{"kind": "turn", "ref": "new", "text": "kafka partitions payment events"}])
    embed_pending(writer.dense.vectors, embedder)
    assert "new" in [i.unit.ref for i in reader.recall("p", "kafka partitions").items]
    assert reader.dense.snapshot("p").ids.size == 2
    writer.close()
    reader.close()


def test_show_through_another_store_gives_a_rewritten_units_new_text_before_its_notify_is_heard(pg_url, monkeypatch):
    """show_unit through a replica read the unit cache of the generation it last heard of: until
    the rewrite's NOTIFY arrived, it showed the text that the rewrite had replaced."""
    writer, reader = PostgresStore(pg_url), PostgresStore(pg_url)
    writer.write("p", validate_batch([{"kind": "note", "ref": "n", "path": "cache.md", "text": "redis caches sessions"}]))
    anyio.run(_until, lambda: reader.generations.listening)
    assert [u.text for u in show(reader, "p", "n")] == ["redis caches sessions"]  # cached
    monkeypatch.setattr(reader.generations, "forget", lambda key: None)  # its NOTIFY not heard yet
    writer.write("p", validate_batch([{"kind": "note", "ref": "n", "path": "cache.md", "text": "valkey caches sessions"}]))
    assert [u.text for u in show(reader, "p", "n")] == ["valkey caches sessions"]
    writer.close()
    reader.close()


def test_a_slate_recalled_through_one_replica_is_explained_through_another_before_its_explanation_is_stored(
        pg_url, monkeypatch):
    """Replicas behind a load balancer: before, an explanation the recalling replica still held
    queued (its writer stores it a moment later) was reported lost by any other replica, 'the
    process that owned the memory store stopped', 3 times in 15 through real servers."""
    embedder = BagOfWords()
    recaller, explainer = memory_on(PostgresStore(pg_url), embedder), memory_on(PostgresStore(pg_url), embedder)
    recaller.remember("p", [{"kind": "turn", "ref": "k", "text": "kafka partitions payment events"}])
    asked = threading.Event()  # the explainer looked for the explanation and did not find it
    save, load = recaller.store.save_slates, explainer.store.load_slate

    def save_later(rows, keep):  # noqa: ANN001, ANN202 - the recaller's writer, held until asked
        if any(project for _, project, _, _ in rows):
            asked.wait(30)
        return save(rows, keep)

    def load_noting(slate_id):  # noqa: ANN001, ANN202
        row = load(slate_id)
        if row is None and not slate_id.endswith((":started", ":closed")):
            asked.set()
        return row
    monkeypatch.setattr(recaller.store, "save_slates", save_later)
    monkeypatch.setattr(explainer.store, "load_slate", load_noting)
    slate = recaller.recall("p", "kafka partitions")
    try:
        why = explainer.explain(slate.slate_id, {"p"})
        assert [c["ref"] for c in why["candidates"] if c["outcome"] == "in_slate"] == ["k"]
        with pytest.raises(InputError, match="unknown slate id"):  # an id no replica handed out
            explainer.explain("s_" + "0" * 16, {"p"})
    finally:
        asked.set()
        recaller.close()
        explainer.close()


def test_a_unit_written_through_another_replica_after_the_slate_is_explained_as_later_before_its_notify_is_heard(
        pg_url, monkeypatch):
    """Before, the explaining replica compared the slate's generation with the one it last heard
    of, so a unit written through another replica after the recall was labelled never_in_pool."""
    embedder = BagOfWords()
    writer, reader = memory_on(PostgresStore(pg_url), embedder), memory_on(PostgresStore(pg_url), embedder)
    reader.remember("p", [{"kind": "turn", "ref": "old", "text": "kafka partitions payment events"}])
    anyio.run(_until, lambda: reader.store.generations.listening)
    slate = reader.recall("p", "kafka partitions")
    monkeypatch.setattr(reader.store.generations, "forget", lambda key: None)  # its NOTIFY not heard yet
    writer.remember("p", [{"kind": "turn", "ref": "new", "text": "kafka partitions order events"}])
    [why] = reader.explain(slate.slate_id, {"p"}, refs=["new"])["diagnosis"]
    assert why["stage"] == "not_eligible" and "after this slate was built" in why["units"][0]["detail"]
    writer.close()
    reader.close()


def test_a_replica_whose_embedder_is_idle_notes_the_units_another_replica_wrote_and_not_yet_embedded(pg_url):
    """Before, its notes said nothing (its own worker was idle) and the slate was BM25's alone."""
    embedder = BagOfWords()
    writer = memory_on(PostgresStore(pg_url), embedder)
    reader = memory_on(PostgresStore(pg_url), embedder)
    reader.worker = EmbeddingWorker(reader.dense.vectors, embedder).start()
    assert reader.worker.wait_idle(timeout=60)
    with writer.dense.vectors.claim():  # the writer's replica embeds (later)
        writer.remember("p", [{"kind": "turn", "text": f"rotating credentials for service {i}"} for i in range(30)])
        assert "30 units not yet embedded" in " ".join(reader.recall("p", "rotate credentials").notes)
    writer.close()
    reader.close()


URL = "postgresql://someone@127.0.0.1:1/memory"
# The CLI in a process where psycopg cannot be imported: absent (a plain install, without the team
# extra), or present but unable to load libpq (a stand-in package on the path raises as psycopg does).
WITHOUT_PSYCOPG = "import sys; sys.modules['psycopg'] = sys.modules['psycopg_pool'] = None\n"


def _cli(tmp_path, prelude: str, *args: str, path: str = "") -> subprocess.CompletedProcess[str]:
    code = prelude + "import sys; from agentmemrec.server.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "AGENTMEMREC_HOME": str(tmp_path / "home"), **({"PYTHONPATH": path} if path else {})}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args", [("stats", "--store", URL), ("recall", "x", "--store", URL), ("migrate", "--to", URL),
                                  ("serve", "--http", "--port", "1", "--store", URL), ("serve", "--store", URL)])
def test_a_store_url_without_the_team_extra_is_one_line_naming_the_extra(tmp_path, args):
    done = _cli(tmp_path, WITHOUT_PSYCOPG, *args)
    assert done.returncode == 2 and not done.stdout, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "needs the team extra (psycopg, psycopg_pool not installed): pip install 'agentmemrec[team]'" in done.stderr
    assert not (tmp_path / "home").exists()


def test_a_psycopg_that_cannot_load_libpq_is_one_line_naming_the_extra(tmp_path):
    (tmp_path / "fake" / "psycopg").mkdir(parents=True)
    (tmp_path / "fake" / "psycopg" / "__init__.py").write_text("raise ImportError('no pq wrapper available.')\n")
    done = _cli(tmp_path, "", "stats", "--store", URL, path=str(tmp_path / "fake"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "needs the team extra (no pq wrapper available.): pip install 'agentmemrec[team]'" in done.stderr
