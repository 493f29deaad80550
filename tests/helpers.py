"""Helpers shared by the tests: calling tools through a real MCP client."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import sys
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, AsyncIterator

import anyio
import httpx2
import numpy as np
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agentmemrec.server.settings import Settings

SENTENCES = ["The deploy pipeline runs on GitHub Actions.", "We chose Kafka for payment events.",
             "Le chat dort sur le canapé.", "x " * 400]  # what the model tests embed and score

# The suites that must hold on both backends: `store_url` (conftest) is None or a PostgreSQL schema.
BOTH = pytest.mark.parametrize("backend", ["duckdb", "postgresql"], indirect=True)


def settings_for(home: Path, project: str = "alpha", allow: str = "", store: str | None = None) -> Settings:
    return Settings(home=home, project=project, allowed=frozenset({project, *filter(None, allow.split(","))}),
                    store=store)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `serve --http` process: its MCP URL, its pid and what it logged."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pid = 0
        self.log: list[str] = []


@asynccontextmanager
async def serving(home: Path, args: list[str], url: str) -> AsyncIterator[Server]:
    """`agentmemrec ARGS` as a process with its own home, once its HTTP server listens."""
    server = Server(url)
    ready = anyio.Event()
    cmd = [sys.executable, "-m", "agentmemrec.server.cli", *args]
    async with await anyio.open_process(cmd, env={**os.environ, "AGENTMEMREC_HOME": str(home)}) as proc:
        server.pid = proc.pid

        async def read_log() -> None:
            async for chunk in proc.stderr:
                server.log.extend(chunk.decode().splitlines())
                if any("Uvicorn running on http://127.0.0.1:" in line for line in server.log):
                    ready.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read_log)
            with anyio.fail_after(120):
                await ready.wait()
            try:
                yield server
            finally:
                with suppress(ProcessLookupError):  # a test may have killed it
                    proc.terminate()


@asynccontextmanager
async def http_server(home: Path, *extra: str) -> AsyncIterator[Server]:
    port = free_port()
    async with serving(home, ["serve", "--http", "--port", str(port), *extra],
                       f"http://127.0.0.1:{port}/mcp") as server:
        yield server


def mcp_client(url: str, secret: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=30)  # a loaded machine
    return Client(streamable_http_client(url, http_client=http))


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def call_error(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool} should have failed: {result.structured_content}"
    return result.content[0].text


def turn(text: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "turn", "text": text, "role": "user", **extra}


WORDS = ("deploy build cache queue broker latency index schema token budget session review merge branch "
         "release rollback metric alert shard replica lock retry backoff timeout webhook payload").split()
PETS = ["Rex", "Milo", "Luna", "Bella", "Otis", "Nala", "Coco", "Ziggy", "Pixel", "Mochi"]


def write_locomo(path, sessions: int = 8, turns: int = 12, seed: int = 0) -> None:
    """A LoCoMo-format conversation: filler turns plus planted facts asked about, each fact told
    in one session and corrected in a later one (two evidence turns per question)."""
    import json
    import random
    rng = random.Random(seed)
    conv: dict = {"speaker_a": "Ana", "speaker_b": "Bo"}
    facts = []
    for s in range(1, sessions + 1):
        conv[f"session_{s}_date_time"] = f"10:00 am on {s} May, 2023"
        rows = []
        for t in range(1, turns + 1):
            speaker = "Ana" if t % 2 else "Bo"
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20)))
            rows.append({"speaker": speaker, "dia_id": f"D{s}:{t}", "text": text})
        conv[f"session_{s}"] = rows
    for i, pet in enumerate(PETS[: sessions - 1]):
        first, later = 1 + i, min(sessions, 2 + i + rng.randint(0, 2))
        conv[f"session_{first}"][2]["text"] = f"My neighbour's dog is called {pet} and loves the {WORDS[i]}."
        conv[f"session_{later}"][5]["text"] = f"Correction: {pet} is actually a cat, not a dog, said the neighbour."
        facts.append({"question": f"What animal is {pet}, the neighbour's pet?", "answer": "a cat",
                      "evidence": [f"D{first}:3", f"D{later}:6"], "category": 1})
        facts.append({"question": f"What does {pet} love?", "answer": WORDS[i],
                      "evidence": [f"D{first}:3"], "category": 4})
    path.write_text(json.dumps({**conv, "qa": facts}))


class BagOfWords:
    """Hashed bag of lower-cased words: synonyms are invisible, shared words are close."""

    def __init__(self, dim: int = 64, identity: str = "bow@1") -> None:
        self.dim, self.identity, self.device, self.calls = dim, identity, "cpu", 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
