"""Dense text embeddings: the `Embedder` protocol and its ONNX Runtime implementation."""

from __future__ import annotations

import threading
from contextlib import nullcontext
from pathlib import Path
from typing import Protocol

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from agentmemrec.indexing.dense.models import Manifest, ranked_as, read_manifest
from agentmemrec.indexing.dense.onnx_runtime import open_model, open_session

BATCH = 32
# Tokens per batch on CPU, padding included: ONNX Runtime's arena keeps the largest batch's
# activations (32 texts of 512 tokens: about 2 GB for the process's life), and smaller batches also
# ran faster: 512 beat 1,024 and none on both (bench/results/embed-batches.json, docs/performance.md)
CPU_TOKENS = 512
QUERY_SESSION_MAX_BYTES = 256 << 20  # a model folder up to this size also gets a query session


class Embedder(Protocol):
    identity: str  # model name and content hash: what stored vectors record
    dim: int
    device: str
    query_instruction: str  # put before each query (DenseChannel.query_text), "" for none

    def embed(self, texts: list[str]) -> np.ndarray: ...  # (n, dim) float32, L2-normalised


def ranker_identity(embedder: Embedder | None) -> str | None:
    """What a ranker file records for `embedder` (models.ranked_as), None for no embedder."""
    return ranked_as(embedder.identity, embedder.query_instruction) if embedder else None


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Average of the token vectors under the attention mask (sentence-transformers' mean pooling)."""
    weights = mask[..., None].astype(np.float32)
    return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


def cls_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The first token's vector (BERT's [CLS], XLM-RoBERTa's <s>), as bge-m3 pools."""
    return hidden[:, 0]


def l2_normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def load_tokenizer(model_dir: Path, max_length: int) -> Tokenizer:
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.enable_truncation(max_length=max_length, strategy="longest_first")
    tok.no_padding()
    return tok


def batches_by_length(lengths: list[int], size: int, tokens: int | None = None) -> list[list[int]]:
    """Indices grouped so each batch holds texts of similar length (less padding): at most `size`
    of them and, with `tokens`, at most that many tokens padded."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out: list[list[int]] = [[]]
    for i in order:  # shortest first: the text added is the batch's widest
        if len(out[-1]) == size or (tokens and out[-1] and (len(out[-1]) + 1) * lengths[i] > tokens):
            out.append([])
        out[-1].append(i)
    return out if order else []


def pad(ids: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(x) for x in ids)
    out = np.full((len(ids), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(ids), width), dtype=np.int64)
    for i, row in enumerate(ids):
        out[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return out, mask


class OnnxEmbedder:
    """An encoder exported to ONNX, pooled and normalised as its manifest says."""

    def __init__(self, model_dir: Path, device: str = "auto", manifest: Manifest | None = None) -> None:
        """`device` is a spec: auto, cpu or cuda, optionally :fp32 or :fp16 (onnx_runtime.parse_spec)."""
        self.manifest = manifest or read_manifest(model_dir)
        self.identity, self.query_instruction = self.manifest.identity, self.manifest.instruction
        self.dim = self.manifest.dim
        self.session, plan = open_model(model_dir, self.manifest, device)
        self.device, self.precision = plan.device, plan.precision
        self.tokenizer = load_tokenizer(model_dir, self.manifest.max_length)
        self.pad_id = self.tokenizer.token_to_id("[PAD]") or self.tokenizer.token_to_id("<pad>") or 0
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.pool = mean_pool if self.manifest.pooling == "mean" else cls_pool
        self._lock = threading.Lock()  # one run at a time: the session already uses every core
        self._query = self._query_session(model_dir, plan.model_file)

    def _query_session(self, model_dir: Path, model_file: str) -> ort.InferenceSession | None:
        """On CPU, a small model's second session on one thread, for one text at a time (a query):
        a short input waits for a second thread longer than it saves (3.3 ms against 4.6 for
        bge-small's int8 export on two cores), and a query then never waits for a backfill's batch
        to finish. Its vectors are the first session's, bit for bit; a large model has none."""
        if self.device != "cpu" or sum(f.stat().st_size for f in model_dir.iterdir()) > QUERY_SESSION_MAX_BYTES:
            return None  # (the folder: a large export keeps its weights beside the graph file)
        return open_session(model_dir / model_file, "cpu", threads=1)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        query = len(texts) == 1 and self._query is not None  # ONNX Runtime runs a session's calls concurrently
        session, lock = (self._query, nullcontext()) if query else (self.session, self._lock)
        encoded = [e.ids for e in self.tokenizer.encode_batch(texts)]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        budget = CPU_TOKENS if self.device == "cpu" else None  # a GPU's memory was not measured
        for idx in batches_by_length([len(e) for e in encoded], BATCH, budget):
            ids, mask = pad([encoded[i] for i in idx], self.pad_id)
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            with lock:
                hidden = session.run(None, feed)[0]
            out[idx] = self.pool(hidden.astype(np.float32), mask)
        return l2_normalise(out) if self.manifest.normalize else out
