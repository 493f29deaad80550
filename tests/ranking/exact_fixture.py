"""A fixed store and queries whose features, rankings and slates were recorded before the
recall path was made faster (tests/ranking/exact_recall.json): a change meant to be exact
must reproduce them."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from helpers import BagOfWords  # noqa: E402
from history import history, queries  # noqa: E402

from agentmemrec.indexing.dense.index import DenseChannel, DenseIndex  # noqa: E402
from agentmemrec.indexing.lexical.index import Bm25Channel, LexicalIndex  # noqa: E402
from agentmemrec.indexing.store.duckdb_store import DuckDBStore  # noqa: E402
from agentmemrec.indexing.dense.backfill import embed_pending  # noqa: E402
from agentmemrec.ranking import learned  # noqa: E402
from agentmemrec.ranking.learned import LearnedRanker  # noqa: E402
from agentmemrec.ranking.memory import Memory, RecallConfig  # noqa: E402
from agentmemrec.ranking.slate import build_slate  # noqa: E402

UNITS = 1500
POOL = 64
AS_OF = "2030-01-01T00:00:00"  # after every unit: nothing excluded, and the features' clock fixed
QUERIES = queries(12, UNITS)
BUDGETS = (2700, 600)


def open_memory(tmp: Path) -> Memory:
    store = DuckDBStore(tmp / "m.duckdb")
    dense = DenseIndex(store, BagOfWords())
    memory = Memory(store, [Bm25Channel(LexicalIndex(store, tmp / "idx")), DenseChannel(dense)],
                    LearnedRanker(None), RecallConfig(pool_size=POOL), dense=dense)
    items = list(history(UNITS, seed=3))
    for i in range(0, len(items), 500):
        memory.remember("main", items[i:i + 500])
    embed_pending(dense.vectors, dense.embedder)
    return memory


def recall_record(memory: Memory, query: str) -> dict[str, Any]:
    """The features of the pool (rounded: BLAS may differ in the last bit between machines),
    the learned ranker's pool order, and the slates it gives at two budgets."""
    captured: list[np.ndarray] = []
    real = learned.feature_matrix
    learned.feature_matrix = lambda pool, ctx: captured.append(real(pool, ctx)) or captured[-1]
    try:
        selection = memory.select("main", query, datetime.fromisoformat(AS_OF), POOL)
    finally:
        learned.feature_matrix = real
    x = np.round(captured[0], 6)
    slates = [build_slate("s_0123456789ab", "main", selection.ranked, budget, selection.inputs)
              for budget in BUDGETS]
    return {"query": query, "ranked": [sc.unit.id for sc in selection.ranked],
            "features": np.where(np.isnan(x), None, x).tolist(),
            "slates": [{"items": [it.unit.id for it in s.items], "tokens": s.tokens_used,
                        "outcomes": {str(k): v for k, v in sorted(s.outcomes.items())}} for s in slates]}
