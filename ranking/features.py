"""Ranker features: one small named function each. The names are the contract with the model file.

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
from typing import Callable, Mapping, Sequence

import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from agentmemrec.indexing.lru import memo_by_text
from agentmemrec.indexing.units import Unit
from agentmemrec.ranking.candidates import Candidate

NAN = float("nan")
STOPWORDS = frozenset(STOPWORDS_EN) | {"what", "who", "whom", "when", "where", "why", "how", "which", "did",
                                        "does", "do", "would", "could", "should", "can", "may", "might"}
ROLE_CODES = {"user": 0, "assistant": 1, "system": 2, "tool": 3}
KIND_CODES = {"turn": 0, "decision": 1, "note": 2}
STATUS_CODES = {"proposed": 1, "accepted": 2, "rejected": 3, "superseded": 4}
KEY_RE = re.compile(r"[\w./-]*[/._-][\w./-]+|\b\d[\d.,:]*\b|\b[A-Z][a-zA-Z]+\b|\b\w*[A-Z]\w*[a-z]\w*\b")
WORD_RE = re.compile(r"[a-z0-9']+")
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
TIME_CUE_RE = re.compile(  # a turn that dates something: what "when" questions need
    rf"\b(yesterday|today|tomorrow|tonight|last (?:week|month|year|weekend|night|{_DAYS})|"
    rf"next (?:week|month|year|weekend)|ago|(?:19|20)\d\d|{_MONTHS}|{_DAYS}|weekend|recently|just)\b", re.I)
MANY_RE = re.compile(  # questions whose answer gathers several turns
    r"\b(how many|what (?:are|kinds?|types?|activities|things|books|places|events|items|ways|hobbies|"
    r"pets|games)|which \w+s\b|list|all|both|ever|has \w+ (?:done|made|read|visited|bought|painted|played))\b",
    re.I)
WHEN_RE = re.compile(r"^\s*(when|what (?:year|month|day|date|time))\b|\bhow long\b", re.I)


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


@memo_by_text(TEXT_CACHE_BYTES, weight=2)
def content_terms(text: str) -> frozenset[str]:
    """Stemmed words of three letters or more that are not stopwords."""
    return frozenset(stem(w) for w in WORD_RE.findall(text.lower()) if len(w) > 2 and w not in STOPWORDS)


def _rank(c: Candidate, channel: str, ctx: QueryContext) -> float:
    hit = c.channels.get(channel)
    if channel not in ctx.channel_scores:
        return NAN
    return math.log1p(hit.rank if hit else ctx.depth + 1)


def _z(values: Mapping[int, float], key: int, stats: tuple[float, float, float]) -> float:
    if key not in values or len(values) < 2:
        return NAN
    return float((values[key] - stats[0]) / (stats[1] + 1e-9))


# ---- relevance ------------------------------------------------------------------------------

def dense_cosine(c: Candidate, ctx: QueryContext) -> float:
    return ctx.channel_scores.get("dense", {}).get(c.unit.id, NAN)


def dense_cosine_z(c: Candidate, ctx: QueryContext) -> float:
    if "dense" not in ctx.pool_scores:
        return NAN
    return _z(ctx.pool_scores["dense"], c.unit.id, ctx.stats["dense"])


def dense_rank(c: Candidate, ctx: QueryContext) -> float:
    return _rank(c, "dense", ctx)


def bm25_rank(c: Candidate, ctx: QueryContext) -> float:
    return _rank(c, "bm25", ctx)


def bm25_score_norm(c: Candidate, ctx: QueryContext) -> float:
    if "bm25" not in ctx.pool_scores:
        return NAN
    top = ctx.stats["bm25"][2]
    return ctx.pool_scores["bm25"].get(c.unit.id, 0.0) / top if top > 0 else 0.0


def pool_position(c: Candidate, ctx: QueryContext) -> float:
    return math.log1p(c.pool_rank)


def cross_encoder_z(c: Candidate, ctx: QueryContext) -> float:
    return _z(ctx.cross_encoder, c.unit.id, ctx.stats["cross_encoder"])


# ---- context --------------------------------------------------------------------------------

def role(c: Candidate, ctx: QueryContext) -> float:
    return float(ROLE_CODES.get(c.unit.role or "", -1)) if c.unit.kind == "turn" else NAN


def speaker_in_query(c: Candidate, ctx: QueryContext) -> float:
    name = (c.unit.speaker or "").lower()
    return float(bool(name) and re.search(rf"\b{re.escape(name)}\b", ctx.query.lower()) is not None)


def session_position(c: Candidate, ctx: QueryContext) -> float:
    found = ctx.neighbours.get(c.unit.id)
    return found[2] if found else NAN


def age_days(c: Candidate, ctx: QueryContext) -> float:
    return math.log1p(max((ctx.now - c.unit.at).total_seconds(), 0.0) / 86400)


def length_tokens(c: Candidate, ctx: QueryContext) -> float:
    return math.log1p(c.unit.tokens)


def key_overlap(c: Candidate, ctx: QueryContext) -> float:
    if not ctx.query_keys:
        return NAN
    text = c.unit.index_text().lower()
    return sum(k in text for k in ctx.query_keys) / len(ctx.query_keys)


def is_question(c: Candidate, ctx: QueryContext) -> float:
    """A turn that asks is rarely the evidence (9% of LoCoMo's evidence turns, 24% of all turns)."""
    return float(c.unit.text.rstrip().endswith("?"))


def time_cue(c: Candidate, ctx: QueryContext) -> float:
    return float(_dates_something(c.unit.text))


@memo_by_text(TEXT_CACHE_BYTES)
def _dates_something(text: str) -> bool:
    return TIME_CUE_RE.search(text) is not None


def term_overlap(c: Candidate, ctx: QueryContext) -> float:
    """Share of the query's content words in the unit's text, without BM25's length and idf
    weighting (and without the speaker's name, which BM25 sees in every turn of that speaker)."""
    if not ctx.query_terms:
        return NAN
    return len(ctx.query_terms & content_terms(c.unit.text)) / len(ctx.query_terms)


# ---- the question ---------------------------------------------------------------------------
# The same for every candidate of a query: they let the trees weigh the other features by what
# kind of answer is asked for.

def query_wants_many(c: Candidate, ctx: QueryContext) -> float:
    return float(_matches(MANY_RE, ctx.query))


def query_asks_when(c: Candidate, ctx: QueryContext) -> float:
    return float(_matches(WHEN_RE, ctx.query))


@lru_cache(maxsize=256)
def _matches(pattern: re.Pattern[str], query: str) -> bool:
    return pattern.search(query) is not None


# ---- coding memory --------------------------------------------------------------------------

def kind(c: Candidate, ctx: QueryContext) -> float:
    return float(KIND_CODES[c.unit.kind])


def decision_status(c: Candidate, ctx: QueryContext) -> float:
    if c.unit.kind != "decision":
        return 0.0
    return float(STATUS_CODES["superseded"] if c.unit.superseded_by else STATUS_CODES.get(c.unit.status or "", 0))


# ---- session context ------------------------------------------------------------------------

def _session_best(c: Candidate, channel: str, ctx: QueryContext) -> float:
    if channel not in ctx.channel_scores or c.unit.session is None:
        return NAN
    return math.log1p(ctx.session_best.get(channel, {}).get(c.unit.session, ctx.depth + 1))


def session_best_bm25_rank(c: Candidate, ctx: QueryContext) -> float:
    return _session_best(c, "bm25", ctx)


def session_best_dense_rank(c: Candidate, ctx: QueryContext) -> float:
    return _session_best(c, "dense", ctx)


def session_hits(c: Candidate, ctx: QueryContext) -> float:
    if c.unit.session is None:
        return NAN
    return math.log1p(ctx.session_count[c.unit.session] - 1)


def _neighbour_best(c: Candidate, channel: str, ctx: QueryContext, scale: float = 1.0) -> float:
    scores = ctx.channel_scores.get(channel)
    found = ctx.neighbours.get(c.unit.id)
    if scores is None or not found:
        return NAN
    values = [scores.get(n, 0.0) for n in found[:2] if n is not None]
    return max(values) / scale if values else NAN


def neighbour_bm25(c: Candidate, ctx: QueryContext) -> float:
    top = ctx.stats["bm25"][2] if "bm25" in ctx.pool_scores else 0.0
    return _neighbour_best(c, "bm25", ctx, top) if top > 0 else NAN


def neighbour_dense(c: Candidate, ctx: QueryContext) -> float:
    return _neighbour_best(c, "dense", ctx)


def _session_gap(c: Candidate, channel: str, ctx: QueryContext) -> float:
    """The unit's score minus the best score in its session (0 for the session's best match)."""
    scores = ctx.pool_scores.get(channel)
    if scores is None or c.unit.session is None or c.unit.id not in scores:
        return NAN
    return scores[c.unit.id] - ctx.session_scores[channel][c.unit.session][0]


def dense_gap_session(c: Candidate, ctx: QueryContext) -> float:
    return _session_gap(c, "dense", ctx)


def bm25_gap_session(c: Candidate, ctx: QueryContext) -> float:
    top = ctx.stats["bm25"][2] if "bm25" in ctx.pool_scores else 0.0
    gap = _session_gap(c, "bm25", ctx)
    return gap / top if top > 0 else NAN


def dense_rank_in_session(c: Candidate, ctx: QueryContext) -> float:
    scores = ctx.pool_scores.get("dense")
    if scores is None or c.unit.session is None or c.unit.id not in scores:
        return NAN
    ranked = ctx.session_scores["dense"][c.unit.session]
    return math.log1p(sum(v > scores[c.unit.id] for v in ranked))


def _pair(c: Candidate, ctx: QueryContext, step: int, z: bool) -> float:
    """A turn read with its neighbour: an answer's words often do not name what the question
    before them asked about. Mean of the two cosines (NaN without a dense score for both)."""
    values = ctx.pair_dense[step]
    if not z:
        return values.get(c.unit.id, NAN)
    return _z(values, c.unit.id, ctx.stats[f"pair{step}"])


def pair_prev_dense(c: Candidate, ctx: QueryContext) -> float:
    return _pair(c, ctx, -1, False)


def pair_next_dense(c: Candidate, ctx: QueryContext) -> float:
    return _pair(c, ctx, 1, False)


def pair_prev_dense_z(c: Candidate, ctx: QueryContext) -> float:
    return _pair(c, ctx, -1, True)


def pair_next_dense_z(c: Candidate, ctx: QueryContext) -> float:
    return _pair(c, ctx, 1, True)


Feature = Callable[[Candidate, QueryContext], float]
GROUPS: dict[str, tuple[Feature, ...]] = {
    "relevance": (dense_cosine, dense_cosine_z, dense_rank, bm25_rank, bm25_score_norm, pool_position,
                  cross_encoder_z),
    "context": (role, speaker_in_query, session_position, age_days, length_tokens, key_overlap,
                is_question, time_cue, term_overlap),
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
    """(len(pool), len(FEATURES)) float64, NaN where a source is missing."""
    return np.array([[f(c, ctx) for f in FEATURES] for c in pool], dtype=np.float64).reshape(len(pool), len(FEATURES))


def units_needing_scores(pool: Sequence[Candidate], neighbours: Mapping[int, tuple]) -> list[int]:
    ids = {c.unit.id for c in pool}
    for c in pool:
        found = neighbours.get(c.unit.id)
        if found:
            ids.update(n for n in found[:2] if n is not None)
    return sorted(ids)


def session_keys(units: Sequence[Unit]) -> set[str]:
    return {u.session for u in units if u.session}
