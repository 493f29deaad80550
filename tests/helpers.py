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
                if any("Uvicorn running on http://" in line for line in server.log):
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
        self.query_instruction = ""

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


TOPICS = ["message broker", "cache", "job runner", "search engine", "CI system", "feature flag service"]
BRANDS = ["Zorbix", "Quellon", "Marvex", "Tandril", "Ostrava", "Pelnik", "Wirrow", "Gaskel", "Fendry", "Lumora",
          "Brisko", "Tevlin"]


def write_coding(path, projects=("alpha-api", "beta-api"), seed: int = 0) -> dict:
    """A coding-memory benchmark (docs/coding-benchmark.md) over projects sharing their vocabulary:
    per topic a decision adopted and (for some) replaced, proposed or rejected alternatives, filler
    turns, a file note, and questions of every kind (unanswerable ones included)."""
    import json
    import random
    from datetime import datetime, timedelta
    rng = random.Random(seed)
    data: dict = {"format": "agentmemrec-coding/1", "projects": {}, "questions": []}
    start = datetime(2026, 1, 5, 9)

    def ask(project, kind, text, evidence, as_of):
        data["questions"].append({"id": f"q{len(data['questions'])}", "project": project, "kind": kind,
                                  "text": text, "as_of": as_of.isoformat(), "evidence": evidence})
    for p, project in enumerate(projects):
        items: list = []
        brands = rng.sample(BRANDS, len(BRANDS))
        for t, topic in enumerate(TOPICS):
            day = start + timedelta(days=7 * t)
            a, b, c = brands[(3 * t) % 12], brands[(3 * t + 1) % 12], brands[(3 * t + 2) % 12]
            session = f"{project}-s{t}"
            for i in range(6):
                filler = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16)))
                items.append({"kind": "turn", "ref": f"t{t}.{i}", "session": session, "role": ("user", "assistant")[i % 2],
                              "at": (day + timedelta(minutes=i)).isoformat(), "text": filler})
            items.append({"kind": "turn", "ref": f"t{t}.6", "session": session, "role": "user",
                          "at": (day + timedelta(minutes=7)).isoformat(),
                          "text": f"Let's use {a} as our {topic}; it has the best {rng.choice(WORDS)} support."})
            items.append({"kind": "decision", "ref": f"d{t}", "title": f"{a} as the {topic}",
                          "text": f"We use {a} as the {topic} for {project}.", "status": "accepted",
                          "at": (day + timedelta(minutes=8)).isoformat()})
            current = f"d{t}"
            if t % 2 == 0:
                items.append({"kind": "decision", "ref": f"d{t}b", "title": f"{b} replaces {a}",
                              "text": f"{b} replaces {a} as the {topic}: {a} kept failing under load.",
                              "supersedes": f"d{t}", "at": (day + timedelta(days=3)).isoformat()})
                ask(project, "multi", f"Why did we move from {a} to {b}?", [f"d{t}", f"d{t}b"], day + timedelta(days=5))
                ask(project, "temporal", f"Which {topic} do we use?", [f"d{t}"], day + timedelta(days=1))
                current = f"d{t}b"
            extra = {"kind": "decision", "ref": f"d{t}c", "title": f"{c} as the {topic}", "at": (day + timedelta(days=4)).isoformat(),
                     "text": f"{c} for the {topic}, instead of what we have.", "status": ("proposed", "rejected")[t % 2]}
            items.append(extra)
            items.append({"kind": "note", "path": f"src/{topic.replace(' ', '_')}.py",
                          "text": f"Client code for the {topic}; configured from settings.", "at": day.isoformat()})
            later = day + timedelta(days=6)
            ask(project, "single", f"Which {topic} do we use now?", [current], later)
            ask(project, "status", f"Is {brands[(3 * t) % 12] if t % 2 else b} confirmed as our {topic}?", [current], later)
            ask(project, "paraphrase", f"What did we settle on for the {topic}?", [current], later)
            ask(project, "unanswerable", f"Did we approve {c} for the {topic}?", [f"d{t}c"], later)
            ask(project, "unanswerable", f"Which {topic} did we pick?", [], day - timedelta(days=1))
        ask(project, "unanswerable", "Which payment processor webhook format do we log?", [], start + timedelta(days=60))
        data["projects"][project] = {"items": items}
    path.write_text(json.dumps(data))
    return data
