"""The read-only tools: what memory holds, for an agent that wants to look rather than recall.
Each is thin, like the others: check access, call the core, shape the result."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Callable

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.tokens import count_tokens
from agentmemrec.indexing.units import Unit
from agentmemrec.ranking.digest import Digest, digest
from agentmemrec.server.abridged import (
    MAX_RESULT_TOKENS,
    PAGE_ROOM,
    cut_to,
    fitting,
    items_fit,
    json_result,
    result_tokens,
)
from agentmemrec.server.schema import (
    MAX_TOOL_BUDGET,
    DecisionOut,
    DecisionsResult,
    DigestBudget,
    FromChunk,
    Project,
    ProjectCount,
    ProjectOffset,
    ProjectsResult,
    UnitOut,
    UnitRef,
    UnitResult,
    WithDecisions,
)

DIGEST_BUDGET = 2700


def unit_out(unit: Unit) -> UnitOut:
    """A unit as `show` (tool and command) and `decisions_in_force` report it: a decision with an
    adopted successor is superseded, whatever status it was written with, as slates say."""
    fields = {k: v for k, v in asdict(unit).items() if k in UnitOut.model_fields}
    status = "superseded" if unit.kind == "decision" and unit.superseded_by is not None else unit.status
    return UnitOut(**{**fields, "at": unit.at.isoformat(), "status": status})


def decision_out(unit: Unit) -> DecisionOut:
    out = unit_out(unit)
    return DecisionOut(**{k: getattr(out, k) for k in DecisionOut.model_fields})


def decisions_result(found: Digest, budget: int, with_items: bool) -> DecisionsResult:
    """The digest as a tool result a client takes whole: its context fits `budget` (at most
    MAX_TOOL_BUDGET), the records come only when asked for and then must fit MAX_RESULT_TOKENS."""
    notes = []
    if found.left_out:
        larger = (f"call again with a larger budget_tokens (at most {MAX_TOOL_BUDGET}), or "
                  if budget < MAX_TOOL_BUDGET else "")
        notes.append(f"{found.left_out} more decisions did not fit budget_tokens {budget}, not even by title: "
                     f"{larger}recall_slate with a query on the topic finds one left out")
    result = DecisionsResult(project=found.project, context=found.context, left_out=found.left_out,
                             tokens_used=found.tokens_used, notes=notes)
    if with_items:
        result.in_force = [decision_out(u) for u in found.in_force]
        result.replaced = [decision_out(u) for u in found.replaced]
        items_fit(result.model_dump(mode="json"))
    return result


def unit_result(project: str, units: list[Unit], first: int) -> UnitResult:
    """`units` (an item's chunks, in order) from chunk `first` on, while the result stays under
    MAX_RESULT_TOKENS; a chunk that alone is over it (a 128 KiB decision is one chunk) is cut."""
    rest = [u for u in units if u.chunk >= first]
    if not rest:
        raise InputError(f"from_chunk {first} is past the item's last chunk, {units[-1].chunk}; "
                         "pass a chunk that a previous call's notes named")
    outs = [unit_out(u) for u in rest]
    shown = outs[:fitting(outs)]
    if not shown:
        out, unit = outs[0], rest[0]
        out.text = cut_to(out.text, PAGE_ROOM - (result_tokens(out.model_dump()) - count_tokens(out.text)) - 1)
        note = (f"chunk {unit.chunk}'s text is cut to fit a result a client takes whole: recall_slate "
                f"brings the part a query is about, `agentmemrec show '#{unit.id}'` prints it whole")
        return UnitResult(project=project, units=[out], chunks_left_out=len(rest) - 1, notes=[note] + _more(rest[1:]))
    return UnitResult(project=project, units=shown, chunks_left_out=len(rest) - len(shown),
                      notes=_more(rest[len(shown):]))


def _more(left: list[Unit]) -> list[str]:
    return [f"{len(left)} more chunks left out to keep the result under {MAX_RESULT_TOKENS} tokens: call "
            f"show_unit again with from_chunk={left[0].chunk}"] if left else []


def project_counts(kinds: dict[str, dict[str, int]], projects: Any) -> list[ProjectCount]:
    return [ProjectCount(project=p, units=sum(kinds.get(p, {}).values()), turns=kinds.get(p, {}).get("turn", 0),
                         decisions=kinds.get(p, {}).get("decision", 0), notes=kinds.get(p, {}).get("note", 0))
            for p in sorted(projects)]


def projects_result(counts: list[ProjectCount], offset: int) -> ProjectsResult:
    """`counts` (in name order) from `offset` on, while the result stays under MAX_RESULT_TOKENS:
    about 27 tokens a project, so about 700 fit."""
    if offset and offset >= len(counts):
        raise InputError(f"offset {offset} is past the last project: you may use {len(counts)}; call with "
                         "offset 0, or the one a previous call's notes named")
    shown = counts[offset:offset + fitting(counts[offset:])]
    left = len(counts) - offset - len(shown)
    notes = [f"{left} more projects left out to keep the result under {MAX_RESULT_TOKENS} tokens: call "
             f"list_projects again with offset={offset + len(shown)}"] if left else []
    return ProjectsResult(projects=shown, projects_left_out=left, notes=notes)


def add_views(server: MCPServer, tool: Callable[..., Any], core: Callable[..., Any],
              memory_of: Callable[[Context], Any], access_of: Callable[[Context], Any]) -> None:
    """Register the read-only tools with the server's own `tool` decorator and error mapping."""

    @tool(server, "List projects", read_only=True)
    def list_projects(ctx: Context, offset: ProjectOffset = 0) -> Annotated[CallToolResult, ProjectsResult]:
        """List the projects you may use, in name order, and how many turns, decisions and notes
        each holds. A result stays under 20,000 tokens (about 700 projects): past that,
        `projects_left_out` counts the projects left out and `notes` gives the `offset` to call
        again with."""
        counts = project_counts(core(memory_of(ctx).call, "kinds"), access_of(ctx).allowed)
        return json_result(core(projects_result, counts, offset).model_dump())

    @tool(server, "Decisions in force", read_only=True)
    def decisions_in_force(ctx: Context, project: Project = None, budget_tokens: DigestBudget = DIGEST_BUDGET,
                           with_items: WithDecisions = False) -> Annotated[CallToolResult, DecisionsResult]:
        """The project's decisions in force, newest first: accepted ones, and proposed ones marked
        not confirmed, with their text; decisions something replaced as one line naming the
        successor; rejected ones left out. Use it to learn what was decided before changing
        something that a decision covers. The `context` field is the digest to read, within
        `budget_tokens`: when they do not all fit, long ones are excerpts, then the older ones are
        listed by title (show_unit '#id' shows one whole), and `left_out` counts those that did not
        fit even so (`notes` says how to find them)."""
        name = core(access_of(ctx).resolve, project)
        found = digest(name, core(memory_of(ctx).call, "decisions", name), budget_tokens)
        result = core(decisions_result, found, budget_tokens, with_items)
        return json_result(result.model_dump(mode="json", exclude=set() if with_items else {"in_force", "replaced"}))

    @tool(server, "Show a unit", read_only=True)
    def show_unit(ref: UnitRef, ctx: Context, project: Project = None,
                  from_chunk: FromChunk = 0) -> Annotated[CallToolResult, UnitResult]:
        """Show one stored item in full by its ref or id (every chunk of a note), with all its
        fields: for a slate item whose text you need whole, or to check what a ref holds. A result
        stays under 20,000 tokens: past that, `chunks_left_out` counts the chunks left out and
        `notes` gives the `from_chunk` to call again with."""
        name = core(access_of(ctx).resolve, project)
        units = core(memory_of(ctx).call, "show", name, ref)
        return json_result(core(unit_result, name, units, from_chunk).model_dump())
