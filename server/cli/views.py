"""What memory holds, read-only, for people: `ls` (projects, or a project's decisions in force),
`show` (one item by ref or id) and `stats` (the store, and what limits each project's recall)."""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from agentmemrec.indexing.store.backends import describe_store
from agentmemrec.server.cli.common import project_args, read_memory, store_arg
from agentmemrec.server.console import emit
from agentmemrec.server.settings import Settings


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser("ls", help="list the projects and their units by kind, or with --decisions a "
                       "project's decisions in force")
    project_args(p)
    p.add_argument("--decisions", action="store_true",
                   help="show the project's decisions in force (the digest a session starts with)")
    p.add_argument("--budget", type=int, default=2700, help="token budget of the digest (default 2700)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("show", help="print one stored item in full, by ref or id")
    p.add_argument("ref", help="a ref, or an id such as '#42'")
    project_args(p)
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("stats", help="the store: where it is, its size, and per project its units "
                       "and what limits recall (models missing, units not yet embedded)")
    store_arg(p)
    p.add_argument("--project", default=None, help="only this project")
    p.add_argument("--json", action="store_true", help="print JSON")
    return {"ls": cmd_ls, "show": cmd_show, "stats": cmd_stats}


def _rows(kinds: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    from agentmemrec.server.views import project_counts  # noqa: PLC0415
    return [c.model_dump() for c in project_counts(kinds, kinds)]


def cmd_ls(args: argparse.Namespace) -> int:
    if args.decisions:  # the digest's budget, checked as recall's is, before the store is opened
        from agentmemrec.ranking.memory import check_budget  # noqa: PLC0415
        check_budget(args.budget, "--budget")
    settings = Settings.load(args.project, store=args.store)
    memory = read_memory(settings)
    try:
        if args.decisions:
            decisions = memory.call("decisions", settings.project)
        else:
            kinds = memory.call("kinds")
    finally:
        memory.close()
    if args.decisions:
        from agentmemrec.ranking.digest import digest  # noqa: PLC0415
        found = digest(settings.project, decisions, args.budget)
        if args.json:
            emit(json.dumps({"project": settings.project, "context": found.context,
                             "left_out": found.left_out}, indent=2))
        else:
            emit(found.context or f"project {settings.project} holds no decision in force\n", end="")
            if found.left_out:
                emit(f"-- {found.left_out} more did not fit --budget {args.budget}")
        return 0
    rows = [r for r in _rows(kinds) if not args.project or r["project"] == settings.project]
    if args.json:
        emit(json.dumps(rows, indent=2))
        return 0
    emit(f"{'project':<24} {'units':>8} {'turns':>8} {'decisions':>9} {'notes':>8}")
    for r in rows:
        emit(f"{r['project']:<24} {r['units']:>8} {r['turns']:>8} {r['decisions']:>9} {r['notes']:>8}")
    if not rows and args.project:
        emit(f"-- project {settings.project} holds nothing yet; `agentmemrec ls` lists the projects")
    elif not rows:
        emit(f"-- no project yet in {settings.home}; add memory with `agentmemrec import`, `watch` or `setup`")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from agentmemrec.server.views import unit_out  # noqa: PLC0415
    settings = Settings.load(args.project, store=args.store)
    memory = read_memory(settings)
    try:
        units = memory.call("show", settings.project, args.ref)
    finally:
        memory.close()
    if args.json:
        emit(json.dumps([unit_out(u).model_dump() for u in units], indent=2, ensure_ascii=False))
        return 0
    for u in units:
        fields = {k: v for k, v in unit_out(u).model_dump().items() if v is not None and k not in ("text", "id")}
        emit(f"[#{u.id}] " + ", ".join(f"{k}={v}" for k, v in fields.items()))
        emit(u.text)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    settings = Settings.load(args.project, store=args.store)
    memory = read_memory(settings)
    try:
        kinds = memory.call("kinds")
        if args.project:
            kinds = {p: k for p, k in kinds.items() if p == settings.project}
        notes = {p: memory.call("notes", p) for p in kinds}
    finally:
        memory.close()
    where, size = describe_store(settings.home, settings.store)
    out = {"home": str(settings.home), "store": where, "database_bytes": size,
           "projects": [{**r, "limits": notes[r["project"]]} for r in _rows(kinds)]}
    if args.json:
        emit(json.dumps(out, indent=2))
        return 0
    emit(f"store {where}{f' ({size / 2**20:.1f} MiB)' if size is not None else ''}, {len(kinds)} projects")
    for r in out["projects"]:
        emit(f"{r['project']}: {r['units']} units ({r['turns']} turns, {r['decisions']} decisions, "
             f"{r['notes']} note chunks)")
        for note in r["limits"]:
            emit(f"  -- {note}")
    if args.project and not kinds:
        emit(f"-- project {settings.project} holds nothing yet; `agentmemrec stats` shows every project")
    return 0
