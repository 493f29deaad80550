"""What `explain_selection` reads back: every recall's pool, ranking and outcomes, saved compactly.

An explanation is saved for every recall, so it is packed: the pool's columns (ids, ranks,
scores, token counts, channel hits, outcomes) and its feature matrix are little-endian arrays,
base64 inside one small JSON document (about a third of the size of a JSON object per candidate,
and a few per cent of its cost to encode). `unpack` gives back one dict per candidate, as
`explain_selection` shows them; explanations saved before packing (a list of candidate objects)
read as they always did. `explain` reads one back for a caller, with the units as they are now.
"""

from __future__ import annotations

import base64
import re
from typing import TYPE_CHECKING, Any, Sequence, get_args

import numpy as np

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.store.protocol import Store
from agentmemrec.indexing.units import Unit, check_names, parse_time
from agentmemrec.ranking.features import FEATURE_NAMES
from agentmemrec.ranking.ranker import ScoredCandidate
from agentmemrec.ranking.render import SlateInputs, display_status
from agentmemrec.ranking.slate import HEADER_RESERVE, Outcome, Slate, item_tokens

if TYPE_CHECKING:
    from agentmemrec.ranking.memory import Memory

PACKED = 2  # the payload's "packed" version
OUTCOMES: tuple[str, ...] = get_args(Outcome)
LOST_TO = (None, "ranking", "budget")  # why a candidate skipped over budget is out: see `lost_to`
DECIMALS = 4  # features are shown rounded: they are saved as float32, exact to about 7 digits
MAX_LISTED = 100  # the most candidates an abridged explanation lists, whatever the slate holds


def _encode(values: Any, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(values, dtype=dtype).tobytes()).decode("ascii")


def _decode(text: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=dtype)


def lost_to(outcome: str, rank: int, first: int, cutoff: int, too_large: bool) -> str | None:
    """Why a candidate skipped over budget is out. The budget: nothing ranked above it got in
    (`first`, the best rank in the slate, is below it, or the slate is empty), something ranked
    below it did (`cutoff`, the worst rank in the slate), or it could not fit on its own. Else
    ranking: the items ranked above it filled the budget, and it would have got in ranked higher."""
    if outcome != "skipped_over_budget":
        return None
    return "budget" if not first or rank < first or rank < cutoff or too_large else "ranking"


def _too_large(unit: Unit, tokens: int, room: int, inputs: SlateInputs) -> bool:
    """Whether a unit's item, with a section header, exceeds all the room a slate has for items
    (counted only for a unit near that size; a decision never is: it would be shown as an excerpt)."""
    return unit.kind != "decision" and tokens > room - 64 and item_tokens(unit, inputs) + HEADER_RESERVE > room


def pack_pool(slate: Slate, ranked: Sequence[ScoredCandidate], inputs: SlateInputs,
              channels: Sequence[str], beyond: dict[str, dict[int, int]]) -> dict[str, Any]:
    """The candidates (in final rank order: rank i + 1) and what was cut off below the pool."""
    in_slate = [it.rank for it in slate.items if slate.outcomes.get(it.unit.id) == "in_slate"]
    first, cutoff = (min(in_slate), max(in_slate)) if in_slate else (0, 0)
    outcomes = [slate.outcomes.get(sc.unit.id, "skipped_over_budget") for sc in ranked]
    tokens = [sc.unit.tokens for sc in ranked]
    room = slate.budget - slate.fixed_tokens  # what items may take
    lost = [LOST_TO.index(lost_to(o, sc.rank, first, cutoff, _too_large(sc.unit, t, room, inputs)))
            for o, sc, t in zip(outcomes, ranked, tokens)]
    hits = {name: [sc.candidate.channels.get(name) for sc in ranked] for name in channels}
    names, matrix = _feature_matrix(ranked)
    whole = {sc.unit.id: sc.unit.text for sc in ranked if sc.unit.kind == "decision"}  # only decisions are cut
    whole.update({u.id: u.text for chain in inputs.successors.values() for u in chain})
    return {
        "packed": PACKED, "n": len(ranked),
        "ids": _encode([sc.unit.id for sc in ranked], "<i8"),
        "pool_rank": _encode([sc.candidate.pool_rank for sc in ranked], "<i4"),
        "score": _encode([sc.score for sc in ranked], "<f8"),
        "tokens": _encode(tokens, "<i4"),
        "outcome": _encode([OUTCOMES.index(o) for o in outcomes], "<i1"),
        "lost_to": _encode(lost, "<i1"),
        "status": [display_status(sc.unit, inputs) for sc in ranked],
        "hits": {name: {"rank": _encode([h.rank if h else 0 for h in col], "<i4"),  # 0: not found by it
                        "score": _encode([h.score if h else 0.0 for h in col], "<f8")}
                 for name, col in hits.items()},
        "feature_names": names, "features": _encode(matrix, "<f4") if names else None,
        "beyond_pool": {name: {"ids": _encode(list(ids), "<i8"), "ranks": _encode(list(ids.values()), "<i4")}
                        for name, ids in beyond.items()},
        # decisions the slate shows as an excerpt: id -> the excerpt's item tokens
        "excerpts": {str(it.unit.id): it.tokens for it in slate.items
                     if it.unit.id in whole and it.unit.text != whole[it.unit.id]},
    }


def _feature_matrix(ranked: Sequence[ScoredCandidate]) -> tuple[list[str] | None, np.ndarray]:
    """Every candidate's features under shared names (NaN: a missing source, or no features)."""
    first = next((sc.features for sc in ranked if sc.features), None)
    if first is None:
        return None, np.zeros((0, 0))
    names = list(first)
    nan = [np.nan] * len(names)
    rows = [[np.nan if (v := sc.features[n]) is None else v for n in names] if sc.features else nan
            for sc in ranked]
    return names, np.array(rows, dtype=np.float64)


def unpack(payload: dict[str, Any]) -> dict[str, Any]:
    """The saved explanation with one dict per candidate (id, rank, pool_rank, status, score,
    tokens, outcome, lost_to, channels, features) and `beyond_pool` as channel -> id -> rank."""
    if "candidates" in payload:  # saved before packing
        names = payload.pop("feature_names", None)
        return {**payload, "candidates": [{**c, "features": _named(names, c.get("features"))}
                                          for c in payload["candidates"]]}
    pool = payload.pop("pool")
    n = pool["n"]
    ids, pool_rank = _decode(pool["ids"], "<i8").tolist(), _decode(pool["pool_rank"], "<i4").tolist()
    score, tokens = _decode(pool["score"], "<f8").tolist(), _decode(pool["tokens"], "<i4").tolist()
    outcome, lost = _decode(pool["outcome"], "<i1").tolist(), _decode(pool["lost_to"], "<i1").tolist()
    hits = {name: (_decode(h["rank"], "<i4").tolist(), _decode(h["score"], "<f8").tolist())
            for name, h in pool["hits"].items()}
    names = pool["feature_names"]
    rows: list[Any] = [None] * n
    if names:
        values = np.round(_decode(pool["features"], "<f4").reshape(n, len(names)).astype(np.float64), DECIMALS)
        rows = [dict(zip(names, row)) for row in np.where(np.isnan(values), None, values).tolist()]
    candidates = [{"id": ids[i], "rank": i + 1, "pool_rank": pool_rank[i], "status": pool["status"][i],
                   "score": score[i], "tokens": tokens[i], "outcome": OUTCOMES[outcome[i]],
                   "lost_to": LOST_TO[lost[i]],
                   "channels": {name: {"rank": r[i], "score": s[i]} for name, (r, s) in hits.items() if r[i]},
                   "features": rows[i]} for i in range(n)]
    excerpts = pool.get("excerpts", {})  # where the slate showed an excerpt, its size
    for c in candidates:
        if str(c["id"]) in excerpts:
            c["excerpt_tokens"] = excerpts[str(c["id"])]
    beyond = {name: dict(zip(map(str, _decode(b["ids"], "<i8").tolist()), _decode(b["ranks"], "<i4").tolist()))
              for name, b in pool["beyond_pool"].items()}
    return {**payload, "candidates": candidates, "beyond_pool": beyond}


def _named(names: list[str] | None, values: Any) -> dict[str, float | None] | None:
    """A saved feature row as a name -> value mapping (rows saved before names were shared are one)."""
    if names is None or not isinstance(values, list):
        return values
    return dict(zip(names, values))


def diagnose(store: Store, project: str, payload: dict[str, Any], ref: str, later: set[int]) -> dict[str, Any]:
    """Where a fact was lost: never stored, not eligible, never in the pool, ranking, budget."""
    ids = store.ids_for(project, ref)
    if not ids:
        return {"ref": ref, "stage": "never_stored",
                "detail": "no unit with this ref or id exists in the project"}
    by_id = {c["id"]: c for c in payload["candidates"]}
    as_of = parse_time(payload.get("as_of"))
    units = store.units(project, ids)
    results = []
    for uid in ids:
        c = by_id.get(uid)
        unit = units.get(uid)
        if c is not None:
            stage = {"in_slate": "in_slate", "in_slate_as_successor": "in_slate",
                     "duplicate_in_slate": "in_slate",  # its text is in the slate, under its twin's id
                     "left_out_superseded": "left_out_superseded",
                     "left_out_unmatched": "left_out_unmatched"}.get(
                c["outcome"], f"lost_to_{c['lost_to']}")
            results.append({"id": uid, "stage": stage, "rank": c["rank"]})
        elif uid in payload.get("successors", []):
            results.append({"id": uid, "stage": "in_slate", "rank": None})
        elif as_of is not None and unit is not None and unit.at > as_of:
            results.append({"id": uid, "stage": "not_eligible", "detail": "recorded after as_of"})
        elif uid in later:
            results.append({"id": uid, "stage": "not_eligible",
                            "detail": "stored or changed after this slate was built; recall again"})
        else:
            beyond = {n: r[str(uid)] for n, r in payload["beyond_pool"].items() if str(uid) in r}
            results.append({"id": uid, "stage": "never_in_pool", "channel_ranks": beyond or None,
                            "detail": "below the pool cut-off" if beyond else
                            "not matched by any channel within twice the pool size"})
    stage = results[0]["stage"] if len({r["stage"] for r in results}) == 1 else "mixed"
    return {"ref": ref, "stage": stage, "units": results}


def abridge(candidates: list[dict[str, Any]], named: set[int], others: int) -> list[dict[str, Any]]:
    """Of the candidates (in rank order), the slate's items, those `named` and the `others`
    best-ranked of the rest, in rank order: at most MAX_LISTED, the named ones first, then the
    best-ranked (a slate of a huge budget holds more items than anyone reads in an explanation)."""
    shown = {c["id"] for c in candidates if c["outcome"] in ("in_slate", "in_slate_as_successor")} | named
    rest = [c["id"] for c in candidates if c["id"] not in shown][:max(0, others)]
    keep = {c["id"] for c in sorted((c for c in candidates if c["id"] in shown or c["id"] in rest),
                                    key=lambda c: (c["id"] not in named, c["rank"]))[:MAX_LISTED]}
    return [c for c in candidates if c["id"] in keep]


def add_top_features(ranker: Any, candidates: list[dict[str, Any]]) -> None:
    """Each candidate's features that most raised its score under the ranker's model, where it
    has a model that says (LightGBM's per-prediction contributions)."""
    top_features = getattr(ranker, "top_features", None)
    chosen = [c for c in candidates if c.get("features")]
    if top_features is None or not chosen:
        return
    rows = [[float("nan") if c["features"].get(n) is None else c["features"][n] for n in FEATURE_NAMES]
            for c in chosen]
    for c, top in zip(chosen, top_features(rows)):
        c["top_features"] = dict(top)  # feature -> contribution, largest first


SLATE_ID = re.compile(r"s_(?:[0-9]{16}|[0-9a-f]{12})")  # 12 hex digits: saved before ids were digits


def explain(memory: "Memory", slate_id: str, allowed: set[str] | frozenset[str], refs: Sequence[str] = (),
            others: int | None = None) -> dict[str, Any]:
    """The saved explanation of a slate, with every candidate (`others` None) or only the
    slate's items, the candidates `refs` name and the `others` best-ranked of the rest (see
    `abridge`), each of those then with the features that most raised its score."""
    refs = check_names(refs, "refs") if refs else []
    valid = isinstance(slate_id, str) and SLATE_ID.fullmatch(slate_id)
    saved = memory.slates.load(slate_id) if valid else None
    if saved is None and valid and memory.slates.lost(slate_id):
        raise InputError(f"the explanation of slate {slate_id} was lost: the process that owned "
                         "the memory store stopped (crashed or was killed) before saving it; call "
                         "recall_slate again and explain the new slate")
    if saved is None or saved[0] not in allowed:
        raise InputError(f"unknown slate id {str(slate_id)[:40]!r}; pass the slate_id that recall_slate "
                         "returned (slates of other projects are not visible)")
    project, payload = saved[0], unpack(saved[1])
    memory.store.refresh(project)  # a write another replica acknowledged is "later", not "never in pool"
    live = memory.store.units(project, [c["id"] for c in payload["candidates"]])
    # forgotten units never reappear; a decision's status is the one in force in the slate
    candidates = [{**_unit_fields(live[c["id"]]), **c} for c in payload["candidates"] if c["id"] in live]
    payload = {**payload, "project": project, "candidates": candidates,
               "units_in_project": memory.store.count_units(project),
               # of the projects this caller may use: a count of others' projects would say
               # how much a team's other principals store
               "out_of_scope_units": sum(n for p, n in memory.store.projects().items()
                                         if p in allowed and p != project),
               "notes": payload["notes"] if "notes" in payload else memory.notes(project)}
    if refs:
        since = payload.get("generation")
        now = memory.store.generation(project)
        later = None if since is None else memory.store.changed_between(project, since, now)
        payload["diagnosis"] = [diagnose(memory.store, project, payload, r, later or set()) for r in refs]
    if others is not None:
        named = {u["id"] for d in payload.get("diagnosis") or [] for u in d.get("units", [])}
        payload["candidates"] = abridge(candidates, named, others)
        payload["candidates_left_out"] = len(candidates) - len(payload["candidates"])
    # every listed candidate's, or the slate items' of a whole pool (hundreds take seconds)
    add_top_features(memory.ranker, [c for c in payload["candidates"] if others is not None
                                   or c["outcome"].startswith("in_slate")])
    return payload


def _unit_fields(u: Unit) -> dict[str, Any]:
    return {"ref": u.ref, "kind": u.kind, "session": u.session, "role": u.role,
            "status": u.status, "path": u.path, "at": u.at.isoformat()}
