"""Claude Code's `http` hooks on `serve --http`: the event JSON is POSTed to
`/hooks/claude-code` and the answer is what `agentmemrec hook claude-code` would print, so no
process starts per prompt. The bearer token decides which projects a caller may get context from.
Claude Code runs no http hook on `SessionStart`: that event comes from a command hook that posts
it here (`curl`, docs/clients.md).
"""

from __future__ import annotations

import json
import logging

import anyio
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from agentmemrec.indexing.errors import InputError, StoreError
from agentmemrec.server.auth import StoreTokenVerifier, TokenUncheckable
from agentmemrec.server.hook_process import EVENT_FIELDS, hook_output
from agentmemrec.server.owner import SharedMemory
from agentmemrec.server.settings import Settings

log = logging.getLogger("agentmemrec.hooks")
PATH = "/hooks/claude-code"
NOT_AN_EVENT = "the body is not a JSON object: send the Claude Code hook event as JSON; nothing was done\n"


def claude_code_hook(shared: SharedMemory, settings: Settings):  # noqa: ANN201 - a Starlette endpoint
    """The endpoint. A request without an accepted token gets 401, a body over `--max-request-bytes`
    413, a body that is not a JSON object (nested past what the parser takes included) 400 (Claude
    Code sends none: to it any non-2xx is a non-blocking error); any other failure an empty 200
    (nothing added to the context), never an error that would break the prompt. A project the
    token does not reach is logged as a denial, as a tool call's is."""
    verifier = StoreTokenVerifier(shared)

    async def endpoint(request: Request) -> Response:
        scheme, _, secret = request.headers.get("authorization", "").partition(" ")
        try:
            token = await verifier.verify_token(secret) if scheme.lower() == "bearer" and secret else None
        except TokenUncheckable as exc:  # the store is down: nothing to add, and the prompt goes on
            log.warning("hook over HTTP answered nothing: %s", exc)
            return Response(status_code=200)
        if token is None:
            return Response(status_code=401)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > settings.max_request_bytes:
            return Response(status_code=413)
        body = bytearray()
        async for piece in request.stream():  # read no more than the limit, whatever was declared
            body += piece
            if len(body) > settings.max_request_bytes:
                return Response(status_code=413)
        query = request.query_params
        options = {"project": query.get("project"), "budget": query.get("budget"),
                   "digest_budget": query.get("digest_budget"),
                   "allowed": list((token.claims or {}).get("projects") or []),
                   "project_map": str(settings.project_map) if settings.project_map else None}
        try:
            event = json.loads(bytes(body))
        except (ValueError, RecursionError):
            event = None
        if not isinstance(event, dict):
            log.warning("hook over HTTP refused a body that is not a JSON object")
            return PlainTextResponse(NOT_AN_EVENT, status_code=400)
        event = {k: event[k] for k in EVENT_FIELDS if isinstance(event.get(k), str)}  # as the hook process sends
        try:
            reply = await anyio.to_thread.run_sync(shared.call, "hook", event, options)
        except (ValueError, InputError, StoreError) as exc:
            log.warning("hook over HTTP answered nothing: %s", exc)
            return Response(status_code=200)
        if not reply["context"]:
            if reply["project"] is not None and reply["project"] not in options["allowed"]:
                log.warning("denied: token %r asked for project %r over the hook; allowed: %s",
                            token.client_id, reply["project"], ",".join(options["allowed"]))
            else:
                log.info("hook over HTTP: nothing added for project %s (%s)", reply["project"], reply["why"])
            return Response(status_code=200)
        return Response(hook_output(str(event.get("hook_event_name")), reply["context"]),
                        media_type="application/json")
    return endpoint
