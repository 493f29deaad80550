"""Team memory on PostgreSQL: `serve --http` replicas against the embedded DuckDB store.

    python tests/pg_server.py start /tmp/pg-bench   # or any PostgreSQL with pgvector; for the write
                                                    # figures, restarted without its -c fsync=off
    nice -n 10 python bench/team.py --pg postgresql://postgres@127.0.0.1:PORT/postgres \\
        --sizes 10000,100000 --json bench/results/team.json

For each size S, a DuckDB home holds project `main` (S units of bench/history.py's synthetic
coding history) and `peer` (10,000), written through `Memory.remember`, with stand-in vectors
under the default set's embedder identity (bench/store_growth.py builds it the same way);
`agentmemrec migrate --to` copies it into a fresh PostgreSQL schema. Every server is a real
`agentmemrec serve --http` process reached by an MCP client over HTTP with a bearer token, with
the default set's embedder (queries embedded by the real bge-small-en-v1.5) and the shipped
ranker for it, without the cross-encoder (its ~0.3 s a recall on 2 cores would hide what the
stores cost). Measured:

- recall_slate p50/p95 through the embedded store's server and through a PostgreSQL replica,
  both running, the calls alternated query by query (the machine's load falls on both alike);
- catch-up: a new replica process, from its start to its first answered recall_slate on `main`
  (its BM25 index and dense snapshot derived from the rows);
- visibility: a remember acknowledged by one replica, until a recall through another finds it;
- write throughput on a fresh schema: remember batches of --batch turns through 1 replica, then
  3 at once (each its own project, then all one project, where writes queue on the project's
  advisory lock), and through the embedded store's server; these replicas have no embedder (the
  vectors are backfilled apart from the write, locally or by an inference server).

Not a test. One run on a shared machine: read the ratios, and the load averages it reports.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import anyio
import httpx2
import psycopg
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import percentiles, write_result  # noqa: E402
from history import history, queries  # noqa: E402
from store_growth import build_store, ensure_models, fill_vectors, log  # noqa: E402

from agentmemrec.indexing.dense.models import active, models_dir  # noqa: E402
from agentmemrec.indexing.store.postgres_store import fresh_schema  # noqa: E402
from agentmemrec.ranking.candidates import DEFAULT_POOL  # noqa: E402

CLI = [sys.executable, "-m", "agentmemrec.server.cli"]


# ---- processes ------------------------------------------------------------------------------------

def cli(home: Path, *args: str) -> str:
    """An `agentmemrec` command's stdout (it must succeed)."""
    done = subprocess.run([*CLI, *args], env={**os.environ, "AGENTMEMREC_HOME": str(home)},
                          capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"agentmemrec {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done.stdout.strip()


def embedder_only(home: Path, models_home: Path) -> None:
    """The default set's embedder, active alone, in `home` (its folder linked, not copied)."""
    embedder = active(models_home)["embedder"]
    models_dir(home).mkdir(parents=True, exist_ok=True)
    link = models_dir(home) / embedder.name
    if not link.exists():
        link.symlink_to(models_dir(models_home).resolve() / embedder.name, target_is_directory=True)
    (models_dir(home) / "active.json").write_text(json.dumps({"embedder": embedder.name}))


@contextmanager
def server(home: Path, port: int, *extra: str) -> Iterator[str]:
    """`serve --http` on `port` until the block ends; yields its MCP URL once it listens."""
    home.mkdir(parents=True, exist_ok=True)
    logfile = home / f"serve-{port}.log"
    with open(logfile, "w") as err:
        proc = subprocess.Popen([*CLI, "serve", "--http", "--port", str(port), *extra], stderr=err,
                                stdout=subprocess.DEVNULL, env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    try:
        deadline = time.monotonic() + 300
        while "Uvicorn running on" not in logfile.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"serve on {port} did not start: {logfile.read_text()[-2000:]}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(30)


def client(url: str, secret: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=300)
    return Client(streamable_http_client(url, http_client=http))


async def call(c: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await c.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content[0].text}")
    return result.structured_content


# ---- recall, catch-up, visibility -----------------------------------------------------------------

async def first_recall(url: str, secret: str, query: str, started: float) -> float:
    """Seconds from `started` (the process start) to the first answered recall_slate on main."""
    async with client(url, secret) as c:
        await call(c, "recall_slate", query=query, project="main")
    return round(time.perf_counter() - started, 2)


async def alternated(urls: dict[str, str], secret: str, qs: list[str]) -> dict[str, Any]:
    """recall_slate latency through each server, query by query in turn."""
    seconds: dict[str, list[float]] = {name: [] for name in urls}
    async with client(urls["duckdb"], secret) as a, client(urls["replica"], secret) as b:
        clients = {"duckdb": a, "replica": b}
        for q in qs[-2:]:  # warm: indexes loaded, query path compiled
            for c in clients.values():
                await call(c, "recall_slate", query=q, project="main")
        for q in qs:
            for name, c in clients.items():
                t0 = time.perf_counter()
                await call(c, "recall_slate", query=q, project="main")
                seconds[name].append(time.perf_counter() - t0)
    return {name: percentiles(s) for name, s in seconds.items()}


async def visibility(writer: str, reader: str, secret: str, n: int) -> dict[str, Any]:
    """A remember acknowledged by `writer`, until a recall through `reader` has it in its slate:
    the seconds, and how many recalls that took (1: the first recall sent after the
    acknowledgement had it, and the time is that recall's own)."""
    seconds: list[float] = []
    recalls: list[int] = []
    async with client(writer, secret) as w, client(reader, secret) as r:
        for i in range(n):
            word = f"zqvisible{i}x{int(time.time())}"
            await call(w, "remember", project="main", items=[
                {"kind": "turn", "role": "user", "text": f"the {word} flag is set in staging", "session": "bench-visible"}])
            t0, tries = time.perf_counter(), 1
            while word not in (await call(r, "recall_slate", query=word, project="main"))["context"]:
                tries += 1
                if time.perf_counter() - t0 > 30:
                    raise RuntimeError(f"{word} not visible through the other replica after 30 s")
            seconds.append(time.perf_counter() - t0)
            recalls.append(tries)
    return {**percentiles(seconds), "recalls_needed_max": max(recalls),
            "found_by_the_first_recall": sum(t == 1 for t in recalls)}


def bench_size(args: argparse.Namespace, size: int, identity: str) -> dict[str, Any]:
    root = args.home / f"team-{size}"
    shutil.rmtree(root, ignore_errors=True)
    local = root / "local"
    local.mkdir(parents=True)
    out: dict[str, Any] = {"units": size, "peer_units": 10_000, "load_avg_start": os.getloadavg()}
    out["ingest"] = build_store(local, size, None)
    out["backfill_standin"] = fill_vectors(local, identity)
    secret = cli(local, "tokens", "add", "bench", "--projects", "main,peer")
    url = fresh_schema(args.pg)
    t0 = time.perf_counter()
    cli(local, "migrate", "--to", url)
    out["migrate_s"] = round(time.perf_counter() - t0, 1)
    log(f"  migrated {size:,} + 10,000 units in {out['migrate_s']} s")
    for home in (local, root / "replica-0", root / "replica-1"):
        embedder_only(home, args.models_home)
    qs = queries(args.queries, size)
    with server(local, args.port, "--pool-size", str(args.pool)) as duck:
        started = time.perf_counter()
        with server(root / "replica-0", args.port + 1, "--store", url, "--pool-size", str(args.pool)) as rep:
            out["new_replica_listening_s"] = round(time.perf_counter() - started, 2)
            # migrate copied the token's hash: the same secret opens both stores
            out["new_replica_first_recall_s"] = anyio.run(first_recall, rep, secret, qs[0], started)
            log(f"  a new replica listens {out['new_replica_listening_s']} s and answers its first recall "
                f"{out['new_replica_first_recall_s']} s after it starts")
            timed = anyio.run(alternated, {"duckdb": duck, "replica": rep}, secret, qs)
            out["recall_duckdb"], out["recall_replica"] = timed["duckdb"], timed["replica"]
            out["replica_over_duckdb_p50"] = round(timed["replica"]["p50_ms"] / timed["duckdb"]["p50_ms"], 2)
            log(f"  recall_slate: {timed}")
            with server(root / "replica-1", args.port + 2, "--store", url, "--pool-size", str(args.pool)) as other:
                anyio.run(first_recall, other, secret, qs[0], time.perf_counter())
                out["write_visible_elsewhere"] = anyio.run(visibility, rep, other, secret, args.visible)
                log(f"  visible through another replica: {out['write_visible_elsewhere']}")
    out["load_avg_end"] = os.getloadavg()
    return out


# ---- writes ---------------------------------------------------------------------------------------

async def write_through(urls: list[str], secret: str, projects: list[str], batches: int, batch: int,
                        seed: int) -> float:
    """Units a second: one writer per URL, each into its project, all at once, timed from when
    every writer's session is open; fresh items for each call (`seed`), so nothing is unchanged."""
    items = list(history(len(urls) * batches * batch, seed=seed))
    ready, go = [0], anyio.Event()

    async def writer(k: int, url: str) -> None:
        async with client(url, secret) as c:
            await call(c, "recall_slate", query="warm", project=projects[k])  # session and pool opened
            ready[0] += 1
            if ready[0] == len(urls):
                go.set()
            await go.wait()
            mine = items[k * batches * batch:(k + 1) * batches * batch]
            for i in range(batches):
                await call(c, "remember", project=projects[k], items=mine[i * batch:(i + 1) * batch])

    async with anyio.create_task_group() as tg:
        for k, url in enumerate(urls):
            tg.start_soon(writer, k, url)
        await go.wait()
        t0 = time.perf_counter()
    return round(len(items) / (time.perf_counter() - t0))


def bench_writes(args: argparse.Namespace) -> dict[str, Any]:
    root = args.home / "team-writes"
    shutil.rmtree(root, ignore_errors=True)
    url, projects = fresh_schema(args.pg), "w0,w1,w2,shared,local"
    secret = cli(root, "tokens", "add", "bench", "--projects", projects, "--store", url)
    out: dict[str, Any] = {"batch": args.batch, "batches_per_writer": args.batches, "cpus": os.cpu_count(),
                           "load_avg_start": os.getloadavg()}
    run = (args.batches, args.batch)
    with server(root / "r0", args.port, "--store", url) as r0, \
            server(root / "r1", args.port + 1, "--store", url) as r1, \
            server(root / "r2", args.port + 2, "--store", url) as r2:
        out["one_replica_units_per_s"] = anyio.run(write_through, [r0], secret, ["w0"], *run, 11)
        out["three_replicas_own_projects_units_per_s"] = anyio.run(write_through, [r0, r1, r2], secret,
                                                                   ["w0", "w1", "w2"], *run, 12)
        out["three_replicas_one_project_units_per_s"] = anyio.run(write_through, [r0, r1, r2], secret,
                                                                  ["shared"] * 3, *run, 13)
    local = root / "local"
    local_secret = cli(local, "tokens", "add", "bench", "--projects", "local")
    with server(local, args.port + 3) as duck:
        out["duckdb_one_writer_units_per_s"] = anyio.run(write_through, [duck], local_secret, ["local"], *run, 11)
    out["load_avg_end"] = os.getloadavg()
    log(f"  writes: {out}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pg", required=True, help="a PostgreSQL URL with pgvector available")
    p.add_argument("--sizes", default="10000,100000", help="units in project main, comma-separated")
    p.add_argument("--home", type=Path, default=Path.home() / ".cache" / "agentmemrec-bench" / "team")
    p.add_argument("--queries", type=int, default=40, help="distinct queries per latency figure")
    p.add_argument("--visible", type=int, default=20, help="writes whose visibility is timed")
    p.add_argument("--batch", type=int, default=25, help="turns per remember in the write figures")
    p.add_argument("--batches", type=int, default=20, help="remember calls per writer")
    p.add_argument("--pool", type=int, default=DEFAULT_POOL, help="candidate pool (the product's default)")
    p.add_argument("--models-home", type=Path, default=None,
                   help="a home with the default set installed (default: installed under --home)")
    p.add_argument("--port", type=int, default=18760, help="first of four free ports")
    p.add_argument("--json", type=Path, required=True)
    args = p.parse_args()
    args.models_home = args.models_home or args.home / "models-default"
    identity = ensure_models(args.models_home, "default")
    with psycopg.connect(args.pg) as conn:  # durability decides what a write costs
        durability = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in ("fsync", "synchronous_commit")}
    result: dict[str, Any] = {"command": " ".join(["python", "bench/team.py", *sys.argv[1:]]),
                              "models": f"{identity}, shipped ranker, no cross-encoder", "pool": args.pool,
                              "database": durability, "cpus": os.cpu_count(), "load_avg_start": os.getloadavg(),
                              "sizes": []}
    for size in map(int, args.sizes.split(",")):
        log(f"size {size:,}")
        result["sizes"].append(bench_size(args, size, identity))
    log("writes")
    result["writes"] = bench_writes(args)
    result["load_avg_end"] = os.getloadavg()
    write_result(args.json, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
