"""The top k of a channel's scores, shared by BM25 and the exact dense search."""

from __future__ import annotations

import numpy as np


def top_rows(scores: np.ndarray, ids: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """The `k` of `rows` with the highest `scores`, best first; a tie goes to the lower id, at the
    cut-off too. Only the k-th best score is picked by partition, and every row reaching it is kept
    before the sort: which rows of a tie `np.argpartition` returns depends on the CPU's sort kernel,
    so a tie straddling the k-th place moved a pool's last members between machines."""
    if k <= 0:
        return rows[:0]
    if len(rows) > k:
        kth = np.partition(scores[rows], len(rows) - k)[len(rows) - k]
        rows = rows[scores[rows] >= kth]
    return rows[np.lexsort((ids[rows], -scores[rows]))][:k]
