"""The models a Memory opens with: the home's ONNX embedder, and the learned ranker chosen for
the active models' identities with the cross-encoder it was trained with (opened only if it
uses one)."""

from __future__ import annotations

from pathlib import Path

from agentmemrec.indexing.dense.embedder import Embedder, OnnxEmbedder
from agentmemrec.indexing.dense.models import active, models_dir
from agentmemrec.indexing.errors import StoreError
from agentmemrec.ranking.cross_encoder import OnnxReranker
from agentmemrec.ranking.learned import LearnedRanker, choose_ranker
from agentmemrec.ranking.ranker import PoolOrderRanker, Ranker


def open_embedder(home: Path, device: str) -> tuple[Embedder | None, list[str]]:
    """The active embedder, or None and why (a broken model degrades to BM25, said in every
    explanation)."""
    try:
        return load_embedder(home, device), []
    except StoreError as exc:
        return None, [f"embedder unusable ({exc}); candidates come from BM25 only"]


def load_ranker(home: Path, device: str, path: Path | None, embedder: Embedder | None,
                rerank_limit: int | None = None) -> tuple[Ranker, list[str]]:
    """The ranker for the active models (`choose_ranker`), with the cross-encoder opened only
    if that ranker uses it, scoring as many candidates as it was trained with (or
    `rerank_limit`); fusion order if the model file cannot be read."""
    problems: list[str] = []
    try:
        manifest = active(home)["reranker"]
    except StoreError as exc:
        manifest = None
        problems.append(f"cross-encoder unusable ({exc}); ranking without its score")
    try:
        model, note = choose_ranker(embedder.identity if embedder else None,
                                    manifest.identity if manifest else None, path)
    except StoreError as exc:
        return PoolOrderRanker(), problems + [f"{exc}; ranking by fusion order instead"]
    reranker = None
    if model.uses_reranker and manifest is not None:
        try:
            reranker = OnnxReranker(models_dir(home) / manifest.name, device, manifest,
                                    rerank_limit or model.rerank_depth, model.rerank_tokens)
        except StoreError as exc:
            problems.append(f"cross-encoder unusable ({exc}); ranking without its score")
    return LearnedRanker(model, reranker), problems + ([note] if note else [])


def load_embedder(home: Path, device: str = "auto") -> Embedder | None:
    manifest = active(home)["embedder"]
    return OnnxEmbedder(models_dir(home) / manifest.name, device, manifest) if manifest else None
