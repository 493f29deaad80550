"""The `Store` protocol: what the core (`ranking/`) and the derived indexes call on a store, and
the values it hands back.

Two backends implement it over the same tables: DuckDB embedded (`duckdb_store`, the default:
one file, owned by one process) and PostgreSQL with pgvector (`postgres_store`, for a team: any
number of stateless processes on one database). Rows are the truth; the BM25 index and the
dense snapshot are derived in each process and follow the store through its generations and
change logs, so nothing above this protocol knows which backend it runs on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Collection, ContextManager, Iterable, Iterator, Mapping, Protocol

import numpy as np

from agentmemrec.indexing.units import Item, Unit


@dataclass(frozen=True)
class WriteResult:
    """What one item became: its unit ids (several for a chunked note) and what happened."""

    ref: str | None
    ids: tuple[int, ...]
    outcome: str  # "stored" | "updated" | "unchanged"


@dataclass(frozen=True)
class SourceRow:
    """What the store holds for one item of a source: its ref, path, kind and content hash."""

    ref: str
    path: str
    kind: str
    content_hash: str


@dataclass(frozen=True)
class Changes:
    generation: int  # the project's generation these changes bring an index to
    ids: np.ndarray  # every unit written, rewritten, renamed or removed since, ascending
    units: list[Unit]  # the current rows of those that still exist, ascending ids


@dataclass(frozen=True)
class Vectors:
    """One part: unit ids (ascending) and their L2-normalised vectors as float32 rows."""

    ids: np.ndarray
    matrix: np.ndarray


@dataclass(frozen=True)
class Principal:
    """A bearer token as stored: who it names and the projects it may use (never its secret)."""

    name: str
    projects: tuple[str, ...]  # the first is the default project of its calls
    created_at: datetime


VectorKey = tuple[int, int]  # (store generation, vector generation) of a project


class VectorRows(Protocol):
    """A store's vectors for one model identity, with their own generation and change log."""

    model: str

    def pending_windows(self, project: str | None = None,
                        only: Collection[int] | None = None) -> Iterator[list[Unit]]: ...

    def count_pending(self, project: str) -> int: ...

    def put(self, units: list[Unit], vectors: np.ndarray, hashes: list[str]) -> None: ...

    def generation(self, project: str) -> int: ...

    def load(self, project: str) -> tuple[VectorKey, list[Vectors]]: ...

    def changes_since(self, project: str, key: VectorKey
                      ) -> tuple[VectorKey, np.ndarray, Vectors | None] | None: ...

    def claim(self) -> ContextManager[bool]:
        """Whether this process may embed now: one backfill at a time across processes."""
        ...


class Store(Protocol):
    """The rows of every project. Thread-safe; writes are all-or-nothing per call."""

    @property
    def schema_version(self) -> int: ...

    @property
    def index_dir(self) -> Path | None:
        """Where derived indexes may keep files; None for a store that many processes share
        (each keeps its indexes in memory and catches up from the change log)."""
        ...

    def close(self) -> None: ...

    # writes
    def write(self, project: str, items: list[Item]) -> list[WriteResult]: ...

    def forget(self, project: str, refs: list[str]) -> list[int]: ...

    def rename_ref(self, project: str, old_ref: str, new_ref: str, path: str | None) -> list[int]: ...

    def rewrite(self, project: str, change: Callable[[Unit], Mapping[str, str]], dry_run: bool = False,
                ids: tuple[int, int] | None = None) -> list[tuple[Unit, dict[str, str]]]: ...

    def rewrite_slates(self, project: str, change: Callable[[str], str | None], dry_run: bool = False) -> int: ...

    # what derived indexes follow
    def refresh(self, project: str) -> None:
        """Before a recall or a show: the project's cached generations made current (read-your-write)."""
        ...

    def generation(self, project: str) -> int: ...

    def changed_between(self, project: str, since: int, generation: int) -> set[int] | None: ...

    def changes_since(self, project: str, generation: int) -> Changes | None: ...

    def scan_units(self, project: str, on_chunk: Callable[[list[Unit]], None],
                   chunk: int | None = None) -> int: ...

    def vectors(self, model: str) -> VectorRows: ...

    # reads
    def projects(self) -> dict[str, int]: ...

    def units(self, project: str, ids: Iterable[int]) -> dict[int, Unit]: ...

    def kind_counts(self) -> dict[str, dict[str, int]]: ...

    def decisions(self, project: str) -> list[Unit]: ...

    def units_by_id(self, ids: Iterable[int]) -> dict[int, Unit]: ...

    def ids_for(self, project: str, ref_or_id: str) -> list[int]: ...

    def ineligible_ids(self, project: str, as_of: datetime | None) -> set[int]: ...

    def count_units(self, project: str) -> int: ...

    def id_window(self, project: str, after: int, count: int) -> tuple[int, int] | None: ...

    def items_after(self, project: str, after: int, count: int) -> list[list[Unit]]: ...


    def sources(self, project: str, ref_prefixes: tuple[str, ...], path_prefix: str = "") -> list[SourceRow]: ...

    def warm_units(self, project: str) -> list[Unit]: ...

    def session_rows(self, project: str, names: list[str] | None) -> list[tuple[int, str, datetime]]: ...

    def sessions_of(self, project: str, ids: set[int]) -> set[str]: ...

    def speakers(self, project: str, ids: set[int] | None = None) -> set[str]: ...

    # saved explanations and bearer tokens
    def save_slates(self, rows: list[tuple[str, str, datetime, str]], keep: int) -> None: ...

    def load_slate(self, slate_id: str) -> tuple[str, str] | None: ...

    def add_token(self, name: str, secret_sha256: str, projects: list[str], at: datetime) -> bool: ...

    def tokens(self) -> list[Principal]: ...

    def revoke_token(self, name: str) -> bool: ...

    def token(self, secret_sha256: str) -> Principal | None: ...
