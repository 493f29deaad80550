"""Session order, derived from the rows: each unit's neighbours and relative position in its
session, and each session's start. Held per project and rebuilt when the project changes."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

from .store import Store


@dataclass(frozen=True)
class SessionSnapshot:
    generation: int
    neighbours: dict[int, tuple[int | None, int | None, float]]  # id -> (previous, next, position 0..1)
    starts: dict[str, datetime]


class SessionIndex:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[str, SessionSnapshot] = {}
        self._lock = threading.Lock()

    def snapshot(self, project: str) -> SessionSnapshot:
        generation = self.store.generation(project)
        snap = self._cache.get(project)
        if snap is None or snap.generation != generation:
            with self._lock:
                snap = self._build(project, generation)
                self._cache[project] = snap
        return snap

    def _build(self, project: str, generation: int) -> SessionSnapshot:
        rows = self.store.cursor().execute(
            "SELECT id, session, recorded_at FROM units WHERE project = ? AND session IS NOT NULL "
            "ORDER BY session, recorded_at, seq", [project]).fetchall()
        neighbours: dict[int, tuple[int | None, int | None, float]] = {}
        starts: dict[str, datetime] = {}
        start = 0
        for i in range(len(rows) + 1):
            if i == len(rows) or rows[i][1] != rows[start][1]:
                members = rows[start:i]
                for j, (uid, session, at) in enumerate(members):
                    prev = members[j - 1][0] if j else None
                    nxt = members[j + 1][0] if j + 1 < len(members) else None
                    neighbours[uid] = (prev, nxt, j / max(len(members) - 1, 1))
                if members:
                    starts[members[0][1]] = members[0][2]
                start = i
        return SessionSnapshot(generation, neighbours, starts)
