"""What removing text costs once the BM25 index is saved: a `forget` (the store's delete and the
vocabulary saved again without the forgotten words, `LexicalIndex.purge`), against building the
index again; and `redact` over a store written without redaction, one unit in a thousand holding
a password (a dry run, then the rewrite), window by window as `agentmemrec redact` walks it.

    python bench/scrub_cost.py --sizes 10000 100000 --json bench/results/scrub-cost.json
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
from agentmemrec.ranking.scrub import REDACT_SPAN, redact_in_windows, redact_stored  # noqa: E402

WORDS = [f"w{i}" for i in range(20_000)]


def measure(units: int, forgets: int) -> dict:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        memory = Memory.open(Path(tmp) / "home", background=False, redact=False)  # BM25 alone: no models here
        try:
            for start in tqdm(range(0, units, 1000), desc=f"write {units}", file=sys.stderr):
                memory.remember("p", [{"kind": "turn", "ref": f"t{i}", "session": f"s{i // 50}",
                                       "text": " ".join(rng.choice(WORDS) for _ in range(25))
                                       + (" then docker login -u ci -p Xk9mm2pqQ" if i % 1000 == 7 else "")}
                                      for i in range(start, min(start + 1000, units))])
            memory.recall("p", "w1 w2 w3")  # the index is built and saved
            forget = [timed(lambda k=k: memory.forget("p", [f"t{k * 7 + 1}"])) for k in range(forgets)]
            index = memory.channels[0].index
            rebuild = [timed(lambda: index.rebuild("p")) for _ in range(3)]
            def walk(dry: bool) -> dict:
                return redact_in_windows(lambda after: redact_stored(memory, "p", dry, after, REDACT_SPAN),
                                         lambda n: None)

            dry_run = timed(lambda: walk(True))
            reports: list[dict] = []
            redact = timed(lambda: reports.append(walk(False)))
            left = redact_stored(memory, "p", dry_run=True)["units"]
        finally:
            memory.close()
    return {"units": units, "forget": percentiles(forget), "rebuild": percentiles(rebuild),
            "redact_dry_run_s": round(dry_run, 2), "redact_s": round(redact, 2),
            "redact_span": REDACT_SPAN, "units_redacted": len(reports[0]["units"]), "left_after": len(left)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--forgets", type=int, default=9)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    write_result(args.json, {"rows": [measure(n, args.forgets) for n in args.sizes]})


if __name__ == "__main__":
    main()
