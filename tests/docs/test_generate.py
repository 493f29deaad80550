"""The docs' figure tables are rendered from the committed result files and cannot drift."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATE = ROOT / "docs" / "generate.py"


def generate(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GENERATE), "--root", str(root), *args],
                          capture_output=True, text=True, timeout=60)


def copy_of_the_docs(tmp_path: Path) -> Path:
    for name in ("docs", "bench/results"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    return tmp_path


def test_every_generated_table_matches_its_committed_results():
    done = generate(ROOT, "--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_changed_result_makes_the_check_fail_until_the_tables_are_regenerated(tmp_path):
    root = copy_of_the_docs(tmp_path)
    growth = root / "bench" / "results" / "growth-10k-100k.json"
    results = json.loads(growth.read_text())
    results["sizes"]["10000"]["core"]["full"]["p50_ms"] = 4321.0
    growth.write_text(json.dumps(results))
    stale = generate(root, "--check")
    assert stale.returncode == 1 and "performance.md" in stale.stderr
    assert "+| 10,000 |" in stale.stdout and "**4,321**" in stale.stdout
    assert "4,321" not in (root / "docs" / "performance.md").read_text()  # --check writes nothing
    assert generate(root).returncode == 0
    assert "**4,321**" in (root / "docs" / "performance.md").read_text()
    assert generate(root, "--check").returncode == 0


def test_a_hand_edited_table_fails_the_check(tmp_path):
    root = copy_of_the_docs(tmp_path)
    doc = root / "docs" / "performance.md"
    text = doc.read_text()
    start = text.index("<!-- table growth-resources")
    row = text.index("| 10,000 |", start)
    doc.write_text(text[:row] + "| 10,000 | 9,999" + text[text.index(" |", row + 10):])
    assert generate(root, "--check").returncode == 1


def test_a_table_naming_a_missing_file_or_kind_is_an_error_that_names_it(tmp_path):
    root = copy_of_the_docs(tmp_path)
    doc = root / "docs" / "performance.md"
    doc.write_text(doc.read_text() + "\n<!-- table eval docs/results/none.json -->\n<!-- end table -->\n")
    done = generate(root, "--check")
    assert done.returncode != 0 and "performance.md" in done.stderr and "none.json" in done.stderr
    doc.write_text(doc.read_text().replace("table eval docs/results/none.json", "table magic x.json"))
    done = generate(root, "--check")
    assert done.returncode != 0 and "unknown table kind 'magic'" in done.stderr


def _generator():
    spec = importlib.util.spec_from_file_location("generate", GENERATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# a measured figure: a share, a duration, a size or a rate (a setting such as "timeout 5 s" is none)
FIGURE = re.compile(r"(?<![\w.])(?:\d[\d,]*(?:\.\d+)?\s?(?:%|ms|MiB|GiB|units/s|pairs/s)|\d+\.\d+\s?s)(?!\w)")


def test_no_table_of_figures_sits_outside_the_generated_tables():
    generator = _generator()
    for doc in generator.documents(ROOT):
        outside = generator.MARKED.sub("", doc.read_text())
        rows = [line for line in outside.splitlines() if line.startswith("|") and FIGURE.search(line)]
        assert not rows, f"{doc.name}: a table of figures that no result file backs: {rows}"


def test_an_eval_table_of_files_ranked_by_different_rankers_names_each_rows_ranker():
    generator = _generator()
    paths = ["docs/results/coding-holdout.json", "docs/results/coding-holdout-embedder.json"]
    docs = [json.loads((ROOT / p).read_text()) for p in paths]
    both = "\n".join(generator.eval_table(paths, docs, {"variants": "full"}))
    assert "| full (cpu-ranker.json) |" in both and "| full (embedder-ranker.json) |" in both
    one = "\n".join(generator.eval_table(paths[:1], docs[:1], {}))
    assert "| full |" in one and "| rrf |" in one and "ranker.json) |" not in one
