"""Bearer tokens on the HTTP transport, through the SDK's own auth hooks, and the Host and Origin
checks every route gets (`OriginCheck`).

The SDK's bearer middleware asks `StoreTokenVerifier` about each request's token and answers 401
itself when there is none or it is unknown, so no tool runs for such a request. An accepted
token's principal and projects ride on the request into the tool, where `principal_access`
turns them into the `Access` every call is checked against.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.authentication import AuthenticationError
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from agentmemrec.indexing.errors import StoreError
from agentmemrec.indexing.store.principals import Principal, hash_secret
from agentmemrec.server.owner import SharedMemory
from agentmemrec.server.settings import Access

log = logging.getLogger("agentmemrec.auth")
ACCEPTED_KEPT = 1000  # tokens remembered as accepted, for an outage of the store
HOOKS = "/hooks/"  # where the client's hooks POST their events (server/hook_http.py)


def auth_settings() -> AuthSettings:
    # The SDK wants an issuer even for a server that issues no tokens over OAuth; it serves no
    # OAuth routes without a provider or a resource_server_url, so this URL is never published.
    return AuthSettings(issuer_url="http://127.0.0.1", resource_server_url=None)


class StoreTokenVerifier:
    """The SDK's `TokenVerifier` over the store's token table (which keeps only hashes), read
    for every request, so a revoked token is refused at once by every process on the store.

    While the store cannot be read, a token this process accepted before is still accepted, so
    its calls reach the tools and get their clear "store unavailable" error instead of a bare
    401: nothing can be read or written meanwhile, and revoking a token needs the store too. Any
    other token raises `TokenUncheckable`, which `store_unavailable` answers with 503: a 401 would
    tell its holder that the token is wrong."""

    def __init__(self, memory: SharedMemory) -> None:
        self.memory = memory
        self._accepted: OrderedDict[str, AccessToken] = OrderedDict()  # the most recent, by digest

    async def verify_token(self, token: str) -> AccessToken | None:
        digest = hash_secret(token)
        try:
            principal: Principal | None = await anyio.to_thread.run_sync(
                self.memory.call, "tokens.principal", digest)
        except StoreError as exc:  # fail closed, but for tokens known good: see the class
            log.error("cannot check a bearer token: %s", exc)
            if digest in self._accepted:
                return self._accepted[digest]
            # the details (the store's path or host, the database's error) are for the log only:
            # whoever sent this request may hold no token at all
            raise TokenUncheckable("the memory store cannot be reached to check this token; "
                                   "try again shortly") from exc
        if principal is None:
            self._accepted.pop(digest, None)
            log.warning("refused a request with an unknown or revoked bearer token")
            return None
        access = AccessToken(token=digest, client_id=principal.name, scopes=[],
                             claims={"projects": list(principal.projects)})
        self._accepted[digest] = access
        self._accepted.move_to_end(digest)
        if len(self._accepted) > ACCEPTED_KEPT:
            self._accepted.popitem(last=False)
        return access


async def warn_without_tokens(memory: SharedMemory) -> None:
    """At startup: a store without tokens refuses every request with 401, silently otherwise."""
    try:
        tokens = await anyio.to_thread.run_sync(memory.call, "tokens.list")
    except StoreError:
        return  # the store's own error is logged where a request meets it
    if not tokens:
        log.warning("this store holds no bearer tokens, so every request gets 401; add one with "
                    "`agentmemrec tokens add NAME --projects P` (it prints the secret to send)")


class TokenUncheckable(AuthenticationError):
    """A token this process has not accepted before, while the store cannot be read."""


def store_unavailable(conn: HTTPConnection, exc: AuthenticationError) -> Response:
    """The bearer middleware's answer to a token that could not be checked: 503, try again. The
    middleware covers the hook routes too, where it is an empty 200 (nothing added to the
    prompt, which goes on), as every other failure of a hook is."""
    if isinstance(exc, TokenUncheckable) and conn.url.path.startswith(HOOKS):
        log.warning("hook over HTTP answered nothing: %s", exc)
        return Response(status_code=200)
    status = 503 if isinstance(exc, TokenUncheckable) else 400
    return JSONResponse({"error": "store_unavailable" if status == 503 else "invalid_request",
                         "error_description": str(exc)}, status_code=status,
                        headers={"Retry-After": "5"} if status == 503 else None)


def principal_access(ctx: Context) -> Access | None:
    """The access of the token this HTTP request was accepted with; None without one."""
    request = ctx.request_context.request
    user = request.scope.get("user") if request is not None else None
    if not isinstance(user, AuthenticatedUser):
        return None
    token = user.access_token
    projects = list((token.claims or {}).get("projects") or [])
    if not projects:
        return None
    return Access(f"token {token.client_id!r}", projects[0], frozenset(projects),
                  f"is not open to token {token.client_id!r} (a token with more projects comes "
                  "from `agentmemrec tokens add NAME --projects A,B`)")


LOOPBACK = ("127.0.0.1", "localhost", "::1")
# The SDK's own DNS-rebinding defaults for a server on loopback (mcp/server/lowlevel/server.py)
ON_LOOPBACK = TransportSecuritySettings(
    allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
    allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])


class OriginCheck:
    """The Host and Origin checks for every route, before any other: the SDK makes them on `/mcp`
    only, and not at all off loopback. On loopback, the SDK's: a Host other than the loopback
    names gets 421 (DNS rebinding), an Origin other than a loopback page 403. Elsewhere the names
    a server is reached by cannot be listed, but no web page has reason to call it: a request with
    an Origin header (which browsers send and MCP clients and Claude Code's hooks do not) gets 403."""

    def __init__(self, app: ASGIApp, host: str) -> None:
        self.app = app
        self.check = TransportSecurityMiddleware(ON_LOOPBACK) if host in LOOPBACK else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            if self.check is not None:
                refused = await self.check.validate_request(request)
            elif origin := request.headers.get("origin"):
                log.warning("refused a request from a web page (Origin %s)", origin[:200])
                refused = Response("Invalid Origin header", status_code=403)
            else:
                refused = None
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)
