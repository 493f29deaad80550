"""The cross-encoder (bge-reranker-v2-m3 by default): one relevance logit per (query, unit) pair.

Scoring a pool of 128 pairs with an XLM-RoBERTa-large model is about 20 TFLOP: tens of
milliseconds on a GPU, many seconds on a laptop CPU. On CPU only the top `cpu_limit` candidates
of the pool are scored; the rest keep a missing score, and the explanation says which were scored.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from agentmemrec.indexing.dense.embedder import batches_by_length, load_tokenizer, pad
from agentmemrec.indexing.dense.models import Manifest, active, models_dir, read_manifest
from agentmemrec.indexing.dense.onnx_runtime import open_model

BATCH = 16
CPU_LIMIT = 24  # ~0.4 s a 256-token pair for XLM-R large on 2 cores: about 10 s, well inside 60 s
GPU_LIMIT = 128


class Reranker(Protocol):
    identity: str
    device: str
    limit: int  # how many pool candidates it scores on this device

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray: ...


class OnnxReranker:
    def __init__(self, model_dir: Path, device: str = "auto", manifest: Manifest | None = None,
                 limit: int | None = None) -> None:
        self.manifest = manifest or read_manifest(model_dir)
        self.identity = self.manifest.identity
        self.session, plan = open_model(model_dir, self.manifest, device)
        self.device, self.precision = plan.device, plan.precision
        self.limit = limit or (GPU_LIMIT if self.device == "cuda" else CPU_LIMIT)
        self.tokenizer = load_tokenizer(model_dir, self.manifest.max_length)
        self.pad_id = self.tokenizer.token_to_id("<pad>") or self.tokenizer.token_to_id("[PAD]") or 0
        self.inputs = {i.name for i in self.session.get_inputs()}
        self._lock = threading.Lock()

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """Raw logits (higher is more relevant), one per text, in the given order."""
        if not texts:
            return np.zeros(0, dtype=np.float32)
        encoded = self.tokenizer.encode_batch([(query, t) for t in texts])
        ids = [e.ids for e in encoded]
        out = np.zeros(len(texts), dtype=np.float32)
        for idx in batches_by_length([len(x) for x in ids], BATCH):
            batch, mask = pad([ids[i] for i in idx], self.pad_id)
            feed = {"input_ids": batch, "attention_mask": mask}
            if "token_type_ids" in self.inputs:
                feed["token_type_ids"] = np.array([_type_ids(encoded[i].type_ids, batch.shape[1]) for i in idx])
            with self._lock:
                logits = self.session.run(None, feed)[0]
            out[idx] = logits.reshape(len(idx), -1)[:, 0]
        return out


def _type_ids(types: list[int], width: int) -> list[int]:
    return types + [0] * (width - len(types))


def load_reranker(home: Path, device: str = "auto", limit: int | None = None) -> OnnxReranker | None:
    manifest = active(home)["reranker"]
    return OnnxReranker(models_dir(home) / manifest.name, device, manifest, limit) if manifest else None
