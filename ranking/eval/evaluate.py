"""`agentmemrec eval`: evidence selection measured stage by stage on LoCoMo, LongMemEval and the coding-memory set.

Each conversation (LoCoMo), question haystack (LongMemEval) or coding benchmark file (all its projects in one
store) is written to a fresh temporary store through `Memory.remember`, the write path the MCP tool uses; each
question then runs the product's selection in its own project (`Memory.select` then `Memory.build` per budget,
the code `recall` runs). Besides completeness, every slate is checked for what must never happen: another
project's unit in it, a proposed or rejected decision not shown as such, a superseded decision without its successor.
"""

from __future__ import annotations

import logging
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import duckdb
from tqdm import tqdm

from agentmemrec.indexing.dense.backfill import embed_pending
from agentmemrec.indexing.dense.embedder import Embedder, ranker_identity
from agentmemrec.indexing.dense.index import DenseChannel, DenseIndex
from agentmemrec.indexing.dense.models import INSTALL_HINT, active, models_dir
from agentmemrec.indexing.errors import InputError, StoreError
from agentmemrec.indexing.lexical.index import Bm25Channel, LexicalIndex
from agentmemrec.indexing.store.duckdb_store import DuckDBStore
from agentmemrec.indexing.store.embedding_cache import EmbeddingCache
from agentmemrec.ranking.candidates import DEFAULT_POOL
from agentmemrec.ranking.cross_encoder import DEFAULT_LIMIT, CachedReranker, OnnxReranker, Reranker
from agentmemrec.ranking.eval.benchmarks import Case, Question, read_cases
from agentmemrec.ranking.eval.metrics import Outcome, by_category, slate_violations, summarize
from agentmemrec.ranking.eval.options import VARIANT_NAMES
from agentmemrec.ranking.learned import LearnedRanker, RankerModel, choose_ranker
from agentmemrec.ranking.loading import load_embedder
from agentmemrec.ranking.memory import Memory, RecallConfig, Selection, build
from agentmemrec.ranking.ranker import CrossEncoderRanker, Ranker
from agentmemrec.ranking.slate import ASKS_DECISIONS_RE, SESSION_PULL, unmatched

log = logging.getLogger(__name__)
FEATURES_VARIANT = "features"
WRITE_BATCH = 1000


class Unavailable(Exception):
    """A variant whose models are not installed: reported, never silently replaced."""


@dataclass(frozen=True)
class EvalModels:
    """Models loaded once for a whole run, and the cache of embeddings and cross-encoder logits
    shared by its stores."""

    embedder: Embedder | None = None
    reranker: Reranker | None = None
    cache: EmbeddingCache | None = None
    missing: str = "no embedder installed"
    ranker_model: RankerModel | None = None  # `full`'s model: the one the server would choose
    ranker_note: str | None = None  # why that model does not match the active models


class CaseStores:
    """One case's temporary store and the derived indexes its variants share."""

    def __init__(self, root: Path, models: EvalModels, config: RecallConfig) -> None:
        self.store = DuckDBStore(root / "memory.duckdb")
        self.models = models
        self.config = config
        self.bm25 = Bm25Channel(LexicalIndex(self.store, root / "index" / "bm25"))
        self.dense_index = DenseIndex(self.store, models.embedder) if models.embedder else None

    def dense(self) -> DenseChannel:
        if self.dense_index is None:
            raise Unavailable(self.models.missing)
        return DenseChannel(self.dense_index)

    def reranker(self) -> Reranker:
        if self.models.reranker is None:
            raise Unavailable("no reranker installed; install one with: agentmemrec models install "
                              "BAAI/bge-reranker-v2-m3 --as reranker")
        return self.models.reranker

    def channels(self) -> list:
        """What the server would search with these models: BM25, and the dense channel if any."""
        return [self.bm25] + ([DenseChannel(self.dense_index)] if self.dense_index else [])

    def full(self) -> LearnedRanker:
        model = self.models.ranker_model
        return LearnedRanker(model, self.models.reranker if model and model.uses_reranker else None)

    def memory(self, channels: list, ranker: Ranker | None = None) -> Memory:
        return Memory(self.store, channels, ranker, self.config, dense=self.dense_index)


VARIANTS: dict[str, Callable[[CaseStores], Memory]] = {
    "bm25": lambda c: c.memory([c.bm25]),
    "dense": lambda c: c.memory([c.dense()]),
    "rrf": lambda c: c.memory([c.bm25, c.dense()]),
    "rerank": lambda c: c.memory([c.bm25, c.dense()], CrossEncoderRanker(c.reranker())),
    "full": lambda c: c.memory(c.channels(), c.full()),  # the server's pipeline for the active models
    # features only, in pool order: what training and cross-validation collect
    FEATURES_VARIANT: lambda c: c.memory(c.channels(), LearnedRanker(None, c.models.reranker)),
}


def load_models(home: Path, variants: Sequence[str], device: str = "auto", cache: bool = True,
                ranker_path: Path | None = None, rerank_depth: int | None = None,
                rerank_tokens: int | None = None, training: bool = False) -> EvalModels:
    """The active models of `home`, loaded only if a requested variant needs them; `full` ranks
    with the model the server would choose for them (or `ranker_path`). The cross-encoder runs
    where that model uses it, and in training (`training`) whenever one is active, at
    `rerank_depth` candidates and `rerank_tokens` tokens a pair, by default the chosen model's."""
    check_variants(variants)
    needs_dense = training or any(v != "bm25" for v in variants)
    embedder = load_embedder(home, device) if needs_dense else None
    manifest = active(home)["reranker"]
    model, note = None, None
    if training or "full" in variants:
        try:
            model, note = choose_ranker(ranker_identity(embedder),
                                        manifest.identity if manifest else None, ranker_path)
        except StoreError:
            if not training:  # training needs no model: it makes one
                raise
    wanted = training or "rerank" in variants or (model is not None and model.uses_reranker)
    store = open_cache(home, "embeddings") if cache and embedder is not None else None
    reranker: Reranker | None = None
    if manifest is not None and wanted:
        depth = rerank_depth or (model.rerank_depth if model and model.uses_reranker else 0) or DEFAULT_LIMIT
        tokens = rerank_tokens or (model.rerank_tokens if model and model.uses_reranker else None)
        reranker = OnnxReranker(models_dir(home) / manifest.name, device, manifest, depth, tokens)
        logits = open_cache(home, "cross-encoder") if cache else None
        reranker = CachedReranker(reranker, logits) if logits is not None else reranker
    return EvalModels(embedder, reranker, store, f"no embedder installed under {home}; install one with: "
                      f"{INSTALL_HINT}", model, note)


def check_variants(variants: Sequence[str]) -> list[str]:
    unknown = [v for v in variants if v not in VARIANT_NAMES]
    if unknown:
        raise InputError(f"unknown variant(s) {unknown}; available: {', '.join(VARIANT_NAMES)}")
    return list(variants)


def open_cache(home: Path, name: str) -> EmbeddingCache | None:
    """`embeddings` or `cross-encoder` logits: a file each, so one run's lock does not stop the other."""
    try:
        return EmbeddingCache(home / "cache" / f"{name}.duckdb")
    except duckdb.IOException as exc:  # another evaluation holds it: run without, say so
        log.warning("%s cache unavailable (%s); computing without it", name, str(exc).split(":")[0])
        return None


@dataclass
class VariantRun:
    name: str
    outcomes: dict[int, list[Outcome]] = field(default_factory=dict)  # budget -> outcomes
    latency_ms: dict[int, list[float]] = field(default_factory=dict)
    unavailable: str | None = None
    matched_only: bool = False  # slates built as the hook builds them (`build_slate`'s `matched_only`)
    pull: int = SESSION_PULL  # the slate's session pull (`build_slate`'s `pull`; 0: the ablation's)
    twin: "VariantRun | None" = None  # where `record_selection` also scores the selection (`unpulled`)

    def unpulled(self) -> "VariantRun":  # the twin for `--ablation session-pull`: slates walked in rank order
        return VariantRun(f"{self.name}-no-session-pull", {b: [] for b in self.outcomes},
                          {b: [] for b in self.outcomes}, matched_only=self.matched_only, pull=0)


def select_questions(cases: list[Case], limit: int | None, seed: int) -> set[str]:
    qids = [q.qid for c in cases for q in c.questions]
    if limit is None or limit >= len(qids):
        return set(qids)
    return set(random.Random(seed).sample(qids, limit))


def _lost_to(selection: Selection, slate_ids: set[int], evidence: frozenset[str],
             outcomes: Mapping[int, str]) -> str | None:
    """For a complete pool and incomplete slate: 'ranking' if some missing evidence unit ranked below the last item
    that made the slate or was left out as unmatched (`matched_only`), else 'budget' (it ranked higher, did not fit)."""
    cutoff = max((sc.rank for sc in selection.ranked if sc.unit.id in slate_ids), default=0)
    missing = [sc for sc in selection.ranked if sc.unit.ref in evidence and sc.unit.id not in slate_ids]
    return ("ranking" if any(sc.rank > cutoff or outcomes.get(sc.unit.id) == "left_out_unmatched" for sc in missing)
            else "budget")


def evaluate(dataset: str, paths: list[Path], variants: Sequence[str], budgets: Sequence[int],
             limit: int | None = None, seed: int = 0, pool_size: int = DEFAULT_POOL,
             per_question: list[dict[str, Any]] | None = None, models: EvalModels = EvalModels(),
             keep: Keeper | None = None, cases: list[Case] | None = None,
             matched_only: bool = False, without_pull: bool = False) -> tuple[list[VariantRun], dict[str, float]]:
    """Run each variant on each question (of `cases`, read from `paths` if not given). With `keep`, the hidden
    features variant runs too, its selections to `keep` (cross-validation); `without_pull`: `unpulled` twins."""
    variants = check_variants(variants) + ([FEATURES_VARIANT] if keep is not None else [])
    cases = list(read_cases(dataset, paths)) if cases is None else cases
    chosen = select_questions(cases, limit, seed)
    runs = {v: VariantRun(v, {b: [] for b in budgets}, {b: [] for b in budgets}, matched_only=matched_only)
            for v in variants}
    for name, run in runs.items() if without_pull else ():  # kept selections are scored by cross-validation
        run.twin = run.unpulled() if name != FEATURES_VARIANT else None
    cost = {"ingest_units": 0, "ingest_s": 0.0, "embed_units": 0, "embed_s": 0.0}
    config = RecallConfig(pool_size=pool_size)
    bar = tqdm(total=len(chosen), desc=f"eval {dataset}", unit="q", file=sys.stderr, disable=False, mininterval=1.0)
    for case in cases:
        questions = [q for q in case.questions if q.qid in chosen]
        if not questions:
            continue
        with tempfile.TemporaryDirectory(prefix="agentmemrec-eval-") as tmp:
            stores = CaseStores(Path(tmp), models, config)
            try:
                memories = _open_variants(runs, stores)
                _ingest(stores, memories, case, cost)
                for q in questions:
                    _ask(q, case, memories, runs, budgets, per_question, keep)
                    bar.update(1)
            finally:
                stores.store.close()
    bar.close()
    return (done := [r for v, r in runs.items() if v != FEATURES_VARIANT]) + [r.twin for r in done if r.twin], cost


def _open_variants(runs: dict[str, VariantRun], stores: CaseStores) -> dict[str, Memory]:
    memories = {}
    for name, run in runs.items():
        try:
            memories[name] = VARIANTS[name](stores)
        except Unavailable as exc:
            run.unavailable = str(exc)
    return memories


def _ingest(stores: CaseStores, memories: dict[str, Memory], case: Case, cost: dict[str, float]) -> None:
    """Write through `remember`, then embed what a dense variant needs (the product's background
    worker does this after `remember` returns; here it is awaited and timed apart)."""
    if not memories:
        return
    start = time.perf_counter()
    writer = next(iter(memories.values()))
    for project, items in case.projects.items():
        for i in range(0, len(items), WRITE_BATCH):
            writer.remember(project, items[i:i + WRITE_BATCH])
        cost["ingest_units"] += len(items)
    cost["ingest_s"] += time.perf_counter() - start
    if stores.dense_index is not None and any(m.dense for m in memories.values()):
        start = time.perf_counter()
        for project in case.projects:
            cost["embed_units"] += embed_pending(stores.dense_index.vectors, stores.models.embedder,
                                                 project, stores.models.cache)
        cost["embed_s"] += time.perf_counter() - start
    for memory in memories.values():
        for project in case.projects:
            memory.warm(project)


def _ask(q: Question, case: Case, memories: dict[str, Memory], runs: dict[str, VariantRun],
         budgets: Sequence[int], per_question: list[dict[str, Any]] | None, keep: Keeper | None) -> None:
    for name, memory in memories.items():
        t0 = time.perf_counter()
        selection = memory.select(q.project, q.text, q.as_of)
        select_ms = (time.perf_counter() - t0) * 1000
        if keep is not None and name == FEATURES_VARIANT:
            keep(Kept(case.case_id, q, selection, select_ms))
            continue
        record_selection(runs[name], case.case_id, q, selection, select_ms, budgets, per_question)


@dataclass(frozen=True)
class Kept:
    """A question's selection kept for cross-validated ranking (pool, features, slate inputs)."""

    case_id: str
    question: Question
    selection: Selection
    select_ms: float


Keeper = Callable[[Kept], None]


def record_selection(run: VariantRun, case_id: str, q: Question, selection: Selection, select_ms: float,
                     budgets: Sequence[int], per_question: list[dict[str, Any]] | None) -> None:
    """Build the slate at each budget and compare it with the evidence."""
    pool = frozenset(c.unit.ref for c in selection.pool.candidates if c.unit.project == q.project)
    pool_rank = {c.unit.ref: i for i, c in enumerate(selection.pool.candidates, 1)
                 if c.unit.project == q.project and c.unit.ref in q.evidence}
    record: dict[str, Any] = {"variant": run.name, "case": case_id, "qid": q.qid, "project": q.project,
                              "category": q.category, "question": q.text,
                              "as_of": q.as_of.isoformat() if q.as_of else None,
                              "evidence": sorted(q.evidence), "in_pool": sorted(q.evidence & pool),
                              "evidence_strength": selection.strength,
                              "top_score": selection.ranked[0].score if selection.ranked else None,
                              "evidence_rank": {sc.unit.ref: sc.rank for sc in selection.ranked
                                                if sc.unit.project == q.project and sc.unit.ref in q.evidence},
                              "evidence_pool_rank": pool_rank,
                              "in_slate": {}, "slate_items": {}, "violations": {}}
    by_id, asks = {sc.unit.id: sc for sc in selection.ranked}, bool(ASKS_DECISIONS_RE.search(q.text))
    for budget in budgets:
        t1 = time.perf_counter()
        slate = build(selection, budget, matched_only=run.matched_only, pull=run.pull)
        run.latency_ms[budget].append(select_ms + (time.perf_counter() - t1) * 1000)
        # a turn stored in parts (indexing/units.py) is in the slate when each of its pooled parts is
        # a unit whose very text the slate shows under another id (a duplicate) is in it too
        duplicates = {i for i, o in slate.outcomes.items() if o == "duplicate_in_slate"}
        ids = {it.unit.id for it in slate.items} | duplicates
        partial = {c.unit.ref for c in selection.pool.candidates if c.unit.kind == "turn" and c.unit.id not in ids}
        refs = ({it.unit.ref for it in slate.items if it.unit.project == q.project}
                | {sc.unit.ref for sc in selection.ranked if sc.unit.id in duplicates and sc.unit.project == q.project}
                ) - partial
        lost = None
        if q.evidence and q.evidence <= pool and not q.evidence <= refs:
            lost = _lost_to(selection, ids, q.evidence, slate.outcomes)
        checks = slate_violations(slate, q.project, selection.inputs)
        missing = tuple(pool_rank.get(e) for e in sorted(q.evidence - refs))
        off_topic = sum(it.unit.ref not in q.evidence and it.unit.id in by_id and unmatched(by_id[it.unit.id], asks)
                        for it in slate.items)
        run.outcomes[budget].append(Outcome(q.category, q.evidence, pool, frozenset(refs), lost, q.qid,
                                            q.answerable, *checks, selection.strength, missing, len(slate.items),
                                            off_topic))
        record["in_slate"][str(budget)] = sorted(q.evidence & refs)
        record["slate_items"][str(budget)] = len(slate.items)
        if any(checks):
            record["violations"][str(budget)] = dict(zip(("leaked", "misshown", "orphaned"), checks))
    if per_question is not None:
        per_question.append(record)
    if run.twin is not None:
        record_selection(run.twin, case_id, q, selection, select_ms, budgets, None)


def records(dataset: str, runs: list[VariantRun], cost: dict[str, float]) -> list[dict[str, Any]]:
    """One JSON record per (variant, budget)."""
    out = []
    ingest_rate = cost["ingest_units"] / cost["ingest_s"] if cost["ingest_s"] else None
    embed_rate = cost["embed_units"] / cost["embed_s"] if cost["embed_s"] else None
    for run in runs:
        for budget, outcomes in run.outcomes.items():
            lat = sorted(run.latency_ms[budget])
            out.append({
                "dataset": dataset, "variant": run.name + (" (hook slates)" if run.matched_only else ""),
                "budget": budget,
                "available": run.unavailable is None, "unavailable_reason": run.unavailable,
                **summarize(outcomes), "by_category": by_category(outcomes),
                "recall_p50_ms": statistics.median(lat) if lat else None,
                "recall_p95_ms": lat[min(len(lat) - 1, int(0.95 * len(lat)))] if lat else None,
                "ingest_units_per_s": ingest_rate, "embed_units_per_s": embed_rate,
            })
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def format_table(recs: list[dict[str, Any]]) -> str:
    head = ("variant", "budget", "questions", "pool", "slate", "cond_rank", "recall", "multi", "leaks",
            "p50_ms", "p95_ms", "ingest/s", "lost:pool/rank/budget")
    rows = [head]
    for r in recs:
        if not r["available"]:
            rows.append((r["variant"], str(r["budget"]), "unavailable: " + str(r["unavailable_reason"]),
                         *[""] * 10))
            continue
        rows.append((r["variant"], str(r["budget"]), str(r["questions"]), _pct(r["pool_completeness"]),
                     _pct(r["slate_completeness"]), _pct(r["conditional_ranking_completeness"]),
                     _pct(r["evidence_recall"]), _pct(r["multi_evidence_completeness"]),
                     str(len(r["leaked_questions"])), _ms(r["recall_p50_ms"]), _ms(r["recall_p95_ms"]),
                     "-" if r["ingest_units_per_s"] is None else f"{r['ingest_units_per_s']:.0f}",
                     f"{r['lost_never_in_pool']}/{r['lost_in_ranking']}/{r['lost_to_budget']}"))
    cat_rows = [("variant", "budget", "category", "questions", "pool", "slate", "cond_rank", "recall")]
    for r in recs:
        for cat, m in (r["by_category"] or {}).items():
            cat_rows.append((r["variant"], str(r["budget"]), cat, str(m["questions"]),
                             _pct(m["pool_completeness"]), _pct(m["slate_completeness"]),
                             _pct(m["conditional_ranking_completeness"]), _pct(m["evidence_recall"])))
    return _grid(rows) + "\n\nby category\n" + _grid(cat_rows) + _unanswerable_table(recs)


def _auc(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _unanswerable_table(recs: list[dict[str, Any]]) -> str:
    """The checks of questions without a confirmed answer, and how the evidence strength separates
    them from the answerable ones (AUROC overall, against nothing stored, against unconfirmed)."""
    rows = [("variant", "budget", "unanswerable", "unconfirmed_shown", "misshown", "orphaned",
             "strength_auroc", "nothing_stored", "unconfirmed")]
    for r in recs:
        u = r.get("unanswerable")
        if not r["available"] or u is None:
            continue
        by_kind = r["evidence_strength_auroc_by_kind"]
        rows.append((r["variant"], str(r["budget"]), str(u["questions"]), _pct(u["unconfirmed_decision_in_slate"]),
                     str(len(r["misshown_questions"])), str(len(r["orphaned_questions"])),
                     _auc(r["evidence_strength_auroc"]), _auc(by_kind["nothing_stored"]),
                     _auc(by_kind["unconfirmed_decision"])))
    return "" if len(rows) == 1 else "\n\nunanswerable questions and evidence strength\n" + _grid(rows)


def _grid(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def plot(recs: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install 'agentmemrec[plot]'") from None
    fig, ax = plt.subplots(figsize=(6, 4))
    for variant in dict.fromkeys(r["variant"] for r in recs if r["available"]):
        pts = sorted((r["budget"], 100 * r["slate_completeness"]) for r in recs
                     if r["variant"] == variant and r["slate_completeness"] is not None)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=variant)
    ax.set_xlabel("budget (tokens)")
    ax.set_ylabel("slate completeness (%)")
    ax.set_title(f"{recs[0]['dataset']}: slate completeness by budget" if recs else "")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
