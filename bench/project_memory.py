"""Memory with many projects: the derived indexes and caches stay under their caps.

    python bench/project_memory.py --projects 20 --units 50000 --index-memory 256,0 \
        --json bench/results/project-memory.json

A store under --home holds --projects projects of --units units each (bench/history.py's
synthetic coding history, one seed per project), written through `Memory.remember` in batches
of 1,000, with stored vectors from the stand-in embedder (bench/harness.py; memory depends on the
vectors' size, not on which model made them). Then, for each cap of --index-memory (MiB per
index; 0: no cap, as before the caps existed), a fresh process recalls every project in turn,
--rounds times, through the BM25 and dense channels and the shipped LambdaRank model (queries
embedded by the stand-in too), and records after each recall what the snapshots of each index
weigh, what the unit, session and text-feature caches weigh (`Memory.memory_use`), and the
process's resident set. Not a test: one run, on a shared machine; its load is in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import StandInEmbedder, peak_rss_mib  # noqa: E402
from history import history, queries  # noqa: E402

from agentmemrec.indexing.dense.backfill import embed_pending  # noqa: E402
from agentmemrec.indexing.dense.index import DenseChannel, DenseIndex  # noqa: E402
from agentmemrec.indexing.lexical.index import Bm25Channel, LexicalIndex  # noqa: E402
from agentmemrec.indexing.store.backends import open_store  # noqa: E402
from agentmemrec.ranking.learned import LearnedRanker, RankerModel  # noqa: E402
from agentmemrec.ranking.memory import Memory  # noqa: E402

IDENTITY = "standin@bench"
BATCH = 1000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def open_memory(home: Path, cap_bytes: int | None) -> Memory:
    store = open_store(home)
    dense = DenseIndex(store, StandInEmbedder(IDENTITY), cap_bytes)
    channels = [Bm25Channel(LexicalIndex(store, home / "index" / "bm25", cap_bytes)), DenseChannel(dense)]
    return Memory(store, channels, LearnedRanker(RankerModel.shipped("embedder-ranker.json")), dense=dense)


def build(home: Path, projects: int, units: int) -> dict[str, Any]:
    """Every project through remember, then every vector through the product's backfill."""
    memory = open_memory(home, None)
    t0 = time.perf_counter()
    for p in range(projects):
        items = list(history(units, seed=p))
        for i in range(0, len(items), BATCH):
            memory.remember(f"p{p:02d}", items[i:i + BATCH])
        log(f"  project p{p:02d}: {units:,} units")
    ingest_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    embedded = embed_pending(memory.dense.vectors, memory.dense.embedder)
    memory.close()
    return {"units": projects * units, "ingest_s": round(ingest_s, 1), "embedded": embedded,
            "backfill_s": round(time.perf_counter() - t0, 1)}


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def recall_in_turn(home: Path, projects: int, units: int, rounds: int, cap_mib: int) -> dict[str, Any]:
    """One cap, in this process: every project recalled in turn, the memory read after each."""
    memory = open_memory(home, cap_mib << 20 if cap_mib else None)
    qs = queries(rounds * projects, units)
    trace = []
    for n in range(rounds * projects):
        project = f"p{n % projects:02d}"
        t0 = time.perf_counter()
        memory.recall(project, qs[n])
        use = {k: round(v / 2**20, 1) for k, v in memory.memory_use().items()}
        trace.append({"project": project, "recall_s": round(time.perf_counter() - t0, 2), **use,
                      "rss_mib": round(rss_mib())})
        log(f"  cap {cap_mib} MiB, {project}: {trace[-1]}")
    memory.close()
    peaks = {k: max(t[k] for t in trace) for k in trace[0] if k not in ("project", "recall_s")}
    return {"cap_mib_per_index": cap_mib or None, "recalls": len(trace), "peak_mib": peaks,
            "peak_rss_mib": round(peak_rss_mib()), "trace": trace}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--projects", type=int, default=20)
    p.add_argument("--units", type=int, default=50_000, help="units per project")
    p.add_argument("--rounds", type=int, default=2, help="times every project is recalled")
    p.add_argument("--index-memory", default="256,0", help="caps to run, MiB per index (0: none)")
    p.add_argument("--home", type=Path, default=Path.home() / ".cache" / "agentmemrec-bench" / "projects")
    p.add_argument("--reuse", action="store_true", help="keep a store built by an earlier run")
    p.add_argument("--one-cap", type=int, default=None, help=argparse.SUPPRESS)  # a child's run
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.one_cap is not None:  # in a fresh process, so one cap's memory never counts for another
        print(json.dumps(recall_in_turn(args.home, args.projects, args.units, args.rounds, args.one_cap)))
        return 0
    result: dict[str, Any] = {
        "command": "python bench/project_memory.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "cpus": os.cpu_count(), "load_avg_start": os.getloadavg(), "projects": args.projects,
        "units_per_project": args.units, "rounds": args.rounds}
    built = args.home / "build.json"
    if not (args.reuse and built.exists()):
        args.home.mkdir(parents=True, exist_ok=True)
        for leftover in args.home.iterdir():
            subprocess.run(["rm", "-rf", str(leftover)], check=True)
        log(f"building {args.projects} projects of {args.units:,} units")
        built.write_text(json.dumps(build(args.home, args.projects, args.units)))
    result["build"] = json.loads(built.read_text())
    result["runs"] = []
    for cap in (int(c) for c in args.index_memory.split(",")):
        child = [sys.executable, __file__, "--home", str(args.home), "--projects", str(args.projects),
                 "--units", str(args.units), "--rounds", str(args.rounds), "--one-cap", str(cap)]
        out = subprocess.run(child, check=True, capture_output=True, text=True)
        sys.stderr.write(out.stderr)
        result["runs"].append(json.loads(out.stdout))
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
    result["load_avg_end"] = os.getloadavg()
    for run in result["runs"]:
        print(f"cap {run['cap_mib_per_index'] or 'none'}: peak {run['peak_mib']}, peak RSS {run['peak_rss_mib']} MiB")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
