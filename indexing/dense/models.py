"""Installed ONNX models: the manifest that identifies each, and which embedder and reranker
are active. Installing them is `install.py`; at run time only onnxruntime and tokenizers are
needed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from agentmemrec.indexing.errors import StoreError

log = logging.getLogger(__name__)

Role = Literal["embedder", "reranker"]
ROLES: tuple[str, ...] = get_args(Role)
Pooling = Literal["cls", "mean"]
INSTALL_HINT = "agentmemrec models install --default  (the CPU set: bge-small-en-v1.5 and its cross-encoder)"


@dataclass(frozen=True)
class Manifest:
    name: str
    role: Role
    source: str
    pooling: Pooling | None  # embedders only
    normalize: bool
    dim: int
    max_length: int
    sha256: str
    model_file: str
    quantized: str | None
    exported_at: str
    # The FP16 copy CUDA sessions run; None for int8 models and for models installed before
    # FP16 copies were made (they run at FP32 everywhere until reinstalled).
    fp16_file: str | None = None
    fp16_sha256: str | None = None
    # Where the files came from when they were not exported here (a wheel and its hash, a hub
    # repository) and the licence its authors publish; None for older installs.
    origin: str | None = None
    license: str | None = None
    # Embedders: the text put before each query (`models install --query-instruction`); None for
    # none, as in installs older than the field.
    query_instruction: str | None = None

    @property
    def instruction(self) -> str:
        """What the dense channel puts before a query for this embedder ("" for nothing)."""
        return (self.query_instruction or "") if self.role == "embedder" else ""

    @property
    def identity(self) -> str:
        """What derived data (vectors, ranker files) records: name plus content hash."""
        return f"{self.name}@{self.sha256[:12]}"

    @property
    def ranked_as(self) -> str:
        """What a ranker file records for this model (the function `ranked_as`)."""
        return ranked_as(self.identity, self.instruction)


def ranked_as(identity: str, instruction: str) -> str:
    """An embedder as a ranker trained with it knows it: its weights and, where its queries carry
    one, the instruction they carry (a query embedded without it lands elsewhere, so the dense
    scores a ranker learned from do not hold). Vectors of passages record the identity alone."""
    return f"{identity}+query:{hashlib.sha256(instruction.encode()).hexdigest()[:8]}" if instruction else identity


def models_dir(home: Path) -> Path:
    return Path(home) / "models"


def read_manifest(model_dir: Path) -> Manifest:
    try:
        data = json.loads((model_dir / "manifest.json").read_text())
        manifest = Manifest(**data)
    except (OSError, ValueError, TypeError) as exc:
        raise StoreError(f"model manifest in {model_dir} is missing or damaged ({exc}); "
                         f"reinstall: {INSTALL_HINT}") from exc
    for file in (manifest.model_file, manifest.fp16_file):
        if file and not (model_dir / file).exists():
            raise StoreError(f"model file {model_dir / file} is missing; reinstall: {INSTALL_HINT}")
    return manifest


def installed(home: Path) -> list[Manifest]:
    root = models_dir(home)
    if not root.exists():
        return []
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            out.append(read_manifest(d))
        except StoreError as exc:
            log.warning("%s", exc)
    return out


def active(home: Path) -> dict[str, Manifest | None]:
    """The active embedder and reranker (None where none is installed or active)."""
    path = models_dir(home) / "active.json"
    names = json.loads(path.read_text()) if path.exists() else {}
    out: dict[str, Manifest | None] = {}
    for role in ROLES:
        name = names.get(role)
        out[role] = read_manifest(models_dir(home) / name) if name and (models_dir(home) / name).exists() else None
    return out


def activate(home: Path, role: str, name: str | None) -> None:
    """Make `name` the active model of `role` (None: no model of that role is used)."""
    path = models_dir(home) / "active.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    names = json.loads(path.read_text()) if path.exists() else {}
    names[role] = name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(names, indent=2))
    os.replace(tmp, path)
