"""`agentmemrec eval`: evidence selection measured stage by stage on LoCoMo and LongMemEval.

Each conversation (LoCoMo) or question haystack (LongMemEval) is written to a fresh temporary
store through `Memory.remember`, the write path the MCP tool uses; each question then runs the
product's selection (`Memory.select` then `Memory.build` per budget, the code `recall` runs).
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from tqdm import tqdm

from ..indexing.errors import InputError
from ..indexing.lexical import Bm25Channel, LexicalIndex
from ..indexing.store import Store
from .benchmarks import DATASETS, Case, Question, read_cases
from .memory import Memory, RecallConfig, Selection
from .metrics import Outcome, by_category, summarize

PROJECT = "eval"
DEFAULT_BUDGETS = (2400, 2550, 2700)
WRITE_BATCH = 1000


class Unavailable(Exception):
    """A variant whose models are not installed: reported, never silently replaced."""


def _bm25(store: Store, home: Path, config: RecallConfig) -> Memory:
    return Memory(store, [Bm25Channel(LexicalIndex(store, home / "index" / "bm25"))], config=config)


VARIANTS: dict[str, Callable[[Store, Path, RecallConfig], Memory]] = {"bm25": _bm25}


@dataclass
class VariantRun:
    name: str
    outcomes: dict[int, list[Outcome]] = field(default_factory=dict)  # budget -> outcomes
    latency_ms: dict[int, list[float]] = field(default_factory=dict)
    unavailable: str | None = None


def select_questions(cases: list[Case], limit: int | None, seed: int) -> set[str]:
    qids = [q.qid for c in cases for q in c.questions]
    if limit is None or limit >= len(qids):
        return set(qids)
    return set(random.Random(seed).sample(qids, limit))


def _lost_to(selection: Selection, slate_refs: set[str], evidence: frozenset[str]) -> str | None:
    """For a complete pool and incomplete slate: 'ranking' if some missing evidence ranked below
    the last item that made the slate, else 'budget' (it ranked higher but did not fit)."""
    included = [sc.rank for sc in selection.ranked if sc.unit.ref in slate_refs]
    cutoff = max(included, default=0)
    missing = [sc.rank for sc in selection.ranked if sc.unit.ref in evidence - slate_refs]
    return "ranking" if any(r > cutoff for r in missing) else "budget"


def evaluate(dataset: str, paths: list[Path], variants: Sequence[str], budgets: Sequence[int],
             limit: int | None = None, seed: int = 0, pool_size: int = 128,
             per_question: list[dict[str, Any]] | None = None) -> tuple[list[VariantRun], dict[str, float]]:
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise InputError(f"unknown variant(s) {unknown}; available: {', '.join(VARIANTS)}")
    cases = list(read_cases(dataset, paths))
    chosen = select_questions(cases, limit, seed)
    runs = {v: VariantRun(v, {b: [] for b in budgets}, {b: [] for b in budgets}) for v in variants}
    ingest_units, ingest_s = 0, 0.0
    config = RecallConfig(pool_size=pool_size)
    bar = tqdm(total=len(chosen), desc=f"eval {dataset}", unit="q", file=sys.stderr, disable=None)
    for case in cases:
        questions = [q for q in case.questions if q.qid in chosen]
        if not questions:
            continue
        with tempfile.TemporaryDirectory(prefix="agentmemrec-eval-") as tmp:
            store = Store(Path(tmp) / "memory.duckdb")
            try:
                memories = _open_variants(runs, store, Path(tmp), config)
                start = time.perf_counter()
                _ingest(memories, case)
                ingest_s += time.perf_counter() - start
                ingest_units += len(case.items)
                for q in questions:
                    _ask(q, case, memories, runs, budgets, per_question)
                    bar.update(1)
            finally:
                store.close()
    bar.close()
    return list(runs.values()), {"ingest_units": ingest_units, "ingest_s": ingest_s}


def _open_variants(runs: dict[str, VariantRun], store: Store, home: Path, config: RecallConfig
                   ) -> dict[str, Memory]:
    memories = {}
    for name, run in runs.items():
        try:
            memories[name] = VARIANTS[name](store, home, config)
        except Unavailable as exc:
            run.unavailable = str(exc)
    return memories


def _ingest(memories: dict[str, Memory], case: Case) -> None:
    if not memories:
        return
    writer = next(iter(memories.values()))
    for start in range(0, len(case.items), WRITE_BATCH):
        writer.remember(PROJECT, case.items[start:start + WRITE_BATCH])
    for memory in memories.values():
        memory.warm(PROJECT)


def _ask(q: Question, case: Case, memories: dict[str, Memory], runs: dict[str, VariantRun],
         budgets: Sequence[int], per_question: list[dict[str, Any]] | None) -> None:
    for name, memory in memories.items():
        t0 = time.perf_counter()
        selection = memory.select(PROJECT, q.text, q.as_of)
        select_ms = (time.perf_counter() - t0) * 1000
        pool = frozenset(c.unit.ref for c in selection.pool.candidates)
        record: dict[str, Any] = {"variant": name, "case": case.case_id, "qid": q.qid,
                                  "category": q.category, "question": q.text,
                                  "evidence": sorted(q.evidence), "in_pool": sorted(q.evidence & pool),
                                  "in_slate": {}}
        for budget in budgets:
            t1 = time.perf_counter()
            slate = memory.build(selection, budget)
            runs[name].latency_ms[budget].append(select_ms + (time.perf_counter() - t1) * 1000)
            refs = {it.unit.ref for it in slate.items}
            lost = None
            if q.evidence <= pool and not q.evidence <= refs:
                lost = _lost_to(selection, refs, q.evidence)
            runs[name].outcomes[budget].append(Outcome(q.category, q.evidence, pool, frozenset(refs), lost))
            record["in_slate"][str(budget)] = sorted(q.evidence & refs)
        if per_question is not None:
            per_question.append(record)


def records(dataset: str, runs: list[VariantRun], cost: dict[str, float]) -> list[dict[str, Any]]:
    """One JSON record per (variant, budget)."""
    out = []
    ingest_rate = cost["ingest_units"] / cost["ingest_s"] if cost["ingest_s"] else None
    for run in runs:
        for budget, outcomes in run.outcomes.items():
            lat = sorted(run.latency_ms[budget])
            out.append({
                "dataset": dataset, "variant": run.name, "budget": budget,
                "available": run.unavailable is None, "unavailable_reason": run.unavailable,
                **summarize(outcomes), "by_category": by_category(outcomes),
                "recall_p50_ms": statistics.median(lat) if lat else None,
                "recall_p95_ms": lat[min(len(lat) - 1, int(0.95 * len(lat)))] if lat else None,
                "ingest_units_per_s": ingest_rate,
            })
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def format_table(recs: list[dict[str, Any]]) -> str:
    head = ("variant", "budget", "questions", "pool", "slate", "cond_rank", "recall", "p50_ms",
            "p95_ms", "ingest/s", "lost:pool/rank/budget")
    rows = [head]
    for r in recs:
        if not r["available"]:
            rows.append((r["variant"], str(r["budget"]), "unavailable: " + str(r["unavailable_reason"]),
                         *[""] * 8))
            continue
        rows.append((r["variant"], str(r["budget"]), str(r["questions"]), _pct(r["pool_completeness"]),
                     _pct(r["slate_completeness"]), _pct(r["conditional_ranking_completeness"]),
                     _pct(r["evidence_recall"]), _ms(r["recall_p50_ms"]), _ms(r["recall_p95_ms"]),
                     "-" if r["ingest_units_per_s"] is None else f"{r['ingest_units_per_s']:.0f}",
                     f"{r['lost_never_in_pool']}/{r['lost_in_ranking']}/{r['lost_to_budget']}"))
    cat_rows = [("variant", "budget", "category", "questions", "pool", "slate", "cond_rank", "recall")]
    for r in recs:
        for cat, m in (r["by_category"] or {}).items():
            cat_rows.append((r["variant"], str(r["budget"]), cat, str(m["questions"]),
                             _pct(m["pool_completeness"]), _pct(m["slate_completeness"]),
                             _pct(m["conditional_ranking_completeness"]), _pct(m["evidence_recall"])))
    return _grid(rows) + "\n\nby category\n" + _grid(cat_rows)


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
