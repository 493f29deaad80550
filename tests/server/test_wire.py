"""The owner's socket under hostile input from the same user: malformed, partial, oversized and
wrongly typed lines, and more connections than it serves. No crash, no hang, typed errors."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentmemrec.server import owner as owner_module
from agentmemrec.server.owner import SharedMemory, socket_path

from helpers import turn

FUZZ = settings(max_examples=int(os.environ.get("AGENTMEMREC_FUZZ_EXAMPLES", "120")), deadline=None,
                derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
OPS = ["remember", "ingest", "recall", "explain", "forget", "projects", "sources", "rename_ref",
       "tokens.add", "tokens.list", "tokens.revoke", "tokens.principal"]
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
REQUESTS = st.fixed_dictionaries({"op": st.sampled_from(OPS) | st.text(max_size=12) | JSON,
                                  "args": st.lists(JSON, max_size=5) | JSON},
                                 optional={"caller": JSON | st.fixed_dictionaries({"device": JSON})})


def lines() -> st.SearchStrategy[bytes]:
    as_json = REQUESTS.map(lambda r: json.dumps(r).encode() + b"\n")
    raw = st.binary(max_size=300).map(lambda b: b + b"\n")
    cut = st.tuples(as_json, st.integers(0, 200)).map(lambda t: t[0][: t[1]])  # a partial line, then EOF
    return as_json | raw | cut | st.sampled_from([b"\n", b"[]\n", b'"op"\n', b"{}\n", b"[" * 5000 + b"\n"])


def exchange(home: Path, line: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)  # an owner that hangs fails the test instead of stalling it
        sock.connect(str(socket_path(home)))
        sock.sendall(line)
        sock.shutdown(socket.SHUT_WR)
        return b"".join(iter(lambda: sock.recv(65536), b""))


@pytest.fixture
def pair(home: Path):
    owner, follower = SharedMemory(home).start(), SharedMemory(home).start()
    owner.remember("p", [turn("payments move to kafka in may", ref="k")])
    yield owner, follower
    follower.close()
    owner.close()


@FUZZ
@given(line=lines())
def test_any_line_gets_a_typed_reply_or_none_and_the_owner_keeps_answering(pair, home, line):
    _, follower = pair
    reply = exchange(home, line)
    if reply:
        assert reply.endswith(b"\n") and reply.count(b"\n") == 1
        answer = json.loads(reply)
        assert set(answer) <= {"ok", "error", "message"} and ("ok" in answer or answer["error"] in
                                                               ("input", "store", "internal"))
    assert "p" in follower.projects()  # answered, and by the same owner


def test_an_oversized_line_is_refused_unread(pair, home, monkeypatch):
    monkeypatch.setattr(owner_module, "MAX_LINE", 4096)
    _, follower = pair
    reply = json.loads(exchange(home, b'{"op": "projects", "args": ["' + b"x" * 20_000 + b'"]}\n'))
    assert reply["error"] == "input" and "over 4096 bytes" in reply["message"]
    assert follower.projects() == {"p": 1}


def test_connections_beyond_the_limit_wait_for_a_thread(home, monkeypatch):
    monkeypatch.setattr(owner_module, "MAX_CONNECTIONS", 2)
    entered, at_once, lock, more = [0], [0], threading.Lock(), threading.Event()
    handle = owner_module._Handler.handle

    def counted(self) -> None:  # noqa: ANN001 - how many connections are being served at once
        with lock:
            entered[0] += 1
            at_once[0] = max(at_once[0], entered[0])
            if entered[0] > 2:
                more.set()
        try:
            handle(self)
        finally:
            with lock:
                entered[0] -= 1
    monkeypatch.setattr(owner_module._Handler, "handle", counted)
    owner, follower = SharedMemory(home).start(), SharedMemory(home).start()
    idle = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(6)]
    try:
        for sock in idle:
            sock.connect(str(socket_path(home)))  # connected, and never sending
        # a third handler would start at once; none may before an idle connection ends
        assert not more.wait(1.0) and at_once[0] == 2
        for sock in idle:
            sock.close()
        assert follower.projects() == {}  # served once a thread was free
        assert at_once[0] == 2
    finally:
        follower.close()
        owner.close()


@pytest.mark.parametrize("line, fragment", [
    (b'{"op": "no-such-op-' + b"x" * 100_000 + b'", "args": []}\n', "unknown operation 'no-such-op-xxx"),
    (b'{"op": ["projects"], "args": []}\n', "unknown operation ['projects']"),
    (b'{"op": "projects", "args": {"a": 1}}\n', "'args' is a JSON array, not dict"),
    (b'{"op": "projects", "args": [], "caller": {"' + b"k" * 100_000 + b'": 1}}\n', "'caller' is an object"),
    (b'{"op": "projects", "args": ["p", "q", "r"]}\n', "projects takes other arguments"),
    (b'{"op": "recall", "args": ["p"]}\n', "recall takes other arguments"),
    (b"\xff\xfe not json\n", "a request is one JSON object a line"),
    (b"[" * 5000 + b"\n", "a request is one JSON object a line"),
    (b'"op"\n', "a request is a JSON object, not str"),
])
def test_a_request_no_owner_could_run_is_an_input_error_in_a_few_words_and_no_traceback(pair, home, caplog,
                                                                                          line, fragment):
    _, follower = pair
    with caplog.at_level("INFO"):
        reply = json.loads(exchange(home, line))
    assert reply["error"] == "input" and fragment in reply["message"], reply
    assert len(reply["message"]) < 400  # the op (or key) is named cut short, never echoed whole
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING") or r.exc_info]
    assert follower.projects() == {"p": 1}  # nothing written, still answering
