"""Long decision records: does each ADR's decision reach a slate and the session digest?

    python bench/adr_reach.py --adrs DIR [DIR ...] --json bench/results/adr-reach.json

Each DIR is a repository checkout (or the part of one that holds its ADRs), read by the product's
own watcher (`agentmemrec watch DIR --once`) into its own project of a fresh home that uses the
installed models (--models; default: the default home's). At each --budget (1,200 is the
per-prompt hook's):

- for every decision, a slate for its title: is the decision itself (the first line of its
  "Decision" section, or of its text when it has none) in the slate's context?
- for every decision with a block outside its decision section that starts past its first 128
  tokens (the default cross-encoder's window), a slate for that block's first sentence
  (`deep_sentence`): is the record in the slate, and is the sentence shown?

Both are measured twice in one run: as shipped, and as recall was before long records were
handled (`whole_records_only`: every record whole or not at all, the cross-encoder reading a
record's first lines, a decision's length charged whole). The digest that starts a session is
measured at each --digest-budget (800 is the SessionStart hook's): how many decisions in force it
names, and shows with their decision, against what a digest of whole records fits (newest first,
each whole or not at all, as before). Not a test: one run; only counts go into the JSON.

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
from agentmemrec.ranking import learned as learned_module
from agentmemrec.ranking import ranker as ranker_module
from agentmemrec.ranking import slate as slate_module
from agentmemrec.ranking.digest import NO_LINKS, digest, in_force, preamble
from agentmemrec.ranking.records import blocks
from agentmemrec.ranking.render import render_item
from agentmemrec.server.owner import shared_memory
from agentmemrec.server.settings import Settings
from agentmemrec.server.sources import run_watch

DEFAULT_MODELS = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local/share")) / "agentmemrec" / "models"
DEEP_AFTER = 128  # tokens: past the default cross-encoder's window
_DECISION_LINE = re.compile(r"^(?:#{1,6}\s*)?decision(?:\s+outcome)?:?\s*$", re.IGNORECASE | re.MULTILINE)


def decision_line(unit: Unit) -> str:
    """The first line of the record's decision section (stored ADRs turn headings into `Decision:`
    lines), else its first line: what a slate must show for the decision to have reached it."""
    found = _DECISION_LINE.search(unit.text)
    rest = unit.text[found.end():] if found else unit.text
    return next((line.strip() for line in rest.splitlines() if line.strip()), "")


def whole_records_only() -> None:
    """Recall as it was before long records were handled: stage 4 shows every record whole or not
    at all, the cross-encoder reads a record's first lines, and a decision's length is charged whole."""
    slate_module.excerpt = lambda unit, *_: unit
    ranker_module.cross_text = lambda unit, *_: unit.index_text()
    learned_module.DECISION_SHOWN_TOKENS = 1 << 30


def deep_sentence(unit: Unit, window: int = DEEP_AFTER) -> str | None:
    """The first sentence of the record's last block outside its decision section that starts
    past its first `window` tokens (its consequences, say): a query for what only a reader past the
    record's opening lines would find. None when the record has no such block."""
    start = 0
    found = None
    for block, deciding in blocks(unit.text):
        if not deciding and start >= window and len(block.split()) >= 6:
            found = block
        start += count_tokens(block) + 2
    if found is None:
        return None
    lines = [line for line in found.splitlines() if not line.rstrip().endswith(":")] or found.splitlines()
    return re.split(r"(?<=[.!?])\s", " ".join(line.strip() for line in lines), maxsplit=1)[0][:300]


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
        deep = [(d, q) for d in decisions if (q := deep_sentence(d))]
        deep_in = deep_shown = 0
        for d, q in deep:
            slate = memory.recall(project, q, budget)
            deep_in += any(it.unit.id == d.id for it in slate.items)
            deep_shown += q[:60] in " ".join(line.strip() for line in slate.context.splitlines())
        out["slate"][str(budget)] = {"in_slate": in_slate, "decision_shown": reached, "deep_queries": len(deep),
                                     "deep_in_slate": deep_in, "deep_passage_shown": deep_shown}
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
