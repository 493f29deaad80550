"""`agentmemrec eval`: metrics against hand-computed cases, and tiny benchmark files end to end."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import pytest

from agentmemrec.indexing.store.embedding_cache import EmbeddingCache
from agentmemrec.ranking import learned
from agentmemrec.ranking.eval.benchmarks import read_cases
from agentmemrec.ranking.eval.evaluate import EvalModels, evaluate
from agentmemrec.ranking.eval.metrics import (
    Outcome,
    conditional_ranking_completeness,
    evidence_recall,
    pool_completeness,
    slate_completeness,
    summarize,
)
from agentmemrec.ranking.loading import load_embedder
from agentmemrec.server.cli import main


def O(e, p, s, cat="x", lost=None):  # noqa: E743 - short constructor for the tables below
    return Outcome(cat, frozenset(e), frozenset(p), frozenset(s), lost)


def test_metrics_match_hand_computed_values():
    outcomes = [O("ab", "abc", "ab"),      # complete everywhere
                O("ab", "abc", "a", lost="budget"),  # pool complete, slate half
                O("ab", "a", "a"),        # pool incomplete
                O("c", "c", "")]          # pool complete, nothing in slate
    assert pool_completeness(outcomes) == 3 / 4
    assert slate_completeness(outcomes) == 1 / 4
    assert conditional_ranking_completeness(outcomes) == 1 / 3
    assert evidence_recall(outcomes) == pytest.approx((1 + 0.5 + 0.5 + 0) / 4)
    s = summarize(outcomes)
    assert (s["lost_never_in_pool"], s["lost_to_budget"], s["questions"]) == (1, 1, 4)


def test_missing_evidence_is_counted_by_its_pool_rank():
    def missing(ranks, items=50):
        return Outcome("x", frozenset("abcd"), frozenset("abcd"), frozenset(), missing_pool_ranks=ranks,
                       slate_items=items)
    s = summarize([missing((3, 20)), missing((64, 65, 500, None), 40), missing((), 60)])
    assert s["missing_evidence_by_pool_rank"] == {"1-16": 1, "17-64": 2, "65-128": 1, "129+": 1, "not_in_pool": 1}
    assert s["slate_items_p50"] == 50


def test_empty_sets_give_no_figure_rather_than_a_fake_one():
    assert slate_completeness([]) is None
    assert conditional_ranking_completeness([O("a", "", "")]) is None


def locomo_file(path):
    conv = {"speaker_a": "Ana", "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a beagle named Rex."},
                          {"speaker": "Bo", "dia_id": "D1:2", "text": "Nice! I bought a red kayak.",
                           "blip_caption": "a photo of a red kayak on a lake"}],
            "session_2_date_time": "10:00 am on 20 May, 2023",
            "session_2": [{"speaker": "Ana", "dia_id": "D2:1", "text": "Rex learned to fetch the ball."},
                          {"speaker": "Bo", "dia_id": "D2:2", "text": "My kayak trip was in the rain."}]}
    qa = [{"question": "What is the name of Ana's beagle?", "answer": "Rex", "evidence": ["D1:1"], "category": 1},
          {"question": "What did Bo's photo show?", "answer": "a kayak", "evidence": ["D1:2", "D9:9"], "category": 4},
          {"question": "What did Rex learn and what dog is he?", "answer": "fetch", "evidence": ["D1:1; D2:1"], "category": 2},
          {"question": "Adversarial", "answer": "-", "evidence": ["D1:1"], "category": 5}]
    path.write_text(json.dumps({**conv, "qa": qa}))


def longmemeval_file(path):
    record = {"question_id": "q1", "question_type": "multi-session",
              "question": "How many hours did I spend on the pottery class and the guitar lesson?",
              "question_date": "2023/05/30 (Tue) 03:16", "answer": "5",
              "haystack_session_ids": ["s1", "s2"],
              "haystack_dates": ["2023/05/20 (Sat) 15:08", "2023/05/30 (Tue) 09:00"],
              "haystack_sessions": [
                  [{"role": "user", "content": "The pottery class took 3 hours.", "has_answer": True},
                   {"role": "assistant", "content": "That sounds relaxing."}],
                  [{"role": "user", "content": "My guitar lesson lasted 2 hours.", "has_answer": True},
                   {"role": "assistant", "content": "Great progress."}]]}
    path.write_text(json.dumps(record))


def test_locomo_file_runs_end_to_end_and_json_matches_the_table(home, tmp_path, capsys):
    locomo_file(tmp_path / "conv-1.json")
    out_json = tmp_path / "r.json"
    per_q = tmp_path / "q.jsonl"
    assert main(["eval", "locomo", str(tmp_path / "conv-1.json"), "--budget", "300", "--budget", "400",
                 "--json", str(out_json), "--per-question", str(per_q)]) == 0
    table = capsys.readouterr().out
    result = json.loads(out_json.read_text())
    assert result["command"].startswith("agentmemrec eval locomo ") and result["pool_size"] == 512
    records = result["records"]
    assert [(r["variant"], r["budget"]) for r in records] == [("bm25", 300), ("bm25", 400)]
    for r in records:
        assert r["questions"] == 3  # category 5 left out, the missing id ignored, "a; b" split
        assert r["slate_completeness"] == 1.0
        row = next(line.split() for line in table.splitlines() if line.startswith(f"bm25     {r['budget']}"))
        assert row[2] == str(r["questions"]) and row[4] == f"{100 * r['slate_completeness']:.1f}%"
        assert row[3] == f"{100 * r['pool_completeness']:.1f}%"
        assert set(r["by_category"]) == {"1", "2", "4"}
    records = [json.loads(line) for line in per_q.read_text().splitlines()]
    assert {tuple(q["evidence"]) for q in records} == {("D1:1",), ("D1:2",), ("D1:1", "D2:1")}
    for q in records:  # where each evidence turn ranked, and how many items each slate holds
        assert set(q["evidence_rank"]) == set(q["evidence_pool_rank"]) == set(q["evidence"])
        assert all(1 <= r <= q["slate_items"]["300"] for r in q["evidence_rank"].values())
        assert q["slate_items"]["300"] <= q["slate_items"]["400"]


def test_longmemeval_file_uses_the_question_day_as_cut_off(home, tmp_path, capsys):
    longmemeval_file(tmp_path / "q1.json")
    out_json = tmp_path / "r.json"
    assert main(["eval", "longmemeval", str(tmp_path), "--budget", "2700", "--json", str(out_json)]) == 0
    [record] = json.loads(out_json.read_text())["records"]
    assert record["questions"] == 1 and record["slate_completeness"] == 1.0
    assert record["by_category"]["multi-session"]["evidence_recall"] == 1.0
    assert record["recall_p50_ms"] > 0 and record["ingest_units_per_s"] > 0


def test_unknown_variant_and_missing_path_are_clear_errors(home, tmp_path, capsys):
    locomo_file(tmp_path / "c.json")
    assert main(["eval", "locomo", str(tmp_path / "c.json"), "--variant", "magic"]) == 2
    assert "unknown variant(s) ['magic']" in capsys.readouterr().err
    assert main(["eval", "locomo", str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def longmemeval_labelled(path):
    """A haystack whose session ids label the evidence session, as LongMemEval's do."""
    longmemeval_file(path)
    record = json.loads(path.read_text())
    record["haystack_session_ids"] = ["answer_4be1b6b4_1", "sharegpt_yywfmr4_0"]
    path.write_text(json.dumps(record))


def test_longmemeval_session_ids_never_reach_a_slate(memory, tmp_path):
    longmemeval_labelled(tmp_path / "q1.json")
    [case] = read_cases("longmemeval", [tmp_path / "q1.json"])
    [items] = case.projects.values()
    memory.remember("lme", items)
    [q] = case.questions
    slate = memory.recall("lme", q.text, 2700, q.as_of)
    assert {it.unit.ref for it in slate.items} >= q.evidence
    assert "answer_" not in slate.context and "sharegpt" not in slate.context
    assert "## session session_1 " in slate.context


def _eval_features(tmp_path: Path, models: EvalModels) -> str:
    """Every candidate's features for every question, exactly (NaN, a missing source, included)."""
    kept: list = []
    evaluate("locomo", [tmp_path / "c.json"], [], [400], models=models, keep=kept.append)
    return json.dumps([[(sc.unit.ref, sc.features) for sc in k.selection.ranked] for k in kept])


def test_locomo_features_do_not_depend_on_the_day_of_the_run(minilm_home, tmp_path, monkeypatch):
    locomo_file(tmp_path / "c.json")
    models = EvalModels(load_embedder(minilm_home, "cpu"))

    def on(year: int) -> str:
        class Clock(datetime):
            @classmethod
            def now(cls, tz=None):  # noqa: ANN001, ANN206 - datetime's own signature
                return datetime(year, 6, 1, tzinfo=tz)
        monkeypatch.setattr(learned, "datetime", Clock)
        return _eval_features(tmp_path, models)
    assert on(2027) == on(2041)


def test_features_are_the_same_whether_the_embedding_cache_was_cold_warm_or_off(minilm_home, tmp_path):
    locomo_file(tmp_path / "c.json")
    embedder = load_embedder(minilm_home, "cpu")
    cache = EmbeddingCache(tmp_path / "cache.duckdb")
    try:
        runs = [_eval_features(tmp_path, EvalModels(embedder, cache=c)) for c in (None, cache, cache)]
    finally:
        cache.close()
    assert runs[0] == runs[1] == runs[2]


def test_an_evidence_turn_stored_in_parts_counts_only_when_each_pooled_part_is_in_the_slate(home, tmp_path):
    path = tmp_path / "long.json"
    longmemeval_file(path)
    record = json.loads(path.read_text())
    pottery = "\n\n".join(f"Session {i} of the pottery class: we glazed bowls and cleaned the wheel." for i in range(120))
    record["haystack_sessions"][0][0]["content"] = pottery + "\n\nThe pottery class took 3 hours."
    path.write_text(json.dumps(record))
    out = tmp_path / "r.json"
    assert main(["eval", "longmemeval", str(path), "--budget", "700", "--budget", "4000", "--json", str(out)]) == 0
    by_budget = {r["budget"]: r for r in json.loads(out.read_text())["records"]}
    assert by_budget[700]["pool_completeness"] == 1.0  # every part reached the pool
    assert by_budget[700]["slate_completeness"] == 0.0  # a part fits, the whole turn does not
    assert by_budget[700]["lost_in_ranking"] + by_budget[700]["lost_to_budget"] == 1
    assert by_budget[4000]["slate_completeness"] == 1.0


def _refused(args, said, capsys):
    """An argument error: argparse's usage and one line naming the flag, exit 2."""
    with pytest.raises(SystemExit) as done:
        main(args)
    err = capsys.readouterr().err
    assert done.value.code == 2 and said in err, err


def test_numeric_options_out_of_range_are_refused_by_name(home, tmp_path, capsys):
    locomo_file(tmp_path / "c.json")
    c = str(tmp_path / "c.json")
    for extra, said in ((["--limit", "-3"], "argument --limit: must be at least 1"),
                        (["--limit", "0"], "argument --limit: must be at least 1"),
                        (["--cv", "1"], "argument --cv: must be at least 2 (or 0"),
                        (["--cv", "-2"], "argument --cv: must be at least 0"),
                        (["--pool-size=-5"], "argument --pool-size: must be at least 0")):
        _refused(["eval", "locomo", c, *extra], said, capsys)
    _refused(["train", "locomo", c, "--out", str(tmp_path / "m.json"), "--limit", "0"],
             "argument --limit: must be at least 1", capsys)


def test_cross_validation_with_more_folds_than_conversations_is_refused_before_any_work(home, tmp_path, capsys):
    locomo_file(tmp_path / "c.json")
    assert main(["eval", "locomo", str(tmp_path / "c.json"), "--variant", "full", "--cv", "2"]) == 2
    out, err = capsys.readouterr()
    assert "--cv 2 needs at least 2 conversations or projects to fold" in err and "these files hold 1" in err
    assert out == ""  # nothing was evaluated


def test_a_file_of_another_format_or_without_questions_is_refused(home, tmp_path, capsys):
    locomo_file(tmp_path / "conv.json")
    longmemeval_file(tmp_path / "lme.json")
    (tmp_path / "obj.json").write_text("{}")
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "adversarial.json").write_text(json.dumps(
        {"speaker_a": "Ana", "speaker_b": "Bo", "session_1_date_time": "1:56 pm on 8 May, 2023",
         "session_1": [{"speaker": "Ana", "dia_id": "D1:1", "text": "hi"}],
         "qa": [{"question": "q", "answer": "-", "evidence": ["D1:1"], "category": 5}]}))
    for args, said in ((["eval", "longmemeval", "conv.json"], "conv.json is not a LongMemEval file (expected"),
                       (["eval", "locomo", "lme.json"], "lme.json is not a LoCoMo file (expected"),
                       (["eval", "locomo", "obj.json"], "obj.json is not a LoCoMo file"),
                       (["eval", "locomo", "list.json"], "no questions found in"),
                       (["eval", "locomo", "adversarial.json"], "no questions found in"),
                       (["train", "locomo", "obj.json", "--out", "m.json"], "obj.json is not a LoCoMo file")):
        args = [a if not a.endswith(".json") else str(tmp_path / a) for a in args]
        assert main(args) == 2, args
        out, err = capsys.readouterr()
        assert said in err and "Traceback" not in err and out == "", err
    assert not (tmp_path / "m.json").exists()


def test_output_paths_are_checked_before_the_work(home, tmp_path, capsys, monkeypatch):
    locomo_file(tmp_path / "c.json")
    c = str(tmp_path / "c.json")
    missing = tmp_path / "no" / "such"
    for args, said in ((["eval", "locomo", c, "--json", str(missing / "x.json")], "--json"),
                       (["eval", "locomo", c, "--per-question", str(missing / "q.jsonl")], "--per-question"),
                       (["train", "locomo", c, "--allow-small", "--out", str(missing / "m.json")], "--out")):
        assert main(args) == 2
        out, err = capsys.readouterr()
        assert f"{said} {missing}" in err and f"folder {missing} does not exist" in err and out == "", err
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # not installed
    assert main(["eval", "locomo", c, "--plot", str(tmp_path / "p.png")]) == 2
    out, err = capsys.readouterr()
    assert "--plot needs matplotlib" in err and out == ""


def test_options_of_the_full_variant_are_refused_without_it_and_ablations_checked_first(home, tmp_path, capsys):
    locomo_file(tmp_path / "c.json")
    c = str(tmp_path / "c.json")
    assert main(["eval", "locomo", c, "--cv", "3", "--ablation", "relevance", "--limit", "3",
                 "--json", str(tmp_path / "cv.json")]) == 2
    out, err = capsys.readouterr()
    assert "--cv, --ablation apply to the full variant only; add --variant full" in err and out == ""
    assert not (tmp_path / "cv.json").exists()
    assert main(["eval", "locomo", c, "--variant", "full", "--ablation", "relevance"]) == 2
    assert "--ablation compares cross-validated models" in capsys.readouterr().err
    assert main(["eval", "locomo", c, "--variant", "full", "--cv", "2", "--ablation", "bogus"]) == 2
    out, err = capsys.readouterr()
    assert "unknown ablation ['bogus']" in err and out == ""


def test_train_refuses_too_few_questions_unless_allowed_and_then_warns(home, tmp_path, capsys, caplog):
    locomo_file(tmp_path / "c.json")
    model = tmp_path / "m.json"
    assert main(["train", "locomo", str(tmp_path / "c.json"), "--out", str(model)]) == 2
    err = capsys.readouterr().err
    assert "3 questions are too few to train a useful ranker (at least 100)" in err and "--allow-small" in err
    assert not model.exists()
    assert main(["train", "locomo", str(tmp_path / "c.json"), "--out", str(model), "--limit", "1",
                 "--allow-small"]) == 2
    assert "train needs at least 2 questions" in capsys.readouterr().err
    assert main(["train", "locomo", str(tmp_path / "c.json"), "--out", str(model), "--allow-small"]) == 0
    assert model.exists() and "trained on 3 questions" in capsys.readouterr().out
    assert "likely ranks worse than the shipped ranker" in caplog.text


def test_the_variants_the_command_line_offers_are_the_ones_evaluate_runs():
    from agentmemrec.ranking.eval.evaluate import FEATURES_VARIANT, VARIANTS
    from agentmemrec.ranking.eval.options import VARIANT_NAMES
    assert tuple(v for v in VARIANTS if v != FEATURES_VARIANT) == VARIANT_NAMES
