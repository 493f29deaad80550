"""Claude Code sessions become turns: import, project mapping, idempotence and live capture."""

from __future__ import annotations

import json
import logging
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from agentmemrec.indexing.sources.capture import ImportReport, Tail, Target, capture_claude_code, transcript_files
from agentmemrec.indexing.redact import redact
from agentmemrec.indexing.sources.transcripts import convert_line
from agentmemrec.server.app import create_server
from agentmemrec.server.cli import build_parser, main, serve_settings

from helpers import call

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
GH_TOKEN = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5q"  # in a tool call: redacted before it is clipped


def line(kind: str, content: Any, n: int, cwd: Path, session: str = "sess-1", **extra: Any) -> str:
    role = "assistant" if kind == "assistant" else "user"
    return json.dumps({
        "type": kind, "sessionId": session, "uuid": f"00000000-0000-4000-8000-{n:012d}",
        "parentUuid": None, "timestamp": f"2026-05-0{1 + n // 50}T10:{n % 50:02d}:00.000Z",
        "cwd": str(cwd), "gitBranch": "main", "message": {"role": role, "content": content}, **extra})


def session_lines(cwd: Path) -> list[str]:
    return [
        line("user", "Why does the settlement job time out at night?", 1, cwd),
        line("assistant", [{"type": "thinking", "thinking": "private chain of thought"},
                           {"type": "text", "text": "Let me run the settlement tests."},
                           {"type": "tool_use", "id": "t1", "name": "Bash",
                            "input": {"command": f"GH_TOKEN={GH_TOKEN} pytest tests/test_settlement.py -q",
                                      "description": "run tests"}}], 2, cwd),
        line("user", [{"type": "tool_result", "tool_use_id": "t1", "is_error": False,
                       "content": "LONG PASSING OUTPUT " * 100}], 3, cwd),
        line("assistant", [{"type": "tool_use", "id": "t2", "name": "Edit",
                            "input": {"file_path": "/src/payments/settle.py", "old_string": "x" * 500,
                                      "new_string": "y"}}], 4, cwd),
        line("user", [{"type": "tool_result", "tool_use_id": "t2", "is_error": True,
                       "content": "Traceback: SettlementTimeout after 30s " + "frame " * 200}], 5, cwd),
        line("assistant", [{"type": "thinking", "thinking": "only thinking here"}], 6, cwd),
        line("user", f"Use the staging key {AWS_KEY} to reproduce it.", 7, cwd),
        json.dumps({"type": "progress", "uuid": "p-1", "sessionId": "sess-1", "cwd": str(cwd)}),
        json.dumps({"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}),
        json.dumps({"type": "summary", "summary": "Settlement timeouts", "leafUuid": "x"}),
        line("user", "This session is being continued from a previous conversation that ran out "
                     "of context. The summary below covers the earlier portion.", 8, cwd,
             isCompactSummary=True),
        line("user", "This session is being continued from a previous conversation. Summary: ...",
             9, cwd),
        line("user", "Sidechain: explore the repository for timeouts", 10, cwd, isSidechain=True),
        '{"type": "user", "message": {"role": "user", "content": "trunc',  # malformed
        line("assistant", "The settlement job holds a lock on the ledger table; we add an index.", 11, cwd),
    ]


@pytest.fixture
def claude(tmp_path: Path) -> tuple[Path, Path, Path]:
    """~/.claude/projects with a session of `payments` and one of another repository."""
    payments, other = tmp_path / "src" / "payments", tmp_path / "src" / "website"
    for repo in (payments, other):
        (repo / ".git").mkdir(parents=True)
    (payments / "services" / "settle").mkdir(parents=True)
    projects = tmp_path / "claude" / "projects"
    folder = projects / str(payments).replace("/", "-")
    folder.mkdir(parents=True)
    (folder / "sess-1.jsonl").write_text("\n".join(session_lines(payments)) + "\n")
    web = projects / str(other).replace("/", "-")
    web.mkdir(parents=True)
    (web / "sess-2.jsonl").write_text(line("user", "The website settlement banner is blue.", 40, other,
                                           session="sess-2") + "\n")
    return projects, payments, other


def recall(project: str, query: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["recall", query, "--project", project, "--json", "--budget", "4000"]) == 0
    return json.loads(capsys.readouterr().out)


def test_import_stores_turns_and_reports_what_it_skipped(home, claude, capsys):
    projects, _, _ = claude
    assert main(["import", "claude-code", str(projects), "--project", "payments"]) == 0
    out = capsys.readouterr().out
    assert "2 files, 16 lines read, 6 turns stored or updated, 0 unchanged; turns by project: payments 6" in out
    assert ("skipped 10 lines: compaction 3, malformed 1, not-a-message 2, other-project 1, "
            "sidechain 1, thinking 1, tool-output 1") in out
    assert "redacted 2 secrets: aws-access-key 1, github-token 1" in out
    slate = recall("payments", "settlement job timeout ledger lock staging key pytest edit settle traceback", capsys)
    context = slate["context"]
    assert "[tool Bash: GH_TOKEN=[REDACTED:github-token] pytest tests/test_settlement.py -q]" in context
    assert "[tool Edit: /src/payments/settle.py]" in context and "x" * 50 not in context
    assert "[tool result (error): Traceback: SettlementTimeout after 30s frame" in context
    assert "LONG PASSING OUTPUT" not in context and "chain of thought" not in context
    assert "[REDACTED:aws-access-key]" in context and AWS_KEY not in context
    assert "Sidechain" not in context and "continued from a previous" not in context
    assert "website" not in context and "## session sess-1 (2026-05-01 10:01)" in context
    roles = {i["ref"][-2:]: (i["role"], i["session"]) for i in slate["items"]}
    assert roles["01"] == ("user", "sess-1") and roles["05"] == ("tool", "sess-1")
    assert roles["11"] == ("assistant", "sess-1")


def test_reimporting_never_duplicates(home, claude, capsys):
    projects, _, _ = claude
    assert main(["import", "claude-code", str(projects), "--project", "payments"]) == 0
    capsys.readouterr()
    assert main(["import", "claude-code", str(projects), "--project", "payments"]) == 0
    assert "0 turns stored or updated, 6 unchanged" in capsys.readouterr().out


def test_each_session_goes_to_its_own_repository_unless_mapped(home, claude, tmp_path, capsys):
    projects, payments, other = claude
    assert main(["import", "claude-code", str(projects)]) == 0
    assert "turns by project: payments 6, website 1" in capsys.readouterr().out
    assert recall("website", "settlement banner", capsys)["items"][0]["session"] == "sess-2"
    mapping = tmp_path / "map.toml"
    mapping.write_text(f'"{other}" = "payments"\n"{payments}/services" = ""\n')
    assert main(["import", "claude-code", str(projects), "--project", "payments",
                 "--project-map", str(mapping)]) == 0
    assert "turns by project: payments 7" in capsys.readouterr().out


def test_an_import_that_takes_nothing_says_where_the_sessions_went_and_how_to_map_them(home, claude, capsys):
    projects, payments, other = claude
    assert main(["import", "claude-code", str(projects), "--project", "billing"]) == 0
    out = capsys.readouterr().out
    assert "0 turns stored or updated" in out
    assert (f"sessions of other projects were left out: payments 6 turns (from {payments}), "
            f"website 1 turns (from {other})") in out
    assert f'"{payments}": "billing"' in out and "--project-map FILE" in out


def test_sidechains_are_stored_when_asked(home, claude, capsys):
    projects, _, _ = claude
    assert main(["import", "claude-code", str(projects), "--project", "payments",
                 "--include-sidechains"]) == 0
    assert "7 turns stored" in capsys.readouterr().out


def test_the_plain_jsonl_import_is_unchanged_and_exclusive(home, tmp_path, capsys):
    src = tmp_path / "items.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "plain import"}) + "\n")
    assert main(["import", str(src), "--project", "infra"]) == 0
    assert "1 items read, 1 stored" in capsys.readouterr().out
    assert main(["import", str(src), str(tmp_path), "--project", "infra"]) == 2


def odd_session(projects: Path, payments: Path) -> None:
    """Turns holding U+2028, U+0085 and U+2029 raw (as Node's JSON.stringify writes them), and a
    line nested deeper than any parser goes, in a session that sorts before sess-1."""
    lines = [line("user", "wiki paste:\u2028retry limit is five", 30, payments, session="sess-0"),
             "[" * 100_000 + "]" * 100_000,
             line("user", "pdf paste\x85ledger closes at midnight\u2029end", 31, payments, session="sess-0")]
    folder = projects / str(payments).replace("/", "-")
    (folder / "sess-0.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_turns_with_unicode_line_separators_are_stored_and_a_nested_line_is_malformed(home, claude, capsys):
    projects, payments, _ = claude
    odd_session(projects, payments)
    assert main(["import", "claude-code", str(projects), "--project", "payments"]) == 0
    out = capsys.readouterr().out
    assert "3 files, 19 lines read, 8 turns stored" in out and "malformed 2" in out, out
    context = recall("payments", "retry limit ledger closes at midnight", capsys)["context"]
    assert "retry limit is five" in context and "ledger closes at midnight" in context


def test_a_tool_call_keeps_its_name_and_target_only():
    turn = convert_line(line("assistant", [{"type": "tool_use", "name": "Grep",
                                            "input": {"pattern": "TODO", "path": "src"}}], 1, Path("/r")))
    assert turn.item["text"] == "[tool Grep: src]" and turn.item["role"] == "assistant"
    assert convert_line("[1, 2]") == "malformed" and convert_line("") == "malformed"


@pytest.mark.anyio
async def test_capture_stores_lines_as_they_are_written_and_resumes_after_a_restart(memory, claude, tmp_path):
    projects, payments, _ = claude
    target, state = Target(frozenset({"payments"})), tmp_path / "capture.json"
    transcript = next(projects.rglob("sess-1.jsonl"))
    send, reports = anyio.create_memory_object_stream[ImportReport](100)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(20):
            first = await tg.start(partial(capture_claude_code, memory, projects, target, state,
                                           on_sync=send.send_nowait))
        assert (first.stored, first.skipped["other-project"]) == (6, 1)
        with transcript.open("a") as fh:  # a complete line and the start of the next one
            fh.write(line("user", "Add the ledger index in migration 42.", 20, payments) + "\n")
            fh.write(line("assistant", "Done: migration 42 adds the ledger index.", 21, payments)[:30])
        with anyio.fail_after(20):
            report = await reports.receive()
        assert (report.lines, report.stored) == (1, 1)
        tg.cancel_scope.cancel()
    with transcript.open("a") as fh:  # the rest of the line, written while nothing captured
        fh.write(line("assistant", "Done: migration 42 adds the ledger index.", 21, payments)[30:] + "\n")
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(20):
            resumed = await tg.start(partial(capture_claude_code, memory, projects, target, state))
        tg.cancel_scope.cancel()
    assert (resumed.lines, resumed.stored) == (1, 1)  # only the new line was read again
    slate = memory.recall("payments", "ledger index migration 42")
    assert "[#" in slate.context and "Done: migration 42 adds the ledger index." in slate.context
    assert memory.store.count_units("payments") == 8


@pytest.mark.anyio
async def test_capture_stores_the_sessions_of_a_folder_moved_in_while_it_runs(memory, claude, tmp_path):
    """A folder moved in (or made with its first session before the OS watches it) names only
    itself in the file-system events: its transcripts are read all the same."""
    projects, payments, _ = claude
    restored = tmp_path / "backup" / "-restored"
    restored.mkdir(parents=True)
    (restored / "sess-9.jsonl").write_text(line("user", "The ledger export runs at 02:00.", 90, payments,
                                                session="sess-9") + "\n")
    send, reports = anyio.create_memory_object_stream[ImportReport](100)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(20):
            await tg.start(partial(capture_claude_code, memory, projects, Target(frozenset({"payments"})),
                                   tmp_path / "capture.json", on_sync=send.send_nowait))
        restored.rename(projects / "-restored")
        with anyio.fail_after(20):
            report = await reports.receive()
        tg.cancel_scope.cancel()
    assert (report.lines, report.stored) == (1, 1)
    assert "The ledger export runs at 02:00." in memory.recall("payments", "ledger export time").context


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
@pytest.mark.anyio
async def test_capture_outlives_a_session_folder_named_in_bytes_that_are_not_utf8(memory, claude, tmp_path, caplog):
    """watchfiles fails on an event for a name it cannot decode (its own start lists the folder, and
    Claude Code writes in it): capture stopped for the server's life. Now it reads no such folder, and
    after each failure it reads what is new and watches anew."""
    projects, payments, _ = claude
    latin1 = os.fsencode(projects) + b"/-src-caf\xe9/sess-7.jsonl"
    os.makedirs(os.path.dirname(latin1))
    with open(latin1, "w") as fh:
        fh.write(line("user", "The caf\xe9 ledger is closed.", 70, payments, session="sess-7") + "\n")
    transcript = next(projects.rglob("sess-1.jsonl"))
    send, reports = anyio.create_memory_object_stream[ImportReport](100)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(20):
            first = await tg.start(partial(capture_claude_code, memory, projects, Target(frozenset({"payments"})),
                                           tmp_path / "capture.json", on_sync=send.send_nowait))
        with open(latin1, "a") as fh:  # Claude Code writes on: the watch cannot name the file
            fh.write(line("user", "The caf\xe9 ledger is open again.", 71, payments, session="sess-7") + "\n")
        with transcript.open("a") as fh:
            fh.write(line("user", "Add the ledger index in migration 42.", 20, payments) + "\n")
        with anyio.fail_after(20):
            report = await reports.receive()
        with transcript.open("a") as fh:  # and the watch goes on
            fh.write(line("assistant", "Done: migration 42 adds the ledger index.", 21, payments) + "\n")
        with anyio.fail_after(20):
            later = await reports.receive()
        tg.cancel_scope.cancel()
    assert (first.stored, report.stored, later.stored) == (6, 1, 1)
    assert "projects/-src-caf\\udce9 not read: its name is not UTF-8" in caplog.text.encode(
        "utf-8", "backslashreplace").decode()
    assert "caf" not in memory.recall("payments", "cafe ledger closed open").context

def test_two_captures_saving_their_offsets_at_once_both_succeed(memory, claude, tmp_path, monkeypatch, caplog):
    """Two servers of one project capture the same sessions and save offsets to one file; one's
    save falls between the other's write and its rename."""
    projects, _, _ = claude
    files, state = transcript_files(projects), tmp_path / "capture" / "claude-code.payments.json"
    first, second = Tail(state), Tail(state)
    replace = os.replace

    def interleaved(src: Any, dst: Any) -> None:
        monkeypatch.setattr(os, "replace", replace)
        second.ingest(memory, files, Target(frozenset({"payments"})))  # the other server's whole save
        replace(src, dst)
    monkeypatch.setattr(os, "replace", interleaved)
    first.ingest(memory, files, Target(frozenset({"payments"})))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert Tail(state).offsets == first.offsets and len(first.offsets) == 2
    assert [p.name for p in state.parent.iterdir()] == [state.name]  # no temporary file left


@pytest.mark.anyio
async def test_capture_stores_turns_with_line_separators_and_goes_past_a_nested_line(memory, claude, tmp_path):
    projects, payments, _ = claude
    odd_session(projects, payments)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(20):
            first = await tg.start(partial(capture_claude_code, memory, projects, Target(frozenset({"payments"})),
                                           tmp_path / "capture.json"))
        tg.cancel_scope.cancel()
    assert (first.stored, first.skipped["malformed"]) == (8, 2)  # and sess-1, read after it


@pytest.mark.anyio
async def test_serve_capture_claude_code_fills_the_served_projects(home, claude, tmp_path):
    projects, _, _ = claude
    args = build_parser().parse_args(["serve", "--project", "payments", "--capture-claude-code",
                                      "--claude-dir", str(projects), "--watch", str(tmp_path)])
    settings = serve_settings(args)
    assert (settings.capture_claude_code, settings.claude_dir, settings.watch) == (True, projects, (tmp_path,))
    async with Client(create_server(settings)) as client:
        with anyio.fail_after(20):
            while not (await call(client, "recall_slate", with_items=True, query="ledger table lock"))["items"]:
                await anyio.sleep(0.05)  # polling the condition, bounded by fail_after
        slate = await call(client, "recall_slate", with_items=True, query="website settlement banner blue")
    assert all(i["session"] == "sess-1" for i in slate["items"])  # sess-2 is another repository's


async def _served_until(settings: Any, project: str, query: str) -> list[dict[str, Any]]:
    """The items a served project's slate holds once capture has stored a match for `query`."""
    async with Client(create_server(settings)) as client:
        with anyio.fail_after(30):
            while not (items := (await call(client, "recall_slate", project=project, with_items=True,
                                            query=query))["items"]):
                await anyio.sleep(0.05)  # polling the condition, bounded by fail_after
    return items


@pytest.mark.anyio
async def test_the_server_of_one_repository_leaves_another_repositorys_sessions_to_its_server(home, claude):
    """Each server reads every transcript; what one skips as another project's stays unread for
    the other's server (with shared offsets, the website's session was never stored)."""
    projects, _, _ = claude

    def settings(project: str) -> Any:
        return serve_settings(build_parser().parse_args(
            ["serve", "--project", project, "--capture-claude-code", "--claude-dir", str(projects)]))
    items = await _served_until(settings("payments"), "payments", "ledger table lock")
    assert all(i["session"] == "sess-1" for i in items)
    items = await _served_until(settings("website"), "website", "website settlement banner blue")
    assert [i["session"] for i in items] == ["sess-2"]


@pytest.mark.anyio
async def test_capture_starts_when_the_claude_code_folder_appears(home, claude, tmp_path, monkeypatch):
    """On a new install the server starts before Claude Code makes ~/.claude/projects."""
    monkeypatch.setattr("agentmemrec.server.sources.CLAUDE_DIR_POLL_S", 0.1)
    projects, _, _ = claude
    later = tmp_path / "later" / "projects"
    settings = serve_settings(build_parser().parse_args(
        ["serve", "--project", "website", "--capture-claude-code", "--claude-dir", str(later)]))
    async with Client(create_server(settings)) as client:
        assert (await call(client, "recall_slate", with_items=True, query="website banner"))["items"] == []
        later.parent.mkdir()
        projects.rename(later)  # Claude Code makes its folder and writes a session
        with anyio.fail_after(30):
            while not (await call(client, "recall_slate", with_items=True, query="website banner"))["items"]:
                await anyio.sleep(0.05)  # polling the condition, bounded by fail_after


def test_serve_refuses_a_folder_it_cannot_watch(home, tmp_path, capsys):
    assert main(["serve", "--watch", str(tmp_path / "nope")]) == 2
    assert "cannot watch" in capsys.readouterr().err


@pytest.mark.anyio
async def test_setup_with_another_project_name_maps_the_repositorys_sessions_to_it(home, claude, tmp_path):
    """`setup --project billing` in the payments repository: its sessions are named by the
    repository (payments) unless mapped, and the server serves billing only."""
    projects, payments, _ = claude
    user = tmp_path / "user"
    user.mkdir()
    assert main(["setup", "claude-code", "--dir", str(payments), "--user-dir", str(user), "--project", "billing"]) == 0
    entry = json.loads((user / ".claude.json").read_text())["projects"][str(payments)]["mcpServers"]["agentmemrec"]
    assert json.loads((home / "project-map.json").read_text()) == {str(payments): "billing"}
    settings = serve_settings(build_parser().parse_args([*entry["args"], "--claude-dir", str(projects)]))
    items = await _served_until(settings, "billing", "ledger table lock")
    assert all(i["session"] == "sess-1" for i in items)
    assert main(["setup", "claude-code", "--dir", str(payments), "--user-dir", str(user), "--project", "billing",
                 "--remove"]) == 0
    assert json.loads((home / "project-map.json").read_text()) == {}


def test_a_tool_argument_is_redacted_before_it_is_clipped_to_one_line():
    """Clipped first, a token past the first 150 characters was kept in part, too short to match."""
    token = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5q"
    command = "x" * 150 + f" git push https://{token}@github.com/o/r"
    turn = convert_line(line("assistant", [{"type": "tool_use", "name": "Bash", "input": {"command": command}}],
                             1, Path("/r")))
    assert "[REDACTED:github-token]" in turn.item["text"] and token[:12] not in turn.item["text"]


def test_a_huge_tool_error_is_redacted_only_as_far_as_the_cut_can_reach(monkeypatch):
    """A 4.6 MB error was redacted in full (10 s) to keep 200 characters. Now only a window is,
    widened when a long key's marker pulls later text forward, so what is kept is still clean."""
    from agentmemrec.indexing.sources import transcripts

    seen: list[int] = []
    monkeypatch.setattr(transcripts, "redact", lambda text: seen.append(len(text)) or redact(text))
    key = "-----BEGIN PRIVATE KEY-----\n" + "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n" * 400 + "-----END PRIVATE KEY-----"
    error = f"{key}\nthen {GH_TOKEN} failed\n" + "frame of a long traceback\n" * 200_000
    turn = convert_line(line("user", [{"type": "tool_result", "tool_use_id": "t", "is_error": True,
                                       "content": error}], 1, Path("/r")))
    text = turn.item["text"]
    assert text.startswith("[tool result (error): [REDACTED:private-key] then [REDACTED:github-token] failed frame")
    assert GH_TOKEN[:10] not in text and "MIIEvQ" not in text
    assert len(error) > 5_000_000 and max(seen) < 100_000


def test_a_text_block_holding_null_adds_nothing_to_its_turn(home, tmp_path, capsys):
    """`{"type": "text", "text": null}` was stored as the word "None", alone or within a turn."""
    cwd = tmp_path / "src" / "payments"
    (cwd / ".git").mkdir(parents=True)
    null = {"type": "text", "text": None}
    session = tmp_path / "sess-5.jsonl"
    session.write_text("\n".join([
        line("assistant", [null, {"type": "text", "text": "The nightly ledger export retries five times."}], 1, cwd),
        line("assistant", [null], 2, cwd),
        line("user", [{"type": "tool_result", "tool_use_id": "t", "is_error": True,
                       "content": [null, {"type": "text", "text": "ledger export exit 3"}]}], 3, cwd)]) + "\n")
    assert main(["import", "claude-code", str(session), "--project", "payments"]) == 0
    out = capsys.readouterr().out
    assert "3 lines read, 2 turns stored" in out and "skipped 1 lines: empty 1" in out, out
    context = recall("payments", "nightly ledger export retries exit", capsys)["context"]
    assert "assistant: The nightly ledger export retries five times.\n" in context, context
    assert "[tool result (error): ledger export exit 3]" in context and "None" not in context
