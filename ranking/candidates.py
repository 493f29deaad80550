"""Stage 2: candidate generation. Each channel ranks the project's eligible units; the pool is
their fusion by Reciprocal Rank Fusion, cut at `pool_size`. Every candidate keeps its rank and
score in each channel, for the ranker's features and for `explain_selection`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

from ..indexing.units import Unit

RRF_K = 60
# On LoCoMo the RRF pool holds all of a question's evidence for 83.4% of questions at 128
# candidates, 91.6% at 256, 99.2% at 512 and 100% at 768; the learned ranker can only use what
# the pool holds, and ranking 512 candidates stays cheap for LightGBM (README, Evaluation).
DEFAULT_POOL = 512


@dataclass(frozen=True)
class ChannelHit:
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


def rrf_score(ranks: Sequence[int], k: int = RRF_K) -> float:
    """Reciprocal Rank Fusion (Cormack, Clarke and Buettcher, SIGIR 2009): sum of 1 / (k + rank)."""
    return sum(1.0 / (k + r) for r in ranks)


def fuse(runs: Mapping[str, Sequence[Hit]], pool_size: int, k: int = RRF_K
         ) -> tuple[list[tuple[int, float, dict[str, ChannelHit]]], dict[str, dict[int, int]]]:
    """Fuse channel runs by RRF; ties go to the better best rank, then the lower id (stable)."""
    per_unit: dict[int, dict[str, ChannelHit]] = {}
    for name, hits in runs.items():
        for hit in hits:
            per_unit.setdefault(hit.unit_id, {})[name] = ChannelHit(hit.rank, hit.score)
    scored = sorted(
        ((uid, rrf_score([h.rank for h in chans.values()], k), chans) for uid, chans in per_unit.items()),
        key=lambda t: (-t[1], min(h.rank for h in t[2].values()), t[0]),
    )
    kept, beyond = scored[:pool_size], scored[pool_size:]
    cut_off: dict[str, dict[int, int]] = {}
    for uid, _, chans in beyond:
        for name, hit in chans.items():
            cut_off.setdefault(name, {})[uid] = hit.rank
    return kept, cut_off


def generate_pool(channels: Sequence[Channel], project: str, query: str, pool_size: int,
                  exclude: set[int], load_units: "UnitLoader", depth: int | None = None,
                  rrf_k: int = RRF_K) -> Pool:
    """Run every channel to `depth` (default twice the pool), fuse and keep the top `pool_size`."""
    depth = depth or 2 * pool_size
    runs = {ch.name: ch.search(project, query, depth, exclude) for ch in channels}
    kept, cut_off = fuse(runs, pool_size, rrf_k)
    units = load_units(project, [uid for uid, _, _ in kept])
    candidates = tuple(Candidate(units[uid], i, chans, fused)
                       for i, (uid, fused, chans) in enumerate(kept, 1) if uid in units)
    return Pool(candidates, cut_off, tuple(ch.name for ch in channels))


class UnitLoader(Protocol):
    def __call__(self, project: str, ids: list[int]) -> Mapping[int, Unit]: ...
