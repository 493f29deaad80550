"""Project notes follow the files: the real watcher on real files, bounded waits (one sleep: a
save paused half-way)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import AsyncIterator

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp import Client
from watchfiles import Change

from agentmemrec.indexing.sources.watcher import NoteWatcher, SyncReport, watch_notes
from agentmemrec.ranking.memory import Memory
from agentmemrec.server.app import create_server
from agentmemrec.server.cli import main

from helpers import call, settings_for

pytestmark = pytest.mark.anyio
PROJECT = "alpha"
GUIDE = "# Guide\n\nHow to work here.\n\n## Setup\n\nRun make bootstrap to install the toolchain.\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git checkout: paths are stored relative to it even when only docs/ is watched."""
    root = tmp_path / "payments"
    (root / ".git").mkdir(parents=True)
    (root / "docs" / "adr").mkdir(parents=True)
    (root / "docs" / "guide.md").write_text(GUIDE)
    return root


def write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)


@asynccontextmanager
async def watching(memory: Memory, folder: Path
                   ) -> AsyncIterator[tuple[SyncReport, MemoryObjectReceiveStream[SyncReport]]]:
    send, receive = anyio.create_memory_object_stream[SyncReport](100)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(20):
            first = await tg.start(partial(watch_notes, memory, PROJECT, folder,
                                           on_sync=send.send_nowait))
        yield first, receive
        tg.cancel_scope.cancel()


async def next_change(reports: MemoryObjectReceiveStream[SyncReport]) -> SyncReport:
    with anyio.fail_after(20):
        return await reports.receive()


def context(memory: Memory, query: str) -> str:
    return memory.recall(PROJECT, query, budget=4000).context


def units_of(memory: Memory, ref: str) -> list:
    ids = memory.store.ids_for(PROJECT, ref)
    found = memory.store.units(PROJECT, ids)
    return [found[i] for i in ids]


async def test_notes_are_recalled_with_their_path_and_heading_trail(memory, repo):
    async with watching(memory, repo / "docs") as (first, reports):
        assert first.written == 1
        write(repo / "docs" / "runbook.md", "# Runbook\n\n## Rollback\n\nRoll back with helm rollback.\n")
        change = await next_change(reports)
    assert change.paths == ("docs/runbook.md",)
    text = context(memory, "how do we roll back with helm, and bootstrap the toolchain")
    assert "note docs/runbook.md > Runbook > Rollback: Roll back with helm rollback." in text
    assert "note docs/guide.md > Guide > Setup: Run make bootstrap" in text


async def test_an_edit_rewrites_only_the_chunk_that_changed(memory, repo):
    async with watching(memory, repo / "docs") as (_, reports):
        before = units_of(memory, "file:docs/guide.md")
        write(repo / "docs" / "guide.md", GUIDE.replace("make bootstrap", "just setup"))
        change = await next_change(reports)
    after = units_of(memory, "file:docs/guide.md")
    assert change.written == 1
    assert [u.id for u in after] == [u.id for u in before] and len(after) == 2
    assert (after[0].text, after[0].at, after[0].seq) == (before[0].text, before[0].at, before[0].seq)
    assert "just setup" in after[1].text and after[1].at > before[1].at
    assert "make bootstrap" not in context(memory, "toolchain setup")


async def test_a_renamed_note_keeps_its_units(memory, repo):
    async with watching(memory, repo / "docs") as (_, reports):
        ids = memory.store.ids_for(PROJECT, "file:docs/guide.md")
        os.rename(repo / "docs" / "guide.md", repo / "docs" / "handbook.md")
        change = await next_change(reports)
    assert (change.written, change.renamed, change.forgotten) == (0, 1, 0)  # renamed, not also written
    assert memory.store.ids_for(PROJECT, "file:docs/handbook.md") == ids
    assert memory.store.ids_for(PROJECT, "file:docs/guide.md") == []
    assert "note docs/handbook.md > Guide > Setup" in context(memory, "bootstrap toolchain")


async def test_a_save_that_truncates_and_then_writes_keeps_the_notes_units(memory, repo):
    """Some editors truncate a file, then write it: the note is not removed meanwhile."""
    async with watching(memory, repo / "docs") as (_, reports):
        before = units_of(memory, "file:docs/guide.md")
        (repo / "docs" / "guide.md").write_text("")  # truncated; the write follows after a pause
        await anyio.sleep(0.3 + 1.6)  # past the watcher's debounce: it reads the empty file
        write(repo / "docs" / "guide.md", GUIDE.replace("make bootstrap", "just setup"))
        change = await next_change(reports)
    after = units_of(memory, "file:docs/guide.md")
    assert (change.written, change.forgotten) == (1, 0)
    assert [u.id for u in after] == [u.id for u in before] and after[0].at == before[0].at


async def test_a_note_left_empty_is_removed_once_it_stays_empty(memory, repo):
    async with watching(memory, repo / "docs") as (_, reports):
        (repo / "docs" / "guide.md").write_text("")
        change = await next_change(reports)
    assert change.forgotten == 1 and memory.store.count_units(PROJECT) == 0


async def test_two_watchers_on_one_folder_report_no_failure_for_what_the_other_did(memory, repo, caplog):
    """What setup gives two Claude Code sessions open in one repository: a server each."""
    send, reports = anyio.create_memory_object_stream[SyncReport](100)
    async with anyio.create_task_group() as tg:
        for _ in range(2):  # both report to one stream: whichever acts first reports the change
            with anyio.fail_after(20):
                await tg.start(partial(watch_notes, memory, PROJECT, repo / "docs", on_sync=send.send_nowait))
        write(repo / "docs" / "old.md", "# Old\n\nAn old note about the billing cron.\n")
        await next_change(reports)
        os.rename(repo / "docs" / "guide.md", repo / "docs" / "handbook.md")
        (repo / "docs" / "old.md").unlink()
        await next_change(reports)
        await anyio.sleep(2 * 1.6)  # the other's pass over the same events (its debounce)
        tg.cancel_scope.cancel()
    assert "not stored" not in caplog.text and "WARNING" not in caplog.text
    assert memory.store.ids_for(PROJECT, "file:docs/old.md") == []
    assert len(memory.store.ids_for(PROJECT, "file:docs/handbook.md")) == 2


async def test_a_deleted_note_is_forgotten(memory, repo):
    async with watching(memory, repo / "docs") as (_, reports):
        (repo / "docs" / "guide.md").unlink()
        change = await next_change(reports)
    assert change.forgotten == 1
    assert memory.store.count_units(PROJECT) == 0
    assert "bootstrap" not in context(memory, "bootstrap toolchain")


async def test_a_watched_folder_removed_and_made_again_is_watched_anew(memory, repo):
    """A branch checked out without the folder, then with it: the OS watch followed the removed
    folder, so the one made again must be watched anew, and what it holds then reconciled."""
    async with watching(memory, repo / "docs") as (_, reports):
        shutil.rmtree(repo / "docs")
        gone = await next_change(reports)
        write(repo / "docs" / "adr" / "0003-rabbitmq.md", ADR_3)
        back = await next_change(reports)
        write(repo / "docs" / "guide.md", GUIDE)
        edited = await next_change(reports)
        os.rename(repo / "docs", repo / "docs-old")  # moved away: no event names its files
        moved = await next_change(reports)
    assert (gone.forgotten, back.paths, edited.paths) == (1, ("docs/adr/0003-rabbitmq.md",), ("docs/guide.md",))
    assert moved.forgotten == 2 and memory.store.count_units(PROJECT) == 0


async def test_a_burst_of_saves_is_one_reingest(memory, repo):
    async with watching(memory, repo / "docs") as (_, reports):
        generation = memory.store.generation(PROJECT)
        for n in range(10):
            write(repo / "docs" / "guide.md", GUIDE + f"\nRevision {n} of the guide.\n")
        burst = await next_change(reports)
        write(repo / "docs" / "later.md", "A later note.")  # a marker: every earlier pass is done
        marker = await next_change(reports)
    assert burst.written == 1 and marker.paths == ("docs/later.md",)
    assert memory.store.generation(PROJECT) == generation + 2  # the burst once, the marker once
    assert "Revision 9 of the guide." in context(memory, "revision of the guide")


ADR_3 = ("# 3. Payment events on RabbitMQ\n\nDate: 2026-01-05\n\n## Status\n\nAccepted\n\n"
         "## Decision\n\nPublish payment events to RabbitMQ.\n")
ADR_12 = ("---\nstatus: accepted\ndate: 2026-04-14\n---\n# 12. Payment events move to Kafka\n\n"
          "Supersedes ADR-0003.\n\n## Decision\n\nPublish payment events to Kafka.\n")


async def test_an_adr_superseding_another_links_both_even_when_it_arrives_first(memory, repo):
    async with watching(memory, repo / "docs") as (_, reports):
        write(repo / "docs" / "adr" / "0012-kafka.md", ADR_12)  # its predecessor is not there yet
        await next_change(reports)
        write(repo / "docs" / "adr" / "0003-rabbitmq.md", ADR_3)
        change = await next_change(reports)
    assert set(change.paths) == {"docs/adr/0003-rabbitmq.md", "docs/adr/0012-kafka.md"}
    [old], [new] = units_of(memory, "adr:0003"), units_of(memory, "adr:0012")
    assert (old.kind, old.status, old.superseded_by, old.path) == (
        "decision", "accepted", new.id, "docs/adr/0003-rabbitmq.md")
    assert (new.status, new.supersedes, new.title) == ("accepted", old.id, "12. Payment events move to Kafka")
    text = context(memory, "where do we publish payment events rabbitmq")
    assert f"[#{old.id} adr:0003] decision (SUPERSEDED by #{new.id}, 2026-01-05)" in text
    assert f"[#{new.id} adr:0012] decision (accepted, 2026-04-14)" in text


async def test_adr_statuses_map_onto_the_stores(memory, repo):
    for n, status in enumerate(["Proposed", "Rejected", "Deprecated"], start=20):
        write(repo / "docs" / "adr" / f"00{n}-choice.md", f"# {n}. Choice {n}\n\nStatus: {status}\n\nText.")
    write(repo / "docs" / "notes" / "ideas.md", "# Ideas\n\nStatus: in progress\n\nNot a decision.")
    async with watching(memory, repo / "docs"):
        pass
    statuses = {n: units_of(memory, f"adr:00{n}")[0] for n in (20, 21, 22)}
    assert [statuses[n].status for n in (20, 21, 22)] == ["proposed", "rejected", "superseded"]
    assert statuses[22].text.startswith("Status: Deprecated.")
    assert units_of(memory, "file:docs/notes/ideas.md")[0].kind == "note"


async def test_ignored_hidden_build_binary_and_oversized_files_are_skipped(memory, repo):
    write(repo / ".gitignore", "docs/generated/\n*.draft.md\n")
    write(repo / "docs" / "generated" / "api.md", "generated zebra reference")
    write(repo / "docs" / "plan.draft.md", "draft zebra plan")
    write(repo / "docs" / ".hidden.md", "hidden zebra")
    write(repo / "docs" / "node_modules" / "pkg" / "README.md", "vendored zebra readme")
    write(repo / "docs" / "diagram.md", b"zebra\x00\x01\x02binary")
    write(repo / "docs" / "huge.md", "zebra " * 30_000)
    write(repo / "docs" / "logo.png", b"\x89PNG zebra")
    async with watching(memory, repo / "docs") as (first, reports):
        write(repo / "docs" / "another.draft.md", "a second zebra draft")  # ignored while watching
        write(repo / "docs" / "zebra.md", "The one zebra note that counts.")
        change = await next_change(reports)
    assert first.paths == ("docs/guide.md",) and change.paths == ("docs/zebra.md",)
    assert memory.store.count_units(PROJECT) == 3  # the guide's two chunks and the zebra note
    assert {item.unit.path for item in memory.recall(PROJECT, "zebra").items} == {"docs/zebra.md"}


async def test_a_restart_reconciles_changes_made_while_stopped(memory, repo):
    write(repo / "docs" / "old.md", "# Old\n\nA note about the legacy billing cron.")
    write(repo / "docs" / "moved.md", "# Moved\n\nA note about the ledger export.")
    async with watching(memory, repo / "docs"):
        pass
    memory.remember(PROJECT, [{"kind": "note", "path": "docs/gone.md", "text": "A client's note."}])
    ids = {ref: memory.store.ids_for(PROJECT, ref) for ref in ("file:docs/guide.md", "file:docs/moved.md")}
    (repo / "docs" / "old.md").unlink()  # while nothing watches
    os.rename(repo / "docs" / "moved.md", repo / "docs" / "ledger.md")
    write(repo / "docs" / "guide.md", GUIDE.replace("make bootstrap", "just setup"))
    write(repo / "docs" / "new.md", "# New\n\nA note written while the server was down.")
    async with watching(memory, repo / "docs") as (first, _):
        pass
    assert (first.written, first.renamed, first.forgotten) == (2, 1, 1)  # guide and new; ledger renamed
    assert memory.store.ids_for(PROJECT, "file:docs/ledger.md") == ids["file:docs/moved.md"]
    assert memory.store.ids_for(PROJECT, "file:docs/guide.md") == ids["file:docs/guide.md"]
    assert memory.store.ids_for(PROJECT, "file:docs/old.md") == []
    assert memory.store.ids_for(PROJECT, "docs/gone.md")  # the client's note is not the watcher's
    assert memory.store.count_units(PROJECT) == 2 + 1 + 1 + 1  # guide, ledger, new, client note
    async with watching(memory, repo / "docs") as (again, _):
        pass
    assert not again.changed  # a second restart finds nothing to do


async def test_serve_watch_fills_the_project_from_the_servers_lifespan(home, repo, caplog):
    caplog.set_level(logging.INFO, logger="agentmemrec")
    settings = replace(settings_for(home, PROJECT), watch=(repo / "docs",))
    async with Client(create_server(settings)) as client:
        assert f"watching {repo / 'docs'}: its notes and ADRs" in caplog.text  # one line a folder
        with anyio.fail_after(20):
            while not (await call(client, "recall_slate", with_items=True, query="bootstrap toolchain"))["items"]:
                await anyio.sleep(0.05)  # polling the condition, bounded by fail_after
        write(repo / "docs" / "adr" / "0003-rabbitmq.md", ADR_3)
        with anyio.fail_after(20):
            while "adr:0003" not in {i["ref"] for i in (await call(
                    client, "recall_slate", with_items=True, query="payment events rabbitmq"))["items"]}:
                await anyio.sleep(0.05)
        slate = await call(client, "recall_slate", with_items=True, query="payment events rabbitmq")
    assert [i["path"] for i in slate["items"] if i["ref"] == "adr:0003"] == ["docs/adr/0003-rabbitmq.md"]


def test_watch_once_reconciles_from_the_command_line(home, repo, capsys):
    assert main(["watch", str(repo / "docs"), "--project", PROJECT, "--once"]) == 0
    assert "1 written, 0 renamed, 0 removed" in capsys.readouterr().out
    assert main(["recall", "bootstrap toolchain", "--project", PROJECT]) == 0
    assert "note docs/guide.md > Guide > Setup" in capsys.readouterr().out
    assert main(["watch", str(repo / "missing"), "--project", PROJECT, "--once"]) == 2
    assert "not a directory" in capsys.readouterr().err


async def test_a_folder_reached_through_a_symlink_is_watched(memory, repo, tmp_path):
    (tmp_path / "link").symlink_to(repo)
    async with watching(memory, tmp_path / "link" / "docs") as (first, reports):
        write(repo / "docs" / "linked.md", "Reached through a symlink.")
        change = await next_change(reports)
    assert first.paths == ("docs/guide.md",) and change.paths == ("docs/linked.md",)


async def test_a_link_leading_out_of_the_repository_is_never_read(memory, repo, tmp_path):
    outside = tmp_path / "elsewhere"
    write(outside / "aws.md", "zebra credentials kept outside the repository")
    (repo / "docs" / "x.md").symlink_to(outside / "aws.md")
    (repo / "docs" / "linked").symlink_to(outside, target_is_directory=True)
    write(repo / "docs" / "real.md", "the zebra note inside the repository")
    (repo / "docs" / "alias.md").symlink_to(repo / "docs" / "real.md")  # a link inside is fine
    async with watching(memory, repo / "docs") as (first, reports):
        (repo / "docs" / "late.md").symlink_to(outside / "aws.md")  # one made while watching
        write(repo / "docs" / "zebra.md", "a zebra note written after the link")
        await next_change(reports)
    assert "docs/real.md" in first.paths and "docs/x.md" not in first.paths
    stored = [u.text for i in memory.store.ids_for(PROJECT, "file:docs/late.md")
              for u in memory.store.units(PROJECT, [i]).values()]
    assert stored == [] and "outside the repository" not in context(memory, "zebra credentials kept")


async def test_a_link_to_a_folder_is_not_entered_while_watching_as_the_scan_does_not(memory, repo):
    """The OS watch follows a folder link; the scan (and so every restart) does not enter it: a file
    under it stored on an edit would be removed again at the next start."""
    write(repo / "shared" / "ops.md", "# Ops\n\nRestart the zebra ledger with systemctl.")
    (repo / "docs" / "shared").symlink_to("../shared", target_is_directory=True)
    async with watching(memory, repo / "docs") as (first, reports):
        write(repo / "shared" / "ops.md", "# Ops\n\nRestart the zebra ledger with kubectl.")
        write(repo / "docs" / "shared" / "new.md", "A zebra note written through the link.")
        (repo / "docs" / "later").symlink_to("../shared", target_is_directory=True)  # one made while watching
        write(repo / "docs" / "zebra.md", "The one zebra note that counts.")  # a marker: the rest is done
        change = await next_change(reports)
    assert first.paths == ("docs/guide.md",) and change.paths == ("docs/zebra.md",)
    assert {item.unit.path for item in memory.recall(PROJECT, "zebra").items} == {"docs/zebra.md"}


async def test_a_link_to_a_note_in_the_folder_is_not_a_second_copy_that_goes_stale(memory, repo):
    """An edit of the target names only the target: a copy stored under the link's path would
    keep the old text. The note is stored once, under the target's path."""
    write(repo / "docs" / "notes" / "ops-runbook.md", "# Runbook\n\nRestart the ledger with systemctl.")
    (repo / "docs" / "notes" / "link-in.md").symlink_to("ops-runbook.md")
    async with watching(memory, repo / "docs") as (first, reports):
        write(repo / "docs" / "notes" / "ops-runbook.md", "# Runbook\n\nRestart the ledger with kubectl.")
        change = await next_change(reports)
    assert "docs/notes/link-in.md" not in first.paths + change.paths
    assert memory.store.ids_for(PROJECT, "file:docs/notes/link-in.md") == []
    assert "systemctl" not in context(memory, "restart the ledger")
    assert "kubectl" in context(memory, "restart the ledger")


async def test_a_second_watcher_that_loses_the_race_for_a_change_warns_nothing(memory, repo, caplog):
    """Two sessions in one repository each run a watcher on it: both plan the same rename and
    delete, one applies them first. The other's rename and forget find them done: no warning."""
    write(repo / "docs" / "old.md", "# Old\n\nA note about the legacy billing cron.")
    first, second = (NoteWatcher(memory, PROJECT, repo / "docs") for _ in range(2))
    first.handle(), second.handle()
    os.rename(repo / "docs" / "guide.md", repo / "docs" / "handbook.md")
    (repo / "docs" / "old.md").unlink()
    changes = [(Change.deleted, str(repo / "docs" / "guide.md")),
               (Change.added, str(repo / "docs" / "handbook.md")), (Change.deleted, str(repo / "docs" / "old.md"))]
    for path in (p for _, p in changes):
        second._reread(path)
    late = second._plan()  # planned before the first watcher applied the same change
    assert first.handle(changes).changed
    with caplog.at_level(logging.DEBUG, logger="agentmemrec"):
        lost = second._apply(late)
    assert not lost.failed and not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert memory.store.ids_for(PROJECT, "file:docs/handbook.md") and not memory.store.ids_for(
        PROJECT, "file:docs/old.md")


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
async def test_a_file_named_in_bytes_that_are_not_utf8_is_skipped_and_the_watch_outlives_reading_it(
        memory, repo, caplog):
    """watchfiles fails on an event for a name it cannot decode (reading the file is one): the
    watcher does not read such a file, and watches anew when another program reads it."""
    latin1 = os.fsencode(repo / "docs") + b"/caf\xe9.md"
    write(Path(os.fsdecode(latin1)), "# Caf\xe9\n\nA note named in Latin-1.")
    async with watching(memory, repo / "docs") as (first, reports):
        with open(latin1, "rb") as fh:  # another program (an editor, grep) reads it
            fh.read()
        write(repo / "docs" / "zebra.md", "A zebra note written after the read.")
        change = await next_change(reports)
        write(repo / "docs" / "guide.md", GUIDE.replace("make bootstrap", "just setup"))
        edited = await next_change(reports)
    assert first.paths == ("docs/guide.md",) and not first.failed
    assert (change.paths, edited.paths) == (("docs/zebra.md",), ("docs/guide.md",))
    assert "docs/caf\\udce9.md not stored: its name is not UTF-8" in caplog.text.encode(
        "utf-8", "backslashreplace").decode()


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
async def test_a_folder_named_in_bytes_that_are_not_utf8_fails_each_watch_and_the_notes_still_follow(
        memory, repo, caplog):
    """The watch's own start lists every folder, so it fails each time it starts: the watcher never
    began. Now it reads the folder again after each failure (its notes follow, a little later)."""
    write(Path(os.fsdecode(os.fsencode(repo / "docs") + b"/caf\xe9/menu.md")), "# Menu\n\nCoffee.")
    async with watching(memory, repo / "docs") as (first, reports):
        write(repo / "docs" / "zebra.md", "A zebra note written while watching.")
        change = await next_change(reports)
    assert (first.paths, change.paths) == (("docs/guide.md",), ("docs/zebra.md",))
    said = caplog.text.encode("utf-8", "backslashreplace").decode()
    assert "docs/caf\\udce9/ not stored: its name is not UTF-8" in said
    assert said.count("the file-system watch failed") == 1  # said once, however often it fails

def test_watch_says_why_a_note_is_not_stored(home, repo, capsys, caplog):
    write(repo / "docs" / "huge.md", "zebra " * 30_000)
    write(repo / "docs" / "latin1.md", "caf\xe9 notes".encode("latin-1"))
    write(repo / "docs" / ".hidden.md", "hidden on purpose")
    with caplog.at_level(logging.INFO, logger="agentmemrec"):
        assert main(["watch", str(repo / "docs"), "--project", PROJECT, "--once"]) == 0
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [m.split(": ", 1)[1] for m in said] == [
        "docs/huge.md not stored: over the 128 KiB a note may hold",
        "docs/latin1.md not stored: not UTF-8 text (or it holds a NUL byte)"]  # not the hidden file
    assert "1 written, 0 renamed, 0 removed" in capsys.readouterr().out



def unreadable_notes(repo: Path) -> tuple[Path, Path]:
    """A folder of notes and a note, both stored by a first pass."""
    write(repo / "docs" / "private" / "payroll.md", "# Payroll\n\nThe zebra payroll run closes on the 25th.")
    write(repo / "docs" / "secret.md", "# Secret\n\nThe zebra vault opens at noon.")
    assert main(["watch", str(repo / "docs"), "--project", PROJECT, "--once"]) == 0
    return repo / "docs" / "private", repo / "docs" / "secret.md"


def watch_once_keeps_what_it_cannot_read(repo: Path, capsys, caplog) -> None:
    """A pass that cannot read them keeps their notes and says what to do; once they are gone, so are the notes."""
    capsys.readouterr()
    with caplog.at_level(logging.INFO, logger="agentmemrec"):
        assert main(["watch", str(repo / "docs"), "--project", PROJECT, "--once"]) == 0
    assert "0 written, 0 renamed, 0 removed" in capsys.readouterr().out
    said = [r.getMessage().split(": ", 1)[1] for r in caplog.records if r.levelno >= logging.WARNING]
    why = "it cannot be read (permission denied): the notes stored from it are kept until it can be"
    assert sorted(m.split("; ")[0] for m in said) == [f"docs/private/ not stored: {why}",
                                                       f"docs/secret.md not stored: {why}"]
    assert all("or add it to .gitignore" in m for m in said)
    assert main(["recall", "zebra payroll vault", "--project", PROJECT]) == 0
    out = capsys.readouterr().out
    assert "docs/private/payroll.md" in out and "docs/secret.md" in out


def test_notes_the_watcher_may_not_read_are_kept_not_removed(home, repo, capsys, caplog, monkeypatch):
    """os.walk skipped a folder it could not list without a word, and a note that could not be opened was
    removed: every note under them was reconciled as deleted. Simulated, as a test may run as root."""
    folder, note = unreadable_notes(repo)
    scandir, open_ = os.scandir, os.open

    def refused(path, *args):
        if Path(path) in (folder, note):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return (scandir if not args else open_)(path, *args)
    with monkeypatch.context() as patched:  # its own: undoing all would undo the home fixture's too
        patched.setattr(os, "scandir", refused)
        patched.setattr(os, "open", refused)
        watch_once_keeps_what_it_cannot_read(repo, capsys, caplog)
    shutil.rmtree(folder), note.unlink()
    assert main(["watch", str(repo / "docs"), "--project", PROJECT, "--once"]) == 0
    assert "0 written, 0 renamed, 2 removed" in capsys.readouterr().out


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a folder or file whatever its permission bits say")
def test_notes_the_watchers_user_may_not_read_are_kept_not_removed(home, repo, capsys, caplog):
    folder, note = unreadable_notes(repo)
    folder.chmod(0), note.chmod(0)
    try:
        watch_once_keeps_what_it_cannot_read(repo, capsys, caplog)
    finally:
        folder.chmod(0o755), note.chmod(0o644)

def test_the_watch_command_says_each_summary_once(home, repo):
    """On stdout; the watcher's own log line would repeat it on stderr."""
    done = subprocess.run([sys.executable, "-m", "agentmemrec.server.cli", "watch", str(repo / "docs"), "--project",
                           PROJECT, "--once"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    assert done.returncode == 0 and done.stdout.count("1 written, 0 renamed, 0 removed") == 1
    assert "written" not in done.stderr, done.stderr


async def test_links_to_hidden_or_gitignored_files_in_the_repository_are_never_read(memory, repo):
    """A cloned repository can commit `docs/env.md -> ../.env`: the target must pass the rules a
    file found directly passes, or the watcher would store the user's own secrets."""
    write(repo / ".gitignore", ".env\nsecrets/\n")
    write(repo / ".env", "DB_PASS=zebra-env-secret")
    write(repo / "secrets" / "creds.txt", "zebra admin login kept in an ignored folder")
    write(repo / ".git" / "config", "[remote] url = https://zebra-token@example.com")
    write(repo / "CHANGELOG", "zebra release notes, a plain file of the repository")
    (repo / "docs" / "env.md").symlink_to("../.env")
    (repo / "docs" / "creds.md").symlink_to("../secrets/creds.txt")
    (repo / "docs" / "gitconfig.md").symlink_to("../.git/config")
    (repo / "docs" / "changes.md").symlink_to("../CHANGELOG")  # a link to a file git keeps is fine
    async with watching(memory, repo / "docs") as (first, reports):
        (repo / "docs" / "late.md").symlink_to("../secrets/creds.txt")  # one made while watching
        write(repo / "docs" / "zebra.md", "a zebra note written after the link")
        await next_change(reports)
    assert sorted(first.paths) == ["docs/changes.md", "docs/guide.md"]
    found = context(memory, "zebra secret admin login token release")
    assert "release notes" in found
    assert not [s for s in ("zebra-env-secret", "admin login", "zebra-token") if s in found]


def test_a_fifo_or_a_link_loop_is_skipped_with_a_warning_and_the_pass_goes_on(home, repo):
    os.mkfifo(repo / "docs" / "pipe\x1b[2J.md")  # reading would wait for a writer forever; its name clears the screen
    (repo / "docs" / "l1.md").symlink_to("l2.md")
    (repo / "docs" / "l2.md").symlink_to("l1.md")
    done = subprocess.run([sys.executable, "-m", "agentmemrec.server.cli", "watch", str(repo / "docs"), "--project",
                           PROJECT, "--once"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    assert done.returncode == 0 and "1 written, 0 renamed, 0 removed" in done.stdout, done.stderr
    warned = [line.rsplit("docs: ", 1)[1] for line in done.stderr.splitlines() if "WARNING" in line]
    assert warned == ["docs/l1.md not stored: it is a symbolic link loop",
                      "docs/l2.md not stored: it is a symbolic link loop",
                      "docs/pipe\\u001b[2J.md not stored: not a regular file (a FIFO, socket or device)"]
