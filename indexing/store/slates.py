"""Saved slate explanations, written off the request path and readable at once.

A recall hands its explanation to a writer thread and returns; `explain_selection` finds it in
memory until the thread has stored it (with whatever else queued meanwhile, in one
transaction). Closing the log stores what is left. Each project keeps its newest
`KEEP_SLATES` explanations."""

from __future__ import annotations

import atexit
import json
import logging
import threading
import weakref
from datetime import datetime, timezone
from typing import Any, Callable

from agentmemrec.indexing.store.protocol import Store

log = logging.getLogger(__name__)
KEEP_SLATES = 500  # per project: the newest slates stay explainable (one is about 200 KB at pool 512)
_running: "weakref.WeakSet[SlateLog]" = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    """A writer thread killed inside DuckDB at interpreter exit aborts the process: stop them first."""
    for slates in list(_running):
        slates.close()


class SlateLog:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._pending: dict[str, tuple[str, datetime, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def save(self, slate_id: str, project: str, payload: dict[str, Any] | Callable[[], dict[str, Any]]) -> None:
        """Queue an explanation; a callable is called on the writer thread (or when read first),
        so building the JSON costs the request nothing."""
        with self._lock:
            self._pending[slate_id] = (project, datetime.now(timezone.utc).replace(tzinfo=None), payload)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agentmemrec-slates", daemon=True)
                self._thread.start()
                _running.add(self)
        self._wake.set()

    def load(self, slate_id: str) -> tuple[str, dict[str, Any]] | None:
        queued = self._resolved(slate_id)
        if queued is not None:  # as it will read once stored: through JSON
            return queued[0], json.loads(json.dumps(queued[2]))
        row = self.store.load_slate(slate_id)
        return (row[0], json.loads(row[1])) if row else None

    def _resolved(self, slate_id: str) -> tuple[str, datetime, dict[str, Any]] | None:
        with self._lock:
            queued = self._pending.get(slate_id)
        if queued is None or not callable(queued[2]):
            return queued
        resolved = (queued[0], queued[1], queued[2]())
        with self._lock:
            if slate_id in self._pending:
                self._pending[slate_id] = resolved
        return resolved

    def flush(self) -> None:
        with self._lock:
            ids = list(self._pending)
        batch = {i: entry for i in ids if (entry := self._resolved(i)) is not None}
        if not batch:
            return
        self.store.save_slates([(i, project, at, json.dumps(payload)) for i, (project, at, payload) in batch.items()],
                               KEEP_SLATES)
        with self._lock:
            for slate_id in batch:
                self._pending.pop(slate_id, None)

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait()
            self._wake.clear()
            try:
                self.flush()
            except Exception:  # kept queued (still readable), stored at the next wake or on close
                log.exception("saving slate explanations failed")

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        _running.discard(self)
        self.flush()
