"""`agentmemrec models install|list`: the ONNX embedder and cross-encoder."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from agentmemrec.server.console import emit
from agentmemrec.server.settings import Settings


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser("models", help="install and list ONNX models")
    msub = p.add_subparsers(dest="models_command", required=True)
    m = msub.add_parser("install", help="export a Hugging Face model to ONNX and make it active")
    m.add_argument("source", help="hub id (e.g. BAAI/bge-m3) or local model directory")
    m.add_argument("--as", dest="role", default="embedder", choices=["embedder", "reranker"],
                   help="what the model is for (default embedder)")
    m.add_argument("--quantize", choices=["int8"], default=None,
                   help="also quantize dynamically to int8 (CPU only)")
    m.add_argument("--pooling", choices=["cls", "mean"], default=None,
                   help="embedders: override the detected pooling")
    m.add_argument("--max-length", type=int, default=None, help="tokens per text (default: the model's)")
    m.add_argument("--name", default=None, help="name under the models dir (default: from the source)")
    msub.add_parser("list", help="installed models, which are active, and where they run")
    return {"models": cmd_models}


def cmd_models(args: argparse.Namespace) -> int:
    from agentmemrec.indexing.dense import models  # noqa: PLC0415
    from agentmemrec.indexing.dense.onnx_runtime import plan_session  # noqa: PLC0415
    home = Settings.load().home
    if args.models_command == "install":
        manifest = models.install(home, models.resolve_source(args.source), args.role, args.quantize,
                                  args.pooling, args.max_length, args.name)
        emit(f"installed {manifest.identity} as the active {manifest.role} "
             f"({manifest.pooling or 'logit'}, dim {manifest.dim}, max length {manifest.max_length}, "
             f"{'FP16 copy for CUDA' if manifest.fp16_file else 'int8, CPU only'})")
        return 0
    active = models.active(home)
    found = models.installed(home)
    if not found:
        emit(f"no models installed under {models.models_dir(home)}; install one with:\n  {models.INSTALL_HINT}")
    for m in found:
        mark = "*" if (active.get(m.role) and active[m.role].name == m.name) else " "
        plan = plan_session("auto", m)
        emit(f"{mark} {m.role:<9} {m.identity:<40} {m.pooling or '-':<5} dim {m.dim:<5} "
             f"max {m.max_length:<5} runs on {plan.device} at {plan.precision}  ({m.source})")
    for role in models.ROLES:
        if active.get(role) is None:
            emit(f"  no active {role}: agentmemrec models install ... --as {role}")
    return 0
