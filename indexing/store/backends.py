"""Choosing a backend: DuckDB in the home by default, PostgreSQL when a URL names one."""

from __future__ import annotations

import re
from importlib.util import find_spec
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.store.protocol import Store

SCHEMES = ("postgresql", "postgres")


STORE_SETTING = "--store / AGENTMEMREC_STORE"
TEAM_EXTRA = "pip install 'agentmemrec[team]'"
TEAM_MODULES = ("psycopg", "psycopg_pool")  # what the team extra installs


def check_store_url(url: str, name: str = STORE_SETTING) -> str:
    """A PostgreSQL URL (postgresql://user@host:port/db), or a clear refusal naming the setting
    it came from (`name`: a command's flag such as --to)."""
    if not isinstance(url, str) or urlsplit(url).scheme not in SCHEMES:
        unset = "; leave it unset for the embedded DuckDB store in the home" if name == STORE_SETTING else ""
        raise InputError(f"{name} must be a PostgreSQL URL such as "
                         f"postgresql://user:password@host:5432/agentmemrec, not {_masked(url)!r}{unset}")
    missing = [module for module in TEAM_MODULES if find_spec(module) is None]
    if missing:
        raise InputError(f"{name} names a PostgreSQL store, which needs the team extra ({', '.join(missing)} "
                         f"not installed): {TEAM_EXTRA}")
    return url


def postgres_backend() -> ModuleType:
    """The PostgreSQL store's module, imported only when a URL names it: it needs the team extra."""
    try:
        from agentmemrec.indexing.store import postgres_store  # noqa: PLC0415
    except ImportError as exc:  # psycopg absent, or present without a libpq it can load
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"the PostgreSQL store needs the team extra ({cause}): {TEAM_EXTRA}") from None
    return postgres_store


def _masked(setting: object) -> str:
    """A store setting as a message may repeat it: a URL's password, and one given libpq's
    `key=value` way (`host=db password=SECRET`, quoted or not), become ***."""
    text = re.sub(r"//([^:/@\s]*):[^@/\s]*@", r"//\1:***@", str(setting))
    return re.sub(r"(?i)\b(password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|\S+)", r"\1***", text)


def database_file(home: Path) -> Path:
    """A home's DuckDB store file (it exists once something has been written)."""
    return Path(home) / "memory.duckdb"


def open_store(home: Path, url: str | None = None) -> Store:
    """The store for a home: its DuckDB file, or the PostgreSQL database `url` names."""
    if url is None:
        from agentmemrec.indexing.store.duckdb_store import DuckDBStore  # noqa: PLC0415
        return DuckDBStore(database_file(home))
    return postgres_backend().PostgresStore(check_store_url(url))


def describe_store(home: Path, url: str | None = None) -> tuple[str, int | None]:
    """Where the store for a home is, for people (a URL without its password), and its size in
    bytes where it can be read cheaply (None: unknown)."""
    if url is None:
        database = database_file(home)
        return str(database), database.stat().st_size if database.exists() else 0
    backend = postgres_backend()
    return f"postgresql://{backend.described(check_store_url(url))}", backend.store_bytes(url)
