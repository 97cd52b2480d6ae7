"""Engines and transactions shared by the SQL backends (sans business logic).

`Database` turns a URL (or a ready engine) into a sync `Engine` and, when possible, an `AsyncEngine` over the
same database, runs one unit of `Work` per transaction through either of them, retries transient lock
conflicts, and maps connection failures to `BackendUnavailableError` naming the URL without its password.

SQLite engines built here run in WAL mode with a 30 s busy timeout and ``synchronous=NORMAL``: a commit is
atomic and survives a crash of the process, but the last commits before a power loss may be rolled back (they
become durable at the next WAL checkpoint). Transactions are begun explicitly, ``BEGIN IMMEDIATE`` for writes
(SQLAlchemy's documented pysqlite/aiosqlite recipe), so writers queue on the busy timeout instead of failing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, create_engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util import greenlet_spawn

from memwoven.errors import BackendUnavailableError, InvalidInputError, MemwovenError
from memwoven.urls import redact_url

__all__ = ["Database", "Work"]

logger = logging.getLogger("memwoven.sql")

R = TypeVar("R")
T = TypeVar("T")

# backend name -> (sync driver, async driver); the URL's own driver, if any, must be one of the pair.
_DRIVERS = {
    "sqlite": ("pysqlite", "aiosqlite"),
    "postgresql": ("psycopg", "psycopg_async"),
    "mysql": ("pymysql", "aiomysql"),
    "mariadb": ("pymysql", "aiomysql"),
}
_ALIASES = {"postgres": "postgresql"}
SUPPORTED_DIALECTS = frozenset(_DRIVERS)

_WRITE = "memwoven_write"  # execution option: this transaction writes (SQLite begins it IMMEDIATE)
SQLITE_BUSY_TIMEOUT_MS = 30_000
_ATTEMPTS = 8  # tries of one transaction when the database reports a deadlock or serialization failure
_DDL_ATTEMPTS = 3  # tries of schema creation (several processes may race to create the same tables)
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # PostgreSQL: serialization failure, deadlock detected
_MARIADB_CHECK_FAILED = 4025  # ER_CONSTRAINT_FAILED
_RETRYABLE_MYSQL_CODES = frozenset({1213, 1020})  # deadlock; MariaDB "record has changed since last read"


@dataclass(frozen=True)
class Work(Generic[R, T]):
    """One transaction's worth of work: `run(connection)` inside it, then `done(result)` once it committed.

    The same `run` serves the sync API (on a sync connection) and the async API (through SQLAlchemy's greenlet
    bridge, `AsyncConnection.run_sync`), so every operation's body exists once. `done` sees only committed
    results, which is where caches are updated.
    """

    run: Callable[[Connection], R]
    done: Callable[[R], T]
    write: bool = False
    ddl: bool = False


def _backend_url(url: URL, where: str) -> tuple[str, URL, URL]:
    """Return (backend, sync URL, async URL) with the drivers memwoven uses."""
    backend = _ALIASES.get(url.get_backend_name(), url.get_backend_name())
    if backend not in _DRIVERS:
        raise InvalidInputError(f"unsupported database in {where}; use sqlite, postgresql, mysql or mariadb")
    sync_driver, async_driver = _DRIVERS[backend]
    driver = url.get_driver_name() if "+" in url.drivername else None
    if driver is not None and driver not in (sync_driver, async_driver):
        raise InvalidInputError(
            f"memwoven talks to {backend} through {sync_driver} and {async_driver}, not {driver!r} ({where}); "
            f"drop the '+{driver}' part of the URL or pass your own Engine"
        )
    if backend == "sqlite" and url.database is not None and "\x00" in url.database:
        raise InvalidInputError(f"an SQLite file name cannot contain NUL characters ({where})")
    if backend == "sqlite" and url.host:  # sqlite://x.db: SQLAlchemy reads a host, and no host reaches SQLite
        path = f"the path {url.database!r}" if url.database else "no file path"
        raise InvalidInputError(
            f"the URL {where!r} was read as host {url.host!r} with {path}; SQLite takes no host: write "
            f"sqlite:///{'/'.join(filter(None, (url.host, url.database)))} (a relative path) or "
            "sqlite:////abs/path.db (an absolute one)"
        )
    if backend == "sqlite" and (url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"):
        raise InvalidInputError(
            "an in-memory SQLite database lives inside one connection; use a file (sqlite:///memwoven.db) "
            "or memory:// (InMemoryChatMemory / InMemoryVectorMemory)"
        )
    if backend in ("mysql", "mariadb") and "charset" in url.query:
        _check_mysql_charset(url.query["charset"], where)
    return (
        backend,
        url.set(drivername=f"{backend}+{sync_driver}"),
        url.set(drivername=f"{backend}+{async_driver}"),
    )


def _check_mysql_charset(charset: str | tuple[str, ...], where: str) -> None:
    """Refuse a charset the driver does not know (pymysql would fail with an AttributeError on connect)."""
    try:
        from pymysql.charset import charset_by_name  # type: ignore[import-untyped]
    except ImportError:  # no driver: building the engine says so
        return
    if not isinstance(charset, str) or charset_by_name(charset) is None:
        raise InvalidInputError(f"unknown MySQL/MariaDB charset {charset!r} ({where})")


def _configure_sqlite(engine: Engine) -> None:
    """Install the pragmas and the explicit-BEGIN recipe on an engine memwoven built (sync or async driver)."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver's own transaction handling off: we emit BEGIN
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        writes = connection.get_execution_options().get(_WRITE, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")


def _engine_options(backend: str, pool_size: int, pool_timeout: float) -> dict[str, Any]:
    # A server can drop pooled connections (restart, pg_terminate_backend): ping each one on checkout. An SQLite
    # connection is a file handle that nothing outside this process closes, so the ping would only cost a statement.
    pre_ping = backend != "sqlite"
    options: dict[str, Any] = {"pool_size": pool_size, "pool_timeout": pool_timeout, "pool_pre_ping": pre_ping}
    if backend in ("mysql", "mariadb"):
        # Statement-level consistency is all memwoven needs (every read it makes is one consistent statement,
        # every write locks first); READ COMMITTED avoids InnoDB gap locks and their deadlocks.
        options["isolation_level"] = "READ COMMITTED"
    return options


def _error_text(error: BaseException) -> str:
    orig = getattr(error, "orig", None)
    cause = orig if isinstance(orig, BaseException) else error
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0] if text else ''}".rstrip(": ")


def _is_transient(error: DBAPIError) -> bool:
    """A deadlock or serialization failure: the whole transaction can simply run again."""
    orig = error.orig
    if getattr(orig, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return True
    args: tuple[Any, ...] = getattr(orig, "args", ())
    return bool(args) and isinstance(args[0], int) and args[0] in _RETRYABLE_MYSQL_CODES


def _json_refused(error: BaseException) -> bool:
    """MariaDB refused a value for a JSON column (its CHECK (JSON_VALID(...)) failed: nesting deeper than 32).

    Every value memwoven writes there is valid JSON, so this is the only way the check fails; the transaction
    rolled back, so nothing was written.
    """
    args: tuple[Any, ...] = getattr(getattr(error, "orig", None), "args", ())
    return bool(args) and args[0] == _MARIADB_CHECK_FAILED


def _retry_delay(attempt: int) -> float:
    return float(random.uniform(0, 0.01 * 2**attempt))


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _PinnedReader:
    """One connection kept checked out for reads on a server database (PostgreSQL, in autocommit).

    A read through the pool pays a checkout and its pre-ping round trip; a vector search asks for changes before
    every scan, so that is a second round trip on every search. A read tries this connection first (one caller at
    a time; others take the pool). If it fails in any way the driver reports, the connection is discarded and the
    read runs again through the pool, which pings and reconnects: a read is safe to repeat, and a dropped
    connection (server restart, pg_terminate_backend) costs nothing more than before.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._connection: Connection | None = None
        self._pid = os.getpid()

    def try_run(self, work: Work[R, Any]) -> tuple[R] | None:
        """`(result,)` if `work` ran on the pinned connection; None if the caller must use the pool."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._pid != os.getpid():  # a forked child must not share the parent's socket: forget it
                self._connection, self._pid = None, os.getpid()
            try:
                if self._connection is None:
                    self._connection = self._engine.connect()
                result = work.run(self._connection)
                self._connection.commit()  # autocommit: ends SQLAlchemy's transaction, no round trip
            except (DBAPIError, PoolTimeoutError) as error:
                logger.info("dropped the kept read connection (%s); reading through the pool", _error_text(error))
                self._discard()
                return None
            return (result,)
        finally:
            self._lock.release()

    def _discard(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with suppress(Exception):
                connection.invalidate()
                connection.close()

    def close(self) -> None:
        """Return the connection to its pool (before the pool is disposed)."""
        with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None and self._pid == os.getpid():
                with suppress(Exception):
                    connection.close()


class Database:
    """A sync engine, an optional async engine over the same database, and how to run `Work` on them."""

    def __init__(
        self,
        url_or_engine: str | URL | Engine | AsyncEngine,
        *,
        async_engine: AsyncEngine | None = None,
        pool_size: int = 5,
        pool_timeout: float = 30.0,
    ) -> None:
        self._owned: list[Engine | AsyncEngine] = []
        self._built_async: AsyncEngine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # where the async engine's connections live
        self._sqlite_file: Path | None = None
        where: str | None = None
        if isinstance(url_or_engine, Engine):
            engine: Engine = url_or_engine
        elif isinstance(url_or_engine, AsyncEngine):
            async_engine = async_engine or url_or_engine
            # A sync call cannot drive an async driver outside the event loop (SQLAlchemy raises MissingGreenlet
            # on `async_engine.sync_engine`), so the sync API gets its own engine over the same URL.
            engine = self._build(url_or_engine.url, pool_size, pool_timeout, with_async=False)
        elif isinstance(url_or_engine, (str, URL)):
            try:
                url = make_url(url_or_engine)
            except (ArgumentError, ValueError) as error:
                raise InvalidInputError(f"malformed database URL: {error}") from None
            where = redact_url(url)
            engine = self._build(url, pool_size, pool_timeout, with_async=async_engine is None)
            async_engine = async_engine or self._built_async
        else:
            raise InvalidInputError(
                f"expected a database URL, an Engine or an AsyncEngine, got {type(url_or_engine).__name__}"
            )
        self.engine = engine
        self.async_engine = async_engine
        self.dialect = engine.dialect.name
        self.where = where or redact_url(engine.url)
        if self.dialect not in SUPPORTED_DIALECTS:
            raise InvalidInputError(f"unsupported database {self.dialect!r} ({self.where})")
        # Reads are single statements (each a consistent snapshot), so on PostgreSQL they run in autocommit and
        # skip the BEGIN and COMMIT round trips; psycopg switches autocommit on the client, at no cost.
        reads: dict[str, Any] = {"isolation_level": "AUTOCOMMIT"} if self.dialect == "postgresql" else {}
        self._engines = {False: engine.execution_options(**reads), True: engine.execution_options(**{_WRITE: True})}
        self._reader = _PinnedReader(self._engines[False]) if self.dialect == "postgresql" else None
        self._async_engines = (
            {
                False: async_engine.execution_options(**reads),
                True: async_engine.execution_options(**{_WRITE: True}),
            }
            if async_engine is not None
            else None
        )

    def _build(self, url: URL, pool_size: int, pool_timeout: float, *, with_async: bool) -> Engine:
        """Create the engines for `url` (kept in `_owned`, disposed by `close`)."""
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise InvalidInputError(f"pool_size must be a positive int, got {pool_size!r}")
        if not isinstance(pool_timeout, (int, float)) or pool_timeout <= 0:
            raise InvalidInputError(f"pool_timeout must be a positive number, got {pool_timeout!r}")
        where = redact_url(url)
        backend, sync_url, async_url = _backend_url(url, where)
        options = _engine_options(backend, pool_size, pool_timeout)
        engine = create_engine(sync_url, **options)
        self._owned.append(engine)
        if with_async:
            self._built_async = create_async_engine(async_url, **options)
            self._owned.append(self._built_async)
        if backend == "sqlite":
            assert url.database is not None  # in-memory databases were refused above
            if not url.query.get("uri"):
                self._sqlite_file = Path(url.database)
            _configure_sqlite(engine)
            if self._built_async is not None:
                _configure_sqlite(self._built_async.sync_engine)
        return engine

    @contextmanager
    def translated(self) -> Iterator[None]:
        """Turn connection failures into `BackendUnavailableError` naming the URL (password hidden)."""
        try:
            yield
        except MemwovenError:
            raise
        except (OperationalError, InterfaceError, PoolTimeoutError, OSError) as error:
            if _json_refused(error):
                raise InvalidInputError(
                    f"{self.where} refused the data: MariaDB's JSON type holds at most 32 levels of nesting"
                ) from None
            raise BackendUnavailableError(f"database {self.where} is unavailable ({_error_text(error)})") from error
        except DBAPIError as error:
            if error.connection_invalidated:
                raise BackendUnavailableError(f"lost the connection to {self.where} ({_error_text(error)})") from error
            raise

    def prepare_storage(self) -> None:
        """Create the directory of an SQLite database file (the first time the database is used)."""
        if self._sqlite_file is not None:
            with self.translated():
                self._sqlite_file.parent.mkdir(parents=True, exist_ok=True)

    def _retry(self, error: DBAPIError, work: Work[Any, Any], attempt: int) -> bool:
        if error.connection_invalidated:
            return False
        retry = attempt < _DDL_ATTEMPTS if work.ddl else attempt < _ATTEMPTS and _is_transient(error)
        if retry:
            logger.debug(
                "%s: transaction attempt %d failed (%s); running it again", self.where, attempt, _error_text(error)
            )
        return retry

    def run(self, work: Work[R, Any]) -> R:
        """Run `work.run` in one transaction on the sync engine, retrying deadlocks; return its result."""
        if not work.write and self._reader is not None:
            pinned = self._reader.try_run(work)
            if pinned is not None:
                return pinned[0]
        with self.translated():
            attempt = 1
            while True:
                try:
                    with self._engines[work.write].begin() as connection:
                        return work.run(connection)
                except DBAPIError as error:
                    if not self._retry(error, work, attempt):
                        raise
                time.sleep(_retry_delay(attempt))
                attempt += 1

    async def arun(self, work: Work[R, Any]) -> R:
        """Async twin of `run`: the same `work.run`, on the async engine through `run_sync`."""
        if self._async_engines is None:
            return await asyncio.to_thread(self.run, work)
        await self._adopt_running_loop()
        with self.translated():
            attempt = 1
            while True:
                try:
                    async with self._async_engines[work.write].begin() as connection:
                        return await connection.run_sync(work.run)
                except DBAPIError as error:
                    if not self._retry(error, work, attempt):
                        raise
                await asyncio.sleep(_retry_delay(attempt))
                attempt += 1

    async def _adopt_running_loop(self) -> None:
        """Async connections belong to the loop that opened them; when calls move to another loop (each
        `asyncio.run` makes a new one), stop reusing the pooled connections of the old loop."""
        loop = asyncio.get_running_loop()
        old, self._loop = self._loop, loop
        if old is None or old is loop or self._built_async is None:
            return
        engine = self._built_async.sync_engine
        old_pool = engine.pool
        engine.dispose(close=False)  # a new pool at once: calls made meanwhile never get an old connection
        if self.dialect == "sqlite":
            # aiosqlite connections are not tied to a loop: close them here, or each would keep its worker
            # thread until the garbage collector finds it (and warn, unclosed, when it does). A server
            # connection's socket is registered with the old loop, which cannot run its close: it is only dropped.
            await greenlet_spawn(old_pool.dispose)

    def close(self) -> None:
        """Dispose the engines memwoven created (an engine passed in stays open: its owner closes it)."""
        if self._reader is not None:
            self._reader.close()
        loop = self._loop
        for engine in self._owned:
            if not isinstance(engine, AsyncEngine):
                engine.dispose()
            elif loop is not None and not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(engine.dispose())  # close its connections on the loop they belong to
            elif loop is not None and loop.is_closed() and not _loop_running_here():
                asyncio.run(engine.dispose())  # that loop is gone: close them on a fresh one, as well as can be
            else:
                # That loop is busy (`aclose` is the way to close after async use): the connections are only
                # dropped from the pool, and finalized by the garbage collector.
                engine.sync_engine.dispose(close=False)

    async def aclose(self) -> None:
        """Async twin of `close`: closes the async engine's connections on the running loop."""
        if self._reader is not None:
            self._reader.close()
        for engine in self._owned:
            if isinstance(engine, AsyncEngine):
                await engine.dispose()
            else:
                engine.dispose()
