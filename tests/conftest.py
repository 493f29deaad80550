from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator

import pytest
from mcp import Client

from agentmemrec.ranking.memory import Memory
from agentmemrec.server.app import create_server
from agentmemrec.server.cli import main

from helpers import settings_for


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTMEMREC_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def memory(home: Path) -> Memory:
    mem = Memory.open(home)
    yield mem
    mem.close()


@pytest.fixture
async def client(home: Path) -> AsyncIterator[Client]:
    async with Client(create_server(settings_for(home, "alpha", "beta"))) as c:
        yield c


@pytest.fixture(scope="session")
def minilm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with the real all-MiniLM-L6-v2, exported once per session by `models install`."""
    home = tmp_path_factory.mktemp("models-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("AGENTMEMREC_HOME", str(home))
    try:
        assert main(["models", "install", "all-MiniLM-L6-v2", "--name", "minilm"]) == 0
    finally:
        mp.undo()
    return home
