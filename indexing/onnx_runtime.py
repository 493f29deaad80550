"""ONNX Runtime sessions with the execution provider decided before the session exists.

`onnxruntime-gpu` lists the CUDA provider even on a machine without a GPU and logs load errors
when asked for it, so `auto` asks the CUDA driver first and only then requests CUDA.
"""

from __future__ import annotations

import ctypes
import logging
import os
from functools import lru_cache
from typing import Literal

import onnxruntime as ort

from .errors import InputError, StoreError

log = logging.getLogger(__name__)

Device = Literal["auto", "cpu", "cuda"]
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")


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


def resolve_device(device: str) -> Literal["cpu", "cuda"]:
    if device not in DEVICES:
        raise InputError(f"unknown device {device!r}; use one of: {', '.join(DEVICES)}")
    if device == "cuda" and not cuda_usable():
        raise InputError("device 'cuda' asked for, but no usable CUDA GPU was found; use --device cpu or auto")
    if device == "auto":
        return "cuda" if cuda_usable() else "cpu"
    return device  # type: ignore[return-value]


def open_session(path: str | os.PathLike[str], device: str = "auto") -> tuple[ort.InferenceSession, str]:
    """A session on the resolved device; returns it with the device actually used."""
    resolved = resolve_device(device)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    if resolved == "cpu":
        options.intra_op_num_threads = os.cpu_count() or 1
        options.inter_op_num_threads = 1
        # Threads that spin between operators burn the cores that other work (and the other
        # thread) needs; on a busy 2-core machine they made a query's embedding 2-3x slower.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers: list = ["CPUExecutionProvider"]
    else:
        providers = [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]
    try:
        session = ort.InferenceSession(str(path), sess_options=options, providers=providers)
    except Exception as exc:  # a damaged or truncated model file
        raise StoreError(f"cannot load model {path}: {exc}; reinstall it with "
                         "'agentmemrec models install'") from exc
    return session, resolved
