"""Generation numbers cached in this process, shared by every Store on one file, and caches of
derived data that follow a project's generation."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


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

    def clear(self) -> None:
        """On open: while no Store here had the file open, another process may have written."""
        with self._lock:
            self._values.clear()


class CarriedCache(Generic[K, V]):
    """Per-project entries valid for one generation. When the generation moves, the previous
    entries are carried over through `carry(project, entries, changed)`, which drops what the
    change log (`changed`: the unit ids written since) makes stale; with no log that reaches back,
    the cache starts empty. Callers fill the returned dict and clear it when it grows too large."""

    def __init__(self, generation: Callable[[str], int],
                 changed_between: Callable[[str, int, int], set[int] | None],
                 carry: Callable[[str, dict[K, V], set[int]], dict[K, V]]) -> None:
        self._generation, self._changed_between, self._carry = generation, changed_between, carry
        self._entries: dict[str, tuple[int, dict[K, V]]] = {}
        self._lock = threading.Lock()

    def current(self, project: str) -> dict[K, V]:
        generation = self._generation(project)
        with self._lock:
            entry = self._entries.get(project)
        if entry is not None and entry[0] == generation:
            return entry[1]
        changed = self._changed_between(project, entry[0], generation) if entry else None
        kept = {} if changed is None else self._carry(project, entry[1], changed)
        with self._lock:
            self._entries[project] = (generation, kept)
        return kept
