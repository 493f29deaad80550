"""Caches bounded by what their entries weigh (bytes), not by how many there are: a unit's text
may be anything up to 128 KiB, so a count says nothing about memory."""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from functools import wraps
from typing import Any, Callable, Generic, Hashable, Iterator, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")
ENTRY_BYTES = 100  # what an entry costs beyond its key and value (dict slot, ordering, tuple)
_MEMOS: list["SizedLRU[Any, object]"] = []  # every memo cache (memo_by_text, `memo`), for memo_bytes()


class SizedLRU(Generic[K, V]):
    """A mapping whose entries' sizes (`size_of(key, value)`, in bytes) add up to at most
    `max_bytes`; the least recently used go first. An entry larger than the whole is not kept.
    Thread-safe."""

    def __init__(self, max_bytes: int, size_of: Callable[[K, V], int]) -> None:
        self.max_bytes, self._size_of = max_bytes, size_of
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._entries))

    def get(self, key: K, default: V | None = None) -> V | None:
        # No lock: a lookup and a move to the end are each atomic, and a hit that `put` evicts
        # in between is still returned (a read path takes thousands of these per recall).
        found = self._entries.get(key)
        if found is None:
            return default
        try:
            self._entries.move_to_end(key)
        except KeyError:
            pass
        return found[0]

    def put(self, key: K, value: V) -> None:
        size = self._size_of(key, value) + ENTRY_BYTES
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            if size > self.max_bytes:
                return
            self._entries[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.bytes -= dropped

    def update(self, entries: dict[K, V]) -> None:
        for key, value in entries.items():
            self.put(key, value)

    def items(self) -> list[tuple[K, V]]:
        with self._lock:
            return [(k, v) for k, (v, _) in self._entries.items()]


def text_size(text: str, _: object = None) -> int:
    return sys.getsizeof(text)


def memo_by_text(max_bytes: int, weight: int = 1) -> Callable[[Callable[[str], T]], Callable[[str], T]]:
    """`functools.lru_cache` for a function of one text, bounded by the texts' bytes (`weight`
    times them, for results that grow with the text)."""
    def decorate(fn: Callable[[str], T]) -> Callable[[str], T]:
        cache: SizedLRU[str, T] = SizedLRU(max_bytes, lambda text, _: weight * text_size(text))
        _MEMOS.append(cache)  # type: ignore[arg-type]
        missing = object()

        @wraps(fn)
        def cached(text: str) -> T:
            found = cache.get(text, missing)  # type: ignore[arg-type]
            if found is missing:
                found = fn(text)
                cache.put(text, found)
            return found  # type: ignore[return-value]
        return cached
    return decorate


def memo(max_bytes: int, size_of: Callable[[K, V], int]) -> SizedLRU[K, V]:
    """A SizedLRU counted by `memo_bytes`: for memos keyed by something else than a text."""
    cache: SizedLRU[K, V] = SizedLRU(max_bytes, size_of)
    _MEMOS.append(cache)  # type: ignore[arg-type]
    return cache


def memo_bytes() -> int:
    """What every memo cache of this process holds (`memo_by_text` and `memo`)."""
    return sum(cache.bytes for cache in _MEMOS)
