"""`explain_selection` answers within what a client takes as a tool result; the command prints it all."""

from __future__ import annotations

import json
import random
import uuid

import anyio
import pytest

from agentmemrec.indexing.tokens import count_tokens
from agentmemrec.server.cli import main

from helpers import call, turn

pytestmark = pytest.mark.anyio

WORDS = ("kafka rabbitmq payment refund ledger invoice retry idempotency webhook stripe currency schema "
         "migration postgres index cache redis queue consumer producer partition offset lag timeout").split()


async def test_an_explanation_of_a_large_pool_fits_a_tool_result_and_still_names_every_refs_stage(client):
    """Claude Code refuses a tool result over 25,000 tokens; the whole pool with every feature was
    about 190,000 at 1,000 units. Refs and sessions like captured ones (uuids) make each candidate long."""
    rng = random.Random(1)
    refs = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(1000)]
    await call(client, "remember", items=[
        turn(" ".join(rng.choice(WORDS) for _ in range(40)), ref=ref, session=f"session-{i // 20}-{ref}")
        for i, ref in enumerate(refs)])
    slate = await call(client, "recall_slate", with_items=True, budget_tokens=20_000,
                       query="kafka consumer lag and retries for payment webhooks")
    in_slate = slate["items"][0]["ref"]
    lost = next(r for r in reversed(refs) if r not in {i["ref"] for i in slate["items"]})
    result = await client.call_tool("explain_selection", {"slate_id": slate["slate_id"],
                                                          "refs": [in_slate, lost, "never-stored"]})
    [text] = result.content
    why = result.structured_content
    assert text.text == json.dumps(why, separators=(",", ":"), ensure_ascii=False)  # compact, as recall_slate
    assert count_tokens(text.text) < 20_000
    assert why["pool_size"] == 512 and why["candidates_left_out"] > 300
    assert {d["ref"]: d["stage"] for d in why["diagnosis"]} == {
        in_slate: "in_slate", lost: why["diagnosis"][1]["stage"], "never-stored": "never_stored"}
    assert why["diagnosis"][1]["stage"] in ("lost_to_ranking", "lost_to_budget", "never_in_pool")
    listed = {c["ref"] for c in why["candidates"]}
    assert in_slate in listed and (lost in listed) == (why["diagnosis"][1]["stage"] != "never_in_pool")
    first = why["candidates"][0]
    assert first["rank"] == 1 and "features" not in first and {"score", "outcome", "channels"} <= set(first)
    more = await call(client, "explain_selection", slate_id=slate["slate_id"], candidates=0)
    assert more["candidates_left_out"] >= why["candidates_left_out"]


async def test_a_small_slate_lists_its_items_and_the_best_ranked_others(client, capsys):
    await call(client, "remember", items=[turn(f"The deploy step {i} runs lint and tests for service {i}.",
                                               ref=f"f{i}") for i in range(60)])
    slate = await call(client, "recall_slate", with_items=True, budget_tokens=200, query="deploy lint tests")
    why = await call(client, "explain_selection", slate_id=slate["slate_id"])
    outcomes = [c["outcome"] for c in why["candidates"]]
    assert outcomes.count("in_slate") == len(slate["items"]) and outcomes.count("skipped_over_budget") == 20
    assert [c["rank"] for c in why["candidates"]] == sorted(c["rank"] for c in why["candidates"])
    assert len(why["candidates"]) + why["candidates_left_out"] == 60  # every unit is in the pool
    assert len((await call(client, "explain_selection", slate_id=slate["slate_id"],
                           candidates=5))["candidates"]) == len(slate["items"]) + 5
    # the command on the machine that holds the store prints every candidate with every feature
    assert await anyio.to_thread.run_sync(main, ["explain", slate["slate_id"]]) == 0
    full = json.loads(capsys.readouterr().out)
    assert len(full["candidates"]) == 60 and "features" in full["candidates"][0]
