"""What `eval` and `train` offer, by name: light enough for the command line to register its
arguments (and answer --help) without importing LightGBM; `evaluate` holds what each name runs."""

from __future__ import annotations

DATASETS: tuple[str, ...] = ("locomo", "longmemeval", "coding")
VARIANT_NAMES: tuple[str, ...] = ("bm25", "dense", "rrf", "rerank", "full")
DEFAULT_BUDGETS: tuple[int, ...] = (2400, 2550, 2700)
