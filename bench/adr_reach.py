"""Long decision records: does each ADR's decision reach a slate and the session digest?

    python bench/adr_reach.py --adrs DIR [DIR ...] --json bench/results/adr-reach.json

Each DIR is a repository checkout (or the part of one that holds its ADRs), read by the product's
own watcher (`agentmemrec watch DIR --once`) into its own project of a fresh home that uses the
installed models (--models; default: the default home's). For every decision stored, the query is
its title, and the bench records whether the decision itself (the first line of its "Decision"
section, or of its text when it has none) is in the slate's context at each --budget (1,200 is the
per-prompt hook's budget), and how many of the project's decisions in force the digest that starts
a session names, and shows with their decision, at each --digest-budget (800 is the SessionStart
hook's). Slates are measured twice in one run: as shipped (a decision whose item takes more than
half the budget shown as an excerpt, its decision section first) and with whole records only (as
before excerpts: a record that does not fit is skipped and the walk goes on); the digest against
what a digest of whole records fits (newest first, each whole or not at all, as before). Not a
test: one run; only counts go into the JSON.

The ADR folders of public repositories, for example:

    git -C CLONE archive HEAD docs/adr | tar -x -C /tmp/adrs/NAME
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentmemrec.indexing.tokens import count_tokens
from agentmemrec.indexing.units import Unit
from agentmemrec.ranking import slate as slate_module
from agentmemrec.ranking.digest import NO_LINKS, digest, in_force, preamble
from agentmemrec.ranking.slate import render_item
from agentmemrec.server.owner import shared_memory
from agentmemrec.server.settings import Settings
from agentmemrec.server.sources import run_watch

DEFAULT_MODELS = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local/share")) / "agentmemrec" / "models"
_DECISION_LINE = re.compile(r"^(?:#{1,6}\s*)?decision(?:\s+outcome)?:?\s*$", re.IGNORECASE | re.MULTILINE)


def decision_line(unit: Unit) -> str:
    """The first line of the record's decision section (stored ADRs turn headings into `Decision:`
    lines), else its first line: what a slate must show for the decision to have reached it."""
    found = _DECISION_LINE.search(unit.text)
    rest = unit.text[found.end():] if found else unit.text
    return next((line.strip() for line in rest.splitlines() if line.strip()), "")


def whole_records_only() -> None:
    """Stage 4 as it was before excerpts: every record whole or not at all."""
    slate_module.excerpt = lambda unit, *_: unit


def whole_digest(project: str, decisions: list[Unit], budget: int) -> int:
    """How many decisions in force a digest of whole records shows: newest first, each whole if it
    still fits (the digest before excerpts and title lines)."""
    used = count_tokens(preamble(project) + "\n")
    shown = 0
    for d in filter(in_force, decisions):
        cost = count_tokens(render_item(d, NO_LINKS) + "\n")
        if used + cost <= budget:
            used, shown = used + cost, shown + 1
    return shown


def wait_embedded(memory: Any, project: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while any("not yet embedded" in n for n in memory.recall(project, "decision", 1200).notes):
        if time.monotonic() > deadline:
            raise SystemExit(f"{project}: the background embedder did not finish in {timeout:.0f} s")
        time.sleep(0.5)


def measure(memory: Any, project: str, budgets: list[int], digest_budgets: list[int],
            whole: bool) -> dict[str, Any]:
    decisions = memory.call("decisions", project)
    sizes = sorted(d.tokens for d in decisions)
    out: dict[str, Any] = {"decisions": len(decisions), "in_force": sum(map(in_force, decisions)),
                           "median_tokens": sizes[len(sizes) // 2] if sizes else None,
                           "max_tokens": sizes[-1] if sizes else None, "slate": {}, "digest": {}}
    for budget in budgets:
        reached = in_slate = 0
        for d in decisions:
            slate = memory.recall(project, d.title or decision_line(d), budget)
            in_slate += any(it.unit.id == d.id for it in slate.items)
            reached += decision_line(d) in slate.context
        out["slate"][str(budget)] = {"in_slate": in_slate, "decision_shown": reached}
    for budget in digest_budgets:
        if whole:
            n = whole_digest(project, decisions, budget)
            out["digest"][str(budget)] = {"named": n, "decision_shown": n}
            continue
        found = digest(project, decisions, budget)
        out["digest"][str(budget)] = {"named": len(found.in_force), "tokens": found.tokens_used,
                                      "decision_shown": sum(decision_line(d) in found.context for d in found.in_force)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adrs", type=Path, nargs="+", required=True, help="folders that hold ADRs")
    ap.add_argument("--budget", type=int, action="append", help="slate budgets (default 1200 and 2700)")
    ap.add_argument("--digest-budget", type=int, action="append", help="digest budgets (default 800 and 2700)")
    ap.add_argument("--models", type=Path, default=DEFAULT_MODELS, help="installed models to use")
    ap.add_argument("--json", type=Path, help="write the counts here")
    args = ap.parse_args()
    budgets, digest_budgets = args.budget or [1200, 2700], args.digest_budget or [800, 2700]
    result: dict[str, Any] = {"budgets": budgets, "digest_budgets": digest_budgets, "corpora": {}}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        if args.models.is_dir():
            (home / "models").symlink_to(args.models.resolve())
        os.environ["AGENTMEMREC_HOME"] = str(home)
        projects = {}
        for i, folder in enumerate(args.adrs):
            name = f"adrs{i}"
            settings = Settings(home=home, project=name, allowed=frozenset({name}))
            memory = shared_memory(settings).start()
            try:
                run_watch(memory, settings, folder.resolve(), True, lambda line: print(line, file=sys.stderr))
                wait_embedded(memory, name)
            finally:
                memory.close()
            projects[folder.name] = name
        settings = Settings(home=home, project="adrs0", allowed=frozenset(projects.values()))
        for mode in ("excerpts", "whole_records"):
            if mode == "whole_records":
                whole_records_only()
            memory = shared_memory(settings).start()
            try:
                for label, name in projects.items():
                    row = measure(memory, name, budgets, digest_budgets, mode == "whole_records")
                    result["corpora"].setdefault(label, {k: v for k, v in row.items() if k not in ("slate", "digest")})
                    result["corpora"][label][mode] = {"slate": row["slate"], "digest": row["digest"]}
                    print(f"{label} ({mode}): {json.dumps(row)}", file=sys.stderr)
            finally:
                memory.close()
        result["models"] = sorted(p.name for p in args.models.iterdir()) if args.models.is_dir() else []
    text = json.dumps(result, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
