"""What a `forget` costs once the BM25 index is saved: the store's delete and the vocabulary saved
again without the forgotten words (`LexicalIndex.purge`), against building the index again.

    python bench/forget_cost.py --sizes 10000 100000 --json bench/results/forget-cost.json
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import percentiles, timed, write_result  # noqa: E402

from agentmemrec.ranking.memory import Memory  # noqa: E402

WORDS = [f"w{i}" for i in range(20_000)]


def measure(units: int, forgets: int) -> dict:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        memory = Memory.open(Path(tmp) / "home", background=False)  # BM25 alone: no models in this home
        try:
            for start in tqdm(range(0, units, 1000), desc=f"write {units}", file=sys.stderr):
                memory.remember("p", [{"kind": "turn", "ref": f"t{i}", "session": f"s{i // 50}",
                                       "text": " ".join(rng.choice(WORDS) for _ in range(25))}
                                      for i in range(start, min(start + 1000, units))])
            memory.recall("p", "w1 w2 w3")  # the index is built and saved
            forget = [timed(lambda k=k: memory.forget("p", [f"t{k * 7}"])) for k in range(forgets)]
            index = memory.channels[0].index
            rebuild = [timed(lambda: index.rebuild("p")) for _ in range(3)]
        finally:
            memory.close()
    return {"units": units, "forget": percentiles(forget), "rebuild": percentiles(rebuild)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--forgets", type=int, default=9)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    write_result(args.json, {"rows": [measure(n, args.forgets) for n in args.sizes]})


if __name__ == "__main__":
    main()
