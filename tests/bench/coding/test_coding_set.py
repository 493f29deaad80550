"""The coding-memory benchmark: the committed files are what the generator makes from the
hand-written scenarios, and they hold what the benchmark promises (docs/coding-benchmark.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from agentmemrec.indexing.units import chunk_item, validate_batch
from agentmemrec.ranking.eval.benchmarks import CODING_KINDS, read_cases
from agentmemrec.ranking.features import content_terms

HERE = Path(__file__).resolve().parents[3] / "bench" / "coding"


@pytest.mark.parametrize("name", ["dev", "holdout"])
def test_the_committed_benchmark_is_what_the_generator_makes(tmp_path, name):
    out = tmp_path / f"{name}.json"
    subprocess.run([sys.executable, str(HERE / "generate.py"), "--set", name, "--out", str(out)], check=True,
                   capture_output=True)
    assert out.read_text() == (HERE / f"coding-{name}.json").read_text()


def test_the_development_set_holds_what_the_issue_asks_for():
    data = json.loads((HERE / "coding-dev.json").read_text())
    units = sum(len(chunk_item(item)) for p in data["projects"].values()
                for part in range(0, len(p["items"]), 1000) for item in validate_batch(p["items"][part:part + 1000]))
    kinds = {k: sum(q["kind"] == k for q in data["questions"]) for k in CODING_KINDS}
    assert len(data["projects"]) >= 4 and units >= 1500 and len(data["questions"]) >= 200
    assert all(n >= 30 for n in kinds.values()), kinds
    statuses = {it.get("status") for p in data["projects"].values() for it in p["items"] if it["kind"] == "decision"}
    assert statuses == {"accepted", "proposed", "rejected"}  # superseded follows from `supersedes`
    assert any("supersedes" in it for p in data["projects"].values() for it in p["items"])


@pytest.mark.parametrize("name", ["dev", "holdout"])
def test_every_question_is_labelled_consistently(name):
    data = json.loads((HERE / f"coding-{name}.json").read_text())
    [case] = read_cases("coding", [HERE / f"coding-{name}.json"])  # the reader's own checks pass
    for q in data["questions"]:
        items = {it.get("ref", it.get("path")): it for it in data["projects"][q["project"]]["items"]}
        evidence = [items[r] for r in q["evidence"]]
        assert all(datetime.fromisoformat(it["at"]) <= datetime.fromisoformat(q["as_of"]) for it in evidence), q
        if q["kind"] == "unanswerable":  # only an unconfirmed decision, or nothing at all
            assert all(it["kind"] == "decision" and it["status"] in ("proposed", "rejected") for it in evidence), q
        if q["kind"] == "paraphrase":  # no content word in common with the evidence
            words = set().union(*(content_terms(f"{it.get('title', '')} {it.get('path', '')} {it['text']}")
                                  for it in evidence))
            assert not content_terms(q["text"]) & words, q
        if q["kind"] == "multi":
            assert len(evidence) >= 2, q
    assert len(case.questions) == len(data["questions"])
