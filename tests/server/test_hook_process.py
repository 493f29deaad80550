"""`agentmemrec hook claude-code` as Claude Code runs it: a subprocess fed the event JSON on stdin,
asking the process that owns the store (here the test process itself) over its socket."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import anyio
import pytest

from agentmemrec.ranking.learned import weights_of
from agentmemrec.server.hook_context import RELEVANCE_FLOOR, WEAK_SCORE, weak_evidence
from agentmemrec.server.hook_process import LOG_BYTES, MAX_CONTEXT_CHARS, MAX_HOOK_BUDGET, PROMPT_BUDGET
from agentmemrec.server.owner import shared_memory
from agentmemrec.server.owner_socket import NoOwner, ask, socket_path

from helpers import settings_for, turn

HOOK = [sys.executable, "-m", "agentmemrec.server.cli", "hook", "claude-code"]
HEAVY = ("onnxruntime", "lightgbm", "duckdb", "tiktoken", "pydantic", "numpy", "mcp", "bm25s",
         "tokenizers", "starlette", "anyio")
DECISIONS = [
    {"kind": "decision", "ref": "adr-1", "title": "RabbitMQ", "text": "Payment events go over RabbitMQ.",
     "at": "2026-01-10T09:00:00Z"},
    {"kind": "decision", "ref": "adr-2", "title": "Kafka", "supersedes": "adr-1", "at": "2026-04-14T09:00:00Z",
     "text": "Payment events move to Kafka, partitioned by merchant id."},
    {"kind": "decision", "ref": "adr-3", "title": "GraphQL", "status": "rejected", "at": "2026-05-05T09:00:00Z",
     "text": "Expose payments over GraphQL."},
    {"kind": "decision", "ref": "adr-4", "title": "Idempotency keys", "status": "proposed",
     "at": "2026-06-01T09:00:00Z", "text": "Require an Idempotency-Key header on POST /payments."},
]


def event(name: str, cwd: Path, **extra: str) -> dict[str, str]:
    return {"session_id": "sess-1", "transcript_path": "/dev/null", "cwd": str(cwd),
            "hook_event_name": name, **extra}


def run_hook(home: Path, payload: object, *args: str) -> subprocess.CompletedProcess[str]:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return subprocess.run([*HOOK, *args], input=data, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "AGENTMEMREC_HOME": str(home)})


def context_of(done: subprocess.CompletedProcess[str], name: str) -> str:
    assert done.returncode == 0 and done.stderr == "", done.stderr
    out = json.loads(done.stdout)  # stdout is exactly one JSON document
    assert out["hookSpecificOutput"]["hookEventName"] == name
    return out["hookSpecificOutput"]["additionalContext"]


@pytest.fixture
def repos(tmp_path: Path) -> dict[str, Path]:
    found = {}
    for name in ("payments", "website"):
        (tmp_path / "src" / name / ".git").mkdir(parents=True)
        (tmp_path / "src" / name / "services").mkdir()
        found[name] = tmp_path / "src" / name
    return found


def _owner(home: Path):
    shared = shared_memory(settings_for(home, "payments")).start()
    assert shared.is_owner
    shared.remember("payments", [*DECISIONS, turn("The settlement job retries three times, then pages "
                                                  "the on-call engineer.", session="s1")])
    shared.remember("website", [turn("The website payment banner is blue and says Kafka rocks.",
                                     session="w1")])
    return shared


@pytest.fixture
def owner(home: Path):
    shared = _owner(home)
    yield shared
    shared.close()


@pytest.fixture
def cpu_owner(home: Path, default_home: Path):
    """The same store with the default CPU set, once the background embedder has reached it."""
    shutil.copytree(default_home / "models", home / "models")
    shared = _owner(home)
    try:
        deadline = time.monotonic() + 60
        while any("not yet embedded" in n for n in shared.recall("payments", "payment events", PROMPT_BUDGET).notes):
            assert time.monotonic() < deadline, "the background embedder did not finish"
            time.sleep(0.2)
        yield shared
    finally:
        shared.close()


def test_a_prompt_gets_what_its_folders_project_holds_and_never_another_projects(home, owner, repos):
    prompt = "how are payment events partitioned in Kafka?"
    done = run_hook(home, event("UserPromptSubmit", repos["payments"] / "services", prompt=prompt))
    context = context_of(done, "UserPromptSubmit")
    assert context.startswith("AgentMemRec: stored memory of project payments")
    assert "partitioned by merchant id" in context and "banner" not in context
    other = run_hook(home, event("UserPromptSubmit", repos["website"], prompt=prompt))
    assert "merchant id" not in other.stdout and "RabbitMQ" not in other.stdout
    logged = (home / "hook.log").read_text()  # one line a prompt, what was added or why not; never the prompt
    assert f"UserPromptSubmit in project payments: added {len(context)} characters" in logged
    assert len(logged.splitlines()) == 2 and prompt not in logged


def test_session_start_gets_the_decisions_in_force_newest_first(home, owner, repos):
    context = context_of(run_hook(home, event("SessionStart", repos["payments"], source="startup")),
                         "SessionStart")
    lines = context.splitlines()
    assert lines[0] == "AgentMemRec: the decisions in force in project payments, from its stored memory."
    assert lines[1].startswith("# decisions in force in project payments, newest first")
    assert re.match(r"\[#\d+ adr-4\] decision \(proposed, not confirmed, 2026-06-01\): Idempotency keys", lines[2])
    assert re.match(r"\[#\d+ adr-2\] decision \(accepted, 2026-04-14\): Kafka\. Payment events move", lines[3])
    assert lines[4] == "## replaced (no longer in force)"
    assert re.fullmatch(r"\[#\d+ adr-1\] decision replaced by #\d+ \(2026-01-10\): RabbitMQ", lines[5])
    assert "GraphQL" not in context and "go over RabbitMQ" not in context  # rejected; replaced text


LONG_ADR = """# 7. Ledger reconciliation

Date: 2026-07-01

## Status

Accepted

## Context

""" + "\n\n".join(f"Finding {i}: the nightly ledger export and the processor's settlement files disagree on "
                   "rounding, currency and timing; " + "every mismatch costs an analyst an hour. " * 12
                   for i in range(8)) + """

## Decision

Reconciliation flags a ledger row only when its amount differs from the settlement file by more than one cent.

## Consequences

""" + "Analysts review fewer rows, and rounding drift below a cent is accepted. " * 60


def test_a_long_adr_reaches_the_prompt_and_the_session_start_as_an_excerpt_of_its_decision(home, owner, repos):
    adr = repos["payments"] / "docs" / "adr" / "0007-ledger-reconciliation.md"
    adr.parent.mkdir(parents=True)
    adr.write_text(LONG_ADR)
    subprocess.run([sys.executable, "-m", "agentmemrec.server.cli", "watch", str(adr.parent.parent), "--once",
                    "--project", "payments"], check=True, capture_output=True, timeout=120,
                   env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    [stored] = [d for d in owner.call("decisions", "payments") if d.ref == "adr:0007"]
    assert stored.tokens > PROMPT_BUDGET  # it could never fit the prompt's slate whole
    prompt = "when does the nightly ledger reconciliation flag a row?"
    context = context_of(run_hook(home, event("UserPromptSubmit", repos["payments"], prompt=prompt)),
                         "UserPromptSubmit")
    assert "flags a ledger row only when its amount differs from the settlement file by more than one cent" in context
    assert f"read it whole with show_unit #{stored.id} or the file docs/adr/0007-ledger-reconciliation.md]" in context
    start = context_of(run_hook(home, event("SessionStart", repos["payments"], source="startup")), "SessionStart")
    assert f"[#{stored.id} adr:0007] decision (accepted, 2026-07-01): 7. Ledger reconciliation." in start
    assert "adr-2] decision (accepted, 2026-04-14): Kafka" in start  # the long one crowds out no other


PROSE = ("the infrastructure team standardized idempotency requirements, authentication middleware, international "
         "currency normalization and asynchronous notification delivery across every payment microservice.")


def test_at_the_largest_budget_the_context_still_reaches_the_model_whole(home, owner, repos):
    """Prose runs to 5-6 characters a token: at MAX_HOOK_BUDGET tokens a slate or a digest went past
    the 10,000 characters Claude Code passes on whole, and the hook added nothing at all."""
    owner.remember("payments", [turn(f"Settlement note {i}: {PROSE}", session=f"n{i}") for i in range(60)] + [
        {"kind": "decision", "ref": f"std-{i}", "title": f"Settlement standard {i}", "text": f"{PROSE} {PROSE}"}
        for i in range(20)])
    prompt = "what did the infrastructure team standardize for settlement?"
    assert len(owner.recall("payments", prompt, MAX_HOOK_BUDGET).context) > MAX_CONTEXT_CHARS  # too long at first
    budget = str(MAX_HOOK_BUDGET)
    for name, extra, option in (("UserPromptSubmit", {"prompt": prompt}, "--budget"),
                                ("SessionStart", {"source": "compact"}, "--digest-budget")):
        context = context_of(run_hook(home, event(name, repos["payments"], **extra), option, budget, "--deadline", "20"),
                             name)
        assert 0.8 * MAX_CONTEXT_CHARS < len(context) <= MAX_CONTEXT_CHARS and "idempotency" in context


def test_a_prompt_gets_no_decision_that_nothing_but_its_kind_ranked_and_recall_slate_still_may(home, repos):
    # BM25 finds the three hiring decisions only through "job", below the turns about the job
    # itself (past MATCHED_WITHIN["bm25"]); with no embedder no other channel finds them.
    shared = shared_memory(settings_for(home, "payments")).start()
    try:
        shared.remember("payments", [turn(f"The nightly settlement job failed on run {i}: the ledger "
                                          f"export timed out and the settlement job was retried.", session="s1")
                                     for i in range(12)] + [
            {"kind": "decision", "ref": f"hire-{i}", "title": f"Hiring {i}", "at": "2026-01-10T09:00:00Z",
             "text": f"We post the {team} job opening on the careers page only."}
            for i, team in enumerate(("design", "sales", "support"))])
        prompt = "what happens when the nightly settlement job fails?"
        asked = shared.recall("payments", prompt, PROMPT_BUDGET)
        assert "careers page" in asked.context  # the budget holds the whole pool: the ranking lets them in
        context = context_of(run_hook(home, event("UserPromptSubmit", repos["payments"], prompt=prompt)),
                             "UserPromptSubmit")
        assert "ledger export timed out" in context and "careers page" not in context
        slate_id = re.search(r"slate (s_\d+)", context).group(1)
        outcomes = {c.get("ref"): c["outcome"] for c in shared.explain(slate_id, {"payments"})["candidates"]}
        assert outcomes["hire-0"] == outcomes["hire-1"] == outcomes["hire-2"] == "left_out_unmatched"
    finally:
        shared.close()


def test_a_prompt_the_memory_cannot_answer_gets_nothing(home, owner, repos):
    for prompt in ("rename parse_args to parse_cli everywhere", "yes"):
        done = run_hook(home, event("UserPromptSubmit", repos["payments"], prompt=prompt))
        assert (done.returncode, done.stdout) == (0, "")
    reasons = (home / "hook.log").read_text().splitlines()[-2:]  # why, for whoever reads the log
    assert "UserPromptSubmit in project payments: nothing added (weak evidence (slate " in reasons[0]
    assert reasons[1].endswith("UserPromptSubmit in project payments: nothing added (prompt too short to look up)")


def test_with_the_default_set_a_prompt_under_the_cross_encoders_floor_gets_nothing(home, cpu_owner, repos):
    # Prompts whose best cross-encoder logit on this store lies far under RELEVANCE_FLOOR while the
    # ranker's top score passes WEAK_SCORE (a small store's top score is high for anything): the
    # floor alone keeps them out; the answerable prompt stays above both.
    first = cpu_owner.recall("payments", "payment events", PROMPT_BUDGET)
    cross_encoder = cpu_owner.explain(first.slate_id, {"payments"})["models"]["cross_encoder"]
    assert weights_of(cross_encoder) in RELEVANCE_FLOOR
    floor = RELEVANCE_FLOOR[weights_of(cross_encoder)]
    for prompt in ("why does mypy complain about this Optional?", "does this leak file handles?"):
        slate = cpu_owner.recall("payments", prompt, PROMPT_BUDGET)
        assert slate.top_score >= WEAK_SCORE, "pick prompts the top score alone lets through on this store"
        assert slate.top_relevance < floor
        assert weak_evidence(slate, cross_encoder).startswith("best cross-encoder logit")
        done = run_hook(home, event("UserPromptSubmit", repos["payments"], prompt=prompt))
        assert (done.returncode, done.stdout) == (0, "")
        assert "best cross-encoder logit" in (home / "hook.log").read_text().splitlines()[-1]
    prompt = "what happens when the settlement job fails?"
    assert weak_evidence(cpu_owner.recall("payments", prompt, PROMPT_BUDGET), cross_encoder) is None
    context = context_of(run_hook(home, event("UserPromptSubmit", repos["payments"], prompt=prompt)),
                         "UserPromptSubmit")
    assert "retries three times, then pages" in context


def test_a_japanese_prompt_gets_memory_and_a_japanese_acknowledgement_does_not(home, cpu_owner, repos):
    """Japanese and Chinese put no spaces between words: a question was one 'word' and never looked up."""
    cpu_owner.remember("payments", [{"kind": "decision", "ref": "adr-ja", "title": "決済イベントはKafkaへ",
                                     "text": "決済イベントはKafkaのトピック payments.events.v1 に送る。"
                                             "RabbitMQはメール送信だけに使う。"}])
    deadline = time.monotonic() + 60
    while any("not yet embedded" in n for n in cpu_owner.recall("payments", "決済", PROMPT_BUDGET).notes):
        assert time.monotonic() < deadline, "the background embedder did not finish"
        time.sleep(0.2)
    prompt = "決済イベントはどこに送りますか？KafkaですかRabbitMQですか？"
    context = context_of(run_hook(home, event("UserPromptSubmit", repos["payments"], prompt=prompt)),
                         "UserPromptSubmit")
    assert "payments.events.v1" in context
    for short in ("はい", "好", "ok"):
        done = run_hook(home, event("UserPromptSubmit", repos["payments"], prompt=short))
        assert (done.returncode, done.stdout) == (0, "")
        assert (home / "hook.log").read_text().splitlines()[-1].endswith("(prompt too short to look up)")


def test_events_it_does_not_answer_and_broken_input_print_nothing(home, owner, repos):
    for payload in ("not json", "[1, 2]", event("PreToolUse", repos["payments"], tool_name="Bash"), ""):
        done = run_hook(home, payload)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    logged = (home / "hook.log").read_text().splitlines()  # one line each, saying why nothing was added
    assert len(logged) == 4 and "JSONDecodeError" in logged[0]
    assert logged[1].endswith("hook: an event that is not a JSON object: nothing added (the hook answers "
                              "SessionStart and UserPromptSubmit events)") and "not a JSON object" in logged[3]
    assert logged[2].endswith("hook: event 'PreToolUse': nothing added (the hook answers SessionStart and "
                              "UserPromptSubmit events)")


def test_the_hook_process_imports_nothing_heavy(home, owner, repos):
    prompt = "how are payment events partitioned in Kafka?"
    payload = json.dumps(event("UserPromptSubmit", repos["payments"], prompt=prompt))
    done = subprocess.run([sys.executable, "-X", "importtime", *HOOK[1:]], input=payload, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    assert done.returncode == 0 and "merchant id" in json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "agentmemrec" in imported and not imported & set(HEAVY), sorted(imported & set(HEAVY))


@pytest.mark.parametrize("args, said", [
    (["--budget", "2700"], "argument --budget: use 200 to 2000 tokens, not '2700'"),
    (["--deadline", "abc"], "argument --deadline: use a number of seconds above 0, at most 60, not 'abc'"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_a_bad_option_never_blocks_the_prompt(home, repos, args, said):
    """Claude Code blocks a prompt whose UserPromptSubmit hook exits 2 (argparse's error code)."""
    done = run_hook(home, event("UserPromptSubmit", repos["payments"], prompt="payment broker"), *args)
    assert (done.returncode, done.stdout) == (0, "")
    assert said in done.stderr and said in (home / "hook.log").read_text()


@contextmanager
def fake_owner(home: Path, answer: bytes | None) -> Iterator[None]:
    """A socket where the owner's would be, that never answers (`answer` None) or answers a
    request's line with `answer`."""
    home.mkdir(parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(socket_path(home)))
    listener.listen()
    accepted: list[socket.socket] = []

    def serve() -> None:
        accepted.append(conn := listener.accept()[0])
        if answer is not None:
            conn.makefile("rb").readline()
            conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield
    finally:
        for conn in accepted:
            conn.close()
        listener.close()


@pytest.mark.parametrize("name, answer, said", [
    ("UserPromptSubmit", None, "UserPromptSubmit: no answer within 0.5 s"),
    ("SessionStart", None, "SessionStart: no answer within 0.5 s"),
    ("UserPromptSubmit", b'{"error": "StoreError", "message": "the store file is damaged"}\n',
     "UserPromptSubmit: RuntimeError: the store file is damaged"),
])
def test_past_its_deadline_or_on_an_error_the_hook_prints_nothing_and_its_log_line_names_the_event(
        home, repos, name, answer, said):
    extra = {"prompt": "which broker carries payment events?"} if name == "UserPromptSubmit" else {"source": "startup"}
    with fake_owner(home.resolve(), answer):  # a SessionStart has a deadline of its own
        done = run_hook(home.resolve(), event(name, repos["payments"], **extra), "--deadline", "0.5",
                        "--start-deadline", "0.5")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    [logged] = (home / "hook.log").read_text().splitlines()
    assert logged.endswith(f" hook: {said}") and "broker" not in logged


@pytest.mark.anyio
async def test_with_no_owner_the_hook_starts_one_and_the_next_prompt_gets_context(home, repos, tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(d) for d in DECISIONS) + "\n")
    cli = [sys.executable, "-m", "agentmemrec.server.cli"]
    subprocess.run([*cli, "import", str(items), "--project", "payments"], check=True, capture_output=True,
                   env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    ask = event("UserPromptSubmit", repos["payments"], prompt="how are payment events partitioned in Kafka?")
    first = run_hook(home, ask)
    assert (first.returncode, first.stdout) == (0, "")
    assert "started one for the next prompt, logging to" in (home / "hook.log").read_text()
    runs = 1
    try:
        with anyio.fail_after(120):  # the owner opens the store in the background
            while not (done := await anyio.to_thread.run_sync(run_hook, home, ask)).stdout:
                runs += 1
                await anyio.sleep(0.2)
        assert "partitioned by merchant id" in context_of(done, "UserPromptSubmit")
    finally:
        stop_started_owner(home)
    logged = (home / "hook.log").read_text().splitlines()  # every prompt, those during the start too
    assert len(logged) == runs + 1 and all(" hook: " in line for line in logged), logged
    assert all("is not answering yet" in line or "no answer within" in line for line in logged[1:-1]), logged
    assert " hook: UserPromptSubmit in project payments: added" in logged[-1]
    assert "owning the memory store" in (home / "owner.log").read_text()  # the owner's own log


def test_a_session_started_with_no_owner_waits_for_the_one_it_starts_and_gets_its_decisions(home, repos, tmp_path):
    """The first session of the day finds no process with the store open: its SessionStart starts
    an owner and waits for it (`--start-deadline`, long here for a loaded test machine), where a
    prompt would not wait."""
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(d) for d in DECISIONS) + "\n")
    subprocess.run([sys.executable, "-m", "agentmemrec.server.cli", "import", str(items), "--project", "payments"],
                   check=True, capture_output=True, env={**os.environ, "AGENTMEMREC_HOME": str(home)})
    try:
        done = run_hook(home, event("SessionStart", repos["payments"], source="startup"), "--start-deadline", "50")
        assert "partitioned by merchant id" in context_of(done, "SessionStart")
    finally:
        stop_started_owner(home)
    [logged] = (home / "hook.log").read_text().splitlines()
    assert " hook: SessionStart in project payments: added " in logged  # one line: it waited, then added
    assert "owning the memory store" in (home / "owner.log").read_text()


@pytest.mark.anyio
async def test_the_owner_a_hook_started_keeps_its_log_under_a_bound_however_long_it_runs(home, repos):
    """It leaves after an hour without a call, so a busy one runs for days: past LOG_BYTES its
    owner.log moves to owner.log.1 and the next lines, tracebacks too, start a new one."""
    first = run_hook(home, event("SessionStart", repos["payments"], source="startup"))
    assert (first.returncode, first.stdout) == (0, "")
    try:
        with anyio.fail_after(120):  # the owner opens the store in the background
            while not await anyio.to_thread.run_sync(_answers, home):
                await anyio.sleep(0.2)
        calls = 0  # each call that fails in the owner (not a caller's mistake) logs its traceback: over 500 bytes
        while not (home / "owner.log.1").exists():
            assert calls < 2 * LOG_BYTES // 500, "owner.log was not moved past its bound"
            with pytest.raises(RuntimeError, match="AttributeError"):
                ask(home, "hook", [7, {}], 30)  # an event that is not an object
            calls += 1
        with pytest.raises(RuntimeError, match="TypeError"):
            ask(home, "sources", ["payments", 7], 30)  # prefixes that are not a list
    finally:
        stop_started_owner(home)
    before = (home / "owner.log.1").read_text()
    assert "owning the memory store" in before and LOG_BYTES < len(before) < LOG_BYTES + 10_000
    after = (home / "owner.log").read_text()
    assert "TypeError: 'int' object is not iterable" in after and "AttributeError" not in after


def _answers(home: Path) -> bool:
    try:
        return ask(home, "kinds", [], 30) == {}
    except NoOwner:
        return False


def stop_started_owner(home: Path) -> None:
    """Stop the `agentmemrec owner` the hook started (its pid is in the lock file), and only it."""
    pid = int((home / "owner.lock").read_text().split()[0])
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists() and b"owner\x00--idle-exit" in cmdline.read_bytes():
        os.kill(pid, 15)
