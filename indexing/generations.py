"""Generation numbers cached in this process, shared by every Store on one file."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable


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
