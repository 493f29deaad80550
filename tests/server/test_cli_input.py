"""The command line's answers to bad input: one line on stderr naming the flag or file and what to
do, exit 2, nothing written; and --help fast, without the training stack."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from agentmemrec.server.cli import main


def test_help_and_argument_registration_do_not_import_lightgbm_or_sklearn():
    code = ("import sys; from agentmemrec.server.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('lightgbm', 'sklearn', 'duckdb', 'onnxruntime') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def _refused(args, said, capsys):
    """Exit 2 and one line on stderr, no traceback, nothing on stdout."""
    assert main(args) == 2, args
    out, err = capsys.readouterr()
    assert said in err and err.count("\n") == 1 and "Traceback" not in err and out == "", err


def test_errors_name_the_command_line_flag_not_the_tool_argument(home, capsys):
    _refused(["recall", "ledger", "--budget", "0"], "agentmemrec: --budget must be an integer in [200, 200000]; got 0",
             capsys)
    _refused(["recall", "ledger", "--as-of", "notadate"], "--as-of='notadate' is not an ISO 8601 timestamp", capsys)
    _refused(["migrate", "--to", "sqlite:///x"], "--to must be a PostgreSQL URL such as postgresql://", capsys)
    assert not home.exists()


def test_a_refused_store_setting_never_repeats_its_password(home, capsys):
    """libpq's `key=value` form was repeated whole, password included."""
    _refused(["recall", "x", "--store", "host=db.internal user=app password=Hunter2secret"],
             "not 'host=db.internal user=app password=***'", capsys)
    _refused(["recall", "x", "--store", "mysql://app:Hunter2secret@db/memory"], "not 'mysql://app:***@db/memory'",
             capsys)


def test_a_digest_budget_out_of_range_is_refused_as_recalls_is(home, capsys):
    for budget in ("0", "-5", "200001"):
        _refused(["ls", "--decisions", "--project", "pay", "--budget", budget],
                 f"--budget must be an integer in [200, 200000]; got {budget}", capsys)
    assert not home.exists()


def test_an_import_that_is_not_utf8_is_refused_by_name(home, tmp_path, capsys):
    src = tmp_path / "b.jsonl"
    src.write_bytes(b"\xff\xfe bad\n")
    _refused(["import", str(src)], f"{src} is not UTF-8 text", capsys)
    assert not home.exists()


def test_an_import_line_nested_too_deeply_is_refused_by_its_line(home, tmp_path, capsys):
    src = tmp_path / "n.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "fine"}) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    _refused(["import", str(src)], f"{src}:2: JSON nested too deeply to read; fix the line", capsys)
    assert not home.exists()


def test_an_import_keeps_line_and_paragraph_separators_inside_a_text(home, tmp_path, capsys):
    src = tmp_path / "u.jsonl"  # as JavaScript's JSON.stringify writes them: raw
    texts = ["wiki paste:\u2028retry limit is five", "pdf paste\x85ledger closes at midnight", "a\u2029b"]
    src.write_text("\n".join(json.dumps({"kind": "turn", "text": t}, ensure_ascii=False) for t in texts) + "\n",
                   encoding="utf-8")
    assert main(["import", str(src), "--project", "pay"]) == 0
    assert "3 items read, 3 stored" in capsys.readouterr().out


def test_an_import_says_what_it_redacted_and_stores_the_markers(home, tmp_path, capsys):
    src = tmp_path / "s.jsonl"
    src.write_text("\n".join(json.dumps({"kind": "turn", "text": t}) for t in [
        "ssh to prod with password Xk9#mm2pq, then restart nginx", "DB_PASSWORD=hunter22 in the env",
        "the ledger closes at midnight"]) + "\n")
    assert main(["import", str(src), "--project", "pay"]) == 0
    assert capsys.readouterr().out.strip() == ("3 items read, 3 stored or updated in project pay; redacted 2 "
                                               "secrets: secret-assignment 1, secret-statement 1")
    assert main(["recall", "how do we ssh to prod and set the db password", "--project", "pay"]) == 0
    slate = capsys.readouterr().out
    assert "password [REDACTED:secret-statement], then" in slate and "DB_PASSWORD=[REDACTED:secret-assignment]" in slate
    assert "Xk9#mm2pq" not in slate and "hunter22" not in slate


def test_an_import_the_store_would_refuse_or_an_empty_one_makes_no_store(home, tmp_path, capsys):
    bad_kind, dup_ref, empty = tmp_path / "k.jsonl", tmp_path / "d.jsonl", tmp_path / "e.jsonl"
    bad_kind.write_text(json.dumps({"kind": "turn", "text": "fine"}) + "\n" + json.dumps({"kind": "nope", "text": "x"}))
    dup_ref.write_text("\n".join(json.dumps({"kind": "turn", "text": t, "ref": "r"}) for t in ("a", "b")))
    empty.write_text("\n\n")
    _refused(["import", str(bad_kind)], "line 2: unknown kind 'nope'", capsys)
    _refused(["import", str(dup_ref)], "lines 1, 2: ref 'r' appears more than once", capsys)
    _refused(["import", str(empty)], f"{empty} holds no items", capsys)
    assert not home.exists()  # no memory.duckdb, no owner.lock


def test_show_reports_a_replaced_decision_as_superseded_as_slates_do(home, tmp_path, capsys):
    src = tmp_path / "adr.jsonl"
    src.write_text("\n".join(json.dumps(d) for d in (
        {"kind": "decision", "ref": "adr-0003", "title": "Events", "text": "Payment events on RabbitMQ.",
         "status": "accepted", "at": "2026-03-01T00:00:00Z"},
        {"kind": "decision", "ref": "adr-0005", "title": "Events", "text": "Payment events move to Kafka.",
         "status": "accepted", "at": "2026-04-14T00:00:00Z", "supersedes": "adr-0003"})))
    assert main(["import", str(src), "--project", "pay"]) == 0
    capsys.readouterr()
    assert main(["show", "adr-0003", "--project", "pay", "--json"]) == 0
    [shown] = json.loads(capsys.readouterr().out)
    assert shown["status"] == "superseded" and shown["superseded_by"] is not None
    assert main(["show", "adr-0003", "--project", "pay"]) == 0
    assert "status=superseded" in capsys.readouterr().out
    assert main(["recall", "payment events", "--project", "pay"]) == 0
    assert f"SUPERSEDED by #{shown['superseded_by']}" in capsys.readouterr().out


def test_a_demo_home_that_cannot_be_made_is_one_line(home, tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    _refused(["demo", "--home", str(tmp_path / "a-file" / "demo")], "cannot create it", capsys)


def test_a_demo_home_uses_the_installed_models_and_a_second_run_says_it_stored_nothing(home, tmp_path, capsys):
    (home / "models").mkdir(parents=True)  # the data home's models (none active: the demo runs on BM25)
    demo = tmp_path / "demo"
    assert main(["demo", "--home", str(demo)]) == 0
    first = capsys.readouterr().out
    assert (demo / "models").is_symlink() and (demo / "models").resolve() == (home / "models").resolve()
    assert re.search(r"^payments-api: (\d+) items stored, 0 updated, 0 already there", first, re.M), first
    assert main(["demo", "--home", str(demo)]) == 0
    second = capsys.readouterr().out
    assert re.search(r"^payments-api: 0 items stored, 0 updated, (\d+) already there", second, re.M), second


def test_installing_a_file_that_is_no_model_says_so_rather_than_asking_the_hub(home, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "file.json").write_text("{}")
    for source in ("cfg/file.json", str(tmp_path / "cfg" / "file.json")):
        _refused(["models", "install", source], f"{source} exists but is not a model: pass an ONNX file", capsys)


def test_deactivating_a_model_says_which_ranker_recalls_use_as_their_note_does(default_home, tmp_path, capsys,
                                                                               monkeypatch, caplog):
    home = tmp_path / "home"
    shutil.copytree(default_home / "models", home / "models")
    monkeypatch.setenv("AGENTMEMREC_HOME", str(home))
    src = tmp_path / "one.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "Payment events go to Kafka."}))
    assert main(["import", str(src), "--project", "pay"]) == 0
    assert main(["models", "deactivate", "embedder"]) == 0  # the cross-encoder stays: no shipped ranker for it
    said = capsys.readouterr().out
    assert "recalls fall back to lexical-ranker.json, the closest shipped ranker" in said
    assert main(["recall", "payment events", "--project", "pay"]) == 0
    [note] = [line for line in capsys.readouterr().out.splitlines() if "ranker" in line]
    assert note.removeprefix("-- note: ") in said and "the cross-encoder is not run" in note
    assert "may be off" not in said + note  # lexical-ranker.json ranks exactly as trained
    assert main(["models", "deactivate", "reranker"]) == 0  # BM25 alone, a shipped configuration
    assert "recalls rank with lexical-ranker.json, trained for the models still active" in capsys.readouterr().out
    caplog.clear()
    assert main(["recall", "payment events", "--project", "pay"]) == 0
    assert "ranker" not in capsys.readouterr().out and not [r for r in caplog.records if r.levelname == "WARNING"]


def test_serve_refuses_a_negative_pool_size_before_it_starts(home, capsys):
    with pytest.raises(SystemExit) as done:
        main(["serve", "--pool-size", "-5"])
    assert done.value.code == 2 and "--pool-size: must be at least 0, got -5" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["serve", "--project", "x"], ["ls"]])
def test_a_home_that_cannot_be_made_is_one_line_naming_it(tmp_path, command):
    """It was a 50-line ExceptionGroup traceback from inside the server's start."""
    (tmp_path / "file").write_text("")
    home = tmp_path / "file" / "home"  # under a plain file: it cannot be created
    done = subprocess.run([sys.executable, "-m", "agentmemrec.server.cli", *command], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=120,
                          env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"agentmemrec: cannot create the memory store's home {home}: Not a directory")
    assert "set AGENTMEMREC_HOME to a folder you may write" in done.stderr and done.stderr.count("\n") == 1


def test_a_ref_longer_than_any_stored_one_is_one_short_line_and_removes_nothing(home, tmp_path, capsys):
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "keep me around", "ref": "keep"}) + "\n")
    assert main(["import", str(src), "--project", "p"]) == 0
    capsys.readouterr()
    for long in ("x" * 100_000, "x" * 100_000 + "\x01"):
        _refused(["forget", "keep", long, "--project", "p"], "refs entry 2 has more than 512 characters", capsys)
    _refused(["show", "x" * 100_000, "--project", "p"], "ref entry 1 has more than 512 characters", capsys)
    assert main(["show", "keep", "--project", "p"]) == 0 and "keep me around" in capsys.readouterr().out


def test_an_unknown_slate_id_is_named_cut_short_in_one_line(home, capsys):
    _refused(["explain", "s_" + "9" * 100_000], "unknown slate id 's_99999999999", capsys)
    _refused(["explain", "s_" + "9" * 100_000, "--ref", "x" * 100_000], "refs entry 1 has more than 512", capsys)
    assert main(["explain", "x" * 100_000]) == 2
    assert len(capsys.readouterr().err) < 300
