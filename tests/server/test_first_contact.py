"""What a client sees before it has learnt anything: the tool list, the server's identity, the
notes on a slate, and the command line's own help."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from importlib.metadata import version

import pytest
from mcp import Client

from agentmemrec.server.app import create_server
from agentmemrec.server.cli import build_parser, main
from agentmemrec.server.clients import instructions

from helpers import BOTH, call, call_error, settings_for, turn

pytestmark = pytest.mark.anyio


async def test_every_tool_has_a_title_a_dedented_description_and_is_closed_world(client):
    for tool in (await client.list_tools()).tools:
        assert tool.title and tool.annotations.open_world_hint is False, tool.name
        assert tool.description and not any(line.startswith(" ") for line in tool.description.splitlines())


async def test_every_tool_parameter_is_described_and_carries_the_limits_the_server_enforces(client):
    tools = {t.name: t.input_schema for t in (await client.list_tools()).tools}
    for name, schema in tools.items():
        for param, spec in schema["properties"].items():
            assert spec.get("description"), f"{name}.{param} has no description"
    items = tools["remember"]["properties"]["items"]
    assert (items["minItems"], items["maxItems"]) == (1, 1000)
    item = tools["remember"]["$defs"]["MemoryItem"]["properties"]
    assert item["text"]["maxLength"] == 128 * 1024 and limit(item["ref"], "maxLength") == 512
    assert all(spec.get("description") for spec in item.values())
    budget = tools["recall_slate"]["properties"]["budget_tokens"]
    assert (budget["minimum"], budget["maximum"], budget["default"]) == (200, 20_000, 2700)  # a client takes it
    assert tools["recall_slate"]["properties"]["query"]["maxLength"] == 8000
    assert tools["forget"]["properties"]["refs"]["maxItems"] == 1000
    assert limit(tools["explain_selection"]["properties"]["refs"], "maxItems") == 50
    listed = tools["explain_selection"]["properties"]["candidates"]
    assert (listed["minimum"], listed["maximum"], listed["default"]) == (0, 100, 20)


def limit(spec: dict, key: str) -> int:
    """A bound of a parameter, also where it is optional (`anyOf` a type and null)."""
    return spec.get(key) or next(option[key] for option in spec.get("anyOf", []) if key in option)


async def test_the_instructions_say_what_the_server_does_on_its_own(client, home, tmp_path):
    """A server that captures Claude Code's sessions told the model to store every turn, and never
    that the prompt hook may have put a slate in context already."""
    assert "Call remember to store turns" in client.instructions and "AgentMemRec:" not in client.instructions
    assert client.instructions == instructions(hooked=False, captured=False)  # what Cursor's rule repeats
    captures = replace(settings_for(home, "alpha"), capture_claude_code=True, claude_dir=tmp_path / "claude")
    async with Client(create_server(captures)) as captured:
        said = captured.instructions
    assert "store turns" not in said and "Conversation turns are stored as they happen" in said
    assert "may already be in context (a block starting 'AgentMemRec:')" in said
    assert len(said) < len(client.instructions) + 250  # barely longer


async def test_the_server_names_its_version(client):
    assert client.server_info.name == "agentmemrec"
    assert client.server_info.version == version("agentmemrec")


async def test_a_recall_on_an_empty_project_says_so_and_lists_the_projects_it_may_use(client):
    await call(client, "remember", project="beta", items=[turn("Beta deploys on Fridays.")])
    slate = await call(client, "recall_slate", with_items=True, query="when do we deploy")
    assert "project 'alpha' holds no units yet" in slate["notes"]
    assert "projects you may use: alpha (0 units), beta (1 units)" in slate["notes"]


@BOTH
async def test_explain_shows_a_decisions_status_in_force_as_the_slate_does(client):
    await call(client, "remember", items=[
        {"kind": "decision", "ref": "q-1", "title": "Queue", "text": "Use RabbitMQ for the job queue."},
        {"kind": "decision", "ref": "q-2", "title": "Queue", "supersedes": "q-1",
         "text": "Replace RabbitMQ with SQS for the job queue."}])
    slate = await call(client, "recall_slate", with_items=True, query="RabbitMQ job queue")
    assert {i["ref"]: i["status"] for i in slate["items"]} == {"q-1": "superseded", "q-2": "accepted"}
    why = await call(client, "explain_selection", slate_id=slate["slate_id"])
    assert {c["ref"]: c["status"] for c in why["candidates"]} == {"q-1": "superseded", "q-2": "accepted"}


def test_version_is_printed(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"agentmemrec {version('agentmemrec')}"


def test_every_command_line_option_and_command_has_help():
    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {choice.dest for choice in action._choices_actions}
                for name, sub in action.choices.items():
                    missing.extend([] if name in helped else [f"{path} {name}"])
                    walk(sub, f"{path} {name}")
            elif not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    walk(build_parser(), "agentmemrec")
    assert not missing, missing


def test_recall_on_an_empty_project_lists_the_projects_in_the_store(home, tmp_path):
    src = tmp_path / "items.jsonl"
    src.write_text(json.dumps({"kind": "turn", "text": "The API listens on port 8080."}) + "\n")
    env = {"AGENTMEMREC_HOME": str(home), "AGENTMEMREC_COMPILE_RANKER": "0"}  # as the suite's other servers
    run = [sys.executable, "-m", "agentmemrec.server.cli"]
    subprocess.run([*run, "import", str(src), "--project", "infra"], check=True, capture_output=True, env=env)
    out = subprocess.run([*run, "recall", "port", "--project", "infar"], check=True, capture_output=True,
                         text=True, env=env).stdout
    assert "-- note: project 'infar' holds no units yet" in out
    assert "-- note: projects in this store: infra (1 units); pick one with --project" in out


@BOTH
async def test_the_read_only_tools_show_projects_decisions_in_force_and_one_unit(client):
    await call(client, "remember", items=[
        {"kind": "decision", "ref": "q-1", "title": "Queue", "text": "Use RabbitMQ.", "at": "2026-01-01T00:00:00Z"},
        {"kind": "decision", "ref": "q-2", "title": "Queue", "supersedes": "q-1", "text": "Use SQS.",
         "at": "2026-02-01T00:00:00Z"},
        {"kind": "note", "path": "docs/run.md", "text": "# Run\n\nmake run\n\n## Stop\n\nmake stop"}])
    await call(client, "remember", project="beta", items=[turn("Beta deploys on Fridays.")])
    listed = await call(client, "list_projects")
    assert listed["projects"] == [{"project": "alpha", "units": 4, "turns": 0, "decisions": 2, "notes": 2},
                                  {"project": "beta", "units": 1, "turns": 1, "decisions": 0, "notes": 0}]
    decisions = await call(client, "decisions_in_force", with_items=True)
    assert [u["ref"] for u in decisions["in_force"]] == ["q-2"] and [u["ref"] for u in decisions["replaced"]] == ["q-1"]
    assert "decision (accepted, 2026-02-01): Queue. Use SQS." in decisions["context"]
    assert "decision replaced by #" in decisions["context"] and "Use RabbitMQ" not in decisions["context"]
    note = await call(client, "show_unit", ref="docs/run.md")
    assert [u["heading"] for u in note["units"]] == ["Run", "Run > Stop"]
    assert "names no unit in project 'alpha'" in await call_error(client, "show_unit", ref="nope")
    assert "not served" in await call_error(client, "show_unit", ref="q-1", project="gamma")
