"""The command line: import with all-or-nothing validation, recall, explain, forget."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys

import duckdb
import pytest

from agentmemrec.ranking.memory import Memory
from agentmemrec.server.cli import main

from helpers import BOTH


@BOTH
def test_import_then_recall_then_explain(home, tmp_path, capsys, store_url):
    store = ["--store", store_url] if store_url else []
    src = tmp_path / "items.jsonl"
    src.write_text("\n".join(json.dumps({"kind": "turn", "text": f"Service {i} uses gRPC on port {9000 + i}.",
                                         "ref": f"svc-{i}", "session": "s"}) for i in range(30)))
    assert main(["import", str(src), "--project", "infra", *store]) == 0
    assert "30 items read, 30 stored" in capsys.readouterr().out
    assert main(["recall", "which port does service 7 use", "--project", "infra", "--budget", "300", *store]) == 0
    out = capsys.readouterr().out
    # a turn's label is its id and speaker (its ref is a message key; explain and forget take either)
    assert re.search(r"^\[#\d+\] user: Service 7 uses gRPC on port 9007\.$", out, re.M), out
    slate_id = out.rsplit("agentmemrec explain ", 1)[1].split(")")[0]
    assert main(["explain", slate_id, "--ref", "svc-7", *store]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["diagnosis"][0]["stage"] == "in_slate"
    assert main(["forget", "svc-7", "--project", "infra", *store]) == 0
    assert "removed 1 units" in capsys.readouterr().out
    assert (home / "memory.duckdb").exists() == (store_url is None)  # PostgreSQL leaves the home's store alone


def test_a_forgotten_unit_leaves_no_word_in_the_saved_lexical_index(home, tmp_path, capsys):
    # past PERSIST_ROWS rows the BM25 index is saved under the home, its vocabulary in plain JSON
    src = tmp_path / "items.jsonl"
    src.write_text("\n".join(json.dumps({"kind": "turn", "ref": f"t{i}", "session": f"s{i // 50}",
                                         "text": f"worker {i} retries the queue with backoff"}) for i in range(5200))
                   + "\n" + json.dumps({"kind": "turn", "ref": "slip", "session": "s0",
                                         "text": "the staging unseal phrase is quixoticzebra"}))
    assert main(["import", str(src), "--project", "ops"]) == 0
    assert main(["recall", "staging unseal phrase", "--project", "ops", "--budget", "300"]) == 0
    assert "quixoticzebra" in capsys.readouterr().out

    def saved_with_the_word() -> list[str]:
        return [str(f) for f in (home / "index").rglob("*") if f.is_file() and b"quixoticzebra" in f.read_bytes()]

    assert saved_with_the_word()  # the vocabulary holds it, as it should while the unit is stored
    assert main(["forget", "slip", "--project", "ops"]) == 0
    assert saved_with_the_word() == []
    assert main(["recall", "worker 4321 retries", "--project", "ops", "--budget", "300"]) == 0
    out = capsys.readouterr().out
    assert "worker 4321 retries the queue" in out and "quixoticzebra" not in out


def test_redact_scrubs_what_was_stored_before_and_leaves_no_secret_in_the_saved_index(home, tmp_path, capsys):
    src = tmp_path / "items.jsonl"
    src.write_text(json.dumps({"kind": "turn", "ref": "t1", "session": "s", "text": "pushed after docker login -u ci "
                                                                                     "-p Xk9mm2pqQ reg.example.com"})
                   + "\n" + json.dumps({"kind": "turn", "session": "s", "text": "the registry is reg.example.com"}))
    assert main(["import", str(src), "--project", "shop", "--no-redact"]) == 0
    assert main(["import", str(src), "--project", "ops", "--no-redact"]) == 0
    assert main(["recall", "docker login registry", "--project", "shop"]) == 0  # the index is built and saved
    capsys.readouterr()

    def saved_with_the_secret() -> list[str]:
        return [str(f) for f in (home / "index").rglob("*") if f.is_file() and b"xk9mm2pqq" in f.read_bytes().lower()]

    assert saved_with_the_secret()
    assert main(["redact", "--project", "shop", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("project shop: would redact 1 secrets: command-password 1 in 1 units: #")
    assert saved_with_the_secret()
    assert main(["redact", "--all-projects"]) == 0
    out, err = capsys.readouterr()
    out = out.splitlines()
    assert "redact ops: 100%" in err and "redact shop: 100%" in err and "2/2 [" in err  # a progress bar each
    assert [line.split(":")[0] for line in out] == ["project ops", "project shop"]
    assert all("redacted 1 secrets: command-password 1 in 1 units: #" in line and "(t1)" in line for line in out)
    assert saved_with_the_secret() == []
    assert main(["recall", "docker login registry", "--project", "shop"]) == 0
    assert "-p [REDACTED:command-password] reg.example.com" in capsys.readouterr().out
    assert main(["import", str(src), "--project", "shop"]) == 0  # redacted now: found stored as it is
    assert "2 items read, 0 stored or updated" in capsys.readouterr().out
    assert main(["redact", "--project", "nowhere"]) == 0
    assert capsys.readouterr().out == "-- project nowhere holds nothing; `agentmemrec ls` lists the projects\n"


def test_export_writes_what_import_reads_and_nothing_else_on_stdout(home, tmp_path, capsys):
    src = tmp_path / "items.jsonl"
    src.write_text("\n".join(json.dumps(i) for i in [
        {"kind": "decision", "ref": "adr-1", "title": "RabbitMQ", "text": "Events over RabbitMQ."},
        {"kind": "decision", "ref": "adr-2", "title": "Kafka", "text": "Events on Kafka.", "supersedes": "adr-1"},
        {"kind": "turn", "session": "s", "speaker": "dana", "text": "keep RabbitMQ for email jobs"}]))
    assert main(["import", str(src), "--project", "shop"]) == 0
    capsys.readouterr()
    assert main(["export", "--project", "shop"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["decision", "decision", "turn"]
    assert "export shop: 100%" in err
    dump = tmp_path / "shop.jsonl"
    assert main(["export", "--project", "shop", "--out", str(dump)]) == 0 and dump.read_text() == out
    assert [f.name for f in tmp_path.iterdir() if f.suffix == ".partial"] == []  # written whole, then named
    assert main(["import", str(dump), "--project", "copy"]) == 0
    capsys.readouterr()
    for project in ("shop", "copy"):
        assert main(["ls", "--decisions", "--project", project]) == 0
    shop, copy = re.sub(r"#[0-9]+", "#N", capsys.readouterr().out).split("# decisions in force in project copy")
    assert "adr-1] decision replaced by #N" in copy and shop == "# decisions in force in project shop" + copy
    assert main(["export", "--project", "nowhere"]) == 2
    assert "project nowhere holds nothing to export" in capsys.readouterr().err


def test_the_store_comes_from_the_environment_and_a_bad_url_is_refused(home, pg_url, monkeypatch, capsys):
    monkeypatch.setenv("AGENTMEMREC_STORE", pg_url)
    assert main(["tokens", "add", "ci-bot", "--projects", "infra"]) == 0
    capsys.readouterr()
    assert main(["tokens", "list", "--store", pg_url]) == 0 and capsys.readouterr().out.startswith("ci-bot\t")
    assert not (home / "memory.duckdb").exists()
    assert main(["recall", "anything", "--store", "mysql://db/memory"]) == 2
    assert "must be a PostgreSQL URL such as postgresql://" in capsys.readouterr().err


def test_a_bad_line_fails_the_import_and_writes_nothing(home, tmp_path, capsys):
    src = tmp_path / "items.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "fine"}) + "\n" + json.dumps({"kind": "nope", "text": "x"}))
    assert main(["import", str(src), "--project", "infra"]) == 2
    assert "line 2: unknown kind 'nope'" in capsys.readouterr().err
    assert main(["recall", "fine", "--project", "infra", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == []


def test_invalid_json_names_its_line(home, tmp_path, capsys):
    src = tmp_path / "items.jsonl"
    src.write_text('{"kind": "turn", "text": "ok"}\n{broken\n')
    assert main(["import", str(src), "--project", "infra"]) == 2
    assert "items.jsonl:2: not valid JSON" in capsys.readouterr().err


def test_tokens_are_shown_once_stored_hashed_and_refused_when_invalid(home, capsys):
    assert main(["tokens", "add", "ci-bot", "--projects", "infra,docs"]) == 0
    secret = capsys.readouterr().out.strip()
    assert secret.startswith("amr_") and len(secret) > 40
    assert main(["tokens", "add", "ci-bot", "--projects", "infra"]) == 2
    assert "a token named 'ci-bot' exists" in capsys.readouterr().err
    assert main(["tokens", "add", "x", "--projects", "../etc"]) == 2
    assert "invalid project name" in capsys.readouterr().err
    assert main(["tokens", "revoke", "nobody"]) == 2
    assert "no token named 'nobody'" in capsys.readouterr().err
    assert main(["tokens", "list"]) == 0
    assert capsys.readouterr().out.startswith("ci-bot\tinfra,docs\t")
    con = duckdb.connect(str(home / "memory.duckdb"), read_only=True)
    assert secret not in str(con.execute("SELECT * FROM tokens").fetchall())
    con.close()


def test_ls_show_and_stats_say_what_memory_holds(home, tmp_path, capsys):
    src = tmp_path / "items.jsonl"
    src.write_text("\n".join(json.dumps(i) for i in [
        {"kind": "turn", "text": "The API listens on port 8080.", "ref": "port"},
        {"kind": "decision", "ref": "adr-1", "title": "Helm", "text": "Deploy with Helm."},
        {"kind": "decision", "ref": "adr-2", "title": "Argo", "text": "Deploy with Argo CD.", "supersedes": "adr-1"}]))
    assert main(["import", str(src), "--project", "infra"]) == 0
    capsys.readouterr()
    assert main(["ls"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == ["infra", "3", "1", "2", "0"]
    assert main(["ls", "--decisions", "--project", "infra"]) == 0
    out = capsys.readouterr().out
    assert "decision (accepted" in out and "Argo. Deploy with Argo CD." in out and "replaced by #" in out
    assert main(["show", "port", "--project", "infra", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["text"] == "The API listens on port 8080."
    assert main(["show", "nope", "--project", "infra"]) == 2
    assert "'nope' names no unit in project 'infra'" in capsys.readouterr().err
    assert main(["stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["projects"][0]["units"] == 3 and stats["database_bytes"] > 0
    assert any("no embedder is active" in n for n in stats["projects"][0]["limits"])
    src.write_text(json.dumps({"kind": "turn", "text": "Docs build with mkdocs.", "ref": "d"}))
    assert main(["import", str(src), "--project", "docs"]) == 0
    capsys.readouterr()
    assert main(["stats", "--project", "docs", "--json"]) == 0
    assert [p["project"] for p in json.loads(capsys.readouterr().out)["projects"]] == ["docs"]
    assert main(["stats", "--project", "dcos"]) == 0
    assert "project dcos holds nothing yet" in capsys.readouterr().out


def test_reading_a_fresh_home_makes_no_store_and_says_how_to_add_memory(home, tmp_path, capsys):
    """`ls`, `show`, `stats` and `recall` made an empty memory.duckdb (and took the owner lock) to
    read nothing: a read must not write. They answer as an empty store does, and say on stderr
    where nothing is stored yet and how to add memory; once something is, they read it."""
    database = home / "memory.duckdb"

    def read(*args: str, code: int = 0) -> tuple[str, str]:
        assert main(list(args)) == code, args
        assert not home.exists(), args  # no store file, no owner lock: the home is as it was
        out, err = capsys.readouterr()
        assert f"nothing is stored yet in {database}; add memory with `agentmemrec import`" in err, (args, err)
        return out, err

    assert read("ls")[0].splitlines()[1] == f"-- no project yet in {home}; add memory with `agentmemrec import`, " \
                                           "`watch` or `setup`"
    assert json.loads(read("ls", "--json")[0]) == []
    assert read("ls", "--decisions", "--project", "infra")[0] == "project infra holds no decision in force\n"
    assert json.loads(read("ls", "--decisions", "--project", "infra", "--json")[0]) == {
        "project": "infra", "context": "", "left_out": 0}
    assert read("stats")[0] == f"store {database} (0.0 MiB), 0 projects\n"
    assert json.loads(read("stats", "--json")[0]) == {"home": str(home), "store": str(database),
                                                      "database_bytes": 0, "projects": []}
    assert "'port' names no unit in project 'infra'" in read("show", "port", "--project", "infra", code=2)[1]
    slate = json.loads(read("recall", "which port", "--project", "infra", "--json")[0])
    assert slate["items"] == [] and slate["evidence_strength"] == 0.0 and slate["slate_id"].startswith("s_")
    assert slate["notes"] == ["project 'infra' holds no units yet",
                              "projects in this store: none yet; pick one with --project"]
    out = read("recall", "which port", "--project", "infra")[0]
    assert re.search(r"^-- slate s_\d+: 0 items, \d+/2700 tokens, evidence strength 0\.00 ", out, re.M), out
    assert "-- note: project 'infra' holds no units yet" in out

    src = tmp_path / "items.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "The API listens on port 8080.", "ref": "port"}))
    assert main(["import", str(src), "--project", "infra"]) == 0
    capsys.readouterr()
    for args, said in ((["ls"], r"^infra +1 +1 +0 +0$"), (["stats"], r"^infra: 1 units"),
                       (["show", "port"], r"^The API listens on port 8080\.$"),
                       (["recall", "which port does the API listen on"], r"^\[#\d+\] user: The API listens on port")):
        assert main([*args, "--project", "infra"]) == 0
        out, err = capsys.readouterr()
        assert re.search(said, out, re.M) and "nothing is stored yet" not in err, (args, out, err)


def test_stats_names_the_postgresql_store_it_read_without_its_password(home, tmp_path, pg_url, capsys):
    src = tmp_path / "items.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "The API listens on port 8080.", "ref": "port"}))
    store = pg_url.replace("@", ":s3cret@", 1)  # trust authentication ignores it
    assert main(["import", str(src), "--project", "infra", "--store", store]) == 0
    capsys.readouterr()
    assert main(["stats", "--store", store]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert re.fullmatch(r"store postgresql://127\.0\.0\.1:\d+/postgres \(\d+\.\d MiB\), 1 projects", header), header
    assert main(["stats", "--store", store, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["database_bytes"] > 0 and stats["projects"][0]["units"] == 1
    assert "s3cret" not in json.dumps(stats) and "duckdb" not in stats["store"]


def test_a_token_for_a_project_that_holds_nothing_is_made_with_a_warning(home, tmp_path, capsys, caplog):
    src = tmp_path / "items.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "The API listens on port 8080.", "ref": "port"}))
    assert main(["import", str(src), "--project", "infra"]) == 0
    capsys.readouterr()
    assert main(["tokens", "add", "ci-bot", "--projects", "infra,infar"]) == 0
    assert capsys.readouterr().out.startswith("amr_")
    assert "'infar' holds nothing yet (a typo?); the store holds infra" in caplog.text
    assert "'infra' holds" not in caplog.text


def test_a_command_run_in_a_repository_works_on_that_repositorys_project(home, tmp_path, capsys, monkeypatch):
    """The project setup, the hook and captured sessions use for the repository, so notes a user
    adds from its folder reach the agent working there; outside a repository, 'default'."""
    repo = tmp_path / "payments-api"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    monkeypatch.delenv("AGENTMEMREC_PROJECT", raising=False)
    monkeypatch.chdir(repo / "src")
    src = tmp_path / "items.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "The ledger job runs at 02:00 UTC.", "ref": "t1"}))
    assert main(["import", str(src)]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["import", str(src)]) == 0
    capsys.readouterr()
    assert main(["ls"]) == 0
    listing = capsys.readouterr().out
    assert re.search(r"^payments-api +1 +1 ", listing, re.M) and re.search(r"^default +1 +1 ", listing, re.M), listing
    assert main(["ls", "--project", "payments-api"]) == 0
    assert "default" not in capsys.readouterr().out
    assert main(["ls", "--project", "nope"]) == 0
    assert "project nope holds nothing yet" in capsys.readouterr().out


def test_a_linked_worktree_works_on_its_repositorys_project(home, tmp_path, capsys, monkeypatch):
    """`git worktree add ../tw-feature`: the branch's folder shares the repository's memory."""
    repo, tree = tmp_path / "tidewater", tmp_path / "tw-feature"
    for args in (["init", "-q", str(repo)], ["-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@b",
                                             "commit", "-q", "--allow-empty", "-m", "x"],
                 ["-C", str(repo), "worktree", "add", "-q", str(tree)]):
        subprocess.run(["git", *args], check=True)
    monkeypatch.delenv("AGENTMEMREC_PROJECT", raising=False)
    src = tmp_path / "items.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "Job locks use Postgres advisory locks.", "ref": "t1"}))
    monkeypatch.chdir(tree)
    assert main(["import", str(src)]) == 0
    capsys.readouterr()
    monkeypatch.chdir(repo)
    assert main(["ls"]) == 0
    assert re.search(r"^tidewater +1 +1 ", capsys.readouterr().out, re.M)


def test_a_recall_the_core_would_refuse_is_refused_before_a_store_is_made(home, capsys):
    for args, said in ((["recall", "  "], "query is empty"),
                       (["recall", "ledger", "--budget", "0"], "--budget must be an integer in [200, 200000]")):
        assert main(args) == 2
        assert said in capsys.readouterr().err
    assert not home.exists()  # no store file, no lock: nothing was written


def test_an_option_a_command_does_not_take_gets_that_commands_usage(home, capsys):
    with pytest.raises(SystemExit) as done:
        main(["recall", "ledger", "--bogus"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "usage: agentmemrec recall" in err and "unrecognized arguments: --bogus" in err


def test_an_import_names_the_files_line_for_what_only_the_store_refuses(home, tmp_path, capsys, monkeypatch):
    from agentmemrec.server.cli import memory as cli_memory
    monkeypatch.setattr(cli_memory, "IMPORT_BATCH", 2)
    src = tmp_path / "items.jsonl"
    rows = [{"kind": "turn", "text": "first", "ref": "a"}, {"kind": "turn", "text": "second", "ref": "b"},
            {"kind": "turn", "text": "third", "ref": "c"},
            {"kind": "decision", "text": "Use Kafka.", "ref": "d", "supersedes": "ghost"}]
    src.write_text("\n\n".join(json.dumps(r) for r in rows) + "\n")  # blank lines between: item 4 is line 7
    assert main(["import", str(src), "--project", "infra"]) == 2
    err = capsys.readouterr().err
    assert "line 7, field 'supersedes': 'ghost' names no unit" in err
    assert "the 2 items before it are stored; fix it and run the import again" in err


def test_a_store_that_cannot_be_opened_is_said_once(home):
    """As a user's terminal shows it: the logged error and the command's own line said it twice."""
    done = subprocess.run([sys.executable, "-m", "agentmemrec.server.cli", "recall", "hello there", "--store",
                           "postgresql://postgres@127.0.0.1:1/x"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("cannot open the PostgreSQL store at 127.0.0.1:1/x") == 1, done.stderr


def test_a_command_that_wrote_with_no_server_running_embeds_what_it_wrote(home, default_home, tmp_path, capsys):
    """With no server to embed in the background, the import itself embeds, so a later recall
    finds the new units through the dense channel too (and says nothing is pending)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "models").symlink_to(default_home / "models")
    src = tmp_path / "items.jsonl"
    src.write_text("\n".join(json.dumps({"kind": "turn", "text": f"Service {i} publishes to the {w} topic.",
                                         "ref": f"s{i}"}) for i, w in enumerate(["billing", "audit", "search"])))
    assert main(["import", str(src), "--project", "infra"]) == 0
    assert "embed" in capsys.readouterr().err  # the progress bar, on stderr
    assert main(["recall", "which topic does service 1 publish to", "--project", "infra", "--json"]) == 0
    slate = json.loads(capsys.readouterr().out)
    assert not any("not yet embedded" in n for n in slate["notes"]), slate["notes"]
    assert any(i["ref"] == "s1" for i in slate["items"])


def test_a_command_that_writes_one_note_embeds_it_and_leaves_the_projects_backlog_pending(
        home, default_home, tmp_path, capsys, caplog):
    """Adding one note used to embed the project's whole backlog first (minutes after a large
    import stopped mid-way); the command embeds what it wrote and says what stays pending."""
    caplog.set_level(logging.INFO, logger="agentmemrec")
    home.mkdir(parents=True, exist_ok=True)
    (home / "models").symlink_to(default_home / "models")
    backlog = Memory.open(home, background=False)
    backlog.remember("infra", [{"kind": "turn", "text": f"Old note {i} on queue sizing."} for i in range(40)])
    backlog.store.close()  # as a process that stopped before embedding: nothing of it has a vector
    src = tmp_path / "one.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "Service 7 publishes to the billing topic.", "ref": "s7"}))
    assert main(["import", str(src), "--project", "infra"]) == 0
    assert "40 units not yet embedded stay pending (40 in infra)" in caplog.text
    after = Memory.open(home, background=False)
    assert after.dense.vectors.count_pending("infra") == 40  # the backlog, left to a server
    slate = after.recall("infra", "which topic does service 7 publish to")
    why = after.explain(slate.slate_id, {"infra"})
    assert next(c for c in why["candidates"] if c["ref"] == "s7")["channels"].keys() == {"bm25", "dense"}
    after.close()


def test_escape_sequences_in_memory_are_shown_not_sent_to_the_terminal(home, tmp_path, capsys):
    """Stored text is anyone's: an OSC could set the title or write the clipboard (OSC 52), a CSI
    clear the screen. Human output shows them as escapes; JSON carries them, escaped, unchanged."""
    text = "ESCTEST \x1b]52;c;cHduZWQ=\x07 \x1b[2J \x9b31m red\rover\r\nnext\tcol"
    src = tmp_path / "ansi.jsonl"
    src.write_text("\n".join(json.dumps(item) for item in (
        {"kind": "turn", "text": text, "ref": "t1"},
        {"kind": "decision", "ref": "adr-1", "title": "Escapes", "status": "accepted", "text": text})) + "\n")
    assert main(["import", str(src), "--project", "esc"]) == 0
    capsys.readouterr()
    shown = []
    for args in (["recall", "ESCTEST red"], ["show", "t1"], ["ls", "--decisions"]):
        assert main([*args, "--project", "esc"]) == 0
        shown.append(capsys.readouterr().out)
    for out in shown:
        assert "ESCTEST \\u001b]52;c;cHduZWQ=\\u0007 \\u001b[2J \\u009b31m red" in out, out
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", out.replace("\r\n", "\n"))
    assert "red\\u000dover\r\nnext\tcol" in shown[1]  # show keeps the text as stored: CRLF and tab too
    assert main(["show", "t1", "--project", "esc", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["text"] == text


def test_a_command_stopped_by_ctrl_c_leaves_its_embedding_to_the_next_process(caplog):
    """^C during `import` used to embed the project's whole backlog in the foreground first."""
    from agentmemrec.server.cli.common import embed_written
    embedded = []

    class Written:
        def pending_written(self):
            return {"p": 5}

        def embed_written(self, progress):
            embedded.append(True)
            return {}

    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:  # as when close() runs in the command's `finally` on the way out
        embed_written(Written())
    assert embedded == [] and "5 units wait to be embedded" in caplog.text
    embed_written(Written())
    assert embedded == [True]
