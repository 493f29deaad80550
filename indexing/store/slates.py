"""Saved slate explanations, written off the request path and readable at once.

A recall hands its explanation to a writer thread and returns; `explain_selection` finds it in
memory until the thread has stored it (with whatever else queued meanwhile, in one
transaction). Closing the log stores what is left. Each project keeps its newest
`KEEP_SLATES` explanations. At most `MAX_QUEUED` wait: a recall beyond that waits for the writer.

A process killed before its writer ran loses what was queued. So every slate id starts with its
log's instance (4 digits), and before the first id is handed out the instance is recorded in
the store (a row of its own in the slates table, under no project), and again when it closes: an
id of an instance that started and never closed, whose explanation is missing, was lost when
that process stopped. On a store that live processes share (PostgreSQL replicas), a slate
recalled through one replica may be explained through another while the first still holds its
explanation queued: that one waits for it, at most SHARED_WAIT_S, before saying it was lost."""

from __future__ import annotations

import atexit
import json
import logging
import secrets
import threading
import time
import weakref
from datetime import datetime, timezone
from typing import Any, Callable

from agentmemrec.indexing.store.protocol import Store

log = logging.getLogger(__name__)
KEEP_SLATES = 500  # per project: the newest slates stay explainable (one is about 150 KB at pool 512, packed: ranking/explanation.py)
MAX_QUEUED = 64  # explanations waiting for the writer (each holds its recall's pool and features)
QUEUE_WAIT_S = 10.0  # a writer that cannot store for this long is failing: the oldest is dropped
STARTS = ""  # the project under which instances are recorded: no project has an empty name
KEEP_STARTS = 1000  # instances remembered (a start and a close each)
SHARED_WAIT_S = 5.0  # for another live process's queued explanation: its writer stores it within moments
POLL_S = 0.05
_running: "weakref.WeakSet[SlateLog]" = weakref.WeakSet()


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


@atexit.register
def _close_at_exit() -> None:
    """A writer thread killed inside DuckDB at interpreter exit aborts the process: stop them first."""
    for slates in list(_running):
        slates.close()


def _marker(instance: str, event: str) -> str:
    return f"s_{instance}:{event}"  # never a slate id (they are digits), so never explained as one


class SlateLog:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._pending: dict[str, tuple[str, datetime, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._instance: str | None = None
        self._recording = threading.Lock()
        self._flushing = threading.Lock()

    @property
    def instance(self) -> str:
        """The prefix of this log's slate ids, recorded in the store before the first is used."""
        with self._recording:
            while self._instance is None:
                candidate = f"{secrets.randbelow(10 ** 4):04d}"
                if self.store.load_slate(_marker(candidate, "started")) is None:  # not a past one's
                    try:
                        self.store.save_slates([(_marker(candidate, "started"), STARTS, _now(), "{}")], KEEP_STARTS)
                    except Exception as exc:  # a full disk: slates are still served, unexplained
                        log.error("cannot record this process's slates in the store, so their explanations "
                                  "may not be found: %s", exc)
                    self._instance = candidate
            return self._instance

    def lost(self, slate_id: str) -> bool:
        """Whether this id was handed out by another instance on this store that has not closed:
        on a store only one process opens at a time, it stopped without storing what it had queued;
        on a shared one, `load` has waited for it."""
        instance = slate_id[2:6]
        return (instance != self._instance and self.store.load_slate(_marker(instance, "started")) is not None
                and self.store.load_slate(_marker(instance, "closed")) is None)

    def save(self, slate_id: str, project: str, payload: dict[str, Any] | Callable[[], dict[str, Any]]) -> None:
        """Queue an explanation; a callable is called on the writer thread (or when read first),
        so building the JSON costs the request nothing."""
        with self._lock:
            if len(self._pending) >= MAX_QUEUED:
                self._wake.set()
                self._drained.wait_for(lambda: len(self._pending) < MAX_QUEUED, QUEUE_WAIT_S)
            while len(self._pending) >= MAX_QUEUED:
                dropped = next(iter(self._pending))
                del self._pending[dropped]
                log.warning("the explanation of slate %s was dropped: its writer has not stored one "
                            "for %.0f s", dropped, QUEUE_WAIT_S)
            self._pending[slate_id] = (project, _now(), payload)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agentmemrec-slates", daemon=True)
                self._thread.start()
                _running.add(self)
        self._wake.set()

    def load(self, slate_id: str) -> tuple[str, dict[str, Any]] | None:
        queued = self._resolved(slate_id)
        if queued is not None:  # as it will read once stored: through JSON
            return queued[0], json.loads(json.dumps(queued[2]))
        row = self._stored(slate_id)
        return (row[0], json.loads(row[1])) if row else None

    def _stored(self, slate_id: str) -> tuple[str, str] | None:
        """The stored explanation; on a shared store, one another live process may still hold
        queued is waited for (a recall through one replica, explained through another)."""
        deadline, pause = time.monotonic() + SHARED_WAIT_S, POLL_S
        while True:
            # asked before reading: a closing process stores its queue before it says it closed
            elsewhere = self.store.index_dir is None and self.lost(slate_id)
            row = self.store.load_slate(slate_id)
            if row is not None or not elsewhere or time.monotonic() >= deadline:
                return row
            time.sleep(pause)
            pause = min(2 * pause, 0.8)  # a dozen reads in all for an id no process will store

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
        """Store what is queued now; one flush at a time (the writer's, or a caller's that waits
        for it), so nothing is stored twice."""
        with self._flushing:
            with self._lock:
                ids = list(self._pending)
            batch = {i: entry for i in ids if (entry := self._resolved(i)) is not None}
            if not batch:
                return
            self.store.save_slates([(i, project, at, json.dumps(payload))
                                    for i, (project, at, payload) in batch.items()], KEEP_SLATES)
            with self._lock:
                for slate_id in batch:
                    self._pending.pop(slate_id, None)
                self._drained.notify_all()

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
        try:
            self.flush()
            if self._instance is not None:
                self.store.save_slates([(_marker(self._instance, "closed"), STARTS, _now(), "{}")], KEEP_STARTS)
        except Exception as exc:  # the slates were served; only their explanations are lost (a full disk)
            log.error("the explanations of %d slates could not be saved, so explain_selection will not "
                      "find them: %s", len(self._pending), exc)
