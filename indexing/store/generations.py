"""Generation numbers cached in this process, shared by every Store on one file, and caches of
derived data that follow a project's generation."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Generic, Hashable, TypeVar

from agentmemrec.indexing.lru import SizedLRU

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
CACHED_PROJECTS = 8  # projects whose carried entries are kept; the least recently used go first


class Generations:
    """Generation numbers cached in this process. DuckDB lets one process open a file for
    writing, and every Store on that file in this process shares one cache, so a write
    forgets the cached number after it commits and nothing else can move it."""

    _shared: dict[str, "Generations"] = {}
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self._values: dict[tuple[str, ...], int] = {}
        self._lock = threading.Lock()

    @classmethod
    def of(cls, path: Path) -> "Generations":
        with cls._shared_lock:
            return cls._shared.setdefault(str(path.resolve()), cls())

    def get(self, key: tuple[str, ...], load: Callable[[], int]) -> int:
        with self._lock:  # a write's forget() waits, so a value read before its commit is dropped
            if key not in self._values:
                self._values[key] = load()
            return self._values[key]

    def forget(self, key: tuple[str, ...]) -> None:
        with self._lock:
            self._values.pop(key, None)

    def settle(self, key: tuple[str, ...], value: int) -> None:
        """Forget a cached value other than `value`, which was just read from the store."""
        with self._lock:
            if self._values.get(key, value) != value:
                del self._values[key]

    def clear(self) -> None:
        """On open: while no Store here had the file open, another process may have written."""
        with self._lock:
            self._values.clear()


class CarriedCache(Generic[K, V]):
    """Per-project entries valid for one generation. When the generation moves, the previous
    entries are carried over through `carry(project, entries, changed)`, which drops what the
    change log (`changed`: the unit ids written since) makes stale; with no log that reaches back,
    the cache starts empty. Callers fill the returned cache; each project's entries weigh at most
    `max_bytes` (by `size_of`), and `max_projects` projects are kept, least recently used first out."""

    def __init__(self, generation: Callable[[str], int],
                 changed_between: Callable[[str, int, int], set[int] | None],
                 carry: Callable[[str, dict[K, V], set[int]], dict[K, V]],
                 size_of: Callable[[K, V], int], max_bytes: int, max_projects: int = CACHED_PROJECTS) -> None:
        self._generation, self._changed_between, self._carry = generation, changed_between, carry
        self._size_of, self._max_bytes, self._max_projects = size_of, max_bytes, max_projects
        self._entries: OrderedDict[str, tuple[int, SizedLRU[K, V]]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(entries.bytes for _, entries in self._entries.values())

    def current(self, project: str) -> SizedLRU[K, V]:
        generation = self._generation(project)
        with self._lock:
            entry = self._entries.get(project)
            if entry is not None:
                self._entries.move_to_end(project)
        if entry is not None and entry[0] == generation:
            return entry[1]
        changed = self._changed_between(project, entry[0], generation) if entry else None
        kept = SizedLRU(self._max_bytes, self._size_of)
        if changed is not None:
            kept.update(self._carry(project, dict(entry[1].items()), changed))
        with self._lock:
            self._entries[project] = (generation, kept)
            self._entries.move_to_end(project)
            while len(self._entries) > self._max_projects:
                self._entries.popitem(last=False)
        return kept
