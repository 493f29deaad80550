"""What the edge adapters (note watcher, transcript capture) write into.

The adapters live in `indexing/sources/` but write through `Memory.ingest` (in `ranking/`), so every path
applies the same validation and redaction. They see it only through this small protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from agentmemrec.indexing.store.protocol import Store, WriteResult


@dataclass(frozen=True)
class Ingested:
    """The outcome of one write: a result per item, and what redaction replaced (by pattern)."""

    results: tuple[WriteResult, ...]
    redactions: Mapping[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return sum(r.outcome != "unchanged" for r in self.results)


class Sink(Protocol):
    store: Store
    redact: bool

    def ingest(self, project: str, raw_items: list[dict[str, Any]]) -> Ingested: ...

    def forget(self, project: str, refs: list[str]) -> list[int]: ...


def batches(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]
