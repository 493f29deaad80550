"""Caches bounded by bytes: a unit's text may be 128 KiB, so counting entries bounds nothing."""

from __future__ import annotations

from datetime import datetime

from agentmemrec.indexing.lru import SizedLRU, memo_bytes, text_size
from agentmemrec.indexing.units import Unit
from agentmemrec.ranking import features, slate
from agentmemrec.ranking.render import SlateInputs


def big(i: int) -> str:
    return f"text {i} " + "x" * (128 * 1024)


def test_a_cache_keeps_the_most_recent_entries_that_fit_its_bytes():
    cache: SizedLRU[str, int] = SizedLRU(1 << 20, text_size)
    for i in range(100):
        cache.put(big(i), i)
    assert cache.bytes <= 1 << 20 and len(cache) == 7
    assert cache.get(big(99)) == 99 and cache.get(big(50)) is None
    cache.put("y" * (2 << 20), -1)  # larger than the whole cache: not kept, nothing else dropped
    assert len(cache) == 7


def test_text_features_of_many_long_units_stay_within_their_budget():
    for i in range(600):  # 75 MiB of distinct 128 KiB texts
        features.text_facts(big(i))
        slate.item_tokens(Unit(id=i, project="p", kind="note", text=big(i), tokens=0, at=datetime(2024, 1, 1), seq=i),
                          SlateInputs({}, {}))
    assert memo_bytes() <= features.TEXT_CACHE_BYTES + (32 << 20)  # the item lines' and rendered lines' memos
