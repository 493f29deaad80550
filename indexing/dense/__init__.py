"""The dense channel: installed ONNX models (`models`), ONNX Runtime sessions and where they run
(`onnx_runtime`), the embedder (`embedder`), embedding in the background (`backfill`) and the
in-memory snapshot searched by exact inner product (`index`)."""

import os

# ONNX Runtime's Linux wheels queue usage telemetry (a 1DS event store under
# ~/.cache/Microsoft/DeveloperTools/.onnxruntime) from the moment it is imported, before any
# `disable_telemetry_events()` can run; it reads this when it loads, which is only ever through
# this package. ORT_DISABLE_TELEMETRY=0 turns it back on.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
