"""What the SQL chat and vector backends share: construction, lazy schema setup and running `Work`."""

from __future__ import annotations

import threading
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from memwoven.backends.sql._engine import Database, Work
from memwoven.backends.sql._schema import Tables, check_identifier

__all__ = ["SQLBackend"]

R = TypeVar("R")
T = TypeVar("T")


class SQLBackend:
    """Engines, tables and the sync/async execution of `Work`; subclasses name their tables in `_own_tables` and
    list their setup in `_setup_work`."""

    _own_tables: list[sa.Table]

    def __init__(
        self,
        url_or_engine: str | URL | Engine | AsyncEngine,
        *,
        table_prefix: str,
        schema: str | None,
        pool_size: int,
        pool_timeout: float,
        async_engine: AsyncEngine | None,
    ) -> None:
        self.table_prefix = check_identifier(table_prefix, "table_prefix")
        self.schema = None if schema is None else check_identifier(schema, "schema")
        self._db = Database(url_or_engine, async_engine=async_engine, pool_size=pool_size, pool_timeout=pool_timeout)
        self._tables = Tables.build(self.table_prefix, self.schema)
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

    def _setup_work(self) -> list[Work[Any, Any]]:
        """The transactions that prepare storage on first use (create tables, ...), in order."""
        raise NotImplementedError

    def _execute(self, work: Work[R, T]) -> T:
        """Run `work` through the sync engine (setting up storage first if this object has not yet)."""
        if not self._ready:
            with self._ready_lock:
                if not self._ready:
                    self._db.prepare_storage()
                    for setup in self._setup_work():
                        setup.done(self._db.run(setup))
                    self._ready = True
        return work.done(self._db.run(work))

    async def _aexecute(self, work: Work[R, T]) -> T:
        """Async twin of `_execute`: the same work through the async engine."""
        if not self._ready:
            self._db.prepare_storage()
            for setup in self._setup_work():  # idempotent, so concurrent first calls may both run it
                setup.done(await self._db.arun(setup))
            self._ready = True
        return work.done(await self._db.arun(work))

    def drop_tables(self) -> None:
        """Drop every table of this prefix (all the sessions and collections stored under it). Irreversible."""
        with self._db.translated():
            self._tables.meta.metadata.drop_all(self._db.engine, checkfirst=True)
        self._ready = False

    def close(self) -> None:
        """Dispose the connection pools this object created."""
        self._db.close()

    async def aclose(self) -> None:
        """Async twin of `close`."""
        await self._db.aclose()
