"""pgvector HNSW (a partial index per project) against the dense channel's in-memory exact search.

    python tests/pg_server.py start /tmp/pg-bench            # or any PostgreSQL with pgvector
    nice -n 10 python bench/pgvector_hnsw.py --pg postgresql://postgres@127.0.0.1:PORT/postgres \\
        --sizes 100000,1000000 --json bench/results/pgvector-hnsw.json

For each size N, project `big` holds N vectors of 384 dimensions and project `other` N/10, as
float16 (what both stores keep). The vectors are clustered (2,000 centroids, each vector a
centroid plus noise, unit norm), and each query is a stored vector's centroid plus fresh noise:
nearest neighbours then mean something, as they do for real embeddings, unlike uniform random
vectors. Measured, p50 over the queries:

- exact: the product's dense snapshot (indexing/dense/index.py) loaded from the PostgreSQL store
  (the time to load it is reported), top 512 by inner product;
- hnsw: `CREATE INDEX ... USING hnsw (vec halfvec_ip_ops) WITH (m = 16, ef_construction = 64)
  WHERE project = 'big'` on a table of (project, id, vec), its build time, and top 512 by
  `ORDER BY vec <#> q LIMIT 512` at several hnsw.ef_search values (at least the limit), with
  recall@512 against the exact top 512.

Not a test. One run, on a shared machine: read the ratios, and the load average it reports.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import median  # noqa: E402

from agentmemrec.indexing.dense.index import DenseIndex  # noqa: E402
from agentmemrec.indexing.store.postgres_store import PostgresStore, fresh_schema  # noqa: E402
from agentmemrec.indexing.units import validate_batch  # noqa: E402

DIM, K, CENTROIDS, QUERIES = 384, 512, 2000, 50
EF_SEARCH = (512, 1000)
MODEL = "bench-clustered@1"


class Vocabulary:
    """The clustered vectors: unit i's vector is a function of i alone, so both stores agree."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.centroids = rng.standard_normal((CENTROIDS, DIM)).astype(np.float32)

    def vectors(self, ids: np.ndarray, noise: float = 0.7, salt: int = 1) -> np.ndarray:
        rng = np.random.default_rng(int(ids[0]) * 1_000_003 + salt)
        out = self.centroids[ids % CENTROIDS] + noise * rng.standard_normal((len(ids), DIM)).astype(np.float32)
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float16).astype(np.float32)


class ByIndex:
    """An `Embedder` whose text is a unit number: the dense index embeds queries with it."""

    identity, dim, device = MODEL, DIM, "cpu"

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.vocab.vectors(np.array([int(t.split()[-1]) for t in texts]))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def fill(store: PostgresStore, project: str, n: int, vocab: Vocabulary) -> float:
    """n units through the store's write path, and their vectors through its vector rows."""
    t0 = time.perf_counter()
    rows = store.vectors(MODEL)
    for start in range(0, n, 1000):  # the largest batch a write takes
        count = min(1000, n - start)
        store.write(project, validate_batch([{"kind": "turn", "text": f"{project} unit {start + i}"}
                                             for i in range(count)]))
    done = 0
    for window in rows.pending_windows(project):
        for start in range(0, len(window), 10_000):
            units = window[start:start + 10_000]
            numbers = np.array([int(u.text.split()[-1]) for u in units])
            rows.put(units, vocab.vectors(numbers) if project == "big" else vocab.vectors(numbers, salt=7),
                     [u.content_hash for u in units])
        done += len(window)
        log(f"  {project}: {n:,} units, {done:,} vectors")
    return time.perf_counter() - t0


def exact(store: PostgresStore, vocab: Vocabulary, queries: np.ndarray) -> tuple[dict[str, Any], list[np.ndarray]]:
    index = DenseIndex(store, ByIndex(vocab))
    t0 = time.perf_counter()
    snap = index.snapshot("big")
    load = time.perf_counter() - t0
    times, tops = [], []
    for q in queries:
        t0 = time.perf_counter()
        hits = snap.search(q, K)
        times.append(time.perf_counter() - t0)
        tops.append(np.array([h.unit_id for h in hits]))
    return {"load_s": round(load, 2), "p50_ms": round(1000 * median(times), 2)}, tops


def hnsw(url: str, store: PostgresStore, queries: np.ndarray, truth: list[np.ndarray]) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_vectors (project VARCHAR NOT NULL, id BIGINT NOT NULL, vec halfvec(384))")
        conn.execute("INSERT INTO bench_vectors SELECT u.project, u.id, v.vec FROM units u JOIN vectors v "
                     "ON v.unit_id = u.id AND v.model = %s", [MODEL])
        conn.execute("SET maintenance_work_mem = '2GB'")
        t0 = time.perf_counter()
        conn.execute("CREATE INDEX bench_hnsw_big ON bench_vectors USING hnsw (vec halfvec_ip_ops) "
                     "WITH (m = 16, ef_construction = 64) WHERE project = 'big'")
        build = time.perf_counter() - t0
        out: dict[str, Any] = {"build_s": round(build, 1), "m": 16, "ef_construction": 64, "by_ef_search": {}}
        for ef in EF_SEARCH:
            conn.execute(f"SET hnsw.ef_search = {ef}")
            times, recalls, returned = [], [], []
            for q, want in zip(queries, truth):
                literal = "[" + ",".join(map(repr, q.tolist())) + "]"
                t0 = time.perf_counter()
                got = conn.execute("SELECT id FROM bench_vectors WHERE project = 'big' ORDER BY vec <#> %s::halfvec "
                                   "LIMIT 512", [literal], prepare=False).fetchall()
                times.append(time.perf_counter() - t0)
                recalls.append(len(set(want.tolist()) & {r[0] for r in got}) / K)
                returned.append(len(got))
            out["by_ef_search"][str(ef)] = {"p50_ms": round(1000 * median(times), 2),
                                            "recall_at_512": round(float(np.mean(recalls)), 4),
                                            "rows_returned_min": min(returned)}
        conn.execute("DROP TABLE bench_vectors")
    return out


def one_size(url: str, n: int) -> dict[str, Any]:
    vocab = Vocabulary()
    schema_url = fresh_schema(url)
    store = PostgresStore(schema_url)
    log(f"size {n:,}: writing")
    write_s = fill(store, "big", n, vocab) + fill(store, "other", n // 10, vocab)
    rng = np.random.default_rng(99)
    numbers = rng.integers(0, n, QUERIES)
    queries = vocab.vectors(numbers, salt=3)  # near a stored vector's centroid, not a stored vector
    log(f"size {n:,}: exact search")
    exact_out, truth = exact(store, vocab, queries)
    log(f"size {n:,}: hnsw")
    hnsw_out = hnsw(schema_url, store, queries, truth)
    store.drop()
    return {"units": n, "other_units": n // 10, "write_and_vectors_s": round(write_s, 1),
            "exact": exact_out, "hnsw": hnsw_out,
            "hnsw_over_exact_p50": {ef: round(v["p50_ms"] / exact_out["p50_ms"], 2)
                                    for ef, v in hnsw_out["by_ef_search"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", required=True, help="a PostgreSQL URL with pgvector available")
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    load_start = os.getloadavg()
    runs = [one_size(args.pg, int(s)) for s in args.sizes.split(",")]
    result = {"command": " ".join(["python", "bench/pgvector_hnsw.py", *sys.argv[1:]]), "dim": DIM, "k": K, "queries": QUERIES,
              "load_avg_start": load_start, "load_avg_end": os.getloadavg(), "cpus": os.cpu_count(),
              "runs": runs}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
