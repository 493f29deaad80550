"""What a client sees of the tools: argument types with the limits the core enforces, result
models, and plain-words messages for arguments the schema refuses.

The limits are the core's own constants, so `tools/list` states exactly what a call may send. The
SDK validates arguments against these types before a tool runs; `plain_errors` turns what it
refuses into one line per problem that names the 1-based item and the field, without pydantic's
own wording or its links.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema

from agentmemrec.indexing.units import KINDS, MAX_BATCH, MAX_FIELD_CHARS, MAX_TEXT_BYTES
from agentmemrec.ranking.memory import MAX_QUERY_CHARS, MIN_BUDGET

DEFAULT_BUDGET = 2700
# A tool's budget: Claude Code refuses a tool result over 25,000 tokens (MAX_MCP_OUTPUT_TOKENS), so
# a slate or digest stays under it with its other fields (the core and the CLI take up to 200,000).
MAX_TOOL_BUDGET = 20_000
MAX_REFS = 1000  # refs named in one forget
# An explanation is a tool result, and Claude Code refuses one over 25,000 tokens
# (MAX_MCP_OUTPUT_TOKENS): it lists at most MAX_LISTED candidates (ranking/explanation.py), a few
# units of each expected ref, and takes this many refs.
MAX_EXPECTED = 50
DEFAULT_OTHERS, MAX_OTHERS = 20, 100
MAX_PROJECT_CHARS = 64


def _line(description: str) -> Any:
    return Field(None, description=description, max_length=MAX_FIELD_CHARS)


class MemoryItem(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not silently dropped

    kind: Literal["turn", "decision", "note"] = Field(
        description="turn: a conversation turn; decision: a decision record; note: a file note")
    # A character is at least one byte, so this bound never refuses text the store would take;
    # the byte limit itself is checked by the core.
    text: str = Field(description=f"The content to remember (at most {MAX_TEXT_BYTES // 1024} KiB "
                                  "of UTF-8)", min_length=1, max_length=MAX_TEXT_BYTES)
    ref: str | None = _line("Your stable id for this item; writing the same ref again updates "
                            "it in place")
    session: str | None = _line("Turns: the conversation or session key")
    role: Literal["user", "assistant", "system", "tool"] | None = Field(
        None, description="Turns: who spoke (default user)")
    speaker: str | None = _line("Turns: the speaker's name, if known")
    at: str | None = Field(None, description="ISO 8601 time of the item, e.g. 2026-05-02T14:30:00Z; "
                                             "default: now", max_length=64)
    title: str | None = _line("Decisions: a short title")
    status: Literal["proposed", "accepted", "rejected", "superseded"] | None = Field(
        None, description="Decisions: status (default accepted)")
    supersedes: str | None = _line("Decisions: ref or id of the earlier decision this one replaces")
    path: str | None = _line("Notes: the file path, relative to the project root (required for notes)")


Items = Annotated[list[MemoryItem], Field(
    description=f"The items to store, 1 to {MAX_BATCH}; the batch is stored all or nothing",
    min_length=1, max_length=MAX_BATCH)]
Project = Annotated[str | None, Field(
    description="The project to use; omitted or empty: the server's project (over HTTP, your token's "
                "first project)", max_length=MAX_PROJECT_CHARS)]
Query = Annotated[str, Field(
    description="What the slate should answer: the task, question or topic, in plain words",
    min_length=1, max_length=MAX_QUERY_CHARS)]
Budget = Annotated[int, Field(
    description=f"The slate's size in tokens, headers included ({MIN_BUDGET}-{MAX_TOOL_BUDGET}: clients "
                "refuse a tool result over 25,000 tokens)",
    ge=MIN_BUDGET, le=MAX_TOOL_BUDGET)]
AsOf = Annotated[str | None, Field(
    description="ISO 8601 time: only what was recorded by then is eligible (default: everything stored)",
    max_length=64)]
WithItems = Annotated[bool, Field(
    description="Also return `items`, each item's id, ref, kind, session, path, tokens and rank, for a "
                "program that reads them; the context already names every item by #id. Refused when the "
                "result would pass 20,000 tokens: lower budget_tokens")]
SlateId = Annotated[str, Field(description="The slate_id that recall_slate returned (s_ and 16 digits)",
                               max_length=64)]
Name = Annotated[str, Field(max_length=MAX_FIELD_CHARS)]  # a ref, or an id written '#42'
ExpectedRefs = Annotated[list[Name] | None, Field(
    description=f"Refs or ids ('#42') of facts you expected in the slate, at most {MAX_EXPECTED}: the "
                "explanation says where each was lost", max_length=MAX_EXPECTED)]
Others = Annotated[int, Field(
    description=f"How many candidates outside the slate to list, best-ranked first (0-{MAX_OTHERS}); the "
                "slate's items and the candidates `refs` names are always listed",
    ge=0, le=MAX_OTHERS)]
ForgetRefs = Annotated[list[Name], Field(
    description="Refs (every chunk of a note goes) or ids ('#42') to remove; unknown ones fail the "
                "whole call", min_length=1, max_length=MAX_REFS)]
UnitRef = Annotated[str, Field(description="A ref or an id ('#42') of the item to show",
                                min_length=1, max_length=MAX_FIELD_CHARS)]
DigestBudget = Annotated[int, Field(description=f"The digest's size in tokens ({MIN_BUDGET}-{MAX_TOOL_BUDGET})",
                                    ge=MIN_BUDGET, le=MAX_TOOL_BUDGET)]


class StoredItem(BaseModel):
    ref: str | None
    ids: list[int]
    outcome: Literal["stored", "updated", "unchanged"]


class RememberResult(BaseModel):
    project: str
    items: list[StoredItem]
    redacted: dict[str, int] = Field(default_factory=dict, description=(
        "What looked like a credential and was stored as a [REDACTED:<kind>] marker: a count by kind"))


def _flat(schema: dict[str, Any], _: Any = None) -> None:
    """An optional field as `"type": [T, "null"]` rather than an anyOf of two schemas: the same
    contract, which a client's validator checks in one step for each field of each item."""
    for prop in schema.get("properties", {}).values():
        alts = prop.get("anyOf")
        if alts and len(alts) == 2 and {"type": "null"} in alts and all(set(a) == {"type"} for a in alts):
            del prop["anyOf"]
            prop["type"] = [next(a["type"] for a in alts if a["type"] != "null"), "null"]


class SlateItemOut(BaseModel):
    model_config = ConfigDict(json_schema_extra=_flat)

    id: int
    ref: str | None
    kind: str
    session: str | None
    role: str | None
    at: str
    status: str | None = Field(description="A decision's status in force when the slate was made")
    path: str | None
    tokens: int
    rank: int | None = Field(description="Final rank; null for a successor decision pulled in "
                                         "with the decision it supersedes from outside the ranking")


# written out in the slate's schema, not a $ref that a validator resolves again for every item
_ITEMS = WithJsonSchema({"type": "array", "title": "Items", "items": SlateItemOut.model_json_schema(),
                         "description": "Only with `with_items`"})


class SlateResult(BaseModel):
    model_config = ConfigDict(json_schema_extra=_flat)

    slate_id: str
    project: str
    context: str = Field(description="The rendered slate to read")
    items: Annotated[list[SlateItemOut] | None, _ITEMS] = None
    tokens_used: int
    budget_tokens: int
    evidence_strength: float | None = Field(
        None, description="0-1: the estimated probability that memory holds a confirmed answer to the "
                          "query. Low means nothing relevant is stored, or only a proposed or rejected "
                          "decision matches: say so rather than rely on the slate. Null when the ranker "
                          "has no calibration (lexical fallback or a model trained without one)")
    notes: list[str] = Field(default_factory=list, description="What limited this slate, if "
                             "anything (e.g. units not yet embedded, an empty project)")


class Explanation(BaseModel):
    slate_id: str
    project: str
    query: str
    budget: int
    as_of: str | None
    ranker: str
    channels: list[str]
    dense_query: str | None = Field(default=None, description="What the embedder read for the query: "
                                    "the query without the names of the project's speakers")
    models: dict[str, Any] = Field(default_factory=dict, description="The pipeline that ran: embedder, "
                                   "cross-encoder (and how many candidates it scored) and ranker file")
    pool_size: int
    tokens: dict[str, int]
    units_in_project: int
    out_of_scope_units: int = Field(description="Units in the other projects you may use, never read for this slate")
    excluded_as_of: int
    successors: list[int] = Field(default_factory=list, description="Ids of successor decisions shown "
                                  "with the decision they supersede")
    candidates: list[dict[str, Any]] = Field(description=(
        "In rank order: the slate's items, the candidates `refs` names and the best-ranked others, each "
        "with its rank, pool_rank, score, tokens, outcome (lost_to: ranking or budget), its rank in each "
        "channel, its cross-encoder logit and the features that most raised its score"))
    candidates_left_out: int = Field(0, description="Pool candidates not listed (`agentmemrec explain "
                                     "SLATE_ID` lists them all, with every feature)")
    diagnosis: list[dict[str, Any]] | None = None
    notes: list[str] = Field(default_factory=list)


class ForgetResult(BaseModel):
    project: str
    removed_ids: list[int]


class ProjectCount(BaseModel):
    project: str
    units: int
    turns: int
    decisions: int
    notes: int


class ProjectsResult(BaseModel):
    projects: list[ProjectCount] = Field(description="The projects you may use, in name order from `offset` on, "
                                                     "with their units by kind, as many as fit a result a client "
                                                     "takes whole")
    projects_left_out: int = Field(0, description="Projects after these, left out to keep the result under "
                                                  "20,000 tokens: `notes` says how to get them")
    notes: list[str] = Field(default_factory=list, description="What was left out and how to get it")


class UnitOut(BaseModel):
    id: int
    ref: str | None
    kind: str
    text: str
    chunk: int
    at: str
    session: str | None
    role: str | None
    speaker: str | None
    title: str | None
    status: str | None = Field(description="The status in force: superseded once a successor is adopted "
                                           "(superseded_by names it), else the status it was written with")
    supersedes: int | None
    superseded_by: int | None
    path: str | None
    heading: str | None
    tokens: int


class UnitResult(BaseModel):
    project: str
    units: list[UnitOut] = Field(description="The item's chunks from `from_chunk` on, in order, as many as "
                                             "fit a result a client takes whole")
    chunks_left_out: int = Field(0, description="Chunks after these, left out to keep the result under "
                                                "20,000 tokens: `notes` says how to get them")
    notes: list[str] = Field(default_factory=list, description="What was left out and how to get it")


FromChunk = Annotated[int, Field(description="The first chunk to show (`chunk` in the units, 0 for the "
                                             "item's start): to read on where a call left chunks out", ge=0)]
ProjectOffset = Annotated[int, Field(description="How many projects, in name order, to skip (0: from the "
                                                 "first): to read on where a call left projects out", ge=0)]
WithDecisions = Annotated[bool, Field(
    description="Also return `in_force` and `replaced`: each shown decision's id, ref, title, status, date, "
                "links and whole size, for a program that reads them; the context already names each by #id")]


class DecisionOut(BaseModel):
    model_config = ConfigDict(json_schema_extra=_flat)

    id: int
    ref: str | None
    title: str | None
    status: str | None = Field(description="superseded once a successor is adopted, else as written")
    at: str
    supersedes: int | None
    superseded_by: int | None
    tokens: int = Field(description="The whole record's size: what show_unit returns for it")


class DecisionsResult(BaseModel):
    project: str
    context: str = Field(description="The digest to read: decisions in force, newest first, then "
                                     "the replaced ones as one line each")
    in_force: list[DecisionOut] | None = Field(None, description="Only with `with_items`: the decisions "
                                                                 "in force the context shows, newest first")
    replaced: list[DecisionOut] | None = Field(None, description="Only with `with_items`: the replaced "
                                                                 "decisions the context shows")
    left_out: int = Field(description="Decisions that did not fit the budget, not even by title")
    tokens_used: int
    notes: list[str] = Field(default_factory=list, description="What was left out and how to see it")


# ---- refused arguments, in plain words --------------------------------------------------------

def plain_errors(exc: ValidationError) -> str:
    """One line per refused argument: `item 3, field 'kind': must be one of turn, decision, note`."""
    lines = [f"{_where(err['loc'])}: {_problem(err)}" for err in exc.errors(include_url=False)]
    return "; ".join(dict.fromkeys(lines)) + ". Fix this and call again; nothing was changed."


def _where(loc: tuple[Any, ...]) -> str:
    parts, out = list(loc), []
    while parts:
        head = parts.pop(0)
        if parts and isinstance(parts[0], int):
            index = parts.pop(0) + 1
            out.append(f"item {index}" if head == "items" else f"{head} entry {index}")
        else:
            out.append(f"field {head!r}" if out else str(head))
    return ", ".join(out) or "arguments"


def _problem(err: Any) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "missing":
        return "is required" + (f" (one of: {', '.join(KINDS)})" if err["loc"][-1:] == ("kind",) else "")
    if kind == "string_unicode":
        return "is not valid Unicode (it holds a lone surrogate); send UTF-8 text"
    if kind == "extra_forbidden":
        return f"is not a field; valid fields: {', '.join(MemoryItem.model_fields)}"
    if kind == "literal_error":
        return f"must be one of: {ctx.get('expected', '').replace(' or ', ', ')}"
    if kind in ("string_too_long", "too_long"):
        unit = "characters" if kind == "string_too_long" else "entries"
        hint = {"entries": "; send them in several calls", "characters": ""}[unit]
        if err["loc"][-1:] == ("text",):
            hint = "; split it into several items"
        return f"has more than {ctx.get('max_length')} {unit}{hint}"
    if kind in ("string_too_short", "too_short"):
        return "is empty" if kind == "string_too_short" else f"needs at least {ctx.get('min_length')} entry"
    if kind in ("greater_than_equal", "less_than_equal"):
        return f"must be between {MIN_BUDGET} and {MAX_TOOL_BUDGET}" if err["loc"] == ("budget_tokens",) \
            else f"must be {'at least' if kind == 'greater_than_equal' else 'at most'} " \
                 f"{ctx.get('ge', ctx.get('le'))}"
    expected = {"string_type": "text", "int_type": "a whole number", "int_parsing": "a whole number",
                "int_from_float": "a whole number", "list_type": "a list",
                "model_type": "an object", "model_attributes_type": "an object", "dict_type": "an object"}
    if kind in expected:
        return f"must be {expected[kind]}, not {type(err.get('input')).__name__}"
    return err["msg"][0].lower() + err["msg"][1:]
