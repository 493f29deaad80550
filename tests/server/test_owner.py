"""One store, many processes: the owner/follower protocol, in one process (each `SharedMemory`
takes its own lock file descriptor, so two of them behave as two processes would)."""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import threading
from importlib import resources
from pathlib import Path

import anyio
import pytest

from agentmemrec.indexing.errors import InputError, StoreError
from agentmemrec.server import owner as owner_module
from agentmemrec.server.owner import SharedMemory, shared_memory
from agentmemrec.server.owner_socket import socket_path
from agentmemrec.server.settings import Settings

from helpers import turn


@pytest.fixture
def pair(home: Path):
    first, second = SharedMemory(home).start(), SharedMemory(home).start()
    yield first, second
    second.close()
    first.close()


def test_the_first_process_owns_the_store_and_the_next_gets_the_same_answers(pair):
    owner, follower = pair
    assert owner.is_owner and not follower.is_owner
    stored = follower.remember("p", [turn("Payments publish to Kafka.", ref="k")])
    assert stored[0].outcome == "stored" and owner.remember("p", [turn("Payments publish to Kafka.",
                                                                      ref="k")])[0].ids == stored[0].ids
    here, there = owner.recall("p", "kafka payments"), follower.recall("p", "kafka payments")
    assert there.items == here.items and there.context.split("\n", 1)[1] == here.context.split("\n", 1)[1]
    assert follower.explain(there.slate_id, {"p"})["candidates"][0]["ref"] == "k"
    assert follower.projects() == {"p": 1}


def test_typed_errors_cross_the_socket_unchanged(pair):
    _, follower = pair
    with pytest.raises(InputError, match="unknown kind 'memo'"):
        follower.remember("p", [{"kind": "memo", "text": "x"}])
    with pytest.raises(InputError, match="nothing to forget"):
        follower.forget("p", ["ghost"])


def test_when_the_owner_leaves_a_follower_takes_over_and_nothing_is_lost(home):
    owner, follower = SharedMemory(home).start(), SharedMemory(home).start()
    follower.remember("p", [turn(f"note {i}", ref=f"n{i}") for i in range(20)])
    owner.close()
    follower.remember("p", [turn("written after the hand-over", ref="late")])
    assert follower.is_owner and follower.projects() == {"p": 21}
    follower.close()


def _fake_owner(home: Path, release: threading.Event | None = None) -> threading.Thread:
    """Holds the lock and the socket and takes one request. Without `release` it dies before
    answering; with it, it hangs (a stopped process) until `release` is set."""
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / "owner.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(socket_path(home.resolve())))
    listener.listen()

    def serve_one() -> None:
        conn, _ = listener.accept()
        conn.makefile("rb").readline()  # the request arrived ...
        if release is not None:
            release.wait(timeout=60)
        listener.close()
        socket_path(home.resolve()).unlink()
        os.close(fd)  # ... and the owner is gone before it answers
        conn.close()

    thread = threading.Thread(target=serve_one, daemon=True)
    thread.start()
    return thread


def test_a_write_whose_owner_died_mid_call_is_repeated_on_the_next_owner(home):
    dying = _fake_owner(home)
    follower = SharedMemory(home).start()
    assert not follower.is_owner
    [result] = follower.remember("p", [turn("survives the owner's death", ref="s")])
    dying.join(timeout=30)
    assert follower.is_owner and result.outcome == "stored"
    assert [i.unit.ref for i in follower.recall("p", "survives death").items] == ["s"]
    follower.close()


def test_a_forget_whose_reply_was_lost_is_reported_not_repeated(home):
    dying = _fake_owner(home)
    follower = SharedMemory(home).start()
    with pytest.raises(StoreError, match="may or may not have been applied"):
        follower.forget("p", ["anything"])
    dying.join(timeout=30)
    follower.close()


def test_a_store_moved_or_deleted_under_its_owner_refuses_writes_instead_of_losing_them(pair, home, tmp_path):
    """The owner would go on writing into the file it holds, acknowledged, wherever it went (and
    a command run at the old path would make a new store there): it refuses, and says to restart."""
    owner, follower = pair
    owner.remember("p", [turn("written before the move", ref="a")])
    os.rename(home / "memory.duckdb", home / "aside.duckdb")
    for process in (owner, follower):  # the follower gets the owner's refusal across the socket
        with pytest.raises(StoreError, match=r"memory.duckdb was moved or deleted while process \d+ served it; "
                                             "its writes .* refused: restart that process"):
            process.remember("p", [turn("written after the move", ref="b")])
    assert follower.recall("p", "written before the move").items  # reads answer from the file it holds
    os.rename(home / "aside.duckdb", home / "memory.duckdb")  # the same file at the path again: writes go on
    assert follower.remember("p", [turn("written once it was back", ref="c")])[0].outcome == "stored"
    os.rename(home, tmp_path / "moved")  # the whole home, lock and socket with it
    with pytest.raises(StoreError, match="was moved or deleted"):
        owner.forget("p", ["a"])
    shutil.rmtree(tmp_path / "moved")
    with pytest.raises(StoreError, match="was moved or deleted"):
        owner.remember("p", [turn("written after the delete", ref="d")])


def test_a_home_too_long_for_a_socket_path_gets_a_private_socket_directory(tmp_path):
    home = tmp_path / ("h" * 120)
    path = socket_path(home)
    assert len(os.fsencode(path)) < 100 and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    owner, follower = SharedMemory(home).start(), SharedMemory(home).start()
    assert follower.remember("p", [turn("long home")])[0].outcome == "stored"
    follower.close()
    owner.close()


def test_a_damaged_store_file_is_reported_clearly_and_the_process_stays_up(home):
    home.mkdir(parents=True)
    (home / "memory.duckdb").write_bytes(b"this is not a database" * 100)
    shared = SharedMemory(home, wait_s=1).start()  # no exception: a server keeps running
    for _ in range(2):  # every call says what is wrong, and what to do
        with pytest.raises(StoreError, match="not a valid DuckDB database.*Move the damaged file aside"):
            shared.remember("p", [turn("x")])
    shared.close()


def test_an_owner_that_hangs_is_reported_not_waited_on_forever(home, monkeypatch):
    monkeypatch.setattr(owner_module, "ANSWER_WAIT_S", 0.2)
    release = threading.Event()
    stuck = _fake_owner(home, release)
    follower = SharedMemory(home).start()
    with pytest.raises(StoreError, match="did not answer recall"):
        follower.recall("p", "anything")
    release.set()
    stuck.join(timeout=30)
    follower.close()


AWS_KEY = "AKIA4Q7ZL2M9XK3PWT5R"
SECRET = f"The deploy uses key {AWS_KEY} with password=Tr0ub4dor-and-3"


def test_redaction_is_decided_by_the_caller_even_when_the_owner_stores_verbatim(home):
    owner = shared_memory(Settings(home=home, redact=False)).start()  # an `import --no-redact` running
    follower = shared_memory(Settings(home=home)).start()
    try:
        follower.remember("p", [turn(SECRET, ref="follower")])
        owner.remember("p", [turn(SECRET + " (stored as it is)", ref="owner")])
        texts = {it.unit.ref: it.unit.text for it in follower.recall("p", "deploy key password").items}
    finally:
        follower.close()
        owner.close()
    assert AWS_KEY not in texts["follower"] and "Tr0ub4dor" not in texts["follower"]
    assert "[REDACTED:" in texts["follower"] and AWS_KEY in texts["owner"]


def test_the_pool_size_is_the_callers_and_a_ranker_the_owner_cannot_run_is_refused(home, tmp_path):
    shipped = tmp_path / "ranker.json"
    shipped.write_bytes((resources.files("agentmemrec.ranking") / "models" / "lexical-ranker.json").read_bytes())
    owner = shared_memory(Settings(home=home)).start()
    small = shared_memory(Settings(home=home, pool_size=3)).start()
    other_ranker = shared_memory(Settings(home=home, ranker_model=shipped)).start()
    try:
        owner.remember("p", [turn(f"kafka topic number {i} for payments") for i in range(10)])
        slate = small.recall("p", "kafka topic payments")
        assert len(small.explain(slate.slate_id, {"p"})["candidates"]) == 3
        assert len(owner.explain(owner.recall("p", "kafka topic").slate_id, {"p"})["candidates"]) == 10
        with pytest.raises(StoreError, match=r"cannot honour .*--ranker-model .*ranker\.json .*shipped model"):
            other_ranker.recall("p", "kafka topic")
    finally:
        for shared in (other_ranker, small, owner):
            shared.close()


def test_a_device_the_owners_models_do_not_run_on_is_refused(minilm_home, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(minilm_home / "models", home / "models")
    owner = shared_memory(Settings(home=home, device="cpu")).start()
    same, other = (shared_memory(Settings(home=home, device=d)).start() for d in ("cpu:fp32", "cpu:fp16"))
    try:
        owner.remember("p", [turn("kafka carries the payment events")])
        assert same.recall("p", "kafka").items
        with pytest.raises(StoreError, match="--device cpu:fp16 .the owner's models run on cpu:fp32"):
            other.recall("p", "kafka")
    finally:
        for shared in (other, same, owner):
            shared.close()


def test_a_caller_that_leaves_before_its_answer_costs_one_log_line_not_a_traceback(home, caplog, capfd):
    """A hook past its deadline closes its socket; the owner's answer then meets a closed pipe."""
    owner = SharedMemory(home).start()
    try:
        owner.remember("p", [turn(f"Payments retry webhook {i} with backoff.", ref=f"w{i}") for i in range(50)])
        with caplog.at_level("INFO", logger="agentmemrec.owner"):
            for _ in range(3):
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.connect(str(socket_path(home)))
                    sock.sendall(b'{"op": "recall", "args": ["p", "payments webhook backoff", 4000]}\n')
                    sock.shutdown(socket.SHUT_RDWR)
            assert owner.recall("p", "webhook backoff").items  # still serving
            threading.Event().wait(0.5)  # the handler threads finish their writes
    finally:
        owner.close()
    assert "Traceback" not in capfd.readouterr().err
    went = [r.levelname for r in caplog.records if "went away" in r.getMessage()]
    assert went and set(went) == {"INFO"}


@pytest.mark.anyio
async def test_owner_stop_stops_the_process_a_hook_started_and_only_when_one_runs(home, capsys):
    from agentmemrec.server.cli import main
    from agentmemrec.server.owner_socket import owner_pid
    assert main(["owner", "--stop"]) == 0
    assert capsys.readouterr().out == f"no process owns the memory store in {home}\n"
    assert not home.exists()  # asking made nothing
    started = subprocess.Popen([sys.executable, "-m", "agentmemrec.server.cli", "owner", "--idle-exit", "3600"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # as the hook starts it
    try:
        with anyio.fail_after(120):
            while owner_pid(home) != started.pid:
                await anyio.sleep(0.1)
        assert main(["owner", "--stop"]) == 0
        assert capsys.readouterr().out == f"stopped process {started.pid}, which owned the memory store in {home}\n"
        assert started.wait(timeout=60) == 0 and owner_pid(home) is None
    finally:
        started.kill()
        started.wait()


@pytest.mark.anyio
async def test_the_owner_a_hook_starts_leaves_once_the_installed_code_changes(home, tmp_path):
    """Calls keep an owner started with --idle-exit alive for days: after an upgrade it would go on
    running the old code. It leaves once the installed files change; the next call starts one."""
    import agentmemrec.indexing
    import agentmemrec.ranking
    import agentmemrec.server
    from agentmemrec.server.owner_socket import owner_pid
    installed = tmp_path / "site" / "agentmemrec"  # a copy of the package, as an install would hold it
    for part in (agentmemrec.indexing, agentmemrec.ranking, agentmemrec.server):
        folder = Path(part.__file__).parent
        shutil.copytree(folder, installed / folder.name, ignore=shutil.ignore_patterns("__pycache__"))
    log = tmp_path / "owner.log"
    started = subprocess.Popen([sys.executable, "-m", "agentmemrec.server.cli", "owner", "--idle-exit", "20",
                                "--log-file", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "PYTHONPATH": str(tmp_path / "site")})
    try:
        with anyio.fail_after(120):
            while owner_pid(home) != started.pid or "owning the memory store" not in log.read_text():
                await anyio.sleep(0.1)
        os.utime(installed / "ranking" / "slate.py")  # an upgrade writes the files anew
        assert started.wait(timeout=60) == 0 and owner_pid(home) is None
    finally:
        started.kill()
        started.wait()
    said = log.read_text()
    assert "the installed agentmemrec changed" in said and "no call for" not in said
