"""The dense channel: an in-memory snapshot per project of the vectors the store holds
(indexing/store/vectors.py), following writes and new vectors.

The project's current vectors are held in memory in a few immutable parts (indexing/segments.py):
a write or a new batch of vectors marks the changed units' old rows dead and adds a part for their
current vectors, found through the change logs, so nothing is reloaded whole after the first load.
Search is an exact inner product over them (float32 rows) until a project holds `ANN_MIN_UNITS`;
a larger one keeps its rows as float16, as the store does, and searches a graph
(indexing/dense/ann.py) for the units whose exact cosines it then reads.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field, replace
from functools import cache, cached_property, lru_cache
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from agentmemrec.indexing.dense.ann import ANN_MIN_UNITS, ProjectAnn, delete_saved
from agentmemrec.indexing.dense.embedder import Embedder
from agentmemrec.indexing.segments import INDEX_MEMORY, Segments, SnapshotCache, keep_rows
from agentmemrec.indexing.store.protocol import Store, Vectors
from agentmemrec.indexing.store.vectors import WINDOW
from agentmemrec.indexing.topk import top_rows


class DenseHit(NamedTuple):  # a tuple: a search makes a thousand
    unit_id: int
    rank: int
    score: float


def merge_vectors(parts: Sequence[Vectors], dead: Sequence[np.ndarray | None]) -> Vectors:
    """The live rows of several parts as one part, ids ascending."""
    keep = [keep_rows(d, len(p.ids)) for p, d in zip(parts, dead)]
    ids = np.concatenate([p.ids[k] for p, k in zip(parts, keep)])
    dest = np.empty(len(ids), dtype=np.int64)
    dest[np.argsort(ids, kind="stable")] = np.arange(len(ids))
    matrix = np.empty((len(ids), parts[0].matrix.shape[1]), dtype=parts[0].matrix.dtype)
    start = 0
    for p, k, d in zip(parts, keep, dead):
        matrix[dest[start:start + len(k)]] = p.matrix if d is None else p.matrix[k]
        start += len(k)
    return Vectors(np.sort(ids), matrix)


@dataclass(frozen=True)
class DenseSnapshot:
    project: str
    key: tuple[int, int]  # (store generation, vector generation)
    segments: Segments[Vectors]
    dim: int
    ann: ProjectAnn | None = field(default=None, compare=False)  # the graph of a large project

    @cached_property
    def _row_ids(self) -> np.ndarray:
        parts = self.segments.parts
        return np.concatenate([p.ids for p in parts]) if parts else np.zeros(0, np.int64)

    @cached_property
    def ids(self) -> np.ndarray:
        """Units with a current vector, ascending."""
        return np.sort(self._row_ids[self._rows(np.unique(self._row_ids))[0]])

    def _rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts = self.segments.offsets()
        found = self.segments.locate(ids)
        if not found:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return (np.concatenate([starts[i] + pos for i, pos, _ in found]),
                np.concatenate([w for _, _, w in found]))

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Cosine with every row, parts end to end; dead rows -inf."""
        q = query.astype(np.float32)
        out = [p.matrix @ q if d is None else np.where(d, -np.inf, p.matrix @ q).astype(np.float32)
               for p, d in zip(self.segments.parts, self.segments.dead)]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def search(self, query: np.ndarray, k: int, exclude: set[int] | frozenset[int] = frozenset()) -> list[DenseHit]:
        """The top k by cosine (ties: lower id first): through the graph when the project has one
        ready and few units are excluded (a question as of a past date excludes all later ones),
        else exact."""
        graph = self.ann is not None and len(exclude) <= k
        found = self.ann.nearest(query, k + len(exclude)) if graph else None
        if found is None:
            return self.exact_search(query, k, exclude)
        scores = self.lookup(query, [i for i in found.tolist() if i not in exclude])
        top = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [DenseHit(uid, r, score) for r, (uid, score) in enumerate(top, 1)]

    def exact_search(self, query: np.ndarray, k: int, exclude: set[int] | frozenset[int] = frozenset()
                     ) -> list[DenseHit]:
        scores = self.similarities(query)
        if exclude and len(scores):
            scores[self._rows(np.sort(np.fromiter(exclude, dtype=np.int64)))[0]] = -np.inf
        ids = self._row_ids
        top = top_rows(scores, ids, np.flatnonzero(np.isfinite(scores)), k)
        return [DenseHit(i, r, s) for r, (i, s) in enumerate(zip(ids[top].tolist(), scores[top].tolist()), 1)]

    def lookup(self, query: np.ndarray, ids: list[int]) -> dict[int, float]:
        """Cosine similarity of the query with the given units that have a vector."""
        if not ids:
            return {}
        wanted = np.asarray(sorted(set(ids)), dtype=np.int64)
        out: dict[int, float] = {}
        for i, pos, which in self.segments.locate(wanted):
            sims = self.segments.parts[i].matrix[pos].astype(np.float32) @ query.astype(np.float32)
            out.update(zip(wanted[which].tolist(), sims.tolist()))
        return out

    def advanced(self, key: tuple[int, int], changed: np.ndarray, fresh: Vectors) -> "DenseSnapshot":
        if self.ann is not None:
            self.ann.follow(changed, fresh)
        return DenseSnapshot(self.project, key, self.segments.without(changed).plus(fresh, merge_vectors),
                             self.dim or fresh.matrix.shape[1], self.ann)


@cache
def single_threaded_blas() -> None:
    """One BLAS thread for the process. A query's products are matrix-vector products, bound by
    memory: OpenBLAS's second thread saved nothing and spun, so on a busy 2-core machine a recall
    at 10,000 units took 170 ms instead of 257 (55 ms of CPU instead of 76; queries interleaved,
    load average 10). Some cosines differ from the two-thread product in the last float32 bit;
    on 128 recalls of the bench store no ranking or slate changed."""
    threadpool_limits(1, user_api="blas")


class DenseIndex:
    """Hands out the current dense snapshot of a project, catching up with writes and new vectors."""

    def __init__(self, store: Store, embedder: Embedder, max_bytes: int | None = INDEX_MEMORY,
                 ann_min_units: int = ANN_MIN_UNITS) -> None:
        single_threaded_blas()
        self.store = store
        self.embedder = embedder
        self.vectors = store.vectors(embedder.identity)
        self.speakers = SpeakerNames(store)
        self.ann_min_units = ann_min_units
        self._graphs = Path(store.index_dir) / "dense" if store.index_dir else None
        self._snapshots: SnapshotCache[DenseSnapshot] = SnapshotCache(
            lambda project: (store.generation(project), self.vectors.generation(project)),
            lambda snap: snap.key, self._advance, lambda snap: snap.segments.nbytes, max_bytes)

    def snapshot(self, project: str) -> DenseSnapshot:
        return self._snapshots.get(project)

    @property
    def nbytes(self) -> int:
        """What the snapshots held in memory weigh."""
        return self._snapshots.nbytes

    def _advance(self, project: str, snap: DenseSnapshot | None) -> DenseSnapshot:
        found = self.vectors.changes_since(project, snap.key) if snap is not None else None
        if snap is None or found is None or len(found[1]) > max(WINDOW, snap.segments.live // 2):
            return self._load(project)
        key, changed, fresh = found
        snap = snap.advanced(key, changed, fresh or Vectors(np.zeros(0, np.int64),
                                                            np.zeros((0, self.embedder.dim), np.float32)))
        if snap.ann is None and snap.segments.live >= self.ann_min_units:  # grown past the threshold
            snap = replace(snap, ann=self._start_graph(project, key, snap.segments))
        return snap

    def _load(self, project: str) -> DenseSnapshot:
        key, parts = self.vectors.load(project)
        large = sum(len(p.ids) for p in parts) >= self.ann_min_units
        if large:
            for i, p in enumerate(parts):  # one part at a time: the float32 copy is never whole twice
                parts[i] = Vectors(p.ids, p.matrix.astype(np.float16))
        segments = Segments(tuple(parts), (None,) * len(parts))
        ann = self._start_graph(project, key, segments) if large else None
        return DenseSnapshot(project, key, segments, self.embedder.dim, ann)

    def _graph_path(self, project: str) -> Path | None:
        name = hashlib.sha256(f"{project}\0{self.embedder.identity}".encode()).hexdigest()[:24] + ".usearch"
        return self._graphs / name if self._graphs else None

    def purge(self, project: str) -> None:
        """After units are forgotten: a saved graph keeps a removed vector's bytes (usearch only
        marks it), so the project's saved graph is deleted and this process's is not saved again;
        the next process to load the project builds it from the stored vectors."""
        held = self._snapshots.held(project)
        if held is not None and held.ann is not None:
            held.ann.unsave()
        elif (path := self._graph_path(project)) is not None:
            delete_saved(path)

    def _start_graph(self, project: str, key: tuple[int, int], segments: Segments[Vectors]) -> ProjectAnn:
        """A graph for the snapshot at `key`, built (or loaded) in the background; the exact
        product answers until it is ready."""
        ann = ProjectAnn(project, self.embedder.dim, self._graph_path(project))
        threading.Thread(target=ann.build, args=(key, segments.parts, segments.dead,
                                                 lambda since: self.vectors.changes_since(project, since)),
                         name=f"agentmemrec-ann-{project}", daemon=True).start()
        return ann

    def graph(self, project: str) -> ProjectAnn | None:
        """The project's graph (None below ANN_MIN_UNITS), for benchmarks that wait for it."""
        return self.snapshot(project).ann


class SpeakerNames:
    """The names that speak in each project's turns, kept per store generation: after a write
    only the units written since are read. A name nobody speaks any more stays until the change
    log no longer reaches back, which costs no more than a name left out of a query."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._known: dict[str, tuple[int, frozenset[str]]] = {}
        self._lock = threading.Lock()

    def __call__(self, project: str) -> frozenset[str]:
        generation = self.store.generation(project)
        with self._lock:
            known = self._known.get(project)
        if known is not None and known[0] == generation:
            return known[1]
        changed = self.store.changed_between(project, known[0], generation) if known is not None else None
        names = (known[1] | self.store.speakers(project, changed) if known is not None and changed is not None
                 else frozenset(self.store.speakers(project)))
        with self._lock:
            self._known[project] = (generation, names)
        return names


@lru_cache(maxsize=64)  # a pattern per set of names: a new speaker makes a new set
def _names_pattern(names: frozenset[str]) -> re.Pattern[str] | None:
    words = sorted((n for n in names if len(n.strip()) > 1), key=len, reverse=True)
    if not words:
        return None
    return re.compile(r"\b(?:" + "|".join(re.escape(n.strip()) for n in words) + r")(?:'s)?\b", re.IGNORECASE)


def without_speakers(query: str, names: Iterable[str]) -> str:
    """The query as the dense channel embeds it: without the names of the project's speakers.
    A name in a question says whose turns to read, which the ranker takes from each turn's speaker
    (`speaker_in_query`) and BM25 from its indexed text. To an embedder it is a topic, and the
    turns that carry a person's name are mostly the other side addressing them ("Wow, Melanie!
    What's new?"), so a question about what Melanie did drew the replies to her
    (docs/evaluation.md measures it). The query stays whole when nothing but names is left."""
    pattern = _names_pattern(frozenset(names))
    if pattern is None:
        return query
    topic = " ".join(pattern.sub(" ", query).split())
    return topic if any(ch.isalnum() for ch in topic) else query


class DenseChannel:
    """The dense candidate channel: the query embedded once (without the project's speaker
    names: `without_speakers`), searched over the snapshot."""

    name = "dense"

    def __init__(self, index: DenseIndex) -> None:
        self.index = index
        self._last: tuple[str, np.ndarray] | None = None

    def query_text(self, project: str, query: str) -> str:
        """What the embedder reads for `query` in `project`: its query instruction, then the query."""
        return self.index.embedder.query_instruction + without_speakers(query, self.index.speakers(project))

    def query_vector(self, project: str, query: str) -> np.ndarray:
        text = self.query_text(project, query)
        last = self._last
        if last is None or last[0] != text:
            last = (text, self.index.embedder.embed([text])[0])
            self._last = last
        return last[1]

    def search(self, project: str, query: str, k: int, exclude: set[int]) -> list[DenseHit]:
        return self.index.snapshot(project).search(self.query_vector(project, query), k, exclude)

    def score_units(self, project: str, query: str, ids: list[int]) -> dict[int, float]:
        """Cosine similarity of given units (absent for a unit not embedded yet)."""
        return self.index.snapshot(project).lookup(self.query_vector(project, query), ids)

    def purge(self, project: str) -> None:
        self.index.purge(project)
