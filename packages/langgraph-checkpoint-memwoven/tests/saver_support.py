"""Where the checkpointer tests keep their items: `item_memory(kind, tmp_path)` opens an item memory of one backend
(memory, file, SQLite, PostgreSQL, MariaDB, Redis, Redis Cluster) on storage of its own and removes that storage
afterwards (SQL tables under a unique prefix dropped, Redis keys under a unique prefix deleted, never FLUSH)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from memwoven import ItemMemory, open_item_memory
from memwoven.encryption import EncryptedItemMemory, generate_key
from memwoven_test_support import mysql_url, postgres_url, redis_url, unique_name
from memwoven_test_support.redis_servers import redis_cluster

KINDS = ["memory", "file", "sqlite", "postgresql", "mariadb", "redis", "redis-cluster"]
SERVICES = {"postgresql", "mariadb", "redis", "redis-cluster"}


def kind_params(kinds: list[str] = KINDS) -> list[object]:
    """`kinds` as pytest params, the server ones marked `service`."""
    return [pytest.param(kind, marks=pytest.mark.service) if kind in SERVICES else kind for kind in kinds]


@contextmanager
def cluster() -> Iterator[str]:
    """A private Redis Cluster for one test module (its URL)."""
    with redis_cluster(3) as url:
        yield url


@contextmanager
def storage_url(kind: str, tmp_path: Path) -> Iterator[str]:
    """A URL naming fresh storage of `kind` (sqlite, postgresql, mariadb, redis), its table or key prefix in the
    query string so that another process opens the same; the storage is removed afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / unique_name('items')}.db"
        return
    server = {"postgresql": postgres_url, "mariadb": mysql_url, "redis": redis_url}[kind]()
    name = unique_name("lgcp")
    option = "prefix" if kind == "redis" else "table_prefix"
    url = f"{server}{'&' if '?' in server else '?'}{option}={name}{'' if kind == 'redis' else '_'}"
    try:
        yield url
    finally:
        items = open_item_memory(url)
        if kind == "redis":
            items.close()
            client = redis.Redis.from_url(server)
            keys = list(client.scan_iter(match=f"{name}:*", count=1000))
            if keys:
                client.delete(*keys)
            client.close()
        else:
            items.drop_tables()  # type: ignore[attr-defined]
            items.close()


@contextmanager
def item_memory(kind: str, tmp_path: Path, cluster_url: str = "") -> Iterator[ItemMemory]:
    """An item memory of `kind` on fresh storage, emptied and closed afterwards."""
    if kind == "memory":
        items = open_item_memory("memory://")
    elif kind == "file":
        items = open_item_memory(f"file://{tmp_path / unique_name('items')}")
    elif kind == "sqlite":
        items = open_item_memory(f"sqlite:///{tmp_path / unique_name('items')}.db")
    elif kind == "encrypted-sqlite":  # values encrypted at rest, thread ids and keys hashed
        inner = open_item_memory(f"sqlite:///{tmp_path / unique_name('items')}.db")
        items = EncryptedItemMemory(inner, key=generate_key(), id_key=generate_key())
    elif kind in ("postgresql", "mariadb"):
        url = postgres_url() if kind == "postgresql" else mysql_url()
        items = open_item_memory(url, table_prefix=unique_name("lgcp") + "_")
    else:
        url = redis_url() if kind == "redis" else cluster_url
        prefix = unique_name("lgcp")
        items = open_item_memory(url, prefix=prefix)
    try:
        yield items
    finally:
        if kind in ("postgresql", "mariadb"):
            items.drop_tables()  # type: ignore[attr-defined]
        items.close()
        if kind == "redis":
            client = redis.Redis.from_url(url)
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
            client.close()
