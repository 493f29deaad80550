"""What `serve --http` says at start, and what it tells a caller it has not authenticated."""

from __future__ import annotations

import os

import httpx2
import pytest

from helpers import http_server

pytestmark = pytest.mark.anyio


async def test_a_server_without_tokens_or_off_the_loopback_says_so_at_start(home):
    async with http_server(home, "--host", "0.0.0.0") as server:
        pass
    said = "\n".join(server.log)
    assert "holds no bearer tokens, so every request gets 401" in said and "agentmemrec tokens add" in said
    assert "listens on 0.0.0.0 over plain HTTP" in said and "reverse proxy with TLS" in said


async def test_a_token_the_store_cannot_check_gets_a_503_that_names_no_path_or_database_error(tmp_path):
    """It said the store's path and DuckDB's error to any caller with any bearer string."""
    home = tmp_path / "damaged"
    home.mkdir()
    (home / "memory.duckdb").write_bytes(os.urandom(100_000))
    async with http_server(home) as server, httpx2.AsyncClient() as http:
        reply = await http.post(server.url, json={}, headers={"Authorization": "Bearer amr_anything"})
    assert reply.status_code == 503 and reply.headers["retry-after"] == "5"
    described = reply.json()["error_description"]
    assert described == "the memory store cannot be reached to check this token; try again shortly"
    assert any(str(home) in line for line in server.log)  # the details are the operator's, in the log
