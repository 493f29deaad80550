"""The read-only tools: what memory holds, for an agent that wants to look rather than recall.
Each is thin, like the others: check access, call the core, shape the result."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from agentmemrec.indexing.units import Unit
from agentmemrec.ranking.digest import digest
from agentmemrec.server.schema import (
    DecisionsResult,
    DigestBudget,
    Project,
    ProjectCount,
    ProjectsResult,
    UnitOut,
    UnitRef,
    UnitResult,
)

DIGEST_BUDGET = 2700


def unit_out(unit: Unit) -> UnitOut:
    """A unit as `show` (tool and command) and `decisions_in_force` report it: a decision with an
    adopted successor is superseded, whatever status it was written with, as slates say."""
    fields = {k: v for k, v in asdict(unit).items() if k in UnitOut.model_fields}
    status = "superseded" if unit.kind == "decision" and unit.superseded_by is not None else unit.status
    return UnitOut(**{**fields, "at": unit.at.isoformat(), "status": status})


def project_counts(kinds: dict[str, dict[str, int]], projects: Any) -> list[ProjectCount]:
    return [ProjectCount(project=p, units=sum(kinds.get(p, {}).values()), turns=kinds.get(p, {}).get("turn", 0),
                         decisions=kinds.get(p, {}).get("decision", 0), notes=kinds.get(p, {}).get("note", 0))
            for p in sorted(projects)]


def add_views(server: MCPServer, tool: Callable[..., Any], core: Callable[..., Any],
              memory_of: Callable[[Context], Any], access_of: Callable[[Context], Any]) -> None:
    """Register the read-only tools with the server's own `tool` decorator and error mapping."""

    @tool(server, "List projects", read_only=True)
    def list_projects(ctx: Context) -> ProjectsResult:
        """List the projects you may use and how many turns, decisions and notes each holds."""
        kinds = core(memory_of(ctx).call, "kinds")
        return ProjectsResult(projects=project_counts(kinds, access_of(ctx).allowed))

    @tool(server, "Decisions in force", read_only=True)
    def decisions_in_force(ctx: Context, project: Project = None,
                           budget_tokens: DigestBudget = DIGEST_BUDGET) -> DecisionsResult:
        """The project's decisions in force, newest first: accepted ones, and proposed ones marked
        not confirmed, with their text; decisions something replaced as one line naming the
        successor; rejected ones left out. Use it to learn what was decided before changing
        something that a decision covers."""
        name = core(access_of(ctx).resolve, project)
        found = digest(name, core(memory_of(ctx).call, "decisions", name), budget_tokens)
        return DecisionsResult(project=name, context=found.context, in_force=[unit_out(u) for u in found.in_force],
                               replaced=[unit_out(u) for u in found.replaced], left_out=found.left_out,
                               tokens_used=found.tokens_used)

    @tool(server, "Show a unit", read_only=True)
    def show_unit(ref: UnitRef, ctx: Context, project: Project = None) -> UnitResult:
        """Show one stored item in full by its ref or id (every chunk of a note), with all its
        fields: for a slate item whose text you need whole, or to check what a ref holds."""
        name = core(access_of(ctx).resolve, project)
        return UnitResult(project=name, units=[unit_out(u) for u in core(memory_of(ctx).call, "show", name, ref)])
