"""Where the reliability tests keep their data: one `Store` per test, plain picklable data any process can open.

A `Store` names a backend kind and a place on it (a directory, a database URL and table prefix, a Redis key
prefix). `store.chat()` and `store.vector(collection)` open new memory objects over that same place, in this
process or in a child, so several objects (and processes) share the data. `store.cleanup()` removes exactly
what the test created: its tables, its keys, never anything else on the shared servers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memwoven import ChatMemory, InMemoryChatMemory, InMemoryVectorMemory, VectorMemory

CHAT_KINDS = ("memory", "file", "sqlite", "postgresql", "mariadb", "redis")
VECTOR_KINDS = ("memory", "file", "sqlite", "postgresql", "mariadb", "redis", "qdrant")
SHARED_KINDS = ("file", "sqlite", "postgresql", "mariadb", "redis")  # storage several processes can share
SERVER_KINDS = ("postgresql", "mariadb", "redis")

# An in-memory store has no place to reopen: every `Store` of kind "memory" keeps its objects here, keyed by its
# location, so "reopening" returns the very same object (closing it releases nothing).
_IN_PROCESS: dict[str, Any] = {}


@dataclass(frozen=True)
class Store:
    """One test's place on one backend: `kind`, `location` (a URL or directory) and a name `prefix`."""

    kind: str
    location: str
    prefix: str = ""

    def chat(self, **options: Any) -> ChatMemory:
        """A new chat memory object over this place."""
        if self.kind == "memory":
            return _IN_PROCESS.setdefault(f"{self.location}:chat", InMemoryChatMemory())  # type: ignore[no-any-return]
        if self.kind == "file":
            from memwoven import FileChatMemory

            return FileChatMemory(Path(self.location) / "chat", **options)
        if self.kind == "redis":
            from memwoven.backends.redis import RedisChatMemory

            return RedisChatMemory(self.location, prefix=self.prefix, **options)
        from memwoven import SQLChatMemory

        return SQLChatMemory(self.location, table_prefix=self.prefix, **options)

    def vector(self, collection: str = "c", dimension: int | None = None, **options: Any) -> VectorMemory:
        """A new object over the vector collection `collection` of this place."""
        if self.kind == "memory":
            key = f"{self.location}:vector:{collection}"
            return _IN_PROCESS.setdefault(key, InMemoryVectorMemory(dimension=dimension, **options))  # type: ignore[no-any-return]
        if self.kind == "qdrant":  # Qdrant's local in-memory mode: each object has its own private client
            from memwoven.backends.qdrant import QdrantVectorMemory

            return QdrantVectorMemory("qdrant+memory://", collection=collection, dimension=dimension, **options)
        if self.kind == "file":
            from memwoven import FileVectorMemory

            return FileVectorMemory(
                Path(self.location) / "vectors" / f"{collection}.npz", dimension=dimension, **options
            )
        if self.kind == "redis":
            from memwoven.backends.redis_vector import RedisVectorMemory

            return RedisVectorMemory(
                self.location, prefix=self.prefix, collection=collection, dimension=dimension, **options
            )
        from memwoven import SQLVectorMemory

        return SQLVectorMemory(
            self.location, table_prefix=self.prefix, collection=collection, dimension=dimension, **options
        )

    def cleanup(self) -> None:
        """Remove what this store created on a shared server (tables of its prefix, keys of its prefix)."""
        for key in [k for k in _IN_PROCESS if k.startswith(f"{self.location}:")]:
            del _IN_PROCESS[key]
        if self.kind in ("postgresql", "mariadb"):
            from memwoven import SQLChatMemory

            with SQLChatMemory(self.location, table_prefix=self.prefix) as memory:
                memory.drop_tables()
        elif self.kind == "redis":
            delete_redis_prefix(self.location, self.prefix)


def delete_redis_prefix(url: str, prefix: str) -> None:
    """Delete the keys of one prefix with SCAN + DEL (never FLUSH: the server is shared)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start : start + 1000])
    finally:
        client.close()


def store_for(kind: str, directory: Path, label: str = "mwr") -> Store:
    """A fresh place of `kind` for one test (skips, or fails in CI, when the kind's server is unreachable)."""
    from memwoven_test_support import mysql_url, postgres_url, redis_url, unique_name

    name = unique_name(label)
    if kind in ("memory", "qdrant"):
        return Store(kind, name)
    if kind == "file":
        return Store(kind, str(directory / name))
    if kind == "sqlite":
        return Store(kind, f"sqlite:///{directory / name}.db", "memwoven_")
    if kind == "postgresql":
        return Store(kind, postgres_url(), name + "_")
    if kind == "mariadb":
        return Store(kind, mysql_url(), name + "_")
    if kind == "redis":
        return Store(kind, redis_url(), name)
    raise ValueError(f"unknown backend kind {kind!r}")


@contextlib.contextmanager
def fresh_store(kind: str, directory: Path, label: str = "mwr") -> Iterator[Store]:
    """`store_for` as a context manager that cleans up afterwards."""
    store = store_for(kind, directory, label)
    try:
        yield store
    finally:
        store.cleanup()
