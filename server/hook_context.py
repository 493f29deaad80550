"""What a coding assistant's hook event gets from memory, computed where the store is open: in the
owner process (asked over its socket by `agentmemrec hook`) or in `serve --http` (Claude Code's
`http` hooks POST the event JSON there, so no process starts per prompt).

- `UserPromptSubmit`: a slate for the prompt under its own budget, behind one line saying what it
  is, or nothing when the evidence is weak: a slate of filler costs the model attention on every
  prompt, and most prompts ("run the tests", "yes, go on") have nothing stored behind them.
- `SessionStart`: the project's decisions in force (`ranking/digest.py`) under their own budget.

The project is the one `--project` names, else the one the event's `cwd` maps to, exactly as the
transcript capture maps a session (`--project-map`, else the git repository's name).
"""

from __future__ import annotations

from typing import Any, Mapping

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.sources.transcripts import ProjectMap
from agentmemrec.indexing.units import check_project
from agentmemrec.ranking.digest import digest
from agentmemrec.ranking.memory import MAX_QUERY_CHARS, MIN_BUDGET, Memory
from agentmemrec.server.hook_process import DIGEST_BUDGET, MAX_HOOK_BUDGET, PROMPT_BUDGET

# The evidence is weak below this top score of the ranker. Measured by bench/hook_evidence.py
# (bench/results/hook-evidence.json, docs/clients.md): with the default CPU set it answers 93% of
# the held-out coding questions and 69% of coding prompts asked of projects that do not hold their
# answer; with BM25 alone 71% and 26%. It is one raw-score threshold for every ranker, so a
# retrained ranker can move it (docs/ranker.md); a gate calibrated per ranker would replace it.
WEAK_SCORE = 1.0
MIN_PROMPT_WORDS = 2  # "yes", "continue": nothing to look up


def project_for(event: Mapping[str, Any], options: Mapping[str, Any]) -> str | None:
    if options.get("project"):
        return check_project(options["project"])
    cwd = event.get("cwd")
    return ProjectMap.load(options.get("project_map")).project_for(cwd if isinstance(cwd, str) else None)


def hook_budget(value: Any, default: int) -> int:
    """A hook's budget: what fits the context a client takes whole (about 10,000 characters)."""
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
        return {"project": project, **prompt_context(memory, project, event.get("prompt"), budget)}
    if name == "SessionStart":
        found = digest(project, memory.store.decisions(project),
                       hook_budget(options.get("digest_budget"), DIGEST_BUDGET))
        head = f"AgentMemRec: the decisions in force in project {project}, from its stored memory.\n"
        return {"project": project, "context": head + found.context if found.context else "",
                "why": "" if found.context else "no decision in force"}
    return {"project": project, "context": "", "why": f"no context for {name!r} events"}


def prompt_context(memory: Memory, project: str, prompt: Any, budget: int) -> dict[str, str]:
    query = prompt.strip()[:MAX_QUERY_CHARS] if isinstance(prompt, str) else ""
    if len(query.split()) < MIN_PROMPT_WORDS:
        return {"context": "", "why": "prompt too short to look up"}
    slate = memory.recall(project, query, budget)
    if not slate.items or slate.top_score is None or slate.top_score < WEAK_SCORE:
        return {"context": "", "why": f"weak evidence (slate {slate.slate_id}, top score "
                                      f"{slate.top_score if slate.top_score is not None else 'none'})"}
    head = (f"AgentMemRec: stored memory of project {project} that may bear on this prompt "
            f"(recalled automatically; `agentmemrec explain {slate.slate_id}` says why).\n")
    return {"context": head + slate.context, "why": ""}
