"""Peak RSS and throughput of the CPU embedder by tokens per batch (embedder.CPU_TOKENS).

ONNX Runtime's CPU arena keeps the largest batch's activations for the process's life, so each
run is a fresh process: it embeds `--units` synthetic texts (`long`: 200-420 words, every one cut
at the model's 512 tokens; `mixed`: 4-400 words, log-uniform), sorted by length and in calls of
32 as the backfill makes them, and reports units/s and its peak RSS. Runs go round-robin over
the budgets (0: none, batches of 32 whatever their length; 1: one text a batch); medians are
printed. Not a test: machines here are shared, so read ratios, not absolutes.

Each run also embeds every text alone (as a query is) after the timed part and reports the
cosine of its batched vector to that one, lowest and median: an int8 export quantizes its
activations over the whole batch (one scale for the tensor), so a text's vector moves with what
shares its batch, padding included.

    python bench/embed_batches.py --model ~/.local/share/agentmemrec/models/bge-small-en-v1.5 \
        --budgets 0,512,1024 --json bench/results/embed-batches.json
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

WORDS = ("kafka deploy retry cache postgres index shard queue worker latency budget token model vector "
         "the a of we decided to use because migration rollback schema config").split()


def one_run(model: Path, kind: str, budget: int, units: int) -> dict:
    from agentmemrec.indexing.dense import embedder as E
    E.CPU_TOKENS = budget or None
    rng = random.Random(1)
    lens = [rng.randint(200, 420) if kind == "long" else int(2 ** rng.uniform(2, 8.7)) for _ in range(units)]
    texts = sorted((" ".join(rng.choice(WORDS) for _ in range(k)) for k in lens), key=len)
    emb = E.OnnxEmbedder(model, "cpu")
    emb.embed(texts[:2])
    start = time.perf_counter()
    for i in range(0, units, 32):
        emb.embed(texts[i:i + 32])
    rate = units / (time.perf_counter() - start)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    batched = np.concatenate([emb.embed(texts[i:i + 32]) for i in range(0, units, 32)])
    cos = (batched * np.stack([emb.embed([t])[0] for t in texts])).sum(axis=1)
    return {"kind": kind, "budget": budget, "units_per_s": rate, "peak_rss_mib": rss,
            "cos_to_alone_min": float(cos.min()), "cos_to_alone_median": float(np.median(cos))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, required=True, help="an installed embedder's folder")
    p.add_argument("--budgets", default="0,512,1024,2048")
    p.add_argument("--units", type=int, default=96)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", type=Path, help="write the runs and their medians here")
    p.add_argument("--one", nargs=2, metavar=("KIND", "BUDGET"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_run(args.model, args.one[0], int(args.one[1]), args.units)))
        return
    runs: dict[tuple[str, int], list[dict]] = {}
    for _ in range(args.repeats):
        for kind in ("long", "mixed"):
            for budget in map(int, args.budgets.split(",")):
                out = subprocess.run([sys.executable, __file__, "--model", str(args.model), "--units",
                                      str(args.units), "--one", kind, str(budget)], capture_output=True,
                                     text=True, check=True).stdout
                runs.setdefault((kind, budget), []).append(json.loads(out))
    medians = [{"kind": kind, "budget": budget, "runs": len(rs),
                "units_per_s": round(statistics.median(r["units_per_s"] for r in rs), 2),
                "peak_rss_mib": round(statistics.median(r["peak_rss_mib"] for r in rs)),
                "cos_to_alone_min": round(min(r["cos_to_alone_min"] for r in rs), 5),
                "cos_to_alone_median": round(statistics.median(r["cos_to_alone_median"] for r in rs), 5)}
               for (kind, budget), rs in runs.items()]
    for m in medians:
        print(f"{m['kind']:5} tokens/batch {m['budget'] or 'none':>5}: {m['units_per_s']:6.2f} units/s, "
              f"peak RSS {m['peak_rss_mib']:5} MiB, cosine to the text alone {m['cos_to_alone_min']:.4f} "
              f"lowest, {m['cos_to_alone_median']:.5f} median (median of {m['runs']})")
    if args.json:
        from harness import write_result  # noqa: PLC0415 (not in the measured runs' processes)
        write_result(args.json, {"benchmark": "embed_batches", "model": args.model.name, "units": args.units,
                                 "repeats": args.repeats, "medians": medians})


if __name__ == "__main__":
    main()
