"""Engines and transactions shared by the SQL backends (sans business logic).

`Database` turns a URL (or a ready engine) into a sync `Engine` and async engines over the same database, executes
one unit of `Work` per transaction through either (`transact`, `atransact`), retries transient lock conflicts, and
maps connection failures to `BackendUnavailableError` naming the URL without its password.

Async engines are per event loop: a driver's async connections belong to the loop that opened them, and each
`asyncio.run` makes a new loop. Built from a URL, the object's `async_engine` serves one loop at a time and every
other loop using the object at once gets an engine of its own, on its first call there. A loop's engine is closed on
that loop when it shuts down its async generators (`asyncio.run`, `asyncio.Runner` and pytest-asyncio do, before
closing it) or on `aclose()` there; the connections of a loop closed without either are closed without it, when the
object next meets a new loop or is closed. An `AsyncEngine` you pass serves the first loop that uses the object;
other loops run the sync API in worker threads.

No pool is ever exhausted: at most `pool_size` transactions run at once through an engine (per loop, and from all
the threads through the sync one); more wait their turn, in order. The overflow (up to 10 more connections) serves
the connections kept for single statements (`_Pinned`: reads, and PostgreSQL's one-statement writes; two on
PostgreSQL, one for an SQLite file, which also keeps one for its write transactions) and other objects given the
same engine. A wait ends with the pool's timeout only when no transaction ended for all of `pool_timeout` (a
server that stopped answering), never for being late in a long queue.

SQLite engines built here run in WAL mode with a 30 s busy timeout and ``synchronous=NORMAL``: a commit is
atomic and survives a crash of the process, but the last commits before a power loss may be rolled back (they
become durable at the next WAL checkpoint). Transactions are begun explicitly, ``BEGIN IMMEDIATE`` for writes
(SQLAlchemy's documented pysqlite/aiosqlite recipe), so writers queue on the busy timeout instead of failing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import queue
import random
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, create_engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.pool import Pool, QueuePool

from memwoven._redact import redact_url
from memwoven.backends._cancel import Cancellation, current, finished_first, in_thread
from memwoven.backends._loops import end_this_loops_lifetime
from memwoven.backends.sql._driver import driver_errors
from memwoven.errors import BackendUnavailableError, InvalidInputError, MemwovenError

if TYPE_CHECKING:  # imported when an async engine is built or passed in: a sync worker does without its ~0.3 s
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["Database", "Work"]

logger = logging.getLogger("memwoven.sql")

R = TypeVar("R")
E = TypeVar("E", "Engine", "AsyncEngine")

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
_PINNED_POSTGRESQL = 2  # connections PostgreSQL keeps for single statements (`_Pinned`)
_SINGLE = "memwoven_single"  # execution option: one statement, its own transaction (SQLite: no BEGIN)
SQLITE_BUSY_TIMEOUT_MS = 30_000
MAX_OVERFLOW = 10  # connections a pool opens beyond `pool_size` (SQLAlchemy's default)
_ATTEMPTS = 8  # tries of one transaction when the database reports a deadlock or serialization failure
_RECONNECTS = 3  # tries of one transaction whose connection turned out closed before it committed
_DDL_ATTEMPTS = 3  # tries of schema creation (several processes may race to create the same tables)
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # PostgreSQL: serialization failure, deadlock detected
_MARIADB_CHECK_FAILED = 4025  # ER_CONSTRAINT_FAILED
_MYSQL_PACKET_TOO_LARGE = 1153  # ER_NET_PACKET_TOO_LARGE: a statement over max_allowed_packet (`_packet`)
_RETRYABLE_MYSQL_CODES = frozenset({1213, 1020})  # deadlock; MariaDB "record has changed since last read"


@dataclass(frozen=True)
class Work(Generic[R]):
    """One transaction's worth of work, and the step an SQL backend's operations yield (`memwoven._steps`): its
    `body(connection)` runs inside the transaction, and its result is sent back into the operation once the
    transaction committed (so what the operation does after the `yield`, such as updating a cache, sees only
    committed results).

    The same `body` serves the sync API (on a sync connection) and the async API (through SQLAlchemy's greenlet
    bridge, `AsyncConnection.run_sync`), so every operation's body exists once.
    """

    body: Callable[[Connection], R]
    write: bool = False
    ddl: bool = False
    single: bool = False
    """A body running one statement, atomic on its own (a write also harmless to apply twice, such as an upsert
    needing no compare-and-set), or a read whose statements need no snapshot in common (each consistent alone, as
    every read is on PostgreSQL, in autocommit, and MariaDB, in READ COMMITTED): on SQLite it runs without BEGIN,
    a write on PostgreSQL without BEGIN and COMMIT (two of its three round trips) as reads there always do; a write
    runs again on a new connection if its connection turns out closed."""

    @property
    def mode(self) -> str:
        """Which engine options it runs with: "read", "single read", "write" or "single" (`Database._modes`)."""
        if self.write:
            return "single" if self.single else "write"
        return "single read" if self.single else "read"


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
    """Refuse any charset but utf8mb4 (the driver's default): the others cannot hold every text memwoven accepts
    (utf8 is MySQL's three-byte subset, without emoji), so writes would fail untyped or, outside strict SQL
    modes, store mangled text."""
    if charset != "utf8mb4":
        raise InvalidInputError(f"memwoven needs the charset utf8mb4 (the default), not {charset!r} ({where})")


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
        options = connection.get_execution_options()
        if not options.get(_SINGLE, False):
            connection.exec_driver_sql("BEGIN IMMEDIATE" if options.get(_WRITE, False) else "BEGIN")


_NO_LOCK = nullcontext()
_SQLITE_WRITERS: dict[str, threading.RLock] = {}
_SQLITE_WRITERS_GUARD = threading.Lock()


def _sqlite_writer(database: str) -> threading.RLock:
    """The lock this process's write transactions on one SQLite database take in turn: SQLite runs one writer at
    a time, and a second one waiting in its busy handler sleeps in steps of 1-100 ms (LangGraph's background
    checkpoint writes, from two threads at once, cost 3-4 ms each that way instead of 0.7)."""
    with _SQLITE_WRITERS_GUARD:
        return _SQLITE_WRITERS.setdefault(database, threading.RLock())


def _engine_options(backend: str, pool_size: int, pool_timeout: float) -> dict[str, Any]:
    # No pre-ping: on PostgreSQL it cost three round trips per transaction (psycopg opens a transaction for the
    # SELECT 1). A connection the server closed (restart, pg_terminate_backend) fails its transaction before the
    # commit instead, which `Database` then runs again on a new connection (`_retry`).
    options: dict[str, Any] = {
        "pool_size": pool_size,
        "max_overflow": MAX_OVERFLOW,
        "pool_timeout": pool_timeout,
        "pool_pre_ping": False,
    }
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


def _mysql_code(error: BaseException) -> object:
    """The MariaDB/MySQL error code of `error` (a DBAPIError), if it has one."""
    args: tuple[Any, ...] = getattr(getattr(error, "orig", None), "args", ())
    return args[0] if args else None


def _json_refused(error: BaseException) -> bool:
    """MariaDB refused a value for a JSON column (its CHECK (JSON_VALID(...)) failed: nesting deeper than 32).

    Every value memwoven writes there is valid JSON, so this is the only way the check fails; the transaction
    rolled back, so nothing was written.
    """
    return _mysql_code(error) == _MARIADB_CHECK_FAILED


def _retry_delay(attempt: int) -> float:
    return float(random.uniform(0, 0.01 * 2**attempt))  # noqa: S311 - jitter, not a secret


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _limits(pool: Pool) -> tuple[int, float] | None:
    """How many transactions run at once through `pool`, and how long a checkout waits (None: no limit).

    As many as it keeps connections (`pool_size`), not its overflow too: an overflow connection is closed when it
    comes back, so under a steady crowd every transaction would pay a new connection (on PostgreSQL, 2,000
    concurrent calls took twice as long, opening 534 connections instead of 5).
    """
    if isinstance(pool, QueuePool) and pool.size() > 0:  # async pools are QueuePools too
        return pool.size(), pool.timeout()
    return None


def _spare(pool: Pool, wanted: int) -> int:
    """How many of `wanted` kept connections `pool` opens beyond its `pool_size` (its overflow, where they fit)."""
    if not isinstance(pool, QueuePool) or pool._max_overflow < 0:  # no limit
        return wanted
    return min(wanted, pool._max_overflow)


class _Line:
    """At most as many transactions at once through one pool as it keeps connections; the others wait in line.

    A waiter gives up after `timeout` (the pool's) only if no transaction ended meanwhile: the server stopped
    answering. `_Turns` serves threads, `_LoopTurns` the tasks of one event loop.
    """

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._ended = 0  # turns given back so far (a racy count: a waiter only needs to see it move)

    def _check(self, ended: int) -> None:
        if self._ended == ended:
            raise PoolTimeoutError(
                f"no transaction ended for {self._timeout:g} s (pool_timeout): the server stopped answering"
            )


class _Turns(_Line):
    """`_Line` for threads: each turn is a token from a queue (C code: a tenth of the cost of
    `threading.BoundedSemaphore`, paid on every call)."""

    def __init__(self, n: int, timeout: float) -> None:
        super().__init__(timeout)
        self._tokens: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(n):
            self._tokens.put(None)

    def __enter__(self) -> None:
        while True:
            ended = self._ended
            try:
                self._tokens.get(timeout=self._timeout)
            except queue.Empty:
                self._check(ended)
            else:
                return

    def __exit__(self, *exc: object) -> None:
        self._ended += 1
        self._tokens.put(None)


class _LoopTurns(_Line):
    """`_Line` for the tasks of one event loop (no limit without `limits`)."""

    def __init__(self, limits: tuple[int, float] | None) -> None:
        super().__init__(limits[1] if limits else 0.0)
        self._slots = asyncio.Semaphore(limits[0]) if limits else None

    async def __aenter__(self) -> None:
        slots = self._slots
        if slots is None:
            return
        while slots.locked():
            ended = self._ended
            if await self._acquire(slots):
                return
            self._check(ended)
        await slots.acquire()  # free (at first, or after a wait that saw others finish): at once

    async def _acquire(self, slots: asyncio.Semaphore) -> bool:
        """Whether a slot was taken within the timeout. Not `asyncio.wait_for`: before Python 3.12 it returns the
        slot, swallowing the cancellation, when the caller is cancelled just as the slot was taken."""
        acquiring = asyncio.ensure_future(slots.acquire())
        try:
            await asyncio.wait((acquiring,), timeout=self._timeout)
        except asyncio.CancelledError:
            if not acquiring.cancel() and not acquiring.cancelled() and acquiring.exception() is None:
                slots.release()  # taken just now: given back to the next waiter
            raise
        if acquiring.done():
            if acquiring.cancelled():  # by the loop shutting down: no slot was taken
                raise asyncio.CancelledError
            return True
        acquiring.cancel()  # a slot given to it meanwhile goes to the next waiter (`Semaphore.acquire`)
        return False

    async def __aexit__(self, *exc: object) -> None:
        if self._slots is not None:
            self._ended += 1
            self._slots.release()


@dataclass
class _Run:
    """One try of a transaction from async code: whether it had begun committing (then it is never retried)."""

    committing: bool = False


@dataclass(eq=False)
class _LoopEngine:
    """What serves one event loop: its async engine and turns, or none (its calls run the sync API in threads)."""

    engine: AsyncEngine | None
    by_mode: dict[str, AsyncEngine]  # the engine with the execution options of each `Work.mode`
    turns: _LoopTurns
    owned: bool  # built by memwoven: closed with its loop, then free for the next one
    writer: asyncio.Lock | None = None  # SQLite: this loop's write transactions take turns (see `_sqlite_writer`)
    lifetime: AsyncGenerator[None, None] | None = None  # finalized when the loop shuts down its async generators
    retired: bool = False  # closed, or being closed, by whoever retired it first
    kept_size: int = 0  # connections kept for single statements, as `_Pinned` keeps them for threads (PostgreSQL)
    kept: list[AsyncConnection] = field(default_factory=list)  # the free ones
    kept_open: int = 0  # kept: free, in use, or being opened

    async def close_kept(self) -> None:
        """Return the free kept connections to the pool (before it is disposed); one in use is closed after."""
        kept, self.kept = self.kept, []
        self.kept_open -= len(kept)
        for connection in kept:
            with suppress(Exception):
                await connection.close()


def _finished(lifetime: AsyncGenerator[None, None] | None) -> None:
    """End a lifetime generator whose engine was retired elsewhere, without its loop (its `finally` then returns
    without awaiting): neither its loop nor the garbage collector will finalize it later."""
    if lifetime is not None:
        with suppress(StopIteration, StopAsyncIteration, RuntimeError):
            lifetime.aclose().send(None)


class _Kept:
    """Up to `size` pooled connections kept checked out, each for one caller at a time (a caller finding them all
    held takes the pool), forgotten in a forked child (it must not share the parent's sockets or file lock)."""

    def __init__(self, engine: Engine, size: int = 1) -> None:
        self._engine = engine
        self._size = size
        self._lock = threading.Lock()  # for the fields below, held only to take or return a connection
        self._free: list[Connection] = []
        self._opened = 0  # connections kept: free, held by a caller, or being opened
        self._closings = 0  # `close` calls: a connection taken before one is closed when its caller is done
        self._pid = os.getpid()

    @contextmanager
    def _held(self) -> Iterator[Connection | None]:
        """A kept connection (opened if fewer than `size` are), or None while other callers hold all of them. One
        that ends the block closed or invalidated (`_discard`, an interrupted statement) is not kept."""
        # Never waits: a lock held by another thread when this process forked is never released in the child.
        if not self._lock.acquire(blocking=False):
            yield None
            return
        try:
            if self._pid != os.getpid():
                self._free, self._opened, self._pid = [], 0, os.getpid()
            connection = self._free.pop() if self._free else None
            opening = connection is None and self._opened < self._size
            if opening:
                self._opened += 1
            closings = self._closings
        finally:
            self._lock.release()
        if connection is None and not opening:
            yield None
            return
        try:
            if connection is None:
                connection = self._engine.connect()
            yield connection
        finally:
            usable = connection is not None and not connection.closed and not connection.invalidated
            if connection is not None and usable and closings != self._closings:
                usable = False  # `close` came meanwhile: its pool may be disposed
                with suppress(Exception):
                    connection.close()
            elif connection is not None and not usable:
                self._discard(connection)
            with self._lock:
                if self._pid == os.getpid():
                    if usable and connection is not None:
                        self._free.append(connection)
                    else:
                        self._opened -= 1

    @staticmethod
    def _discard(connection: Connection) -> None:
        """Drop `connection` (failed): invalidated and closed, so that `_held` does not keep it."""
        with suppress(Exception):
            connection.invalidate()
        with suppress(Exception):
            connection.close()

    def close(self) -> None:
        """Return the kept connections to their pool (before the pool is disposed): the free ones now, one in use
        when its caller is done. The next call opens a new one."""
        with self._lock:
            self._closings += 1
            free, self._free = self._free, []
            if self._pid != os.getpid():
                return
            self._opened -= len(free)
        for connection in free:
            with suppress(Exception):
                connection.close()


class _Pinned(_Kept):
    """Connections kept for single statements: reads (PostgreSQL, in autocommit; SQLite's single reads, without
    BEGIN) and PostgreSQL's single writes (one statement each, in autocommit as well). PostgreSQL keeps two, an SQLite
    file one.

    A call through the pool pays a checkout (and on PostgreSQL switching autocommit on and off again); a vector
    search asks for changes before every scan, so that is a second checkout on every search. A call tries these
    connections first (one caller each at a time; others take the pool). If it fails in any way the driver reports, the
    connection is discarded and the call runs again through the pool, which reconnects (`Database._retry`): a read
    is safe to repeat, and so is a single write (`Work.single`); a dropped connection (server restart,
    pg_terminate_backend) costs nothing more than before.
    """

    def try_run(self, work: Work[R]) -> tuple[R] | None:
        """`(result,)` if `work` ran on a pinned connection; None if the caller must use the pool."""
        try:
            with self._held() as connection:
                if connection is None:
                    return None
                try:
                    result = work.body(connection)
                    connection.commit()  # autocommit: ends SQLAlchemy's transaction, no round trip
                except DBAPIError as error:
                    logger.info("dropped a kept connection (%s); running through the pool", _error_text(error))
                    self._discard(connection)
                    return None
                return (result,)
        except (DBAPIError, PoolTimeoutError) as error:  # opening it failed
            logger.info("could not open a kept connection (%s); running through the pool", _error_text(error))
            return None


class _KeptWriter(_Kept):
    """One connection kept for the write transactions of an SQLite file, which run one at a time anyway (the
    writer lock): the pool's checkout and checkin and SQLAlchemy's transaction object were a quarter of a
    checkpoint's write. `BEGIN IMMEDIATE` and `COMMIT` go to the driver; the work's statements run as on any
    connection. A write whose connection turns out closed before its commit is run again through the pool."""

    def try_write(self, work: Work[R], cancellation: Cancellation | None = None) -> tuple[R] | None:
        """`(result,)` if `work` ran (and committed) on the kept connection; None if the caller must use the pool;
        the work's own errors raised after rolling back."""
        with self._held() as connection:
            if connection is None:
                return None
            committing = False
            try:
                dbapi_connection = connection.connection.dbapi_connection
                if dbapi_connection is None:  # invalidated by an earlier failure: the pool's turn
                    self._discard(connection)
                    return None
                if not work.single:
                    with driver_errors(connection, "BEGIN IMMEDIATE"):
                        dbapi_connection.execute("BEGIN IMMEDIATE")
                result = work.body(connection)
                if cancellation is not None:  # abandoned by a cancelled async caller: rolled back (`_end`)
                    cancellation.check()
                committing = True
                connection.commit()  # SQLAlchemy's transaction, if the work's statements began one
                with driver_errors(connection, "COMMIT"):
                    dbapi_connection.commit()  # else the driver's: COMMIT, or nothing if none is open
            except DBAPIError as error:
                self._end(connection)
                self._discard(connection)
                if error.connection_invalidated and not committing:  # nothing was applied: the pool's turn
                    logger.info("dropped the kept write connection (%s); writing through the pool", _error_text(error))
                    return None
                raise
            except BaseException:
                self._end(connection)
                raise
            return (result,)

    def _end(self, connection: Connection) -> None:
        """Roll back whatever the failed work left open (nothing, if its connection is gone)."""
        if connection.invalidated:  # touching it would check out a new one
            return
        with suppress(Exception):
            connection.rollback()
            dbapi_connection = connection.connection.dbapi_connection
            if dbapi_connection is not None:
                dbapi_connection.rollback()


class Database:
    """A sync engine, async engines over the same database (one per event loop), and how to execute `Work` on them."""

    def __init__(
        self,
        url_or_engine: str | URL | Engine | AsyncEngine,
        *,
        async_engine: AsyncEngine | None = None,
        pool_size: int = 5,
        pool_timeout: float = 30.0,
    ) -> None:
        self._owned: Engine | None = None  # the sync engine, when memwoven built it
        self._new_async: Callable[[], AsyncEngine] | None = None  # builds the engine of one more loop
        self._sqlite_file: Path | None = None
        where: str | None = None
        if isinstance(url_or_engine, Engine):
            engine: Engine = url_or_engine
        elif isinstance(url_or_engine, (str, URL)):
            try:
                url = make_url(url_or_engine)
            except (ArgumentError, ValueError) as error:
                raise InvalidInputError(f"malformed database URL: {error}") from None
            where = redact_url(url)
            engine = self._build(url, pool_size, pool_timeout, with_async=async_engine is None)
        else:
            from sqlalchemy.ext.asyncio import AsyncEngine  # loaded already if this is one

            if not isinstance(url_or_engine, AsyncEngine):
                raise InvalidInputError(
                    f"expected a database URL, an Engine or an AsyncEngine, got {type(url_or_engine).__name__}"
                )
            async_engine = async_engine or url_or_engine
            # A sync call cannot drive an async driver outside the event loop (SQLAlchemy raises MissingGreenlet
            # on `async_engine.sync_engine`), so the sync API gets its own engine over the same URL.
            engine = self._build(url_or_engine.url, pool_size, pool_timeout, with_async=False)
        self.engine = engine
        # Passed in: serves its first loop only. Built from the URL (`async_engine`, at the first use): one loop at
        # a time, `_free` while none holds it.
        self._given_async = async_engine
        self._built_async: AsyncEngine | None = None
        self._free = async_engine
        self.dialect = engine.dialect.name
        self.where = where or redact_url(engine.url)
        if self.dialect not in SUPPORTED_DIALECTS:
            raise InvalidInputError(f"unsupported database {self.dialect!r} ({self.where})")
        # Reads are single statements (each a consistent snapshot), so on PostgreSQL they run in autocommit and
        # skip the BEGIN and COMMIT round trips; psycopg switches autocommit on the client, at no cost.
        self._reads: dict[str, Any] = {"isolation_level": "AUTOCOMMIT"} if self.dialect == "postgresql" else {}
        self._engines = self._modes(engine)
        # A single read on SQLite (no BEGIN sent, `_SINGLE`) also skips SQLAlchemy's transaction object: its begin
        # and commit were a tenth of a one-namespace store search. Ending the connection rolls back what it began.
        self._untransacted = "single read" if self.dialect == "sqlite" else None
        sqlite_database = str(self._sqlite_file.resolve()) if self._sqlite_file is not None else f"{id(engine):x}"
        self._writer: AbstractContextManager[Any] = (
            _sqlite_writer(sqlite_database) if self.dialect == "sqlite" else nullcontext()
        )
        # A file SQLite database keeps one connection for single reads too: the pool's checkout and checkin were
        # ~15% of a one-namespace store search (in memory, a pool may hold one database per thread: not pinned).
        self._pinned_modes: tuple[str, ...] = ("single read",) if self._sqlite_file is not None else ()
        pinned = 1
        if self.dialect == "postgresql" and _spare(engine.pool, _PINNED_POSTGRESQL):
            # single writes too: one statement in autocommit as reads are (checkout and checkin were a fifth of a
            # small put_many's process time). Two connections: a LangGraph step writes its checkpoint and its
            # task's writes at once, and the one finding a single connection held paid the pool (checkout,
            # autocommit on and off, checkin: ~a quarter of the checkpoint write's process time).
            self._pinned_modes = ("read", "single read", "single")
            pinned = _spare(engine.pool, _PINNED_POSTGRESQL)
        self._pinned = _Pinned(self._engines[self._pinned_modes[0]], pinned) if self._pinned_modes else None
        # A file SQLite database keeps one connection for its write transactions as well (`_KeptWriter`).
        self._kept_writer: _KeptWriter | None = (
            _KeptWriter(self._engines["single"]) if self._sqlite_file is not None else None
        )
        limits = _limits(engine.pool)
        self._turns: AbstractContextManager[None] = nullcontext() if limits is None else _Turns(*limits)
        self._loops: dict[asyncio.AbstractEventLoop, _LoopEngine] = {}
        self._guard = threading.Lock()  # for `_loops` and `_free`, shared by the threads running loops

    @property
    def async_engine(self) -> AsyncEngine | None:
        """The async engine passed in, else the one built from the URL at the first call (SQLAlchemy's asyncio
        extension and the async driver are imported only then), else None: async calls run in threads."""
        if self._given_async is not None or self._new_async is None:
            return self._given_async
        with self._guard:
            if self._built_async is None:
                self._built_async = self._free = self._new_async()
            return self._built_async

    def _build(self, url: URL, pool_size: int, pool_timeout: float, *, with_async: bool) -> Engine:
        """Create the sync engine for `url` (disposed by `close`) and, `with_async`, the maker of async ones."""
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise InvalidInputError(f"pool_size must be a positive int, got {pool_size!r}")
        if not isinstance(pool_timeout, (int, float)) or pool_timeout <= 0:
            raise InvalidInputError(f"pool_timeout must be a positive number, got {pool_timeout!r}")
        where = redact_url(url)
        backend, sync_url, async_url = _backend_url(url, where)
        options = _engine_options(backend, pool_size, pool_timeout)
        engine = self._owned = create_engine(sync_url, **options)
        if backend == "sqlite":
            if url.database and not url.query.get("uri"):  # a file name (in-memory databases were refused)
                self._sqlite_file = Path(url.database)
            _configure_sqlite(engine)
        if with_async:

            def new_async() -> AsyncEngine:
                from sqlalchemy.ext.asyncio import create_async_engine

                made = create_async_engine(async_url, **options)
                if backend == "sqlite":
                    _configure_sqlite(made.sync_engine)
                return made

            self._new_async = new_async
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
            if _mysql_code(error) == _MYSQL_PACKET_TOO_LARGE:  # rows are checked first; this one slipped through
                raise InvalidInputError(
                    f"{self.where} refused a statement longer than its max_allowed_packet ({_error_text(error)})"
                ) from None
            raise BackendUnavailableError(f"database {self.where} is unavailable ({_error_text(error)})") from error
        except DBAPIError as error:
            if error.connection_invalidated:
                raise BackendUnavailableError(f"lost the connection to {self.where} ({_error_text(error)})") from error
            raise

    def exists(self) -> bool:
        """False for an SQLite database whose file does not exist yet (connecting to it would create it)."""
        return self._sqlite_file is None or self._sqlite_file.exists()

    def has_tables(self, tables: Sequence[sa.Table]) -> bool:
        """Whether all of `tables` exist; read-only: creates nothing, not even the file of an SQLite database."""
        if not self.exists():
            return False

        def read(connection: Connection) -> bool:
            inspector = sa.inspect(connection)
            return all(inspector.has_table(table.name, schema=table.schema) for table in tables)

        return self.transact(Work(read))

    def prepare_storage(self) -> None:
        """Create the directory of an SQLite database file (the first time the database is used)."""
        if self._sqlite_file is not None:
            with self.translated():
                self._sqlite_file.parent.mkdir(parents=True, exist_ok=True)

    def _retry(self, error: DBAPIError, work: Work[Any], attempt: int, committing: bool) -> bool:
        """Whether to run `work` again after `error` on its `attempt`-th try: a deadlock or serialization failure,
        a race creating tables, or a connection found closed before the commit was asked for (nothing was applied:
        the server rolls back a transaction whose connection ends, and a read is safe to repeat). A connection lost
        while committing is never retried: the commit may have been applied."""
        if error.connection_invalidated:
            retry = not committing and attempt < _RECONNECTS
        else:
            retry = attempt < _DDL_ATTEMPTS if work.ddl else attempt < _ATTEMPTS and _is_transient(error)
        if retry:
            logger.debug(
                "%s: transaction attempt %d failed (%s); running it again", self.where, attempt, _error_text(error)
            )
        return retry

    def transact(self, work: Work[R]) -> R:
        """Run `work.body` in one transaction on the sync engine, retrying deadlocks and connections found closed
        (`_retry`); return its result."""
        if self._pinned is not None and work.mode in self._pinned_modes:
            pinned = self._pinned.try_run(work)
            if pinned is not None:
                return pinned[0]
        cancellation = current()
        with self.translated():
            if work.write and not work.ddl and self._kept_writer is not None:
                with self._writer:
                    kept = self._kept_writer.try_write(work, cancellation)
                if kept is not None:
                    return kept[0]
            attempt = 1
            while True:
                committing = False
                try:
                    writer = self._writer if work.write else nullcontext()
                    engine = self._engines[work.mode]
                    bare = work.mode == self._untransacted
                    with writer, self._turns, engine.connect() if bare else engine.begin() as connection:
                        result = work.body(connection)
                        if cancellation is not None:  # from `atransact`, in a worker thread
                            cancellation.check()
                        committing = True
                except DBAPIError as error:
                    if not self._retry(error, work, attempt, committing):
                        raise
                else:
                    return result
                time.sleep(_retry_delay(attempt))
                attempt += 1

    async def atransact(self, work: Work[R]) -> R:
        """`transact` from async code: the same `work.body` in one transaction on this event loop's engine (through
        `run_sync`), retried alike; in a worker thread through the sync engine when this loop has no async engine.

        Cancelled, it does not cut the transaction off (SQLAlchemy would invalidate the connection mid-statement,
        and aiosqlite then leaves its SQLite connection open, in its write transaction, locking the file until the
        garbage collector closes it): the transaction runs in a task of its own (`finished_first`), rolled back
        once its body returns (or committed, if it had begun committing), and only then is `CancelledError` raised.
        A cancelled call running in a worker thread raises it at once, and the thread rolls back alike."""
        if self.async_engine is None:
            return await in_thread(self.transact, work)
        mine = self._loops.get(asyncio.get_running_loop()) or await self._enter_loop()
        if mine.engine is None:
            return await in_thread(self.transact, work)
        if mine.kept_size and work.mode in self._pinned_modes:
            kept = await self._on_kept(mine, work)
            if kept is not None:
                return kept[0]
        with self.translated():
            attempt = 1
            while True:
                run = _Run()
                try:
                    writer = mine.writer if work.write and mine.writer is not None else _NO_LOCK
                    async with writer, mine.turns:
                        result = await finished_first(functools.partial(self._atransaction, mine, work, run))
                except DBAPIError as error:
                    if not self._retry(error, work, attempt, run.committing):
                        raise
                else:
                    return result
                await asyncio.sleep(_retry_delay(attempt))
                attempt += 1

    async def _atransaction(self, mine: _LoopEngine, work: Work[R], run: _Run, cancellation: Cancellation) -> R:
        """One try of `work` on the loop's engine, abandoned (rolled back) if the caller was cancelled before it
        began committing."""
        engine = mine.by_mode[work.mode]
        bare = work.mode == self._untransacted
        async with engine.connect() if bare else engine.begin() as connection:
            cancellation.check()  # cancelled while waiting for a connection (or SQLite's BEGIN IMMEDIATE)
            result = await connection.run_sync(work.body)
            cancellation.check()
            run.committing = True
        return result

    async def _on_kept(self, mine: _LoopEngine, work: Work[R]) -> tuple[R] | None:
        """`(result,)` if `work` ran on one of the loop's kept connections; None if the caller must use the pool
        (all in use, or the connection failed: `_Pinned.try_run` for async calls). A connection whose call raised
        anything is not kept (a cancelled call may have left its statement running)."""
        if mine.kept:
            connection = mine.kept.pop()
        elif mine.kept_open < mine.kept_size and not mine.retired:
            mine.kept_open += 1
            try:
                connection = await mine.by_mode[self._pinned_modes[0]].connect()
            except BaseException as error:  # cancelled too: else the loop would never keep one again
                mine.kept_open -= 1
                if not isinstance(error, (DBAPIError, PoolTimeoutError)):
                    raise
                logger.info("could not open a kept connection (%s); running through the pool", _error_text(error))
                return None
        else:
            return None
        try:
            result = await connection.run_sync(work.body)
            await connection.commit()  # autocommit: ends SQLAlchemy's transaction, no round trip
        except BaseException as error:
            mine.kept_open -= 1
            try:
                with suppress(Exception):
                    await connection.invalidate()
            finally:  # closed even when a second cancellation interrupts the invalidation
                with suppress(Exception):
                    await connection.close()
            if isinstance(error, DBAPIError):
                logger.info("dropped a kept connection (%s); running through the pool", _error_text(error))
                return None
            raise
        if mine.retired:  # its engine is being closed
            mine.kept_open -= 1
            with suppress(Exception):
                await connection.close()
        else:
            mine.kept.append(connection)
        return (result,)

    async def _enter_loop(self) -> _LoopEngine:
        """Serve the running loop: the free engine, a new one, the one passed in (its first loop) or threads."""
        loop = asyncio.get_running_loop()
        with self._guard:
            stranded = [(old, mine) for old, mine in self._loops.items() if old.is_closed()]
            engine, self._free = self._free, None
            if engine is None and self._new_async is not None:
                engine = self._new_async()
            mine = self._loops[loop] = self._serving(engine, owned=self._new_async is not None)
        if mine.engine is None:
            logger.debug("%s: event loop %#x runs its calls in threads", self.where, id(loop))
        else:
            logger.debug("%s: async engine %#x serves event loop %#x", self.where, id(mine.engine), id(loop))
        if mine.owned and mine.engine is not None:
            mine.lifetime = self._lifetime(loop, mine, mine.engine)
            await anext(mine.lifetime)  # the loop now tracks it (does not suspend)
        if stranded:
            await asyncio.to_thread(self._close_stranded, stranded)
        return mine

    def _serving(self, engine: AsyncEngine | None, *, owned: bool) -> _LoopEngine:
        if engine is None:
            return _LoopEngine(None, {}, _LoopTurns(None), owned)
        writer = asyncio.Lock() if self.dialect == "sqlite" else None
        # PostgreSQL keeps connections for single statements, as for threads (`_Pinned`), where the engine is
        # memwoven's (closed with its loop: a passed-in engine's owner would find them checked out)
        kept = 0
        if owned and self.dialect == "postgresql" and "single" in self._pinned_modes:
            kept = _spare(engine.sync_engine.pool, _PINNED_POSTGRESQL)
        return _LoopEngine(
            engine,
            self._modes(engine),
            _LoopTurns(_limits(engine.sync_engine.pool)),
            owned,
            writer=writer,
            kept_size=kept,
        )

    def _modes(self, engine: E) -> dict[str, E]:
        """`engine` with the execution options of each `Work.mode`."""
        single: dict[str, Any] = {_WRITE: True, _SINGLE: True}
        if self.dialect == "postgresql":
            single["isolation_level"] = "AUTOCOMMIT"
        elif self.dialect != "sqlite":  # MariaDB/MySQL: switching autocommit costs a round trip of its own
            single = {_WRITE: True}
        return {
            "read": engine.execution_options(**self._reads),
            "single read": engine.execution_options(**self._reads, **{_SINGLE: self.dialect == "sqlite"}),
            "write": engine.execution_options(**{_WRITE: True}),
            "single": engine.execution_options(**single),
        }

    async def _lifetime(
        self, loop: asyncio.AbstractEventLoop, mine: _LoopEngine, engine: AsyncEngine
    ) -> AsyncGenerator[None, None]:
        """Suspended while `loop` runs; finalized (by the loop's shutdown or `aclose`), closes its engine on it."""
        try:
            yield
        finally:
            if self._retire(loop, mine):
                try:
                    await mine.close_kept()
                    await engine.dispose()
                except (DBAPIError, OSError, RuntimeError) as error:  # teardown never fails a call that was applied
                    logger.info("%s: closing the connections of event loop %#x: %s", self.where, id(loop), error)
                else:
                    logger.debug("%s: closed the async engine of event loop %#x", self.where, id(loop))
                self._reuse(engine)

    def _retire(self, loop: asyncio.AbstractEventLoop, mine: _LoopEngine) -> bool:
        """Take `mine` out of service; True for the one caller that must then close its engine."""
        with self._guard:
            if mine.retired:
                return False
            mine.retired = True
            if self._loops.get(loop) is mine:
                del self._loops[loop]
            return mine.owned

    def _reuse(self, engine: AsyncEngine) -> None:
        """After its connections are closed, the engine `async_engine` names is free for the next loop."""
        if engine is (self._given_async or self._built_async):
            with self._guard:
                self._free = engine

    def _close_stranded(self, stranded: Sequence[tuple[asyncio.AbstractEventLoop, _LoopEngine]]) -> None:
        """Close the connections of loops that were closed with them open, without those loops."""
        for loop, mine in stranded:
            engine = mine.engine
            if self._retire(loop, mine) and engine is not None:
                if self.dialect in ("mysql", "mariadb"):
                    # aiomysql closes a connection through its loop's transport, which a closed loop refuses: the
                    # pool is only dropped, and the garbage collector closes the sockets.
                    engine.sync_engine.dispose(close=False)
                    logger.warning(
                        "%s: event loop %#x was closed before its connections (close loops with asyncio.run, or "
                        "call aclose() on them first): they are left to the garbage collector",
                        self.where,
                        id(loop),
                    )
                else:  # aiosqlite and psycopg close a connection without its loop: on a fresh one
                    try:
                        _on_a_fresh_loop(functools.partial(_disposed, mine, engine))
                    except (DBAPIError, OSError, RuntimeError) as error:  # never fails the call that found them
                        logger.info("%s: closing the connections of event loop %#x: %s", self.where, id(loop), error)
                    else:
                        logger.info(
                            "%s: closed the connections of event loop %#x without it (it was closed first)",
                            self.where,
                            id(loop),
                        )
                self._reuse(engine)
            _finished(mine.lifetime)

    def close(self) -> None:
        """Dispose the engines memwoven created (an engine passed in stays open: its owner closes it).

        A loop's async engine is closed on that loop if it is idle, without it if it is closed; the engine of a loop
        still running (or idle while another runs here) closes when that loop shuts down its async generators.
        """
        for kept in (self._pinned, self._kept_writer):
            if kept is not None:
                kept.close()
        with self._guard:
            loops = list(self._loops.items())
        self._close_stranded([(loop, mine) for loop, mine in loops if loop.is_closed()])
        if not _loop_running_here():  # an idle loop can run here: its engine is closed on it
            for loop, mine in loops:
                lifetime = mine.lifetime
                if lifetime is not None and not loop.is_closed() and not loop.is_running():
                    mine.lifetime = None
                    loop.run_until_complete(lifetime.aclose())
        if self._owned is not None:
            self._owned.dispose()

    async def aclose(self) -> None:
        """Close this event loop's async engine on it, and the rest as `close` does."""
        await end_this_loops_lifetime(self._loops)
        self.close()


async def _disposed(mine: _LoopEngine, engine: AsyncEngine) -> None:
    """Close the kept connections of `mine`, then its engine's pool."""
    await mine.close_kept()
    await engine.dispose()


def _on_a_fresh_loop(make: Callable[[], Any]) -> None:
    """Run the coroutine `make()` returns to completion on a new event loop (in a thread of its own if a loop is
    running here)."""
    if not _loop_running_here():
        asyncio.run(make())
        return
    thread = threading.Thread(target=lambda: asyncio.run(make()), name="memwoven-sql-close")
    thread.start()
    thread.join()
