"""BM25 postings: bm25s's tokenizer, Lucene's BM25 formulas, and the immutable parts an index is
made of (term frequencies of some documents, column by term), built and merged without
re-tokenizing."""

from __future__ import annotations

import itertools
import math
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import bm25s
import numpy as np
import Stemmer

from agentmemrec.indexing.segments import keep_rows
from agentmemrec.indexing.units import Unit

TOKENIZER = {"lower": True, "stopwords": "en", "stemmer": "english", "identifiers": "whole+parts"}
BM25_PARAMS = {"method": "lucene", "k1": 1.5, "b": 0.75}
_stemmer = Stemmer.Stemmer(TOKENIZER["stemmer"])
_stem_lock = threading.Lock()  # PyStemmer objects are not safe to share between threads


# bm25s reads `\w\w+` runs: `keepalive_expiry` and `JSONResponse` are one term each, and a
# version's numbers fall apart (`2.3.1` leaves no term, `v2.3.1` only `v2`, as `v2.4.0` does). An
# identifier is indexed as itself and as its parts, and a version as one term, in texts and
# queries alike, so "keepalive expiry" finds `keepalive_expiry` and `2.3.1` finds `v2.3.1` alone.
_SNAKE = re.compile(r"(?<![\w.])[A-Za-z0-9]+(?:_[A-Za-z0-9]+)++")
_CAMEL = re.compile(r"(?<![\w.])[A-Za-z0-9]*?[a-z0-9](?=[A-Z])[A-Za-z0-9]++|(?<![\w.])[A-Z]{2,}+[a-z][A-Za-z0-9]*+")
_HUMP = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_VERSION = re.compile(r"(?<![\d.])(\d++(?:\.\d++)++)(?!\w|\.\d)")  # v2.3.1, python3.12 too


def with_identifier_terms(text: str) -> str:
    """`text` with each version written as one term (`v2.3.1` as `v 2_3_1`), followed by the parts
    of its snake_case and camelCase identifiers; what bm25s reads, never what is stored or shown."""
    extra = [m.group().replace("_", " ") for m in _SNAKE.finditer(text)]
    extra += [" ".join(_HUMP.findall(m.group())) for m in _CAMEL.finditer(text)]
    text = _VERSION.sub(lambda m: " " + m.group(1).replace(".", "_"), text)
    return text + "\n" + " ".join(extra) if extra else text


def _bm25s_tokenize(texts: list[str], return_ids: bool):  # noqa: ANN202 - bm25s's lists or Tokenized
    with _stem_lock:
        return bm25s.tokenize([with_identifier_terms(t) for t in texts], lower=True, stopwords=TOKENIZER["stopwords"],
                              stemmer=_stemmer, return_ids=return_ids, show_progress=False)


def tokenize(texts: list[str]) -> list[list[str]]:
    return _bm25s_tokenize(texts, return_ids=False)


def _tokenize_ids(texts: list[str]) -> tuple[list[list[int]], dict[str, int]]:
    out = _bm25s_tokenize(texts, return_ids=True)
    return out.ids, out.vocab


def bm25_idf(df: int, n: int) -> float:
    """Lucene's idf, never negative (Kamphuis et al., ECIR 2020; bm25s method 'lucene')."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def bm25_norm(length: np.ndarray, avg_length: float, k1: float, b: float) -> np.ndarray:
    """BM25's length normalisation, k1 (1 - b + b len / avg): the saturated term frequency of
    BM25 (Robertson et al.) is tf / (norm + tf)."""
    return k1 * (1 - b + b * length / avg_length)


class LexicalHit(NamedTuple):  # a tuple: a search makes a thousand
    unit_id: int
    rank: int  # 1-based among the eligible units that matched
    score: float


@dataclass(frozen=True)
class Postings:
    """One part: term frequencies of some documents, column by term (CSC)."""

    ids: np.ndarray  # int64 unit ids, ascending; row i is document i
    lengths: np.ndarray  # int32 tokens per document (an empty document counts one, the '' token)
    indptr: np.ndarray  # int64; term t's postings are [indptr[t], indptr[t + 1])
    docs: np.ndarray  # int32 rows
    tfs: np.ndarray  # float32 term frequencies
    name: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        if term + 1 >= len(self.indptr):  # a term newer than this part
            return self.docs[:0], self.tfs[:0]
        lo, hi = self.indptr[term], self.indptr[term + 1]
        return self.docs[lo:hi], self.tfs[lo:hi]


def _csc(ids: np.ndarray, lengths: np.ndarray, keys: np.ndarray, tfs: np.ndarray, n_terms: int) -> Postings:
    """Postings from sorted keys (term * rows + row) and their term frequencies."""
    rows = max(len(ids), 1)
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // rows, minlength=n_terms), out=indptr[1:])
    return Postings(ids, lengths.astype(np.int32), indptr, (keys % rows).astype(np.int32), tfs.astype(np.float32))


def build_postings(units: Sequence[Unit], vocab: dict[str, int]) -> Postings:
    """Tokenize the units (ids ascending) and count terms; new terms are added to `vocab`."""
    ids = np.fromiter((u.id for u in units), dtype=np.int64, count=len(units))
    local, local_vocab = _tokenize_ids([u.index_text() for u in units])
    remap = np.empty(len(local_vocab) + 1, dtype=np.int64)
    for stem, i in local_vocab.items():
        remap[i] = vocab.setdefault(stem, len(vocab))
    if any(not d for d in local):  # bm25s indexes an empty document as the one token ''
        remap[-1] = vocab.setdefault("", len(vocab))
        local = [d or [len(local_vocab)] for d in local]
    lengths = np.fromiter((len(d) for d in local), dtype=np.int64, count=len(local))
    terms = remap[np.fromiter(itertools.chain.from_iterable(local), dtype=np.int64, count=int(lengths.sum()))]
    rows = np.repeat(np.arange(len(local), dtype=np.int64), lengths)
    keys, tfs = np.unique(terms * max(len(local), 1) + rows, return_counts=True)
    return _csc(ids, lengths, keys, tfs, len(vocab))


def merge_postings(parts: Sequence[Postings], dead: Sequence[np.ndarray | None]) -> Postings:
    """The live documents of several parts as one part, ids ascending (no re-tokenizing)."""
    keep = [keep_rows(d, len(p.ids)) for p, d in zip(parts, dead)]
    ids = np.concatenate([p.ids[k] for p, k in zip(parts, keep)])
    order = np.argsort(ids, kind="stable")
    new_row = np.empty(len(ids), dtype=np.int64)
    new_row[order] = np.arange(len(ids))
    keys, tfs, start = [], [], 0
    for p, k in zip(parts, keep):
        row_map = np.full(len(p.ids), -1, dtype=np.int64)
        row_map[k] = new_row[start:start + len(k)]
        start += len(k)
        rows = row_map[p.docs]
        live = rows >= 0
        term = np.repeat(np.arange(len(p.indptr) - 1, dtype=np.int64), np.diff(p.indptr))
        keys.append(term[live] * max(len(ids), 1) + rows[live])
        tfs.append(p.tfs[live])
    key = np.concatenate(keys)
    by_key = np.argsort(key)
    lengths = np.concatenate([p.lengths[k] for p, k in zip(parts, keep)])[order]
    n_terms = max(len(p.indptr) - 1 for p in parts)
    return _csc(ids[order], lengths, key[by_key], np.concatenate(tfs)[by_key], n_terms)
