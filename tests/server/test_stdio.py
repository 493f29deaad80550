"""End to end: a real `agentmemrec serve` process over stdio, reached by the SDK's client."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import anyio
import pytest
from mcp import Client

from agentmemrec.server.demo import server_params

from helpers import call, call_error, turn

pytestmark = pytest.mark.anyio


async def test_stdio_server_remembers_recalls_and_survives_a_restart(tmp_path):
    home = tmp_path / "home"
    with anyio.fail_after(60):
        async with Client(server_params(home, "alpha")) as client:
            await call(client, "remember", items=[turn("The CI runs on GitHub Actions.", ref="ci")])
            assert "not served" in await call_error(client, "recall_slate", query="ci", project="beta")
        async with Client(server_params(home, "alpha")) as client:  # a new process, same store
            slate = await call(client, "recall_slate", with_items=True, query="which CI do we run on")
            assert [i["ref"] for i in slate["items"]] == ["ci"]


def test_stdout_carries_only_json_rpc(tmp_path):
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "remember", "arguments": {"items": [{"kind": "turn", "text": "hello there"}]}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "recall_slate", "arguments": {"query": "hello"}}},
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentmemrec.server.cli", "serve", "--project", "alpha"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "AGENTMEMREC_HOME": str(tmp_path / "home")})
    messages = []
    try:
        for request in requests:
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            if "id" in request:  # wait for its answer before sending the next request
                while not any(m.get("id") == request["id"] for m in messages):
                    line = proc.stdout.readline()
                    assert line, "server closed stdout early"
                    messages.append(json.loads(line))  # every stdout line parses as JSON
        proc.stdin.close()
        proc.wait(timeout=30)
        stderr = proc.stderr.read()
    finally:
        proc.kill()
    assert all(m.get("jsonrpc") == "2.0" for m in messages)
    answer = next(m for m in messages if m.get("id") == 3)
    assert "hello there" in answer["result"]["structuredContent"]["context"]
    assert "agentmemrec INFO" in stderr  # logs went to stderr


def test_demo_runs_three_recalls_through_a_real_server(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "agentmemrec.server.cli", "demo", "--home", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("# memory slate s_") == 3
    assert "SUPERSEDED by #" in proc.stdout and "REJECTED" in proc.stdout
    assert "units of other projects never read" in proc.stdout


async def test_the_server_setup_configures_keeps_the_repositorys_adrs_in_memory(tmp_path, monkeypatch):
    """What a user gets from `setup claude-code` alone: the configured command, started as Claude
    Code starts it, fills memory with the repository's decision records."""
    from mcp.client.stdio import StdioServerParameters

    from agentmemrec.server.cli import main
    repo, user = tmp_path / "payments-api", tmp_path / "user"
    (repo / ".git").mkdir(parents=True)
    user.mkdir()
    adr = repo / "docs" / "adr" / "0001-payment-events-on-kafka.md"
    adr.parent.mkdir(parents=True)
    adr.write_text("# 1. Payment events on Kafka\n\nStatus: Accepted\n\n## Decision\n\n"
                   "Payment events go to the Kafka topic payments.events.v1, keyed by payment id.\n")
    monkeypatch.setenv("AGENTMEMREC_HOME", str(tmp_path / "home"))
    assert main(["setup", "claude-code", "--dir", str(repo), "--user-dir", str(user)]) == 0
    entry = json.loads((user / ".claude.json").read_text())["projects"][str(repo)]["mcpServers"]["agentmemrec"]
    params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd=str(repo),
                                   env={**os.environ, "HOME": str(user), **entry.get("env", {})})
    async with Client(params) as client:
        with anyio.fail_after(60):
            while not (slate := await call(client, "recall_slate", with_items=True,
                                           query="which topic do payment events go to"))["items"]:
                await anyio.sleep(0.2)  # polling the condition, bounded by fail_after
    assert [i["ref"] for i in slate["items"]] == ["adr:0001"]
    assert "payments.events.v1" in slate["context"]


def test_a_request_with_a_lone_surrogate_escape_is_answered_and_changes_nothing(tmp_path):
    """JavaScript's JSON.stringify writes a string cut inside a character as `"\\ud800"`; the SDK's
    parser refuses that line and dropped it unanswered, so the client waited for ever."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    lines = [json.dumps(initialize), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
             '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "remember", "arguments": '
             '{"items": [{"kind": "turn", "text": "cut \\ud83d here"}]}}}',
             '{"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": {"name": "\\udc00"}}',
             "not json at all",
             json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "list_projects"}})]
    proc = subprocess.Popen([sys.executable, "-m", "agentmemrec.server.cli", "serve", "--project", "alpha"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "AGENTMEMREC_HOME": str(tmp_path / "home")})
    watchdog = threading.Timer(120, proc.kill)  # a request left unanswered fails the test, never hangs it
    watchdog.start()
    answers: dict = {}
    try:
        proc.stdin.write("\n".join(lines) + "\n")
        proc.stdin.flush()
        while 4 not in answers and (line := proc.stdout.readline()):  # list_projects comes last
            answers[json.loads(line).get("id")] = json.loads(line)
        proc.stdin.close()
        stderr = proc.stderr.read()
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
    refused = answers[2]["result"]
    assert refused["isError"] and "not valid Unicode" in refused["content"][0]["text"]
    assert "nothing was changed" in refused["content"][0]["text"]
    assert answers[3]["error"]["code"] == -32602 and "lone surrogate" in answers[3]["error"]["message"]
    assert answers[4]["result"]["structuredContent"]["projects"][0]["units"] == 0  # nothing was stored
    assert "is not a JSON-RPC request; it was not answered: 'not json at all" in stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("mode", ["stdio", "http"])
def test_ctrl_c_stops_the_server_without_a_traceback_and_keeps_what_it_acknowledged(tmp_path, mode):
    """^C printed a KeyboardInterrupt traceback and left a stdio server running until its client
    closed stdin (the SDK waits for its stdin reader); over HTTP it printed the traceback."""
    from agentmemrec.ranking.memory import Memory

    from helpers import free_port
    home = tmp_path / "home"
    http = ["--http", "--port", str(free_port())] if mode == "http" else []
    proc = subprocess.Popen([sys.executable, "-m", "agentmemrec.server.cli", "serve", "--project", "alpha", *http],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    try:
        if mode == "stdio":
            for request in [
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "remember", "arguments": {
                    "items": [{"kind": "turn", "text": "Deploys freeze on Fridays.", "ref": "freeze"}]}}}]:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
            while '"id":2' not in (line := proc.stdout.readline()):  # the write is acknowledged
                assert line, "server closed stdout early"
        else:
            while "Uvicorn running on" not in (line := proc.stderr.readline()):
                assert line, "server exited before listening"
        proc.send_signal(signal.SIGINT)  # stdin stays open, as a terminal's does
        assert proc.wait(timeout=60) == 0
        stderr = proc.stderr.read()
    finally:
        proc.kill()
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    if mode == "stdio":
        memory = Memory.open(home)
        try:
            assert memory.store.ids_for("alpha", "freeze")
        finally:
            memory.close()
