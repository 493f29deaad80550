"""Where the data lives and how to reach the store's owner, with nothing but the standard library.

A Claude Code hook starts a process on every prompt, so this module (and `hook_process`, which
uses it) imports no model runtime, database or validation library: the owner, which has them
loaded, does the work. `owner.py` serves the socket; this is the small client's side of it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import socket
import struct
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from agentmemrec.indexing.errors import StoreError

HOME_ENV = "AGENTMEMREC_HOME"
STORE_ENV = "AGENTMEMREC_STORE"  # a PostgreSQL URL: the team store instead of the home's DuckDB file


def default_home(env: Mapping[str, str] = os.environ) -> Path:
    """All data lives here: `AGENTMEMREC_HOME`, else the platform's user data dir."""
    if env.get(HOME_ENV):
        return Path(env[HOME_ENV])
    import platformdirs  # noqa: PLC0415 - only when the environment does not say
    return Path(platformdirs.user_data_dir("agentmemrec", appauthor=False))


def socket_path(home: Path) -> Path:
    """`HOME/owner.sock`, or, where that path is too long for AF_UNIX (about 100 bytes), a socket
    named after HOME in a directory only this user may enter."""
    path = home / "owner.sock"
    if len(os.fsencode(path)) < 100:
        return path
    private = Path(tempfile.gettempdir()) / f"agentmemrec-{os.getuid()}"
    private.mkdir(mode=0o700, exist_ok=True)
    info = private.lstat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or not private.is_dir():
        raise StoreError(f"{private} must be a directory that only you can use; remove it")
    return private / (hashlib.sha256(os.fsencode(home)).hexdigest()[:32] + ".sock")


def private_home(home: Path, create: bool = True) -> None:
    """The home exists, is this user's and no one else may write in it (a home another user can
    write could hold a socket or store of theirs). A new home is created 0700; one that others
    may read is made so. With `create=False` (a command that only reads, in a home without a
    store yet) nothing is made or changed, and what making the home would meet is refused alike."""
    try:
        if create:
            home.mkdir(parents=True, exist_ok=True, mode=0o700)
        elif not home.is_dir():
            _could_make(home)
            return
        info = home.stat()
    except OSError as exc:  # a read-only HOME, a folder of another user's on the way
        raise StoreError(f"cannot create the memory store's home {home}: {exc.strerror} ({exc.filename}); "
                         "set AGENTMEMREC_HOME to a folder you may write, or fix that folder's "
                         "permissions") from exc
    if info.st_uid != os.getuid():
        raise StoreError(f"the memory store's home {home} belongs to another user (uid {info.st_uid}); "
                         "use a home of your own (set AGENTMEMREC_HOME)")
    if info.st_mode & 0o022:
        raise StoreError(f"the memory store's home {home} may be written by other users; "
                         f"make it yours alone with: chmod 700 {home}")
    if info.st_mode & 0o077 and create:
        os.chmod(home, 0o700)


def _could_make(home: Path) -> None:
    """Raise the error `home.mkdir(parents=True)` would meet, without making anything."""
    path = [home, *home.parents]
    at = next(i for i, p in enumerate(path) if os.path.lexists(p))
    if not path[at].is_dir():  # the home itself, or a folder on the way, is a file
        code = errno.EEXIST if at == 0 else errno.ENOTDIR
        raise OSError(code, os.strerror(code), str(home))
    if not os.access(path[at], os.W_OK | os.X_OK):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(path[at - 1]))


def take_lock(home: Path) -> int | None:
    """The owner lock's file descriptor, or None while another process holds it."""
    private_home(home)
    unwritable = StoreError(f"the memory store's home {home} is not writable by you (permission denied); "
                            f"make it so with: chmod 700 {home}")
    lock = home / "owner.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        if not lock.exists():  # it could not be made
            raise unwritable from exc
        raise StoreError(f"cannot open the owner lock {lock}: {exc.strerror}; make it yours and writable "
                         f"with: chmod 600 {lock}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None  # a running owner serves the calls: the home need not be writable for them
    if not os.access(home, os.W_OK | os.X_OK):  # the store, its write-ahead log and the socket are made here
        os.close(fd)
        raise unwritable
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())  # who owns it, for people and tests
    return fd


def owner_pid(home: Path) -> int | None:
    """The pid of the process that owns the store in `home` (it holds the lock and wrote its pid
    there), or None when no process does."""
    try:
        fd = os.open(home / "owner.lock", os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None  # free: nobody owns the store (closing the file lets the lock go)
    except BlockingIOError:
        words = os.pread(fd, 32, 0).split()
        return int(words[0]) if words and words[0].isdigit() else None
    finally:
        os.close(fd)


class StoreFile:
    """The store file an owner opened, told apart from another at the same path: moving or deleting
    the home while its owner runs would take every later write with the old file, acknowledged."""

    def __init__(self, path: Path) -> None:
        self.path, self.id = path, self._id(path)

    @classmethod
    def of(cls, store: Any) -> "StoreFile | None":
        return cls(store.path) if isinstance(getattr(store, "path", None), Path) else None

    @staticmethod
    def _id(path: Path) -> tuple[int, int] | None:
        try:
            found = os.stat(path)
        except OSError:
            return None
        return found.st_dev, found.st_ino

    def guard(self, write: Callable[..., Any], *args: Any) -> Any:
        """`write(*args)`, if the file at the path is the one opened, before and after it."""
        self.check()
        done = write(*args)
        self.check()
        return done

    def check(self) -> None:
        if self._id(self.path) != self.id:
            raise StoreError(f"the memory store {self.path} was moved or deleted while process {os.getpid()} "
                             "served it; its writes would not reach the store at that path, so they are "
                             "refused: restart that process")


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (Linux); elsewhere the socket's
    mode 0600 is the guard, and the peer is taken to be this user."""
    if not hasattr(socket, "SO_PEERCRED"):
        return os.getuid()
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def same_user(conn: socket.socket) -> bool:
    """Whether the process at the other end of a Unix socket runs as this user."""
    return peer_uid(conn) == os.getuid()


class NoOwner(Exception):
    """Nobody answers on the socket: no owner runs (or it is leaving)."""


def ask(home: Path, op: str, args: list[Any], timeout: float) -> Any:
    """One request to the owner and its plain-JSON result, within `timeout` seconds in all.
    Raises NoOwner when nobody answers, TimeoutError when it answers too slowly, and
    RuntimeError with the owner's message when the request failed there."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(socket_path(home)))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise NoOwner(str(exc)) from exc
        if not same_user(sock):  # never hand a prompt to another user's process
            raise NoOwner("the process on the socket runs as another user")
        sock.sendall(json.dumps({"op": op, "args": args}).encode() + b"\n")
        with sock.makefile("rb") as stream:
            line = stream.readline()
    if not line.endswith(b"\n"):
        raise NoOwner("the owner closed the connection without answering")
    reply = json.loads(line)
    if reply.get("moved"):
        raise NoOwner("the owner is leaving")
    if "error" in reply:
        raise RuntimeError(reply["message"])
    return reply["ok"]
