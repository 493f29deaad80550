"""`agentmemrec eval coding`: the coding-memory format read and checked, every slate checked for
leaks and for how it shows decision statuses, metrics per kind and for unanswerable questions."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from agentmemrec.indexing.units import Unit
from agentmemrec.ranking.eval.metrics import Outcome, auroc, slate_violations, summarize
from agentmemrec.ranking.render import SlateInputs
from agentmemrec.ranking.slate import Slate, SlateItem
from agentmemrec.server.cli import main

from helpers import write_coding

T = datetime(2026, 5, 1)


def test_coding_file_runs_end_to_end_with_every_check(home, tmp_path, capsys):
    data = write_coding(tmp_path / "coding.json")
    out = tmp_path / "r.json"
    per_q = tmp_path / "q.jsonl"
    assert main(["eval", "coding", str(tmp_path / "coding.json"), "--budget", "2700", "--json", str(out),
                 "--per-question", str(per_q)]) == 0
    [rec] = json.loads(out.read_text())["records"]
    answerable = [q for q in data["questions"] if q["kind"] != "unanswerable"]
    assert rec["questions"] == len(answerable)
    assert set(rec["by_category"]) == {"single", "multi", "status", "temporal", "paraphrase", "unanswerable"}
    assert rec["multi_evidence_questions"] == sum(len(q["evidence"]) >= 2 for q in answerable)
    assert rec["leaked_questions"] == [] and rec["misshown_questions"] == [] and rec["orphaned_questions"] == []
    unanswerable = rec["unanswerable"]
    assert unanswerable["questions"] == len(data["questions"]) - len(answerable)
    assert unanswerable["with_unconfirmed_decision"] == sum(
        1 for q in data["questions"] if q["kind"] == "unanswerable" and q["evidence"])
    assert rec["evidence_strength_auroc"] is None  # bm25 alone has no calibrated strength
    records = [json.loads(line) for line in per_q.read_text().splitlines()]
    assert {r["project"] for r in records} == {"alpha-api", "beta-api"}
    table = capsys.readouterr().out
    assert "unanswerable questions and evidence strength" in table


def test_eval_builds_the_hooks_slates_when_asked_and_counts_the_decisions_nothing_matched(home, tmp_path):
    write_coding(tmp_path / "coding.json")
    runs = {}
    for flags in ([], ["--hook-slates"]):
        out = tmp_path / f"r{len(flags)}.json"
        assert main(["eval", "coding", str(tmp_path / "coding.json"), "--budget", "2700", "--json", str(out),
                     *flags]) == 0
        [runs[bool(flags)]] = json.loads(out.read_text())["records"]
    assert (runs[False]["variant"], runs[True]["variant"]) == ("bm25", "bm25 (hook slates)")
    assert runs[True]["unmatched_decisions_per_slate"] == 0 <= runs[False]["unmatched_decisions_per_slate"]
    assert runs[True]["questions"] == runs[False]["questions"]


def test_eval_also_builds_each_variants_slates_without_the_session_pull_when_asked(home, tmp_path, capsys):
    write_coding(tmp_path / "coding.json")
    out = tmp_path / "r.json"
    assert main(["eval", "coding", str(tmp_path / "coding.json"), "--budget", "400", "--budget", "2700",
                 "--ablation", "session-pull", "--json", str(out)]) == 0  # no --cv, any variant: no model to train
    records = json.loads(out.read_text())["records"]
    assert [(r["variant"], r["budget"]) for r in records] == [
        ("bm25", 400), ("bm25", 2700), ("bm25-no-session-pull", 400), ("bm25-no-session-pull", 2700)]
    assert len({r["questions"] for r in records}) == 1
    capsys.readouterr()
    assert main(["eval", "coding", str(tmp_path / "coding.json"), "--ablation", "session-pull", "relevance"]) == 2
    assert "--ablation apply to the full variant only" in capsys.readouterr().err  # a feature group retrains


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(format="locomo"), "not a coding benchmark"),
    (lambda d: d["questions"][0].update(kind="trivia"), "unknown kind 'trivia'"),
    (lambda d: d["questions"][0].update(evidence=["nope"]), "evidence ['nope'] names no item of project"),
    (lambda d: d["questions"][0].update(project="gamma"), "project 'gamma' has no items"),
    (lambda d: d["questions"][0].update(evidence=[]), "empty only for an unanswerable question"),
    (lambda d: d["questions"][0].update(as_of="yesterday"), "not an ISO 8601 timestamp"),
])
def test_a_broken_coding_file_is_refused_with_what_to_fix(home, tmp_path, capsys, change, message):
    data = write_coding(tmp_path / "c.json")
    change(data)
    (tmp_path / "c.json").write_text(json.dumps(data))
    assert main(["eval", "coding", str(tmp_path / "c.json")]) == 2
    assert message in capsys.readouterr().err


def unit(uid: int, project: str = "p", **fields) -> Unit:
    return Unit(uid, project, fields.pop("kind", "decision"), fields.pop("text", "x"), 5, T, uid, **fields)


def slate_of(items: list[tuple[Unit, str | None]], context: str, successors=None) -> tuple[Slate, SlateInputs]:
    inputs = SlateInputs(successors or {}, {})
    slate = Slate("s_x", "p", 2700, context, 10, tuple(SlateItem(u, 1, 5, status) for u, status in items))
    return slate, inputs


def test_slate_checks_count_what_a_client_would_see():
    old, new, prop = unit(1, status="accepted", superseded_by=2), unit(2, status="accepted"), unit(3, status="proposed")
    context = ("# memory slate\n## decisions\n[#1] decision (SUPERSEDED by #2, 2026-05-01): x\n"
               "[#2] decision (accepted, 2026-05-01): x\n[#3] decision (proposed, not confirmed, 2026-05-01): x\n")
    assert slate_violations(*_with(slate_of([(old, "superseded"), (new, "accepted"), (prop, "proposed")], context,
                                            {1: [new]}))) == (0, 0, 0)
    # the successor missing, a proposal rendered as if accepted, a unit of another project
    lone = context.replace("[#2] decision (accepted, 2026-05-01): x\n", "")
    assert slate_violations(*_with(slate_of([(old, "superseded"), (prop, "proposed")], lone, {1: [new]}))) == (0, 0, 1)
    hidden = context.replace("proposed, not confirmed", "accepted")
    assert slate_violations(*_with(slate_of([(prop, "proposed")], hidden))) == (0, 1, 0)
    foreign = unit(4, project="other", kind="turn")
    assert slate_violations(*_with(slate_of([(foreign, None)], "[#4] user: x\n"))) == (1, 0, 0)


def _with(pair: tuple[Slate, SlateInputs]) -> tuple[Slate, str, SlateInputs]:
    return pair[0], "p", pair[1]


def test_unanswerable_questions_are_kept_out_of_completeness_and_rank_the_strength():
    def O(evidence, slate, answerable=True, strength=None, qid="q"):  # noqa: E743
        return Outcome("k", frozenset(evidence), frozenset(slate), frozenset(slate), None, qid, answerable,
                       strength=strength)
    outcomes = [O("ab", "ab", strength=0.9), O("a", "", strength=0.4), O("", "", False, 0.2),
                O("c", "c", False, 0.5)]
    s = summarize(outcomes)
    assert s["questions"] == 2 and s["slate_completeness"] == 0.5 and s["multi_evidence_completeness"] == 1.0
    assert s["unanswerable"] == {"questions": 2, "with_unconfirmed_decision": 1, "unconfirmed_decision_in_slate": 1.0,
                                 "nothing_stored": 1}
    assert s["evidence_strength_auroc"] == pytest.approx(3 / 4)  # 0.9 beats both, 0.4 beats 0.2 only
    assert s["evidence_strength_auroc_by_kind"] == {"nothing_stored": 1.0, "unconfirmed_decision": 0.5}
    assert auroc([1.0], [1.0]) == 0.5 and auroc([], [1.0]) is None


@pytest.mark.timeout(900)  # 3 runs x 2 folds x 5 boosters
def test_several_seeds_cross_validate_the_same_pools_and_give_what_each_seed_gives_alone(home, tmp_path, capsys):
    write_coding(tmp_path / "coding.json")
    args = ["eval", "coding", str(tmp_path / "coding.json"), "--variant", "bm25", "--variant", "full", "--cv",
            "2", "--budget", "400", "--budget", "2700"]
    assert main([*args, "--seed", "0", "--seed", "3", "--json", str(tmp_path / "r-{seed}.json")]) == 0
    assert "seed 3:" in capsys.readouterr().out
    assert main([*args, "--seed", "3", "--json", str(tmp_path / "alone.json")]) == 0

    def outcomes(name):  # the records without the run's timings
        doc = json.loads((tmp_path / name).read_text())
        return doc["seed"], [{k: v for k, v in r.items() if not k.endswith(("_ms", "_per_s"))} for r in doc["records"]]
    (zero, first), (three, together), (_, alone) = outcomes("r-0.json"), outcomes("r-3.json"), outcomes("alone.json")
    assert (zero, three) == (0, 3) and together == alone
    assert [r["variant"] for r in together] == ["bm25", "bm25", "full", "full"]
    assert first[:2] == together[:2] and first[0]["questions"] > 0  # bm25 is not trained: the same whatever the seed
    capsys.readouterr()
    one = str(tmp_path / "one.json")
    for extra, said in ((["--seed", "1", "--seed", "2", "--json", one], "put {seed} in its name"),
                        (["--seed", "1", "--seed", "1"], "--seed repeats a value"),
                        (["--seed", "1", "--seed", "2", "--cv", "0"], "add --cv K")):
        assert main([*args, *extra]) == 2
        assert said in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["alone.json", "coding.json", "r-0.json", "r-3.json"]
