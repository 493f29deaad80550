"""`agentmemrec models serve` and `--inference URL`: the real ONNX models behind
text-embeddings-inference's API in a server process, and a memory that embeds and cross-encodes
through it; a served model with another identity than the home's is refused, never mixed in."""

from __future__ import annotations

import json
import logging
import shutil
from importlib import resources
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
import httpx2
import numpy as np
import pytest

from agentmemrec.indexing.dense.backfill import embed_pending
from agentmemrec.indexing.dense.embedder import OnnxEmbedder
from agentmemrec.indexing.dense.models import active, models_dir, read_manifest
from agentmemrec.indexing.dense.remote import RemoteEmbedder, RemoteReranker, connect, request_slices, served_models
from agentmemrec.ranking.cross_encoder import OnnxReranker
from agentmemrec.ranking.memory import Memory
from agentmemrec.server.settings import Settings

from helpers import SENTENCES, Server, free_port, serving

pytestmark = pytest.mark.anyio


def link_models(home: Path, *sources: tuple[Path, str, str]) -> Path:
    """A home whose models are links to installed ones: (home, name, role) each."""
    models_dir(home).mkdir(parents=True)
    for source, name, role in sources:
        (models_dir(home) / name).symlink_to(models_dir(source) / name, target_is_directory=True)
    (models_dir(home) / "active.json").write_text(json.dumps({role: name for _, name, role in sources}))
    return home


@pytest.fixture
def serving_home(tmp_path, minilm_home, reranker_home) -> Path:
    return link_models(tmp_path / "gpu-box", (minilm_home, "minilm", "embedder"),
                       (reranker_home[0], "xlmr", "reranker"))


def models_server(home: Path, *extra: str, port: int | None = None) -> AbstractAsyncContextManager[Server]:
    port = port or free_port()
    return serving(home, ["models", "serve", "--port", str(port), "--device", "cpu", *extra],
                   f"http://127.0.0.1:{port}")


async def test_served_models_answer_as_the_local_onnx_sessions_do(serving_home):
    async with models_server(serving_home) as server:
        url = server.url
        served = {m.role: m for m in await anyio.to_thread.run_sync(served_models, url)}
        local = active(serving_home)
        assert {r: m.identity for r, m in served.items()} == {r: m.identity for r, m in local.items()}
        embedder = OnnxEmbedder(models_dir(serving_home) / "minilm", "cpu")
        remote = await anyio.to_thread.run_sync(RemoteEmbedder, served["embedder"])
        assert remote.dim == 384
        got = await anyio.to_thread.run_sync(remote.embed, SENTENCES * 20)  # several client batches
        np.testing.assert_allclose(got, embedder.embed(SENTENCES * 20), atol=1e-6)
        reranker = OnnxReranker(models_dir(serving_home) / "xlmr", "cpu")
        query = "which broker do payment events use"
        scores = await anyio.to_thread.run_sync(RemoteReranker(served["reranker"], 24).score, query, SENTENCES)
        np.testing.assert_allclose(scores, reranker.score(query, SENTENCES), atol=1e-5)
        async with httpx2.AsyncClient() as http:  # TEI's error for a bad body, never a crash
            reply = await http.post(f"{url}/embed", json={"inputs": [3]})
            assert reply.status_code == 422 and "inputs must be" in reply.json()["error"]
            scored = (await http.post(f"{url}/rerank", json={"query": query, "texts": SENTENCES})).json()
            assert sorted(h["index"] for h in scored) == [0, 1, 2, 3] and all(0 < h["score"] < 1 for h in scored)


async def test_a_memory_with_an_inference_url_embeds_and_cross_encodes_there(serving_home, tmp_path):
    replica = tmp_path / "cpu-replica"  # no models of its own
    async with models_server(serving_home) as server:
        url = server.url
        memory = await anyio.to_thread.run_sync(lambda: Memory.open(replica, background=False, inference=url))
        try:
            assert memory.dense is not None and memory.dense.embedder.identity == read_manifest(
                models_dir(serving_home) / "minilm").identity
            memory.remember("p", [{"kind": "turn", "text": t} for t in SENTENCES])
            assert await anyio.to_thread.run_sync(embed_pending, memory.dense.vectors, memory.dense.embedder) == 4
            slate = await anyio.to_thread.run_sync(memory.recall, "p", "which message broker carries payments")
            why = memory.explain(slate.slate_id, {"p"})
            assert all("dense" in c["channels"] for c in why["candidates"])
            assert any(c["features"]["cross_encoder_z"] is not None for c in why["candidates"])
        finally:
            memory.close()


async def test_a_recall_goes_on_without_an_inference_server_that_stopped_and_uses_it_again_once_it_is_back(
        serving_home, tmp_path, caplog):
    port = free_port()
    async with models_server(serving_home, port=port) as server:
        memory = await anyio.to_thread.run_sync(lambda: Memory.open(tmp_path / "replica", background=False,
                                                                    inference=server.url))
        memory.remember("p", [{"kind": "turn", "text": t} for t in SENTENCES])
        assert await anyio.to_thread.run_sync(embed_pending, memory.dense.vectors, memory.dense.embedder) == 4
    try:  # the server stopped while the memory runs
        with caplog.at_level(logging.WARNING):
            slates = [await anyio.to_thread.run_sync(memory.recall, "p", "which message broker carries payments")
                      for _ in range(3)]
        for slate in slates:
            assert slate.items
            assert any("cannot be reached" in n and "BM25 only for this recall" in n for n in slate.notes)
            assert any("without the cross-encoder's score for this recall" in n for n in slate.notes)
        why = memory.explain(slates[-1].slate_id, {"p"})
        assert why["channels"] == ["bm25"] and any("BM25 only" in n for n in why["notes"])
        assert why["models"]["embedder"] is None and why["models"]["cross_encoder"] is None  # what ran
        assert all(c["features"]["cross_encoder_z"] is None for c in why["candidates"])
        said = [r.getMessage() for r in caplog.records if "cannot be reached" in r.getMessage()]
        assert len(said) == 1 and "until it answers again" in said[0]  # once, not at every recall
        async with models_server(serving_home, port=port):
            slate = await anyio.to_thread.run_sync(memory.recall, "p", "which message broker carries payments")
        assert not any("for this recall" in n for n in slate.notes)
        why = memory.explain(slate.slate_id, {"p"})
        assert why["channels"] == ["bm25", "dense"]
        assert why["models"]["embedder"] is not None and why["models"]["cross_encoder"] is not None
        assert any(c["features"]["cross_encoder_z"] is not None for c in why["candidates"])
        assert any("answers again" in r.getMessage() for r in caplog.records)
    finally:
        memory.close()


async def test_the_served_cross_encoder_runs_only_for_a_ranker_that_uses_it_cut_where_it_was_trained(
        serving_home, tmp_path):
    replica = tmp_path / "cpu-replica"
    shipped = Path(str(resources.files("agentmemrec.ranking").joinpath("models/embedder-ranker.json")))
    async with models_server(serving_home, "--rerank-tokens", "32") as server:
        chosen = await anyio.to_thread.run_sync(lambda: Memory.open(replica, background=False, inference=server.url))
        without = await anyio.to_thread.run_sync(lambda: Memory.open(
            replica, background=False, inference=server.url, ranker_model=shipped))
        try:  # minilm and xlmr: the closest shipped ranker is the CPU set's, which uses a cross-encoder
            reranker = chosen.ranker.reranker
            assert isinstance(reranker, RemoteReranker) and chosen.ranker.model.meta["file"] == "cpu-ranker.json"
            assert (reranker.limit, reranker.max_tokens) == (chosen.ranker.model.rerank_depth, 32)
            assert any("cuts cross-encoder pairs at 32 tokens" in p and "--rerank-tokens 128" in p
                       for p in chosen.problems)
            assert without.ranker.reranker is None and without.dense is not None
            assert chosen.models()["cross_encoder"] == reranker.identity and without.models()["cross_encoder"] is None
        finally:
            chosen.close()
            without.close()


async def test_a_served_model_that_is_not_the_homes_is_refused_and_not_mixed_in(serving_home, tmp_path, minilm_home):
    other = tmp_path / "laptop" / "models" / "other"
    shutil.copytree(models_dir(minilm_home) / "minilm", other)
    manifest = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**manifest, "name": "other"}))
    (other.parent / "active.json").write_text(json.dumps({"embedder": "other"}))
    async with models_server(serving_home) as server:
        url = server.url
        served, problems = await anyio.to_thread.run_sync(connect, url, active(tmp_path / "laptop"))
        assert "embedder" not in served and "reranker" in served
        assert any("not this home's other@" in p and "never mixed" in p for p in problems)
        memory = await anyio.to_thread.run_sync(lambda: Memory.open(tmp_path / "laptop", background=False,
                                                                    inference=url))
        try:
            assert memory.dense is None and any("refused" in p for p in memory.problems)
        finally:
            memory.close()


def test_an_unreachable_inference_server_leaves_bm25_and_says_so(tmp_path):
    memory = Memory.open(tmp_path / "home", background=False, inference="http://127.0.0.1:1")
    try:
        assert memory.dense is None and memory.ranker is not None
        assert any("cannot be reached" in p for p in memory.problems)
        memory.remember("p", [{"kind": "turn", "text": "kafka partitions"}])
        assert memory.recall("p", "kafka").items
    finally:
        memory.close()


def test_a_home_whose_models_cannot_be_read_uses_no_served_model(tmp_path):
    home = tmp_path / "home"
    (models_dir(home) / "broken").mkdir(parents=True)
    (models_dir(home) / "broken" / "manifest.json").write_text("{not json")
    (models_dir(home) / "active.json").write_text(json.dumps({"embedder": "broken"}))
    memory = Memory.open(home, background=False, inference="http://127.0.0.1:1")
    try:  # nothing to check a served model against: none is mixed in, and the memory still recalls
        assert memory.dense is None and any("unreadable" in p and "none is used" in p for p in memory.problems)
        memory.remember("p", [{"kind": "turn", "text": "kafka partitions"}])
        assert memory.recall("p", "kafka").items
    finally:
        memory.close()


async def test_models_serve_wants_its_token_and_refuses_bodies_it_should_not_read(reranker_home, tmp_path):
    """It answered anyone, read a 200 MB body whole (5.2 GB), and 100,000 nested brackets gave a 500."""
    home = link_models(tmp_path / "box", (reranker_home[0], "xlmr", "reranker"))
    (tmp_path / "token").write_text("s3cret-inference-token\n")
    async with models_server(home, "--token-file", str(tmp_path / "token"), "--max-request-bytes", "100000") as server:
        url = server.url
        async with httpx2.AsyncClient() as http:
            assert (await http.get(f"{url}/info")).status_code == 401
            assert (await http.post(f"{url}/rerank", json={"query": "q", "texts": ["t"]})).status_code == 401
            assert (await http.get(f"{url}/health")).status_code == 200  # for a load balancer
            auth = {"Authorization": "Bearer s3cret-inference-token"}
            for body, status in ((b"{not json", 400), (b"[" * 40_000 + b"]" * 40_000, 400),
                                 (b'{"query": "q", "texts": ["' + b"x" * 200_000 + b'"]}', 413)):
                reply = await http.post(f"{url}/rerank", content=body, headers=auth)
                assert reply.status_code == status, reply.text
            assert "100000-byte limit" in reply.json()["error"]
        served, problems = await anyio.to_thread.run_sync(connect, url, {}, "s3cret-inference-token")
        assert problems == [] and "reranker" in served
        scores = await anyio.to_thread.run_sync(RemoteReranker(served["reranker"], 24).score, "broker", SENTENCES)
        assert len(scores) == len(SENTENCES)
        unsent, problems = await anyio.to_thread.run_sync(connect, url, {})
        assert unsent == {} and "401" in problems[0]
        settings = Settings.load(env={"AGENTMEMREC_HOME": str(tmp_path / "replica"), "AGENTMEMREC_INFERENCE": url,
                                      "AGENTMEMREC_INFERENCE_TOKEN": "s3cret-inference-token"})
        assert "s3cret" not in repr(settings)
        memory = await anyio.to_thread.run_sync(lambda: Memory.open(
            settings.home, background=False, inference=settings.inference, inference_token=settings.inference_token))
        memory.close()
        assert not any("401" in p for p in memory.problems), memory.problems
    assert not any("Traceback" in line for line in server.log)


def test_a_client_splits_requests_that_would_be_over_a_servers_body_limit():
    assert request_slices(["a"] * 70, 32) == [(0, 32), (32, 64), (64, 70)]
    big = "x" * 600_000  # two would be over TEI's default 2 MB body with their JSON: one per request
    assert request_slices([big, big, "y"], 32) == [(0, 1), (1, 3)]
    assert request_slices([big], 32, fixed=600_000) == [(0, 1)]  # a text over the limit goes alone
