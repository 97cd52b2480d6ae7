"""What LangGraph's own store tests construct, swapped for `MemwovenStore` on the backend of the running test.

The test modules `test_lg_*.py` are LangGraph's (see their headers); only their construction changed: where they
build `SqliteStore` / `AsyncSqliteStore` / `PostgresStore` / `AsyncPostgresStore`, they get the classes below, whose
constructors open a `MemwovenStore` on the current backend (`conftest.py` sets it per test: memory, SQLite,
PostgreSQL or MariaDB). `CharacterEmbeddings` is LangGraph's test embedding (libs/checkpoint-postgres/tests/
embed_test_utils.py, MIT License, Copyright (c) 2024 LangChain, Inc.).
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langchain_core.embeddings import Embeddings
from langgraph.store.base import IndexConfig, TTLConfig

from langgraph.store.memwoven import AsyncMemwovenStore, MemwovenStore

# conftest.py sets this per test: (store class, conn string, index, ttl) -> a store on the test's backend.
OPEN: list[Callable[..., MemwovenStore]] = []

VECTOR_TYPES = ["vector", "halfvec"]
SqliteIndexConfig = IndexConfig


def open_store(cls: type[MemwovenStore], conn: str = ":memory:", **options: Any) -> MemwovenStore:
    """A store of `cls` on the running test's backend; the same `conn` (a file name) reopens the same storage."""
    if not OPEN:
        raise RuntimeError("no backend: these tests need the memwoven_backend fixture of conftest.py")
    return OPEN[-1](cls, conn, **options)


class SqliteStore(MemwovenStore):
    """LangGraph's `SqliteStore` constructor, giving a `MemwovenStore` on the test's backend."""

    @classmethod
    @contextmanager
    def from_conn_string(  # type: ignore[override]
        cls, conn_string: str, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None
    ) -> Iterator[MemwovenStore]:
        with open_store(MemwovenStore, conn_string, index=index, ttl=ttl) as store:
            yield store


class AsyncSqliteStore(AsyncMemwovenStore):
    """LangGraph's `AsyncSqliteStore` constructor, giving an `AsyncMemwovenStore` on the test's backend."""

    @classmethod
    @asynccontextmanager
    async def from_conn_string(  # type: ignore[override]
        cls, conn_string: str, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None
    ) -> AsyncIterator[AsyncMemwovenStore]:
        store = open_store(AsyncMemwovenStore, conn_string, index=index, ttl=ttl)
        async with store:
            yield store  # type: ignore[misc]


PostgresStore = MemwovenStore
AsyncPostgresStore = AsyncMemwovenStore


class CharacterEmbeddings(Embeddings):
    """Simple character-frequency based embeddings using random projections (LangGraph's test embeddings)."""

    def __init__(self, dims: int = 50, seed: int = 42):
        """Initialize with embedding dimensions and random seed."""
        self._rng = random.Random(seed)
        self.dims = dims
        # Create projection vector for each character lazily
        self._char_projections: defaultdict[str, list[float]] = defaultdict(
            lambda: [self._rng.gauss(0, 1 / math.sqrt(self.dims)) for _ in range(self.dims)]
        )

    def _embed_one(self, text: str) -> list[float]:
        """Embed a single text."""
        counts = Counter(text)
        total = sum(counts.values())

        if total == 0:
            return [0.0] * self.dims

        embedding = [0.0] * self.dims
        for char, count in counts.items():
            weight = count / total
            char_proj = self._char_projections[char]
            for i, proj in enumerate(char_proj):
                embedding[i] += weight * proj

        norm = math.sqrt(sum(x * x for x in embedding))
        if norm > 0:
            embedding = [x / norm for x in embedding]

        return embedding

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed a list of documents."""
        return [self._embed_one(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        """Embed a query string."""
        return self._embed_one(text)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, CharacterEmbeddings) and self.dims == other.dims

    __hash__ = None  # type: ignore[assignment]
