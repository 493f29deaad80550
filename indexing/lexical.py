"""The BM25 channel: one bm25s index per project, derived from the DuckDB rows.

Each index is a snapshot directory stamped with what it was built from (project, generation,
row count, schema and tokenizer settings). `CURRENT` names the live snapshot and is replaced
atomically, so a reader never sees a half-built index; a stale or unreadable snapshot is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np
import Stemmer

from .store import Store

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: the stamp records a digest of each file
TOKENIZER = {"lower": True, "stopwords": "en", "stemmer": "english"}
BM25_PARAMS = {"method": "lucene", "k1": 1.5, "b": 0.75}
_stemmer = Stemmer.Stemmer(TOKENIZER["stemmer"])
_stem_lock = threading.Lock()  # PyStemmer objects are not safe to share between threads


def tokenize(texts: list[str]) -> list[list[str]]:
    with _stem_lock:
        return bm25s.tokenize(texts, lower=True, stopwords=TOKENIZER["stopwords"], stemmer=_stemmer,
                              return_ids=False, show_progress=False)


@dataclass(frozen=True)
class LexicalHit:
    unit_id: int
    rank: int  # 1-based among the eligible units that matched
    score: float


@dataclass(frozen=True)
class LexicalSnapshot:
    """A read-only BM25 index over one generation of a project's units."""

    project: str
    generation: int
    ids: np.ndarray  # unit ids, ascending; position i is bm25s document i
    retriever: bm25s.BM25 | None  # None for a project with no indexable text

    def scores(self, query: str) -> np.ndarray:
        if self.retriever is None or len(self.ids) == 0:
            return np.zeros(len(self.ids), dtype=np.float32)
        tokens = tokenize([query])[0]
        if not any(t in self.retriever.vocab_dict for t in tokens):
            return np.zeros(len(self.ids), dtype=np.float32)
        return np.asarray(self.retriever.get_scores(tokens), dtype=np.float32)

    def search(self, query: str, k: int, exclude: set[int] | frozenset[int] = frozenset()) -> list[LexicalHit]:
        """Top-k units by BM25 score, excluding ineligible ids; zero-score units never count."""
        scores = self.scores(query)
        if exclude:
            scores = np.where(np.isin(self.ids, np.fromiter(exclude, dtype=np.int64)), 0.0, scores)
        positive = np.flatnonzero(scores > 0)
        order = positive[np.argsort(-scores[positive], kind="stable")][:k]
        return [LexicalHit(int(self.ids[p]), r, float(scores[p])) for r, p in enumerate(order, 1)]


class LexicalIndex:
    """Hands out the current snapshot for a project, rebuilding it when the store has moved on."""

    def __init__(self, store: Store, root: Path) -> None:
        self.store = store
        self.root = Path(root)
        self._cache: dict[str, LexicalSnapshot] = {}
        self._lock = threading.Lock()

    def snapshot(self, project: str) -> LexicalSnapshot:
        generation = self.store.generation(project)
        cached = self._cache.get(project)
        if cached is not None and cached.generation == generation:
            return cached
        with self._lock:
            cached = self._cache.get(project)
            if cached is None or cached.generation != generation:
                cached = self._load(project, generation) or self.rebuild(project)
                self._cache[project] = cached
            return cached

    def _stamp(self, project: str, generation: int, rows: int) -> dict:
        return {"format": FORMAT_VERSION, "project": project, "generation": generation,
                "rows": rows, "schema": self.store.schema_version, "tokenizer": TOKENIZER,
                "bm25": BM25_PARAMS}

    def _load(self, project: str, generation: int) -> LexicalSnapshot | None:
        current = self.root / project / "CURRENT"
        if not current.exists():
            return None
        try:
            live = current.read_text().strip()
            if not live or "/" in live or live.startswith("."):
                raise ValueError(f"CURRENT names {live!r}, not a snapshot")
            snap_dir = self.root / project / live
            stamp = json.loads((snap_dir / "stamp.json").read_text())
            ids = np.load(snap_dir / "ids.npy")
            if stamp != {**self._stamp(project, generation, len(ids)), "files": _digests(snap_dir)}:
                return None  # stale, or its files are not the ones it was stamped with
            retriever = bm25s.BM25.load(str(snap_dir / "bm25")) if (snap_dir / "bm25").exists() else None
        except Exception as exc:  # a damaged snapshot is rebuilt from the rows, never trusted
            log.warning("lexical index for %r is unreadable (%s); rebuilding", project, exc)
            return None
        _sweep(snap_dir.parent, snap_dir.name)
        return LexicalSnapshot(project, generation, ids, retriever)

    def rebuild(self, project: str) -> LexicalSnapshot:
        ids, texts, generation = self.store.index_rows(project)
        tokens = tokenize(texts)
        retriever = None
        if any(tokens):
            retriever = bm25s.BM25(**BM25_PARAMS)
            retriever.index([t or [""] for t in tokens], show_progress=False)
        snap = LexicalSnapshot(project, generation, np.asarray(ids, dtype=np.int64), retriever)
        try:
            self._persist(snap)
        except OSError as exc:  # the index is derived: serve it from memory, rebuild next start
            log.warning("could not save the lexical index for %r (%s); using it unsaved", project, exc)
        return snap

    def _persist(self, snap: LexicalSnapshot) -> None:
        base = self.root / snap.project
        name = f"g{snap.generation}-{uuid.uuid4().hex[:8]}"
        tmp = base / f".{name}.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        np.save(tmp / "ids.npy", snap.ids)
        if snap.retriever is not None:
            snap.retriever.save(str(tmp / "bm25"))
        stamp = {**self._stamp(snap.project, snap.generation, len(snap.ids)), "files": _digests(tmp)}
        (tmp / "stamp.json").write_text(json.dumps(stamp))
        os.replace(tmp, base / name)
        pointer = base / f".CURRENT.{name}"
        pointer.write_text(name)
        if (base / "CURRENT").is_dir():  # damaged beyond reading: a file cannot replace it
            shutil.rmtree(base / "CURRENT")
        os.replace(pointer, base / "CURRENT")  # the swap: readers see the old or the new, whole
        _sweep(base, name)


def _sweep(base: Path, live: str) -> None:
    """Only the store's owner process builds, one build at a time: anything here but the live
    snapshot is an older one or what a build killed half-way left behind."""
    for old in base.iterdir():
        if old.name in ("CURRENT", live):
            continue
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


def _digests(snap_dir: Path) -> dict[str, str]:
    """SHA-256 of every file of a snapshot but its stamp, so a damaged file is noticed at load."""
    return {str(f.relative_to(snap_dir)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(snap_dir.rglob("*")) if f.is_file() and f.name != "stamp.json"}


class Bm25Channel:
    """The lexical candidate channel over a `LexicalIndex`."""

    name = "bm25"

    def __init__(self, index: LexicalIndex) -> None:
        self.index = index

    def search(self, project: str, query: str, k: int, exclude: set[int]) -> list[LexicalHit]:
        return self.index.snapshot(project).search(query, k, exclude)

    def score_units(self, project: str, query: str, ids: list[int]) -> dict[int, float]:
        """BM25 scores of given units (0 for a unit that shares no term with the query)."""
        snap = self.index.snapshot(project)
        if not len(snap.ids) or not ids:
            return {}
        wanted = np.asarray(ids, dtype=np.int64)
        pos = np.clip(np.searchsorted(snap.ids, wanted), 0, len(snap.ids) - 1)
        ok = snap.ids[pos] == wanted
        scores = snap.scores(query)
        return dict(zip(wanted[ok].tolist(), scores[pos[ok]].tolist()))
