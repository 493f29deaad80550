"""ONNX Runtime sessions with the execution provider and precision decided before the session exists.

`onnxruntime-gpu` lists the CUDA provider even on a machine without a GPU and logs load errors
when asked for it, so `auto` asks the CUDA driver first and only then requests CUDA.

A device spec is `auto`, `cpu` or `cuda`, optionally with a precision: `cuda:fp32`, `auto:fp16`.
The precision `auto` runs a model's FP16 copy on CUDA (half the memory traffic, tensor cores) and
its FP32 file on CPU, where ONNX Runtime has few FP16 kernels and casts around the rest. An int8
model (`--quantize int8`) runs on CPU only: its dynamic-quantization ops have no CUDA kernels.
"""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, get_args

import onnxruntime as ort

from agentmemrec.indexing.dense.models import Manifest
from agentmemrec.indexing.errors import InputError, StoreError

log = logging.getLogger(__name__)

Device = Literal["auto", "cpu", "cuda"]
DEVICES: tuple[str, ...] = get_args(Device)
Precision = Literal["auto", "fp32", "fp16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
SPEC_HELP = "auto, cpu or cuda, optionally with :fp32 or :fp16 (e.g. cuda:fp32)"


@dataclass(frozen=True)
class SessionPlan:
    """Where and at which precision one model runs, and the file that holds that variant."""
    device: Literal["cpu", "cuda"]
    precision: Literal["fp32", "fp16", "int8"]
    model_file: str
    note: str | None = None  # logged once when the session opens


@lru_cache(maxsize=1)
def cuda_usable() -> bool:
    """True when the CUDA provider is built in and the driver reports at least one device."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


def parse_spec(spec: str) -> tuple[str, str]:
    """`cuda:fp16` -> ("cuda", "fp16"); a bare device has the precision `auto`."""
    device, _, precision = spec.partition(":")
    if device not in DEVICES or (precision or "auto") not in PRECISIONS:
        raise InputError(f"unknown device {spec!r}; use {SPEC_HELP}")
    return device, precision or "auto"


def resolve_device(spec: str, cuda: bool | None = None) -> Literal["cpu", "cuda"]:
    """The device a spec runs on; `cuda` says whether a GPU is usable (asked of the driver if None)."""
    device, _ = parse_spec(spec)
    usable = cuda_usable() if cuda is None else cuda
    if device == "cuda" and not usable:
        raise InputError("device 'cuda' asked for, but no usable CUDA GPU was found; use --device cpu or auto")
    return "cuda" if device == "cuda" or (device == "auto" and usable) else "cpu"


def plan_session(spec: str, manifest: Manifest, cuda: bool | None = None) -> SessionPlan:
    """Decide device, precision and file for one installed model before any session exists."""
    asked_device, asked_precision = parse_spec(spec)
    device = resolve_device(spec, cuda)
    if manifest.quantized:
        return _plan_quantized(asked_device, asked_precision, device, manifest)
    reinstall = (f"agentmemrec models install {manifest.source} --as {manifest.role} --name {manifest.name}")
    if asked_precision == "fp16" and not manifest.fp16_file:
        raise InputError(f"model {manifest.name} has no FP16 copy (installed before they were made); "
                         f"reinstall it to get one: {reinstall}")
    if asked_precision == "fp16" or (asked_precision == "auto" and device == "cuda" and manifest.fp16_file):
        return SessionPlan(device, "fp16", manifest.fp16_file)  # type: ignore[arg-type]
    note = None
    if asked_precision == "auto" and device == "cuda":
        note = (f"model {manifest.name} runs at FP32 on the GPU: it was installed without an FP16 copy; "
                f"reinstall it to run at FP16: {reinstall}")
    return SessionPlan(device, "fp32", manifest.model_file, note)


def _plan_quantized(asked_device: str, asked_precision: str, device: str, manifest: Manifest) -> SessionPlan:
    """int8 (dynamic quantization) has CPU kernels only: `auto` runs it on CPU even with a GPU."""
    if asked_precision == "fp16":
        raise InputError(f"model {manifest.name} is quantized to int8 and has no FP16 copy; "
                         "use --device cpu, or reinstall it without --quantize")
    if device == "cuda" and asked_device == "cuda":
        raise InputError(f"model {manifest.name} is quantized to int8, which runs on CPU only; use --device "
                         "cpu or auto, or reinstall it without --quantize to run it on the GPU at FP16")
    note = (f"model {manifest.name} is quantized to int8, which runs on CPU only; reinstall it without "
            "--quantize to run it on the GPU") if device == "cuda" else None
    return SessionPlan("cpu", "int8", manifest.model_file, note)


def open_model(model_dir: Path, manifest: Manifest, spec: str = "auto", cpu_threads: int | None = None
               ) -> tuple[ort.InferenceSession, SessionPlan]:
    """A session for an installed model on the planned device and precision (on CPU with
    `cpu_threads` intra-op threads, default every core)."""
    plan = plan_session(spec, manifest)
    if plan.note:
        log.info("%s", plan.note)
    session = open_session(model_dir / plan.model_file, plan.device, cpu_threads)
    if plan.device == "cuda" and "CUDAExecutionProvider" not in session.get_providers():
        # ONNX Runtime falls back to CPU silently when CUDA or cuDNN libraries fail to load.
        log.warning("the CUDA provider did not load (are the CUDA and cuDNN libraries onnxruntime-gpu "
                    "was built for on the library path?); model %s runs on CPU", manifest.name)
        plan = plan_session("cpu", manifest)
        session = open_session(model_dir / plan.model_file, "cpu", cpu_threads)
    return session, plan


def session_options(device: str, threads: int | None = None) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    if device == "cpu":  # one run at a time uses every core; parallel graph branches do not pay
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        options.inter_op_num_threads = 1
        # Threads that spin between operators burn the cores that other work (and the other
        # thread) needs; on a busy 2-core machine they made a query's embedding 2-3x slower.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def open_session(path: str | os.PathLike[str], device: str = "auto", threads: int | None = None
                 ) -> ort.InferenceSession:
    """A session for one ONNX file on a resolved device (`cpu` or `cuda`); on CPU, `threads`
    intra-op threads (default: every core)."""
    resolved = resolve_device(device)
    providers: list = (["CPUExecutionProvider"] if resolved == "cpu"
                       else [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"])
    # The process-wide logger warns on stderr at every CUDA session (onnxruntime-gpu 1.31: "No
    # registered plugin EP device found for 'CUDAExecutionProvider'") although the session runs on
    # the GPU; errors (CUDA or cuDNN libraries that fail to load) still show.
    ort.set_default_logger_severity(3)
    # ONNX Runtime queues usage telemetry (a 1DS event store under ~/.cache/Microsoft) unless told
    # not to; a memory server has no business reporting home
    ort.disable_telemetry_events()
    try:
        return ort.InferenceSession(str(path), sess_options=session_options(resolved, threads),
                                    providers=providers)
    except Exception as exc:  # a damaged or truncated model file
        raise StoreError(f"cannot load model {path}: {exc}; reinstall it with "
                         "'agentmemrec models install'") from exc
