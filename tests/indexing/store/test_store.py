"""Stage 1: the store and the write path, on both backends (a real DuckDB file, a real
PostgreSQL database); what only DuckDB has (its file, one process's cache) on DuckDB."""

from __future__ import annotations

from datetime import datetime

import duckdb
import numpy as np
import pytest

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.store.backends import open_store
from agentmemrec.indexing.store import pg_migrations
from agentmemrec.indexing.store.duckdb_store import MIGRATIONS, DuckDBStore
from agentmemrec.indexing.store.migrations import ORPHANS
from agentmemrec.indexing.store.protocol import Store
from agentmemrec.indexing.units import validate_batch
from agentmemrec.ranking.memory import Memory
from agentmemrec.server.cli import main

from helpers import BOTH


def write(store: Store, project: str, *raw: dict) -> list:
    return store.write(project, validate_batch(list(raw)))


@pytest.fixture
def reopen(tmp_path, store_url):
    """Opens the test's store, the same one each time: a DuckDB file, or a PostgreSQL schema."""
    return lambda: open_store(tmp_path, store_url)


def test_migrations_are_numbered_and_applied_once(tmp_path):
    path = tmp_path / "m.duckdb"
    DuckDBStore(path).close()
    store = DuckDBStore(path)
    versions = [v for (v,) in store.cursor().execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()]
    assert versions == list(range(1, len(MIGRATIONS) + 1))
    store.close()


@BOTH
def test_units_survive_a_restart_with_their_ids_and_token_counts(reopen):
    store = reopen()
    [res] = write(store, "p", {"kind": "turn", "text": "hello world", "ref": "r"})
    store.close()
    store = reopen()
    unit = store.units("p", res.ids)[res.ids[0]]
    assert (unit.ref, unit.text, unit.tokens) == ("r", "hello world", 2)
    store.close()


@BOTH
def test_a_failing_item_rolls_back_the_whole_batch(reopen):
    store = reopen()
    with pytest.raises(InputError, match="names no unit"):
        write(store, "p", {"kind": "turn", "text": "first"},
              {"kind": "decision", "text": "second", "supersedes": "missing"})
    assert store.count_units("p") == 0 and store.generation("p") == 0
    store.close()


@BOTH
def test_supersedes_may_name_a_decision_earlier_in_the_same_batch(reopen):
    store = reopen()
    a, b = write(store, "p", {"kind": "decision", "ref": "a", "text": "old"},
                 {"kind": "decision", "ref": "b", "text": "new", "supersedes": "a"})
    units = store.units("p", [a.ids[0], b.ids[0]])
    assert units[a.ids[0]].superseded_by == b.ids[0] and units[b.ids[0]].supersedes == a.ids[0]
    store.close()


@BOTH
def test_a_supersedes_cycle_is_refused(reopen):
    store = reopen()
    write(store, "p", {"kind": "decision", "ref": "a", "text": "A"},
          {"kind": "decision", "ref": "b", "text": "B", "supersedes": "a"})
    with pytest.raises(InputError, match="cycle"):
        write(store, "p", {"kind": "decision", "ref": "a", "text": "A again", "supersedes": "b"})
    store.close()


@BOTH
def test_supersedes_must_name_a_decision_of_the_same_project(reopen):
    store = reopen()
    write(store, "other", {"kind": "decision", "ref": "x", "text": "elsewhere"})
    write(store, "p", {"kind": "turn", "ref": "t", "text": "a turn"})
    with pytest.raises(InputError, match="names no unit"):
        write(store, "p", {"kind": "decision", "text": "n", "supersedes": "x"})
    with pytest.raises(InputError, match="only a decision"):
        write(store, "p", {"kind": "decision", "text": "n", "supersedes": "t"})
    store.close()


@BOTH
def test_a_note_rewritten_shorter_loses_its_extra_chunks(reopen):
    store = reopen()
    long = "\n\n".join(f"# H{i}\n\n" + "word " * 50 for i in range(5))
    [first] = write(store, "p", {"kind": "note", "path": "a.md", "text": long})
    [second] = write(store, "p", {"kind": "note", "path": "a.md", "text": "# H0\n\nshort now"})
    assert len(first.ids) == 5 and second.ids == first.ids[:1] and second.outcome == "updated"
    assert store.count_units("p") == 1
    store.close()


@BOTH
def test_changing_a_refs_kind_is_refused(reopen):
    store = reopen()
    write(store, "p", {"kind": "turn", "ref": "r", "text": "t"})
    with pytest.raises(InputError, match="already names a turn"):
        write(store, "p", {"kind": "decision", "ref": "r", "text": "d"})
    store.close()


def test_the_store_is_a_real_duckdb_file(tmp_path, memory):
    memory.remember("p", [{"kind": "turn", "text": "on disk"}])
    memory.close()
    con = duckdb.connect(str(memory.store.path), read_only=True)
    assert con.execute("SELECT text FROM units").fetchall() == [("on disk",)]
    con.close()


@BOTH
def test_a_note_of_headings_only_is_stored_as_written(reopen):
    # Found by tests/test_hostile.py: such a note made no chunk, and the write failed obscurely.
    store = reopen()
    [result] = write(store, "p", {"kind": "note", "path": "a.md", "text": "## decisions\n\n# Title"})
    unit = store.units("p", result.ids)[result.ids[0]]
    assert result.outcome == "stored" and unit.text == "## decisions\n\n# Title"
    store.close()


@BOTH
@pytest.mark.parametrize("name", ["\u00b9", "#\u0663", "9" * 30, "#" + "1" * 5000])
def test_refs_that_look_numeric_but_are_no_unit_id_name_nothing(reopen, name):
    # Found by tests/test_hostile.py: '\u00b9'.isdigit() is true but int() refuses it.
    store = reopen()
    write(store, "p", {"kind": "turn", "text": "one"})
    assert store.ids_for("p", name) == []
    with pytest.raises(InputError, match="nothing to forget"):
        store.forget("p", [name])
    store.close()


def test_a_write_through_one_store_moves_the_generation_another_store_on_the_file_sees(tmp_path):
    first, second = DuckDBStore(tmp_path / "m.duckdb"), DuckDBStore(tmp_path / "m.duckdb")
    assert second.generation("p") == 0
    write(first, "p", {"kind": "turn", "text": "hello"})
    assert second.generation("p") == first.generation("p") == 1
    first.close()
    second.close()


@BOTH
def test_every_write_path_logs_the_units_it_changed(reopen):
    store = reopen()
    [a, b] = write(store, "p", {"kind": "turn", "ref": "a", "text": "one"}, {"kind": "turn", "text": "two"})
    write(store, "p", {"kind": "turn", "ref": "a", "text": "one, edited"}, {"kind": "turn", "text": "two"})
    store.rename_ref("p", "a", "a2", None)
    store.forget("p", [f"#{b.ids[0]}"])
    log = store.fetch("SELECT generation, unit_id FROM unit_changes WHERE project = 'p' "
                      "ORDER BY generation, unit_id")
    assert log == [(1, a.ids[0]), (1, b.ids[0]), (2, a.ids[0]), (3, a.ids[0]), (4, b.ids[0])]
    store.close()


@BOTH
def test_an_explanation_is_readable_at_once_and_after_a_restart(home, store_url):
    memory = Memory.open(home, store_url=store_url)
    memory.remember("p", [{"kind": "turn", "text": "kafka partitions payment events"}])
    slate = memory.recall("p", "kafka partitions")
    assert memory.explain(slate.slate_id, {"p"})["candidates"][0]["outcome"] == "in_slate"
    memory.close()
    memory = Memory.open(home, store_url=store_url)
    assert memory.explain(slate.slate_id, {"p"})["candidates"][0]["outcome"] == "in_slate"
    memory.close()


def test_flushes_at_once_store_each_explanation_once(home, monkeypatch, caplog):
    """The writer thread and a caller (close, a test, a benchmark) may flush together."""
    import threading
    import time
    memory = Memory.open(home)
    memory.remember("p", [{"kind": "turn", "text": "kafka partitions payment events"}])
    save = memory.store.save_slates
    monkeypatch.setattr(memory.store, "save_slates", lambda *a: (time.sleep(0.2), save(*a))[1])
    ids = [memory.recall("p", f"kafka partitions {i}").slate_id for i in range(3)]
    failed: list[BaseException] = []

    def flush() -> None:
        try:
            memory.slates.flush()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)
    threads = [threading.Thread(target=flush) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == [] and "saving slate explanations failed" not in caplog.text
    memory.close()
    memory = Memory.open(home)
    assert all(memory.explain(i, {"p"})["candidates"] for i in ids)
    memory.close()


@BOTH
def test_a_batch_mixing_new_and_stored_content_stores_only_the_new(reopen):
    store = reopen()
    [old] = write(store, "p", {"kind": "turn", "text": "old"})
    out = write(store, "p", {"kind": "turn", "text": "new"}, {"kind": "turn", "text": "old"},
                {"kind": "turn", "ref": "r", "text": "with a ref"})
    assert [r.outcome for r in out] == ["stored", "unchanged", "stored"] and out[1].ids == old.ids
    assert store.count_units("p") == 3 and store.generation("p") == 2
    store.close()


@BOTH
def test_units_read_after_a_write_are_the_written_ones_not_a_cached_copy(reopen):
    store = reopen()
    [old, kept] = write(store, "p", {"kind": "decision", "ref": "d1", "text": "Use Postgres."},
                        {"kind": "turn", "ref": "t", "text": "first words"})
    assert store.units("p", [old.ids[0], kept.ids[0]])[kept.ids[0]].text == "first words"  # now cached
    write(store, "p", {"kind": "turn", "ref": "t", "text": "second words"},
          {"kind": "decision", "ref": "d2", "text": "Use Postgres 16.", "supersedes": "d1"})
    seen = store.units("p", [old.ids[0], kept.ids[0]])
    assert seen[kept.ids[0]].text == "second words" and seen[old.ids[0]].superseded_by is not None
    store.forget("p", ["t"])
    assert kept.ids[0] not in store.units("p", [old.ids[0], kept.ids[0]])
    assert store.units("q", [old.ids[0]]) == {}  # another project's ids name nothing
    store.close()


@BOTH
def test_session_order_follows_a_turn_added_after_it_was_read(reopen):
    from agentmemrec.indexing.store.sessions import SessionIndex
    store = reopen()
    turns = write(store, "p", *({"kind": "turn", "session": "s1", "text": f"turn {i}",
                                 "at": f"2024-01-01T10:0{i}:00"} for i in range(3)))
    index = SessionIndex(store)
    first = index.around("p", ["s1"]).neighbours
    assert first[turns[2].ids[0]] == (turns[1].ids[0], None, 1.0)
    [added] = write(store, "p", {"kind": "turn", "session": "s1", "text": "turn 3", "at": "2024-01-01T10:03:00"})
    after = index.around("p", ["s1"]).neighbours
    assert after[turns[2].ids[0]] == (turns[1].ids[0], added.ids[0], 2 / 3)
    store.forget("p", [f"#{turns[1].ids[0]}"])
    gone = index.around("p", ["s1"]).neighbours
    assert turns[1].ids[0] not in gone and gone[turns[2].ids[0]] == (turns[0].ids[0], added.ids[0], 0.5)
    store.close()


@BOTH
def test_a_projects_speakers_are_followed_through_writes(reopen):
    """The dense channel leaves these names out of its query (tests/indexing/dense)."""
    from agentmemrec.indexing.dense.index import SpeakerNames
    store = reopen()
    [melanie, _] = write(store, "p", {"kind": "turn", "speaker": "Melanie", "text": "pottery class"},
                         {"kind": "turn", "role": "user", "text": "no speaker named"})
    write(store, "q", {"kind": "turn", "speaker": "Gina", "text": "another project's speaker"})
    names = SpeakerNames(store)
    assert store.speakers("p") == {"Melanie"} and names("p") == {"Melanie"}
    assert store.speakers("p", set(melanie.ids)) == {"Melanie"} and store.speakers("p", set()) == set()
    write(store, "p", {"kind": "turn", "speaker": "Caroline", "text": "wow"})
    assert names("p") == {"Melanie", "Caroline"} and names("q") == {"Gina"}
    store.close()


@BOTH
def test_a_warm_start_reads_sessions_and_the_newest_units_before_any_recall(reopen, monkeypatch):
    from agentmemrec.indexing.store.sessions import SessionIndex
    store = reopen()
    turns = write(store, "p", *({"kind": "turn", "session": f"s{i % 2}", "text": f"turn {i}",
                                 "at": f"2024-01-01T10:0{i}:00"} for i in range(5)))
    write(store, "q", {"kind": "turn", "session": "s0", "text": "another project's turn"})
    ids = [t.ids[0] for t in turns]
    whole = SessionIndex(store).around("p", ["s0", "s1"]).neighbours
    assert set(whole) == set(ids)
    store.close()

    store = reopen()  # a fresh process: nothing cached
    warmed = store.warm_units("p")
    assert [u.id for u in warmed] == sorted(ids, reverse=True)  # the newest first, no other project's
    index = SessionIndex(store)
    index.prime("p")
    monkeypatch.setattr(store, "_units_in", lambda *a: pytest.fail("a warmed unit was read again"))
    monkeypatch.setattr(store, "session_rows", lambda *a: pytest.fail("a primed session was read again"))
    units = store.units("p", ids)
    assert all(units[u.id] is u for u in warmed)
    pool = [units[ids[0]], units[ids[3]]]
    asked = index.around("p", ["s0", "s1"], pool)  # a pool's units: their neighbours only
    assert asked.neighbours == {u.id: whole[u.id] for u in pool}
    assert index.around("p", ["s0", "s1"]).neighbours == whole
    store.close()


@BOTH
def test_only_the_newest_explanations_are_kept_per_project(home, monkeypatch, store_url):
    from agentmemrec.indexing.store import slates
    monkeypatch.setattr(slates, "KEEP_SLATES", 2)
    memory = Memory.open(home, store_url=store_url)
    memory.remember("p", [{"kind": "turn", "text": "kafka partitions payment events"}])
    memory.remember("q", [{"kind": "turn", "text": "kafka in another project"}])
    first, *newest = [memory.recall("p", f"kafka question {i}").slate_id for i in range(3)]
    other = memory.recall("q", "kafka").slate_id
    memory.close()  # stores what is queued
    memory = Memory.open(home, store_url=store_url)
    with pytest.raises(InputError, match="unknown slate id"):
        memory.explain(first, {"p"})
    kept = [memory.explain(s, {"p"})["candidates"][0] for s in newest]
    assert all(c["features"]["bm25_rank"] is not None and c["features"]["dense_cosine"] is None for c in kept)
    assert memory.explain(other, {"q"})["slate_id"] == other  # another project's are its own
    memory.close()


@BOTH
def test_a_turn_longer_than_a_slate_is_stored_in_parts_each_of_which_can_be_recalled(memory):
    filler = "\n\n".join(f"Line {i}: the build log scrolls past with nothing of note in it." for i in range(160))
    needle = "The flaky test came from the Kafka consumer rebalancing while the payments migration ran."
    text = f"{filler}\n\n{needle}\n\n{filler}"
    [long] = memory.remember("p", [{"kind": "turn", "text": text, "ref": "log", "role": "assistant",
                                    "session": "s1"}])
    [short] = memory.remember("p", [{"kind": "turn", "text": "A short turn stays whole.", "session": "s1"}])
    parts = memory.store.units("p", long.ids)
    assert len(long.ids) >= 3 and len(short.ids) == 1
    assert all(u.ref == "log" and u.tokens <= 520 for u in parts.values())
    assert sum(u.tokens for u in parts.values()) > 2700  # whole, it could never fit the default slate
    slate = memory.recall("p", "why was the test flaky: Kafka consumer rebalancing?")
    assert any(needle in it.unit.text for it in slate.items) and slate.tokens_used <= 2700
    assert memory.forget("p", ["log"]) and memory.store.count_units("p") == 1


def test_a_long_log_without_blank_lines_is_split_between_lines_and_a_long_line_between_words(memory):
    lines = [f"2026-03-02 ERROR worker-{i} ECONNRESET calling payments.api/v2/charge id={i * 7919}"
             for i in range(300)]
    words = " ".join(f"retry{i}" for i in range(1500))  # one line of 4,000 tokens
    [log, line] = memory.remember("p", [{"kind": "turn", "text": "\n".join(lines), "ref": "log"},
                                        {"kind": "turn", "text": words, "ref": "line"}])
    parts = [memory.store.units("p", ids) for ids in (log.ids, line.ids)]
    assert len(parts[0]) >= 2 and len(parts[1]) >= 2
    for unit in parts[0].values():  # every part is whole lines of the log
        assert unit.tokens <= 512 and set(unit.text.splitlines()) <= set(lines)
    assert " ".join(u.text for u in sorted(parts[1].values(), key=lambda u: u.chunk)) == words


def vector_rows(store: Store) -> list:
    return store.fetch("SELECT unit_id, content_hash FROM vectors ORDER BY unit_id")


@BOTH
def test_forgetting_a_unit_removes_its_vector_and_text_hash(reopen):
    store = reopen()
    ids = [r.ids[0] for r in write(store, "p", {"kind": "turn", "ref": "a", "text": "kafka brokers"},
                                   {"kind": "turn", "ref": "b", "text": "redis caches"},
                                   {"kind": "note", "ref": "n", "path": "n.md", "text": "# One\nfirst\n# Two\nsecond"})]
    rows = store.vectors("m@1")
    [units] = list(rows.pending_windows("p"))
    pending, embedding = [u for u in units if u.ref != "b"], [u for u in units if u.ref == "b"]
    rows.put(pending, np.ones((len(pending), 4), dtype=np.float32), [u.content_hash for u in pending])
    store.forget("p", ["a", "b"])  # b is forgotten while its vector is being computed
    rows.put(embedding, np.ones((1, 4), dtype=np.float32), [embedding[0].content_hash])
    write(store, "p", {"kind": "note", "ref": "n", "path": "n.md", "text": "# One\nfirst"})  # a chunk less
    assert [r[0] for r in vector_rows(store)] == [ids[2]]  # the note's first chunk alone
    store.close()


@BOTH
def test_vectors_left_by_units_forgotten_before_are_removed_once_at_open(reopen):
    store = reopen()
    [kept, gone] = [r.ids[0] for r in write(store, "p", {"kind": "turn", "text": "kept"},
                                            {"kind": "turn", "text": "gone"})]
    rows = store.vectors("m@1")
    [units] = list(rows.pending_windows("p"))
    rows.put(units, np.ones((2, 4), dtype=np.float32), [u.content_hash for u in units])
    with store.transaction() as cur:  # what a forget of an earlier version left behind
        cur.execute("DELETE FROM units WHERE id = ?", [gone])
        migrations = pg_migrations.MIGRATIONS if store.index_dir is None else MIGRATIONS
        cur.execute("DELETE FROM schema_migrations WHERE version = ?", [migrations.index(ORPHANS) + 1])
    store.close()
    store = reopen()
    assert [r[0] for r in vector_rows(store)] == [kept]
    store.close()


@BOTH
def test_a_store_migrated_by_a_newer_version_is_refused_with_one_clear_line(reopen, tmp_path, store_url,
                                                                            monkeypatch, capsys):
    """Before, a write failed with the database's own error (a column this version does not fill)."""
    store = reopen()
    with store.transaction() as cur:  # what a newer version's migration leaves
        cur.execute("ALTER TABLE units ADD COLUMN visibility VARCHAR")
        cur.execute("INSERT INTO schema_migrations VALUES (?, ?)", [store.schema_version + 1, datetime(2030, 1, 1)])
    store.close()
    items = tmp_path / "one.jsonl"
    items.write_text('{"kind": "turn", "text": "hello from an older version"}\n')
    monkeypatch.setenv("AGENTMEMREC_HOME", str(tmp_path))
    assert main(["import", str(items), "--project", "p", *(["--store", store_url] if store_url else [])]) == 1
    err = capsys.readouterr().err
    assert f"was migrated by a newer AgentMemRec (schema version {store.schema_version + 1}; this one " \
           f"knows up to {store.schema_version}): upgrade this AgentMemRec" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err

