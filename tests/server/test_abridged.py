"""`explain_selection`, `recall_slate`, `decisions_in_force` and `show_unit` answer within what a client takes as a
tool result (Claude Code: 25,000 tokens); the commands print it all."""

from __future__ import annotations

import json
import random
import uuid

import anyio
import pytest
from mcp import Client

from agentmemrec.indexing.tokens import count_tokens
from agentmemrec.server.app import create_server
from agentmemrec.server.cli import main

from helpers import call, call_error, settings_for, turn

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
    query = "kafka consumer lag and retries for payment webhooks"
    # with every item's record (long refs and sessions: ~90 tokens each), a 20,000-token slate is
    # about 50,000 tokens of result: refused with what to do; the slate alone fits
    refused = await client.call_tool("recall_slate", {"query": query, "budget_tokens": 20_000, "with_items": True})
    assert refused.is_error and "lower budget_tokens, or call without with_items" in refused.content[0].text
    whole = await client.call_tool("recall_slate", {"query": query, "budget_tokens": 20_000})
    assert not whole.is_error and count_tokens(whole.content[0].text) < 25_000  # Claude Code takes it whole
    slate = await call(client, "recall_slate", with_items=True, budget_tokens=5_000, query=query)
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


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


async def test_decisions_in_force_of_many_long_decisions_fit_a_tool_result_and_say_what_was_left_out(client):
    """Every shown decision came back whole in `in_force` too: 165,000 tokens at the default budget."""
    rng = random.Random(2)
    for start in range(0, 200, 50):
        await call(client, "remember", items=[
            {"kind": "decision", "ref": f"adr-{i:04d}", "title": f"Decision {i}: {_words(rng, 6)}",
             "text": _words(rng, 1500), "at": f"2026-01-{1 + i % 28:02d}T00:00:00Z"} for i in range(start, start + 50)])
    for budget in (2700, 20_000):
        result = await client.call_tool("decisions_in_force", {"budget_tokens": budget})
        assert not result.is_error and count_tokens(result.content[0].text) <= 20_000 + 100
        assert "in_force" not in result.structured_content  # the records only when asked for
    short = await call(client, "decisions_in_force")
    assert short["left_out"] > 0 and "not even by title" in short["notes"][0] and "budget_tokens" in short["notes"][0]
    listed = await call(client, "decisions_in_force", with_items=True)
    assert [d["ref"] for d in listed["in_force"]][:2] == ["adr-0195", "adr-0167"]  # newest first
    assert "text" not in listed["in_force"][0] and listed["in_force"][0]["tokens"] > 1000
    msg = (await client.call_tool("decisions_in_force", {"budget_tokens": 20_000, "with_items": True})).content[0].text
    assert "lower budget_tokens, or call without with_items" in msg


async def test_show_unit_of_a_long_note_comes_in_parts_under_a_tool_results_limit(client):
    rng = random.Random(3)
    note = "# Runbook\n\n" + "\n\n".join(f"## Step {i}\n\n{_words(rng, 180)}" for i in range(90))
    digits = " ".join(str(rng.getrandbits(40)) for _ in range(9000))[:120_000]  # one chunk, ~50,000 tokens
    await call(client, "remember", items=[{"kind": "note", "path": "docs/runbook.md", "text": note},
                                          {"kind": "decision", "ref": "ids", "text": digits}])
    parts, start = [], 0
    while True:
        result = await client.call_tool("show_unit", {"ref": "docs/runbook.md", "from_chunk": start})
        assert count_tokens(result.content[0].text) <= 20_000
        part = result.structured_content
        parts += part["units"]
        if not part["chunks_left_out"]:
            break
        start = parts[-1]["chunk"] + 1
        assert f"from_chunk={start}" in part["notes"][0]
    assert len(parts) > part["units"][0]["chunk"] > 0 and [u["chunk"] for u in parts] == list(range(len(parts)))
    assert {u["heading"] for u in parts} >= {f"Runbook > Step {i}" for i in range(90)}  # every step, once
    cut = await client.call_tool("show_unit", {"ref": "ids"})
    assert count_tokens(cut.content[0].text) <= 20_000 and cut.structured_content["units"][0]["text"].endswith("…")
    assert "agentmemrec show" in cut.structured_content["notes"][0]
    past = await client.call_tool("show_unit", {"ref": "ids", "from_chunk": 1})
    assert past.is_error and "past the item's last chunk, 0" in past.content[0].text


async def test_list_projects_of_a_thousand_projects_comes_in_parts_under_a_tool_results_limit(home):
    """A server's --allow or a team token may name hundreds of projects: about 27 tokens each, a
    thousand were a 27,000-token result, which Claude Code refuses."""
    names = [f"service-{i:04d}" for i in range(1000)]
    async with Client(create_server(settings_for(home, "alpha", ",".join(names)))) as client:
        await call(client, "remember", project="service-0900", items=[turn("The ledger retries webhooks.")])
        listed, offset = [], 0
        while True:
            result = await client.call_tool("list_projects", {"offset": offset} if offset else {})
            assert not result.is_error and count_tokens(result.content[0].text) <= 20_000
            part = result.structured_content
            listed += part["projects"]
            if not part["projects_left_out"]:
                break
            offset = len(listed)
            assert part["projects_left_out"] == 1001 - offset and f"offset={offset}" in part["notes"][0]
        assert 0 < offset < 1000 and part["notes"] == []  # in two parts
        assert [p["project"] for p in listed] == ["alpha", *names]  # in name order, each once
        assert next(p for p in listed if p["project"] == "service-0900")["turns"] == 1
        assert "offset: must be at least 0" in await call_error(client, "list_projects", offset=-1)
        assert "past the last project" in await call_error(client, "list_projects", offset=1001)
