"""Listing what a store holds: `vector_collections(url)`, `VectorMemory.ids()`, and backend options in URLs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pytest
import redis

from memwoven import InMemoryVectorMemory, InvalidInputError, SQLChatMemory, VectorDocument, VectorMemory
from memwoven.contracts import CollectionInfo, Filter
from memwoven.models import ScoredDocument
from memwoven.urls import open_chat_memory, open_vector_memory, vector_collections
from memwoven_test_support import postgres_url, redis_url, unique_name


def _fill(url: str) -> None:
    with open_vector_memory(url, collection="notes", dimension=3) as notes:
        notes.store([VectorDocument(id="a", embedding=[1.0, 0.0, 0.0])])
    with open_vector_memory(url, collection="dots", metric="dot") as dots:
        dots.store([VectorDocument(id="b", embedding=[0.0, 2.0])])
    with open_vector_memory(url, collection="empty", dimension=5):
        pass


EXPECTED = [CollectionInfo("dots", "dot", 2), CollectionInfo("notes", "cosine", 3)]


@pytest.fixture
def redis_place() -> Iterator[str]:
    prefix = unique_name("mwl")
    yield f"{redis_url()}?prefix={prefix}"
    client = redis.Redis.from_url(redis_url())
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def test_file_collections(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store"
    assert vector_collections(url) == []
    _fill(url)
    assert vector_collections(url) == [EXPECTED[0], CollectionInfo("empty", "cosine", 5), EXPECTED[1]]


def test_sqlite_collections_create_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    assert vector_collections(url) == []
    assert not (tmp_path / "store.db").exists()
    with SQLChatMemory(url) as chat:
        chat.append("s", [{"role": "user", "content": "hi"}])  # chat tables only
    assert vector_collections(url) == []
    _fill(url)
    assert vector_collections(url) == EXPECTED  # an SQL collection exists from its first use; "empty" had none
    assert vector_collections(url + "?table_prefix=other_") == []


def test_postgres_collections_and_url_options() -> None:
    prefix = unique_name("mwl") + "_"
    url = f"{postgres_url()}?table_prefix={prefix}"
    try:
        assert vector_collections(url) == []
        _fill(url)
        assert vector_collections(url) == EXPECTED
        assert vector_collections(postgres_url(), table_prefix=prefix) == EXPECTED
        with open_chat_memory(url) as chat:
            assert isinstance(chat, SQLChatMemory)
            assert chat.table_prefix == prefix
    finally:
        with SQLChatMemory(postgres_url(), table_prefix=prefix) as chat:
            chat.drop_tables()


def test_redis_collections(redis_place: str) -> None:
    assert vector_collections(redis_place) == []
    _fill(redis_place)  # a Redis collection exists from its first use: "empty" had none
    assert vector_collections(redis_place) == EXPECTED
    with open_chat_memory(redis_place) as chat:
        chat.append("s", [{"role": "user", "content": "hi"}])
        assert chat.sessions() == ["s"]
    assert vector_collections(redis_place) == EXPECTED


def test_qdrant_local_collections(tmp_path: Path) -> None:
    url = f"qdrant+local://{tmp_path}/q"
    _fill(url)  # a Qdrant collection exists from its first use with a dimension: "empty" had none
    assert vector_collections(url) == EXPECTED


def test_memory_urls_persist_no_collections() -> None:
    assert vector_collections("memory://") == []


def test_url_options_are_checked() -> None:
    with pytest.raises(InvalidInputError, match="both"):
        open_chat_memory("sqlite:///x.db?table_prefix=a_", table_prefix="b_")
    with pytest.raises(InvalidInputError, match="more than once"):
        open_chat_memory("redis://127.0.0.1:6379/0?prefix=a&prefix=b")
    with pytest.raises(InvalidInputError, match="table_prefix"):
        open_chat_memory("sqlite:///x.db?table_prefix=bad-prefix")


class _SearchOnly(VectorMemory):
    """A third-party backend that does not override `ids()`: the default lists through `search`."""

    def __init__(self) -> None:
        self.inner = InMemoryVectorMemory()

    @property
    def dimension(self) -> int | None:
        return self.inner.dimension

    def store(self, documents: Iterable[VectorDocument]) -> None:  # type: ignore[override]
        self.inner.store(documents)

    def search(
        self,
        embedding: Sequence[float],
        *,
        top_k: int = 4,
        threshold: float | None = None,
        filter: Filter | None = None,
    ) -> list[ScoredDocument]:
        return self.inner.search(embedding, top_k=top_k, threshold=threshold, filter=filter)

    def get(self, ids: Iterable[str]) -> list[VectorDocument]:
        return self.inner.get(ids)

    def delete(self, ids: Iterable[str]) -> None:
        self.inner.delete(ids)

    def count(self) -> int:
        return self.inner.count()

    def clear(self) -> None:
        self.inner.clear()


def test_the_default_ids_lists_through_search() -> None:
    memory = _SearchOnly()
    assert memory.ids() == []
    memory.store([VectorDocument(id=f"d{i}", embedding=[1.0, float(i)]) for i in range(7)])
    memory.store([VectorDocument(id="opposite", embedding=[-1.0, 0.0])])
    assert memory.ids() == sorted([f"d{i}" for i in range(7)] + ["opposite"])
    assert asyncio.run(memory.aids()) == memory.ids()
