"""The stdio transport's read side, answering a request whose JSON the SDK cannot read.

The SDK parses each stdin line with pydantic, which refuses a lone surrogate escape (`"\\ud800"`,
what JavaScript's `JSON.stringify` writes for a string cut inside a character), and drops the line
with a debug log: the client then waits for its answer forever. Python's `json` reads such a line,
so its id is known and the request is answered: refused, nothing changed (over HTTP the SDK
answers it with a parse error already).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import mcp.types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

log = logging.getLogger("agentmemrec")

REFUSAL = ("the request holds text that is not valid Unicode (a lone surrogate escape such as \\ud800, "
           "left by a string cut inside a character); send each character whole or leave it out, and call "
           "again; nothing was changed")


def refusal(item: SessionMessage | Exception) -> types.JSONRPCMessage | None:
    """The answer to a request line the SDK could not read, or None (a message, or no id to answer)."""
    if not isinstance(item, ValidationError) or item.errors()[0]["type"] != "json_invalid":
        return None
    line, why = item.errors()[0]["input"], item.errors()[0]["msg"]
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):  # not JSON even to Python: no id to answer
        request = None
    if not isinstance(request, dict) or not isinstance(request.get("id"), (int, str)) or "method" not in request:
        log.warning("a stdin line is not a JSON-RPC request; it was not answered: %.80r", line)
        return None
    try:
        json.dumps(request, ensure_ascii=False).encode("utf-8")
        message = f"the request's JSON could not be read ({why}); fix it and call again; nothing was changed"
    except UnicodeEncodeError:
        message = REFUSAL
    if request["method"] == "tools/call":  # what a tool's refusal (ToolError) looks like to the client
        result = types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)
        return types.JSONRPCResponse(jsonrpc="2.0", id=request["id"],
                                     result=result.model_dump(by_alias=True, exclude_none=True))
    return types.JSONRPCError(jsonrpc="2.0", id=request["id"],
                              error=types.ErrorData(code=types.INVALID_PARAMS, message=message))


class Answering:
    """`read_stream`, less the requests `refusal` answers, which go to `write_stream`."""

    def __init__(self, read_stream: Any, write_stream: Any) -> None:
        self.inner, self.write = read_stream, write_stream

    def __getattr__(self, name: str) -> Any:  # last_context, for the sender's context
        return getattr(self.inner, name)

    def __aiter__(self) -> "Answering":
        return self

    async def __anext__(self) -> Any:
        while (answer := refusal(item := await self.inner.__anext__())) is not None:
            await self.write.send(SessionMessage(answer))
        return item

    async def receive(self) -> Any:
        return await self.__anext__()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> "Answering":
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)
