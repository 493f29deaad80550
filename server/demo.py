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

from agentmemrec.indexing.errors import InputError
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
    return [json.loads(line) for line in text.split("\n") if line.strip()]


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
            emit(f"{project}: {remembered([i['outcome'] for i in out['items']])}")
        await _embedded(client)
        for project, query in QUERIES:
            slate = _check(await client.call_tool("recall_slate", {"query": query, "project": project,
                                                                   "budget_tokens": 400, "with_items": True}))
            why = _check(await client.call_tool("explain_selection", {"slate_id": slate["slate_id"]}))
            emit(f"\n=== {project}: {query}\n")
            emit(slate["context"])
            emit(f"--- {len(slate['items'])} items, {slate['tokens_used']}/{slate['budget_tokens']} "
                  f"tokens; {len(why['candidates']) + why['candidates_left_out']} candidates in the pool, "
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
        chans = " ".join(f"{n}#{rank}" for n, rank in c["channels"].items()) or "-"
        cross = c.get("cross_encoder")
        emit(f"  rank {c['rank']:>3}  #{c['id']:<4} {c['kind']:<8} {chans:<16} "
             f"{'cross ' + format(cross, '6.2f') if cross is not None else '':<12} "
             f"{c['outcome']}{' (lost to ' + c['lost_to'] + ')' if c.get('lost_to') else ''}")


def remembered(outcomes: list[str]) -> str:
    """What a remember call did: a second demo in the same home stores nothing, and says so."""
    counts = {o: outcomes.count(o) for o in ("stored", "updated", "unchanged")}
    return (f"{counts['stored']} items stored, {counts['updated']} updated, {counts['unchanged']} already there"
            f" (of {len(outcomes)})")


def demo_home(home: Path) -> Path:
    """`--home`, made if missing, or one clear line saying why it cannot be used."""
    home = Path(home).expanduser()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--home {home}: cannot create it ({exc.strerror}); choose a folder you can write") from None
    if not os.access(home, os.W_OK | os.X_OK):
        raise InputError(f"--home {home}: cannot write there (permission denied); choose a folder you can write")
    return home


def link_models(home: Path) -> None:
    """A demo home without models of its own uses those installed in the data home
    (`agentmemrec models install --default`), as the default temporary one does."""
    installed, own = default_home() / "models", home / "models"
    if installed.is_dir() and not own.exists() and not own.is_symlink() and installed.resolve() != own.resolve():
        own.symlink_to(installed.resolve(), target_is_directory=True)


def run_demo(home: Path | None) -> int:
    """In `home` (kept), or in a fresh temporary store; either uses the models installed in the
    data home unless `home` has its own."""
    if home is not None:
        home = demo_home(home)
        link_models(home)
        anyio.run(_run, home)
        return 0
    with tempfile.TemporaryDirectory(prefix="agentmemrec-demo-") as tmp:
        link_models(Path(tmp))
        anyio.run(_run, Path(tmp))
    return 0
