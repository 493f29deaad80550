"""The cross-encoder: one relevance logit per (query, unit) pair.

Its cost follows the tokens it reads: about 10 ms a 50-token pair for the default CPU set's
ms-marco-MiniLM-L-12-v2 (int8) on 2 cores, tens of milliseconds for 128 pairs of an
XLM-RoBERTa-large model on a GPU. So it scores only the first `limit` candidates in pool order,
each pair cut at `max_tokens`; both are what the active ranker was trained with (its model file
records them), the rest keep a missing score, and the explanation shows which were scored.

On CPU each pair runs alone, on a one-thread session, the pairs spread over the cores. A pair's
logit is then its own: the int8 model quantizes its activations with one scale over the whole
batch, so in a padded batch the other pairs and the padding moved a logit by up to 0.8 (on the
10,000-unit bench's pools), and a unit's score depended on which candidates it was scored with.
No padding is computed either, and two one-thread runs use 2 cores better than one two-thread run
(docs/models.md). On a GPU the pairs run in batches of similar length.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from agentmemrec.indexing.dense.embedder import batches_by_length, load_tokenizer, pad
from agentmemrec.indexing.dense.models import Manifest, read_manifest
from agentmemrec.indexing.dense.onnx_runtime import open_model
from agentmemrec.indexing.store.embedding_cache import EmbeddingCache

BATCH = 16  # pairs a GPU run takes
_PAIRS = ThreadPoolExecutor(max_workers=min(os.cpu_count() or 1, 8), thread_name_prefix="cross-encoder")
DEFAULT_LIMIT = 16  # cross-validated as complete as 32 on LoCoMo at half the cost (docs/evaluation.md)


class Reranker(Protocol):
    identity: str  # model name and weight hash
    device: str
    limit: int  # how many pool candidates it scores
    max_tokens: int  # where a (query, unit) pair is cut

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray: ...


class CachedReranker:
    """A reranker whose logits are kept by (model, pair truncation, query, text) across runs, so
    training, `--cv` and `--ablation` score each pair once (evaluation only)."""

    def __init__(self, reranker: "OnnxReranker", cache: EmbeddingCache) -> None:
        self.inner, self.cache = reranker, cache
        self.identity, self.device, self.limit = reranker.identity, reranker.device, reranker.limit
        self.max_tokens = reranker.max_tokens
        self.key = f"cross-encoder:{reranker.identity}:{reranker.max_tokens}:{reranker.scoring}"

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        pairs = [f"{query}\x00{t}" for t in texts]
        rows = self.cache.through(self.key, pairs, lambda missing: self.inner.score(query, [texts[i] for i in missing]), 1)
        return rows[:, 0]


class OnnxReranker:
    def __init__(self, model_dir: Path, device: str = "auto", manifest: Manifest | None = None,
                 limit: int = DEFAULT_LIMIT, max_tokens: int | None = None) -> None:
        self.manifest = manifest or read_manifest(model_dir)
        self.session, plan = open_model(model_dir, self.manifest, device, cpu_threads=1)
        self.device, self.precision = plan.device, plan.precision
        self.scoring = "pair" if self.device == "cpu" else "batch"  # a GPU is fed batches
        self.limit = limit
        self.max_tokens = min(max_tokens or self.manifest.max_length, self.manifest.max_length)
        # The pair is cut from its longer side (the unit, almost always) to max_tokens.
        self.tokenizer = load_tokenizer(model_dir, self.max_tokens)
        self.identity = self.manifest.identity
        self.pad_id = self.tokenizer.token_to_id("<pad>") or self.tokenizer.token_to_id("[PAD]") or 0
        self.inputs = {i.name for i in self.session.get_inputs()}
        self._lock = threading.Lock()

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """Raw logits (higher is more relevant), one per text, in the given order."""
        if not texts:
            return np.zeros(0, dtype=np.float32)
        encoded = self.tokenizer.encode_batch([(query, t) for t in texts])
        out = np.zeros(len(texts), dtype=np.float32)
        if self.scoring == "pair":  # the longest first, so that the cores finish together
            order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i].ids))
            out[order] = list(_PAIRS.map(lambda i: self._run([i], encoded)[0], order))
            return out
        for idx in batches_by_length([len(e.ids) for e in encoded], BATCH):
            with self._lock:
                out[idx] = self._run(idx, encoded)
        return out

    def _run(self, idx: list[int], encoded: list) -> np.ndarray:
        batch, mask = pad([encoded[i].ids for i in idx], self.pad_id)
        feed = {"input_ids": batch, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.array([_type_ids(encoded[i].type_ids, batch.shape[1]) for i in idx])
        return self.session.run(None, feed)[0].reshape(len(idx), -1)[:, 0]


def _type_ids(types: list[int], width: int) -> list[int]:
    return types + [0] * (width - len(types))
