"""When should a prompt hook add nothing? The evidence strength of the ranker's top score.

`agentmemrec hook` adds a slate to a prompt only when the ranker's top score reaches
`WEAK_SCORE` (server/hook_context.py). This measures how well that score separates prompts
whose answer is stored from prompts about something else, through the product's own write and
selection code (`Memory.remember`, then `Memory.recall` at the hook's budget):

- answerable, held out: LongMemEval-S questions asked of their own haystack, from the files the
  shipped ranker was not trained on (it saw the first 60 in sorted order; pass the others);
- answerable, trained on: the LoCoMo development questions (categories 1-4) asked of their own
  conversation. The shipped ranker was trained on them, so their scores are optimistic: they
  are reported, never used to choose the threshold;
- unrelated, coding: hand-written coding-assistant prompts, asked of every history;
- unrelated, other histories: the questions of the other files (same style, other people and
  events), the hard case.

For each configuration (BM25 only, as installed; and with the embedder of `--models-home`) it
writes each kind's median top score, the AUROC of held-out answerable against each unrelated
kind, and per threshold the share of each kind a hook would answer.

    nice -n 10 python bench/hook_evidence.py --locomo /work/shared/data/locomo \
        --longmemeval $(ls /work/shared/data/longmemeval-s/*.json | sort | tail -n +61 | head -30) \
        --models-home "$AGENTMEMREC_HOME" --out bench/results/hook_evidence.json
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
from harness import write_result
from tqdm import tqdm

from agentmemrec.indexing.dense.backfill import embed_pending
from agentmemrec.ranking.eval.benchmarks import Case, read_cases
from agentmemrec.ranking.eval.evaluate import open_cache
from agentmemrec.ranking.memory import Memory
from agentmemrec.server.hook_context import WEAK_SCORE
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
THRESHOLDS = [round(x, 2) for x in np.arange(-4.0, 4.01, 0.25)]


def auroc(positive: list[float], negative: list[float]) -> float:
    """P(a positive scores above a negative), ties counted half (the Mann-Whitney statistic)."""
    pos, neg = np.asarray(positive)[:, None], np.asarray(negative)[None, :]
    return float(((pos > neg).sum() + 0.5 * (pos == neg).sum()) / (pos.size * neg.size))


def top_score(memory: Memory, project: str, query: str) -> float:
    slate = memory.recall(project, query, PROMPT_BUDGET)
    return slate.top_score if slate.top_score is not None else float("-inf")


def open_history(home: Path, case: Case, models_home: Path | None, cache: Any) -> Memory:
    """A fresh store holding one history, embedded when a model is installed."""
    if models_home is not None:
        shutil.copytree(models_home / "models", home / "models")
    memory = Memory.open(home, background=False)
    for i in range(0, len(case.items), 1000):
        memory.remember(case.case_id, case.items[i:i + 1000])
    if memory.dense is not None:
        embed_pending(memory.dense.vectors, memory.dense.embedder, cache=cache)
    return memory


def run_configuration(name: str, sets: dict[str, list[Case]], models_home: Path | None,
                      others: int) -> dict[str, Any]:
    """`sets`: dataset -> its cases. Each history is asked its own questions, the coding prompts
    and `others` questions of the other histories of its dataset."""
    scores: dict[str, list[float]] = {"longmemeval_held_out": [], "locomo_trained_on": [], "coding": [],
                                      "other_histories": []}
    cache = open_cache(models_home) if models_home else None
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agentmemrec-hook-") as tmp:
        for dataset, cases in sets.items():
            own_kind = {"longmemeval": "longmemeval_held_out", "locomo": "locomo_trained_on"}[dataset]
            for n, case in enumerate(tqdm(cases, desc=f"{name} {dataset}", unit="history", file=sys.stderr)):
                memory = open_history(Path(tmp) / case.case_id, case, models_home, cache)
                try:
                    rest = [q for c in cases[n + 1:] + cases[:n] for q in c.questions if q.category != "5"]
                    asked = {own_kind: [q.text for q in case.questions if q.category != "5"],
                             "coding": CODING_PROMPTS, "other_histories": [q.text for q in rest[:others]]}
                    for kind, queries in asked.items():
                        scores[kind] += [top_score(memory, case.case_id, text) for text in queries]
                finally:
                    memory.close()
    held_out = scores["longmemeval_held_out"]
    return {"configuration": name, "seconds": round(time.perf_counter() - started, 1),
            "queries": {k: len(v) for k, v in scores.items()},
            "auroc_held_out_vs": {k: round(auroc(held_out, scores[k]), 3) for k in ("coding", "other_histories")}
            if held_out else {},
            "median_top_score": {k: round(float(np.median(v)), 3) for k, v in scores.items() if v},
            "answered_by_threshold": [{"threshold": t, **{k: round(float(np.mean([s >= t for s in v])), 3)
                                                          for k, v in scores.items() if v}}
                                      for t in THRESHOLDS]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--locomo", type=Path, nargs="*", default=[], help="LoCoMo files or folders")
    ap.add_argument("--longmemeval", type=Path, nargs="*", default=[],
                    help="LongMemEval-S files the shipped ranker was not trained on")
    ap.add_argument("--models-home", type=Path, default=None,
                    help="a home whose installed models (models/) the second configuration uses")
    ap.add_argument("--others", type=int, default=40, help="questions of other histories asked of each")
    ap.add_argument("--out", type=Path, required=True, help="where the JSON results go")
    args = ap.parse_args()
    sets = {name: list(read_cases(name, paths)) for name, paths in
            (("longmemeval", args.longmemeval), ("locomo", args.locomo)) if paths}
    configurations = [run_configuration("bm25-only", sets, None, args.others)]
    if args.models_home:
        configurations.append(run_configuration("with-embedder", sets, args.models_home, args.others))
    write_result(args.out, {"benchmark": "hook_evidence", "weak_score": WEAK_SCORE, "budget": PROMPT_BUDGET,
                            "files": {name: [c.case_id for c in cases] for name, cases in sets.items()},
                            "configurations": configurations})
    for c in configurations:
        print(c["configuration"], "AUROC", c["auroc_held_out_vs"], "median top score", c["median_top_score"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
