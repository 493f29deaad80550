"""What a coding assistant's hook event gets from memory, computed where the store is open: in the
owner process (asked over its socket by `agentmemrec hook`) or in `serve --http` (Claude Code's
`http` hooks POST the event JSON there, so no process starts per prompt).

- `UserPromptSubmit`: a slate for the prompt under its own budget, behind one line saying what it
  is, or nothing when the evidence is weak: a slate of filler costs the model attention on every
  prompt, and most prompts ("run the tests", "yes, go on") have nothing stored behind them.
- `SessionStart`: the project's decisions in force (`ranking/digest.py`) under their own budget.

The project is the one `--project` names, else the one the event's `cwd` maps to, exactly as the
transcript capture maps a session (`--project-map`, else the git repository's name); over HTTP,
where the cwd is on the caller's machine, by its folder names (`caller_project`).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Callable, Mapping

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.sources.transcripts import ProjectMap
from agentmemrec.indexing.units import check_project
from agentmemrec.ranking.digest import digest
from agentmemrec.ranking.learned import weights_of
from agentmemrec.ranking.memory import MAX_QUERY_CHARS, MIN_BUDGET, Memory
from agentmemrec.ranking.slate import Slate
from agentmemrec.server.hook_process import DIGEST_BUDGET, MAX_CONTEXT_CHARS, MAX_HOOK_BUDGET, PROMPT_BUDGET

log = logging.getLogger("agentmemrec.hooks")

# The evidence is weak below this top score of the ranker. Measured by bench/hook_evidence.py
# (bench/results/hook-evidence.json, docs/clients.md). It is one raw-score threshold for every
# ranker, and a ranker's score is relative to its pool, so a retrained ranker can move it and a
# small store passes more unrelated prompts (docs/ranker.md).
WEAK_SCORE = 1.0
# A cross-encoder's logit is absolute: a (prompt, unit) pair scores the same whatever else the store
# holds. Below this floor for the best candidate it scored, the evidence is weak whatever the
# ranker's score. Keyed by the cross-encoder's weights (its identity after '@'); the value is the
# 5th percentile of that best logit over the coding set's development questions
# (bench/results/hook-gate-dev.json), so it was chosen on no held-out prompt. A cross-encoder
# without a floor here is gated by WEAK_SCORE alone.
RELEVANCE_FLOOR = {"1225ccd6afd0": -9.8}  # ms-marco-MiniLM-L-12-v2, int8: the default CPU set
MIN_PROMPT_WORDS = 2  # "yes", "continue", "はい": nothing to look up
# Chinese and Japanese put no spaces between words (and Korean's spaced units are long): their
# characters count, about two to a word.
CJK = re.compile("[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
                 "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]")


def project_for(event: Mapping[str, Any], options: Mapping[str, Any]) -> str | None:
    if options.get("project"):
        return check_project(options["project"])
    cwd = event.get("cwd") if isinstance(event.get("cwd"), str) else None
    projects, allowed = ProjectMap.load(options.get("project_map")), options.get("allowed")
    if allowed is None:  # the hook process, on the machine the cwd is on
        return projects.project_for(cwd)
    return caller_project(projects, cwd, list(allowed))


def caller_project(projects: ProjectMap, cwd: str | None, allowed: list[str]) -> str | None:
    """Over HTTP the cwd is a folder on the caller's machine, whose repository this server cannot
    look into: the project map's prefix, else the deepest folder name that is a project the
    token may use (a session started in `~/src/payments/services/api` is `payments`'s), else the
    token's only project; else none, logged."""
    mapped = projects.prefix_for(cwd) if cwd else None
    if mapped is not None:
        return mapped[1]
    named = next((part for part in reversed(re.split(r"[\\/]", cwd or "")) if part in allowed), None)
    if named is None and len(allowed) == 1:
        return allowed[0]
    if named is None:
        log.info("hook over HTTP: no folder of %r names one of the token's projects (%s): nothing added; "
                 "give the hook's URL ?project=P", cwd, ", ".join(allowed))
    return named


def hook_budget(value: Any, default: int) -> int:
    """A hook's budget in tokens (`within_reach` keeps its context to what the client takes whole)."""
    if value in (None, ""):
        return default
    try:
        budget = int(value)
    except (TypeError, ValueError):
        budget = -1
    if not MIN_BUDGET <= budget <= MAX_HOOK_BUDGET:
        raise InputError(f"a hook's budget must be a whole number of tokens in [{MIN_BUDGET}, "
                         f"{MAX_HOOK_BUDGET}]; got {value!r}")
    return budget


def answer(memory: Memory, event: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """`{"project", "context", "why"}`: the context to add ("" for none) and, for the hook's log,
    why there is none."""
    project = project_for(event, options)
    allowed = options.get("allowed")
    if project is None or (allowed is not None and project not in allowed):
        return {"project": project, "context": "", "why": "no project for this folder"
                if project is None else f"project {project!r} is not open to this caller"}
    name = event.get("hook_event_name")
    if name == "UserPromptSubmit":
        budget = hook_budget(options.get("budget"), PROMPT_BUDGET)
        return {"project": project, **within_reach(lambda b: prompt_context(memory, project, event.get("prompt"), b),
                                                   budget)}
    if name == "SessionStart":
        budget = hook_budget(options.get("digest_budget"), DIGEST_BUDGET)
        return {"project": project, **within_reach(lambda b: session_context(memory, project, b), budget)}
    return {"project": project, "context": "", "why": f"no context for {name!r} events"}


def within_reach(context_for: Callable[[int], dict[str, str]], budget: int) -> dict[str, str]:
    """`context_for(budget)`, within the MAX_CONTEXT_CHARS Claude Code passes on whole (past them the
    model gets a preview and a file path). A budget is in tokens and prose runs to 5-6 characters a
    token, so a budget near MAX_HOOK_BUDGET can go past them: then the context is made once more
    under a budget smaller in proportion, and if that does not fit either, there is none."""
    found = context_for(budget)
    size = len(found["context"])
    if size <= MAX_CONTEXT_CHARS:
        return found
    smaller = budget * MAX_CONTEXT_CHARS * 9 // (size * 10)  # a tenth to spare: the ratio varies by item
    if smaller >= MIN_BUDGET and len((found := context_for(smaller))["context"]) <= MAX_CONTEXT_CHARS:
        return found
    return {"context": "", "why": f"{size} characters of context at {budget} tokens would be cut by the client; "
                                  "lower the budget"}


def session_context(memory: Memory, project: str, budget: int) -> dict[str, str]:
    found = digest(project, memory.store.decisions(project), budget)
    head = f"AgentMemRec: the decisions in force in project {project}, from its stored memory.\n"
    return {"context": head + found.context if found.context else "",
            "why": "" if found.context else "no decision in force"}


def prompt_context(memory: Memory, project: str, prompt: Any, budget: int) -> dict[str, str]:
    query = prompt.strip()[:MAX_QUERY_CHARS] if isinstance(prompt, str) else ""
    if prompt_words(query) < MIN_PROMPT_WORDS:
        return {"context": "", "why": "prompt too short to look up"}
    slate = memory.recall(project, query, budget, matched_only=True)
    weak = weak_evidence(slate, memory.models()["cross_encoder"])
    if weak:
        return {"context": "", "why": f"weak evidence (slate {slate.slate_id}, {weak})"}
    head = (f"AgentMemRec: stored memory of project {project} that may bear on this prompt "
            f"(recalled automatically as slate {slate.slate_id}; explain_selection says why).\n")
    return {"context": head + slate.context, "why": ""}


def prompt_words(text: str) -> int:
    """About how many words `text` holds, in any script: the runs between spaces that hold a letter
    or digit, and for Chinese, Japanese and Korean characters, one word for every two."""
    ideographic = len(CJK.findall(text))
    spaced = sum(1 for run in CJK.sub(" ", text).split() if any(ch.isalnum() for ch in run))
    return spaced + (ideographic + 1) // 2


def weak_evidence(slate: Slate, cross_encoder: str | None) -> str | None:
    """Why `slate` is too weak to add to a prompt (None: add it), given the identity of the
    cross-encoder that scored its candidates."""
    if not slate.items or slate.top_score is None:
        return "nothing eligible"
    if slate.top_score < WEAK_SCORE:
        return f"top score {slate.top_score:.2f} < {WEAK_SCORE}"
    floor = RELEVANCE_FLOOR.get(weights_of(cross_encoder))
    if floor is not None and slate.top_relevance is not None and slate.top_relevance < floor:
        return f"best cross-encoder logit {slate.top_relevance:.2f} < {floor}"
    return None
