"""Session order for the sessions a query's pool touches: each member's neighbours and relative
position in its session, and each session's start. Read from the rows when first asked and kept
for the project's current generation (a write starts afresh), so nothing is held for sessions no
query reaches."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from agentmemrec.indexing.store.generations import CarriedCache
from agentmemrec.indexing.store.protocol import Store

Neighbours = dict[int, tuple[int | None, int | None, float]]  # id -> (previous, next, position 0..1)
SESSIONS_CACHE_BYTES = 32 << 20  # per project: a session's order weighs what its members do


@dataclass(frozen=True)
class SessionSnapshot:
    neighbours: Neighbours
    starts: dict[str, datetime]


@dataclass(frozen=True)
class _Order:
    neighbours: Neighbours
    start: datetime


class SessionIndex:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._orders: CarriedCache[str, _Order] = CarriedCache(
            store.generation, store.changed_between, self._carry,
            lambda name, order: sys.getsizeof(name) + 250 * len(order.neighbours), SESSIONS_CACHE_BYTES)

    @property
    def cached_bytes(self) -> int:
        return self._orders.nbytes

    def around(self, project: str, sessions: Iterable[str | None]) -> SessionSnapshot:
        """The order of every unit in the named sessions (units without a session have none)."""
        names = sorted({s for s in sessions if s})
        cached = self._orders.current(project)
        orders = {n: order for n in names if (order := cached.get(n)) is not None}
        missing = [n for n in names if n not in orders]
        if missing:
            fetched = self._read(project, missing)
            cached.update(fetched)  # kept while they fit; this query reads them from here
            orders.update(fetched)
        neighbours: Neighbours = {}
        starts: dict[str, datetime] = {}
        for name in names:
            order = orders.get(name)
            if order is not None:
                neighbours.update(order.neighbours)
                starts[name] = order.start
        return SessionSnapshot(neighbours, starts)

    def _carry(self, project: str, orders: dict[str, _Order], changed: set[int]) -> dict[str, _Order]:
        """After a write: the sessions neither the changed units were nor now are in."""
        now_in = self.store.sessions_of(project, changed)
        return {name: order for name, order in orders.items()
                if name not in now_in and changed.isdisjoint(order.neighbours)}

    def _read(self, project: str, names: list[str]) -> dict[str, _Order]:
        rows = self.store.session_rows(project, names)
        out: dict[str, _Order] = {}
        start = 0
        for i in range(1, len(rows) + 1):
            if i == len(rows) or rows[i][1] != rows[start][1]:
                out[rows[start][1]] = _order([r[0] for r in rows[start:i]], rows[start][2])
                start = i
        return out


def _order(members: list[int], start: datetime) -> _Order:
    last = max(len(members) - 1, 1)
    neighbours = {uid: (members[j - 1] if j else None, members[j + 1] if j + 1 < len(members) else None, j / last)
                  for j, uid in enumerate(members)}
    return _Order(neighbours, start)
