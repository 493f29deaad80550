"""How much of the exact dense top 512 the dense graph of a large project finds (indexing/dense/ann.py).

    python bench/ann_recall.py --json bench/results/ann-recall.json

The stored vectors are real: every turn of LongMemEval-S and LoCoMo (../shared/data) embedded by
the default CPU embedder (bge-small-en-v1.5, int8), through an embedding cache under --home, so
a second run does not pay for the model. The queries are the datasets' questions, embedded by the
same model. Sizes: the real vectors alone (74,866), and --sizes made from them (100,000 and
1,000,000): the real vectors and jittered copies of them (Gaussian noise of norm --jitter,
normalised again), which keeps the clusters real text forms; the store_growth benchmark's stand-in vectors are random, and a
graph over random points says nothing about one over embeddings.

For each size the graph is built by the product's code (`ProjectAnn.build`, the parameters it
ships with), then each query asks it for the channel's depth (1,024 at the default pool) and the
result is read back with exact cosines, as `DenseSnapshot.search` does. Reported: recall@512 and
@100 against the exact product (mean and 5th percentile), the graph's search p50 in ms beside the
exact product's (float32, one thread, and over float16 rows, which is what a large project's
search costs while its graph builds), its build seconds and its bytes in memory.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from harness import timed, write_result  # noqa: E402
from store_growth import ensure_models, log  # noqa: E402

from agentmemrec.indexing.dense.ann import EXPANSION_SEARCH, ProjectAnn  # noqa: E402
from agentmemrec.indexing.dense.index import single_threaded_blas  # noqa: E402
from agentmemrec.indexing.store.embedding_cache import EmbeddingCache  # noqa: E402
from agentmemrec.indexing.store.protocol import Vectors  # noqa: E402
from agentmemrec.indexing.units import Unit, validate_batch  # noqa: E402
from agentmemrec.ranking.eval.benchmarks import read_cases  # noqa: E402
from agentmemrec.ranking.loading import load_embedder  # noqa: E402

DEPTH = 1024  # what the dense channel asks for at the default pool of 512
HALF_QUERIES = 20  # the float16 product is slow: fewer queries time it


def texts_and_questions(data: Path) -> tuple[list[str], list[str]]:
    """Each distinct turn as the dense channel sees it (Unit.index_text), and each question."""
    texts, questions = {}, []
    for dataset, folder in (("longmemeval", "longmemeval-s"), ("locomo", "locomo")):
        for case in read_cases(dataset, [data / folder]):
            for items in case.projects.values():
                for item in validate_batch(items):
                    unit = Unit(0, "p", item.kind, item.text, 0, item.at, 0, speaker=item.speaker,
                                title=item.title, path=item.path)
                    texts.setdefault(unit.index_text(), None)
            questions += [q.text for q in case.questions]
    return list(texts), questions


def embed(models_home: Path, texts: list[str]) -> np.ndarray:
    embedder = load_embedder(models_home)
    cache = EmbeddingCache(models_home / "cache" / "embeddings.duckdb")
    batch = 256
    def compute(indices: list[int]) -> np.ndarray:
        out = []
        for start in range(0, len(indices), batch):
            out.append(embedder.embed([texts[i] for i in indices[start:start + batch]]))
            log(f"  embedded {start + batch:,} of {len(indices):,}")
        return np.concatenate(out)
    vectors = cache.through(embedder.identity, texts, compute, embedder.dim)
    cache.close()
    return vectors


def jittered(real: np.ndarray, size: int, jitter: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((size, real.shape[1]), dtype=np.float32)
    out[:len(real)] = real
    for start in range(len(real), size, len(real)):
        n = min(len(real), size - start)
        noise = rng.standard_normal((n, real.shape[1])).astype(np.float32)
        noise *= jitter / np.linalg.norm(noise, axis=1, keepdims=True)
        block = real[:n] + noise
        out[start:start + n] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def measure(matrix: np.ndarray, queries: np.ndarray) -> dict[str, Any]:
    ids = np.arange(len(matrix), dtype=np.int64)
    graph = ProjectAnn("bench", matrix.shape[1], None)
    t0 = time.perf_counter()
    graph.build((0, 0), [Vectors(ids, matrix)], [None], lambda key: None)
    build_s = time.perf_counter() - t0
    recall512, recall100, graph_ms, exact_ms = [], [], [], []
    for q in queries:
        t0 = time.perf_counter()
        found = graph.nearest(q, DEPTH)
        graph_ms.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        exact = matrix @ q
        top = np.argpartition(-exact, 511)[:512]
        exact_ms.append(time.perf_counter() - t0)
        truth = top[np.argsort(-exact[top])]
        read = found[np.argsort(-exact[found])]  # the graph's units, by their exact cosines
        recall512.append(len(set(read[:512].tolist()) & set(truth.tolist())) / 512)
        recall100.append(len(set(read[:100].tolist()) & set(truth[:100].tolist())) / 100)
    half = matrix.astype(np.float16)  # the rows of a large project's snapshot, searched exactly while its graph builds
    half_ms = [timed(lambda: half @ q) for q in queries[:HALF_QUERIES]]
    return {"vectors": len(matrix), "queries": len(queries), "build_s": round(build_s, 1),
            "exact_float16_p50_ms": round(1000 * float(np.median(half_ms)), 2),
            "graph_mib": round(graph._index.memory_usage / 2**20, 1),
            "recall_at_512": round(float(np.mean(recall512)), 4),
            "recall_at_512_p5": round(float(np.percentile(recall512, 5)), 4),
            "recall_at_100": round(float(np.mean(recall100)), 4),
            "graph_search_p50_ms": round(1000 * float(np.median(graph_ms)), 2),
            "exact_p50_ms": round(1000 * float(np.median(exact_ms)), 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path("../shared/data"))
    p.add_argument("--home", type=Path, default=Path.home() / ".cache" / "agentmemrec-bench" / "ann")
    p.add_argument("--sizes", default="100000,1000000", help="jittered sizes, comma-separated ('': none)")
    p.add_argument("--jitter", type=float, default=0.5, help="norm of the noise added to a copy")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    single_threaded_blas()
    ensure_models(args.home, "default")
    texts, questions = texts_and_questions(args.data)
    log(f"{len(texts):,} distinct turns, {len(questions):,} questions")
    real = embed(args.home, texts)
    rng = np.random.default_rng(1)
    picked = [questions[i] for i in sorted(rng.choice(len(questions), min(args.queries, len(questions)), replace=False))]
    queries = load_embedder(args.home).embed(picked)
    result: dict[str, Any] = {"command": "python bench/ann_recall.py " + " ".join(sys.argv[1:] if argv is None else argv),
                              "depth": DEPTH, "expansion_search": EXPANSION_SEARCH, "jitter": args.jitter, "sizes": {}}
    for size in [len(real), *(int(n) for n in args.sizes.split(",") if n)]:
        name = "real" if size == len(real) else f"jittered-{size}"
        log(f"{name}: {size:,} vectors")
        result["sizes"][name] = measure(real if size == len(real) else jittered(real, size, args.jitter), queries)
        log(f"  {result['sizes'][name]}")
    if args.json:
        write_result(args.json, result)
    sys.stdout.write(json.dumps(result["sizes"], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
