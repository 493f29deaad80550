"""Tool results a model can take whole; above all what `explain_selection` returns.

Claude Code refuses a tool result over 25,000 tokens (MAX_MCP_OUTPUT_TOKENS), and the whole pool
with every feature is about 190,000 at 1,000 units. So the tool asks the core for the slate's items,
the candidates the expected refs name and a few of the best-ranked others (`Memory.explain` with
`others`), and shows each by its rank in each channel, its cross-encoder logit and its top
features. `agentmemrec explain` still prints everything.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import CallToolResult, TextContent

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.tokens import count_tokens
from agentmemrec.server.schema import Explanation

MAX_RESULT_TOKENS = 20_000  # what an explanation may take, under Claude Code's 25,000
BRIEF_FIELDS = ("id", "ref", "kind", "session", "path", "status", "rank", "pool_rank", "score", "tokens",
                "outcome", "lost_to", "excerpt_tokens", "channels", "cross_encoder", "top_features")
BRIEF_UNITS = 5  # of an expected ref's units (a long note's chunks), the diagnosis lists this many


def brief_candidate(c: dict[str, Any]) -> dict[str, Any]:
    """A candidate as a model reads it: its rank in each channel, its cross-encoder logit and top
    features rather than every channel score and feature (about 90 tokens, not 400); no nulls."""
    shown = {**c, "score": round(c["score"], 4), "channels": {n: hit["rank"] for n, hit in c["channels"].items()},
             "cross_encoder": (c.get("features") or {}).get("cross_encoder")}
    return {k: shown[k] for k in BRIEF_FIELDS if shown.get(k) is not None}


def brief(explanation: dict[str, Any]) -> dict[str, Any]:
    """The abridged explanation as JSON data, within MAX_RESULT_TOKENS: brief candidates, an
    expected ref's first few units, and past the limit (long refs and session names) fewer
    candidates, the lowest-ranked first and the ones a ref names last."""
    diagnosis = explanation.get("diagnosis")
    if diagnosis is not None:
        diagnosis = [{**d, "units": d["units"][:BRIEF_UNITS], "units_left_out": len(d["units"]) - BRIEF_UNITS}
                     if len(d.get("units", [])) > BRIEF_UNITS else d for d in diagnosis]
    data = Explanation(**{**explanation, "diagnosis": diagnosis,
                          "candidates": [brief_candidate(c) for c in explanation["candidates"]]}).model_dump(mode="json")
    over = count_tokens(_compact(data)) - MAX_RESULT_TOKENS
    if over > 0:
        named = {u["id"] for d in diagnosis or [] for u in d.get("units", [])}
        dropped = set()
        for c in sorted(data["candidates"], key=lambda c: (c["id"] in named, -c["rank"])):
            if over <= 0:
                break
            dropped.add(c["id"])
            over -= count_tokens(_compact(c)) + 1
        data["candidates"] = [c for c in data["candidates"] if c["id"] not in dropped]
        data["candidates_left_out"] += len(dropped)
    return data


def _compact(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def json_result(data: dict[str, Any]) -> CallToolResult:
    """A structured result whose text block is that JSON as `JSON.stringify` writes it, so every
    client's model reads the same bytes (the SDK's own text block is indented: half again as long)."""
    text = _compact(data)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def result_tokens(data: Any) -> int:
    """The tokens of `data` as a client's model reads it (`JSON.stringify`)."""
    return count_tokens(_compact(data))


PAGE_ROOM = MAX_RESULT_TOKENS - 200  # a paged result's records; its other fields and notes take the rest


def fitting(records: list[Any], room: int = PAGE_ROOM) -> int:
    """How many of `records` (models, in order, each with its comma) fit `room` tokens together."""
    for n, record in enumerate(records):
        room -= result_tokens(record.model_dump()) + 1
        if room < 0:
            return n
    return len(records)


def items_fit(data: dict[str, Any]) -> dict[str, Any]:
    """`data`, a result with the `with_items` records asked for, if a client takes it whole."""
    if (size := result_tokens(data)) > MAX_RESULT_TOKENS:
        raise InputError(f"with_items the result would be {size} tokens, over the {MAX_RESULT_TOKENS} a client "
                         "takes whole: lower budget_tokens, or call without with_items")
    return data


def cut_to(text: str, tokens: int) -> str:
    """`text`'s start within about `tokens` tokens, marked as cut (BPE counts are not additive:
    cut in proportion, with a margin, until it fits)."""
    while text and count_tokens(text) > tokens:
        text = text[: len(text) * max(tokens, 1) // count_tokens(text) * 9 // 10]
    return text + "…"
