"""Embedding and cross-encoding on an inference server instead of in this process.

The API is Hugging Face text-embeddings-inference's (TEI), which other memory servers speak as
well: `GET /info` says what a server runs, `POST /embed` {"inputs", "normalize", "truncate"}
returns a vector per input, `POST /rerank` {"query", "texts", "raw_scores", "truncate"} returns
[{"index", "score"}]. A TEI server runs one model, named by `model_id` and `model_sha`;
`agentmemrec models serve` (server/inference.py) answers the same API with a home's ONNX
models, both roles on one server, and names each by the identity its vectors record under the
`agentmemrec` key of `/info`. One GPU machine so serves many CPU replicas.

Identity is checked, never assumed: a served model that is not the one this home has installed
for its role is refused, so vectors of two models are never mixed. A server started with a token
wants it as a bearer token on every request; a request carries at most MAX_BODY_BYTES of text
(TEI refuses a body over 2 MB by default, `models serve` over its --max-request-bytes).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

import httpx2
import numpy as np

from agentmemrec.indexing.dense.models import Manifest
from agentmemrec.indexing.errors import StoreError

TIMEOUT_S = 60.0  # a batch of 256 long texts on a busy CPU server
# a server that has not accepted the connection by then is taken as down: a recall goes on
# without its models rather than wait out a batch's timeout for a host that is gone
CONNECT_TIMEOUT_S = 5.0
CLIENT_BATCH = 32  # TEI's default max_client_batch_size
MAX_BODY_BYTES = 1 << 20  # of texts per request (a longer text goes alone)

log = logging.getLogger(__name__)
_DOWN: set[str] = set()  # the servers that did not answer the last request a recall's model sent them
_DOWN_LOCK = threading.Lock()


class Unreachable(StoreError):
    """The inference server did not answer (down, restarting, network): a recall goes on without
    the model it serves, for that recall only, and uses it again once it answers."""

    def __init__(self, message: str, role: str | None) -> None:
        super().__init__(message)
        self.role = role


@dataclass(frozen=True)
class Served:
    """One model an inference server runs."""

    url: str
    role: str  # "embedder" | "reranker"
    identity: str
    device: str
    dim: int | None = None
    batch: int = CLIENT_BATCH
    max_tokens: int | None = None  # where the server cuts a text (a reranker: a pair)
    query_instruction: str = ""  # an embedder's, as our server names it (a TEI server applies its own prompts)
    token: str | None = field(default=None, repr=False)  # the server's bearer token


class InferenceClient:
    """JSON over HTTP to one server; failures are `StoreError`s that name it, `Unreachable` when
    it did not answer. The clients of a memory's models (`role` given) log once when their server
    stops answering and once when it answers again, not at every request in between."""

    def __init__(self, url: str, role: str | None = None, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.role = role
        self._http = httpx2.Client(timeout=httpx2.Timeout(TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
                                   headers={"Authorization": f"Bearer {token}"} if token else None)
        self._lock = threading.Lock()

    def get(self, path: str) -> Any:
        return self._send("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._send("POST", path, body)

    def _send(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        try:
            reply = self._http.request(method, self.url + path, json=body)
        except httpx2.HTTPError as exc:
            message = f"the inference server at {self.url} cannot be reached ({exc})"
            if self.role is not None and self._went(down=True):
                log.warning("%s: recalls go on without its models until it answers again", message)
            raise Unreachable(message, self.role) from exc
        if self.role is not None and self._went(down=False):
            log.warning("the inference server at %s answers again: recalls use its models", self.url)
        if reply.status_code != 200:
            raise StoreError(f"the inference server at {self.url} answered {path} with "
                             f"{reply.status_code}: {reply.text[:300]}")
        return reply.json()

    def _went(self, down: bool) -> bool:
        """Whether this request changed whether the server answers."""
        with _DOWN_LOCK:
            changed = (self.url in _DOWN) != down
            (_DOWN.add if down else _DOWN.discard)(self.url)
        return changed


def served_models(url: str, token: str | None = None) -> list[Served]:
    """What the server at `url` runs, from its /info (ours names both roles; TEI's one model)."""
    client = InferenceClient(url, token=token)
    info = client.get("/info")
    ours = info.get("agentmemrec")
    if isinstance(ours, dict):
        return [Served(url, role, m["identity"], m.get("device", "remote"), m.get("dim"),
                       int(info.get("max_client_batch_size") or CLIENT_BATCH), m.get("max_tokens"),
                       m.get("query_instruction") or "", token)
                for role, m in ours.items() if isinstance(m, dict)]
    kind = info.get("model_type") or {}
    role = "reranker" if "reranker" in kind else "embedder" if "embedding" in kind else None
    if role is None:
        raise StoreError(f"the inference server at {url} runs neither an embedding nor a reranking model: {kind}")
    sha = str(info.get("model_sha") or "")
    identity = f"{info.get('model_id')}@{sha[:12]}" if sha else str(info.get("model_id"))
    return [Served(url, role, identity, "remote", None, int(info.get("max_client_batch_size") or CLIENT_BATCH),
                   info.get("max_input_length"), token=token)]


def check_identity(model: Served, installed: Manifest | None) -> str | None:
    """Why a served model is refused (None: accepted): it is not this home's model for the role."""
    if installed is None or installed.identity == model.identity:
        return None
    return (f"the inference server at {model.url} runs {model.role} {model.identity}, not this home's "
            f"{installed.identity}: refused, so vectors of two models are never mixed (serve the same "
            f"model there, or install it here with agentmemrec models install)")


def connect(urls: str, installed: dict[str, Manifest | None], token: str | None = None
            ) -> tuple[dict[str, Served], list[str]]:
    """The models the servers at `urls` (comma-separated) may be used for, by role, and why any
    other was refused. A role this home has a model for must be served with that very model."""
    usable: dict[str, Served] = {}
    problems: list[str] = []
    for url in filter(None, (u.strip() for u in urls.split(","))):
        try:
            served = served_models(url, token)
        except StoreError as exc:
            problems.append(str(exc))
            continue
        for model in served:
            refusal = check_identity(model, installed.get(model.role))
            if refusal is None:
                usable.setdefault(model.role, model)
            else:
                problems.append(refusal)
    return usable, problems


def request_slices(texts: Sequence[str], batch: int, fixed: int = 0) -> list[tuple[int, int]]:
    """[start, end) runs of at most `batch` texts and MAX_BODY_BYTES of text with `fixed` (a
    query sent with each); a text over that goes alone."""
    slices, start, size = [], 0, fixed
    for i, text in enumerate(texts):
        n = len(text.encode())
        if i > start and (i - start == batch or size + n > MAX_BODY_BYTES):
            slices.append((start, i))
            start, size = i, fixed
        size += n
    return slices + ([(start, len(texts))] if start < len(texts) else [])


class RemoteEmbedder:
    """The `Embedder` protocol over POST /embed."""

    def __init__(self, model: Served) -> None:
        self.client, self.batch = InferenceClient(model.url, "embedder", model.token), model.batch
        self.identity, self.device, self.query_instruction = model.identity, model.device, model.query_instruction
        self.dim = model.dim or len(self._embed(["dimension probe"])[0])

    def _embed(self, texts: list[str]) -> list[list[float]]:
        return self.client.post("/embed", {"inputs": texts, "normalize": True, "truncate": True})

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start, end in request_slices(texts, self.batch):
            rows = np.asarray(self._embed(texts[start:end]), dtype=np.float32)
            if rows.shape != (end - start, self.dim):
                raise StoreError(f"the inference server at {self.client.url} returned vectors of shape "
                                 f"{rows.shape} for {self.identity} (dim {self.dim})")
            out[start:start + len(rows)] = rows
        return out


class RemoteReranker:
    """The `Reranker` protocol over POST /rerank: raw logits, as the local cross-encoder gives."""

    def __init__(self, model: Served, limit: int) -> None:
        self.client, self.batch = InferenceClient(model.url, "cross-encoder", model.token), model.batch
        self.identity, self.device, self.limit = model.identity, model.device, limit
        self.max_tokens = model.max_tokens  # the server's: a client cannot cut pairs without the tokenizer

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros(len(texts), dtype=np.float32)
        for start, end in request_slices(texts, self.batch, len(query.encode())):
            part = list(texts[start:end])
            for hit in self.client.post("/rerank", {"query": query, "texts": part, "raw_scores": True,
                                                    "truncate": True, "return_text": False}):
                out[start + int(hit["index"])] = float(hit["score"])
        return out
