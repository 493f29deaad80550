"""When should a prompt hook add nothing? The ranker's top score, the evidence strength and the
cross-encoder's best logit.

`agentmemrec hook` adds a slate to a prompt only when the ranker's top score reaches `WEAK_SCORE`
and, for a cross-encoder with a floor in `RELEVANCE_FLOOR`, the best logit among the candidates
it scored reaches that floor (server/hook_context.py; the `hook` signal is that decision); the
slate's evidence strength (ranking/strength.py, fitted with the ranker) is another candidate gate.
This measures how well each separates prompts whose answer is stored from prompts about something
else, through the product's own write and selection code (`Memory.remember`, then `Memory.recall`
at the hook's budget, leaving out the decisions no channel matched as the hook does):

- answerable, held out: the coding set's held-out file (bench/coding/coding-holdout.json), which
  no shipped ranker was trained on, each answerable question asked of its project at its time;
- answerable, trained on: LongMemEval-S and LoCoMo questions asked of their own history. The
  shipped rankers were trained on them (the lexical one on the first 60 LongMemEval-S files by
  name, the others on every file),
  so their scores are optimistic: they are reported,
  never used to choose a threshold;
- unrelated: hand-written coding-assistant prompts asked of every history and of every project of
  the coding set (`project_prompts`, what a hook sees most); the questions of other histories
  (same style, other people and events, the hard case); the held-out coding set's unanswerable
  questions (only a proposed or rejected decision is stored, or nothing).

For each configuration (BM25 only, as installed; and with the models of `--models-home`) and each
signal it writes the AUROC of each held-out answerable kind against each unrelated kind, each
kind's median, and per threshold the share of each kind a hook would answer.

    nice -n 10 python bench/hook_evidence.py \
        --longmemeval $(ls /work/shared/data/longmemeval-s/*.json | sort | head -30) \
        --coding bench/coding/coding-holdout.json --models-home "$AGENTMEMREC_HOME" \
        --models-datasets coding --out bench/results/hook-evidence.json

The floor is calibrated on the coding set's development file, never on a prompt measured here:
its `p05` of `top_relevance` over `project_questions` (the logit 95% of the answerable development
questions reach) in

    python bench/hook_evidence.py --coding bench/coding/coding-dev.json --models-home "$AGENTMEMREC_HOME" \
        --models-datasets coding --out bench/results/hook-gate-dev.json

(`--locomo DIR` adds the LoCoMo questions, which the shipped rankers were trained on too;
`--ranker-model` and `--bm25-ranker-model` measure ranker files before they ship.)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from harness import models_label, write_result
from tqdm import tqdm

from agentmemrec.indexing.dense.backfill import embed_pending
from agentmemrec.ranking.eval.benchmarks import PROJECT, Case, item_refs, read_cases
from agentmemrec.ranking.eval.evaluate import open_cache
from agentmemrec.ranking.memory import Memory
from agentmemrec.server.hook_context import weak_evidence
from agentmemrec.server.hook_process import PROMPT_BUDGET

CODING_PROMPTS = [
    "run the test suite and fix whatever fails", "yes, go ahead", "continue", "rename parse_args to "
    "parse_cli everywhere", "why does mypy complain about this Optional?", "add a --verbose flag to "
    "the CLI", "write a unit test for the tokenizer edge cases", "the build is red on main, look at "
    "the CI log", "refactor this function into two smaller ones", "bump the version to 0.4.1 and "
    "update the changelog", "what does this regex match?", "convert the config loader to pathlib",
    "make the Dockerfile use a slim base image", "squash these commits into one", "explain the "
    "difference between a list and a tuple here", "the linter says line too long, wrap it",
    "add type hints to utils.py", "why is this loop quadratic?", "set up pre-commit with ruff",
    "delete the dead code in legacy/", "port this bash script to Python", "the migration fails on "
    "an empty table", "add retries with exponential backoff to the HTTP client", "profile the "
    "import time of the package", "write a README section on installation", "use f-strings instead "
    "of format()", "the websocket drops after 60 seconds, why?", "add pagination to the list "
    "endpoint", "sort the imports", "fix the flaky test in test_scheduler.py", "cache the result of "
    "this expensive call", "make the error message say what to do next", "does this leak file "
    "handles?", "split the monolithic settings module", "generate a SQL index for the user_id "
    "column", "translate the error strings to German", "what is the time complexity of this "
    "sort?", "review this diff before I push", "undo the last change", "ok thanks",
]
SIGNALS = {"top_score": [round(x, 2) for x in np.arange(-4.0, 4.01, 0.25)],  # the ranker's, unbounded
           "evidence_strength": [round(x, 2) for x in np.arange(0.0, 1.001, 0.05)],  # a probability
           "top_relevance": [round(x, 1) for x in np.arange(-12.0, 8.01, 0.2)],  # a cross-encoder logit
           "hook": [1.0]}  # 1 where the hook adds the slate (server/hook_context.py), else 0
POSITIVE = ("project_questions",)  # held-out prompts whose answer is stored
NEGATIVE = ("coding", "other_histories", "project_prompts", "project_unanswerable")


def auroc(positive: list[float], negative: list[float]) -> float:
    """P(a positive scores above a negative), ties counted half (the Mann-Whitney statistic)."""
    pos, neg = np.asarray(positive)[:, None], np.asarray(negative)[None, :]
    return float(((pos > neg).sum() + 0.5 * (pos == neg).sum()) / (pos.size * neg.size))


def measured(memory: Memory, project: str, query: str, as_of: Any = None) -> dict[str, float]:
    """What a hook could gate on for one prompt: the ranker's top score, the evidence strength and
    the best cross-encoder logit (-inf, 0 and -inf when nothing is eligible; NaN for a ranker
    without a strength model or a cross-encoder), and what the hook does (1: adds the slate)."""
    slate = memory.recall(project, query, PROMPT_BUDGET, as_of=as_of, matched_only=True)  # as the hook asks
    strength = slate.evidence_strength if slate.items else 0.0
    cross_encoder = memory.models()["cross_encoder"]
    relevance = slate.top_relevance if slate.items else float("-inf")
    return {"top_score": slate.top_score if slate.top_score is not None else float("-inf"),
            "evidence_strength": float("nan") if strength is None else strength,
            "top_relevance": float("nan") if cross_encoder is None or relevance is None else relevance,
            "hook": float(weak_evidence(slate, cross_encoder) is None)}


def open_history(home: Path, case: Case, models_home: Path | None, cache: Any,
                 ranker_model: Path | None = None) -> Memory:
    """A fresh store holding one history (every project of a coding-set file), embedded when a
    model is installed."""
    if models_home is not None:
        shutil.copytree(models_home / "models", home / "models")
    memory = Memory.open(home, background=False, ranker_model=ranker_model)
    for project, items in case.projects.items():
        for i in range(0, len(items), 1000):
            memory.remember(project, items[i:i + 1000])
        if memory.dense is not None:
            embed_pending(memory.dense.vectors, memory.dense.embedder, project, cache)
    return memory


def conversation_prompts(case: Case, cases: list[Case], n: int, dataset: str, others: int) -> dict[str, list]:
    """A LoCoMo or LongMemEval history: its own questions, the coding prompts, and `others`
    questions of the other histories of its dataset."""
    own = f"{dataset}_trained_on"
    rest = [q for c in cases[n + 1:] + cases[:n] for q in c.questions if q.category != "5"]
    return {own: [(PROJECT, q.text, None) for q in case.questions if q.category != "5"],
            "coding": [(PROJECT, text, None) for text in CODING_PROMPTS],
            "other_histories": [(PROJECT, q.text, None) for q in rest[:others]]}


def project_prompts(case: Case) -> dict[str, list]:
    """A coding-set file: each project's answerable and unanswerable questions at their time, and
    the coding prompts asked of every project."""
    return {"project_questions": [(q.project, q.text, q.as_of) for q in case.questions if q.answerable],
            "project_unanswerable": [(q.project, q.text, q.as_of) for q in case.questions if not q.answerable],
            "project_prompts": [(p, text, None) for p in case.projects for text in CODING_PROMPTS]}


def first_items(case: Case, n: int) -> Case:
    """A coding-set file as a new user's memory holds it: each project's first `n` items (in
    writing order, so every decision a kept one supersedes is kept too) and the answerable
    questions whose evidence lies within them."""
    projects = {p: items[:n] for p, items in case.projects.items()}
    kept = {p: item_refs(items) for p, items in projects.items()}
    questions = [q for q in case.questions if q.answerable and q.evidence <= kept.get(q.project, set())]
    return Case(f"{case.case_id}[:{n}]", projects, questions)


def summary(values: dict[str, list[float]], thresholds: list[float]) -> dict[str, Any]:
    """AUROC of each held-out answerable kind against each other kind, medians, and per threshold
    the share of each kind a hook would answer."""
    kept = {k: [x for x in v if x == x] for k, v in values.items()}  # NaN: no strength model
    kept = {k: v for k, v in kept.items() if v}
    return {"auroc": {p: {n: round(auroc(kept[p], kept[n]), 3) for n in NEGATIVE if n in kept}
                      for p in POSITIVE if p in kept},
            "median": {k: round(float(np.median(v)), 3) for k, v in kept.items()},
            "p05": {k: round(float(np.quantile(v, 0.05, method="lower")), 3) for k, v in kept.items()},  # no interpolation: -inf stays
            "answered_by_threshold": [{"threshold": t, **{k: round(float(np.mean([x >= t for x in v])), 3)
                                                          for k, v in kept.items()}} for t in thresholds]}


def run_configuration(name: str, sets: dict[str, list[Case]], models_home: Path | None,
                      others: int, ranker_model: Path | None = None) -> dict[str, Any]:
    """`sets`: dataset -> its cases, each asked the prompts of `conversation_prompts` or
    `project_prompts`; every prompt's top score and evidence strength."""
    values: dict[str, dict[str, list[float]]] = {s: {} for s in SIGNALS}
    cache = open_cache(models_home, "embeddings") if models_home else None
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agentmemrec-hook-") as tmp:
        for dataset, cases in sets.items():
            for n, case in enumerate(tqdm(cases, desc=f"{name} {dataset}", unit="history", file=sys.stderr)):
                memory = open_history(Path(tmp) / f"{dataset}-{n}", case, models_home, cache, ranker_model)
                asked = (project_prompts(case) if dataset == "coding"
                         else conversation_prompts(case, cases, n, dataset, others))
                try:
                    for kind, prompts in asked.items():
                        for project, text, as_of in prompts:
                            for signal, value in measured(memory, project, text, as_of).items():
                                values[signal].setdefault(kind, []).append(value)
                finally:
                    memory.close()
    return {"configuration": name, "seconds": round(time.perf_counter() - started, 1),
            "queries": {k: len(v) for k, v in values["top_score"].items()},
            "signals": {s: summary(values[s], SIGNALS[s]) for s in SIGNALS}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--locomo", type=Path, nargs="*", default=[], help="LoCoMo files or folders")
    ap.add_argument("--longmemeval", type=Path, nargs="*", default=[],
                    help="LongMemEval-S files the shipped rankers were trained on (all of them on the first 60)")
    ap.add_argument("--coding", type=Path, nargs="*", default=[],
                    help="coding-set files the shipped ranker was not trained on (the held-out set)")
    ap.add_argument("--models-home", type=Path, default=None,
                    help="a home whose installed models (models/) the second configuration uses")
    ap.add_argument("--models-datasets", nargs="*", default=None, metavar="DATASET",
                    help="the datasets the second configuration asks (default: all; embedding a "
                         "LongMemEval-S haystack takes minutes on a CPU)")
    ap.add_argument("--ranker-model", type=Path, default=None,
                    help="the ranker file the second configuration uses (default: the shipped one for its models)")
    ap.add_argument("--bm25-ranker-model", type=Path, default=None,
                    help="the ranker file the BM25-only configuration uses (default: the shipped one)")
    ap.add_argument("--coding-first", type=int, default=None, metavar="N",
                    help="keep only each coding project's first N items and the questions they answer "
                         "(a new user's small store)")
    ap.add_argument("--others", type=int, default=40, help="questions of other histories asked of each")
    ap.add_argument("--out", type=Path, required=True, help="where the JSON results go")
    args = ap.parse_args()
    sets = {name: list(read_cases(name, paths)) for name, paths in
            (("longmemeval", args.longmemeval), ("locomo", args.locomo), ("coding", args.coding)) if paths}
    if args.coding_first and "coding" in sets:
        sets["coding"] = [first_items(c, args.coding_first) for c in sets["coding"]]
    configurations = [run_configuration("bm25-only", sets, None, args.others, args.bm25_ranker_model)]
    if args.models_home:
        chosen = {k: v for k, v in sets.items() if args.models_datasets is None or k in args.models_datasets}
        configurations.append(run_configuration(models_label(args.models_home), chosen, args.models_home,
                                                args.others, args.ranker_model))
    write_result(args.out, {"benchmark": "hook_evidence", "budget": PROMPT_BUDGET, "coding_first": args.coding_first,
                            "ranker_models": [str(p) if p else None for p in (args.bm25_ranker_model, args.ranker_model)],
                            "files": {name: [c.case_id for c in cases] for name, cases in sets.items()},
                            "configurations": configurations})
    for c in configurations:
        for signal, found in c["signals"].items():
            print(c["configuration"], signal, "AUROC", found["auroc"], "median", found["median"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
