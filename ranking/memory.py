"""The core, with no knowledge of MCP: remember, recall (the four stages), explain, forget."""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from ..indexing.errors import InputError
from ..indexing.lexical import Bm25Channel, LexicalIndex
from ..indexing.store import Store, WriteResult
from ..indexing.units import Unit, check_names, check_project, check_utf8, parse_time, validate_batch
from .candidates import Channel, Pool, generate_pool
from .ranker import PoolOrderRanker, Ranker, ScoredCandidate
from .slate import Slate, SlateInputs, build_slate

log = logging.getLogger(__name__)

MIN_BUDGET, MAX_BUDGET = 200, 200_000
MAX_QUERY_CHARS = 8_000
SLATE_ID = re.compile(r"s_[0-9a-f]{12}")


@dataclass(frozen=True)
class Selection:
    """The budget-independent part of a recall: eligible pool, ranking, slate inputs."""

    project: str
    query: str
    as_of: datetime | None
    pool: Pool
    ranked: Sequence[ScoredCandidate]
    excluded: set[int]
    inputs: SlateInputs


@dataclass(frozen=True)
class RecallConfig:
    pool_size: int = 128
    rrf_k: int = 60


class Memory:
    def __init__(self, store: Store, channels: Sequence[Channel], ranker: Ranker | None = None,
                 config: RecallConfig = RecallConfig()) -> None:
        self.store = store
        self.channels = list(channels)
        self.ranker: Ranker = ranker or PoolOrderRanker()
        self.config = config

    @classmethod
    def open(cls, home: Path, config: RecallConfig = RecallConfig()) -> "Memory":
        store = Store(Path(home) / "memory.duckdb")
        lexical = LexicalIndex(store, Path(home) / "index" / "bm25")
        return cls(store, [Bm25Channel(lexical)], config=config)

    def close(self) -> None:
        self.store.close()

    # ---- stage 1 ----------------------------------------------------------------------------

    def remember(self, project: str, raw_items: list[dict[str, Any]]) -> list[WriteResult]:
        return self.store.write(check_project(project), validate_batch(raw_items))

    def forget(self, project: str, refs: list[str]) -> list[int]:
        return self.store.forget(check_project(project), check_names(refs, "refs"))

    # ---- stages 2-4 -------------------------------------------------------------------------

    def recall(self, project: str, query: str, budget: int = 2700,
               as_of: datetime | str | None = None) -> Slate:
        """The four stages for one query; the explanation is saved under the slate's id."""
        check_project(project)
        query, budget = _check_query(query), _check_budget(budget)
        selection = self.select(project, query, parse_time(as_of, "as_of"))
        slate = self.build(selection, budget)
        self.store.save_slate(slate.slate_id, project, self._explanation(slate, selection))
        return slate

    def select(self, project: str, query: str, as_of: datetime | None) -> "Selection":
        """Stages 2 and 3: the candidate pool and its ranking (independent of the budget)."""
        excluded = self.store.ineligible_ids(project, as_of)
        pool = generate_pool(self.channels, project, query, self.config.pool_size, excluded,
                             self.store.units, rrf_k=self.config.rrf_k)          # stage 2
        ranked = self.ranker.rank(query, pool.candidates)                        # stage 3
        return Selection(project, query, as_of, pool, ranked, excluded,
                         self._slate_inputs(project, ranked, excluded))

    def build(self, selection: "Selection", budget: int) -> Slate:
        """Stage 4: the slate for one budget."""
        slate_id = "s_" + uuid.uuid4().hex[:12]
        return build_slate(slate_id, selection.project, selection.ranked, budget, selection.inputs)

    def warm(self, project: str) -> None:
        """Build every derived index of a project now rather than at the first recall."""
        for channel in self.channels:
            channel.search(project, "warm", 1, set())

    def _slate_inputs(self, project: str, ranked: Sequence[ScoredCandidate], excluded: set[int]
                      ) -> SlateInputs:
        successors: dict[int, list[Unit]] = {}
        for sc in ranked:
            chain = self._successor_chain(project, sc.unit, excluded)
            if chain:
                successors[sc.unit.id] = chain
        sessions = {u.session for sc in ranked for u in [sc.unit, *successors.get(sc.unit.id, [])]
                    if u.session}
        starts = {s: at for s, (at, _) in self.store.session_context(project, sessions).items()}
        return SlateInputs(successors, starts)

    def _successor_chain(self, project: str, unit: Unit, excluded: set[int]) -> list[Unit]:
        """The eligible decisions that replaced this one, nearest first."""
        chain: list[Unit] = []
        seen = {unit.id}
        nxt = unit.superseded_by
        while nxt is not None and nxt not in seen and nxt not in excluded:
            successor = self.store.units(project, [nxt]).get(nxt)
            if successor is None:
                break
            chain.append(successor)
            seen.add(nxt)
            nxt = successor.superseded_by
        return chain

    def _explanation(self, slate: Slate, selection: "Selection") -> dict[str, Any]:
        query, as_of, pool, ranked = selection.query, selection.as_of, selection.pool, selection.ranked
        in_slate = [it.rank for it in slate.items if it.rank is not None]
        cutoff = max(in_slate) if in_slate else 0
        candidates = []
        for sc in ranked:
            outcome = slate.outcomes.get(sc.unit.id, "skipped_over_budget")
            lost = None
            if outcome == "skipped_over_budget":
                lost = "budget" if sc.rank < cutoff or sc.unit.tokens > slate.budget else "ranking"
            candidates.append({
                "id": sc.unit.id, "rank": sc.rank, "pool_rank": sc.candidate.pool_rank,
                "score": sc.score, "tokens": sc.unit.tokens, "outcome": outcome, "lost_to": lost,
                "channels": {n: {"rank": h.rank, "score": h.score}
                             for n, h in sc.candidate.channels.items()},
                "features": dict(sc.features) if sc.features else None,
            })
        return {
            "slate_id": slate.slate_id, "query": query, "budget": slate.budget,
            "as_of": as_of.isoformat() if as_of else None, "ranker": self.ranker.name,
            "channels": list(pool.channels), "pool_size": self.config.pool_size,
            "tokens": {"used": slate.tokens_used, "preamble": slate.fixed_tokens,
                       "items": sum(it.tokens for it in slate.items),
                       "headers": slate.tokens_used - slate.fixed_tokens
                       - sum(it.tokens for it in slate.items)},
            "successors": [it.unit.id for it in slate.items if it.rank is None],
            "excluded_as_of": len(selection.excluded), "candidates": candidates,
            "beyond_pool": {n: {str(k): v for k, v in ids.items()} for n, ids in pool.cut_off.items()},
        }

    # ---- explanation ------------------------------------------------------------------------

    def explain(self, slate_id: str, allowed: set[str] | frozenset[str],
                refs: Sequence[str] = ()) -> dict[str, Any]:
        refs = check_names(refs, "refs") if refs else []
        valid = isinstance(slate_id, str) and SLATE_ID.fullmatch(slate_id)
        saved = self.store.load_slate(slate_id) if valid else None
        if saved is None or saved[0] not in allowed:
            raise InputError(f"unknown slate id {slate_id!r}; pass the slate_id that recall_slate "
                             "returned (slates of other projects are not visible)")
        project, payload = saved
        live = self.store.units(project, [c["id"] for c in payload["candidates"]])
        candidates = [{**c, **_unit_fields(live[c["id"]])} for c in payload["candidates"]
                      if c["id"] in live]  # forgotten units never reappear
        payload = {**payload, "project": project, "candidates": candidates,
                   "units_in_project": self.store.count_units(project),
                   "out_of_scope_units": self.store.units_outside(project)}
        if refs:
            payload["diagnosis"] = [self._diagnose(project, payload, r) for r in refs]
        return payload

    def _diagnose(self, project: str, payload: dict[str, Any], ref: str) -> dict[str, Any]:
        """Where a fact was lost: never stored, not eligible, never in the pool, ranking, budget."""
        ids = self.store.ids_for(project, ref)
        if not ids:
            return {"ref": ref, "stage": "never_stored",
                    "detail": "no unit with this ref or id exists in the project"}
        by_id = {c["id"]: c for c in payload["candidates"]}
        as_of = parse_time(payload.get("as_of"))
        units = self.store.units(project, ids)
        results = []
        for uid in ids:
            c = by_id.get(uid)
            unit = units.get(uid)
            if c is not None:
                stage = {"in_slate": "in_slate", "in_slate_as_successor": "in_slate",
                         "left_out_superseded": "left_out_superseded"}.get(
                    c["outcome"], f"lost_to_{c['lost_to']}")
                results.append({"id": uid, "stage": stage, "rank": c["rank"]})
            elif uid in payload.get("successors", []):
                results.append({"id": uid, "stage": "in_slate", "rank": None})
            elif as_of is not None and unit is not None and unit.at > as_of:
                results.append({"id": uid, "stage": "not_eligible", "detail": "recorded after as_of"})
            else:
                beyond = {n: r[str(uid)] for n, r in payload["beyond_pool"].items() if str(uid) in r}
                results.append({"id": uid, "stage": "never_in_pool", "channel_ranks": beyond or None,
                                "detail": "below the pool cut-off" if beyond else
                                "not matched by any channel within twice the pool size"})
        stage = results[0]["stage"] if len({r["stage"] for r in results}) == 1 else "mixed"
        return {"ref": ref, "stage": stage, "units": results}


def _unit_fields(u: Unit) -> dict[str, Any]:
    return {"ref": u.ref, "kind": u.kind, "session": u.session, "role": u.role,
            "status": u.status, "path": u.path, "at": u.at.isoformat()}


def _check_query(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InputError("query is empty; describe what the memory should be about")
    check_utf8(query, "query")
    if len(query) > MAX_QUERY_CHARS:
        raise InputError(f"query is over {MAX_QUERY_CHARS} characters; shorten it to the question")
    return query.strip()


def _check_budget(budget: Any) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int) or not MIN_BUDGET <= budget <= MAX_BUDGET:
        raise InputError(f"budget_tokens must be an integer in [{MIN_BUDGET}, {MAX_BUDGET}]; "
                         f"got {budget!r}")
    return budget
