"""Helpers shared by the tests: calling tools through a real MCP client."""

from __future__ import annotations

from typing import Any

from mcp import Client


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def call_error(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool} should have failed: {result.structured_content}"
    return result.content[0].text


def turn(text: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "turn", "text": text, "role": "user", **extra}
