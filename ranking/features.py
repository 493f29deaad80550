"""Ranker features: one small named function each, computing its column for the whole pool. The
names are the contract with the model file.

A feature whose source is missing (no embedder, cross-encoder not run on a candidate) is NaN,
never 0, so LightGBM routes it down its learned missing-value branch. Ranks are log-transformed
and model-dependent scores are normalised per query, so a model carries across embedders.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property, lru_cache
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from agentmemrec.indexing.lru import memo_by_text
from agentmemrec.indexing.units import Unit
from agentmemrec.ranking.candidates import Candidate
from agentmemrec.ranking.dates import TIME_CUE_RE, WHEN_RE, gap_days, query_dates

NAN = float("nan")
STOPWORDS = frozenset(STOPWORDS_EN) | {"what", "who", "whom", "when", "where", "why", "how", "which", "did",
                                        "does", "do", "would", "could", "should", "can", "may", "might"}
ROLE_CODES = {"user": 0, "assistant": 1, "system": 2, "tool": 3}
KIND_CODES = {"turn": 0, "decision": 1, "note": 2}
STATUS_CODES = {"proposed": 1, "accepted": 2, "rejected": 3, "superseded": 4}
KEY_RE = re.compile(r"[\w./-]*[/._-][\w./-]+|\b\d[\d.,:]*\b|\b[A-Z][a-zA-Z]+\b|\b\w*[A-Z]\w*[a-z]\w*\b")
WORD_RE = re.compile(r"[a-z0-9']+")
MANY_RE = re.compile(  # questions whose answer gathers several turns
    r"\b(how many|what (?:are|kinds?|types?|activities|things|books|places|events|items|ways|hobbies|"
    r"pets|games)|which \w+s\b|list|all|both|ever|has \w+ (?:done|made|read|visited|bought|painted|played))\b", re.I)


@dataclass(frozen=True)
class QueryContext:
    """Everything the features of one query read besides the candidate itself."""

    query: str
    now: datetime
    depth: int  # channel run depth: ranks beyond it are depth + 1
    channel_scores: Mapping[str, Mapping[int, float]]  # channel -> unit id -> score (pool and neighbours)
    neighbours: Mapping[int, tuple[int | None, int | None, float]]  # id -> (prev, next, relative position)
    query_keys: frozenset[str]
    cross_encoder: Mapping[int, float]  # unit id -> logit, for the candidates that were scored
    pool: Sequence[Candidate]

    @cached_property
    def pool_scores(self) -> dict[str, dict[int, float]]:
        return {ch: {c.unit.id: sc[c.unit.id] for c in self.pool if c.unit.id in sc}
                for ch, sc in self.channel_scores.items()}

    @cached_property
    def stats(self) -> dict[str, tuple[float, float, float]]:
        """(mean, std, max) of each channel's scores over the pool, of the cross-encoder's and of
        the pair means (`pair-1`, `pair1`)."""
        out = {}
        pairs = [(f"pair{step}", values) for step, values in self.pair_dense.items()]
        for name, values in [*self.pool_scores.items(), ("cross_encoder", self.cross_encoder), *pairs]:
            arr = np.fromiter(values.values(), dtype=np.float64)
            out[name] = (arr.mean(), arr.std(), arr.max()) if len(arr) else (0.0, 0.0, 0.0)
        return out

    @cached_property
    def session_best(self) -> dict[str, dict[str, int]]:
        best: dict[str, dict[str, int]] = {}
        for c in self.pool:
            for ch, hit in c.channels.items():
                if c.unit.session is not None:
                    seen = best.setdefault(ch, {})
                    seen[c.unit.session] = min(seen.get(c.unit.session, hit.rank), hit.rank)
        return best

    @cached_property
    def session_count(self) -> Counter:
        return Counter(c.unit.session for c in self.pool if c.unit.session is not None)

    @cached_property
    def session_scores(self) -> dict[str, dict[str, list[float]]]:
        """channel -> session -> the pool's scores in that session, best first."""
        out: dict[str, dict[str, list[float]]] = {}
        for ch, scores in self.pool_scores.items():
            per = out.setdefault(ch, {})
            for c in self.pool:
                if c.unit.session is not None and c.unit.id in scores:
                    per.setdefault(c.unit.session, []).append(scores[c.unit.id])
            for values in per.values():
                values.sort(reverse=True)
        return out

    @cached_property
    def pair_dense(self) -> dict[int, dict[int, float]]:
        """step (-1 previous, 1 next) -> unit id -> mean dense cosine of the unit and that
        neighbour, for the pool's units that have both scores."""
        scores = self.channel_scores.get("dense", {})
        out: dict[int, dict[int, float]] = {-1: {}, 1: {}}
        for c in self.pool:
            found = self.neighbours.get(c.unit.id)
            own = scores.get(c.unit.id)
            for step, other in zip((-1, 1), found[:2] if found else (None, None)):
                if own is not None and other is not None and other in scores:
                    out[step][c.unit.id] = (own + scores[other]) / 2
        return out

    @cached_property
    def query_terms(self) -> frozenset[str]:
        return content_terms(self.query)


def query_keys(text: str) -> frozenset[str]:
    """Identifiers, file paths, version numbers, numbers and proper names, lower-cased (a
    capitalised stopword such as a sentence's first 'What' is no name)."""
    keys = (k.lower().strip(".,:") for k in KEY_RE.findall(text))
    return frozenset(k for k in keys if len(k) > 1 and k not in STOPWORDS)


def stem(word: str) -> str:
    """A light suffix stripper (books/book, painted/paint): enough for overlap, no dictionary."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


# units' text features are kept per text, since a pool's units recur across queries; bounded by
# the texts' bytes (a unit's text may be 128 KiB), the terms weighing about what their text does
TEXT_CACHE_BYTES = 32 << 20


def content_terms(text: str) -> frozenset[str]:
    """Stemmed words of three letters or more that are not stopwords."""
    return frozenset(stem(w) for w in WORD_RE.findall(text.lower()) if len(w) > 2 and w not in STOPWORDS)


@memo_by_text(TEXT_CACHE_BYTES, weight=2)
def text_facts(text: str) -> tuple[frozenset[str], bool]:
    """What the features read of a unit's text alone: its content terms, and whether it dates
    something (a turn that does is what "when" questions need)."""
    return content_terms(text), TIME_CUE_RE.search(text) is not None


def warm_text_features(units: Iterable[Unit]) -> None:
    """Work out the units' text features now (a warm start), not at the first recall that meets
    them; their cache keeps what fits."""
    for u in units:
        text_facts(u.text)


class Rows:
    """The candidates a feature matrix is computed for, as lists the features walk."""

    def __init__(self, pool: Sequence[Candidate], ctx: QueryContext) -> None:
        self.pool = pool
        self.units = [c.unit for c in pool]
        self.ids = [u.id for u in self.units]
        self.found = [ctx.neighbours.get(i) for i in self.ids]  # (prev, next, position) or None
        self.text_facts = [text_facts(u.text) for u in self.units]


def _column(values: Iterable[float]) -> np.ndarray:
    return np.fromiter(values, dtype=np.float64)


def _log1p(values: Iterable[float]) -> np.ndarray:
    """math.log1p of each value: numpy's may differ from it in the last bit, and the shipped
    models were trained on math's."""
    return np.fromiter(map(math.log1p, values), dtype=np.float64)


def _missing(rows: Rows) -> np.ndarray:
    return np.full(len(rows.ids), NAN)


def _get(values: Mapping[int, float], rows: Rows, default: float = NAN) -> np.ndarray:
    return np.fromiter((values.get(i, default) for i in rows.ids), dtype=np.float64, count=len(rows.ids))


def _rank(rows: Rows, channel: str, ctx: QueryContext) -> np.ndarray:
    if channel not in ctx.channel_scores:
        return _missing(rows)
    beyond = ctx.depth + 1
    return _log1p(hit.rank if (hit := c.channels.get(channel)) else beyond for c in rows.pool)


def _z(values: Mapping[int, float], rows: Rows, stats: tuple[float, float, float]) -> np.ndarray:
    if len(values) < 2:
        return _missing(rows)
    return (_get(values, rows) - stats[0]) / (stats[1] + 1e-9)


# ---- relevance ------------------------------------------------------------------------------

def dense_cosine(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _get(ctx.channel_scores.get("dense", {}), rows)


def dense_cosine_z(rows: Rows, ctx: QueryContext) -> np.ndarray:
    if "dense" not in ctx.pool_scores:
        return _missing(rows)
    return _z(ctx.pool_scores["dense"], rows, ctx.stats["dense"])


def dense_rank(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _rank(rows, "dense", ctx)


def bm25_rank(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _rank(rows, "bm25", ctx)


def bm25_score_norm(rows: Rows, ctx: QueryContext) -> np.ndarray:
    if "bm25" not in ctx.pool_scores:
        return _missing(rows)
    top = ctx.stats["bm25"][2]
    return _get(ctx.pool_scores["bm25"], rows, 0.0) / top if top > 0 else np.zeros(len(rows.ids))


def pool_position(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _log1p(c.pool_rank for c in rows.pool)


def cross_encoder_z(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _z(ctx.cross_encoder, rows, ctx.stats["cross_encoder"])


# ---- context --------------------------------------------------------------------------------

def role(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _column(float(ROLE_CODES.get(u.role or "", -1)) if u.kind == "turn" else NAN for u in rows.units)


def speaker_in_query(rows: Rows, ctx: QueryContext) -> np.ndarray:
    query = ctx.query.lower()
    named = {name: bool(name) and re.search(rf"\b{re.escape(name)}\b", query) is not None
             for name in {(u.speaker or "").lower() for u in rows.units}}
    return _column(float(named[(u.speaker or "").lower()]) for u in rows.units)


def session_position(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _column(found[2] if found else NAN for found in rows.found)


def age_days(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _log1p(max((ctx.now - u.at).total_seconds(), 0.0) / 86400 for u in rows.units)


def length_tokens(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _log1p(u.tokens for u in rows.units)


def key_overlap(rows: Rows, ctx: QueryContext) -> np.ndarray:
    keys = ctx.query_keys
    if not keys:
        return _missing(rows)
    texts = (u.index_text().lower() for u in rows.units)
    return _column(sum(k in text for k in keys) / len(keys) for text in texts)


def is_question(rows: Rows, ctx: QueryContext) -> np.ndarray:
    """A turn that asks is rarely the evidence (9% of LoCoMo's evidence turns, 24% of all turns)."""
    return _column(float(u.text.rstrip().endswith("?")) for u in rows.units)


def time_cue(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _column(float(dates) for _, dates in rows.text_facts)


def date_gap(rows: Rows, ctx: QueryContext) -> np.ndarray:
    """log1p of the days between the unit and the nearest time the query names; NaN if none."""
    ranges = query_dates(ctx.query, ctx.now)
    return _log1p(gap_days(u.at, ranges) for u in rows.units) if ranges else _missing(rows)


def term_overlap(rows: Rows, ctx: QueryContext) -> np.ndarray:
    """Share of the query's content words in the unit's text, without BM25's length and idf
    weighting (and without the speaker's name, which BM25 sees in every turn of that speaker)."""
    terms = ctx.query_terms
    if not terms:
        return _missing(rows)
    return _column(len(terms & words) / len(terms) for words, _ in rows.text_facts)


# ---- the question ---------------------------------------------------------------------------
# The same for every candidate of a query: they let the trees weigh the other features by what
# kind of answer is asked for.

def query_wants_many(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return np.full(len(rows.ids), float(_matches(MANY_RE, ctx.query)))


def query_asks_when(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return np.full(len(rows.ids), float(_matches(WHEN_RE, ctx.query)))


@lru_cache(maxsize=256)
def _matches(pattern: re.Pattern[str], query: str) -> bool:
    return pattern.search(query) is not None


# ---- coding memory --------------------------------------------------------------------------

def kind(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _column(float(KIND_CODES[u.kind]) for u in rows.units)


def decision_status(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _column(0.0 if u.kind != "decision" else
                   float(STATUS_CODES["superseded"] if u.superseded_by else STATUS_CODES.get(u.status or "", 0))
                   for u in rows.units)


# ---- session context ------------------------------------------------------------------------

def _session_best(rows: Rows, channel: str, ctx: QueryContext) -> np.ndarray:
    if channel not in ctx.channel_scores:
        return _missing(rows)
    best, beyond = ctx.session_best.get(channel, {}), ctx.depth + 1
    return _log1p(NAN if u.session is None else best.get(u.session, beyond) for u in rows.units)


def session_best_bm25_rank(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _session_best(rows, "bm25", ctx)


def session_best_dense_rank(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _session_best(rows, "dense", ctx)


def session_hits(rows: Rows, ctx: QueryContext) -> np.ndarray:
    count = ctx.session_count
    return _log1p(NAN if u.session is None else count[u.session] - 1 for u in rows.units)


def _neighbour_best(rows: Rows, channel: str, ctx: QueryContext, scale: float = 1.0) -> np.ndarray:
    scores = ctx.channel_scores.get(channel)
    if scores is None:
        return _missing(rows)

    def best(found: tuple | None) -> float:
        values = [scores.get(n, 0.0) for n in found[:2] if n is not None] if found else None
        return max(values) / scale if values else NAN
    return _column(map(best, rows.found))


def neighbour_bm25(rows: Rows, ctx: QueryContext) -> np.ndarray:
    top = ctx.stats["bm25"][2] if "bm25" in ctx.pool_scores else 0.0
    return _neighbour_best(rows, "bm25", ctx, top) if top > 0 else _missing(rows)


def neighbour_dense(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _neighbour_best(rows, "dense", ctx)


def _session_gap(rows: Rows, channel: str, ctx: QueryContext) -> np.ndarray:
    """The unit's score minus the best score in its session (0 for the session's best match)."""
    scores = ctx.pool_scores.get(channel)
    if scores is None:
        return _missing(rows)
    per = ctx.session_scores[channel]
    return _column(NAN if u.session is None or u.id not in scores else scores[u.id] - per[u.session][0]
                   for u in rows.units)


def dense_gap_session(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _session_gap(rows, "dense", ctx)


def bm25_gap_session(rows: Rows, ctx: QueryContext) -> np.ndarray:
    top = ctx.stats["bm25"][2] if "bm25" in ctx.pool_scores else 0.0
    return _session_gap(rows, "bm25", ctx) / top if top > 0 else _missing(rows)


def dense_rank_in_session(rows: Rows, ctx: QueryContext) -> np.ndarray:
    scores = ctx.pool_scores.get("dense")
    if scores is None:
        return _missing(rows)
    per = ctx.session_scores["dense"]
    return _log1p(NAN if u.session is None or u.id not in scores else sum(v > scores[u.id] for v in per[u.session])
                  for u in rows.units)


def _pair(rows: Rows, ctx: QueryContext, step: int, z: bool) -> np.ndarray:
    """A turn read with its neighbour: an answer's words often do not name what the question
    before them asked about. Mean of the two cosines (NaN without a dense score for both)."""
    values = ctx.pair_dense[step]
    return _z(values, rows, ctx.stats[f"pair{step}"]) if z else _get(values, rows)


def pair_prev_dense(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _pair(rows, ctx, -1, False)


def pair_next_dense(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _pair(rows, ctx, 1, False)


def pair_prev_dense_z(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _pair(rows, ctx, -1, True)


def pair_next_dense_z(rows: Rows, ctx: QueryContext) -> np.ndarray:
    return _pair(rows, ctx, 1, True)


Feature = Callable[[Rows, QueryContext], np.ndarray]
GROUPS: dict[str, tuple[Feature, ...]] = {
    "relevance": (dense_cosine, dense_cosine_z, dense_rank, bm25_rank, bm25_score_norm, pool_position,
                  cross_encoder_z),
    "context": (role, speaker_in_query, session_position, age_days, length_tokens, key_overlap,
                is_question, time_cue, date_gap, term_overlap),
    "question": (query_wants_many, query_asks_when),
    "coding": (kind, decision_status),
    "session": (session_best_bm25_rank, session_best_dense_rank, session_hits, neighbour_bm25,
                neighbour_dense, dense_gap_session, bm25_gap_session, dense_rank_in_session, pair_prev_dense,
                pair_next_dense, pair_prev_dense_z, pair_next_dense_z),
}
FEATURES: tuple[Feature, ...] = tuple(f for group in GROUPS.values() for f in group)
FEATURE_NAMES: tuple[str, ...] = tuple(f.__name__ for f in FEATURES)
GROUP_OF: dict[str, str] = {f.__name__: g for g, fs in GROUPS.items() for f in fs}
DENSE_FEATURES = ("dense_cosine", "dense_cosine_z", "dense_rank", "session_best_dense_rank", "neighbour_dense",
                  "dense_gap_session", "dense_rank_in_session", "pair_prev_dense", "pair_next_dense",
                  "pair_prev_dense_z", "pair_next_dense_z")


def feature_matrix(pool: Sequence[Candidate], ctx: QueryContext) -> np.ndarray:
    """(len(pool), len(FEATURES)) float64, NaN where a source is missing: each feature computed
    for the whole pool at once (a call per candidate and feature cost most of a recall)."""
    rows = Rows(pool, ctx)
    out = np.empty((len(pool), len(FEATURES)), dtype=np.float64)
    for j, feature in enumerate(FEATURES):
        out[:, j] = feature(rows, ctx)
    return out


def units_needing_scores(pool: Sequence[Candidate], neighbours: Mapping[int, tuple]) -> list[int]:
    ids = {c.unit.id for c in pool}
    for c in pool:
        found = neighbours.get(c.unit.id)
        if found:
            ids.update(n for n in found[:2] if n is not None)
    return sorted(ids)


def session_keys(units: Sequence[Unit]) -> set[str]:
    return {u.session for u in units if u.session}
