"""Session order for the sessions a query's pool touches: each member's neighbours and relative
position in its session, and each session's start. Read from the rows when asked, so a write
never invalidates anything and nothing is held for sessions no query reaches."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from .store import Store


@dataclass(frozen=True)
class SessionSnapshot:
    neighbours: dict[int, tuple[int | None, int | None, float]]  # id -> (previous, next, position 0..1)
    starts: dict[str, datetime]


class SessionIndex:
    def __init__(self, store: Store) -> None:
        self.store = store

    def around(self, project: str, sessions: Iterable[str | None]) -> SessionSnapshot:
        """The order of every unit in the named sessions (units without a session have none)."""
        names = sorted({s for s in sessions if s})
        if not names:
            return SessionSnapshot({}, {})
        rows = self.store.cursor().execute(
            "SELECT id, session, recorded_at FROM units WHERE project = ? AND session IN (SELECT unnest(?)) "
            "ORDER BY session, recorded_at, seq", [project, names]).fetchall()
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
        return SessionSnapshot(neighbours, starts)
