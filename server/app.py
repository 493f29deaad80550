"""The MCP shell: typed tools that validate, call one core function and shape the result."""

from __future__ import annotations

import inspect
import logging
import os
import re
import signal
import sys
from contextlib import asynccontextmanager
from functools import partial
from typing import Annotated, Any, AsyncIterator, Callable, TypeVar

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import ValidationError
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware

from agentmemrec.indexing.errors import InputError, StoreError, StoreUnavailable
from agentmemrec.indexing.sources.sink import Ingested
from agentmemrec.ranking.slate import Slate
from agentmemrec.server import hook_http
from agentmemrec.server.abridged import brief, items_fit, json_result
from agentmemrec.server.auth import (
    OriginCheck,
    StoreTokenVerifier,
    auth_settings,
    principal_access,
    store_unavailable,
    warn_without_tokens,
)
from agentmemrec.server.clients import instructions
from agentmemrec.server.owner import SharedMemory, shared_memory
from agentmemrec.server.schema import (
    DEFAULT_BUDGET,
    DEFAULT_OTHERS,
    AsOf,
    Budget,
    ExpectedRefs,
    Explanation,
    ForgetRefs,
    ForgetResult,
    Items,
    Others,
    Project,
    Query,
    RememberResult,
    SlateId,
    SlateItemOut,
    SlateResult,
    StoredItem,
    WithItems,
    plain_errors,
)
from agentmemrec.server.settings import VERSION, Access, Settings
from agentmemrec.server.sources import background_sources
from agentmemrec.server.stdio_lines import Answering
from agentmemrec.server.views import add_views

log = logging.getLogger("agentmemrec")
T = TypeVar("T")


def _core(fn: Callable[..., T], *args: Any, refused: str = "", **kwargs: Any) -> T:
    """Map the core's typed errors to what the model should see; `refused` is added to an
    input error's message (what the refusal left unchanged)."""
    try:
        return fn(*args, **kwargs)
    except InputError as exc:
        raise ToolError(f"{exc}{refused}") from exc
    except StoreUnavailable as exc:  # an outage: the model reads it, and may say so or retry later
        log.error("store error: %s", exc)
        raise ToolError(f"memory store unavailable: {exc}") from exc
    except StoreError as exc:
        log.error("store error: %s", exc)
        raise MCPError(-32603, f"memory store unavailable: {exc}") from exc


class MemoryServer(MCPServer):
    """The SDK server, with arguments its schema refuses reported in plain words. An argument a
    tool does not take is refused too (the SDK would drop it: a misspelt `project` would write to
    the default project), and each tool's schema says so (`additionalProperties: false`)."""

    _taken: dict[str, set[str]] | None = None  # each tool's argument names, read at the first call

    async def list_tools(self) -> list[Any]:
        tools = await super().list_tools()
        return [t.model_copy(update={"input_schema": {**t.input_schema, "additionalProperties": False}})
                for t in tools]

    async def run_stdio_async(self) -> None:
        """The SDK's, but a request line whose JSON the SDK cannot read is answered, not dropped."""
        async with stdio_server() as (read_stream, write_stream):
            await self._lowlevel_server.run(Answering(read_stream, write_stream), write_stream,
                                            self._lowlevel_server.create_initialization_options())

    def streamable_http_app(self, **kwargs: Any) -> Any:
        """The SDK's app, whose bearer middleware answers a token the store could not check with
        503 (`store_unavailable`), not 401, behind the Host and Origin checks for every route."""
        app = super().streamable_http_app(**kwargs)
        for middleware in app.user_middleware:
            if middleware.cls is AuthenticationMiddleware:
                middleware.kwargs["on_error"] = store_unavailable
        app.user_middleware.insert(0, Middleware(OriginCheck, host=kwargs.get("host", "127.0.0.1")))
        return app

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if self._taken is None:  # every tool is registered before the server serves
            self._taken = {t.name: set(t.input_schema.get("properties", {})) for t in await super().list_tools()}
        taken = self._taken
        unknown = sorted(set(arguments or {}) - taken.get(name, set(arguments or {})))
        if unknown:
            raise ToolError(f"{name} refused: unknown argument(s) {unknown}; it takes "
                            f"{', '.join(sorted(taken[name]))}. Fix this and call again; nothing was changed.")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):  # the SDK's text carries pydantic's links
                raise ToolError(f"{name} refused: {plain_errors(exc.__cause__)}") from exc.__cause__
            raise


def tool(server: MCPServer, title: str, read_only: bool, destructive: bool = False,
         idempotent: bool = True) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Register a tool with its title, annotations and its docstring, dedented, as description."""
    def register(fn: Callable[..., T]) -> Callable[..., T]:
        annotations = ToolAnnotations(readOnlyHint=read_only, destructiveHint=destructive,
                                      idempotentHint=idempotent, openWorldHint=False)
        return server.tool(title=title, description=inspect.cleandoc(fn.__doc__ or ""),
                           annotations=annotations)(fn)
    return register


def slate_result(slate: Slate, with_items: bool = True) -> SlateResult:
    items = [SlateItemOut(id=it.unit.id, ref=it.unit.ref, kind=it.unit.kind, session=it.unit.session,
                          role=it.unit.role, at=it.unit.at.isoformat(), status=it.status,
                          path=it.unit.path, tokens=it.tokens, rank=it.rank) for it in slate.items] if with_items else None
    return SlateResult(slate_id=slate.slate_id, project=slate.project, context=slate.context,
                       items=items, tokens_used=slate.tokens_used, budget_tokens=slate.budget,
                       notes=list(slate.notes), evidence_strength=slate.evidence_strength)


def tool_result(result: SlateResult) -> CallToolResult:
    """The slate as its model reads it. Claude Code and VS Code hand the model
    `JSON.stringify(structuredContent)` and drop the text block, so what the structured result holds
    is what the budget must bound: `items` (about 57 tokens an item, more than the slate itself)
    comes only when asked for, and then must fit what a client takes whole."""
    if result.items is None:
        return json_result(result.model_dump(mode="json", exclude={"items"}))
    return json_result(items_fit(result.model_dump(mode="json")))


def stored(project: str, written: Ingested) -> RememberResult:
    return RememberResult(project=project, items=[
        StoredItem(ref=r.ref, ids=list(r.ids), outcome=r.outcome) for r in written.results],
        redacted=dict(sorted(written.redactions.items())))


@asynccontextmanager
async def until_signal(watch: bool) -> AsyncIterator[anyio.Event]:
    """Run the body until SIGINT or SIGTERM (when `watch`), which cancels it and sets the event.
    A second signal ends the process at once: closing may wait for an embedding batch."""
    stopped = anyio.Event()
    async with anyio.create_task_group() as tg:
        async def on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("%s: closing the memory store and exiting", signal.Signals(signum).name)
                    break
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL)
            stopped.set()
            tg.cancel_scope.cancel()
        if watch:
            tg.start_soon(on_signal)
        try:
            yield stopped
        finally:
            tg.cancel_scope.cancel()


def create_server(settings: Settings, exit_on_signal: bool = False) -> MCPServer:
    """The server. `exit_on_signal` (stdio): SIGINT or SIGTERM closes the store, which finishes the
    calls in flight first, and ends the process. The SDK's stdin reader is a thread blocked on a
    read that nothing interrupts, and the SDK waits for it, so the process could otherwise only
    end when the client closes stdin (and ^C printed a traceback but left it running)."""
    shared = shared_memory(settings)

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[SharedMemory]:
        async with until_signal(exit_on_signal) as stopped:
            try:  # a store that cannot be opened leaves the server up: every call says why
                await anyio.to_thread.run_sync(partial(shared.start, raise_errors=True))
                state = ("a PostgreSQL store every process opens itself" if settings.store else
                         "this process owns it" if shared.is_owner else "another process owns it")
            except StoreError as exc:
                log.error("%s", exc)
                state = "it cannot be opened: every call says why until it is fixed"
            where = re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", settings.store) if settings.store else settings.home
            log.info("memory store in %s (%s); %s", where, state, "access by bearer token" if settings.http else
                     f"project {settings.project}; allowed {','.join(sorted(settings.allowed))}")
            if settings.http:
                await warn_without_tokens(shared)
            try:
                async with background_sources(settings, shared):  # watched notes, captured sessions
                    yield shared
            finally:
                shared.close()
        if stopped.is_set():
            sys.stderr.flush()
            os._exit(0)

    auth: dict[str, Any] = {}
    if settings.http:  # the SDK's bearer middleware answers 401 before any tool runs
        auth = {"token_verifier": StoreTokenVerifier(shared), "auth": auth_settings()}
    server = MemoryServer("agentmemrec", title="AgentMemRec", version=VERSION,
                          instructions=instructions(
                              settings.capture_claude_code or settings.http, settings.capture_claude_code),
                          lifespan=lifespan, **auth)

    if settings.http:  # Claude Code's http hooks, checked against the same bearer tokens
        server.custom_route(hook_http.PATH, methods=["POST"])(hook_http.claude_code_hook(shared, settings))

    def memory_of(ctx: Context) -> SharedMemory:
        return ctx.request_context.lifespan_context

    def access_of(ctx: Context) -> Access:
        if not settings.http:
            return settings.access
        access = principal_access(ctx)
        if access is None:  # unreachable behind the bearer middleware; refuse all the same
            raise MCPError(-32001, "this request carries no accepted bearer token")
        return access

    # destructive: a ref written again replaces its text, and `supersedes` changes another
    # decision's status; idempotent: the same call again stores nothing more
    @tool(server, "Remember", read_only=False, destructive=True)
    def remember(items: Items, ctx: Context, project: Project = None) -> RememberResult:
        """Store up to 1,000 items (conversation turns, decisions, file notes) in project memory.

        Use it for what a later task should know: a user's request or preference, a decision and
        why (record a replacement with `supersedes` naming the old decision's ref), notes about a
        file. The batch is all or nothing. Items with the same `ref` update in place; identical
        content is stored once. What looks like a credential (API keys, tokens, passwords,
        private keys) is stored as a `[REDACTED:<kind>]` marker, and `redacted` counts them by kind."""
        name = _core(access_of(ctx).resolve, project)
        raw = [it.model_dump(exclude_none=True) for it in items]
        return stored(name, _core(memory_of(ctx).ingest, name, raw,
                                  refused=". Fix this and call again; nothing was stored."))

    @tool(server, "Recall a slate", read_only=True, idempotent=False)
    def recall_slate(query: Query, ctx: Context, project: Project = None,
                     budget_tokens: Budget = DEFAULT_BUDGET, as_of: AsOf = None,
                     with_items: WithItems = False) -> Annotated[CallToolResult, SlateResult]:
        """Return a token-budgeted slate of stored evidence relevant to `query`.

        Call it before working on a task that earlier conversations, decisions or notes may
        inform. The `context` field is the slate to read: decisions show their status in force (a
        superseded one names its successor; proposed ones are not confirmed), turns are grouped by
        session. `evidence_strength` (0-1) says how likely it is that a confirmed answer is stored:
        when it is low, tell the user nothing confirmed is remembered instead of guessing from the
        slate; a REJECTED or proposed decision the slate shows on the question is still an answer
        to report as what it is ("X was rejected", "X was only proposed"). `notes` says what
        limited the slate (units not yet embedded, an empty project)."""
        name = _core(access_of(ctx).resolve, project)
        found = _core(memory_of(ctx).recall, name, query, budget_tokens, as_of)
        slate = slate_result(found, with_items)
        if not found.items and not _core(memory_of(ctx).projects).get(name):
            slate.notes.append(f"projects you may use: {_listing(memory_of(ctx), access_of(ctx))}")
        return _core(tool_result, slate)

    @tool(server, "Explain a slate", read_only=True)
    def explain_selection(slate_id: SlateId, ctx: Context, refs: ExpectedRefs = None,
                          candidates: Others = DEFAULT_OTHERS) -> Annotated[CallToolResult, Explanation]:
        """Explain how a slate was chosen: the pipeline that ran, the token accounting, and the
        slate's items with the best-ranked candidates it left out, each with its rank in each
        channel, its score, status in force, final rank, what happened to it (in slate, skipped
        over budget, left out as a superseded decision without its successor) and the features
        that most raised its score.

        Pass `refs` (refs or ids of facts you expected) to learn where each was lost: never
        stored, not eligible (after as_of), never reached the pool, lost in ranking, or lost to
        the budget. Pass `candidates` to list more of the candidates the slate left out."""
        allowed = access_of(ctx).allowed
        return json_result(brief(_core(memory_of(ctx).explain, slate_id, allowed, refs or (), candidates)))

    @tool(server, "Forget", read_only=False, destructive=True)  # again: refused, nothing more removed
    def forget(refs: ForgetRefs, ctx: Context, project: Project = None) -> ForgetResult:
        """Permanently remove units by ref (all chunks of a note) or id ('#42'). They never appear
        in a later slate or explanation. Unknown refs fail the whole call and remove nothing."""
        name = _core(access_of(ctx).resolve, project)
        return ForgetResult(project=name, removed_ids=_core(memory_of(ctx).forget, name, refs,
                                                            refused="; nothing was removed"))

    add_views(server, tool, _core, memory_of, access_of)
    return server


def _listing(memory: SharedMemory, access: Access) -> str:
    """The projects a caller may use, with their unit counts (never another caller's projects)."""
    counts = _core(memory.projects)
    return ", ".join(f"{p} ({counts.get(p, 0)} units)" for p in sorted(access.allowed))
