"""`serve --http` and `models serve` under slow and numerous clients: uvicorn held a connection
that never finished its headers forever, and accepted connections until file descriptors ran
out (then every accept logged a traceback)."""

from __future__ import annotations

import logging
import socket
from contextlib import asynccontextmanager
from typing import AsyncIterator

import anyio
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from agentmemrec.server import http_limits

from helpers import free_port

pytestmark = pytest.mark.anyio


async def hello(_: object) -> PlainTextResponse:
    return PlainTextResponse("hello")


@asynccontextmanager
async def listening() -> AsyncIterator[int]:
    port = free_port()
    server = uvicorn.Server(http_limits.http_config(Starlette(routes=[Route("/", hello)]), "127.0.0.1", port))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve)
        with anyio.fail_after(10):
            while not server.started:
                await anyio.sleep(0.01)
        yield port
        server.should_exit = True


def connect(port: int, first: bytes = b"") -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)  # a held connection fails, not hangs
    conn.sendall(first)
    return conn


def get(port: int) -> bytes:
    with connect(port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") as conn:
        return conn.recv(4096)


async def closed(conn: socket.socket) -> bool:
    """Whether the server closes `conn` (bounded: a server that holds it fails the test)."""
    with anyio.fail_after(10):
        try:
            return await anyio.to_thread.run_sync(conn.recv, 100) == b""
        except ConnectionResetError:
            return True


async def test_a_connection_that_never_finishes_its_headers_is_closed(monkeypatch):
    monkeypatch.setattr(http_limits, "HEADER_TIMEOUT_S", 0.3)
    async with listening() as port:
        silent, partial = connect(port), connect(port, b"POST /mcp HTTP/1.1\r\nHost: x\r\n")
        assert await closed(silent) and await closed(partial)
        keep = connect(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # a whole request, then half of one
        reply = b""
        with anyio.fail_after(10):
            while not reply.endswith(b"hello"):
                reply += await anyio.to_thread.run_sync(keep.recv, 4096)
        keep.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        assert await closed(keep)
        assert b"200 OK" in await anyio.to_thread.run_sync(get, port)


async def test_connections_past_the_limit_are_closed_at_once_and_the_others_served(monkeypatch):
    monkeypatch.setattr(http_limits, "MAX_CONNECTIONS", 8)
    async with listening() as port:
        held = [connect(port) for _ in range(8)]
        assert await closed(connect(port))
        for conn in held[:4]:
            conn.close()
        with anyio.fail_after(10):
            while b"200 OK" not in await anyio.to_thread.run_sync(get, port):
                await anyio.sleep(0.05)  # until the server saw the four close
        for conn in held[4:]:
            conn.close()


def test_a_flood_of_accept_errors_is_logged_once_a_minute_without_tracebacks(caplog):
    log = logging.getLogger("asyncio.test-flood")
    log.addFilter(http_limits.OncePerMinute())
    for _ in range(1000):
        try:
            raise OSError(24, "Too many open files")
        except OSError:
            log.error("socket.accept() out of system resource\nsocket: <socket>", exc_info=True)
    log.error("something else")
    assert [r.getMessage() for r in caplog.records] == ["socket.accept() out of system resource", "something else"]
    assert caplog.records[0].exc_info is None
