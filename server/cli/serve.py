"""`agentmemrec serve` (stdio or HTTP, with the sources that write on their own) and `demo`."""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

from agentmemrec.indexing.errors import InputError, StoreError
from agentmemrec.indexing.segments import INDEX_MEMORY
from agentmemrec.ranking.candidates import DEFAULT_POOL
from agentmemrec.server.cli.common import (
    at_least,
    device_arg,
    inference_arg,
    note_args,
    positive,
    project_args,
    redact_arg,
    rerank_arg,
    source_settings,
    transcript_args,
)
from agentmemrec.server.console import emit
from agentmemrec.server.owner_socket import default_home, owner_pid, private_home
from agentmemrec.server.settings import MAX_REQUEST_BYTES, Settings, watch_folders

log = logging.getLogger("agentmemrec")
STOP_WAIT_S = 30.0  # an owner hands the store back within a call's time; longer is stuck


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    project_args(p, allow=True)
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio; "
                   "every request needs a bearer token from `agentmemrec tokens add`, whose "
                   "projects replace --project/--allow")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address (default: 127.0.0.1 only)")
    p.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    p.add_argument("--max-request-bytes", type=at_least(1), default=MAX_REQUEST_BYTES,
                   help="largest HTTP request body accepted (default: 16 MiB); larger ones get 413")
    p.add_argument("--pool-size", type=at_least(0), default=DEFAULT_POOL,
                   help=f"candidates ranked (default {DEFAULT_POOL}; 0: the whole history)")
    device_arg(p)
    inference_arg(p)
    rerank_arg(p)
    p.add_argument("--index-memory", type=positive, default=INDEX_MEMORY >> 20, metavar="MIB",
                   help=f"memory each index (BM25, dense) keeps for projects' snapshots; the least "
                        f"recently used project's is dropped first (default {INDEX_MEMORY >> 20})")
    p.add_argument("--ranker-model", type=Path, default=None, help="ranker model file (default: shipped)")
    p.add_argument("--watch", action="append", default=[], metavar="DIR",
                   help="keep this folder's notes and ADRs in the project (repeatable)")
    note_args(p)
    redact_arg(p)
    p.add_argument("--capture-claude-code", action="store_true",
                   help="store Claude Code sessions of the served projects as they are written")
    p.add_argument("--claude-dir", type=Path, default=None,
                   help="where Claude Code keeps transcripts (default ~/.claude/projects)")
    transcript_args(p)

    p = sub.add_parser("owner", help="hold the memory store open for hooks, commands and servers "
                       "without serving MCP (`agentmemrec hook` starts one when none runs)")
    p.add_argument("--idle-exit", type=float, default=0, metavar="SECONDS",
                   help="exit after this long without a call from another process, or once the installed "
                        "agentmemrec changes (an upgrade: the next hook starts one with the new code; "
                        "default: never)")
    p.add_argument("--log-file", type=lambda text: Path(text).expanduser().absolute(), default=None,
                   metavar="FILE", help="append the log, and whatever else reaches stderr (a traceback), to "
                                        "FILE, moved to FILE.1 past 1 MiB (default: stderr; the owner a hook "
                                        "starts logs to HOME/owner.log)")
    p.add_argument("--stop", action="store_true",
                   help="stop the process that owns the memory store (one a hook started, or a server) and exit")
    p.add_argument("--pool-size", type=at_least(0), default=DEFAULT_POOL,
                   help=f"candidates ranked (default {DEFAULT_POOL}; 0: the whole history)")
    device_arg(p)

    p = sub.add_parser("demo", help="load a sample history and run recalls through a real MCP client")
    p.add_argument("--home", type=Path, default=None, help="keep the demo store here (default: a temp dir)")
    return {"serve": cmd_serve, "owner": cmd_owner, "demo": cmd_demo}


def serve_settings(args: argparse.Namespace) -> Settings:
    return Settings.load(args.project, args.allow, store=args.store, inference=args.inference,
                         pool_size=args.pool_size, device=args.device,
                         rerank_limit=args.rerank_limit, index_memory_mib=args.index_memory,
                         ranker_model=args.ranker_model, http=args.http,
                         max_request_bytes=args.max_request_bytes, watch=watch_folders(args.watch),
                         capture_claude_code=args.capture_claude_code, **source_settings(args))


def long_lived_collector() -> None:
    """A server's objects are mostly long-lived (modules, models, the indexes' caches): a full pass
    of Python's collector over them cost a recall about 55 ms, every 17 recalls at 10,000 units.
    What exists at start is frozen out of its passes, and young objects are collected less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def cmd_serve(args: argparse.Namespace) -> int:
    from agentmemrec.server.app import create_server  # noqa: PLC0415
    settings = serve_settings(args)
    if settings.store is None:  # a home it cannot use stops it here, not in the server's start
        private_home(settings.home)
    if args.http:
        _check_port(args.host, args.port)
    server = create_server(settings, exit_on_signal=not args.http)
    long_lived_collector()
    if args.http:
        from uvicorn.config import LOGGING_CONFIG  # noqa: PLC0415

        from agentmemrec.server.http_limits import serve_http, warn_if_exposed  # noqa: PLC0415
        warn_if_exposed(args.host, "serve --http")
        # uvicorn writes its access log to stdout: every log line goes to stderr (uvicorn's Config
        # reads this default dictionary)
        LOGGING_CONFIG["handlers"]["access"]["stream"] = "ext://sys.stderr"
        # on a PostgreSQL store a replica keeps no session state, so any replica may take any
        # request (a load balancer needs no sticky sessions)
        app = server.streamable_http_app(stateless_http=settings.store is not None,
                                         max_request_body_size=settings.max_request_bytes, host=args.host)
        try:
            serve_http(app, args.host, args.port, server.settings.log_level.lower())
        except KeyboardInterrupt:  # uvicorn shut down and closed the store, then raised ^C again
            pass
    else:
        server.run("stdio")
    return 0


def _check_port(host: str, port: int) -> None:
    """A port already taken is said before the store opens (uvicorn would say so only after the
    server's startup, among its own log lines)."""
    import socket  # noqa: PLC0415
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port, or stop "
                         "what holds it") from exc


def cmd_owner(args: argparse.Namespace) -> int:
    """Own the store until stopped (SIGTERM, ^C) or idle; if another process owns it, leave."""
    from agentmemrec.server.owner import shared_memory  # noqa: PLC0415
    if args.stop:
        return stop_owner(default_home().expanduser())
    settings = Settings.load(pool_size=args.pool_size, device=args.device)
    if settings.store is not None:
        log.info("a PostgreSQL store has no owner: every process opens it itself (for Claude Code's "
                 "hooks, use serve --http and its http hook; see docs/clients.md)")
        return 0
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before the lock is taken: `owner --stop` may come at once
        signal.signal(sig, lambda *_: stop.set())
    shared = shared_memory(settings).start()
    long_lived_collector()
    try:
        if not shared.is_owner:
            log.info("another process owns the memory store in %s; nothing to do", settings.home)
            return 0
        code = code_stamp()
        log.info("owning the memory store in %s%s", settings.home,
                 f" until {args.idle_exit:.0f} s pass without a call" if args.idle_exit else "")
        while not stop.wait(min(args.idle_exit or 30.0, 30.0) / 2):
            if args.idle_exit and (shared.idle_s or 0.0) >= args.idle_exit:
                log.info("no call for %.0f s: handing the store back", args.idle_exit)
                break
            if args.idle_exit and code_stamp() != code:
                log.info("the installed agentmemrec changed (an upgrade?): handing the store back, so that the "
                         "next call starts an owner with the new code")
                break
    finally:
        shared.close()
    return 0


def code_stamp() -> tuple[int, int]:
    """The installed agentmemrec's files (code and shipped rankers): how many, and the newest one's
    modification time. An upgrade, or a pull into an editable install, changes it."""
    import agentmemrec.indexing  # noqa: PLC0415 - loaded already: where each part is installed
    import agentmemrec.ranking  # noqa: PLC0415
    import agentmemrec.server  # noqa: PLC0415
    times = []
    for part in (agentmemrec.indexing, agentmemrec.ranking, agentmemrec.server):
        for file in Path(part.__file__).parent.rglob("*"):
            if file.suffix in (".py", ".json", ".jsonl") and "__pycache__" not in file.parts:
                with contextlib.suppress(OSError):  # removed meanwhile: an upgrade under way
                    times.append(file.stat().st_mtime_ns)
    return len(times), max(times, default=0)


def stop_owner(home: Path, wait_s: float = STOP_WAIT_S) -> int:
    """Ask the store's owner to leave (SIGTERM: it hands the store back as on an idle exit) and
    wait until it has."""
    pid = owner_pid(home)
    if pid is None:
        emit(f"no process owns the memory store in {home}")
        return 0
    with contextlib.suppress(ProcessLookupError):  # it left on its own meanwhile
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while owner_pid(home) == pid:
        if time.monotonic() > deadline:
            raise StoreError(f"process {pid}, which owns the memory store in {home}, did not stop within "
                             f"{wait_s:.0f} s; stop it with: kill -9 {pid}")
        time.sleep(0.05)
    emit(f"stopped process {pid}, which owned the memory store in {home}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from agentmemrec.server.demo import run_demo  # noqa: PLC0415
    return run_demo(args.home)
