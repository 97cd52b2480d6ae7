"""What the SQL chat and vector backends share: construction, lazy schema setup and executing `Work` steps."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from memwoven._steps import Runner, Steps, aexecute, arun, execute, run
from memwoven.backends.sql._engine import Database, Work
from memwoven.backends.sql._schema import Tables, check_identifier, create_tables
from memwoven.errors import InvalidInputError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["SQLBackend", "SQLOptions"]

T = TypeVar("T")


class SQLOptions(TypedDict, total=False):
    """The connection options every SQL backend takes (keyword arguments; see `SQLBackend`)."""

    table_prefix: str
    schema: str | None
    pool_size: int
    pool_timeout: float
    async_engine: AsyncEngine | None


class SQLBackend(Runner):
    """Engines, tables and the sync/async execution of `Work` steps; subclasses name their tables in `_table_names`
    (attributes of `Tables`) and yield their setup from `_setup_steps`.

    The constructor's options are every SQL backend's: `url_or_engine` is a URL (``sqlite:///memwoven.db``,
    ``postgresql://user:pw@host/db``, ``mysql://user@host/db``, ``mariadb://...``), an `Engine` (async calls then
    run in a thread unless `async_engine` is given too) or an `AsyncEngine`; `table_prefix` and `schema` place the
    tables; `pool_size` and `pool_timeout` size each engine's connection pool.

    An operation is a steps method (`memwoven._steps`) that yields one `Work` per transaction; `_run` and `_arun`
    execute each through the sync or the async engine (setting up storage first, on this object's first use).
    """

    _table_names: ClassVar[tuple[str, ...]]

    def __init__(
        self,
        url_or_engine: str | URL | Engine | AsyncEngine,
        *,
        table_prefix: str = "memwoven_",
        schema: str | None = None,
        pool_size: int = 5,
        pool_timeout: float = 30.0,
        async_engine: AsyncEngine | None = None,
    ) -> None:
        self.table_prefix = check_identifier(table_prefix, "table_prefix")
        self.schema = None if schema is None else check_identifier(schema, "schema")
        self._db = Database(url_or_engine, async_engine=async_engine, pool_size=pool_size, pool_timeout=pool_timeout)
        # On SQLite a schema is an ATTACHed database, which only an Engine passed in can have; from a URL the first
        # use created the file, then failed as if the database were unavailable.
        if self.schema is not None and self._db.dialect == "sqlite" and isinstance(url_or_engine, (str, URL)):
            self._db.close()
            raise InvalidInputError("an SQLite URL takes no schema (SQLite has none); give each tenant its own file")
        self._tables = Tables.build(self.table_prefix, self.schema)
        self._own_tables: list[sa.Table] = [getattr(self._tables, name) for name in self._table_names]
        self._ready = False
        self._ready_lock = threading.Lock()

    @property
    def url(self) -> str:
        """The database URL with the password hidden."""
        return self._db.where

    @property
    def engine(self) -> Engine:
        """The sync SQLAlchemy engine."""
        return self._db.engine

    @property
    def async_engine(self) -> AsyncEngine | None:
        """The async SQLAlchemy engine: built from the URL (it serves one event loop at a time, and other loops get
        engines of their own) or the one passed in. None when async calls run the sync API in a thread."""
        return self._db.async_engine

    def has_tables(self) -> bool:
        """Whether this object's tables exist in the database, found out read-only: unlike the first call of any
        other method, this creates nothing (no table, no SQLite file)."""
        return self._db.has_tables(self._own_tables)

    def _options_repr(self) -> str:
        schema = f", schema={self.schema!r}" if self.schema is not None else ""
        return f"{self._db.where!r}, table_prefix={self.table_prefix!r}{schema}"

    def _setup_steps(self) -> Steps[None]:
        """The transactions that prepare storage on first use (create tables, ...), in order: only `Work` steps."""
        raise NotImplementedError

    def _create_tables(self) -> Work[None]:
        """The transaction that creates this object's tables if missing."""
        return Work(lambda connection: create_tables(connection, self._tables, self._own_tables), write=True, ddl=True)

    def _run(self, steps: Steps[T]) -> T:
        """Drive `steps` from sync code, each `Work` in one transaction on the sync engine."""
        return run(steps, self._step)

    async def _arun(self, steps: Steps[T]) -> T:
        """Drive `steps` from async code, each `Work` in one transaction on this event loop's engine."""
        return await arun(steps, self._astep)

    def _step(self, step: Any) -> Any:
        """Execute one step from sync code: a `Work` through the sync engine (setting up storage first if this
        object has not yet), any other as `execute` does."""
        if not isinstance(step, Work):
            return execute(step)
        if not self._ready:
            with self._ready_lock:
                if not self._ready:
                    self._db.prepare_storage()
                    run(self._setup_steps(), self._db.transact)
                    self._ready = True
        return self._db.transact(step)

    async def _astep(self, step: Any) -> Any:
        """Execute one step from async code: a `Work` through the async engine (setting up storage first if this
        object has not yet), any other as `aexecute` does."""
        if not isinstance(step, Work):
            return await aexecute(step)
        if not self._ready:
            self._db.prepare_storage()
            await arun(self._setup_steps(), self._db.atransact)  # idempotent: concurrent first calls may both run it
            self._ready = True
        return await self._db.atransact(step)

    def drop_tables(self) -> None:
        """Drop every table of this prefix (all the sessions and collections stored under it). Irreversible."""
        with self._db.translated():
            self._tables.meta.metadata.drop_all(self._db.engine, checkfirst=True)
        self._ready = False

    def close(self) -> None:
        """Dispose the connection pools this object created."""
        self._db.close()

    async def aclose(self) -> None:
        """Dispose the connection pools this object created, closing this event loop's async engine natively on
        it (the other loops' engines as `close` does)."""
        await self._db.aclose()
