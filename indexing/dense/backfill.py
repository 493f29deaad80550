"""Embedding what lacks a current vector: in the background for the server, in the foreground
for imports and evaluation, with an optional cache of vectors by text across fresh stores."""

from __future__ import annotations

import logging
import threading
from typing import Callable, Collection

import numpy as np

from agentmemrec.indexing.dense.embedder import BATCH, Embedder
from agentmemrec.indexing.dense.remote import Unreachable
from agentmemrec.indexing.errors import StoreUnavailable
from agentmemrec.indexing.store.embedding_cache import EmbeddingCache
from agentmemrec.indexing.store.protocol import VectorRows
from agentmemrec.indexing.units import Unit

log = logging.getLogger(__name__)
EMBED_BATCH = 256  # units embedded and stored in one transaction: what a recall sees appear at once
WORKER_CALL = 640  # units per background pass before it looks for a write to notice
STOP_WAIT_S = 30.0  # after this, closing says it is still waiting for the batch being embedded


def embed_pending(vectors: VectorRows, embedder: Embedder, project: str | None = None,
                  cache: EmbeddingCache | None = None, limit: int | None = None,
                  progress: Callable[[int], None] | None = None,
                  stop: Callable[[], bool] = lambda: False, only: Collection[int] | None = None) -> int:
    """Embed units that lack a current vector (with `only`, those of them with these ids), in
    batches; returns how many were embedded. On a store that several processes share, one of
    them embeds at a time (the claim): the others return 0 at once and find the vectors stored
    when they next look. `stop` is asked before each model batch: a close waits for one of those
    (a few seconds of long texts on CPU), stores what was embedded and leaves the rest pending."""
    done = 0
    with vectors.claim() as ours:
        if not ours:
            return 0
        for window in vectors.pending_windows(project, only):
            for i in range(0, len(window), EMBED_BATCH):
                if (limit is not None and done >= limit) or stop():
                    return done
                units = _embed_batch(vectors, embedder, window[i:i + EMBED_BATCH], cache, stop)
                done += len(units)
                if progress and units:
                    progress(len(units))
    return done


def _embed_batch(vectors: VectorRows, embedder: Embedder, units: list[Unit], cache: EmbeddingCache | None,
                 stop: Callable[[], bool]) -> list[Unit]:
    """Embed a transaction's units a model batch at a time (similar lengths together, as the
    embedder would group them), until `stop`; store those embedded; returns them."""
    texts = sorted(((u.index_text(), u) for u in units), key=lambda tu: len(tu[0]))
    units = [u for _, u in texts]
    parts: list[np.ndarray] = []
    for i in range(0, len(units), BATCH):
        if i and stop():
            units = units[:i]
            break
        parts.append(_embed_with_cache(embedder, [t for t, _ in texts[i:i + BATCH]], cache))
    if units:
        vectors.put(units, np.concatenate(parts), [u.content_hash for u in units])
    return units


def _embed_with_cache(embedder: Embedder, texts: list[str], cache: EmbeddingCache | None) -> np.ndarray:
    if cache is None:
        return embedder.embed(texts)
    return cache.through(embedder.identity, texts, lambda missing: embedder.embed([texts[i] for i in missing]),
                         embedder.dim)


class EmbeddingWorker:
    """Embeds new units in the background so `remember` never waits for the model."""

    def __init__(self, vectors: VectorRows, embedder: Embedder) -> None:
        self.vectors = vectors
        self.embedder = embedder
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._outage = False  # the store could not be reached at the last pass
        self._thread = threading.Thread(target=self._run, name="agentmemrec-embedder", daemon=True)

    def start(self) -> "EmbeddingWorker":
        self._thread.start()
        self.notify()
        return self

    def notify(self) -> None:
        self._idle.clear()
        self._wake.set()

    @property
    def idle(self) -> bool:
        """Nothing left to embed as of its last pass (and no write since)."""
        return self._idle.is_set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)

    def stop(self) -> None:
        """Stop after the batch in progress and wait for it: the store closes after this."""
        self._stop.set()
        self._wake.set()
        if not self._thread.is_alive():
            return
        self._thread.join(timeout=STOP_WAIT_S)
        if self._thread.is_alive():
            log.warning("closing waits for the background embedder to finish its batch")
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=30)
            self._wake.clear()
            try:
                n = embed_pending(self.vectors, self.embedder, limit=WORKER_CALL, stop=self._stop.is_set)
                if self._outage:
                    log.info("the store answers again: background embedding resumes")
                    self._outage = False
                if n:
                    log.debug("embedded %d units", n)
                    self._wake.set()  # more may be waiting
                    continue
            except Unreachable:  # its client said so once, not at every wake-up; the next one retries
                pass
            except StoreUnavailable as exc:  # an outage: one line for all of it; the next wake-up retries
                if not self._outage:
                    log.warning("background embedding waits for the store: %s", exc)
                self._outage = True
            except Exception:  # keep serving lexically; the next wake-up retries
                log.exception("background embedding failed")
            if not self._wake.is_set():
                self._idle.set()
