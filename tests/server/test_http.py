"""`serve --http`: a real server process on 127.0.0.1, bearer tokens, project access, size limits,
on both backends."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import anyio
import httpx2
import pytest

from agentmemrec.server.cli import build_parser, main
from agentmemrec.server.hook_process import MAX_CONTEXT_CHARS, MAX_HOOK_BUDGET

from helpers import BOTH, call, call_error, free_port, http_server, mcp_client, serving, turn

pytestmark = [pytest.mark.anyio, BOTH]

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def add_token(capsys: pytest.CaptureFixture[str], name: str, projects: str) -> str:
    assert main(["tokens", "add", name, "--projects", projects]) == 0
    return capsys.readouterr().out.strip()


@pytest.fixture(autouse=True)
def store_env(store_url: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server processes and the CLI calls use the test's store."""
    if store_url:
        monkeypatch.setenv("AGENTMEMREC_STORE", store_url)


def test_http_binds_to_the_loopback_address_unless_told_otherwise():
    assert build_parser().parse_args(["serve", "--http"]).host == "127.0.0.1"


async def test_requests_without_a_valid_token_are_refused_before_any_tool_runs(home, capsys):
    secret = add_token(capsys, "alice", "alpha")
    remember = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "remember", "arguments": {"items": [turn("written without a token")]}}}
    async with http_server(home, "--max-request-bytes", "65536") as server, httpx2.AsyncClient() as http:
        for auth in ({}, {"Authorization": "Bearer amr_wrong"}, {"Authorization": secret}):
            for body in (INITIALIZE, remember):
                reply = await http.post(server.url, json=body, headers={**HEADERS, **auth})
                assert reply.status_code == 401
        ok = await http.post(server.url, json=INITIALIZE, headers={**HEADERS, "Authorization": f"Bearer {secret}"})
        assert ok.status_code == 200
        huge = {**remember, "params": {"name": "remember", "arguments": {"items": [turn("x" * 70_000)]}}}
        too_big = await http.post(server.url, json=huge, headers={**HEADERS, "Authorization": f"Bearer {secret}"})
        assert too_big.status_code == 413
        async with mcp_client(server.url, secret) as client:
            slate = await call(client, "recall_slate", with_items=True, query="written without a token")
            assert slate["items"] == []
    assert any("unknown or revoked bearer token" in line for line in server.log)
    assert any('"POST /mcp HTTP/1.1" 401' in line for line in server.log)  # the access log is on stderr too


async def test_a_token_reaches_its_projects_only_and_revoking_it_shuts_it_out(home, capsys):
    alice = add_token(capsys, "alice", "alpha,beta")
    bob = add_token(capsys, "bob", "gamma")
    async with http_server(home) as server:
        async with mcp_client(server.url, alice) as client:
            out = await call(client, "remember", items=[turn("Alpha deploys on Fridays.", ref="a")])
            assert out["project"] == "alpha"  # a token's first project is its default
            await call(client, "remember", project="beta", items=[turn("Beta deploys on Mondays.")])
            msg = await call_error(client, "remember", project="gamma", items=[turn("Alice was here.")])
            assert "is not open to token 'alice'" in msg and "alpha, beta" in msg
            assert "is not open" in await call_error(client, "recall_slate", query="deploys", project="gamma")
        async with mcp_client(server.url, bob) as client:
            slate = await call(client, "recall_slate", with_items=True, query="alice deploys fridays mondays")
            assert slate["project"] == "gamma" and slate["items"] == []  # nothing reached gamma
            why = await call(client, "explain_selection", slate_id=slate["slate_id"])
            assert why["out_of_scope_units"] == 0  # alpha's and beta's units are not bob's to count
            assert "not open" in await call_error(client, "recall_slate", query="deploys", project="alpha")
            with anyio.fail_after(30):  # the CLI forwards to the server that owns a DuckDB store
                assert await anyio.to_thread.run_sync(main, ["tokens", "revoke", "alice"]) == 0
        async with httpx2.AsyncClient() as http:
            reply = await http.post(server.url, json=INITIALIZE, headers={**HEADERS, "Authorization": f"Bearer {alice}"})
            assert reply.status_code == 401
    denials = [line for line in server.log if "denied: token 'alice'" in line]
    assert len(denials) == 2 and "'gamma'" in denials[0]
    assert "revoked token alice" in capsys.readouterr().out
    assert main(["tokens", "list"]) == 0
    listing = capsys.readouterr().out
    assert listing.startswith("bob\tgamma\t") and "alice" not in listing and bob not in listing


async def test_claude_codes_http_hook_answers_for_the_tokens_projects_only(home, capsys, tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"kind": "decision", "ref": "adr-2", "title": "Kafka",
                                 "text": "Payment events move to Kafka, partitioned by merchant id."}) + "\n")
    assert main(["import", str(items), "--project", "payments"]) == 0
    capsys.readouterr()
    alice, bob = add_token(capsys, "alice", "payments,ledger"), add_token(capsys, "bob", "website")
    # the cwd is a folder on the developer's machine, which the server cannot look into: its
    # deepest folder that names one of the token's projects is the project (before: `api`, denied)
    prompt = {"session_id": "s", "cwd": "/home/alice/src/payments/services/api",
              "hook_event_name": "UserPromptSubmit", "prompt": "how are payment events partitioned in Kafka?"}
    async with http_server(home, "--max-request-bytes", "65536") as server, httpx2.AsyncClient(timeout=30) as http:
        url = server.url.replace("/mcp", "/hooks/claude-code")
        assert (await http.post(url, json=prompt)).status_code == 401
        reply = await http.post(url, json=prompt, headers={"Authorization": f"Bearer {alice}"})
        out = reply.json()["hookSpecificOutput"]
        assert out["hookEventName"] == "UserPromptSubmit" and "merchant id" in out["additionalContext"]
        start = await http.post(url, json={**prompt, "hook_event_name": "SessionStart", "source": "startup"},
                                headers={"Authorization": f"Bearer {alice}"})
        assert "decision (accepted" in start.json()["hookSpecificOutput"]["additionalContext"]
        elsewhere = {**prompt, "cwd": "C:\\Users\\alice\\scratch"}  # no folder names a project: nothing
        assert (await http.post(url, json=elsewhere, headers={"Authorization": f"Bearer {alice}"})).content == b""
        other = await http.post(url, json=prompt, headers={"Authorization": f"Bearer {bob}"})
        assert (other.status_code, other.content) == (200, b"")  # bob's only project holds nothing
        other = await http.post(url + "?project=payments", json=prompt, headers={"Authorization": f"Bearer {bob}"})
        assert (other.status_code, other.content) == (200, b"")  # another token's project: nothing
        huge = {**prompt, "prompt": "x" * 70_000}  # over --max-request-bytes, as /mcp refuses it
        assert (await http.post(url, json=huge, headers={"Authorization": f"Bearer {alice}"})).status_code == 413
    assert any("denied: token 'bob' asked for project 'payments' over the hook" in line for line in server.log)
    assert any("no folder of 'C:\\\\Users\\\\alice\\\\scratch' names one of the token's projects (payments, ledger)"
               in line for line in server.log), server.log


DOCS = Path(__file__).parents[2] / "docs" / "clients.md"
RUNS_ON = {"SessionStart": {"command", "mcp_tool"}}  # the hooks reference: no http hook on SessionStart


def documented_hooks(base: str) -> dict[str, list[dict]]:
    """The hooks docs/clients.md has a team put in `.claude/settings.local.json`, aimed at `base`."""
    block = DOCS.read_text().split("By hand, in\n`.claude/settings.local.json`:\n\n```json\n")[1].split("```")[0]
    return json.loads(block.replace("http://127.0.0.1:8765", base))["hooks"]


async def run_as_claude_code(http: httpx2.AsyncClient, hook: dict, event: dict, token: str) -> str:
    """What one hook adds to the context as Claude Code runs it: a command's stdout on exit 0, a 2xx
    answer's body (any other answer is a non-blocking error: nothing)."""
    if hook["type"] == "command":
        done = await anyio.run_process(["bash", "-c", hook["command"]], input=json.dumps(event).encode(),
                                       check=False, env={**os.environ, "AGENTMEMREC_TOKEN": token})
        assert done.returncode == 0, done.stderr  # any other code shows the user a hook error
        return done.stdout.decode()
    headers = {k: v.replace("$AGENTMEMREC_TOKEN", token if "AGENTMEMREC_TOKEN" in hook["allowedEnvVars"] else "")
               for k, v in hook["headers"].items()}
    reply = await http.post(hook["url"], json=event, headers=headers)
    return reply.text if reply.is_success else ""


async def test_the_documented_hooks_bring_memory_to_each_event_claude_code_runs_them_on(home, capsys, tmp_path):
    """The docs had an http hook on SessionStart, which Claude Code ignores: a team's sessions never got
    the decisions in force, at the start or after a compaction."""
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"kind": "decision", "ref": "adr-2", "title": "Kafka",
                                 "text": "Payment events move to Kafka, partitioned by merchant id."}) + "\n")
    assert main(["import", str(items), "--project", "payments-api"]) == 0
    capsys.readouterr()
    secret = add_token(capsys, "alice", "payments-api")
    async with http_server(home) as server, httpx2.AsyncClient(timeout=30) as http:
        hooks = documented_hooks(server.url.removesuffix("/mcp"))
        for name, extra in (("UserPromptSubmit", {"prompt": "how are payment events partitioned in Kafka?"}),
                            ("SessionStart", {"source": "compact"})):
            [group] = hooks[name]
            [hook] = group["hooks"]
            assert hook["type"] in RUNS_ON.get(name, {"command", "http", "mcp_tool"}), (name, hook["type"])
            event = {"session_id": "s", "transcript_path": "/dev/null", "cwd": "/home/alice/src/api",
                     "hook_event_name": name, **extra}
            out = json.loads(await run_as_claude_code(http, hook, event, secret))["hookSpecificOutput"]
            assert out["hookEventName"] == name and "partitioned by merchant id" in out["additionalContext"]
            assert await run_as_claude_code(http, hook, event, "amr_wrong") == ""  # refused: nothing, no error
        nobody = documented_hooks(f"http://127.0.0.1:{free_port()}")["SessionStart"][0]["hooks"][0]
        assert await run_as_claude_code(http, nobody, event, secret) == ""  # no server there: nothing, no error


async def test_the_http_hook_keeps_a_large_budgets_context_to_what_claude_code_passes_on_whole(home, capsys, tmp_path):
    prose = ("the infrastructure team standardized idempotency requirements, authentication middleware, international "
             "currency normalization and asynchronous notification delivery across every payment microservice.")
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(turn(f"Settlement note {i}: {prose}", session=f"n{i}")) + "\n" for i in range(60)))
    assert main(["import", str(items), "--project", "payments"]) == 0
    capsys.readouterr()
    secret = add_token(capsys, "alice", "payments")
    prompt = {"session_id": "s", "cwd": "/tmp", "hook_event_name": "UserPromptSubmit",
              "prompt": "what did the infrastructure team standardize for settlement?"}
    async with http_server(home) as server, httpx2.AsyncClient(timeout=30) as http:
        url = server.url.replace("/mcp", f"/hooks/claude-code?budget={MAX_HOOK_BUDGET}")
        reply = await http.post(url, json=prompt, headers={"Authorization": f"Bearer {secret}"})
        context = reply.json()["hookSpecificOutput"]["additionalContext"]
        assert 0.8 * MAX_CONTEXT_CHARS < len(context) <= MAX_CONTEXT_CHARS  # past it, a preview and a file path


async def test_http_hook_refuses_a_body_that_is_not_a_json_object_and_stays_up(home, capsys):
    secret = add_token(capsys, "alice", "payments")
    auth = {"Authorization": f"Bearer {secret}"}
    deep = 100_000
    bodies = (b"[" * deep + b"]" * deep, b'{"a":' * deep + b"1" + b"}" * deep, b"not json", b"[]",
              b'{"hook_event_name": "UserPromptSubmit", "prompt": ' + b"[" * deep + b"]" * deep + b"}")
    async with http_server(home) as server, httpx2.AsyncClient(timeout=30) as http:
        url = server.url.replace("/mcp", "/hooks/claude-code")
        for body in bodies:
            reply = await http.post(url, content=body, headers=auth)
            assert reply.status_code == 400, (body[:20], reply.status_code)
            assert reply.text.count("\n") == 1 and "not a JSON object" in reply.text
        event = {"session_id": "s", "cwd": "/tmp", "hook_event_name": "UserPromptSubmit", "prompt": "payment events",
                 "extra": [[[[]]]]}
        assert (await http.post(url, json=event, headers=auth)).status_code == 200  # still healthy
        async with mcp_client(server.url, secret) as client:
            assert (await call(client, "list_projects"))["projects"][0]["units"] == 0  # nothing was written
    assert not any("Traceback" in line for line in server.log), server.log


def test_serve_http_on_a_port_in_use_is_refused_before_anything_starts(home, capsys):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert main(["serve", "--http", "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert not (home / "memory.duckdb").exists()


async def test_the_hook_route_checks_host_and_origin_as_mcp_does_and_off_loopback_a_web_page_is_refused(home, capsys):
    """The hook route skipped the Host/Origin checks /mcp gets, and off loopback the SDK drops them
    for /mcp too: a page in a browser could post to either (it sends Origin; MCP clients do not)."""
    secret = add_token(capsys, "alice", "payments")
    auth = {"Authorization": f"Bearer {secret}"}
    prompt = {"session_id": "s", "cwd": "/tmp", "hook_event_name": "UserPromptSubmit", "prompt": "payment events"}
    async with http_server(home) as server, httpx2.AsyncClient(timeout=30) as http:
        hook = server.url.replace("/mcp", "/hooks/claude-code")
        for url, body in ((server.url, INITIALIZE), (hook, prompt)):
            rebound = await http.post(url, json=body, headers={**HEADERS, **auth, "Host": "evil.example"})
            assert rebound.status_code == 421
            page = await http.post(url, json=body, headers={**HEADERS, **auth, "Origin": "http://evil.example"})
            assert page.status_code == 403
            local = await http.post(url, json=body, headers={**HEADERS, **auth, "Origin": "http://localhost:3000"})
            assert local.status_code == 200
    port = free_port()  # 127.0.0.2 is a loopback address the SDK does not know: it checks nothing there
    async with serving(home, ["serve", "--http", "--host", "127.0.0.2", "--port", str(port)],
                       f"http://127.0.0.2:{port}/mcp") as server, httpx2.AsyncClient(timeout=30) as http:
        hook = server.url.replace("/mcp", "/hooks/claude-code")
        for url, body in ((server.url, INITIALIZE), (hook, prompt)):
            page = await http.post(url, json=body, headers={**HEADERS, **auth, "Origin": f"http://127.0.0.2:{port}"})
            assert page.status_code == 403
            named = await http.post(url, json=body, headers={**HEADERS, **auth, "Host": "memory.example:8765"})
            assert named.status_code == 200  # a replica behind a load balancer is reached by any name
    assert any("refused a request from a web page" in line for line in server.log)
