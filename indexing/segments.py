"""Snapshots that follow writes: a derived index as a few immutable parts.

Each part is built from some rows and never changes. A row that is rewritten or removed is
marked dead in the part holding it (the mask is copied, never edited in place) and its new
version goes into a new part. Parts are merged like a binary counter: the newest parts merge
while the part before them holds at most twice their rows, so n single-row writes cost
O(n log n) copying in all and a snapshot holds O(log n) parts; a part that is mostly dead is
merged with every newer part, which drops the dead rows. A reader keeps the snapshot it was
handed, and nothing it holds is ever written to.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, Protocol, Sequence, TypeVar

import numpy as np

INDEX_MEMORY = 1 << 30  # bytes of snapshots each derived index keeps (the one in use always stays)


class Part(Protocol):
    @property
    def ids(self) -> np.ndarray: ...  # unit ids, ascending, one per row


P = TypeVar("P", bound=Part)
# parts and their dead masks (None: none dead) -> one part holding their live rows, ids ascending
Merge = Callable[[Sequence[P], Sequence["np.ndarray | None"]], P]


def merge_count(live: Sequence[int], rows: Sequence[int], added: bool = True) -> int:
    """How many of the newest parts to merge into one (0: none). `live` and `rows` count each
    part's live rows and all its rows, oldest part first; `added`: the newest part was just
    added (when none was, as in a write that only removed rows, the parts a load made in equal
    windows stay as they are, or the first such write would copy the whole index)."""
    k, total = 1, live[-1] if live else 0
    while added and k < len(live) and live[-k - 1] <= 2 * total:
        total += live[-k - 1]
        k += 1
    mostly_dead = [i for i in range(len(live)) if 2 * live[i] < rows[i]]
    return max(k if k > 1 else 0, len(live) - mostly_dead[0] if mostly_dead else 0)


@dataclass(frozen=True)
class Segments(Generic[P]):
    parts: tuple[P, ...] = ()
    dead: tuple[np.ndarray | None, ...] = ()  # per part, True where the row was replaced or removed

    @property
    def live(self) -> int:
        return sum(self.live_counts())

    @property
    def nbytes(self) -> int:
        """What the parts' arrays and the dead masks hold in memory."""
        arrays = [v for p in self.parts for v in vars(p).values() if isinstance(v, np.ndarray)]
        return sum(a.nbytes for a in arrays) + sum(d.nbytes for d in self.dead if d is not None)

    def live_counts(self) -> list[int]:
        return [len(p.ids) - (0 if d is None else int(d.sum())) for p, d in zip(self.parts, self.dead)]

    def offsets(self) -> np.ndarray:
        """Where each part's rows start when the parts are laid end to end."""
        return np.cumsum([0] + [len(p.ids) for p in self.parts])

    def locate(self, ids: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """For each part: (part index, row positions, indices into `ids`) of the live rows
        among `ids`. Each id is live in at most one part."""
        out = []
        for i, (part, dead) in enumerate(zip(self.parts, self.dead)):
            if not len(part.ids) or not len(ids):
                continue
            pos = np.minimum(np.searchsorted(part.ids, ids), len(part.ids) - 1)
            ok = part.ids[pos] == ids
            if dead is not None:
                ok &= ~dead[pos]
            if ok.any():
                out.append((i, pos[ok], np.flatnonzero(ok)))
        return out

    def without(self, ids: np.ndarray) -> "Segments[P]":
        """The same parts with these units' rows marked dead."""
        dead = list(self.dead)
        for i, pos, _ in self.locate(ids):
            mask = np.zeros(len(self.parts[i].ids), dtype=bool) if dead[i] is None else dead[i].copy()
            mask[pos] = True
            dead[i] = mask
        return Segments(self.parts, tuple(dead))

    def plus(self, part: P, merge: Merge[P]) -> "Segments[P]":
        """A new part added, then the newest parts merged as the policy says."""
        parts, dead = list(self.parts), list(self.dead)
        if len(part.ids):
            parts.append(part)
            dead.append(None)
        live = Segments(tuple(parts), tuple(dead)).live_counts()
        k = merge_count(live, [len(p.ids) for p in parts], added=bool(len(part.ids)))
        if k:
            merged = merge(parts[-k:], dead[-k:])
            parts, dead = parts[:-k] + [merged], dead[:-k] + [None]
        return Segments(tuple(parts), tuple(dead))


def keep_rows(dead: np.ndarray | None, n: int) -> np.ndarray:
    """Row positions that are live."""
    return np.arange(n) if dead is None else np.flatnonzero(~dead)


S = TypeVar("S")


class SnapshotCache(Generic[S]):
    """The current snapshot of each project, shared by every reader of one index.

    `key(project)` says which version of the rows is current (cheap: cached generations);
    `advance(project, held)` brings the held snapshot (or None) up to it. Readers on other
    projects or on an up-to-date snapshot never wait; one thread advances a project at a time.
    While the snapshots weigh more than `max_bytes` (by `size_of`), the least recently used
    project's is dropped (a reader holding it keeps it; the next one loads it again), never the
    one just handed out."""

    def __init__(self, key: Callable[[str], Hashable], key_of: Callable[[S], Hashable],
                 advance: Callable[[str, S | None], S], size_of: Callable[[S], int] = lambda _: 0,
                 max_bytes: int | None = None) -> None:
        self._key, self._key_of, self._advance = key, key_of, advance
        self._size_of, self.max_bytes = size_of, max_bytes
        self._snapshots: dict[str, S] = {}
        self._used: dict[str, int] = {}  # project -> when last handed out (a counter, no lock)
        self._clock = itertools.count()
        self._lock = threading.Lock()

    def __contains__(self, project: str) -> bool:
        return project in self._snapshots

    @property
    def nbytes(self) -> int:
        return sum(self._size_of(s) for s in list(self._snapshots.values()))

    def get(self, project: str) -> S:
        key = self._key(project)
        snap = self._snapshots.get(project)
        self._used[project] = next(self._clock)
        if snap is not None and self._key_of(snap) == key:
            return snap
        with self._lock:
            snap = self._snapshots.get(project)
            if snap is None or self._key_of(snap) != self._key(project):
                snap = self._advance(project, snap)
                self._snapshots[project] = snap
                self._evict(keep=project)
            return snap

    def held(self, project: str) -> S | None:
        """The project's snapshot if one is held, current or not (nothing is loaded)."""
        return self._snapshots.get(project)

    def replace(self, project: str, build: Callable[[], S]) -> S:
        """Make `build()`'s snapshot the project's, built (and saved) while no other thread
        advances it."""
        with self._lock:
            snap = self._snapshots[project] = build()
            self._used[project] = next(self._clock)
            self._evict(keep=project)
            return snap

    def _evict(self, keep: str) -> None:
        if self.max_bytes is None:
            return
        sizes = {p: self._size_of(s) for p, s in self._snapshots.items()}
        total = sum(sizes.values())
        for project in sorted(sizes, key=lambda p: self._used.get(p, -1)):
            if total <= self.max_bytes:
                return
            if project != keep:
                total -= sizes[project]
                del self._snapshots[project]
                self._used.pop(project, None)
