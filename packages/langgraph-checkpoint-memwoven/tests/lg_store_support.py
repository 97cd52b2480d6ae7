"""What LangGraph's own store tests construct, swapped for `MemwovenStore` on the backend of the running test.

The test modules `third_party/langgraph/test_lg_*.py` are LangGraph's (see their headers); only their construction
changed: where they build `SqliteStore` / `AsyncSqliteStore` / `PostgresStore` / `AsyncPostgresStore`, they get
the classes below, whose `from_conn_string` opens a `MemwovenStore` on the current backend (`conftest.py` sets it
per test: memory, SQLite, PostgreSQL or MariaDB); the same connection string reopens the same storage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langgraph.store.base import IndexConfig, TTLConfig

from langgraph.store.memwoven import AsyncMemwovenStore, MemwovenStore

# conftest.py sets this per test: (store class, conn string, index, ttl) -> a store on the test's backend.
OPEN: list[Callable[..., MemwovenStore]] = []

# LangGraph parametrizes its PostgreSQL tests over pgvector's column types ("vector", "halfvec"), given as
# `ann_index_config`, which MemwovenStore accepts and ignores (memwoven's vector search is exact): one type runs.
VECTOR_TYPES = ["vector"]
SqliteIndexConfig = IndexConfig


def open_store(cls: type[MemwovenStore], conn: str = ":memory:", **options: Any) -> MemwovenStore:
    """A store of `cls` on the running test's backend; the same `conn` (a file name) reopens the same storage."""
    if not OPEN:
        raise RuntimeError("no backend: these tests need the memwoven_backend fixture of conftest.py")
    return OPEN[-1](cls, conn, **options)


class SqliteStore(MemwovenStore):
    """LangGraph's `SqliteStore` / `PostgresStore` constructor, giving a `MemwovenStore` on the test's backend."""

    @classmethod
    @contextmanager
    def from_conn_string(  # type: ignore[override]
        cls, conn_string: str, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None
    ) -> Iterator[MemwovenStore]:
        with open_store(MemwovenStore, conn_string, index=index, ttl=ttl) as store:
            yield store


class AsyncSqliteStore(AsyncMemwovenStore):
    """LangGraph's `AsyncSqliteStore` / `AsyncPostgresStore` constructor, giving an `AsyncMemwovenStore` on the
    test's backend."""

    @classmethod
    @asynccontextmanager
    async def from_conn_string(  # type: ignore[override]
        cls, conn_string: str, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None
    ) -> AsyncIterator[AsyncMemwovenStore]:
        store = open_store(AsyncMemwovenStore, conn_string, index=index, ttl=ttl)
        async with store:
            yield store  # type: ignore[misc]


PostgresStore = SqliteStore
AsyncPostgresStore = AsyncSqliteStore
