"""What crosses the owner's socket: one JSON object a line each way.

A request is `{"op": name, "args": [...], "caller": {...}}` (the caller's model choices, which the
owner refuses when it cannot honour them: owner.ModelChoices); a reply is `{"ok": result}`, `{"error": kind,
"message": text}` or `{"moved": true}` (this owner is leaving: ask again). Results are encoded per
operation so that a follower's call returns exactly what the owner's would: `recall` gives the
same `Slate`, `remember` the same `WriteResult`s.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import asdict, fields
from datetime import datetime
from typing import Any, Callable, Collection, Mapping

from agentmemrec.indexing.errors import InputError, StoreError
from agentmemrec.indexing.sources.sink import Ingested
from agentmemrec.indexing.store.protocol import Principal, SourceRow, WriteResult
from agentmemrec.indexing.units import Unit
from agentmemrec.ranking.slate import Slate, SlateItem

ERRORS: dict[str, type[Exception]] = {"input": InputError, "store": StoreError}


def dumps(message: dict[str, Any]) -> bytes:
    # Lone surrogates are refused by validation, but a request must still reach it to be refused.
    text = json.dumps(message, ensure_ascii=False, default=_default)
    return text.encode("utf-8", "surrogatepass") + b"\n"


def loads(line: bytes) -> dict[str, Any]:
    return json.loads(line.decode("utf-8", "surrogatepass"))


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} cannot cross the owner socket")


SKEW = ("the process asking and the one owning the store may run different agentmemrec versions: restart "
        "the older one (a client restarts its MCP server; `agentmemrec owner` exits when idle)")


def request(line: bytes, ops: Mapping[str, Callable[..., Any]],
            caller_fields: Collection[str]) -> tuple[str, list[Any], dict[str, Any] | None]:
    """A request line's op, args and caller, or an `InputError` for one that no owner could run,
    naming what is wrong in a few words: the line may be megabytes, and the message is logged."""
    try:
        message = loads(line)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"a request is one JSON object a line; this one is not ({_cut(str(exc))})") from None
    if not isinstance(message, dict):
        raise InputError(f"a request is a JSON object, not {type(message).__name__}")
    op, args, caller = message.get("op"), message.get("args"), message.get("caller")
    if not isinstance(op, str) or op not in ops:
        raise InputError(f"unknown operation {_cut(repr(op))}: {SKEW}")
    if not isinstance(args, list):
        raise InputError(f"a request's 'args' is a JSON array, not {type(args).__name__}")
    if caller is not None and not (isinstance(caller, dict) and set(caller) <= set(caller_fields)):
        raise InputError(f"'caller' is an object with some of the fields {', '.join(caller_fields)}")
    try:
        inspect.signature(ops[op]).bind(*args)
    except TypeError as exc:
        raise InputError(f"{op} takes other arguments than it was sent ({_cut(str(exc))}): {SKEW}") from None
    return op, args, caller


def _cut(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def error_reply(exc: Exception) -> dict[str, Any]:
    kind = next((k for k, cls in ERRORS.items() if isinstance(exc, cls)), "internal")
    return {"error": kind, "message": str(exc) if kind != "internal" else f"{type(exc).__name__}: {exc}"}


def raise_error(reply: dict[str, Any]) -> None:
    raise ERRORS.get(reply["error"], RuntimeError)(reply["message"])


# ---- results ----------------------------------------------------------------------------------

def _unit_out(unit: Unit) -> dict[str, Any]:
    return {**{f.name: getattr(unit, f.name) for f in fields(Unit)}, "at": unit.at.isoformat()}


def _unit_in(data: dict[str, Any]) -> Unit:
    return Unit(**{**data, "at": datetime.fromisoformat(data["at"])})


def slate_out(slate: Slate) -> dict[str, Any]:
    return {"slate_id": slate.slate_id, "project": slate.project, "budget": slate.budget,
            "context": slate.context, "tokens_used": slate.tokens_used,
            "fixed_tokens": slate.fixed_tokens,
            "items": [{"unit": _unit_out(i.unit), "rank": i.rank, "tokens": i.tokens,
                       "status": i.status} for i in slate.items],
            "outcomes": {str(k): v for k, v in slate.outcomes.items()}, "notes": list(slate.notes),
            "top_score": slate.top_score, "evidence_strength": slate.evidence_strength,
            "top_relevance": slate.top_relevance}


def slate_in(data: dict[str, Any]) -> Slate:
    items = tuple(SlateItem(_unit_in(i["unit"]), i["rank"], i["tokens"], i["status"])
                  for i in data["items"])
    return Slate(data["slate_id"], data["project"], data["budget"], data["context"],
                 data["tokens_used"], items, {int(k): v for k, v in data["outcomes"].items()},
                 data["fixed_tokens"], tuple(data["notes"]), data["top_score"], data["evidence_strength"],
                 data["top_relevance"])


def _principal_in(data: dict[str, Any] | None) -> Principal | None:
    if data is None:
        return None
    return Principal(data["name"], tuple(data["projects"]), datetime.fromisoformat(data["created_at"]))


def _principal_out(principal: Principal | None) -> dict[str, Any] | None:
    return None if principal is None else asdict(principal)


def _same(value: Any) -> Any:
    return value


UNITS = (lambda units: [_unit_out(u) for u in units], lambda data: [_unit_in(u) for u in data])

# op -> (encode on the owner, decode on the follower); ops not listed are plain JSON already
CODECS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "remember": (lambda results: [asdict(r) for r in results],
                 lambda data: [WriteResult(r["ref"], tuple(r["ids"]), r["outcome"]) for r in data]),
    "recall": (slate_out, slate_in),
    "ingest": (lambda i: {"results": [asdict(r) for r in i.results], "redactions": dict(i.redactions)},
               lambda d: Ingested(tuple(WriteResult(r["ref"], tuple(r["ids"]), r["outcome"]) for r in d["results"]),
                                  d["redactions"])),
    "sources": (lambda rows: [asdict(r) for r in rows], lambda data: [SourceRow(**r) for r in data]),
    "tokens.add": (_principal_out, _principal_in),
    "tokens.principal": (_principal_out, _principal_in),
    "tokens.list": (lambda ps: [asdict(p) for p in ps], lambda data: [_principal_in(p) for p in data]),
    "decisions": UNITS,
    "show": UNITS,
}


def encode(op: str, result: Any) -> Any:
    return CODECS.get(op, (_same, _same))[0](result)


def decode(op: str, data: Any) -> Any:
    return CODECS.get(op, (_same, _same))[1](data)
