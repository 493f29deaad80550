"""`agentmemrec demo`: a real server process, a real MCP client, a small coding history."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from agentmemrec.server.console import emit
from agentmemrec.server.owner_socket import HOME_ENV

PROJECTS = ("payments-api", "web-frontend")
QUERIES = (
    ("payments-api", "Do payment events still go to the RabbitMQ exchange, and how do we replay them?"),
    ("payments-api", "How long do we keep idempotency keys for POST /v1/charges?"),
    ("payments-api", "Should the frontend get a GraphQL API for payments?"),
)


def server_params(home: Path, project: str, allow: str = "") -> StdioServerParameters:
    args = ["-m", "agentmemrec.server.cli", "serve", "--project", project]
    if allow:
        args += ["--allow", allow]
    return StdioServerParameters(command=sys.executable, args=args,
                                 env={**os.environ, HOME_ENV: str(home)})


def demo_items(project: str) -> list[dict[str, Any]]:
    text = resources.files("agentmemrec.server").joinpath(f"demo/{project}.jsonl").read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _check(result: Any) -> dict[str, Any]:
    if result.is_error:
        raise RuntimeError(result.content[0].text)
    return result.structured_content


async def _run(home: Path) -> None:
    params = server_params(home, PROJECTS[0], allow=",".join(PROJECTS[1:]))
    async with Client(params) as client:
        for project in PROJECTS:
            out = _check(await client.call_tool("remember", {"items": demo_items(project),
                                                             "project": project}))
            emit(f"remembered {len(out['items'])} items in {project}")
        for project, query in QUERIES:
            slate = _check(await client.call_tool("recall_slate", {"query": query, "project": project,
                                                                   "budget_tokens": 400}))
            why = _check(await client.call_tool("explain_selection", {"slate_id": slate["slate_id"]}))
            emit(f"\n=== {project}: {query}\n")
            emit(slate["context"])
            emit(f"--- {len(slate['items'])} items, {slate['tokens_used']}/{slate['budget_tokens']} "
                  f"tokens; {len(why['candidates'])} candidates in the pool, "
                  f"{why['out_of_scope_units']} units of other projects never read")
            for c in why["candidates"][:8]:
                chans = " ".join(f"{n}#{h['rank']}" for n, h in c["channels"].items()) or "-"
                emit(f"  rank {c['rank']:>3}  #{c['id']:<4} {c['kind']:<8} {chans:<10} "
                      f"{c['outcome']}{' (lost to ' + c['lost_to'] + ')' if c['lost_to'] else ''}")


def run_demo(home: Path | None) -> int:
    if home is not None:
        anyio.run(_run, Path(home))
        return 0
    with tempfile.TemporaryDirectory(prefix="agentmemrec-demo-") as tmp:
        anyio.run(_run, Path(tmp))
    return 0
