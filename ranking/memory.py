"""The core, with no knowledge of MCP: remember, recall (the four stages), explain, forget."""

from __future__ import annotations

import logging
import secrets
import threading
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TypeVar

from agentmemrec.indexing.dense.backfill import EmbeddingWorker, embed_pending
from agentmemrec.indexing.dense.index import DenseChannel, DenseIndex
from agentmemrec.indexing.dense.remote import Unreachable
from agentmemrec.indexing.errors import InputError, StoreError
from agentmemrec.indexing.lexical.index import Bm25Channel, LexicalIndex
from agentmemrec.indexing.lru import memo_bytes
from agentmemrec.indexing.redact import redact, redact_item
from agentmemrec.indexing.segments import INDEX_MEMORY
from agentmemrec.indexing.sources.sink import Ingested
from agentmemrec.indexing.store.backends import open_store
from agentmemrec.indexing.store.protocol import Store, WriteResult
from agentmemrec.indexing.store.sessions import SessionIndex, SessionSnapshot
from agentmemrec.indexing.store.slates import SlateLog
from agentmemrec.indexing.units import Unit, check_names, check_project, check_utf8, parse_time, validate_batch
from agentmemrec.ranking.candidates import DEFAULT_POOL, Channel, Pool, generate_pool
from agentmemrec.ranking.explanation import explain, pack_pool
from agentmemrec.ranking.features import warm_text_features
from agentmemrec.ranking.loading import open_models, without_served
from agentmemrec.ranking.ranker import PoolOrderRanker, Ranker, RankingContext, ScoredCandidate
from agentmemrec.ranking.render import SlateInputs
from agentmemrec.ranking.slate import SESSION_PULL, Slate, build_slate, warm_item_tokens

log = logging.getLogger(__name__)
T = TypeVar("T")

MIN_BUDGET, MAX_BUDGET = 200, 200_000
MAX_QUERY_CHARS = 8_000
EMPTY_PROJECT_NOTE = "project {!r} holds no units yet"  # a recall's note where the project holds nothing


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
    strength: float | None = None  # how strongly the ranking answers the query (see ranking/strength.py)
    dense_query: str | None = None  # what the embedder read for the query (DenseChannel.query_text)
    notes: tuple[str, ...] = ()  # what this recall went without (an inference server that did not answer)
    left_out: frozenset[str] = frozenset()  # the roles of the served models it went without


@dataclass(frozen=True)
class RecallConfig:
    pool_size: int = DEFAULT_POOL  # 0 ranks the whole (eligible, matched) history
    rrf_k: int = 60


class Memory:
    def __init__(self, store: Store, channels: Sequence[Channel], ranker: Ranker | None = None,
                 config: RecallConfig = RecallConfig(), dense: DenseIndex | None = None,
                 worker: EmbeddingWorker | None = None, problems: Sequence[str] = (),
                 redact: bool = True) -> None:
        self.store = store
        self.channels = list(channels)
        self.ranker: Ranker = ranker or PoolOrderRanker()
        self.config = config
        self.dense = dense
        self.worker = worker
        self.problems = list(problems)  # what is degraded: logged at the first recall, in every explanation
        self._unsaid = list(problems)
        self.sessions = SessionIndex(store)
        self.slates = SlateLog(store)  # explanations, saved off the request path
        self.redact = redact  # secrets are replaced by markers before anything is stored
        self._lifecycle = threading.Lock()
        self._closed = False
        self._reading = threading.Lock()  # held by each store read of the warm-up; close waits for it
        self.written: dict[str, set[int]] = {}  # per project, the units stored or changed that no worker embeds

    @classmethod
    def open(cls, home: Path, config: RecallConfig = RecallConfig(), device: str = "auto",
             background: bool = True, ranker_model: Path | None = None, redact: bool = True,
             rerank_limit: int | None = None, store_url: str | None = None,
             index_memory: int | None = INDEX_MEMORY, inference: str | None = None,
             inference_token: str | None = None) -> "Memory":
        """The store (the home's DuckDB file, or the PostgreSQL database `store_url` names), its
        derived indexes and the active models under `home`, or those of the inference servers
        `inference` names (sent `inference_token`, if any). A missing or broken model degrades (to lexical retrieval, to fusion
        order), logged once and stated in every explanation. `index_memory` bounds what each
        derived index keeps of projects' snapshots (bytes)."""
        store = open_store(home, store_url)
        bm25_dir = store.index_dir / "bm25" if store.index_dir else None
        channels: list[Channel] = [Bm25Channel(LexicalIndex(store, bm25_dir, index_memory))]
        embedder, ranker, problems = open_models(home, device, ranker_model, rerank_limit, inference,
                                                 inference_token)
        dense = DenseIndex(store, embedder, index_memory) if embedder else None
        worker = EmbeddingWorker(dense.vectors, embedder).start() if dense and background else None
        if dense is not None:
            channels.append(DenseChannel(dense))
        return cls(store, channels, ranker, config, dense, worker, problems, redact)

    def start_embedding(self, warm: str | None = None) -> None:
        """Embed in the background what lacks a vector. With `warm`, that project's indexes are
        loaded first, so a backfill does not slow the load the first recall waits for."""
        if self.dense is None or self.worker is not None:
            return
        worker = self.worker = EmbeddingWorker(self.dense.vectors, self.dense.embedder)

        def run() -> None:
            try:
                if warm is not None:
                    self.warm_indexes(warm)
            except Exception:  # the first recall loads them instead
                if not self._closed:
                    log.exception("loading the indexes of %s at start failed", warm)
            with self._lifecycle:
                if not self._closed:
                    worker.start()
            try:
                if warm is not None and not self._closed:  # after the backfill started: it embeds what recalls miss
                    self.warm_caches(warm)
            except Exception:  # recalls fill the caches instead
                if not self._closed:  # a store closed meanwhile is no failure
                    log.exception("warming the caches of %s at start failed", warm)
        threading.Thread(target=run, name="agentmemrec-warm", daemon=True).start()

    def pending_written(self) -> dict[str, int]:
        """Per project, how many units this memory stored or changed: what `embed_written` embeds
        (none without a model, or with the background worker, which embeds them itself)."""
        return {p: len(ids) for p, ids in sorted(self.written.items()) if ids} if self.worker is None else {}

    def embed_written(self, progress: Callable[[int], None] | None = None) -> dict[str, int]:
        """Embed what this memory wrote (a command that wrote with no server running, as it exits), not
        the rest of a project's backlog; returns, per project it wrote to, the units still without a vector."""
        for p in self.pending_written():
            embed_pending(self.dense.vectors, self.dense.embedder, p, progress=progress, only=self.written[p])
        return {p: n for p in self.pending_written() if (n := self.dense.vectors.count_pending(p))}

    def compile_ranker(self) -> threading.Thread | None:
        """Predict with the ranker's boosters compiled to machine code, once they are (from the
        cache, else compiled in the background): what the process that owns the memory does at
        start. The thread that does it; None without a learned model or lleaves."""
        model = getattr(self.ranker, "model", None)
        return model.compile() if model is not None else None

    def close(self) -> None:
        with self._lifecycle:
            self._closed = True
        with self._reading:  # a warm-up read still running on the store would abort the process at its close
            pass
        if self.worker is not None:
            self.worker.stop()
        self.slates.close()
        self.store.close()

    def runs_on(self) -> tuple[str | None, int | None]:
        """Where this memory's models run (`cpu:fp32`; None without a model) and how many
        candidates its cross-encoder scores (None without one)."""
        reranker = getattr(self.ranker, "reranker", None)
        model = self.dense.embedder if self.dense is not None else reranker
        device = f"{model.device}:{model.precision}" if model is not None else None
        return device, reranker.limit if reranker is not None else None

    def memory_use(self) -> dict[str, int]:
        """Bytes held by each derived index's snapshots and by the caches (all bounded)."""
        out = {ch.name: ch.index.nbytes for ch in self.channels if hasattr(getattr(ch, "index", None), "nbytes")}
        return {**out, "units": self.store.cached_bytes, "sessions": self.sessions.cached_bytes,
                "texts": memo_bytes()}

    def notes(self, project: str) -> list[str]:
        """What a reader of an explanation should know about how complete the channels were."""
        out = list(self.problems)
        if self.dense is None and not out:
            out.append("candidates come from BM25 alone: no embedder is active (the default set adds the "
                       "dense channel and the cross-encoder: agentmemrec models install --default, or "
                       "agentmemrec models activate NAME for one installed)")
        # an idle worker embedded this process's writes, not those of others sharing the store (no index_dir)
        if self.dense is not None and not (self.worker is not None and self.worker.idle and self.store.index_dir):
            pending = self.dense.vectors.count_pending(project)
            if pending:
                out.append(f"{pending} units not yet embedded: they are found by BM25 only until "
                           "the background embedder of a running server (`agentmemrec serve`, or the "
                           "owner a client's hook starts) reaches them")
        return out

    # ---- stage 1 ----------------------------------------------------------------------------

    def remember(self, project: str, raw_items: list[dict[str, Any]],
                 redact: bool | None = None) -> list[WriteResult]:
        return list(self.ingest(project, raw_items, redact).results)

    def ingest(self, project: str, raw_items: list[dict[str, Any]], redact: bool | None = None) -> Ingested:
        """Redact (as the caller says; None: as this memory was opened), validate and store a
        batch; every write path comes here."""
        check_project(project)
        counts: Counter[str] = Counter()
        if (self.redact if redact is None else redact) and isinstance(raw_items, list):
            redacted = [redact_item(raw, f"item {i}") for i, raw in enumerate(raw_items, 1)]
            raw_items = [raw for raw, _ in redacted]
            for _, found in redacted:
                counts.update(found)
        results = self.store.write(project, validate_batch(raw_items))
        self.rewritten(project, (i for r in results if r.outcome != "unchanged" for i in r.ids))
        if counts:
            log.info("redacted %d secret(s) before storing in %s: %s", sum(counts.values()), project,
                     ", ".join(f"{name} x{n}" for name, n in sorted(counts.items())))
        return Ingested(tuple(results), dict(counts))

    def forget(self, project: str, refs: list[str]) -> list[int]:
        """Remove units by ref or id from the store, and their words from any index saved on disk."""
        ids = self.store.forget(check_project(project), check_names(refs, "refs"))
        self.purge(project)
        return ids

    def purge(self, project: str) -> None:
        """Words that no stored unit holds any more leave the indexes saved on disk."""
        for channel in self.channels:
            channel.purge(project)

    def rewritten(self, project: str, ids: Iterable[int]) -> None:
        """Units stored or changed in place are embedded: by the worker, or by `embed_written`."""
        if self.dense is not None and self.worker is None:
            self.written.setdefault(project, set()).update(ids)
        if self.worker is not None:
            self.worker.notify()  # embedding happens in the background; the write never waits

    # ---- stages 2-4 -------------------------------------------------------------------------

    def recall(self, project: str, query: str, budget: int = 2700, as_of: datetime | str | None = None,
               pool_size: int | None = None, matched_only: bool = False) -> Slate:
        """The four stages for one query; the explanation is saved under the slate's id. `pool_size`
        is the caller's (None: this memory's configuration); `matched_only` as for `build_slate`."""
        check_project(project)
        query, budget = check_query(query), check_budget(budget)
        pool_size = self.config.pool_size if pool_size is None else _check_pool(pool_size)
        selection = self.select(project, query, parse_time(as_of, "as_of"), pool_size)
        slate = self.build(selection, budget, matched_only)
        notes = self.notes(project) + list(selection.notes)
        if not slate.items and self.store.count_units(project) == 0:
            notes.append(EMPTY_PROJECT_NOTE.format(project))
        elif not slate.items and selection.ranked:
            notes.append(f"the best matches did not fit budget_tokens={budget}; ask again with a larger budget")
        top = float(selection.ranked[0].score) if selection.ranked else None
        logits = [x for sc in selection.ranked if (x := (sc.features or {}).get("cross_encoder")) is not None]
        slate = replace(slate, notes=tuple(notes), top_score=top, top_relevance=max(logits) if logits else None)
        self.slates.save(slate.slate_id, project, partial(self._explanation, slate, selection, pool_size,
                                                          self.store.generation(project)))
        return slate

    def select(self, project: str, query: str, as_of: datetime | None,
               pool_size: int | None = None) -> "Selection":
        """Stages 2 and 3: the candidate pool and its ranking (independent of the budget)."""
        self._say_problems()
        self.store.refresh(project)  # another process's acknowledged write is in this recall
        excluded = self.store.ineligible_ids(project, as_of)
        size = (self.config.pool_size if pool_size is None else pool_size) or max(self.store.count_units(project), 1)  # 0: the whole history
        channels, ranker, notes, left_out = self.channels, self.ranker, [], set()
        while True:  # a served model that does not answer is left out of this recall, and said
            try:
                pool = generate_pool(channels, project, query, size, excluded,
                                     self.store.units, depth=2 * size, rrf_k=self.config.rrf_k)  # stage 2
                units = [c.unit for c in pool.candidates]
                sessions = self.sessions.around(project, (u.session for u in units), units)
                context = RankingContext(project, query, as_of, 2 * size, sessions, channels)
                ranked = ranker.rank(pool.candidates, context)                      # stage 3
                break
            except Unreachable as exc:
                channels, ranker, note = without_served(exc, channels, ranker)
                notes.append(note)
                left_out.add(exc.role)
        dense = next((ch for ch in channels if isinstance(ch, DenseChannel)), None)
        return Selection(project, query, as_of, pool, ranked, excluded,
                         self._slate_inputs(project, ranked, excluded, sessions), ranker.strength(ranked),
                         dense.query_text(project, query) if dense else None, tuple(notes), frozenset(left_out))

    def _say_problems(self) -> None:
        """Each degradation is logged once, at the first recall (commands that never recall are quiet)."""
        with self._lifecycle:
            unsaid, self._unsaid = self._unsaid, []
        for problem in unsaid:
            log.warning("%s", problem)

    def models(self, left_out: frozenset[str] = frozenset()) -> dict[str, Any]:
        """The models this recall path runs: the explanation's account of the pipeline, without
        the served ones a recall went without (`left_out`: their roles)."""
        reranker = None if "cross-encoder" in left_out else getattr(self.ranker, "reranker", None)
        model = getattr(self.ranker, "model", None)
        dense = None if "embedder" in left_out else self.dense
        return {"embedder": dense.embedder.identity if dense else None,
                "cross_encoder": reranker.identity if reranker else None, "cross_encoder_depth": getattr(reranker, "limit", 0),
                "ranker": model.meta.get("file") if model else self.ranker.name,
                "ranker_code": model.code if model else None}

    def build(self, selection: "Selection", budget: int, matched_only: bool = False) -> Slate:
        """Stage 4: the slate for one budget."""
        return build(selection, budget, self.slates.instance, matched_only)

    def warm(self, project: str) -> None:
        """Build every derived index of a project now rather than at the first recall, and read
        its newest units and its sessions' order while they fit their caches."""
        self.warm_indexes(project)
        self.warm_caches(project)

    def warm_indexes(self, project: str) -> None:
        for channel in self.channels:
            self._while_open(channel.search, project, "warm", 1, set())

    def warm_caches(self, project: str) -> None:
        units = self._while_open(self.store.warm_units, project)
        warm_text_features(units)
        warm_item_tokens(units)
        self._while_open(self.sessions.prime, project)

    def _while_open(self, read: Callable[..., T], *args: Any) -> T:
        """One read of the store by a warm-up, which `close` waits for; none once it is closed."""
        with self._reading:
            if self._closed:
                raise StoreError("the memory was closed while warming up")
            return read(*args)

    def _slate_inputs(self, project: str, ranked: Sequence[ScoredCandidate], excluded: set[int],
                      sessions: SessionSnapshot) -> SlateInputs:
        return SlateInputs(self._successor_chains(project, [sc.unit for sc in ranked], excluded),
                           sessions.starts)

    def _successor_chains(self, project: str, units: Sequence[Unit], excluded: set[int]) -> dict[int, list[Unit]]:
        """For each superseded decision, the eligible decisions that replaced it, nearest first;
        read one link of every chain per query."""
        chains: dict[int, list[Unit]] = {u.id: [] for u in units if u.superseded_by is not None}
        tips = {u.id: u for u in units if u.superseded_by is not None}
        seen = {uid: {uid} for uid in tips}
        while tips:
            wanted = {u.superseded_by for u in tips.values()} - excluded
            found = self.store.units(project, wanted)
            nxt = {}
            for uid, tip in tips.items():
                successor = found.get(tip.superseded_by)
                if successor is not None and successor.id not in seen[uid]:
                    chains[uid].append(successor)
                    seen[uid].add(successor.id)
                    if successor.superseded_by is not None:
                        nxt[uid] = successor
            tips = nxt
        return {uid: chain for uid, chain in chains.items() if chain}

    def _saved(self, query: str | None) -> str | None:
        return redact(query).text if query and self.redact else query

    def _explanation(self, slate: Slate, selection: "Selection", pool_size: int, generation: int) -> dict[str, Any]:
        pool = selection.pool
        return {
            # saved and shown to whoever holds the slate id: a secret pasted into a prompt is not kept
            "slate_id": slate.slate_id, "query": self._saved(selection.query), "budget": slate.budget,
            "generation": generation,  # the project's, when recalled: what was written since is later
            "as_of": selection.as_of.isoformat() if selection.as_of else None, "ranker": self.ranker.name,
            "channels": list(pool.channels), "dense_query": self._saved(selection.dense_query),
            "models": self.models(selection.left_out), "pool_size": pool_size,
            "tokens": {"used": slate.tokens_used, "preamble": slate.fixed_tokens,
                       "items": sum(it.tokens for it in slate.items),
                       "headers": slate.tokens_used - slate.fixed_tokens
                       - sum(it.tokens for it in slate.items)},
            "successors": [it.unit.id for it in slate.items
                           if slate.outcomes.get(it.unit.id) == "in_slate_as_successor"],
            "excluded_as_of": len(selection.excluded), "notes": list(slate.notes),
            "pool": pack_pool(slate, selection.ranked, selection.inputs, pool.channels, pool.cut_off),
        }

    # ---- explanation ------------------------------------------------------------------------

    def explain(self, slate_id: str, allowed: set[str] | frozenset[str], refs: Sequence[str] = (),
                others: int | None = None) -> dict[str, Any]:
        return explain(self, slate_id, allowed, refs, others)


def build(selection: Selection, budget: int, id_prefix: str = "", matched_only: bool = False, pull: int = SESSION_PULL
          ) -> Slate:
    """Stage 4 for a selection: the slate at one budget, under a fresh slate id (starting with `id_prefix`)."""
    return build_slate(new_slate_id(id_prefix), selection.project, selection.ranked, budget, selection.inputs,
                       selection.strength, selection.query, matched_only, pull)


def new_slate_id(prefix: str = "") -> str:
    """Decimal digits, which the tokenizer cuts into the same number of tokens whatever they are: with
    hex digits the slate's first line took 19 to 28 tokens, so the room left for items changed with the id."""
    return "s_" + (prefix + f"{secrets.randbelow(10 ** 16):016d}")[:16]


def check_query(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InputError("query is empty; describe what the memory should be about")
    check_utf8(query, "query")
    if len(query) > MAX_QUERY_CHARS:
        raise InputError(f"query is over {MAX_QUERY_CHARS} characters; shorten it to the question")
    return query.strip()


def _check_pool(size: Any) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise InputError(f"pool_size must be a whole number of candidates (0: the whole history); got {size!r}")
    return size


def check_budget(budget: Any, name: str = "budget_tokens") -> int:
    """`name` is what the caller called it: the tool's argument, or a command's flag."""
    if isinstance(budget, bool) or not isinstance(budget, int) or not MIN_BUDGET <= budget <= MAX_BUDGET:
        raise InputError(f"{name} must be an integer in [{MIN_BUDGET}, {MAX_BUDGET}]; "
                         f"got {budget!r}")
    return budget
