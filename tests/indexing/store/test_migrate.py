"""`agentmemrec migrate --to postgresql://...`: a local DuckDB store moved into a team store that
holds other units already; the same rows, links, vectors, tokens and slates come out; a second
run copies nothing and an interrupted run resumes."""

from __future__ import annotations

import os
import random
import sys

import anyio
import pytest

from agentmemrec.indexing.dense.backfill import embed_pending
from agentmemrec.indexing.store import migrate as migration
from agentmemrec.indexing.store.duckdb_store import DuckDBStore
from agentmemrec.indexing.store.postgres_store import PostgresStore
from agentmemrec.indexing.units import validate_batch
from agentmemrec.ranking.slate import build_slate
from agentmemrec.server.cli import main

from helpers import BagOfWords
from test_postgres import AS_OF, history, memory_on


def rows_by_key(store) -> dict:
    """Every unit as the store holds it, by (project, key), with links named by key."""
    rows = store.fetch("SELECT id, project, key, kind, ref, chunk, content_hash, text, tokens, session, role, "
                       "speaker, title, status, path, heading, recorded_at, supersedes, superseded_by FROM units")
    keys = {r[0]: r[2] for r in rows}
    return {(r[1], r[2]): (*r[3:17], keys.get(r[17]), keys.get(r[18])) for r in rows}


def vectors_by_key(store, model: str) -> dict:
    keys = {i: k for i, k in store.fetch("SELECT id, key FROM units WHERE project = 'p'")}
    _, parts = store.vectors(model).load("p")
    return {keys[i]: v.tobytes() for p in parts for i, v in zip(p.ids.tolist(), p.matrix)}


@pytest.fixture
def local(home, capsys):
    """The home's DuckDB store: a history with supersessions, notes and vectors, and a token."""
    memory = memory_on(DuckDBStore(home / "memory.duckdb"), BagOfWords())
    for batch in history(random.Random(11), 20):
        memory.remember("p", batch)
    memory.remember("q", [{"kind": "turn", "text": "another project's turn", "ref": "q1"}])
    embed_pending(memory.dense.vectors, memory.dense.embedder)
    memory.close()
    assert main(["tokens", "add", "alice", "--projects", "p"]) == 0
    capsys.readouterr()
    return home


def test_migrate_copies_rows_links_vectors_and_tokens_into_a_shared_store_and_slates_match(local, pg_url, capsys):
    team = PostgresStore(pg_url)  # a colleague's project is there first: the ids differ
    team.write("colleague", validate_batch([{"kind": "turn", "text": f"colleague turn {i}"} for i in range(7)]))
    assert embed_pending(team.vectors("bow@1"), BagOfWords()) == 7
    team.close()
    assert main(["migrate", "--to", pg_url]) == 0
    assert "units copied (0 already there)" in capsys.readouterr().out
    duck, pg = DuckDBStore(local / "memory.duckdb"), PostgresStore(pg_url)
    copied = rows_by_key(pg)
    assert {k: v for k, v in copied.items() if k[0] != "colleague"} == rows_by_key(duck)
    ours, theirs = vectors_by_key(duck, "bow@1"), vectors_by_key(pg, "bow@1")
    assert {i for (i,) in pg.fetch("SELECT id FROM units WHERE project = 'p'")} != \
           {i for (i,) in duck.fetch("SELECT id FROM units WHERE project = 'p'")}
    assert theirs == ours  # nothing to embed again
    assert [t.name for t in pg.tokens()] == ["alice"] and pg.token(duck.fetch("SELECT secret_sha256 FROM tokens")[0][0])
    memories = [memory_on(store, BagOfWords()) for store in (duck, pg)]
    assert memories[1].dense.vectors.count_pending("p") == 0  # every vector came along
    for query in ["kafka broker partition", "schema migration index"]:
        slates = [build_slate("s_000000000000", "p", s.ranked, 600, s.inputs)
                  for s in (m.select("p", query, AS_OF) for m in memories)]
        assert [(i.unit.ref, i.unit.text, i.status) for i in slates[0].items] == \
               [(i.unit.ref, i.unit.text, i.status) for i in slates[1].items] and slates[0].items
    for memory in memories:
        memory.close()
    assert main(["migrate", "--to", pg_url]) == 0  # again: nothing new
    assert capsys.readouterr().out.startswith("0 units copied (")


def test_an_interrupted_migration_resumes_and_stores_each_unit_once(local, pg_url, monkeypatch, capsys):
    monkeypatch.setattr(migration, "WINDOW", 7)
    calls = []

    def interrupt(n: int) -> None:
        calls.append(n)
        if len(calls) == 3:
            raise KeyboardInterrupt
    source, target = DuckDBStore(local / "memory.duckdb"), PostgresStore(pg_url)
    with pytest.raises(KeyboardInterrupt):
        migration.migrate(source, target, progress=interrupt)
    assert 0 < target.count_units("p") < source.count_units("p")
    moved = migration.migrate(source, target)
    assert moved.units_there == 21 and target.count_units("p") == source.count_units("p")
    assert rows_by_key(target) == rows_by_key(source)
    source.close()
    target.close()


def test_migrate_refuses_a_target_that_is_no_postgresql_url_and_a_home_without_a_store(home, capsys):
    assert main(["migrate", "--to", "sqlite:///x.db"]) == 2
    assert "must be a PostgreSQL URL" in capsys.readouterr().err
    assert main(["migrate", "--to", "postgresql://nobody@127.0.0.1:1/x"]) == 2
    assert "no store to migrate in" in capsys.readouterr().err


def test_a_ref_the_team_holds_with_other_content_is_reported_and_left_as_it_is(home, pg_url, capsys):
    """Another developer's decision under the same ref: migrate neither overwrites it nor links
    the local successor to it (before, the local supersession marked the team's decision replaced)."""
    team = PostgresStore(pg_url)
    [theirs] = team.write("payments", validate_batch([{"kind": "decision", "ref": "adr-1", "title": "Idempotency",
                                                       "text": "Charges need idempotency keys."}]))
    team.close()
    local = memory_on(DuckDBStore(home / "memory.duckdb"), BagOfWords())
    local.remember("payments", [{"kind": "decision", "ref": "adr-1", "title": "Logging", "text": "Logs are JSON."},
                                {"kind": "decision", "ref": "adr-x", "title": "No keys", "supersedes": "adr-1",
                                 "text": "The gateway dedups charges."}])
    local.close()
    assert main(["migrate", "--to", pg_url]) == 1
    out, err = capsys.readouterr()
    assert "1 units copied (0 already there), 0 supersession links" in out
    assert "1 refs are held in the target with other content" in err and "payments/adr-1" in err
    pg = PostgresStore(pg_url)
    [(text, superseded_by)] = pg.fetch("SELECT text, superseded_by FROM units WHERE id = ?", [theirs.ids[0]])
    assert (text, superseded_by) == ("Charges need idempotency keys.", None)
    assert pg.fetch("SELECT supersedes FROM units WHERE project = 'payments' AND ref = 'adr-x'") == [(None,)]
    pg.close()


def test_tokens_follow_the_projects_copied_and_a_revoked_one_stays_revoked(local, pg_url, capsys):
    assert main(["tokens", "add", "carol", "--projects", "p,q"]) == 0
    capsys.readouterr()
    assert main(["migrate", "--to", pg_url, "--project", "p"]) == 0
    assert "tokens not copied: carol (it reaches projects not copied)" in capsys.readouterr().out
    assert main(["tokens", "revoke", "alice", "--store", pg_url]) == 0
    assert main(["migrate", "--to", pg_url]) == 0
    assert "alice (revoked in the target)" in capsys.readouterr().out
    pg = PostgresStore(pg_url)
    assert [t.name for t in pg.tokens()] == ["carol"]
    pg.close()


def test_a_token_revoked_here_after_it_was_copied_is_named_with_how_to_revoke_it_in_the_target(local, pg_url, capsys):
    """Before, the next migrate said nothing: the developer had revoked the secret, and the team's
    replicas still accepted it."""
    assert main(["migrate", "--to", pg_url]) == 0
    assert main(["tokens", "revoke", "alice"]) == 0
    capsys.readouterr()
    assert main(["migrate", "--to", pg_url]) == 1
    err = capsys.readouterr().err
    assert "tokens revoked here are still accepted by the target: alice" in err
    assert f"agentmemrec tokens revoke alice --store {pg_url}" not in err  # the URL may hold a password
    assert "agentmemrec tokens revoke NAME --store URL" in err
    pg = PostgresStore(pg_url)
    assert [t.name for t in pg.tokens()] == ["alice"]  # the team's store is the team's to change
    pg.close()
    assert main(["tokens", "revoke", "alice", "--store", pg_url]) == 0
    assert main(["migrate", "--to", pg_url]) == 0


def test_migrate_refuses_a_project_the_store_does_not_hold_and_copies_nothing(local, pg_url, capsys):
    assert main(["migrate", "--to", pg_url, "--project", "nosuch"]) == 2
    assert "no project 'nosuch' in this store; its projects: p, q (nothing was copied)" in capsys.readouterr().err
    assert main(["migrate", "--to", pg_url, "--project", "../x"]) == 2
    assert "invalid project name" in capsys.readouterr().err
    pg = PostgresStore(pg_url)
    assert pg.tokens() == [] and pg.projects() == {}
    pg.close()



def test_a_unit_forgotten_in_the_team_store_is_not_copied_back_by_a_later_migrate(home, pg_url, capsys):
    """Before, the second migrate copied the forgotten units again under new ids."""
    secret = "the staging database runs as hunter2-but-not-a-pattern"
    local = memory_on(DuckDBStore(home / "memory.duckdb"), BagOfWords())
    local.remember("payments", [{"kind": "turn", "ref": "leak-1", "text": secret},
                                {"kind": "turn", "text": secret + ", said again without a ref"},
                                {"kind": "turn", "ref": "kept", "text": "the ledger closes at midnight"}])
    local.close()
    assert main(["migrate", "--to", pg_url]) == 0
    team = PostgresStore(pg_url)
    [(refless,)] = team.fetch("SELECT id FROM units WHERE ref IS NULL")
    team.close()
    assert main(["forget", "leak-1", f"#{refless}", "--project", "payments", "--store", pg_url]) == 0
    capsys.readouterr()
    assert main(["migrate", "--to", pg_url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("0 units copied (1 already there)")
    assert "2 units left out: they were forgotten in the target" in out
    team = PostgresStore(pg_url)
    assert [r for (r,) in team.fetch("SELECT ref FROM units")] == ["kept"]
    record = team.fetch("SELECT * FROM forgotten_keys")
    assert len(record) == 2 and "hunter2" not in repr(record)  # keys, never the text
    # a teammate may store the same content again: the record only keeps migrate from doing it
    [again] = team.write("payments", validate_batch([{"kind": "turn", "ref": "leak-1", "text": secret}]))
    assert again.outcome == "stored"
    team.close()
    assert main(["migrate", "--to", pg_url]) == 0
    assert capsys.readouterr().out.startswith("0 units copied (2 already there)")


@pytest.mark.anyio
async def test_migrate_while_an_agentmemrec_owner_holds_the_home_says_which_process_and_how_to_stop_it(
        local, pg_url, capsys):
    """Before: 'is open in another program: IO Error: Could not set lock ... See also duckdb.org'."""
    cmd = [sys.executable, "-m", "agentmemrec.server.cli", "owner"]
    async with await anyio.open_process(cmd, env={**os.environ, "AGENTMEMREC_HOME": str(local)}) as owner:
        with anyio.fail_after(120):
            log = b""
            async for chunk in owner.stderr:
                log += chunk
                if b"owning the memory store" in log:
                    break
        assert await anyio.to_thread.run_sync(main, ["migrate", "--to", pg_url]) == 2
        owner.terminate()
    err = capsys.readouterr().err
    assert f"an AgentMemRec process (pid {owner.pid}) owns the memory store in {local}" in err
    assert f"kill {owner.pid}), then run migrate again (nothing was copied)" in err and "duckdb.org" not in err
