"""Stateless `serve --http` replicas on one PostgreSQL, as a team runs them: real server
processes, each with its own MCP client over HTTP, writing and recalling at once; a replica
SIGKILLed mid-run, the database restarted mid-run, a token revoked on one replica."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import AsyncExitStack, suppress
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pg_server
import psycopg
import pytest

from agentmemrec.indexing.store.postgres_store import fresh_schema
from agentmemrec.server.cli import main

from helpers import Server, call, http_server, mcp_client, turn

pytestmark = pytest.mark.anyio

BATCH = 25
BATCHES = 12  # 300 writes a client
FORBIDDEN = ("lock", "serializ", "deadlock", "duplicate key")  # what no client may ever see


def add_token(capsys: pytest.CaptureFixture[str], url: str, name: str = "team") -> str:
    assert main(["tokens", "add", name, "--projects", "alpha", "--store", url]) == 0
    return capsys.readouterr().out.strip()


def batch(client_no: int, n: int) -> list[dict[str, Any]]:
    return [turn(f"client {client_no} batch {n} item {k}: deploy the queue broker with retries {k * n}",
                 ref=f"c{client_no}-b{n}-i{k}", session=f"c{client_no}") for k in range(BATCH)]


def refs_stored(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT ref, count(*) FROM units WHERE project = 'alpha' GROUP BY ref").fetchall())


async def tool(client: Any, name: str, **args: Any) -> tuple[bool, str]:
    """(ok, error text) of one call, however the error arrived (a tool result or a protocol error)."""
    try:
        result = await client.call_tool(name, args)
    except Exception as exc:  # an MCPError from the server, or the replica gone
        return False, f"{type(exc).__name__}: {exc}"
    return (False, result.content[0].text) if result.is_error else (True, "")


async def replicas(stack: AsyncExitStack, tmp_path: Path, url: str, n: int) -> list[Server]:
    return [await stack.enter_async_context(http_server(tmp_path / f"replica-{i}", "--store", url))
            for i in range(n)]


async def test_three_replicas_keep_every_acknowledged_write_exactly_once_when_one_is_killed(
        pg_url, tmp_path, capsys):
    secret = add_token(capsys, pg_url)
    acked: list[list[int]] = [[], [], []]
    errors: list[list[str]] = [[], [], []]
    async with AsyncExitStack() as stack:
        servers = await replicas(stack, tmp_path, pg_url, 3)
        halfway = anyio.Event()

        async def work(i: int) -> None:
            try:
                async with mcp_client(servers[i].url, secret) as client:
                    for n in range(BATCHES):
                        ok, error = await tool(client, "remember", items=batch(i, n))
                        if not ok:
                            errors[i].append(error)
                            return
                        acked[i].append(n)
                        if i == 2 and n == BATCHES // 2:
                            halfway.set()
                        ok, error = await tool(client, "recall_slate", query=f"client {i} batch {n} queue broker")
                        if not ok:
                            errors[i].append(error)
                            return
            except Exception as exc:  # the client of the killed replica, closing its session
                errors[i].append(f"{type(exc).__name__}: {exc}")

        async def kill() -> None:
            await halfway.wait()
            os.kill(servers[2].pid, signal.SIGKILL)
        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                for i in range(3):
                    tg.start_soon(work, i)
                tg.start_soon(kill)
    stored = refs_stored(pg_url)
    assert acked[0] == acked[1] == list(range(BATCHES)) and not errors[0] and not errors[1]
    assert BATCHES // 2 <= len(acked[2]) < BATCHES and errors[2]  # killed mid-run, its client told so
    assert not any(word in e.lower() for e in errors[2] for word in FORBIDDEN)
    expected = {f"c{i}-b{n}-i{k}" for i in range(3) for n in acked[i] for k in range(BATCH)}
    assert all(stored.get(ref) == 1 for ref in expected)  # every acknowledged write, exactly once
    in_flight = {f"c2-b{len(acked[2])}-i{k}" for k in range(BATCH)}
    assert set(stored) - expected in (set(), in_flight)  # the batch in flight: whole or not at all


async def test_a_write_through_one_replica_reaches_a_recall_through_another_and_a_revoked_token_is_refused_by_all(
        pg_url, tmp_path, capsys):
    secret = add_token(capsys, pg_url)
    async with AsyncExitStack() as stack:
        a, b = await replicas(stack, tmp_path, pg_url, 2)
        async with mcp_client(a.url, secret) as writer, mcp_client(b.url, secret) as reader:
            await call(reader, "recall_slate", query="warm the reader's index")
            await call(writer, "remember", items=[turn("The payments service moved to Kafka.", ref="pay")])
            t0 = time.monotonic()
            with anyio.fail_after(1):  # visible through the other replica within a second
                while not any(i["ref"] == "pay" for i in
                              (await call(reader, "recall_slate", with_items=True, query="payments kafka"))["items"]):
                    pass
            assert time.monotonic() - t0 < 1
            assert main(["tokens", "revoke", "team", "--store", pg_url]) == 0
            with anyio.fail_after(1):  # every replica refuses it at once: tokens are read per request
                for client in (writer, reader):
                    while (await tool(client, "recall_slate", query="payments"))[0]:
                        pass
    # each names the store it serves (the URL, its password hidden), not the unused local home
    assert any("memory store in postgresql://" in line and pg_url.rsplit("@", 1)[-1] in line
               and "every process opens itself" in line for line in a.log), a.log


@pytest.fixture
def own_postgres() -> Any:
    """A PostgreSQL server of this test's own, since the test restarts it."""
    workdir = Path(tempfile.mkdtemp(prefix="agentmemrec-pg-"))
    server = pg_server.start(workdir)
    try:
        yield server
    finally:
        with suppress(subprocess.CalledProcessError):  # stopped already, by a failed test
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


async def test_a_database_restart_gives_clear_errors_writes_no_half_batch_and_replicas_recover(
        own_postgres, tmp_path, capsys):
    url = fresh_schema(own_postgres.url)
    secret = add_token(capsys, url)
    unseen = add_token(capsys, url, "newcomer")  # no replica checks it before the outage
    async with AsyncExitStack() as stack:
        servers = await replicas(stack, tmp_path, url, 2)
        clients = [await stack.enter_async_context(mcp_client(s.url, secret)) for s in servers]
        for n in range(3):
            for i, client in enumerate(clients):
                assert (await tool(client, "remember", items=batch(i, n)))[0]
        await anyio.to_thread.run_sync(own_postgres.stop)
        for i, client in enumerate(clients):  # the outage: tool errors the model reads, never a hang
            result = await client.call_tool("remember", {"items": batch(i, 3)})  # not a protocol error
            assert result.is_error and "PostgreSQL store" in result.content[0].text, result
            assert "retry" in result.content[0].text
            result = await client.call_tool("recall_slate", {"query": "queue broker"})
            assert result.is_error and "PostgreSQL store" in result.content[0].text, result
        async with httpx2.AsyncClient() as raw:  # a token that cannot be checked: try again, not "wrong token"
            reply = await raw.post(servers[0].url, json={}, headers={"Authorization": f"Bearer {unseen}"})
        assert reply.status_code == 503 and reply.headers["retry-after"] == "5", reply.text
        assert "cannot be reached to check this token" in reply.json()["error_description"]
        async with httpx2.AsyncClient() as raw:  # a hook gets nothing to add, and the prompt goes on
            reply = await raw.post(servers[0].url.replace("/mcp", "/hooks/claude-code?project=alpha"),
                                   headers={"Authorization": f"Bearer {unseen}"},
                                   json={"hook_event_name": "UserPromptSubmit", "prompt": "which broker now"})
        assert (reply.status_code, reply.text) == (200, ""), reply.text
        await anyio.to_thread.run_sync(own_postgres.start)
        with anyio.fail_after(30):  # the same processes answer again
            for i, client in enumerate(clients):
                while not (await tool(client, "recall_slate", query="queue broker"))[0]:
                    await anyio.sleep(0.1)
                for n in range(3, 5):  # the batch refused in the outage is repeated: idempotent
                    assert (await tool(client, "remember", items=batch(i, n)))[0]
    stored = refs_stored(url)
    assert all(n == 1 for n in stored.values())
    for i in range(2):
        for n in range(5):
            assert sum(f"c{i}-b{n}-i{k}" in stored for k in range(BATCH)) == BATCH
