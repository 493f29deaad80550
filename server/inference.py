"""`agentmemrec models serve`: a home's ONNX embedder and cross-encoder behind the API of Hugging
Face text-embeddings-inference, so one GPU machine embeds and cross-encodes for many CPU replicas
(`serve --inference URL`, indexing/dense/remote.py).

`/info` is TEI's (the embedder's `model_id` and `model_sha`) plus an `agentmemrec` key that
names each role's identity, dimension and device: what a client checks before it stores a vector.
`/embed` and `/rerank` take TEI's bodies; the models run in worker threads, one batch at a time
each (their sessions already use every core or the GPU). A body over `max_request_bytes` gets 413
before it is read whole, a text over MAX_TEXT_CHARS 422, a body that is not JSON (or nested past
what the parser can follow) 400; with a token, every route but `/health` wants it as a bearer
token (401 otherwise).
"""

from __future__ import annotations

import hmac
import json
from typing import Any

import anyio
import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentmemrec.indexing.dense.embedder import OnnxEmbedder
from agentmemrec.ranking.cross_encoder import OnnxReranker
from agentmemrec.indexing.units import MAX_TEXT_BYTES
from agentmemrec.server.settings import MAX_REQUEST_BYTES, VERSION

MAX_INPUTS = 256  # texts per request (TEI's default client batch is 32)
MAX_TEXT_CHARS = 2 * MAX_TEXT_BYTES  # a text, or a query: a stored unit's text is at most 128 KiB
UNAUTHORIZED = ("this server wants its token as a bearer token (clients send AGENTMEMREC_INFERENCE_TOKEN "
                "from their environment)")


class TooLarge(Exception):
    """A body over the server's limit: answered 413 before the rest of it is read."""


class Refused(Exception):
    """A request the caller can fix: answered 422 with TEI's error body."""


def _texts(value: Any, what: str) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise Refused(f"{what} must be a string or a non-empty list of strings")
    if len(texts) > MAX_INPUTS:
        raise Refused(f"{what} holds {len(texts)} texts; send at most {MAX_INPUTS} per request")
    longest = max(len(t) for t in texts)
    if longest > MAX_TEXT_CHARS:
        raise Refused(f"{what} holds a text of {longest} characters; send at most {MAX_TEXT_CHARS} each")
    return texts


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _error(message: str, kind: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message, "error_type": kind}, status_code=status)


def info(embedder: OnnxEmbedder | None, reranker: OnnxReranker | None) -> dict[str, Any]:
    first = embedder or reranker
    roles = {role: {"identity": m.identity, "device": m.device,
                    **({"dim": m.dim, "query_instruction": m.query_instruction} if role == "embedder" else {}),
                    "max_tokens": m.manifest.max_length if role == "embedder" else m.max_tokens}
             for role, m in (("embedder", embedder), ("reranker", reranker)) if m is not None}
    return {"model_id": first.manifest.name, "model_sha": first.manifest.sha256,
            "model_type": {"embedding": {"pooling": embedder.manifest.pooling}} if embedder else {"reranker": {}},
            "max_input_length": first.manifest.max_length, "max_client_batch_size": MAX_INPUTS,
            "version": VERSION, "agentmemrec": roles}


def inference_app(embedder: OnnxEmbedder | None, reranker: OnnxReranker | None,
                  max_request_bytes: int = MAX_REQUEST_BYTES, token: str | None = None) -> Starlette:
    described = info(embedder, reranker)
    expected = f"Bearer {token}".encode() if token else None

    def authorized(request: Request) -> bool:
        return expected is None or hmac.compare_digest(request.headers.get("authorization", "").encode(), expected)

    async def handle(request: Request, model: Any, run: Any) -> JSONResponse:
        if not authorized(request):
            return _error(UNAUTHORIZED, "Unauthorized", 401)
        if model is None:
            return _error(f"this server runs no model for {request.url.path}", "Backend", 424)
        try:
            body = json.loads(await _body(request, max_request_bytes))
        except TooLarge:
            return _error(f"the body is over this server's {max_request_bytes}-byte limit; send fewer or "
                          "shorter texts per request", "Validation", 413)
        except (ValueError, RecursionError):
            return _error("the body is not JSON", "Validation", 400)
        try:
            if not isinstance(body, dict):
                raise Refused("the body must be a JSON object")
            return JSONResponse(await anyio.to_thread.run_sync(run, body))
        except Refused as exc:
            return _error(str(exc), "Validation", 422)

    def embed(body: dict[str, Any]) -> list[list[float]]:
        return embedder.embed(_texts(body.get("inputs"), "inputs")).tolist()

    def rerank(body: dict[str, Any]) -> list[dict[str, float]]:
        query, texts = body.get("query"), _texts(body.get("texts"), "texts")
        if not isinstance(query, str):
            raise Refused("query must be a string")
        _texts(query, "query")
        scores = reranker.score(query, texts)
        if not body.get("raw_scores", False):  # TEI's default: the logit through a sigmoid
            scores = 1 / (1 + np.exp(-scores))
        order = np.argsort(-scores, kind="stable")
        return [{"index": int(i), "score": float(scores[i])} for i in order]

    async def info_route(request: Request) -> JSONResponse:
        if not authorized(request):
            return _error(UNAUTHORIZED, "Unauthorized", 401)
        return JSONResponse(described)

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({})

    async def embed_route(request: Request) -> JSONResponse:
        return await handle(request, embedder, embed)

    async def rerank_route(request: Request) -> JSONResponse:
        return await handle(request, reranker, rerank)

    return Starlette(routes=[Route("/info", info_route), Route("/health", health),
                             Route("/embed", embed_route, methods=["POST"]),
                             Route("/rerank", rerank_route, methods=["POST"])])
