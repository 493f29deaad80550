"""The BM25 channel: one index per project, derived from the store's rows, following every write.

The index holds term frequencies and document lengths (indexing/lexical/postings.py) and scores
at query time with Lucene's BM25 over the live documents, so its scores equal those of bm25s
built from scratch over the same rows. It is a few immutable parts (indexing/segments.py): a
write adds a small part for the changed rows and marks their old rows dead, found through the
store's change log; nothing is re-tokenized. It is saved to disk when a part of
`PERSIST_ROWS` or more appears, stamped with what it was built from; a restart loads it and
catches up from the log. `CURRENT` names the live manifest and is replaced atomically.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from agentmemrec.indexing.lexical.postings import (
    BM25_PARAMS,
    TOKENIZER,
    LexicalHit,
    Postings,
    bm25_idf,
    bm25_norm,
    build_postings,
    merge_postings,
    tokenize,
)
from agentmemrec.indexing.segments import INDEX_MEMORY, Segments, SnapshotCache
from agentmemrec.indexing.store.protocol import Changes, Store
from agentmemrec.indexing.topk import top_rows

log = logging.getLogger(__name__)

FORMAT_VERSION = 3  # 2: a digest of each file; 3: postings in immutable parts
PERSIST_ROWS = 5_000  # a part this large is worth saving; smaller ones are replayed from the log
VOCAB_ENTRY_BYTES = 120  # a term and its dict slot


@dataclass(frozen=True)
class LexicalSnapshot:
    """A read-only BM25 index over one generation of a project's units."""

    project: str
    generation: int
    vocab: dict[str, int]  # shared and append-only: a term id past a part's terms has no postings there
    segments: Segments[Postings]
    total_length: int  # tokens in the live documents
    _last: list = field(default_factory=lambda: [None], compare=False, repr=False)  # (query, scores)

    @property
    def nbytes(self) -> int:
        return self.segments.nbytes + VOCAB_ENTRY_BYTES * len(self.vocab)

    def _terms(self, query: str) -> dict[int, int]:
        """Query term ids with their counts (bm25s adds a repeated query term once per repeat)."""
        counts: dict[int, int] = {}
        for token in tokenize([query])[0]:
            if token in self.vocab:
                counts[self.vocab[token]] = counts.get(self.vocab[token], 0) + 1
        return counts

    def _scores(self, query: str) -> np.ndarray:
        """BM25 of every row of every part laid end to end (dead rows score 0); the last query's
        scores are kept, since a recall asks for them twice."""
        last = self._last[0]
        if last is not None and last[0] == query:
            return last[1]
        segs = self.segments
        out = np.zeros(int(segs.offsets()[-1]), dtype=np.float32)
        n = segs.live
        if n:
            starts, norms = segs.offsets(), self._norms
            for term, count in self._terms(query).items():
                hits = [self._live_postings(i, term) for i in range(len(segs.parts))]
                idf = count * bm25_idf(sum(len(d) for d, _ in hits), n)
                for i, (docs, tfs) in enumerate(hits):
                    if len(docs):
                        out[starts[i] + docs] += (idf * (tfs / (norms[i][docs] + tfs))).astype(np.float32)
        self._last[0] = (query, out)
        return out

    @cached_property
    def _norms(self) -> list[np.ndarray]:
        """Per part, each document's length normalisation: once per snapshot, not per posting
        and query."""
        avg = self.total_length / max(self.segments.live, 1)
        return [bm25_norm(p.lengths, avg, BM25_PARAMS["k1"], BM25_PARAMS["b"]) for p in self.segments.parts]

    def _live_postings(self, i: int, term: int) -> tuple[np.ndarray, np.ndarray]:
        docs, tfs = self.segments.parts[i].postings(term)
        dead = self.segments.dead[i]
        if dead is not None and len(docs):
            live = ~dead[docs]
            return docs[live], tfs[live]
        return docs, tfs

    @cached_property
    def _row_ids(self) -> np.ndarray:
        return np.concatenate([p.ids for p in self.segments.parts]) if self.segments.parts else np.zeros(0, np.int64)

    def _positions(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows (parts laid end to end) of the live units among `ids`, and which of `ids` they are."""
        starts = self.segments.offsets()
        found = self.segments.locate(ids)
        rows = [starts[i] + pos for i, pos, _ in found]
        which = [w for _, _, w in found]
        return (np.concatenate(rows), np.concatenate(which)) if rows else (np.zeros(0, np.int64),) * 2

    def search(self, query: str, k: int, exclude: set[int] | frozenset[int] = frozenset()) -> list[LexicalHit]:
        """Top-k units by BM25 score (ties: lower id first), excluding ineligible ids; zero-score
        units never count."""
        scores = self._scores(query)
        if exclude:
            scores = scores.copy()
            scores[self._positions(np.sort(np.fromiter(exclude, dtype=np.int64)))[0]] = 0.0
        ids = self._row_ids
        order = top_rows(scores, ids, np.flatnonzero(scores > 0), k)
        return [LexicalHit(i, r, s) for r, (i, s) in enumerate(zip(ids[order].tolist(), scores[order].tolist()), 1)]

    def score_units(self, query: str, ids: list[int]) -> dict[int, float]:
        """BM25 scores of given units (0 for a unit that shares no term with the query)."""
        if not ids:
            return {}
        wanted = np.asarray(sorted(set(ids)), dtype=np.int64)
        rows, which = self._positions(wanted)
        return dict(zip(wanted[which].tolist(), self._scores(query)[rows].tolist()))

    @cached_property
    def ids(self) -> np.ndarray:
        """The live unit ids, ascending."""
        rows, _ = self._positions(np.unique(self._row_ids))
        return np.sort(self._row_ids[rows])

    def scores(self, query: str) -> np.ndarray:
        """BM25 of each live unit, in the order of `ids`."""
        rows, which = self._positions(self.ids)
        out = np.zeros(len(self.ids), dtype=np.float32)
        out[which] = self._scores(query)[rows]
        return out

    def without_dead_terms(self) -> "LexicalSnapshot":
        """This snapshot with a new vocabulary in which each term that only dead rows hold (a
        forgotten or rewritten unit's) is replaced by a name no text tokenizes to, keeping its id
        (the parts' columns are by id): a saved vocabulary then no longer holds the words of
        units the store no longer has. Scores do not change (dead rows never score). The snapshot
        itself when no such term is left."""
        alive = np.zeros(len(self.vocab), dtype=bool)
        for part, dead in zip(self.segments.parts, self.segments.dead):
            if dead is None:  # every row live: a term with a posting is alive
                alive[:len(part.indptr) - 1] |= np.diff(part.indptr) > 0
            else:  # live postings per term, from a running count
                live = np.concatenate([[0], np.cumsum(~dead[part.docs], dtype=np.int64)])
                alive[:len(part.indptr) - 1] |= live[part.indptr[1:]] > live[part.indptr[:-1]]
        if all(alive[i] or term.startswith("\x00") for term, i in self.vocab.items()):
            return self  # no word to take out
        return replace(self, vocab={term if alive[i] else f"\x00{i}": i for term, i in self.vocab.items()})

    def advanced(self, changes: Changes) -> "LexicalSnapshot":
        """This snapshot with the changed units' old rows dead and their current rows added."""
        segs = self.segments
        gone = sum(int(segs.parts[i].lengths[pos].sum()) for i, pos, _ in segs.locate(changes.ids))
        added = build_postings(changes.units, self.vocab)
        segs = segs.without(changes.ids).plus(added, merge_postings)
        return LexicalSnapshot(self.project, changes.generation, self.vocab, segs,
                               self.total_length - gone + int(added.lengths.sum()))


class LexicalIndex:
    """Hands out the current snapshot for a project, catching up with the store's writes."""

    def __init__(self, store: Store, root: Path | None, max_bytes: int | None = INDEX_MEMORY) -> None:
        """`root`: where snapshots are saved; None keeps them in memory only (a store that many
        processes share: each catches up from the change log instead). `max_bytes` bounds the
        snapshots kept of all projects (the one in use always stays)."""
        self.store = store
        self.root = Path(root) if root is not None else None
        self._snapshots: SnapshotCache[LexicalSnapshot] = SnapshotCache(
            store.generation, lambda snap: snap.generation,
            lambda project, held: self._advance(project, held or self._load(project)),
            lambda snap: snap.nbytes, max_bytes)

    def snapshot(self, project: str) -> LexicalSnapshot:
        return self._snapshots.get(project)

    @property
    def nbytes(self) -> int:
        """What the snapshots held in memory weigh."""
        return self._snapshots.nbytes

    def loaded(self, project: str) -> bool:
        """Whether a snapshot of the project is held in memory."""
        return project in self._snapshots

    def _advance(self, project: str, snap: LexicalSnapshot | None) -> LexicalSnapshot:
        """Catch up through the change log; rebuild when the log cannot say what changed or when
        more than half the project did."""
        changes = self.store.changes_since(project, snap.generation) if snap is not None else None
        if snap is None or changes is None or len(changes.ids) > max(PERSIST_ROWS, snap.segments.live // 2):
            return self.rebuild(project)
        if changes.generation == snap.generation:
            return snap
        new = snap.advanced(changes)
        newest = new.segments.parts[-1] if new.segments.parts else None
        if newest is not None and len(newest.ids) >= PERSIST_ROWS and newest.name not in self._saved(project):
            self._persist(new)
        return new

    def purge(self, project: str) -> None:
        """After units are forgotten: the saved vocabulary holds every term the project's index has
        met, the forgotten units' among them, so it is saved again without the terms that no live
        row holds any more (`without_dead_terms`); the save sweeps the old files away. Nothing to
        do where nothing is saved."""
        if self.root is None or not (self.root / project / "CURRENT").exists():
            return
        current = self.snapshot(project)
        pruned = current.without_dead_terms()
        if pruned is not current:  # else the saved vocabulary holds no dead word either (it is a prefix)
            def saved() -> LexicalSnapshot:
                self._persist(pruned)
                return pruned
            self._snapshots.replace(project, saved)

    def rebuild(self, project: str) -> LexicalSnapshot:
        """From every row, a chunk of rows per part (memory stays bounded)."""
        vocab: dict[str, int] = {}
        parts: list[Postings] = []
        generation = self.store.scan_units(project, lambda units: parts.append(build_postings(units, vocab)))
        segs = Segments(tuple(parts), (None,) * len(parts))  # one part per chunk: no copy of the whole
        snap = LexicalSnapshot(project, generation, vocab, segs, sum(int(p.lengths.sum()) for p in parts))
        self._persist(snap)
        return snap

    # ---- on disk ----------------------------------------------------------------------------
    # base/CURRENT names the live snapshot directory (its manifest, vocabulary and dead rows);
    # base/parts/ holds the immutable parts, shared by successive snapshots, so a save writes
    # only the parts that are new. The manifest records a digest of every file it relies on.

    def _stamp(self, project: str) -> dict[str, Any]:
        return {"format": FORMAT_VERSION, "project": project, "schema": self.store.schema_version,
                "tokenizer": TOKENIZER, "bm25": BM25_PARAMS}

    def _live(self, project: str) -> tuple[Path, dict[str, Any]] | None:
        """The live snapshot directory and its manifest, or None when there is none yet."""
        if self.root is None:
            return None
        base = self.root / project
        if not (base / "CURRENT").exists():
            return None
        live = (base / "CURRENT").read_text().strip()
        if not live or "/" in live or live.startswith(".") or live == PARTS:
            raise ValueError(f"CURRENT names {live!r}, not a snapshot")
        return base / live, json.loads((base / live / "manifest.json").read_text())

    def _saved(self, project: str) -> set[str]:
        try:
            live = self._live(project)
        except (OSError, ValueError):
            return set()
        return set(live[1]["parts"]) if live else set()

    def _load(self, project: str) -> LexicalSnapshot | None:
        try:
            live = self._live(project)
            if live is None:
                return None
            snap_dir, manifest = live
            if manifest.get("stamp") != self._stamp(project):
                return None  # built by another version or for another schema
            files = _snapshot_files(snap_dir, manifest)
            if {name: _digest(path) for name, path in files.items()} != manifest["files"]:
                raise ValueError("a file differs from the one the manifest recorded")
            terms = json.loads(files["vocab.json"].read_text())
            parts = []
            for name in manifest["parts"]:
                with np.load(files[f"part-{name}"]) as z:
                    parts.append(Postings(z["ids"], z["lengths"], z["indptr"], z["docs"], z["tfs"], name))
            dead = np.load(files["dead.npz"]) if "dead.npz" in files else {}
            masks = tuple(_mask(dead.get(p.name), len(p.ids)) for p in parts)
        except Exception as exc:  # a damaged index is rebuilt from the rows, never trusted
            log.warning("lexical index for %r is unreadable (%s); rebuilding", project, exc)
            return None
        _sweep(snap_dir.parent, snap_dir.name, set(manifest["parts"]))
        return LexicalSnapshot(project, int(manifest["generation"]), {t: i for i, t in enumerate(terms)},
                               Segments(tuple(parts), masks), int(manifest["total_length"]))

    def _persist(self, snap: LexicalSnapshot) -> None:
        """Save, or keep serving it unsaved (it is derived: the next start rebuilds or replays)."""
        if self.root is None:
            return
        try:
            self._save(snap)
        except OSError as exc:
            log.warning("could not save the lexical index for %r (%s); using it unsaved", snap.project, exc)

    def _save(self, snap: LexicalSnapshot) -> None:
        base = self.root / snap.project
        (base / PARTS).mkdir(parents=True, exist_ok=True)
        for part in snap.segments.parts:
            path = base / PARTS / f"part-{part.name}.npz"
            if not path.exists():
                tmp = base / PARTS / f".part-{part.name}.tmp.npz"
                np.savez(tmp, ids=part.ids, lengths=part.lengths, indptr=part.indptr, docs=part.docs, tfs=part.tfs)
                os.replace(tmp, path)
        name = f"g{snap.generation}-{uuid.uuid4().hex[:8]}"
        tmp = base / f".{name}.tmp"
        tmp.mkdir()
        (tmp / "vocab.json").write_text(json.dumps(list(snap.vocab)))  # insertion order is id order
        dead = {p.name: np.flatnonzero(d) for p, d in zip(snap.segments.parts, snap.segments.dead) if d is not None}
        if dead:
            np.savez(tmp / "dead.npz", **dead)
        manifest = {"stamp": self._stamp(snap.project), "generation": snap.generation,
                    "total_length": snap.total_length, "parts": [p.name for p in snap.segments.parts],
                    "dead": bool(dead)}
        manifest["files"] = {n: _digest(f) for n, f in _snapshot_files(tmp, manifest).items()}
        (tmp / "manifest.json").write_text(json.dumps(manifest))
        os.replace(tmp, base / name)
        pointer = base / f".CURRENT.{name}"
        pointer.write_text(name)
        if (base / "CURRENT").is_dir():  # damaged beyond reading: a file cannot replace it
            shutil.rmtree(base / "CURRENT")
        os.replace(pointer, base / "CURRENT")  # the swap: readers see the old or the new, whole
        _sweep(base, name, set(manifest["parts"]))


PARTS = "parts"


def _snapshot_files(snap_dir: Path, manifest: dict[str, Any]) -> dict[str, Path]:
    """Every file a snapshot relies on, by the name its manifest records it under."""
    files = {"vocab.json": snap_dir / "vocab.json"}
    if manifest["dead"]:
        files["dead.npz"] = snap_dir / "dead.npz"
    for name in manifest["parts"]:
        files[f"part-{name}"] = snap_dir.parent / PARTS / f"part-{name}.npz"
    return files


def _digest(path: Path) -> str:
    """SHA-256 of a file, so a damaged one is noticed at load instead of scoring wrong."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sweep(base: Path, live: str, parts: set[str]) -> None:
    """Only the store's owner process builds, one save at a time: anything here but the live
    snapshot and its parts is an older snapshot or what a save killed half-way left behind."""
    for old in base.iterdir():
        if old.name in ("CURRENT", live, PARTS):
            continue
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)
    for old in (base / PARTS).iterdir() if (base / PARTS).is_dir() else ():
        if old.name.removeprefix("part-").removesuffix(".npz") not in parts:
            old.unlink(missing_ok=True)


def _mask(dead_rows: np.ndarray | None, n: int) -> np.ndarray | None:
    if dead_rows is None:
        return None
    mask = np.zeros(n, dtype=bool)
    mask[dead_rows] = True
    return mask


class Bm25Channel:
    """The lexical candidate channel over a `LexicalIndex`."""

    name = "bm25"

    def __init__(self, index: LexicalIndex) -> None:
        self.index = index

    def search(self, project: str, query: str, k: int, exclude: set[int]) -> list[LexicalHit]:
        return self.index.snapshot(project).search(query, k, exclude)

    def score_units(self, project: str, query: str, ids: list[int]) -> dict[int, float]:
        """BM25 scores of given units (0 for a unit that shares no term with the query)."""
        return self.index.snapshot(project).score_units(query, ids)

    def purge(self, project: str) -> None:
        self.index.purge(project)
