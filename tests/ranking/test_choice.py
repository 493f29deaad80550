"""The ranker is chosen by the active models' identities: one shipped ranker per configuration
(the default CPU set with its cross-encoder, its embedder alone, BM25 alone), a note for any other
model, and no cross-encoder run that the chosen ranker does not use."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentmemrec.indexing.dense.backfill import embed_pending
from agentmemrec.indexing.dense.models import activate, active, models_dir
from agentmemrec.ranking.learned import RETRAIN, choose_ranker, shipped_models
from agentmemrec.ranking.memory import Memory
from agentmemrec.server.cli import main
from agentmemrec.server.owner_socket import HOME_ENV

from helpers import turn, write_locomo

HISTORY = [turn("We moved payment events from RabbitMQ to Kafka in April.", session="s1", ref="kafka"),
           turn("The office plants need watering on Fridays.", session="s1", ref="plants"),
           turn("Replay payment events with the kafka-replay tool from the last offset.", session="s2", ref="replay")]
QUERY = "Which broker carries payment events, and how are they replayed?"
EMBEDDER, RERANKER = "bge-small-en-v1.5", "ms-marco-MiniLM-L-12-v2"
BGE = "Represent this sentence for searching relevant passages: "  # bge-*-en-v1.5's, as its authors document it


def _copy(home: Path, tmp_path: Path, reranker: bool | None = None) -> Path:
    """A copy of a home's models; `reranker` True or False makes the cross-encoder active or not."""
    target = tmp_path / "home"
    shutil.copytree(models_dir(home), models_dir(target))
    if reranker is not None:
        activate(target, "reranker", RERANKER if reranker else None)
    return target


def _recall(memory: Memory) -> dict:
    memory.remember("p", HISTORY)
    if memory.dense is not None:  # what the background worker does, in the foreground
        embed_pending(memory.dense.vectors, memory.dense.embedder, "p")
    slate = memory.recall("p", QUERY)
    return memory.explain(slate.slate_id, {"p"})


def _identities(home: Path) -> tuple[str | None, str | None]:
    """The active models as ranker files record them (the embedder with its query instruction)."""
    embedder, reranker = active(home)["embedder"], active(home)["reranker"]
    return embedder.ranked_as if embedder else None, reranker.identity if reranker else None


def test_the_default_install_activates_a_configuration_a_shipped_ranker_was_trained_for(default_home):
    model, note = choose_ranker(*_identities(default_home))
    assert note is None and model.trained_for(*_identities(default_home))


@pytest.mark.parametrize("model", shipped_models(), ids=lambda m: m.meta["file"])
def test_each_shipped_configuration_gets_its_ranker_without_a_note(default_home, tmp_path, caplog, model):
    home = _copy(default_home, tmp_path, reranker=model.uses_reranker)
    if model.meta["embedder"] is None:
        activate(home, "embedder", None)
    memory = Memory.open(home, background=False)
    try:
        why = _recall(memory)
    finally:
        memory.close()
    assert why["models"]["ranker"] == model.meta["file"]
    assert why["channels"] == (["bm25", "dense"] if model.meta["embedder"] else ["bm25"])
    assert (why["models"]["cross_encoder"] is not None) == model.uses_reranker
    scored = [c for c in why["candidates"] if c["features"]["cross_encoder"] is not None]
    assert len(scored) == (min(3, model.rerank_depth) if model.uses_reranker else 0)
    assert not any("retrain" in n.lower() for n in why["notes"])
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert {c["ref"] for c in why["candidates"] if c["outcome"] == "in_slate"} >= {"kafka", "replay"}


@pytest.fixture(scope="module")
def cross_ranker(default_home: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A ranker trained with the default set's cross-encoder on its first 5 candidates."""
    data = tmp_path_factory.mktemp("conversations")
    for i in range(3):
        write_locomo(data / f"conv-{i}.json", seed=i)
    home = _copy(default_home, tmp_path_factory.mktemp("cross"), reranker=True)
    out = home / "cross-ranker.json"
    mp = pytest.MonkeyPatch()
    mp.setenv(HOME_ENV, str(home))
    try:
        assert main(["train", "locomo", str(data), "--allow-small", "--rerank-depth", "5",
                     "--rerank-tokens", "64", "--out", str(out)]) == 0
    finally:
        mp.undo()
    return home, out


def test_training_with_a_cross_encoder_records_it_with_its_depth_and_truncation(cross_ranker):
    _, out = cross_ranker
    model = choose_ranker(None, None, out)[0]
    assert model.uses_reranker and model.meta["reranker"].startswith(f"{RERANKER}@")
    assert (model.rerank_depth, model.rerank_tokens) == (5, 64)


def test_a_ranker_is_matched_on_the_instruction_its_queries_were_embedded_with(default_home, tmp_path, monkeypatch):
    """The dense scores a ranker learned from hold for queries embedded as they were in training:
    the embedder's weights and its query instruction (its passages' vectors record the weights
    only). The shipped rankers read queries as they are, so an instruction gets the retrain note
    until a ranker is trained with it; that ranker is then used without one."""
    home = _copy(default_home, tmp_path)
    monkeypatch.setenv(HOME_ENV, str(home))
    assert main(["models", "install", "--default", "--query-instruction", BGE]) == 0
    embedder = active(home)["embedder"]
    assert embedder.identity == active(default_home)["embedder"].identity != embedder.ranked_as
    memory = Memory.open(home, background=False)
    try:
        why = _recall(memory)
    finally:
        memory.close()
    assert why["dense_query"] == BGE + QUERY
    assert any(RETRAIN in n and embedder.ranked_as in n for n in why["notes"])
    data = tmp_path / "conversations"
    data.mkdir()
    for i in range(2):
        write_locomo(data / f"conv-{i}.json", seed=i)
    out = tmp_path / "instructed-ranker.json"
    assert main(["train", "locomo", str(data), "--allow-small", "--rerank-depth", "5", "--out", str(out)]) == 0
    model = choose_ranker(None, None, out)[0]
    assert model.meta["embedder"] == embedder.ranked_as and model.mismatch(*_identities(home)) is None
    assert model.mismatch(embedder.identity, active(home)["reranker"].identity) is not None


def test_serve_rerank_limit_sets_how_many_candidates_the_cross_encoder_scores(cross_ranker, tmp_path):
    home, out = cross_ranker
    memory = Memory.open(_copy(home, tmp_path), background=False, ranker_model=out, rerank_limit=2)
    try:
        why = _recall(memory)
    finally:
        memory.close()
    scored = [c for c in why["candidates"] if c["features"]["cross_encoder"] is not None]
    assert why["models"]["cross_encoder_depth"] == 2 and len(scored) == 2
    assert all(c["features"]["cross_encoder_z"] is not None for c in scored)
    assert sorted(c["pool_rank"] for c in scored) == [1, 2]  # the head of the pool, in pool order


def test_a_recall_never_runs_a_cross_encoder_its_ranker_does_not_use(default_home, tmp_path):
    home = _copy(default_home, tmp_path, reranker=True)
    plain = next(m for m in shipped_models() if m.meta["embedder"] and not m.uses_reranker)
    path = Path(__file__).resolve().parents[2] / "ranking" / "models" / plain.meta["file"]
    memory = Memory.open(home, background=False, ranker_model=path)  # the cross-encoder stays active
    try:
        assert memory.ranker.reranker is None
        why = _recall(memory)
    finally:
        memory.close()
    assert why["models"]["cross_encoder"] is None
    assert all(c["features"]["cross_encoder"] is None and c["features"]["cross_encoder_z"] is None
               for c in why["candidates"])
    assert any("the cross-encoder is not run" in n and RETRAIN in n for n in why["notes"])


def test_a_foreign_model_falls_back_to_the_closest_ranker_with_a_note(minilm_home, tmp_path, caplog):
    memory = Memory.open(_copy(minilm_home, tmp_path), background=False)
    try:
        why = _recall(memory)
        memory.recall("p", "and the plants?")
    finally:
        memory.close()
    assert why["models"]["ranker"] == "embedder-ranker.json"  # an embedder, no cross-encoder, as installed
    notes = [n for n in why["notes"] if "retrain" in n.lower()]
    assert len(notes) == 1 and "minilm@" in notes[0] and RETRAIN in notes[0]
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == notes  # once, although it recalled twice


def test_a_fresh_default_install_runs_the_demo_without_a_warning(default_home, tmp_path):
    home = _copy(default_home, tmp_path)
    done = subprocess.run([sys.executable, "-m", "agentmemrec.server.cli", "demo", "--home", str(home)],
                          capture_output=True, text=True, timeout=240, env={**os.environ, HOME_ENV: str(home)})
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr and "warn" not in done.stderr.lower()
    model, _ = choose_ranker(*_identities(home))
    assert f"ranker {model.meta['file']}" in done.stdout and f"embedder {EMBEDDER}@" in done.stdout
    assert "channels bm25 + dense" in done.stdout and "dense#" in done.stdout
    assert ("cross " in done.stdout) == model.uses_reranker
