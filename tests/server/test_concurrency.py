"""Many clients, one store: four real `agentmemrec serve` processes on one AGENTMEMREC_HOME, each
behind its own stdio MCP client, writing and reading at once; then the owner is SIGKILLed."""

from __future__ import annotations

import os
import signal
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import duckdb
import pytest
from mcp import Client

from agentmemrec.server.demo import server_params

from helpers import call, turn

pytestmark = pytest.mark.anyio

PROCESSES, ITEMS, BATCH = 4, 500, 50  # phase 1: 4 x 500 = 2,000 items in batches of 50
LATER, LATER_BATCH = 100, 10  # phase 2, during which the owner is killed: 3 x 100 more
OWNER_LATER = 2000  # the owner's client writes on until its process is killed


def text_of(lane: int, i: int) -> str:
    # Each item carries a token no other item has, so a recall for it must find exactly it.
    return f"Lane {lane} item {i} is marked zq{lane}x{i} for the recall check."


def batch(lane: int, start: int, size: int) -> list[dict]:
    return [turn(text_of(lane, i), ref=f"l{lane}-{i}", session=f"lane-{lane}") for i in range(start, start + size)]


async def write_lane(client: Client, lane: int, start: int, count: int, size: int,
                     acked: set[str], progress: anyio.Event | None = None) -> None:
    """Remember `count` items in batches, recalling the newest one after each batch."""
    for first in range(start, start + count, size):
        out = await call(client, "remember", items=batch(lane, first, size))
        acked.update(i["ref"] for i in out["items"])  # acknowledged: the server said so
        slate = await call(client, "recall_slate", with_items=True, query=f"zq{lane}x{first + size - 1}", budget_tokens=300)
        assert f"l{lane}-{first + size - 1}" in [i["ref"] for i in slate["items"]]
        if progress is not None:
            progress.set()


def owner_pid(home: Path) -> int:
    return int((home / "owner.lock").read_text().strip())


def stored_rows(home: Path) -> list[tuple[str, str]]:
    con = duckdb.connect(str(home / "memory.duckdb"), read_only=True)
    rows = con.execute("SELECT ref, text FROM units").fetchall()
    con.close()
    return rows


async def test_four_servers_share_one_store_and_survive_the_owner_being_killed(tmp_path):
    home = tmp_path / "home"
    acked: set[str] = set()
    async with AsyncExitStack() as stack:
        # The first server starts alone, so it owns the store; the other three forward to it.
        clients = [await stack.enter_async_context(Client(server_params(home, "shared")))]
        first_owner = owner_pid(home)
        for _ in range(PROCESSES - 1):
            clients.append(await stack.enter_async_context(Client(server_params(home, "shared"))))
        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                for lane, client in enumerate(clients):
                    tg.start_soon(write_lane, client, lane, 0, ITEMS, BATCH, acked)
        assert len(acked) == PROCESSES * ITEMS
        why = await call(clients[1], "explain_selection",
                         slate_id=(await call(clients[1], "recall_slate", query="zq0x0"))["slate_id"])
        assert why["units_in_project"] == PROCESSES * ITEMS
        for lane in range(PROCESSES):  # every lane's items can be found from another process
            for i in range(0, ITEMS, 50):
                slate = await call(clients[(lane + 1) % PROCESSES], "recall_slate", with_items=True, query=f"zq{lane}x{i}",
                                   budget_tokens=300)
                assert f"l{lane}-{i}" in [it["ref"] for it in slate["items"]]

        # Phase 2: all four write again; once the followers are under way, the owner is killed.
        survivors_moving = [anyio.Event() for _ in range(PROCESSES)]
        killed = anyio.Event()

        async def owner_lane(client: Client) -> None:
            try:
                await write_lane(client, 0, ITEMS, OWNER_LATER, LATER_BATCH, acked)
            except Exception:
                assert killed.is_set(), "the owner's own client failed before the owner was killed"
            else:
                raise AssertionError("the owner's lane should have been cut short by the kill")

        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                tg.start_soon(owner_lane, clients[0])
                for lane in range(1, PROCESSES):
                    tg.start_soon(write_lane, clients[lane], lane, ITEMS, LATER, LATER_BATCH, acked,
                                  survivors_moving[lane])
                for lane in range(1, PROCESSES):
                    await survivors_moving[lane].wait()
                os.kill(first_owner, signal.SIGKILL)
                killed.set()
        new_owner = owner_pid(home)
        assert new_owner != first_owner
        after = await call(clients[2], "recall_slate", with_items=True, query="zq3x550")  # reads go on after the kill
        assert "l3-550" in [i["ref"] for i in after["items"]]
        clients.pop(0)  # its process is gone; the SDK client only needs to be left
    rows = stored_rows(home)
    texts: dict[str, list[str]] = {}
    for ref, text in rows:
        texts.setdefault(ref, []).append(text)
    expected = {f"l{lane}-{i}": [text_of(lane, i)] for lane in range(PROCESSES) for i in range(ITEMS + OWNER_LATER)}
    # every acknowledged item is there once, with exactly the text written for it
    assert {ref: texts.get(ref) for ref in acked} == {ref: expected[ref] for ref in acked}
    # and so is every survivor's item; what was never acknowledged can only be from the owner's
    # lane, written before its process died and its reply was lost
    assert {f"l{lane}-{i}" for lane in range(1, PROCESSES) for i in range(ITEMS + LATER)} <= acked
    assert all(ref.startswith("l0-") and texts[ref] == expected[ref] for ref in set(texts) - acked)
