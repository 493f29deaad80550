"""The models a Memory opens with: the home's ONNX embedder (or an inference server's), and the
learned ranker chosen for the active models' identities with the cross-encoder it was trained
with, opened only if it uses one (here, or on the inference server)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from agentmemrec.indexing.dense.embedder import Embedder, OnnxEmbedder, ranker_identity
from agentmemrec.indexing.dense.models import INSTALL_HINT, Manifest, active, models_dir
from agentmemrec.indexing.dense.index import DenseChannel
from agentmemrec.indexing.dense.remote import RemoteEmbedder, RemoteReranker, Served, Unreachable, connect
from agentmemrec.indexing.errors import InputError, StoreError
from agentmemrec.ranking.candidates import Channel
from agentmemrec.ranking.cross_encoder import OnnxReranker, Reranker
from agentmemrec.ranking.learned import LearnedRanker, RankerModel, choose_ranker
from agentmemrec.ranking.ranker import PoolOrderRanker, Ranker


def open_models(home: Path, device: str, path: Path | None, rerank_limit: int | None = None,
                inference: str | None = None, token: str | None = None
                ) -> tuple[Embedder | None, Ranker, list[str]]:
    """The embedder and the ranker, with the models of the inference servers `inference` names
    (comma-separated, sent `token`) instead of the home's, and what is degraded (said in every
    explanation)."""
    served, problems = _connect(home, inference, token) if inference else (None, [])
    embedder, embedder_problems = open_embedder(home, device, served)
    ranker, ranker_problems = load_ranker(home, device, path, embedder, rerank_limit, served)
    return embedder, ranker, problems + embedder_problems + ranker_problems


def _connect(home: Path, urls: str, token: str | None) -> tuple[dict[str, Served], list[str]]:
    """The served models this home may use; none if its own cannot be read to check them against."""
    try:
        installed = active(home)
    except StoreError as exc:
        return {}, [f"models under {home} unreadable ({exc}): the inference servers' models cannot be "
                    "checked against them, so none is used; candidates come from BM25 only"]
    return connect(urls, installed, token)


def open_embedder(home: Path, device: str, served: dict[str, Served] | None = None
                  ) -> tuple[Embedder | None, list[str]]:
    """The active embedder (the served one when `served` is given), or None and why (a broken
    model degrades to BM25, said in every explanation)."""
    try:
        if served is None:
            return load_embedder(home, device), []
        if "embedder" in served:
            return RemoteEmbedder(served["embedder"]), []
        return None, ["no usable embedder on the inference servers: candidates come from BM25 only"]
    except StoreError as exc:
        return None, [f"embedder unusable ({exc}); candidates come from BM25 only"]


def load_ranker(home: Path, device: str, path: Path | None, embedder: Embedder | None,
                rerank_limit: int | None = None, served: dict[str, Served] | None = None
                ) -> tuple[Ranker, list[str]]:
    """The ranker for the active models (`choose_ranker`), with the cross-encoder opened only
    if that ranker uses it, scoring as many candidates as it was trained with (or
    `rerank_limit`); fusion order if the model file cannot be read. With `served`, the
    cross-encoder is the inference server's, cut where that server cuts pairs."""
    problems: list[str] = []
    remote = served.get("reranker") if served is not None else None
    manifest = None
    if served is None:
        try:
            manifest = active(home)["reranker"]
        except StoreError as exc:
            problems.append(f"cross-encoder unusable ({exc}); ranking without its score")
    identity = remote.identity if remote else manifest.identity if manifest else None
    try:
        model, note = choose_ranker(ranker_identity(embedder), identity, path)
    except StoreError as exc:
        return PoolOrderRanker(), problems + [f"{exc}; ranking by fusion order instead"]
    reranker: Reranker | None = None
    if model.uses_reranker and remote is not None:
        reranker = RemoteReranker(remote, rerank_limit or model.rerank_depth)
        problems += _cut_elsewhere(model, remote)
    elif model.uses_reranker and manifest is not None:
        try:
            reranker = OnnxReranker(models_dir(home) / manifest.name, device, manifest,
                                    rerank_limit or model.rerank_depth, model.rerank_tokens)
        except StoreError as exc:
            problems.append(f"cross-encoder unusable ({exc}); ranking without its score")
    return LearnedRanker(model, reranker), problems + ([note] if note else [])


def _cut_elsewhere(model: RankerModel, remote: Served) -> list[str]:
    """A served cross-encoder that cuts pairs elsewhere than the ranker was trained with gives
    other logits: said, with the fix (TEI cuts at the model's maximum)."""
    if model.rerank_tokens is None or remote.max_tokens == model.rerank_tokens:
        return []
    return [f"the inference server at {remote.url} cuts cross-encoder pairs at {remote.max_tokens} tokens, "
            f"ranker {model.meta['file']} was trained at {model.rerank_tokens}, so its scores may be off: "
            f"serve it with agentmemrec models serve --rerank-tokens {model.rerank_tokens}"]


def serving_models(home: Path, device: str, rerank_tokens: int | None = None
                   ) -> tuple[OnnxEmbedder | None, OnnxReranker | None]:
    """What `agentmemrec models serve` runs: the home's active models, the cross-encoder cutting
    pairs at `rerank_tokens`, by default where the shipped ranker for these models was trained."""
    roles: dict[str, Manifest | None] = active(home)
    embedder = load_embedder(home, device)
    manifest = roles["reranker"]
    if embedder is None and manifest is None:
        raise InputError(f"no active model to serve under {home}; install one with: {INSTALL_HINT}")
    if manifest is None:
        return embedder, None
    tokens = rerank_tokens or choose_ranker(ranker_identity(embedder), manifest.identity)[0].rerank_tokens
    return embedder, OnnxReranker(models_dir(home) / manifest.name, device, manifest, max_tokens=tokens)


def load_embedder(home: Path, device: str = "auto") -> OnnxEmbedder | None:
    manifest = active(home)["embedder"]
    return OnnxEmbedder(models_dir(home) / manifest.name, device, manifest) if manifest else None


def without_served(exc: Unreachable, channels: Sequence[Channel], ranker: Ranker
                   ) -> tuple[list[Channel], Ranker, str]:
    """The channels and ranker of one recall without the served model that did not answer, and
    the note that says so; the error again if that model is not in them any more."""
    if exc.role == "embedder" and any(isinstance(ch, DenseChannel) for ch in channels):
        return ([ch for ch in channels if not isinstance(ch, DenseChannel)], ranker,
                f"{exc}: candidates come from BM25 only for this recall")
    if exc.role == "cross-encoder" and getattr(ranker, "reranker", None) is not None \
            and hasattr(ranker, "without_reranker"):
        return list(channels), ranker.without_reranker(), f"{exc}: ranking without the cross-encoder's score for this recall"
    raise exc
