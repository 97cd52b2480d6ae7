"""Backends to run the adapters on: in-memory, SQLite (a file under tmp_path) and PostgreSQL (skipped when the
test server is down; each test gets its own tables in a schema this session creates and drops at the end); item
memories also on MariaDB (each test's tables under a table prefix of its own, dropped at the end)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from llama_index.core.base.embeddings.base import BaseEmbedding

from llama_index.embeddings.memwoven import EmbedFnEmbedding
from memwoven import ChatMemory, InMemoryChatMemory, InMemoryItemMemory, InMemoryVectorMemory, ItemMemory, VectorMemory
from memwoven.embed import HashingEmbedFn
from memwoven_test_support import mysql_url, postgres_url, unique_name

BACKENDS = ["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.service)]
ITEM_BACKENDS = [*BACKENDS, pytest.param("mariadb", marks=pytest.mark.service)]


@pytest.fixture(scope="session")
def postgres_schema() -> Iterator[str]:
    """A schema of this test session on the PostgreSQL test server, dropped (with only our tables) at the end."""
    from memwoven.backends.sql import SQLChatMemory

    url, schema = postgres_url(), unique_name("llx")
    yield schema
    with SQLChatMemory(url) as memory, memory.engine.begin() as connection:
        connection.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


def _sql_place(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """(url, options) for a fresh place on an SQL backend."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/memwoven.db", {}
    schema = request.getfixturevalue("postgres_schema")
    return postgres_url(), {"schema": schema, "table_prefix": unique_name("t") + "_"}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the backend under test."""
    return str(request.param)


@pytest.fixture
def sql_place(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]] | None:
    """(url, options) of the test's SQL place, or None on the in-memory backend."""
    return None if backend == "memory" else _sql_place(backend, tmp_path, request)


def _sql_chat_memory(sql_place: tuple[str, dict[str, Any]]) -> Iterator[ChatMemory]:
    """A chat memory object over the SQL place, closed (on an event loop, as the adapters use it) at the end."""
    from memwoven.backends.sql import SQLChatMemory

    url, options = sql_place
    memory = SQLChatMemory(url, **options)
    yield memory
    asyncio.run(memory.aclose())


@pytest.fixture
def chat_memory(sql_place: tuple[str, dict[str, Any]] | None) -> Iterator[ChatMemory]:
    """A fresh, empty chat memory on the backend under test."""
    yield from [InMemoryChatMemory()] if sql_place is None else _sql_chat_memory(sql_place)


@pytest.fixture
def reopen_chat(sql_place: tuple[str, dict[str, Any]] | None, chat_memory: ChatMemory) -> Iterator[ChatMemory]:
    """A second chat memory object over the same storage (the same object on the in-memory backend)."""
    yield from [chat_memory] if sql_place is None else _sql_chat_memory(sql_place)


@pytest.fixture
def vector_memory(sql_place: tuple[str, dict[str, Any]] | None) -> Iterator[VectorMemory]:
    """A fresh, empty vector collection on the backend under test."""
    if sql_place is None:
        yield InMemoryVectorMemory()
        return
    from memwoven.backends.sql import SQLVectorMemory

    url, options = sql_place
    memory = SQLVectorMemory(url, collection=unique_name("c"), **options)
    yield memory
    asyncio.run(memory.aclose())


def item_memory_url(backend: str, tmp_path: Path) -> str:
    """The URL of the item memory tests on `backend` (an SQL one) use: a file under `tmp_path` for SQLite."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/items.db"
    return postgres_url() if backend == "postgresql" else mysql_url()


@pytest.fixture(params=ITEM_BACKENDS)
def item_backend(request: pytest.FixtureRequest) -> str:
    """The name of the backend the item memory under test is on (in-memory, SQLite, PostgreSQL or MariaDB)."""
    return str(request.param)


@pytest.fixture
def item_memory(item_backend: str, tmp_path: Path) -> Iterator[ItemMemory]:
    """A fresh, empty item memory on `item_backend`; on SQL, tables of its own, dropped at the end."""
    if item_backend == "memory":
        yield InMemoryItemMemory()
        return
    from memwoven import SQLItemMemory

    memory = SQLItemMemory(item_memory_url(item_backend, tmp_path), table_prefix=unique_name("lik") + "_")
    try:
        yield memory
    finally:
        memory.drop_tables()
        asyncio.run(memory.aclose())


@pytest.fixture
def reopen_items(item_memory: ItemMemory) -> Iterator[ItemMemory]:
    """A second item memory object over the same storage (the same object on the in-memory backend)."""
    from memwoven import SQLItemMemory

    if not isinstance(item_memory, SQLItemMemory):
        yield item_memory
        return
    again = SQLItemMemory(item_memory.engine.url, table_prefix=item_memory.table_prefix)
    yield again
    asyncio.run(again.aclose())


@pytest.fixture
def embed_model() -> BaseEmbedding:
    """An offline LlamaIndex embedding model (memwoven's hashing embedder)."""
    return EmbedFnEmbedding(HashingEmbedFn(128))
