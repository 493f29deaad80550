"""Measuring tools for bench/store_growth.py: timing, the stand-in embedder, the baseline scan,
the server's peak memory."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import bm25s
import numpy as np


def percentiles(seconds: list[float]) -> dict[str, float]:
    """p50 / p95 / p99 in milliseconds, and how many samples they come from."""
    ms = np.asarray(seconds, dtype=np.float64) * 1000
    if not len(ms):
        return {"n": 0}
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return {"n": len(ms), "p50_ms": round(float(p50), 2), "p95_ms": round(float(p95), 2),
            "p99_ms": round(float(p99), 2)}


def models_label(models_home: Path | None) -> str:
    """A configuration's name: the models active in `models_home` ("bge-small-en-v1.5 +
    ms-marco-MiniLM-L-12-v2"), or bm25-only when there is none."""
    if models_home is None:
        return "bm25-only"
    active = json.loads((models_home / "models" / "active.json").read_text())
    return " + ".join(name for name in active.values() if name) or "bm25-only"


def write_result(path: Path, result: dict[str, Any]) -> None:
    """A benchmark's JSON result, with the machine it ran on and how busy it was at the end."""
    result = {**result, "machine": {"cpus": os.cpu_count(), "load_1m_end": round(os.getloadavg()[0], 2),
                                    "python": platform.python_version()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_each(fn: Callable[[Any], Any], args: list[Any], budget_s: float | None = None,
              at_least: int = 1, cpu: list[float] | None = None,
              between: Callable[[], Any] | None = None) -> list[float]:
    """Seconds for fn(arg) over the args; stops early (after `at_least`) once `budget_s` is spent.
    With `cpu`, the process's CPU seconds for each call are appended to it (all threads).
    `between` runs after each call, untimed (what the process does before the next request)."""
    out: list[float] = []
    start = time.perf_counter()
    for arg in args:
        c0 = time.process_time()
        out.append(timed(lambda: fn(arg)))
        if cpu is not None:
            cpu.append(time.process_time() - c0)
        if between is not None:
            between()
        if budget_s is not None and len(out) >= at_least and time.perf_counter() - start > budget_s:
            break
    return out


class StandInEmbedder:
    """A deterministic embedder with the `Embedder` protocol: a unit-norm Gaussian vector seeded by
    the text. It costs microseconds, so a million stored vectors take seconds rather than hours;
    labelled with the real model's identity, the server finds nothing left to embed."""

    def __init__(self, identity: str, dim: int = 384) -> None:
        self.identity, self.dim, self.device = identity, dim, "cpu"

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
            out[i] = np.random.default_rng(seed).standard_normal(self.dim, dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class TimedEmbedder:
    """Wraps an embedder and adds up the time spent inside it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.identity, self.dim, self.device = inner.identity, inner.dim, inner.device
        self.seconds = 0.0
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        out = self.inner.embed(texts)
        self.seconds += time.perf_counter() - t0
        self.texts += len(texts)
        return out


class TimedReranker:
    """Wraps a cross-encoder and records how long each query's scoring took."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seconds = inner, []
        self.identity, self.device, self.limit, self.max_tokens = inner.identity, inner.device, inner.limit, inner.max_tokens

    def score(self, query: str, texts: Any) -> Any:
        t0 = time.perf_counter()
        out = self.inner.score(query, texts)
        self.seconds.append(time.perf_counter() - t0)
        return out


class TimedRanker:
    """A ranker (features + model) that records how long each ranking took."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.seconds = inner, inner.name, []

    def rank(self, candidates: Any, context: Any) -> Any:
        t0 = time.perf_counter()
        out = self.inner.rank(candidates, context)
        self.seconds.append(time.perf_counter() - t0)
        return out

    def __getattr__(self, name: str) -> Any:  # the rest of the Ranker protocol (strength, model, ...)
        return getattr(self.inner, name)


def baseline_scan(store: Any, project: str, query: str, k: int = 256) -> list[int]:
    """The baseline without the product's caching: read the project's rows from DuckDB, tokenize,
    index with bm25s and score, all for this one query; returns the top-k unit ids."""
    from agentmemrec.indexing.lexical.postings import BM25_PARAMS, tokenize
    rows = store.cursor().execute(
        "SELECT id, concat_ws(chr(10), nullif(speaker, ''), nullif(title, ''), nullif(path, ''), "
        "nullif(heading, ''), text) FROM units WHERE project = ? ORDER BY id", [project]).fetchall()
    retriever = bm25s.BM25(**BM25_PARAMS)
    retriever.index([t or [""] for t in tokenize([r[1] for r in rows])], show_progress=False)
    tokens = [t for t in tokenize([query])[0] if t in retriever.vocab_dict]
    if not tokens:
        return []
    scores = retriever.get_scores(tokens)
    top = np.argsort(-scores, kind="stable")[:k]
    return [rows[i][0] for i in top if scores[i] > 0]


def disk_bytes(home: Path) -> int:
    """The store and its derived indexes (the models folder is not counted)."""
    total = 0
    for root, dirs, files in os.walk(home):
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink() and d != "models"]
        total += sum((Path(root) / f).stat().st_size for f in files)
    return total


def children() -> list[int]:
    """Process ids of this process's children (Linux)."""
    pids: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        text = (task / "children").read_text().split()
        pids.extend(int(p) for p in text)
    return pids


def peak_rss_mib(pid: int | str = "self") -> float:
    """VmHWM, the resident set's high-water mark, in MiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def server_pid(marker: str) -> int | None:
    for pid in children():
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_text():
                return pid
        except OSError:
            continue
    return None


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
