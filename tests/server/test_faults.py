"""Faults: SIGKILL during an import and during an index rebuild, damaged derived indexes, a damaged
store file. After each, every acknowledged item is there once and the indexes agree with the rows."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.lexical.index import Bm25Channel, LexicalIndex
from agentmemrec.indexing.store import slates
from agentmemrec.indexing.store.duckdb_store import DuckDBStore
from agentmemrec.ranking.memory import Memory
from agentmemrec.server.app import create_server
from agentmemrec.server.cli import main

from helpers import call, settings_for, turn

pytestmark = pytest.mark.anyio

IMPORT_ITEMS = 12_000  # twelve batches of 1,000


def import_file(tmp_path: Path) -> Path:
    src = tmp_path / "big.jsonl"
    # Half the items carry a ref, half are keyed by their content: both paths must stay exact.
    src.write_text("".join(json.dumps({"kind": "turn", "text": f"Imported fact {i}: service s{i} runs "
                                       f"on port {10_000 + i}.", **({"ref": f"f{i}"} if i % 2 else {})})
                           + "\n" for i in range(IMPORT_ITEMS)))
    return src


def run_child(home: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Run `script` in a fresh interpreter on `home`; it is expected to SIGKILL itself."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return proc


def rows(home: Path, project: str = "p") -> list[tuple[int, str]]:
    con = duckdb.connect(str(home / "memory.duckdb"), read_only=True)
    out = con.execute("SELECT id, text FROM units WHERE project = ? ORDER BY id", [project]).fetchall()
    con.close()
    return out


def assert_index_agrees_with_rows(home: Path, project: str = "p") -> None:
    memory = Memory.open(home)
    snap = LexicalIndex(memory.store, home / "index" / "bm25").snapshot(project)
    ids, _, generation = memory.store.index_rows(project)
    assert snap.generation == generation and list(snap.ids) == ids
    base = home / "index" / "bm25" / project
    live = (base / "CURRENT").read_text()
    parts = json.loads((base / live / "manifest.json").read_text())["parts"]
    assert sorted(p.name for p in base.iterdir()) == sorted(["CURRENT", live, "parts"])  # no leftovers
    assert sorted(p.name for p in (base / "parts").iterdir()) == sorted(f"part-{n}.npz" for n in parts)
    memory.close()


def test_sigkill_during_a_large_import_loses_no_acknowledged_batch_and_a_rerun_completes(home, tmp_path):
    src = import_file(tmp_path)
    cmd = [sys.executable, "-m", "agentmemrec.server.cli", "import", str(src), "--project", "p"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    acknowledged = 0
    for line in proc.stderr:  # ends when the process does; the kill comes after the third batch
        if "committed" in line:
            acknowledged = int(line.rsplit("-", 1)[1].split()[0])
            if acknowledged >= 3000:
                proc.send_signal(signal.SIGKILL)
                break
    assert proc.wait(timeout=60) == -signal.SIGKILL
    texts = [t for _, t in rows(home)]
    assert len(texts) >= acknowledged and len(texts) % 1000 == 0  # whole batches, never part of one
    assert len(set(texts)) == len(texts)  # none twice
    assert {f"Imported fact {i}:" for i in range(acknowledged)} <= {t.split(" service")[0] for t in texts}
    assert main(["import", str(src), "--project", "p"]) == 0  # running it again finishes the job
    texts = [t for _, t in rows(home)]
    assert len(texts) == len(set(texts)) == IMPORT_ITEMS
    assert_index_agrees_with_rows(home)


def test_sigkill_inside_an_import_transaction_leaves_whole_batches_only(home, tmp_path):
    src = import_file(tmp_path)
    run_child(home, f"""
        import os, signal
        from agentmemrec.indexing.store.duckdb_store import DuckDBStore
        from agentmemrec.server.cli import main
        bump, calls = DuckDBStore._bump, []
        def bump_then_die(self, cur, project, *changed):
            bump(self, cur, project, *changed)
            calls.append(1)
            if len(calls) == 3:  # batch 3 is written but not committed
                os.kill(os.getpid(), signal.SIGKILL)
        DuckDBStore._bump = bump_then_die
        main(["import", {str(src)!r}, "--project", "p"])
    """)
    texts = [t for _, t in rows(home)]
    assert len(texts) == len(set(texts)) == 2000
    assert main(["import", str(src), "--project", "p"]) == 0
    assert len({t for _, t in rows(home)}) == len(rows(home)) == IMPORT_ITEMS
    assert_index_agrees_with_rows(home)


KILL_POINTS = {  # where the rebuild dies -> what it leaves: (CURRENT's generation, entries, files in parts/)
    "mid_part": ("np.savez", "g1", ["CURRENT", "g1", "parts"], 2),  # the new part half written
    "mid_snapshot": ("os.replace#2", "g1", ["CURRENT", "g1", ".g2.tmp", "parts"], 2),  # new snapshot unnamed
    "before_swap": ("os.replace#3", "g1", ["CURRENT", "g1", "g2", ".CURRENT.g2", "parts"], 2),  # not live
    "before_cleanup": ("shutil.rmtree", "g2", ["CURRENT", "g1", "g2", "parts"], 2),  # old one not removed
}


def index_state(home: Path) -> tuple[str, list[str], int]:
    base = home / "index" / "bm25" / "p"
    names = sorted((p.name.split("-")[0] + (".tmp" if p.name.endswith(".tmp") else "")
                    for p in base.iterdir()), key=lambda n: n.lstrip("."))
    return (base / "CURRENT").read_text().split("-")[0], names, len(list((base / "parts").iterdir()))


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_during_an_index_rebuild_is_repaired_at_the_next_start(home, point):
    memory = Memory.open(home)
    memory.remember("p", [{"kind": "turn", "text": f"Rebuild fact {i} about kafka topic t{i}."} for i in range(300)])
    memory.recall("p", "kafka")  # an index of the first generation exists
    memory.remember("p", [{"kind": "turn", "text": "The newest fact: kafka topic zebra."}])
    memory.close()
    where, live, left, part_files = KILL_POINTS[point]
    target, _, nth = where.partition("#")
    module, name = target.split(".")
    run_child(home, f"""
        import os, signal, shutil
        from pathlib import Path
        import numpy as np
        from agentmemrec.indexing.lexical.index import LexicalIndex
        from agentmemrec.indexing.store.duckdb_store import DuckDBStore
        real, calls = getattr({module}, {name!r}), []
        def then_die(*args, **kwargs):
            calls.append(1)
            if len(calls) == {int(nth or 1)}:
                if {name!r} == "savez":
                    real(*args, **kwargs)
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        setattr({module}, {name!r}, then_die)
        home = Path(os.environ["AGENTMEMREC_HOME"])
        LexicalIndex(DuckDBStore(home / "memory.duckdb"), home / "index" / "bm25").rebuild("p")
    """)
    assert index_state(home) == (live, sorted(left, key=lambda n: n.lstrip(".")), part_files)
    memory = Memory.open(home)
    assert "zebra" in memory.recall("p", "kafka zebra").context
    memory.close()
    assert_index_agrees_with_rows(home)


def _snapshot_dir(home: Path) -> Path:
    base = home / "index" / "bm25" / "p"
    return base / (base / "CURRENT").read_text()


@pytest.mark.parametrize("damage", ["flipped_byte", "missing_file", "missing_snapshot", "bad_pointer",
                                    "pointer_is_a_directory", "index_dir_gone"])
async def test_a_damaged_or_missing_index_is_rebuilt_and_the_server_answers(home, damage):
    settings = settings_for(home, "p")
    async with Client(create_server(settings)) as client:
        await call(client, "remember", items=[{"kind": "turn", "text": f"Damage fact {i} on host h{i}."}
                                              for i in range(50)])
        before = await call(client, "recall_slate", with_items=True, query="host h7")
    snap = _snapshot_dir(home)
    if damage == "flipped_byte":  # inside an array: it would load, but score wrong; the digest notices
        data = next((snap.parent / "parts").glob("part-*.npz"))
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
    elif damage == "missing_file":
        (snap / "vocab.json").unlink()
    elif damage == "missing_snapshot":
        os.rename(snap, snap.parent / "elsewhere")
    elif damage == "bad_pointer":
        (snap.parent / "CURRENT").write_bytes(b"\xff\xfe../../etc")
    elif damage == "pointer_is_a_directory":
        (snap.parent / "CURRENT").unlink()
        (snap.parent / "CURRENT").mkdir()
    else:
        shutil.rmtree(home / "index")
    async with Client(create_server(settings)) as client:
        after = await call(client, "recall_slate", with_items=True, query="host h7")
    assert [i["id"] for i in after["items"]] == [i["id"] for i in before["items"]]
    assert_index_agrees_with_rows(home)


def test_an_index_that_cannot_be_saved_is_still_served(home, caplog):
    memory = Memory.open(home)
    memory.remember("p", [{"kind": "turn", "text": "Read-only disks happen."}])
    (home / "index" / "bm25").mkdir(parents=True)
    (home / "index" / "bm25" / "p").write_text("a file where the index directory should be")
    assert "Read-only" in memory.recall("p", "disks").context
    assert "could not save the lexical index" in caplog.text
    memory.close()


async def test_a_damaged_store_file_gets_a_clear_error_and_the_server_stays_up(home, capsys, caplog):
    home.mkdir(parents=True)
    (home / "memory.duckdb").write_bytes(b"\x00not a duckdb file" * 512)
    caplog.set_level(logging.INFO, logger="agentmemrec")
    async with Client(create_server(settings_for(home, "p"))) as client:
        assert {t.name for t in (await client.list_tools()).tools} >= {"remember", "recall_slate"}
        [started] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("memory store in")]
        assert "(it cannot be opened: every call says why until it is fixed)" in started  # not "another process owns it"
        for _ in range(2):
            with pytest.raises(MCPError, match="not a valid DuckDB database.*Move the damaged file aside"):
                await client.call_tool("recall_slate", {"query": "anything"})
    assert main(["recall", "anything", "--project", "p"]) == 1
    err = capsys.readouterr().err
    assert "not a valid DuckDB database" in err and "Traceback" not in err


def test_ids_saved_with_the_snapshot_are_checked_not_trusted(home):
    memory = Memory.open(home)
    memory.remember("p", [{"kind": "turn", "text": f"Checked fact {i}."} for i in range(5)])
    memory.recall("p", "checked")
    memory.close()
    part = next((_snapshot_dir(home).parent / "parts").glob("part-*.npz"))
    with np.load(part) as saved:
        arrays = dict(saved)
    arrays["ids"] = arrays["ids"][::-1].copy()  # same length, wrong order: the row count cannot tell
    np.savez(part, **arrays)
    assert_index_agrees_with_rows(home)


class CrashingSlates(DuckDBStore):
    """A store whose explanations never get stored while `down`: the process that queued them is
    as good as killed before its writer ran."""

    down = True

    def save_slates(self, rows, keep):  # noqa: ANN001, ANN201 - the Store protocol's signature
        if self.down and any(project for _, project, _, _ in rows):
            raise OSError("killed before the explanation was stored")
        return super().save_slates(rows, keep)


def _memory_on(store) -> Memory:  # noqa: ANN001
    return Memory(store, [Bm25Channel(LexicalIndex(store, None))])


def test_an_explanation_lost_with_its_process_says_so_after_the_restart(tmp_path):
    dying = CrashingSlates(tmp_path / "memory.duckdb")
    before = _memory_on(dying)
    before.remember("p", [turn("payments move to kafka in may")])
    slate = before.recall("p", "kafka payments")
    after = _memory_on(DuckDBStore(tmp_path / "memory.duckdb"))  # the next owner, on the same file
    try:
        with pytest.raises(InputError, match="was lost: the process that owned the memory store stopped"):
            after.explain(slate.slate_id, {"p"})
        later = after.recall("p", "kafka payments")
        assert after.explain(later.slate_id, {"p"})["candidates"]
        with pytest.raises(InputError, match="unknown slate id"):
            after.explain("s_" + "0" * 16, {"p"})
    finally:
        dying.down = False
        before.close()
        after.close()


def test_explanations_waiting_for_a_stuck_writer_are_bounded(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(slates, "QUEUE_WAIT_S", 0.01)
    store = CrashingSlates(tmp_path / "memory.duckdb")
    memory = _memory_on(store)
    memory.remember("p", [turn("payments move to kafka in may")])
    ids = [memory.recall("p", "kafka payments").slate_id for _ in range(slates.MAX_QUEUED + 6)]
    try:
        with pytest.raises(InputError, match="unknown slate id"):
            memory.explain(ids[0], {"p"})  # the oldest was dropped, and said so in the log
        assert memory.explain(ids[-1], {"p"})["candidates"] and "was dropped" in caplog.text
    finally:
        store.down = False
        memory.close()


class _FullDisk:
    """A cursor whose COMMIT of a write fails as on a full disk: DuckDB ends the transaction, then
    raises. Reads commit nothing to disk and go on working."""

    def __init__(self, cur: duckdb.DuckDBPyConnection) -> None:
        self.cur, self.wrote = cur, False

    def execute(self, sql: str, *args: object) -> object:
        self.wrote |= sql.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
        if sql == "COMMIT" and self.wrote:
            self.cur.execute("ROLLBACK")
            raise duckdb.IOException('Could not write file "memory.duckdb.wal": No space left on device')
        return self.cur.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.cur, name)


def test_a_full_disk_is_named_and_a_recall_still_answers(home, monkeypatch, capsys, caplog):
    src = home.parent / "items.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "The ledger job runs at 02:00 UTC.", "ref": "t1"}))
    assert main(["import", str(src), "--project", "infra"]) == 0
    plain = DuckDBStore.cursor
    monkeypatch.setattr(DuckDBStore, "cursor", lambda self: _FullDisk(plain(self)))
    capsys.readouterr()
    src.write_text(json.dumps({"kind": "turn", "text": "The ledger job moved to 03:00 UTC.", "ref": "t2"}))
    assert main(["import", str(src), "--project", "infra"]) != 0
    assert "No space left on device" in capsys.readouterr().err  # not "cannot rollback"
    # a recall's slate is served; only its explanation, saved at close, is lost (and said so)
    assert main(["recall", "when does the ledger job run", "--project", "infra"]) == 0
    assert "The ledger job runs at 02:00 UTC." in capsys.readouterr().out
    assert "explanations of 1 slates could not be saved" in caplog.text
    monkeypatch.setattr(DuckDBStore, "cursor", plain)
    assert main(["ls", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["units"] == 1  # the failed write left nothing
