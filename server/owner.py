"""Many processes, one store: one owner holds the DuckDB file and the others forward to it.

DuckDB lets a single process open a file read-write, and while it does no other process can open
it at all. So whichever process first takes an exclusive `flock` on `HOME/owner.lock` opens the
store and answers the core's calls on a Unix socket (`HOME/owner.sock`); every other process
forwards its calls there. The kernel drops the lock when the owner exits, however it exits
(SIGKILL included). A follower that finds no owner answering (refused, or the connection closed
without a reply) tries the lock; if it gets it, it opens the store and becomes the owner itself,
otherwise it asks again, all within `OWNER_WAIT_S`. The call it was making is then repeated, which
is safe because writes are idempotent (a ref updates in place, identical content is stored once);
a `forget` or token change whose reply was lost is reported instead, as it may have happened.
"""

from __future__ import annotations

import logging
import os
import socket
import socketserver
import threading
import time
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

from agentmemrec.indexing.errors import InputError, StoreError, StoreLocked
from agentmemrec.indexing.sources.sink import Ingested
from agentmemrec.indexing.store import principals
from agentmemrec.indexing.store.duckdb_store import DatabaseError
from agentmemrec.indexing.store.protocol import SourceRow, WriteResult
from agentmemrec.indexing.units import MAX_BATCH, MAX_TEXT_BYTES
from agentmemrec.ranking import views
from agentmemrec.ranking.memory import Memory, RecallConfig
from agentmemrec.ranking.scrub import redact_stored
from agentmemrec.ranking.slate import Slate
from agentmemrec.server import hook_context, wire
from agentmemrec.server.owner_socket import StoreFile, peer_uid, private_home, same_user, socket_path, take_lock
from agentmemrec.server.settings import Settings

log = logging.getLogger("agentmemrec.owner")

OWNER_WAIT_S = 30.0  # how long a call waits for some process to own the store
OPEN_WAIT_S = 10.0  # a killed owner's DuckDB lock can outlive its flock by a moment
MAX_CONNECTIONS = 32  # calls the owner serves at once, each in a thread of its own
MAX_LINE = MAX_BATCH * (6 * MAX_TEXT_BYTES + 64 * 1024)  # a valid call's longest: every byte JSON-escaped
ANSWER_WAIT_S = 300.0  # a live owner that takes longer than this is stuck (or stopped, ^Z)
REPEATABLE = frozenset({"remember", "ingest", "recall", "explain", "projects", "sources", "tokens.list",
                        "tokens.principal", "hook", "decisions", "kinds", "show", "notes", "redact_stored", "export"})
WRITES = frozenset({"remember", "ingest", "forget", "rename_ref", "tokens.add", "tokens.revoke", "redact_stored"})


@dataclass(frozen=True)
class ModelChoices:
    """What a process chose for the settings that the store's owner applies to every call and
    cannot change per call (its models are loaded once); None: not chosen, whatever the owner runs.
    Redaction and the pool size are decided by the caller for each call instead."""

    device: str | None = None  # a device spec (`cpu`, `cuda:fp16`); `auto` is no choice
    ranker_model: str | None = None  # a ranker model file, resolved; None: the shipped one
    rerank_limit: int | None = None
    inference: str | None = None  # inference server URLs

    @classmethod
    def of(cls, settings: Settings) -> "ModelChoices":
        return cls(None if settings.device == "auto" else settings.device,
                   str(settings.ranker_model.resolve()) if settings.ranker_model else None,
                   settings.rerank_limit, settings.inference)

    def conflicts(self, owner: "ModelChoices", device: str | None, limit: int | None) -> list[str]:
        """The choices of this caller that an owner with `owner`'s choices, its models on
        `device` (`cpu:fp32`) and a cross-encoder scoring `limit` candidates cannot honour."""
        out = []
        if self.device is not None and device is not None:
            asked, _, precision = self.device.partition(":")
            running, _, running_precision = device.partition(":")
            if asked not in ("auto", running) or precision not in ("", "auto", running_precision):
                out.append(f"--device {self.device} (the owner's models run on {device})")
        if self.ranker_model is not None and self.ranker_model != owner.ranker_model:
            out.append(f"--ranker-model {self.ranker_model} (the owner ranks with "
                       f"{owner.ranker_model or 'the shipped model'})")
        if self.rerank_limit is not None and limit is not None and self.rerank_limit != limit:
            out.append(f"--rerank-limit {self.rerank_limit} (the owner's cross-encoder scores {limit})")
        if self.inference is not None and self.inference != owner.inference:
            out.append(f"--inference {self.inference} (the owner's models run {owner.inference or 'in it'})")
        return out


def _operations(memory: Memory) -> dict[str, Callable[..., Any]]:
    store = memory.store
    return {"remember": memory.remember, "ingest": memory.ingest, "recall": memory.recall,
            "explain": memory.explain, "forget": memory.forget, "redact_stored": partial(redact_stored, memory),
            "projects": store.projects, "rename_ref": store.rename_ref, "export": partial(views.export_items, store),
            "sources": lambda project, prefixes, under="": store.sources(project, tuple(prefixes), under),
            "tokens.add": partial(principals.add_token, store),
            "tokens.list": partial(principals.list_tokens, store),
            "tokens.revoke": partial(principals.revoke_token, store),
            "tokens.principal": partial(principals.principal_for, store),
            "hook": partial(hook_context.answer, memory), "decisions": store.decisions,
            "kinds": store.kind_counts, "show": partial(views.show, store), "notes": memory.notes}


class _Handler(socketserver.StreamRequestHandler):
    timeout = 10  # a connected follower sends its request at once; an idle one gives its slot up

    def handle(self) -> None:
        if not same_user(self.connection):
            log.warning("refused a connection from another user")
            return
        line = self.rfile.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:  # never read whole: what is sent beyond the limit is not kept
            self.wfile.write(wire.dumps({"error": "input", "message": f"a request over {MAX_LINE} "
                                         "bytes is more than any valid call needs; it was not read"}))
            self._discard_rest()
        elif line.endswith(b"\n"):
            answer = self.server.owner.answer(line)  # type: ignore[attr-defined]
            try:
                self.wfile.write(answer)
            except (BrokenPipeError, ConnectionResetError):  # a hook past its deadline went away
                log.info("a caller went away before its answer was ready")


    def _discard_rest(self) -> None:
        """Read the rest of an oversized line in pieces, keeping none: a socket closed with data
        unread resets the connection, and the caller would lose the reply."""
        try:
            while (piece := self.rfile.read1(1 << 16)) and not piece.endswith(b"\n"):
                pass
        except OSError:  # it stopped sending (the handler's timeout) or went away
            pass


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = True  # closing waits for the calls in flight to be answered

    def __init__(self, path: Path, owner: "_Owner") -> None:
        self.owner = owner
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        path.unlink(missing_ok=True)  # a dead owner's socket; we hold the lock, so nobody uses it
        super().__init__(str(path), _Handler)
        os.chmod(path, 0o600)

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread per connection, at most MAX_CONNECTIONS at once: the next one waits here for
        a thread to finish, and the ones after it in the kernel's backlog (a full backlog refuses
        a connection, and a follower then asks again)."""
        self.slots.acquire()
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Owner:
    """The owning process's side: the lock, the open store and the socket serving it."""

    def __init__(self, lock_fd: int, memory: Memory, path: Path, choices: ModelChoices) -> None:
        self.lock_fd, self.memory, self.path, self.choices = lock_fd, memory, path, choices
        self.ops, self.file = _operations(memory), StoreFile.of(memory.store)
        self.last_call = time.monotonic()  # when another process last asked (`agentmemrec owner` idles out)
        self.server = _Server(path, self)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), name="agentmemrec-owner",
                         daemon=True).start()

    def run(self, op: str, args: Sequence[Any], caller: ModelChoices | None = None) -> Any:
        if op == "recall" and caller is not None:
            self._check(caller)
        try:
            if op in WRITES and self.file is not None:  # acknowledged only if it reached the file at the path
                return self.file.guard(self.ops[op], *args)
            return self.ops[op](*args)
        except DatabaseError as exc:
            raise StoreError(f"the memory store failed: {exc}") from exc

    def _check(self, caller: ModelChoices) -> None:
        """Refuse, never silently replace, a setting of the caller's that these models cannot honour."""
        conflicts = caller.conflicts(self.choices, *self.memory.runs_on())
        if conflicts:
            raise StoreError(f"the memory store in {self.path.parent} is served by process {os.getpid()}, "
                             f"which cannot honour this process's {'; '.join(conflicts)}. One process "
                             "runs the models of a store: start this one with the owner's settings, or "
                             f"stop process {os.getpid()} so that this one owns the store")

    def answer(self, line: bytes) -> bytes:
        self.last_call = time.monotonic()
        try:
            op, args, caller = wire.request(line, self.ops, [f.name for f in fields(ModelChoices)])
            caller = None if caller is None else ModelChoices(**caller)
            return wire.dumps({"ok": wire.encode(op, self.run(op, args, caller))})
        except Exception as exc:  # every failure goes back to the caller, typed
            if not isinstance(exc, (InputError, StoreError)):
                log.exception("a forwarded call failed")
            return wire.dumps(wire.error_reply(exc))

    def close(self) -> None:
        """Hand the store back: stop taking calls, tell the queued ones to ask again, finish the
        ones in flight, and only then close the store and drop the lock."""
        self.server.shutdown()
        self.path.unlink(missing_ok=True)  # before the lock goes: the next owner binds afresh
        self._turn_away_queued()
        self.server.server_close()
        self.memory.close()
        os.close(self.lock_fd)

    def _turn_away_queued(self) -> None:
        self.server.socket.setblocking(False)
        while True:
            try:
                conn, _ = self.server.socket.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.sendall(wire.dumps({"moved": True}))
                except OSError:
                    pass


class _Direct(_Owner):
    """A store every process opens itself (PostgreSQL): no lock and no socket; calls run here."""

    def __init__(self, memory: Memory) -> None:
        self.memory, self.ops, self.file = memory, _operations(memory), None

    def close(self) -> None:
        self.memory.close()


class _StoreCalls:
    """The two store reads and writes a source needs, forwarded like every other call."""

    def __init__(self, shared: "SharedMemory") -> None:
        self.shared = shared

    def sources(self, project: str, ref_prefixes: tuple[str, ...], path_prefix: str = "") -> list[SourceRow]:
        return self.shared.call("sources", project, list(ref_prefixes), path_prefix)

    def rename_ref(self, project: str, old_ref: str, new_ref: str, path: str | None) -> list[int]:
        return self.shared.call("rename_ref", project, old_ref, new_ref, path)


def shared_memory(settings: Settings, one_shot: bool = False,
                  at_close: Callable[[Memory], None] | None = None) -> SharedMemory:
    """The store as these settings use it: models on their device, their ranker, their redaction
    (a process that forwards to another owner asks it for the same, or is refused). A `one_shot`
    command (`ls`, `import`) that comes to own the store neither warms its indexes, embeds in the
    background nor compiles the ranker: it exits first. `at_close`: see `SharedMemory`."""
    config = RecallConfig(pool_size=settings.pool_size)

    def opener() -> Memory:
        memory = Memory.open(settings.home, config, settings.device, background=False, redact=settings.redact,
                             ranker_model=settings.ranker_model, rerank_limit=settings.rerank_limit,
                             store_url=settings.store, index_memory=settings.index_memory_mib << 20,
                             inference=settings.inference, inference_token=settings.inference_token)
        if one_shot:
            return memory
        memory.start_embedding(warm=settings.project)  # its indexes load first; the backfill follows
        if settings.compile_ranker:
            memory.compile_ranker()
        return memory
    return SharedMemory(settings.home, config, opener=opener, redact=settings.redact,
                        shared_store=settings.store is not None, choices=ModelChoices.of(settings),
                        at_close=at_close)


class _Unanswered(Exception):
    def __init__(self, sent: bool) -> None:
        super().__init__("sent, no reply" if sent else "not delivered")
        self.sent = sent  # the owner may have acted on it


class SharedMemory:
    """The core's interface (remember, recall, explain, forget) on a store that any number of
    processes use at once. Thread-safe; `start` in a lifespan, `close` in its `finally`."""

    def __init__(self, home: Path, config: RecallConfig = RecallConfig(),
                 wait_s: float = OWNER_WAIT_S, opener: Callable[[], Memory] | None = None,
                 redact: bool = True, shared_store: bool = False,
                 choices: ModelChoices = ModelChoices(),
                 at_close: Callable[[Memory], None] | None = None) -> None:
        """`shared_store`: the opener opens a store that every process opens itself (PostgreSQL),
        so this process never owns or forwards; the owner lock and socket are DuckDB's."""
        self.home = Path(home).resolve()
        self.shared_store = shared_store
        self.config = config
        self.wait_s = wait_s
        self.opener = opener or partial(Memory.open, self.home, config)  # used when this process owns
        self.redact = redact  # every write says whether to redact: an owner may not
        self.choices = choices
        self.at_close = at_close  # run on the memory before the owner closes it
        self.store = _StoreCalls(self)  # what the note watcher reads and renames through
        self._owner: _Owner | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def is_owner(self) -> bool:
        return self._owner is not None

    @property
    def idle_s(self) -> float | None:
        """Seconds since another process last called this owner; None when not the owner."""
        owner = self._owner
        return None if owner is None else time.monotonic() - owner.last_call

    def start(self, raise_errors: bool = False) -> "SharedMemory":
        """Own the store now if no process does. A store that cannot be opened is logged, not
        raised, so a server stays up and every call reports it until it is fixed; a command
        (`raise_errors`) says it once and stops."""
        try:
            self._try_own()
        except StoreError as exc:
            if raise_errors:
                raise
            log.error("%s", exc)
        return self

    def close(self) -> None:
        with self._lock:
            self._closed = True
            owner, self._owner = self._owner, None
        if owner is not None:
            try:
                if self.at_close is not None:
                    self.at_close(owner.memory)
            finally:
                owner.close()

    # ---- the core's interface -----------------------------------------------------------------

    def remember(self, project: str, raw_items: list[dict[str, Any]]) -> list[WriteResult]:
        return self.call("remember", project, raw_items, self.redact)

    def recall(self, project: str, query: str, budget: int = 2700, as_of: datetime | str | None = None) -> Slate:
        return self.call("recall", project, query, budget, as_of, self.config.pool_size)

    def explain(self, slate_id: str, allowed: set[str] | frozenset[str], refs: Sequence[str] = (),
                others: int | None = None) -> dict[str, Any]:
        return self.call("explain", slate_id, sorted(allowed), list(refs), others)

    def forget(self, project: str, refs: list[str]) -> list[int]:
        return self.call("forget", project, refs)

    def ingest(self, project: str, raw_items: list[dict[str, Any]]) -> Ingested:
        return self.call("ingest", project, raw_items, self.redact)

    def projects(self) -> dict[str, int]:
        return self.call("projects")

    # ---- routing ------------------------------------------------------------------------------

    def call(self, op: str, *args: Any) -> Any:
        """Run one operation where the store is open: here if this process owns it, else on the
        owner; when the owner is gone, take over or wait for whoever does, then run it there."""
        deadline = time.monotonic() + self.wait_s
        delay = 0.005
        while True:
            owner = self._owner
            if owner is not None:
                return owner.run(op, args)  # its own choices: opened with them
            if self.shared_store:
                self._try_own()  # a store that cannot be opened raises here
                continue
            try:
                return self._forward(op, args)
            except _Unanswered as exc:
                if exc.sent and op not in REPEATABLE:
                    raise StoreError(f"the process owning the memory store exited during {op}, "
                                     "which may or may not have been applied; check, then retry"
                                     ) from exc
                if exc.sent:
                    log.warning("the store's owner exited during %s; repeating it", op)
            if self._try_own():
                continue
            if time.monotonic() > deadline:
                raise StoreError(f"no process answered for the memory store in {self.home} "
                                 f"within {self.wait_s:.0f} s; is one stuck?")
            time.sleep(delay)
            delay = min(2 * delay, 0.1)

    def _forward(self, op: str, args: Sequence[Any]) -> Any:
        private_home(self.home)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(str(socket_path(self.home)))
            except OSError as exc:  # no socket, or nobody listening on it any more
                raise _Unanswered(sent=False) from exc
            if not same_user(sock):  # nothing is sent to another user's process
                raise StoreError(f"the socket {socket_path(self.home)} is served by another user "
                                 f"(uid {peer_uid(sock)}); nothing was sent. Remove it, or use a "
                                 "home of your own (set AGENTMEMREC_HOME)")
            sock.settimeout(ANSWER_WAIT_S)
            try:
                sock.sendall(wire.dumps({"op": op, "args": list(args), "caller": asdict(self.choices)}))
                with sock.makefile("rb") as stream:
                    line = stream.readline()
            except TimeoutError as exc:  # alive but not answering: asking again would not help
                raise StoreError(f"the process owning the memory store (its pid is in "
                                 f"{self.home / 'owner.lock'}) did not answer {op} within "
                                 f"{ANSWER_WAIT_S:.0f} s") from exc
            except OSError as exc:
                raise _Unanswered(sent=True) from exc
        if not line.endswith(b"\n"):  # the owner died before it finished answering
            raise _Unanswered(sent=True)
        reply = wire.loads(line)
        if reply.get("moved"):
            raise _Unanswered(sent=False)
        if "error" in reply:
            wire.raise_error(reply)
        return wire.decode(op, reply["ok"])

    def _try_own(self) -> bool:
        with self._lock:
            if self._owner is not None:
                return True
            if self._closed:
                raise StoreError("the memory store has been closed in this process")
            if self.shared_store:
                self._owner = _Direct(self._open())
                return True
            fd = take_lock(self.home)
            if fd is None:
                return False
            try:
                memory = self._open()
                try:
                    self._owner = _Owner(fd, memory, socket_path(self.home), self.choices)
                except BaseException:
                    memory.close()
                    raise
            except BaseException:
                os.close(fd)
                raise
        log.info("process %d now owns the memory store in %s", os.getpid(), self.home)
        return True

    def _open(self) -> Memory:
        deadline = time.monotonic() + OPEN_WAIT_S
        while True:
            try:
                return self.opener()
            except StoreLocked:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
