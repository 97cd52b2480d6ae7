"""Backends for the integration tests: in-memory, SQLite (a file per test) and PostgreSQL.

PostgreSQL tests use one schema created for this test session (`lcmw_<random>`), dropped at the end; nothing
else on the shared server is touched. They skip when the server is down (fail under MEMWOVEN_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from memwoven import ChatMemory, InMemoryChatMemory, InMemoryVectorMemory, VectorMemory
from memwoven.backends.sql import SQLChatMemory, SQLVectorMemory
from memwoven_test_support import postgres_url, unique_name

KINDS = ["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.service)]
PERSISTENT_KINDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.service)]


@dataclass
class Backend:
    """Where one test's memories live; `url` and `options` reopen the same storage (e.g. in another process)."""

    kind: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)
    opened: list[ChatMemory | VectorMemory] = field(default_factory=list)

    def chat(self) -> ChatMemory:
        memory: ChatMemory = InMemoryChatMemory() if self.kind == "memory" else SQLChatMemory(self.url, **self.options)
        self.opened.append(memory)
        return memory

    def reopen_chat(self, memory: ChatMemory) -> ChatMemory:
        """A second object over the same chat storage (the same object for the in-memory backend)."""
        return memory if self.kind == "memory" else self.chat()

    def vector(self, dimension: int | None = None, collection: str | None = None) -> VectorMemory:
        """A vector collection: a new one, or `collection` (which reopens it on a persistent backend)."""
        if self.kind == "memory":
            memory: VectorMemory = InMemoryVectorMemory(dimension=dimension)
        else:
            name = collection or unique_name("c")
            memory = SQLVectorMemory(self.url, collection=name, dimension=dimension, **self.options)
        self.opened.append(memory)
        return memory

    def close(self) -> None:
        for memory in self.opened:
            memory.close()


@pytest.fixture(scope="session")
def postgres_schema() -> Iterator[tuple[str, str]]:
    """(url, schema): a schema of our own on the test server, dropped with everything in it afterwards."""
    url, schema = postgres_url(), unique_name("lcmw")
    yield url, schema
    probe = SQLChatMemory(url, schema=schema)
    try:
        with probe.engine.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        probe.close()


def open_backend(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if kind == "memory":
        return Backend(kind, "memory://")
    if kind == "sqlite":
        return Backend(kind, f"sqlite:///{tmp_path}/memwoven.db")
    url, schema = request.getfixturevalue("postgres_schema")
    return Backend(kind, url, {"schema": schema})


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    where = open_backend(request.param, request, tmp_path)
    yield where
    where.close()


@pytest.fixture(params=PERSISTENT_KINDS)
def persistent_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    where = open_backend(request.param, request, tmp_path)
    yield where
    where.close()
