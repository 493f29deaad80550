"""What uvicorn lacks against slow or numerous clients, for `serve --http` and `models serve`.

uvicorn waits forever for a request's headers and accepts connections until the process runs out
of file descriptors; asyncio then logs a traceback at every failed accept (113 MB a minute), and
legitimate requests time out. Here a connection must finish a request's headers within
HEADER_TIMEOUT_S, headers are capped at MAX_HEADER_BYTES, connections beyond `max_connections()`
are closed as they arrive (a request on the last one allowed gets uvicorn's 503), an idle
keep-alive connection is closed after KEEP_ALIVE_S, shutdown waits at most SHUTDOWN_S for open
requests, and each of uvicorn's and asyncio's overload messages is logged once a minute.
Exposure beyond a trusted network still wants a reverse proxy (docs/team.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import time
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5
MAX_HEADER_BYTES = 64 * 1024
SHUTDOWN_S = 10
MAX_CONNECTIONS = 1000
BACKLOG = 128  # connections asyncio accepts at a time, before any is closed for the cap
log = logging.getLogger("agentmemrec")
OVERLOAD_MESSAGES = ("socket.accept() out of system resource", "Exceeded concurrency limit.",
                     "Invalid HTTP request received.")


def max_connections() -> int:
    """MAX_CONNECTIONS, or half the process's file descriptors if that is fewer: the store, the
    models, the log and a backlog's burst need the rest."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_CONNECTIONS if soft == resource.RLIM_INFINITY else max(8, min(MAX_CONNECTIONS, soft // 2))


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for each request's headers (from the
    connection, or from the first byte of a later request on it) and a cap on connections."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        if self.limit_concurrency is not None and len(self.connections) > self.limit_concurrency:
            transport.close()  # its descriptor back at once; uvicorn would hold it until the client left
            return
        self._header_deadline = self.loop.call_later(HEADER_TIMEOUT_S, self._headers_late)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        waiting = self.conn.their_state is h11.IDLE and bool(self.conn.trailing_data[0])
        if waiting and self._header_deadline is None:
            self._header_deadline = self.loop.call_later(HEADER_TIMEOUT_S, self._headers_late)
        elif not waiting and self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None
        super().connection_lost(exc)

    def _headers_late(self) -> None:
        self._header_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


class OncePerMinute(logging.Filter):
    """Each overload message at most once a minute, without its traceback, saying how many were
    dropped since."""

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._dropped: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        message = next((m for m in OVERLOAD_MESSAGES if str(record.msg).startswith(m)), None)
        if message is None:
            return True
        now = time.monotonic()
        if now - self._last.get(message, -self.every_s) < self.every_s:
            self._dropped[message] = self._dropped.get(message, 0) + 1
            return False
        self._last[message] = now
        dropped = self._dropped.pop(message, 0)
        record.msg, record.args = message + (f" ({dropped} more in the last minute)" if dropped else ""), ()
        record.exc_info = record.exc_text = None
        return True


def warn_if_exposed(host: str, what: str, authenticated: bool = True) -> None:
    """Off the loopback interface, say that traffic is plain HTTP (and, for a server without
    authentication, that anyone who reaches it may use it)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        loopback = False
    if loopback:
        return
    log.warning("%s listens on %s over plain HTTP: tokens and memory cross the network unencrypted; "
                "beyond a trusted network put a reverse proxy with TLS in front (docs/team.md)", what, host)
    if not authenticated:
        log.warning("%s has no token: anyone who reaches %s may use it; start it with --token-file or "
                    "AGENTMEMREC_INFERENCE_TOKEN, or bind it to a trusted network only", what, host)


def http_config(app: Any, host: str, port: int, log_level: str = "info") -> uvicorn.Config:
    """uvicorn's configuration for `app` under the limits above."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, http=GuardedH11Protocol,
                          limit_concurrency=max_connections(), timeout_keep_alive=KEEP_ALIVE_S,
                          h11_max_incomplete_event_size=MAX_HEADER_BYTES,
                          timeout_graceful_shutdown=SHUTDOWN_S, backlog=BACKLOG)


def serve_http(app: Any, host: str, port: int, log_level: str = "info") -> None:
    """Run `app` with uvicorn under the limits above, until SIGTERM or ^C."""
    config = http_config(app, host, port, log_level)
    quiet = OncePerMinute()  # added after uvicorn configured its loggers
    for name in ("asyncio", "uvicorn.error"):
        logging.getLogger(name).addFilter(quiet)
    uvicorn.Server(config).run()
