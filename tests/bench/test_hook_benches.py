"""bench/hook_evidence.py and bench/hook_latency.py run as their docs' commands run them (BM25
alone, no model installed), so the figures they write can be regenerated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agentmemrec.ranking.eval.benchmarks import read_cases

ROOT = Path(__file__).resolve().parents[2]
HOLDOUT = ROOT / "bench" / "coding" / "coding-holdout.json"


def run_bench(script: str, *args: str, home: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True,
                          timeout=600, env={"PATH": "/usr/bin:/bin", "AGENTMEMREC_HOME": str(home)})
    assert done.returncode == 0, done.stderr[-2000:]


def test_hook_evidence_on_each_projects_first_items(tmp_path):
    out = tmp_path / "r.json"
    run_bench("hook_evidence.py", "--coding", str(HOLDOUT), "--coding-first", "20", "--out", str(out), home=tmp_path)
    result = json.loads(out.read_text())
    [case] = read_cases("coding", [HOLDOUT])
    first = {p: {i.get("ref") or i.get("path") for i in items[:20]} for p, items in case.projects.items()}
    expected = [q for q in case.questions if q.answerable and q.evidence <= first[q.project]]
    assert 0 < len(expected) < sum(q.answerable for q in case.questions)
    [bm25] = result["configurations"]
    assert result["coding_first"] == 20 and bm25["configuration"] == "bm25-only"
    assert bm25["queries"] == {"project_questions": len(expected), "project_prompts": 40 * len(case.projects)}


def test_hook_latency_measures_both_hooks(tmp_path):
    conversation = tmp_path / "conv.json"
    turns = [{"speaker": "Ann" if i % 2 else "Bo", "dia_id": f"D1:{i}", "text": f"We moved the {w} job to Kafka."}
             for i, w in enumerate(["billing", "ledger", "email", "search"], 1)]
    conversation.write_text(json.dumps({"sample_id": "c", "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo", "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": turns},
        "qa": [{"question": "Where did the ledger job move?", "answer": "Kafka", "evidence": ["D1:2"], "category": 4}]}))
    out = tmp_path / "r.json"
    run_bench("hook_latency.py", str(conversation), "--rounds", "1", "--out", str(out), home=tmp_path / "home")
    [bm25] = json.loads(out.read_text())["configurations"]
    assert bm25["configuration"] == "bm25-only" and bm25["events"] == 2
    assert bm25["command_hook_all"]["n"] == bm25["http_hook"]["UserPromptSubmit"]["n"] + 1 == 2


def test_adr_reach_counts_what_whole_records_and_excerpts_show(tmp_path):
    adrs = tmp_path / "repo" / "docs" / "adr"
    adrs.mkdir(parents=True)
    context = "\n\n".join(f"Force {i}: the ledger export and the settlement files disagree. " * 12 for i in range(6))
    (adrs / "0001-ledger.md").write_text(f"# 1. Ledger checks\n\n## Status\n\nAccepted\n\n## Context\n\n{context}\n\n"
                                         "## Decision\n\nFlag a ledger row above one cent.\n")
    (adrs / "0002-queue.md").write_text("# 2. Job queue\n\n## Status\n\nAccepted\n\n## Decision\n\nUse SQS.\n")
    out = tmp_path / "r.json"
    run_bench("adr_reach.py", "--adrs", str(tmp_path / "repo"), "--budget", "400", "--digest-budget", "200",
              "--models", str(tmp_path / "none"), "--json", str(out), home=tmp_path)
    [row] = json.loads(out.read_text())["corpora"].values()
    assert (row["decisions"], row["in_force"]) == (2, 2) and row["max_tokens"] > 400
    assert row["whole_records"]["slate"]["400"]["decision_shown"] == 1  # the long one never fits whole
    assert row["excerpts"]["slate"]["400"]["decision_shown"] == 2
    deep = {mode: row[mode]["slate"]["400"] for mode in ("whole_records", "excerpts")}
    assert deep["excerpts"]["deep_queries"] == 1 and (deep["whole_records"]["deep_in_slate"],
                                                      deep["excerpts"]["deep_in_slate"]) == (0, 1)
    assert row["excerpts"]["digest"]["200"]["named"] == 2 and row["whole_records"]["digest"]["200"]["named"] == 1
