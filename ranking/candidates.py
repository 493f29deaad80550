"""Stage 2: candidate generation. Each channel ranks the project's eligible units; the pool is
their fusion by Reciprocal Rank Fusion, cut at `pool_size`. Every candidate keeps its rank and
score in each channel, for the ranker's features and for `explain_selection`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Protocol, Sequence

import numpy as np

from agentmemrec.indexing.units import Unit

RRF_K = 60
# On LoCoMo the RRF pool holds all of a question's evidence for 83.4% of questions at 128
# candidates, 91.6% at 256, 99.2% at 512 and 100% at 768; the learned ranker can only use what
# the pool holds, and ranking 512 candidates stays cheap for LightGBM (docs/evaluation.md).
DEFAULT_POOL = 512
# The channels search side by side: the dense one spends most of its time embedding the query in
# ONNX Runtime, which releases the GIL while BM25 scores its postings.
_SEARCHES = ThreadPoolExecutor(max_workers=2, thread_name_prefix="channel")


class ChannelHit(NamedTuple):  # a tuple: a pool holds about a thousand, made per query
    rank: int  # 1-based within the channel
    score: float


@dataclass(frozen=True)
class Candidate:
    unit: Unit
    pool_rank: int  # 1-based position in the fused pool
    channels: Mapping[str, ChannelHit]
    fused: float


@dataclass(frozen=True)
class Pool:
    candidates: tuple[Candidate, ...]
    cut_off: dict[str, dict[int, int]] = field(default_factory=dict)  # channel -> id -> rank, beyond the pool
    channels: tuple[str, ...] = ()


class Hit(Protocol):
    unit_id: int
    rank: int
    score: float


class Channel(Protocol):
    """One way to rank a project's units against a query (BM25, dense, ...)."""

    name: str

    def search(self, project: str, query: str, k: int, exclude: set[int]) -> Sequence[Hit]: ...

    def purge(self, project: str) -> None:
        """After units are forgotten or rewritten: what the channel saved on disk keeps none of their words."""


def rrf_score(ranks: Sequence[int], k: int = RRF_K) -> float:
    """Reciprocal Rank Fusion (Cormack, Clarke and Buettcher, SIGIR 2009): sum of 1 / (k + rank)."""
    return sum(1.0 / (k + r) for r in ranks)


def fuse(runs: Mapping[str, Sequence[Hit]], pool_size: int, k: int = RRF_K
         ) -> tuple[list[tuple[int, float, dict[str, ChannelHit]]], dict[str, dict[int, int]]]:
    """Fuse channel runs by RRF; ties go to the better best rank, then the lower id (stable).
    Vectorised: the runs are a few thousand hits per query, the pool a few hundred."""
    ids = np.fromiter((h.unit_id for hits in runs.values() for h in hits), dtype=np.int64)
    ranks = np.fromiter((h.rank for hits in runs.values() for h in hits), dtype=np.int64)
    units, where = np.unique(ids, return_inverse=True)
    fused = np.zeros(len(units))
    np.add.at(fused, where, 1.0 / (k + ranks))  # rrf_score, summed in channel order
    best = np.full(len(units), np.iinfo(np.int64).max)
    np.minimum.at(best, where, ranks)
    order = np.lexsort((units, best, -fused))
    by_channel = {name: {h.unit_id: h for h in hits} for name, hits in runs.items()}
    kept = []
    top = order[:pool_size]
    for uid, score in zip(units[top].tolist(), fused[top].tolist()):
        chans = {name: ChannelHit(hit.rank, hit.score) for name, hits in by_channel.items()
                 if (hit := hits.get(uid)) is not None}
        kept.append((uid, score, chans))
    beyond = set(units[order[pool_size:]].tolist())
    cut_off = {name: {uid: h.rank for uid, h in hits.items() if uid in beyond}
               for name, hits in by_channel.items()}
    return kept, {name: ranked for name, ranked in cut_off.items() if ranked}


def generate_pool(channels: Sequence[Channel], project: str, query: str, pool_size: int,
                  exclude: set[int], load_units: "UnitLoader", depth: int | None = None,
                  rrf_k: int = RRF_K) -> Pool:
    """Run every channel to `depth` (default twice the pool), fuse and keep the top `pool_size`."""
    depth = depth or 2 * pool_size
    others = [_SEARCHES.submit(ch.search, project, query, depth, exclude) for ch in channels[1:]]
    first = [channels[0].search(project, query, depth, exclude)] if channels else []
    runs = {ch.name: hits for ch, hits in zip(channels, first + [f.result() for f in others])}
    kept, cut_off = fuse(runs, pool_size, rrf_k)
    units = load_units(project, [uid for uid, _, _ in kept])
    candidates = tuple(Candidate(units[uid], i, chans, fused)
                       for i, (uid, fused, chans) in enumerate(kept, 1) if uid in units)
    return Pool(candidates, cut_off, tuple(ch.name for ch in channels))


class UnitLoader(Protocol):
    def __call__(self, project: str, ids: list[int]) -> Mapping[int, Unit]: ...
