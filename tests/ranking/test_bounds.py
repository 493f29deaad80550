"""What the core holds in memory is bounded whatever the number of projects and the size of texts."""

from __future__ import annotations

from agentmemrec.indexing.lexical.index import Bm25Channel, LexicalIndex
from agentmemrec.indexing.store import sql_store
from agentmemrec.indexing.store.backends import open_store
from agentmemrec.ranking.memory import Memory

from helpers import turn


def test_snapshots_of_projects_not_in_use_are_evicted_least_recently_used_under_the_cap(tmp_path):
    store = open_store(tmp_path)
    probe = Memory(store, [Bm25Channel(LexicalIndex(store, tmp_path / "probe", None))])
    for p in range(6):
        probe.remember(f"p{p}", [turn(f"project {p} deploys service {i} to region {i % 7}") for i in range(200)])
    probe.recall("p0", "deploys service")
    one = probe.memory_use()["bm25"]  # what one project's snapshot weighs
    probe.close()
    store = open_store(tmp_path)
    index = LexicalIndex(store, tmp_path / "capped", 2 * one + one // 2)
    memory = Memory(store, [Bm25Channel(index)])
    first = [it.unit.id for it in memory.recall("p0", "service 7 region").items]
    for p in range(1, 6):
        memory.recall(f"p{p}", "service 7 region")
        assert memory.memory_use()["bm25"] <= 2 * one + one // 2
    assert [index.loaded(f"p{p}") for p in range(6)] == [False] * 4 + [True, True]
    assert [it.unit.id for it in memory.recall("p0", "service 7 region").items] == first  # reloaded, same
    memory.close()


def test_cached_units_are_bounded_by_their_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(sql_store, "UNIT_CACHE_BYTES", 1 << 20)
    store = open_store(tmp_path)
    memory = Memory(store, [])
    results = memory.remember("p", [turn(f"{i} " + "long text " * 6000) for i in range(40)])
    ids = [i for r in results for i in r.ids]
    units = store.units("p", ids)  # each turn is stored in parts (indexing/units.py): several MiB in all
    assert len(ids) > 40 and sum(len(u.text) for u in units.values()) > 2 << 20
    assert len(units) == len(ids)  # all returned, while at most 1 MiB of them stays cached
    assert store.cached_bytes <= 1 << 20
    memory.close()
