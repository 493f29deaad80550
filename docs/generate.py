"""Render every figure table in README.md and docs/*.md from the committed result files.

    python docs/generate.py            # rewrite the generated tables in place
    python docs/generate.py --check    # exit 1, showing what differs, if a table is out of date

A generated table sits between two marker lines, which name its kind and the result files (paths
relative to the repository root) it is made of, plus options:

    <!-- table eval docs/results/locomo.json variants=bm25,rrf,full -->
    | variant | pool | ... |            (written by this script: never edit by hand)
    <!-- end table -->

Result files are what the measuring commands write: `agentmemrec eval ... --json
docs/results/NAME.json` (evaluation) and the benchmarks' `--json bench/results/NAME.json`. To
change a figure, re-run its command and this script; tests/docs/test_generate.py fails while a
table and its files disagree, and when a table of figures sits outside the markers.

Kinds (options in brackets):
- `eval FILE...` [variants=a,b budgets=x,y]: slate completeness by budget, one row per variant of
  each file (named with its ranker where the files' rankers differ), then pool completeness,
  conditional ranking and evidence recall at the largest budget.
- `eval-categories FILE` [variants=a,b budget=x]: slate completeness by question category.
- `eval-budgets FILE...` [variants=a,b]: every figure of each (variant, budget) record.
- `eval-coding FILE...` [variants=a,b budget=x]: the coding set's checks: multi-evidence
  completeness, leaked slates, statuses not shown, evidence-strength AUROC.
- `growth-latency`, `growth-resources`, `growth-dense` FILE...: bench/store_growth.py by store size.
- `growth-targets FILE...` targets=SIZE:MS,...: full p50 at both pools against latency targets.
- `recall-stages FILE...`: bench/store_growth.py, a full recall's p50 and each stage's.
- `rerank-depth EVAL_FILE... BENCH_FILE`: cross-validated slate completeness per cross-encoder
  depth (one `eval --cv` file per depth; K = 0 is the `--ablation cross-encoder` variant) against
  the cross-encoder's cost per recall at that depth (bench/store_growth.py `--rerank-depths`).
- `default-set-targets FILE...` targets=SIZE:MS:MS:MS,... (`-`: none): a `--models default` run's full recall
  without the cross-encoder, its stdio server and full with it, against their targets.
- `project-memory FILE`: bench/project_memory.py, the peaks of each cap's run.
- `gpu-models FP16_FILE FP32_FILE`: bench/model_throughput.py on a GPU, FP16 against FP32.
- `gpu-batch-sweep FILE`, `model-cost-cpu FILE`: bench/model_throughput.py by batch; on a CPU.
- `hook-latency FILE`: bench/hook_latency.py, the Claude Code hook's wall time per event.
- `team-recall FILE`, `team-writes FILE`: bench/team.py, replicas on PostgreSQL against the
  embedded store; `pgvector-hnsw FILE`: bench/pgvector_hnsw.py, HNSW against the exact search.
- `dense-graph FILE`: bench/ann_recall.py, the dense graph of a large project against the exact product.
- `adr-reach FILE`: bench/adr_reach.py, per folder of ADRs how many decisions reach a slate (for
  their title, and for a sentence deep in the record) and the session digest, before and now.
- `hook-evidence FILE` [signal=top_score|evidence_strength|top_relevance|hook thresholds=a,b]: bench/hook_evidence.py,
  the share of prompts a hook answers at each threshold of the signal, and its AUROC against
  held-out answerable prompts.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

from agentmemrec.ranking.candidates import DEFAULT_POOL

ROOT = Path(__file__).resolve().parents[1]
MARKED = re.compile(r"^<!-- table (?P<spec>[^\n]*?) -->\n(?P<body>.*?)^<!-- end table -->$", re.M | re.S)
Table = Callable[[list[str], list[Any], dict[str, str]], list[str]]  # (files as named, their JSON, options)
KINDS: dict[str, Table] = {}


def kind(name: str) -> Callable[[Table], Table]:
    def register(fn: Table) -> Table:
        KINDS[name] = fn
        return fn
    return register


# ---- formatting -------------------------------------------------------------------------------

def pct(x: float | None) -> str:
    return "" if x is None else "100%" if x == 1 else f"{100 * x:.1f}%"


def num(x: float | None, digits: int = 0) -> str:
    return "" if x is None else f"{x:,.{digits}f}"


def grid(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def listed(opts: dict[str, str], key: str) -> list[str] | None:
    return opts[key].split(",") if key in opts else None


def sources(paths: list[str], details: list[str] | None = None) -> str:
    """The caption under a table: which files it is made of, and how each was measured."""
    named = [f"`{p}`" + (f" ({d})" if d else "") for p, d in zip(paths, details or [""] * len(paths))]
    return f"\n_From {', '.join(named)}; rendered by `python docs/generate.py`._"


# ---- evaluation results (agentmemrec eval --json) -----------------------------------------------

def eval_records(doc: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's description and its (variant, budget) records."""
    if not isinstance(doc, dict) or "records" not in doc:
        raise ValueError("not an `agentmemrec eval --json` result (no 'records')")
    return doc, doc["records"]


def variant_label(variant: str) -> str:
    hook = " (hook slates)" if variant.endswith(" (hook slates)") else ""
    base, _, group = variant.removesuffix(hook).partition("-no-")
    if group == "session-pull":  # `--ablation session-pull`: the same rankings, slates walked in rank order
        return f"{base} without the session pull{hook}"
    return (f"{base} without {group} features" if group else base) + hook


def pool_label(pool: int | None) -> str:
    return "" if pool is None else "whole history" if pool == 0 else \
        f"{pool} (default)" if pool == DEFAULT_POOL else str(pool)


def by_variant(records: list[dict[str, Any]], wanted: list[str] | None) -> dict[str, dict[int, dict[str, Any]]]:
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for r in records:
        out.setdefault(r["variant"], {})[r["budget"]] = r
    missing = [v for v in wanted or [] if v not in out]
    if missing:
        raise ValueError(f"no records of variant(s) {missing}; the file has {list(out)}")
    return {v: out[v] for v in wanted} if wanted else out


def eval_caption(paths: list[str], docs: list[dict[str, Any]]) -> str:
    """Each file's command; one that shares most of its words with the first file's is shown by
    the end that differs (seeds of one run, say), and one written by the same run as the file
    before it (`--seed` given more than once) by its seed, so a long command is spelled out once."""
    first = docs[0].get("command", "").split()
    details, before = [], None
    for d in docs:
        words = d.get("command", "").split()
        same = len(os.path.commonprefix([first, words]))
        if words and words == before:  # one run of several seeds (--seed given more than once)
            details.append(f"the same command as the file before, its seed {d.get('seed')}")
        elif d is not docs[0] and first[same:] and words[same:] and same >= max(len(words), len(first)) // 2:
            details.append(f"the first command with `{' '.join(first[same:])}` replaced by `{' '.join(words[same:])}`")
        else:
            details.append(f"`{d['command']}`" if words else "")
        before = words
    return sources(paths, details)


@kind("eval")
def eval_table(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    rows, budgets = [], [int(b) for b in listed(opts, "budgets") or []]
    several = len({doc.get("ranker") for doc in docs}) > 1  # files ranked by different shipped rankers
    for doc in docs:
        run, records = eval_records(doc)
        for variant, recs in by_variant(records, listed(opts, "variants")).items():
            budgets = budgets or sorted(recs)
            last = recs[max(budgets)]
            label = variant_label(variant)
            if several and variant.startswith("full") and doc.get("ranker"):
                label += f" ({doc['ranker']})"
            if not last["available"]:
                rows.append([label, pool_label(run.get("pool_size")),
                             f"unavailable: {last['unavailable_reason']}"] + [""] * (len(budgets) + 2))
                continue
            rows.append([label, pool_label(run.get("pool_size")),
                         *[pct(recs[b]["slate_completeness"]) for b in budgets],
                         pct(last["pool_completeness"]), pct(last["conditional_ranking_completeness"]),
                         pct(last["evidence_recall"])])
    top = f"{max(budgets):,}"
    head = ["variant", "pool", *[f"{b:,}" for b in budgets], "pool completeness",
            f"cond. ranking at {top}", f"evidence recall at {top}"]
    return grid(head, rows) + [eval_caption(paths, docs)]


@kind("eval-categories")
def eval_categories(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    [doc] = docs
    _, records = eval_records(doc)
    variants = by_variant(records, listed(opts, "variants"))
    budget = int(opts.get("budget", max(b for recs in variants.values() for b in recs)))
    cats = {c: m["questions"] for recs in variants.values() for c, m in recs[budget]["by_category"].items()}
    rows = [[c, str(n), *[pct(recs[budget]["by_category"][c]["slate_completeness"]) for recs in variants.values()]]
            for c, n in cats.items() if n]  # the coding set's unanswerable questions have their own table
    head = ["category", "questions", *[f"{variant_label(v)} at {budget:,}" for v in variants]]
    return grid(head, rows) + [eval_caption(paths, docs)]


@kind("eval-budgets")
def eval_budgets(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    rows = []
    for doc in docs:
        run, records = eval_records(doc)
        for variant, recs in by_variant(records, listed(opts, "variants")).items():
            for budget, r in sorted(recs.items()):
                rows.append([run.get("dataset", ""), variant_label(variant), pool_label(run.get("pool_size")),
                             f"{budget:,}", str(r["questions"]), pct(r["pool_completeness"]),
                             pct(r["slate_completeness"]), pct(r["conditional_ranking_completeness"]),
                             pct(r["evidence_recall"]), num(r["recall_p50_ms"], 1)])
    head = ["data", "variant", "pool", "budget", "questions", "pool completeness", "slate",
            "cond. ranking", "evidence recall", "recall p50 ms"]
    return grid(head, rows) + [eval_caption(paths, docs)]


@kind("eval-seeds")
def eval_seeds(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    """The same cross-validation with other seeds (folds and boosters), a row each, and their mean."""
    [variant] = listed(opts, "variants")
    rows, shares = [], []
    for doc in docs:
        run, records = eval_records(doc)
        recs = by_variant(records, [variant])[variant]
        shares.append([recs[b]["slate_completeness"] for b in sorted(recs)])
        rows.append([str(run["seed"]), *[pct(x) for x in shares[-1]]])
    rows.append([f"mean of {len(docs)}", *[pct(sum(col) / len(col)) for col in zip(*shares)]])
    head = ["seed", *[f"{variant} at {b:,}" for b in sorted(recs)]]
    return grid(head, rows) + [eval_caption(paths, docs)]


@kind("eval-coding")
def eval_coding(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    """The coding set's own checks per variant at one budget: completeness overall and with two or
    more evidence units, the slates that broke a rule, and how the evidence strength separates
    answerable from unanswerable questions."""
    rows = []
    for doc in docs:
        _, records = eval_records(doc)
        for variant, recs in by_variant(records, listed(opts, "variants")).items():
            r = recs[int(opts.get("budget", max(recs)))]
            u, auc = r["unanswerable"], r["evidence_strength_auroc_by_kind"]
            rows.append([variant_label(variant), pct(r["slate_completeness"]),
                         f"{pct(r['multi_evidence_completeness'])} ({r['multi_evidence_questions']})",
                         *(str(len(r[k])) for k in ("leaked_questions", "misshown_questions", "orphaned_questions")),
                         f"{pct(u['unconfirmed_decision_in_slate'])} ({u['with_unconfirmed_decision']})",
                         *(auc_label(x) for x in (r["evidence_strength_auroc"], auc["nothing_stored"],
                                                  auc["unconfirmed_decision"]))])
    head = ["variant", "slate", "multi-evidence (n)", "leaked", "status not shown", "superseded alone",
            "unconfirmed decision shown (n)", "strength AUROC", "vs nothing stored", "vs unconfirmed only"]
    return grid(head, rows) + [eval_caption(paths, docs)]


@kind("eval-unmatched")
def eval_unmatched(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    """Slate completeness against the decisions a slate holds that no channel matched and the
    question did not need (`unmatched` in ranking/slate.py), per slate, at each budget."""
    rows, budgets = [], []
    for doc in docs:
        run, records = eval_records(doc)
        for variant, recs in by_variant(records, listed(opts, "variants")).items():
            budgets = sorted(recs)
            rows.append([variant_label(variant), "cross-validated" if run.get("cv") else "held out",
                         *[pct(recs[b]["slate_completeness"]) for b in budgets],
                         *[num(recs[b]["unmatched_decisions_per_slate"], 2) for b in budgets]])
    head = ["variant", "questions", *[f"slate at {b:,}" for b in budgets],
            *[f"unmatched decisions a slate at {b:,}" for b in budgets]]
    return grid(head, rows) + [eval_caption(paths, docs)]


def auc_label(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


# ---- bench/store_growth.py ----------------------------------------------------------------------

def sizes(docs: list[Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(run, one size's results) for every size of every file, smallest first."""
    out = [(doc, r) for doc in docs for r in doc["sizes"].values()]
    return sorted(out, key=lambda pair: pair[1]["size"])


def load_caption(paths: list[str], docs: list[Any]) -> str:
    """Benchmarks ran on shared machines: each file records its CPUs and load."""
    return sources(paths, [f"{d['cpus']} CPUs, load average {d['load_avg_start'][0]:.1f} at the start"
                           + (f", {d['load_avg_end'][0]:.1f} at the end" if d.get("load_avg_end") else "")
                           for d in docs])


def other_pool(r: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    name = next((k for k in r["core"] if k.startswith("full_pool")), None)
    return (name.removeprefix("full_pool"), r["core"][name]) if name else ("", {})


@kind("growth-latency")
def growth_latency(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    rows, pools = [], set()
    for run, r in sizes(docs):
        core, (small, pool_small) = r["core"], other_pool(r)
        pools.add((run["pool"], small))
        base = r["baseline"]["p50_ms"]
        rows.append([f"{r['size']:,}", num(core["bm25"]["p50_ms"]), num(core["rrf"]["p50_ms"]),
                     f"**{num(core['full']['p50_ms'])}**", num(core["full"]["p95_ms"]),
                     num(core["full"]["rank_p50_ms"], 1), num(pool_small.get("p50_ms")),
                     num(pool_small.get("rank_p50_ms"), 1), num(r["mcp"]["p50_ms"]),
                     num(r["server"]["stdio"]["p50_ms"]), num(r["after_write"]["p50_ms"]),
                     num(core["full_peer"]["p50_ms"]), num(base),
                     f"{core['full']['p50_ms'] / base:.3f}"])
    [(pool, small)] = pools
    head = ["units in `main`", "bm25 p50", "rrf p50", f"**full p50** (pool {pool})", "full p95",
            "ranking (features + LightGBM)", f"full p50, pool {small}", f"ranking, pool {small}",
            "MCP tool p50", "stdio server p50", "full right after a `remember` p50",
            "full p50 on `peer`", "baseline p50",
            "full / baseline"]
    return grid(head, rows) + [load_caption(paths, docs)]


def graph_built(graph: dict[str, Any] | None) -> str:
    if graph is None:
        return "none: exact product"
    again = f", {graph['reloaded']} in {graph['reload_s']:.1f} s at a restart" if "reload_s" in graph else ""
    return f"{graph['source']} in {graph['seconds']:.0f} s{again}"


@kind("growth-resources")
def growth_resources(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    rows = [[f"{r['size']:,}", f"{num(r['ingest']['units_per_s'])} ({num(r['ingest']['last_tenth_units_per_s'])})",
             num(r["backfill_standin"]["units_per_s"]), f"{r['rebuild']['bm25_s']:.1f} s",
             f"{r['rebuild']['dense_s']:.1f} s", f"{num(r['disk_mib'])} MiB",
             f"{r['server']['first_recall_s']:.1f} s", f"{num(r['server']['server_peak_rss_mib'])} MiB",
             graph_built(r.get("dense_graph"))]
            for _, r in sizes(docs)]
    head = ["units in `main`", "ingest units/s, lexical (last tenth)", "stand-in backfill units/s",
            "bm25 rebuild", "dense load", "disk", "cold start to first answer", "server peak RSS",
            "dense graph (indexing/dense/ann.py)"]
    return grid(head, rows) + [load_caption(paths, docs)]


@kind("growth-dense")
def growth_dense(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    rows = [[f"`{Path(p).name}`", f"`{d['model']}`", num(d["units"]), num(d["units_per_s"], 1), num(d["model_units_per_s"], 1),
             pct(d["share_outside_model"])]
            for p, d in ((p, doc["dense_ingest"]) for p, doc in zip(paths, docs) if doc.get("dense_ingest"))]
    head = ["run", "embedder", "units", "units/s through the backfill", "units/s, the model alone",
            "time outside the model"]
    return grid(head, rows) + [load_caption(paths, docs)]


@kind("growth-targets")
def growth_targets(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    targets = dict(t.split(":") for t in opts["targets"].split(","))
    rows, pools = [], set()

    def verdict(ms: float | None, target: float) -> str:
        return "" if ms is None else f"{num(ms)} ms: {'met' if ms <= target else 'missed'}"
    for run, r in sizes(docs):
        if str(r["size"]) not in targets:
            continue
        target, (small, pool_small) = float(targets[str(r["size"])]), other_pool(r)
        pools.add((run["pool"], small))
        rows.append([f"{r['size']:,}", f"{num(target)} ms", verdict(r["core"]["full"]["p50_ms"], target),
                     verdict(pool_small.get("p50_ms"), target)])
    [(pool, small)] = pools
    head = ["units", "target", f"full, pool {pool} (default)" if pool == DEFAULT_POOL else f"full, pool {pool}",
            f"full, pool {small}"]
    return grid(head, rows) + [load_caption(paths, docs)]


@kind("recall-stages")
def recall_stages(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    """Where a full recall's time goes, each stage's p50 measured on its own in the same run."""
    rows = []
    for _, r in sizes(docs):
        full, emb = r["core"]["full"], r["core"].get("query_embedding", {})
        ranking, cross = full.get("rank_p50_ms"), full.get("cross_encoder_p50_ms")
        rows.append([f"{r['size']:,}", f"**{num(full['p50_ms'])}**", num(full["p95_ms"]), num(full.get("cpu_p50_ms")),
                     num(emb.get("p50_ms"), 1),
                     "" if cross is None else f"{num(cross, 1)} ({full['cross_encoder_pairs']} pairs)",
                     num(None if ranking is None else ranking - (cross or 0), 1),
                     num(r["core"].get("full_no_cross_encoder", {}).get("p50_ms")), num(r["mcp"]["p50_ms"])])
    head = ["units in `main`", "**full p50 ms**", "full p95", "full CPU p50 (both cores)", "query embedding p50",
            "cross-encoder p50", "features + LightGBM p50", "full without cross-encoder p50", "MCP tool p50"]
    return grid(head, rows) + [load_caption(paths, docs)]


@kind("rerank-depth")
def rerank_depth(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    """Cross-validated slate completeness at each cross-encoder depth K (the eval files, one per
    K; K = 0 is their `full-no-cross-encoder` ablation) against what K costs per recall (the
    bench/store_growth.py file, `--rerank-depths`); a depth measured by only one of them has the
    other's cells empty."""
    evals = [d for d in docs if "records" in d]
    [bench] = [d for d in docs if "sizes" in d]
    [(_, r)] = sizes([bench])
    budgets = sorted({rec["budget"] for d in evals for rec in d["records"]})
    core = {0: r["core"]["full_no_cross_encoder"], r["core"]["full"]["cross_encoder_pairs"]: r["core"]["full"],
            **{int(k.removeprefix("full_rerank")): v for k, v in r["core"].items() if k.startswith("full_rerank")}}
    quality: dict[int, dict[int, dict[str, Any]]] = {}
    for d in evals:
        variants = by_variant(d["records"], None)
        quality[d["rerank_depth"]] = variants["full"]
        if "full-no-cross-encoder" in variants:
            quality[0] = variants["full-no-cross-encoder"]
    rows = []
    for depth in sorted(set(core) | set(quality)):
        recs, cost = quality.get(depth), core.get(depth, {})
        rows.append([str(depth), *[pct(recs[b]["slate_completeness"]) if recs else "" for b in budgets],
                     pct(recs[max(budgets)]["conditional_ranking_completeness"]) if recs else "",
                     "0" if depth == 0 else num(cost.get("cross_encoder_p50_ms")), num(cost.get("p50_ms")),
                     num(cost.get("cpu_p50_ms"))])
    top = f"{max(budgets):,}"
    head = ["K (candidates cross-encoded)", *[f"slate at {b:,}" for b in budgets], f"cond. ranking at {top}",
            f"cross-encoder p50 ms ({r['size']:,} units)", "full recall p50 ms", "full recall CPU p50 ms"]
    details = [f"`{d['command']}`" if "records" in d else f"{d['cpus']} CPUs, load average "
               f"{d['load_avg_start'][0]:.1f} at the start" for d in docs]
    return grid(head, rows) + [sources(paths, details)]


@kind("default-set-targets")
def default_set_targets(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    """A `--models default` run against targets=SIZE:MS:MS:MS (full without the cross-encoder,
    the stdio server without it, full with it; `-`: none), each with its ratio to the same run's
    baseline; and what a client that hands the model the structured result (Claude Code, VS Code)
    has it read, against the slate's own tokens."""
    targets = {t.split(":")[0]: [None if x == "-" else float(x) for x in t.split(":")[1:]]
               for t in opts["targets"].split(",")}
    rows = []
    for _, r in sizes(docs):
        if str(r["size"]) not in targets:
            continue
        base = r["baseline"]["p50_ms"]
        stdio = r["server"]["stdio_no_cross_encoder"]
        figures = [r["core"]["full_no_cross_encoder"]["p50_ms"], stdio["p50_ms"], r["core"]["full"]["p50_ms"]]
        rows.append([f"{r['size']:,}", *[f"{num(ms)} ms ({ms / base:.3f})" + (
                         "" if t is None else f" against {num(t)}: {'met' if ms <= t else 'missed'}")
                         for ms, t in zip(figures, targets[str(r["size"])])], num(base), _reads(stdio)])
    head = ["units", "full, no cross-encoder (/ baseline)", "stdio server, no cross-encoder (/ baseline)",
            "full with the cross-encoder (/ baseline)", "baseline p50 ms", "the model reads (slate) tokens, p50"]
    return grid(head, rows) + [load_caption(paths, docs)]


def _reads(stdio: dict[str, Any]) -> str:
    if "model_reads_tokens_p50" not in stdio:  # a run from before it was measured
        return "-"
    return (f"{stdio['model_reads_tokens_p50']:,.0f} ({stdio['slate_tokens_p50']:,.0f}); "
            f"{stdio['model_reads_with_items_tokens_p50']:,.0f} with `items`")


@kind("project-memory")
def project_memory(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    [doc] = docs
    rows = [[f"{run['cap_mib_per_index']:,} MiB" if run["cap_mib_per_index"] else "none (before the caps)",
             str(run["recalls"]), *[num(run["peak_mib"][k]) for k in ("bm25", "dense", "units", "sessions", "texts")],
             num(run["peak_mib"]["rss_mib"]), num(run["peak_rss_mib"])] for run in doc["runs"]]
    head = ["snapshot cap per index", "recalls", "bm25 snapshots MiB", "dense snapshots MiB", "unit cache MiB",
            "session cache MiB", "text caches MiB", "resident MiB after a recall", "peak resident MiB"]
    detail = (f"{doc['projects']} projects of {doc['units_per_project']:,} units, each recalled "
              f"{doc['rounds']} times in turn; {doc['cpus']} CPUs, load average {doc['load_avg_start'][0]:.1f} "
              "at the start")
    return grid(head, rows) + [sources(paths, [detail])]


# ---- bench/model_throughput.py ------------------------------------------------------------------

@kind("gpu-models")
def gpu_models(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    fp16, fp32 = docs
    e16, e32 = fp16["bge_m3_size_embedder"], fp32["bge_m3_size_embedder"]
    r16, r32 = fp16["bge_reranker_v2_m3_size"], fp32["bge_reranker_v2_m3_size"]
    rows = [[f"bge-m3 size: {e16['units']} units of {e16['tokens_per_unit']} tokens, batch {e16['batch']}",
             f"**{num(e16['units_per_s'])} units/s**", f"{num(e32['units_per_s'])} units/s",
             f"min cosine {e16['min_cosine_vs_fp32']:.6f}"],
            [f"bge-reranker-v2-m3 size: a pool of {r16['pairs']} pairs of {r16['tokens_per_pair']} tokens, "
             f"batch {r16['batch']}", f"**{num(r16['pool_latency_ms'])} ms** ({num(r16['pairs_per_s'])} pairs/s)",
             f"{num(r32['pool_latency_ms'])} ms ({num(r32['pairs_per_s'])} pairs/s)",
             f"max logit difference {r16['max_abs_logit_diff_vs_fp32']:.3f}"]]
    details = [f"onnxruntime {d['environment']['onnxruntime']}, {d['bge_m3_size_embedder']['device']}" for d in docs]
    return grid(["model, work", "FP16", "FP32", "FP16 against FP32"], rows) + [sources(paths, details)]


@kind("gpu-batch-sweep")
def gpu_batch_sweep(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    [doc] = docs
    rows = [[m["work"], f"{m['batch']:,}", f"{m['tokens']:,}", num(m.get("pool_latency_ms")),
             num(m.get("units_per_s"))] for m in doc["measurements"]]
    head = ["work", "batch", "tokens", "128-pair pool ms", "units/s"]
    return grid(head, rows) + [sources(paths, [doc["device"]])]


@kind("model-cost-cpu")
def model_cost_cpu(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    [doc] = docs
    mini, emb, rr = doc["all_minilm_l6_v2"], doc["bge_m3_size_embedder"], doc["bge_reranker_v2_m3_size"]
    rows = [["all-MiniLM-L6-v2", f"{mini['units']} turns of {mini['tokens_per_unit']} tokens, batch {mini['batch']}",
             f"{mini['units_per_s']:.2f} units/s", "1"],
            ["bge-m3 size (XLM-R large, CLS)", f"{emb['units']} units of {emb['tokens_per_unit']} tokens",
             f"{emb['units_per_s']:.3f} units/s", f"{mini['units_per_s'] / emb['units_per_s']:.0f}x slower per unit"],
            ["bge-reranker-v2-m3 size", f"{rr['pairs']} pairs of {rr['tokens_per_pair']} tokens, batch {rr['batch']}",
             f"{rr['pairs_per_s']:.3f} pairs/s ({1 / rr['pairs_per_s']:.1f} s a pair)", ""]]
    head = ["model", "work", "measured", "relative to all-MiniLM-L6-v2 in the same run"]
    return grid(head, rows) + [load_caption(paths, docs)]


# ---- the Claude Code hook (bench/hook_latency.py, bench/hook_evidence.py) ---------------------------

HOOK_KINDS = {"project_questions": "answerable (coding set, held out)",
              "longmemeval_trained_on": "answerable (LongMemEval-S, trained on: optimistic)",
              "locomo_trained_on": "answerable (LoCoMo, trained on: optimistic)",
              "coding": "unrelated: coding prompts, conversation histories",
              "project_prompts": "unrelated: coding prompts, coding projects",
              "other_histories": "unrelated: other histories' questions",
              "project_unanswerable": "no confirmed answer (coding set, held out)"}
SIGNAL_LABELS = {"top_score": "top score", "evidence_strength": "strength", "top_relevance": "cross-encoder logit",
                 "hook": "the hook adds a slate"}


def p50_p95(p: dict[str, Any]) -> str:
    return f"{num(p.get('p50_ms'))} / {num(p.get('p95_ms'))}"


@kind("hook-latency")
def hook_latency(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    head = ["configuration", "events", "command hook p50 / p95 ms", "UserPromptSubmit p50 / p95",
            "SessionStart p50 / p95", "http hook p50 / p95 ms", "answered (command / http)", "load (1 min)",
            "SessionStart with no owner p50 / p95 ms (answered)"]
    rows = [[c["configuration"], str(c["events"]), p50_p95(c["command_hook_all"]),
             p50_p95(c["command_hook"]["UserPromptSubmit"]), p50_p95(c["command_hook"]["SessionStart"]),
             p50_p95(c["http_hook"]["UserPromptSubmit"]),
             f"{pct(c['answered_share']['command_hook'])} / {pct(c['answered_share']['http_hook'])}",
             f"{c['load_1m_before']}-{c['load_1m_after']}",
             f"{p50_p95(c['cold_session_start'])} ({pct(c['cold_session_start']['answered_share'])})"]
            for c in docs[0]["configurations"]]
    return grid(head, rows) + [sources(paths, [f"{docs[0]['machine']['cpus']} cores"])]


@kind("adr-reach")
def adr_reach(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    """Per folder of ADRs, before -> now: decisions whose decision section a slate for their title
    shows; records in the slate for a sentence from past their first 128 tokens; decisions in force
    the digest shows with their decision (and names)."""
    doc = docs[0]

    def moved(c: dict[str, Any], part: str, budget: int, key: str = "decision_shown") -> str:
        new = c["excerpts"][part][str(budget)]
        named = f" ({new['named']} named)" if part == "digest" else ""
        return f"{c['whole_records'][part][str(budget)][key]} → **{new[key]}**{named}"
    head = ["ADRs", "decisions (in force)", "tokens, median / max",
            *(f"decision shown, slate of {b:,} for its title" for b in doc["budgets"]),
            *(f"record in the slate of {b:,} for a sentence past its first 128 tokens (queries)"
              for b in doc["budgets"]),
            *(f"in force with decision shown, digest of {b:,}" for b in doc["digest_budgets"])]
    rows = [[name, f"{c['decisions']} ({c['in_force']})", f"{num(c['median_tokens'])} / {num(c['max_tokens'])}",
             *(moved(c, "slate", b) for b in doc["budgets"]),
             *(f"{moved(c, 'slate', b, 'deep_in_slate')} ({c['excerpts']['slate'][str(b)]['deep_queries']})"
               for b in doc["budgets"]),
             *(moved(c, "digest", b) for b in doc["digest_budgets"])]
            for name, c in doc["corpora"].items()]
    return grid(head, rows) + [sources(paths, ["models: " + ", ".join(m for m in doc["models"] if m != "active.json")])]


@kind("hook-evidence")
def hook_evidence(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    """Per configuration and threshold of one signal, the share of each kind of prompt a hook
    answers, and the AUROC of each held-out answerable kind against it."""
    signal = opts.get("signal", "top_score")
    wanted = [float(t) for t in listed(opts, "thresholds") or ["0", "0.5", "1", "1.5"]]
    positives = [k for k in HOOK_KINDS if signal != "hook"  # a yes-or-no decision has no AUROC worth showing
                 and any(k in c["signals"][signal]["auroc"] for c in docs[0]["configurations"])]
    head = ["configuration", "prompts (n)",
            *(SIGNAL_LABELS[signal] if signal == "hook" else f"{SIGNAL_LABELS[signal]} >= {t:g}" for t in wanted),
            *(f"AUROC vs {HOOK_KINDS[p].split(' (')[1][:-1]}" for p in positives)]
    rows = []
    for doc in docs:  # a file per store size (`--coding-first N`: each project's first N items)
        first = f", first {doc['coding_first']} items" if doc.get("coding_first") else ""
        for c in doc["configurations"]:
            found = c["signals"][signal]
            by = {r["threshold"]: r for r in found["answered_by_threshold"]}
            for key, label in HOOK_KINDS.items():
                if key not in by.get(wanted[0], {}):  # a signal this configuration does not have
                    continue
                aurocs = [found["auroc"].get(p, {}).get(key) for p in positives]
                rows.append([c["configuration"] + first, f"{label} ({c['queries'][key]})",
                             *(pct(by[t][key]) for t in wanted), *("" if a is None else f"{a:.3f}" for a in aurocs)])
    return grid(head, rows) + [sources(paths, [f"hook budget {docs[0]['budget']} tokens"])]


# ---- the team store: bench/team.py, bench/pgvector_hnsw.py ---------------------------------------

@kind("team-recall")
def team_recall(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    """recall_slate through serve --http, the embedded store against a PostgreSQL replica, by size."""
    rows = []
    for doc in docs:
        for s in doc["sizes"]:
            seen = s["write_visible_elsewhere"]
            rows.append([num(s["units"]), num(s["recall_duckdb"]["p50_ms"]), num(s["recall_replica"]["p50_ms"]),
                         f"**{s['replica_over_duckdb_p50']:.2f}**", num(s["recall_duckdb"]["p95_ms"]),
                         num(s["recall_replica"]["p95_ms"]),
                         f"{s['new_replica_listening_s']:.1f} s / {s['new_replica_first_recall_s']:.1f} s",
                         f"{num(seen['p50_ms'])} ({seen['found_by_the_first_recall']} of {seen['n']})"])
    head = ["units in `main`", "embedded p50 ms", "replica p50 ms", "replica / embedded", "embedded p95 ms",
            "replica p95 ms", "new replica: listening / first recall answered",
            "write visible through another replica, p50 ms (found by the first recall)"]
    return grid(head, rows) + [load_caption(paths, docs)]


@kind("team-writes")
def team_writes(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    """remember throughput through 1 and 3 replicas, and through the embedded store's server."""
    rows = []
    for doc in docs:
        w = doc["writes"]
        rows += [["1 replica", "1", num(w["one_replica_units_per_s"])],
                 ["3 replicas at once", "3, one each", num(w["three_replicas_own_projects_units_per_s"])],
                 ["3 replicas at once", "1, shared", num(w["three_replicas_one_project_units_per_s"])],
                 ["the embedded store's server", "1", num(w["duckdb_one_writer_units_per_s"])]]
    w = docs[0]["writes"]
    return grid(["writers", "projects", f"units/s ({w['batches_per_writer']} remember calls of {w['batch']} "
                 "turns per writer)"], rows) + [load_caption(paths, [d["writes"] for d in docs])]


@kind("pgvector-hnsw")
def pgvector_hnsw(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    """The in-memory exact top 512 against a partial HNSW index, by size and ef_search."""
    rows = []
    for doc in docs:
        for r in doc["runs"]:
            rows.append([num(r["units"]), "exact, in memory (the product)", num(r["exact"]["p50_ms"], 1), "100%",
                         f"{r['exact']['load_s']:.1f} s to load the snapshot"])
            for ef, h in r["hnsw"]["by_ef_search"].items():
                rows.append([num(r["units"]), f"HNSW, ef_search {ef}", num(h["p50_ms"], 1),
                             pct(h["recall_at_512"]), f"{r['hnsw']['build_s']:.0f} s to build"])
    return grid(["units in the project", "search", "top-512 p50 ms", "recall@512", "index"], rows) + \
        [load_caption(paths, docs)]


@kind("dense-graph")
def dense_graph(paths: list[str], docs: list[Any], opts: dict[str, str]) -> list[str]:
    """bench/ann_recall.py: the dense graph against the exact product, on real and jittered vectors."""
    rows = [["real" if name == "real" else f"real + jittered copies (noise {doc['jitter']})", num(r["vectors"]),
             f"{pct(r['recall_at_512'])} ({pct(r['recall_at_512_p5'])})", pct(r["recall_at_100"]),
             num(r["graph_search_p50_ms"], 1), num(r["exact_p50_ms"], 1), num(r.get("exact_float16_p50_ms"), 1),
             f"{r['build_s']:.0f} s",
             f"{num(r['graph_mib'])} MiB"]
            for doc in docs for name, r in doc["sizes"].items()]
    head = ["vectors", "units", "recall@512 (5th percentile)", "recall@100", f"graph p50 ms (top {docs[0]['depth']:,})",
            "exact p50 ms", "exact over float16 rows p50 ms", "build", "graph in memory"]
    return grid(head, rows) + [sources(paths, [f"{d['machine']['cpus']} CPUs, load average "
                                               f"{d['machine']['load_1m_end']} at the end" for d in docs])]


# ---- the documents ------------------------------------------------------------------------------

def documents(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def render_table(spec: str, root: Path) -> str:
    name, *args = spec.split()
    if name not in KINDS:
        raise ValueError(f"unknown table kind {name!r}; known: {', '.join(KINDS)}")
    opts = dict(a.split("=", 1) for a in args if "=" in a)
    paths = [a for a in args if "=" not in a]
    docs = [json.loads((root / p).read_text()) for p in paths]
    return "\n".join(KINDS[name](paths, docs, opts)) + "\n"


def render(text: str, root: Path, where: str) -> str:
    def replace(m: re.Match[str]) -> str:
        try:
            body = render_table(m["spec"], root)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"{where}: table `{m['spec']}`: {type(exc).__name__}: {exc}") from exc
        return f"<!-- table {m['spec']} -->\n{body}<!-- end table -->"
    return MARKED.sub(replace, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is out of date")
    p.add_argument("--root", type=Path, default=ROOT, help="the repository to render (default: this one)")
    args = p.parse_args(argv)
    stale = []
    for doc in documents(args.root.resolve()):
        text = doc.read_text()
        new = render(text, args.root.resolve(), doc.name)
        if new == text:
            continue
        stale.append(doc)
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                                       f"{doc.name} (committed)", f"{doc.name} (from results)"))
        else:
            doc.write_text(new)
    if args.check and stale:
        print(f"\nout of date: {', '.join(d.name for d in stale)}; run python docs/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
