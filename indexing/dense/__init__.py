"""The dense channel: installed ONNX models (`models`), ONNX Runtime sessions and where they run
(`onnx_runtime`), the embedder (`embedder`), embedding in the background (`backfill`) and the
in-memory snapshot searched by exact inner product (`index`)."""
