"""The MCP shell: typed tools that validate, call one core function and shape the result."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Literal, TypeVar

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from agentmemrec.indexing.errors import InputError, StoreError
from agentmemrec.indexing.store.duckdb_store import WriteResult
from agentmemrec.ranking.slate import Slate
from agentmemrec.server.auth import StoreTokenVerifier, auth_settings, principal_access
from agentmemrec.server.owner import SharedMemory, shared_memory
from agentmemrec.server.settings import Access, Settings
from agentmemrec.server.sources import background_sources

log = logging.getLogger("agentmemrec")
T = TypeVar("T")

INSTRUCTIONS = """Long-term memory for this project. Call recall_slate at the start of a task and
whenever earlier decisions, conversations or notes may matter; it returns a compact, token-budgeted
slate of evidence. Call remember to store turns, decisions (with status) and file notes worth
keeping. Call explain_selection when a slate seems to miss something."""


class MemoryItem(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not silently dropped

    kind: Literal["turn", "decision", "note"] = Field(
        description="turn: a conversation turn; decision: a decision record; note: a file note")
    text: str = Field(description="The content to remember (at most 128 KiB)")
    ref: str | None = Field(None, description="Your stable id for this item; writing the same "
                                              "ref again updates it in place")
    session: str | None = Field(None, description="Turns: the conversation/session key")
    role: Literal["user", "assistant", "system", "tool"] | None = Field(None, description="Turns: who spoke")
    speaker: str | None = Field(None, description="Turns: the speaker's name, if known")
    at: str | None = Field(None, description="ISO 8601 time of the item; default: now")
    title: str | None = Field(None, description="Decisions: a short title")
    status: Literal["proposed", "accepted", "rejected", "superseded"] | None = Field(
        None, description="Decisions: status (default accepted)")
    supersedes: str | None = Field(None, description="Decisions: ref or id of the earlier "
                                                     "decision this one replaces")
    path: str | None = Field(None, description="Notes: the file path, relative to the project root")


class StoredItem(BaseModel):
    ref: str | None
    ids: list[int]
    outcome: Literal["stored", "updated", "unchanged"]


class RememberResult(BaseModel):
    project: str
    items: list[StoredItem]


class SlateItemOut(BaseModel):
    id: int
    ref: str | None
    kind: str
    session: str | None
    role: str | None
    at: str
    status: str | None
    path: str | None
    tokens: int
    rank: int | None = Field(description="Final rank; null for a successor decision pulled in "
                                         "with the decision it supersedes")


class SlateResult(BaseModel):
    slate_id: str
    project: str
    context: str = Field(description="The rendered slate to read")
    items: list[SlateItemOut]
    tokens_used: int
    budget_tokens: int


class Explanation(BaseModel):
    slate_id: str
    project: str
    query: str
    budget: int
    as_of: str | None
    ranker: str
    channels: list[str]
    pool_size: int
    tokens: dict[str, int]
    units_in_project: int
    out_of_scope_units: int = Field(description="Units in other projects, never read")
    excluded_as_of: int
    candidates: list[dict[str, Any]]
    diagnosis: list[dict[str, Any]] | None = None
    notes: list[str] = Field(default_factory=list)


class ForgetResult(BaseModel):
    project: str
    removed_ids: list[int]


def _core(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Map the core's typed errors to what the model should see."""
    try:
        return fn(*args, **kwargs)
    except InputError as exc:
        raise ToolError(str(exc)) from exc
    except StoreError as exc:
        log.error("store error: %s", exc)
        raise MCPError(-32603, f"memory store unavailable: {exc}") from exc


def slate_result(slate: Slate) -> SlateResult:
    items = [SlateItemOut(id=it.unit.id, ref=it.unit.ref, kind=it.unit.kind, session=it.unit.session,
                          role=it.unit.role, at=it.unit.at.isoformat(), status=it.status,
                          path=it.unit.path, tokens=it.tokens, rank=it.rank) for it in slate.items]
    return SlateResult(slate_id=slate.slate_id, project=slate.project, context=slate.context,
                       items=items, tokens_used=slate.tokens_used, budget_tokens=slate.budget)


def stored(project: str, results: list[WriteResult]) -> RememberResult:
    return RememberResult(project=project, items=[
        StoredItem(ref=r.ref, ids=list(r.ids), outcome=r.outcome) for r in results])


def create_server(settings: Settings) -> MCPServer:
    shared = shared_memory(settings)

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[SharedMemory]:
        await anyio.to_thread.run_sync(shared.start)
        log.info("memory store in %s (%s); %s", settings.home,
                 "this process owns it" if shared.is_owner else "another process owns it",
                 "access by bearer token" if settings.http else
                 f"project {settings.project}; allowed {','.join(sorted(settings.allowed))}")
        try:
            async with background_sources(settings, shared):  # watched notes, captured sessions
                yield shared
        finally:
            shared.close()

    auth: dict[str, Any] = {}
    if settings.http:  # the SDK's bearer middleware answers 401 before any tool runs
        auth = {"token_verifier": StoreTokenVerifier(shared), "auth": auth_settings()}
    server = MCPServer("agentmemrec", instructions=INSTRUCTIONS, lifespan=lifespan, **auth)

    def memory_of(ctx: Context) -> SharedMemory:
        return ctx.request_context.lifespan_context

    def access_of(ctx: Context) -> Access:
        if not settings.http:
            return settings.access
        access = principal_access(ctx)
        if access is None:  # unreachable behind the bearer middleware; refuse all the same
            raise MCPError(-32001, "this request carries no accepted bearer token")
        return access

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False,
                                             idempotentHint=True))
    def remember(items: list[MemoryItem], ctx: Context, project: str | None = None) -> RememberResult:
        """Store up to 1,000 items (conversation turns, decisions, file notes) in project memory.

        Use it for what a later task should know: a user's request or preference, a decision and
        why (record a replacement with `supersedes` naming the old decision's ref), notes about a
        file. The batch is all or nothing. Items with the same `ref` update in place; identical
        content is stored once. What looks like a credential (API keys, tokens, passwords,
        private keys) is stored as a `[REDACTED:<kind>]` marker. `project` defaults to the
        server's project (over HTTP, to the first project of your token)."""
        name = _core(access_of(ctx).resolve, project)
        raw = [it.model_dump(exclude_none=True) for it in items]
        return stored(name, _core(memory_of(ctx).remember, name, raw))

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=False))
    def recall_slate(query: str, ctx: Context, project: str | None = None, budget_tokens: int = 2700,
                     as_of: str | None = None) -> SlateResult:
        """Return a token-budgeted slate of stored evidence relevant to `query`.

        Call it before working on a task that earlier conversations, decisions or notes may
        inform. The `context` field is the slate to read: decisions show their status (a
        superseded one names its successor; proposed ones are not confirmed), turns are grouped by
        session. `budget_tokens` (200-200000, default 2700) caps the slate's size including its
        headers. `as_of` (ISO 8601) ignores what was recorded after that time."""
        name = _core(access_of(ctx).resolve, project)
        return slate_result(_core(memory_of(ctx).recall, name, query, budget_tokens, as_of))

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True))
    def explain_selection(slate_id: str, ctx: Context, refs: list[str] | None = None) -> Explanation:
        """Explain how a slate was chosen: every pool candidate with its channel ranks and scores,
        its final rank and what happened to it (in slate, skipped over budget, left out as a
        superseded decision without its successor), plus the token accounting.

        Pass `refs` (refs or ids of facts you expected) to learn where each was lost: never
        stored, not eligible (after as_of), never reached the pool, lost in ranking, or lost to
        the budget."""
        allowed = access_of(ctx).allowed
        return Explanation(**_core(memory_of(ctx).explain, slate_id, allowed, refs or ()))

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True,
                                             idempotentHint=False))
    def forget(refs: list[str], ctx: Context, project: str | None = None) -> ForgetResult:
        """Permanently remove units by ref (all chunks of a note) or id ('#42'). They never appear
        in a later slate or explanation. Unknown refs fail the whole call and remove nothing."""
        name = _core(access_of(ctx).resolve, project)
        return ForgetResult(project=name, removed_ids=_core(memory_of(ctx).forget, name, refs))

    return server
