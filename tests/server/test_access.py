"""Who may read and reach the store: modes whatever the umask, a home that is the user's alone,
and a socket peer checked before anything is sent."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentmemrec.indexing.errors import StoreError
from agentmemrec.server.owner import SharedMemory, socket_path

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs a second user: runs as root")


def cli(home: Path, *args: str, umask: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentmemrec.server.cli", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "AGENTMEMREC_HOME": str(home)},
                          preexec_fn=lambda: os.umask(umask))


def test_the_home_and_everything_in_it_are_the_users_alone_under_any_umask(tmp_path):
    home, items = tmp_path / "home", tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps({"kind": "turn", "text": f"kafka carries event {i}"})
                               for i in range(6000)))  # enough for the BM25 index to be saved
    assert cli(home, "import", str(items), "--project", "p").returncode == 0
    assert cli(home, "recall", "kafka event", "--project", "p").returncode == 0
    modes = {str(p.relative_to(home)): stat.S_IMODE(p.stat().st_mode) for p in [home, *home.rglob("*")]}
    assert modes["."] == 0o700 and modes["memory.duckdb"] == 0o600 and any(k.startswith("index/") for k in modes)
    assert {k: oct(m) for k, m in modes.items() if m & 0o077} == {}


def test_a_home_others_may_write_is_refused_with_what_to_do(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    os.chmod(home, 0o777)
    done = cli(home, "recall", "kafka", "--project", "p")
    assert done.returncode != 0 and f"chmod 700 {home}" in done.stderr
    assert not (home / "memory.duckdb").exists()


NOT_ROOT = pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere: needs an unprivileged user")


def said_once(done: subprocess.CompletedProcess[str], what: str) -> None:
    """Exit 1, and one line on stderr saying what is wrong: no traceback."""
    err = [line for line in done.stderr.splitlines() if line.startswith("agentmemrec")]
    assert done.returncode == 1 and "Traceback" not in done.stderr and len(err) == 1 and what in err[0], done.stderr


def test_a_home_that_cannot_be_made_is_said_in_one_line(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    said_once(cli(tmp_path / "file" / "home", "recall", "kafka", "--project", "p"),
              f"cannot create the memory store's home {tmp_path / 'file' / 'home'}: Not a directory")


@NOT_ROOT
def test_a_read_only_home_is_said_in_one_line_with_what_to_do(tmp_path):
    (tmp_path / "ro").mkdir(mode=0o555)
    said_once(cli(tmp_path / "ro" / "home", "recall", "kafka", "--project", "p"),
              f"cannot create the memory store's home {tmp_path / 'ro' / 'home'}: Permission denied")
    home, items = tmp_path / "home", tmp_path / "items.jsonl"
    items.write_text(json.dumps({"kind": "turn", "text": "kafka carries the events"}) + "\n")
    assert cli(home, "import", str(items), "--project", "p").returncode == 0
    os.chmod(home, 0o500)
    try:
        said_once(cli(home, "recall", "kafka", "--project", "p"),
                  f"the memory store's home {home} is not writable by you (permission denied); make it so with: "
                  f"chmod 700 {home}")
    finally:
        os.chmod(home, 0o700)
    os.chmod(home / "memory.duckdb", 0o400)  # not damaged: following "move it aside" would lose it
    said_once(cli(home, "recall", "kafka", "--project", "p"),
              "permission denied (the file is not damaged); make it readable and writable by you: chmod 600")
    os.chmod(home / "memory.duckdb", 0o600)
    assert "kafka carries the events" in cli(home, "recall", "kafka", "--project", "p").stdout


@ROOT_ONLY
def test_a_home_of_another_user_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    os.chown(home, 65534, 65534)
    with pytest.raises(StoreError, match="belongs to another user"):
        SharedMemory(home).call("projects")


@ROOT_ONLY
def test_a_follower_sends_nothing_to_a_socket_another_user_serves(home):
    home.mkdir(mode=0o700, parents=True)
    server = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, socket, sys
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind({str(socket_path(home))!r})
        os.setuid(65534)  # the peer's credentials are the listener's at listen()
        sock.listen()
        print("ready", flush=True)
        conn, _ = sock.accept()
        conn.settimeout(5)
        try:
            data = conn.recv(100)
        except OSError:
            data = b""
        print(repr(data), flush=True)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError, match="served by another user .uid 65534.; nothing was sent"):
            SharedMemory(home).call("projects")
        assert server.stdout.readline().strip() == "b''"  # the connection closed with nothing sent
    finally:
        server.kill()
