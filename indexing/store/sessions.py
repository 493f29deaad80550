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
from agentmemrec.indexing.units import Unit

Neighbours = dict[int, tuple[int | None, int | None, float]]  # id -> (previous, next, position 0..1)
SESSIONS_CACHE_BYTES = 32 << 20  # per project: a session's order weighs what its members do
MEMBER_BYTES = 250


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
            lambda name, order: sys.getsizeof(name) + MEMBER_BYTES * len(order.neighbours), SESSIONS_CACHE_BYTES)

    @property
    def cached_bytes(self) -> int:
        return self._orders.nbytes

    def around(self, project: str, sessions: Iterable[str | None],
               units: Iterable[Unit] | None = None) -> SessionSnapshot:
        """The order of every unit in the named sessions (units without a session have none);
        with `units`, the neighbours of those units only (a pool's, not its sessions' whole)."""
        names = sorted({s for s in sessions if s})
        cached = self._orders.current(project)
        orders = {n: order for n in names if (order := cached.get(n)) is not None}
        missing = [n for n in names if n not in orders]
        if missing:
            fetched = self._read(project, missing)
            cached.update(fetched)  # kept while they fit; this query reads them from here
            orders.update(fetched)
        starts = {name: order.start for name, order in orders.items()}
        if units is None:
            neighbours: Neighbours = {uid: found for order in orders.values() for uid, found in order.neighbours.items()}
        else:
            neighbours = {u.id: found for u in units
                          if u.session in orders and (found := orders[u.session].neighbours.get(u.id)) is not None}
        return SessionSnapshot(neighbours, starts)

    def prime(self, project: str) -> None:
        """Read every session of a project whose orders all fit the cache: a warm start then
        reads no session at a recall."""
        if self.store.count_units(project) * MEMBER_BYTES <= SESSIONS_CACHE_BYTES:
            self._orders.current(project).update(self._read(project, None))

    def _carry(self, project: str, orders: dict[str, _Order], changed: set[int]) -> dict[str, _Order]:
        """After a write: the sessions neither the changed units were nor now are in."""
        now_in = self.store.sessions_of(project, changed)
        return {name: order for name, order in orders.items()
                if name not in now_in and changed.isdisjoint(order.neighbours)}

    def _read(self, project: str, names: list[str] | None) -> dict[str, _Order]:
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
