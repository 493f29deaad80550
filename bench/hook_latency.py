"""How long a Claude Code hook makes the user wait: the wall time of `agentmemrec hook claude-code`
as Claude Code runs it (a new process per event, fed the event JSON on stdin), with a warm owner,
and of the same answer over HTTP (`serve --http`, `POST /hooks/claude-code`).

The store holds one LoCoMo development conversation (about 400-700 turns) and a few decisions; the
owner is a real `agentmemrec serve --http` process, which both kinds of hook ask. Prompts mix the
conversation's own questions with coding prompts that have nothing stored behind them; a
SessionStart event asks for the decisions digest. Target (issue 17): process wall time p50 <= 300
ms and p95 <= 1 s on this machine.

Then, with no process owning the store, a cold SessionStart (the first session after an hour
away): the command hook starts an owner and waits for it (`--start-deadline`), each time from no
owner at all (the one it started is stopped after it).

    nice -n 10 python bench/hook_latency.py /work/shared/data/locomo/conv-26.json \
        [--models-home "$AGENTMEMREC_HOME"] --out bench/results/hook-latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from harness import models_label, percentiles, write_result
from hook_evidence import CODING_PROMPTS

from agentmemrec.ranking.eval.benchmarks import PROJECT, read_cases

CLI = [sys.executable, "-m", "agentmemrec.server.cli"]
DECISIONS = [{"kind": "decision", "ref": f"adr-{i}", "title": f"Decision {i}", "status": status,
              "text": f"We decided on option {i} for the {area} because it keeps {area} simple."}
             for i, (status, area) in enumerate([("accepted", "deploys"), ("proposed", "caching"),
                                                 ("accepted", "logging"), ("rejected", "queues"),
                                                 ("accepted", "auth"), ("proposed", "billing")])]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, secret: str, event: dict[str, Any]) -> bytes:
    request = urllib.request.Request(url, json.dumps(event).encode(), method="POST", headers={
        "Authorization": f"Bearer {secret}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return reply.read()


def prepare(home: Path, data: Path, models_home: Path | None, env: dict[str, str]) -> tuple[str, list[str]]:
    """The store, embedded when a model is installed; returns a bearer secret and the prompts."""
    [case] = list(read_cases("locomo", [data]))
    if models_home is not None:
        shutil.copytree(models_home / "models", home / "models")
    items = home.parent / "items.jsonl"
    items.write_text("\n".join(json.dumps(i) for i in [*case.projects[PROJECT], *DECISIONS]) + "\n")
    subprocess.run([*CLI, "import", str(items), "--project", "conv"], check=True, capture_output=True, env=env)
    secret = subprocess.run([*CLI, "tokens", "add", "bench", "--projects", "conv"], check=True,
                            capture_output=True, text=True, env=env).stdout.strip()
    questions = [q.text for q in case.questions if q.category != "5"][:30]
    return secret, [p for pair in zip(questions, CODING_PROMPTS) for p in pair]


def wait_ready(url: str, secret: str, server: subprocess.Popen, env: dict[str, str], embedded: bool) -> None:
    """Until the server answers a hook and (with a model) nothing waits to be embedded."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and server.poll() is None:
        try:
            post(url, secret, {"hook_event_name": "SessionStart", "cwd": "/", "source": "startup"})
            stats = json.loads(subprocess.run([*CLI, "stats", "--json"], check=True, capture_output=True,
                                              text=True, env=env).stdout)
            if not embedded or not any("not yet embedded" in n for n in stats["projects"][0]["limits"]):
                return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(1.0)
    raise SystemExit("the server did not come up (or finish embedding) in time")


def hook_command() -> list[str]:
    script = Path(sys.executable).with_name("agentmemrec")  # what `setup` writes into the settings
    return [*([str(script)] if script.is_file() else CLI), "hook", "claude-code", "--project", "conv"]


def cold_session_starts(env: dict[str, str], home: Path, times: int) -> dict[str, Any]:
    """Wall time of a SessionStart that finds no owner, and the share answered with the digest."""
    event = json.dumps({"hook_event_name": "SessionStart", "cwd": "/", "source": "startup", "session_id": "c"})
    walls, answered = [], 0
    for _ in range(times):
        (home / "owner.starting").unlink(missing_ok=True)  # the last one's: it has left
        start = time.perf_counter()
        out = subprocess.run(hook_command(), input=event, capture_output=True, text=True, env=env).stdout
        walls.append(time.perf_counter() - start)
        answered += "decisions in force" in out
        stop_owner(home)
    return {**percentiles(walls), "answered_share": round(answered / times, 3)}


def stop_owner(home: Path) -> None:
    """Stop the owner the hook started and wait until it has left. Its pid is in the lock file once
    it holds the lock (until then the file names the last owner, which has left)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pid = int((home / "owner.lock").read_text().split()[0])
        try:
            os.kill(pid, 15)
            break
        except ProcessLookupError:
            time.sleep(0.2)
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise SystemExit(f"the owner the hook started did not leave (lock file: pid {pid})")


def measure(prompts: list[str], url: str, secret: str, env: dict[str, str], rounds: int) -> dict[str, Any]:
    command = {"UserPromptSubmit": [], "SessionStart": []}
    http = {"UserPromptSubmit": [], "SessionStart": []}
    answered = {"command_hook": 0, "http_hook": 0}
    hook = hook_command()
    for _ in range(rounds):
        for i, prompt in enumerate(prompts):
            event = {"hook_event_name": "UserPromptSubmit", "cwd": "/", "prompt": prompt, "session_id": "b"}
            if i % 10 == 0:
                event = {"hook_event_name": "SessionStart", "cwd": "/", "source": "startup", "session_id": "b"}
            start = time.perf_counter()
            out = subprocess.run(hook, input=json.dumps(event), capture_output=True, text=True, env=env).stdout
            command[event["hook_event_name"]].append(time.perf_counter() - start)
            answered["command_hook"] += bool(out)
            start = time.perf_counter()
            answered["http_hook"] += bool(post(url, secret, event))
            http[event["hook_event_name"]].append(time.perf_counter() - start)
    return {"command_hook": {k: percentiles(v) for k, v in command.items()},
            "command_hook_all": percentiles(command["UserPromptSubmit"] + command["SessionStart"]),
            "http_hook": {k: percentiles(v) for k, v in http.items()},
            "answered_share": {k: round(n / sum(len(v) for v in command.values()), 3) for k, n in answered.items()}}


def run(data: Path, models_home: Path | None, rounds: int, cold: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentmemrec-hook-latency-") as tmp:
        home = Path(tmp) / "home"
        env = {**os.environ, "AGENTMEMREC_HOME": str(home)}
        secret, prompts = prepare(home, data, models_home, env)
        port = free_port()
        url = f"http://127.0.0.1:{port}/hooks/claude-code?project=conv"
        server = subprocess.Popen([*CLI, "serve", "--http", "--port", str(port)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(url, secret, server, env, models_home is not None)
            load_before = os.getloadavg()[0]
            result = measure(prompts, url, secret, env, rounds)
        finally:
            server.terminate()
            server.wait(timeout=60)
        result["cold_session_start"] = cold_session_starts(env, home, cold)
    return {"configuration": models_label(models_home), "events": rounds * len(prompts),
            "load_1m_before": round(load_before, 2), "load_1m_after": round(os.getloadavg()[0], 2), **result}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="one LoCoMo conversation file")
    ap.add_argument("--models-home", type=Path, default=None,
                    help="also measure with the models installed in this home (models/)")
    ap.add_argument("--rounds", type=int, default=2, help="passes over the 60 events (default 2)")
    ap.add_argument("--cold", type=int, default=5, help="SessionStarts with no owner running (default 5)")
    ap.add_argument("--out", type=Path, required=True, help="where the JSON results go")
    args = ap.parse_args()
    configurations = [run(args.data, None, args.rounds, args.cold)]
    if args.models_home:
        configurations.append(run(args.data, args.models_home, args.rounds, args.cold))
    write_result(args.out, {"benchmark": "hook_latency", "data": args.data.name,
                            "target": {"p50_ms": 300, "p95_ms": 1000}, "configurations": configurations})
    for c in configurations:
        print(c["configuration"], "command hook", c["command_hook_all"], "http", c["http_hook"],
              "cold SessionStart", c["cold_session_start"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
