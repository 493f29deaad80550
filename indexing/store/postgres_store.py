"""The PostgreSQL store: one database that any number of stateless processes share (a team).

The tables and SQL are `sql_store`'s; what differs from DuckDB is who else writes:
- writes to a project are serialised across processes by a transaction-level advisory lock on
  the project, so the batch planning of `writes` (read what exists, then insert) stays correct;
- every change NOTIFYs the other processes (delivered at commit), whose listener forgets the
  cached generation, so their derived indexes catch up at the next request; while a process's
  listener is not connected, it reads generations afresh instead of caching them;
- a read that must be one snapshot runs in a REPEATABLE READ transaction;
- vectors are pgvector `halfvec` rows (`pg_vectors`), and one process embeds at a time.
Database errors become `StoreError`s that say the database is the problem; nothing is retried
here: a write either committed whole or not at all, and the caller may repeat it (idempotent).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import uuid
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Iterator, Sequence
from urllib.parse import quote

import psycopg
import psycopg.sql
from psycopg_pool import ConnectionPool, PoolTimeout

from agentmemrec.indexing.errors import StoreError, StoreUnavailable
from agentmemrec.indexing.store.generations import Generations
from agentmemrec.indexing.store.migrations import check_known
from agentmemrec.indexing.store.pg_migrations import MIGRATIONS
from agentmemrec.indexing.store.pg_vectors import PgVectors
from agentmemrec.indexing.store.protocol import WriteResult
from agentmemrec.indexing.store.sql_store import Cursor, SqlStore
from agentmemrec.indexing.store.writes import Prepared, now

log = logging.getLogger(__name__)

POOL_SIZE = 8  # connections per process: requests run in worker threads, one statement at a time
CONNECT_WAIT_S = 3.0  # a call waits this long for a connection before it reports the database down
DOWN_WAIT_S = 0.2  # ...and once one call found it down, until a call gets through again
RECONNECT_S = 0.5  # the listener's pause between attempts while the database is away


def described(url: str) -> str:
    """host:port/dbname of a URL, for messages (never its password)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "the PostgreSQL URL given"
    return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


def store_bytes(url: str) -> int | None:
    """What the tables of the store at `url` take (its schema's, indexes and TOAST included), or
    None if the database cannot be asked."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=int(CONNECT_WAIT_S)) as conn:
            row = conn.execute("SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
                               "ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
                               "AND c.relkind IN ('r', 'p', 'm')").fetchone()
    except psycopg.Error as exc:
        log.debug("the size of the store at %s cannot be read: %s", described(url), exc)
        return None
    return int(row[0]) if row and row[0] is not None else 0


def fresh_schema(url: str, name: str | None = None) -> str:
    """A new, empty schema in the database at `url`, and a URL whose connections work in it (a
    throwaway store: evaluation's, the tests')."""
    name = name or f"amr_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=int(CONNECT_WAIT_S)) as conn:
            conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(name)))
    except psycopg.Error as exc:
        raise StoreError(f"cannot make a schema in the PostgreSQL database at {described(url)}: {exc}") from exc
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-c search_path={name},public')}"


@lru_cache(maxsize=256)
def _placeholders(sql: str) -> str:
    """The shared SQL's `?` placeholders as psycopg's `%s` (a literal `%` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PgCursor:
    """A psycopg cursor that reads the shared SQL."""

    def __init__(self, cursor: psycopg.Cursor) -> None:
        self.cursor = cursor

    def execute(self, sql: str, params: Sequence[Any] = ()) -> "PgCursor":
        self.cursor.execute(_placeholders(sql), params)
        return self

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.cursor.fetchall()

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.cursor.fetchone()


class HeardGenerations(Generations):
    """Generations cached only while this process hears every change (its listener is connected)."""

    def __init__(self) -> None:
        super().__init__()
        self.listening = False

    def get(self, key: tuple[str, ...], load: Any) -> int:
        return super().get(key, load) if self.listening else load()


class PostgresStore(SqlStore):
    """A PostgreSQL database with pgvector, shared by every process that opens it."""

    def __init__(self, url: str, pool_size: int = POOL_SIZE) -> None:
        self.url, self.where = url, described(url)
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=int(CONNECT_WAIT_S)) as conn:
                self.schema = conn.execute("SELECT current_schema()").fetchone()[0]
                if self.schema is None:
                    raise StoreError(f"the search_path of {self.where} names no existing schema; "
                                     "create it or fix the URL's options")
                self._check_vector_type(conn)
                self._migrate(conn)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the PostgreSQL store at {self.where}: {exc}") from exc
        self.channel = f"agentmemrec_{hashlib.sha256(self.schema.encode()).hexdigest()[:16]}"
        self.generations = HeardGenerations()
        self._reachable = True
        self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, timeout=CONNECT_WAIT_S,
                                    kwargs={"autocommit": True, "prepare_threshold": None},
                                    check=ConnectionPool.check_connection, open=False,
                                    name="agentmemrec")
        self._pool.open()
        super().__init__()
        self._listener = Listener(self)
        self._listener.start()

    def close(self) -> None:
        if not self._pool.closed:
            self._listener.stop()
            self._pool.close()

    def drop(self) -> None:
        """Close, and drop this store's schema with everything in it (a throwaway store)."""
        self.close()
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("DROP SCHEMA {} CASCADE").format(psycopg.sql.Identifier(self.schema)))

    @property
    def schema_version(self) -> int:
        return len(MIGRATIONS)

    @property
    def index_dir(self) -> None:
        return None  # shared by many processes: derived indexes stay in each one's memory

    def lock_key(self, *names: str) -> int:
        """A 64-bit advisory lock key for a name in this schema."""
        digest = hashlib.blake2b("\x1f".join((self.schema, *names)).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    def _check_vector_type(self, conn: psycopg.Connection) -> None:
        """pgvector's `halfvec` must be on the URL's search_path; an extension installed in another
        schema (an administrator's, in `public`) is not, unless the URL names that schema too."""
        row = conn.execute("SELECT n.nspname, e.extversion, to_regtype('halfvec'), "
                           "to_regtype(quote_ident(n.nspname) || '.halfvec') FROM pg_extension e JOIN "
                           "pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'").fetchone()
        if row is None or row[2] is not None:  # none yet (the first migration creates it), or found
            return
        if row[3] is None:
            raise StoreError(f"pgvector {row[1]} at {self.where} has no halfvec type: 0.7 or later is needed "
                             "(an administrator runs ALTER EXTENSION vector UPDATE)")
        fixed = quote(f"-c search_path={self.schema},{row[0]}")
        raise StoreError(f"pgvector's halfvec type at {self.where} is in schema {row[0]}, which the URL's "
                         f"search_path leaves out: add it, as in ?options={fixed}")

    def _migrate(self, conn: psycopg.Connection) -> None:
        """Numbered migrations, each once, one process at a time (the others wait, then see them)."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [self.lock_key("migrations")])
            conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                         "(version INTEGER PRIMARY KEY, applied_at TIMESTAMP NOT NULL)")
            done = {v for (v,) in conn.execute("SELECT version FROM schema_migrations").fetchall()}
            check_known(done, len(MIGRATIONS), f"at {self.where} (schema {self.schema})")
            for version, sql in enumerate(MIGRATIONS, start=1):
                if version not in done:
                    conn.execute(sql)
                    conn.execute("INSERT INTO schema_migrations VALUES (%s, %s)", [version, now()])

    # ---- connections --------------------------------------------------------------------------

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled connection; a database that cannot be reached or fails is a `StoreError`.
        Once a call found the database down, the next ones wait briefly: each request of an
        outage gets its error at once, not after seconds (the pool reconnects meanwhile)."""
        try:
            with self._pool.connection(timeout=CONNECT_WAIT_S if self._reachable else DOWN_WAIT_S) as conn:
                self._reachable = True
                yield conn
        except PoolTimeout as exc:
            self._reachable = False
            raise StoreUnavailable(f"the PostgreSQL store at {self.where} cannot be reached (no connection); "
                                   "nothing was written; retry once it is back") from exc
        except psycopg.Error as exc:  # an OperationalError: the connection went (a restart)
            kind = StoreUnavailable if isinstance(exc, psycopg.OperationalError) else StoreError
            raise kind(f"the PostgreSQL store at {self.where} failed: {exc}; a write in flight "
                       "was applied whole or not at all, so repeating it is safe") from exc

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.connection() as conn:
            return PgCursor(conn.cursor()).execute(sql, params).fetchall()

    @contextmanager
    def transaction(self, project: str | None = None) -> Iterator[Cursor]:
        """A write transaction; one naming a project holds its lock, so writes to a project are
        serialised across every process (others wait for the lock, never fail on it)."""
        try:
            with self.connection() as conn, conn.transaction():
                cur = PgCursor(conn.cursor())
                if project is not None:
                    cur.execute("SELECT pg_advisory_xact_lock(?)", [self.lock_key("project", project)])
                yield cur
        finally:
            if project is not None:
                self.generations.forget(("units", project))

    @contextmanager
    def reading(self) -> Iterator[Cursor]:
        with self.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield PgCursor(conn.cursor())

    def refresh(self, project: str) -> None:
        """A write another process acknowledged may still have its NOTIFY on the way to the
        listener: the project's generations are read (one small query) and a cached one that
        moved is forgotten, so this recall catches up with every write committed before it."""
        if not self.generations.listening:
            return  # nothing is cached: every generation is read afresh
        for model, generation in self.fetch(
                "SELECT NULL, generation FROM projects WHERE project = ? UNION ALL "
                "SELECT model, generation FROM vector_state WHERE project = ?", [project, project]):
            key = ("units", project) if model is None else ("vectors", project, model)
            self.generations.settle(key, int(generation))

    def _moved(self, cur: Cursor, key: tuple[str, ...]) -> None:
        cur.execute("SELECT pg_notify(?, ?)", [self.channel, json.dumps(key)])

    def id_filter(self, column: str, ids: list[int]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?::BIGINT[])", [list(ids)]

    def vectors(self, model: str) -> PgVectors:
        return PgVectors(self, model)

    def _write_prepared(self, project: str, prepared: list[Prepared]) -> list[WriteResult]:
        return self._write_once(project, prepared, fast=False)  # an upsert uses the unique index


class Listener:
    """Hears the store's NOTIFYs on a connection of its own and forgets what they name."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._stop = threading.Event()
        self._token = uuid.uuid4().hex  # the payload that stops this listener and no other
        self._thread = threading.Thread(target=self._run, name="agentmemrec-listen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        try:
            self.store.fetch("SELECT pg_notify(?, ?)", [self.store.channel, json.dumps(["stop", self._token])])
        except StoreError:  # the database is away: the listener is between attempts and sees the flag
            pass
        self._thread.join(timeout=5)

    def _run(self) -> None:
        generations = self.store.generations
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.store.url, autocommit=True, connect_timeout=int(CONNECT_WAIT_S)) as conn:
                    conn.execute(f'LISTEN "{self.store.channel}"')
                    generations.clear()  # whatever moved while nobody listened is read afresh
                    generations.listening = True
                    for note in conn.notifies():
                        key = tuple(json.loads(note.payload))
                        if key == ("stop", self._token):
                            return
                        generations.forget(key)
            except psycopg.Error as exc:
                if generations.listening:
                    log.warning("lost the PostgreSQL change listener (%s); reading generations afresh "
                                "until it is back", exc)
            finally:
                generations.listening = False
                generations.clear()
            self._stop.wait(RECONNECT_S)
