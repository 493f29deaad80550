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
from agentmemrec.server.owner_socket import HOME_ENV, default_home

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
        await _embedded(client)
        for project, query in QUERIES:
            slate = _check(await client.call_tool("recall_slate", {"query": query, "project": project,
                                                                   "budget_tokens": 400, "with_items": True}))
            why = _check(await client.call_tool("explain_selection", {"slate_id": slate["slate_id"]}))
            emit(f"\n=== {project}: {query}\n")
            emit(slate["context"])
            emit(f"--- {len(slate['items'])} items, {slate['tokens_used']}/{slate['budget_tokens']} "
                  f"tokens; {len(why['candidates'])} candidates in the pool, "
                  f"{why['out_of_scope_units']} units of other projects never read")
            _pipeline(why)


async def _embedded(client: Client, wait_s: float = 60) -> None:
    """Wait (bounded) for the server's background embedder, so the slates show the dense channel."""
    with anyio.move_on_after(wait_s):
        for project in PROJECTS:
            while any("not yet embedded" in n for n in _check(await client.call_tool(
                    "recall_slate", {"query": "warm up", "project": project, "budget_tokens": 200}))["notes"]):
                await anyio.sleep(0.5)


def _pipeline(why: dict[str, Any]) -> None:
    """The pipeline that ran: channels, models, ranker, and for the top candidates their channel
    ranks, cross-encoder logit (where it scored them) and outcome."""
    m = why["models"]
    emit(f"    channels {' + '.join(why['channels'])}; embedder {m['embedder'] or 'none'}; cross-encoder "
         f"{m['cross_encoder'] or 'none'}" + (f" (top {m['cross_encoder_depth']})" if m["cross_encoder"] else "")
         + f"; ranker {m['ranker']}")
    for note in why["notes"]:
        emit(f"    note: {note}")
    for c in why["candidates"][:8]:
        chans = " ".join(f"{n}#{h['rank']}" for n, h in c["channels"].items()) or "-"
        cross = (c.get("features") or {}).get("cross_encoder")
        emit(f"  rank {c['rank']:>3}  #{c['id']:<4} {c['kind']:<8} {chans:<16} "
             f"{'cross ' + format(cross, '6.2f') if cross is not None else '':<12} "
             f"{c['outcome']}{' (lost to ' + c['lost_to'] + ')' if c['lost_to'] else ''}")


def run_demo(home: Path | None) -> int:
    """In `home`, or in a fresh temporary store that uses the models installed in the data home
    (`agentmemrec models install --default`)."""
    if home is not None:
        anyio.run(_run, Path(home))
        return 0
    with tempfile.TemporaryDirectory(prefix="agentmemrec-demo-") as tmp:
        installed = default_home() / "models"
        if installed.is_dir():
            (Path(tmp) / "models").symlink_to(installed, target_is_directory=True)
        anyio.run(_run, Path(tmp))
    return 0
