"""`MemwovenStore.from_url` / `AsyncMemwovenStore.from_url`: items opened by `open_item_memory`, the vectors at the
same URL, the URL's options applied; what one store writes, another opened from the same URL reads."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa

from langgraph.store.memwoven import AsyncMemwovenStore, MemwovenStore
from memwoven import InMemoryItemMemory, InvalidInputError, SQLItemMemory
from memwoven.embed import HashingEmbedFn

EMBED = HashingEmbedFn(32)


def test_sqlite_with_an_index_and_the_url_options(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.db?table_prefix=lg_"
    index = {"dims": EMBED.dimension, "embed": EMBED}
    with MemwovenStore.from_url(url, index=index, indexed_fields=["kind"]) as store:  # type: ignore[arg-type]
        assert isinstance(store.items, SQLItemMemory)
        assert store.items.table_prefix == "lg_"
        assert store.items.indexed_fields == ("kind",)  # the item memory's own option: not the vectors' too
        assert store.vectors is not None
        store.put(("users", "u1"), "tea", {"text": "Alice drinks green tea"})
        store.put(("users", "u1"), "bike", {"text": "Alice rides a red bicycle"})
    with MemwovenStore.from_url(url, index=index) as again:  # type: ignore[arg-type]
        found = again.get(("users", "u1"), "tea")
        assert found is not None
        assert found.value == {"text": "Alice drinks green tea"}
        hits = again.search(("users",), query="green tea", limit=1)
        assert [hit.key for hit in hits] == ["tea"]
        assert [item.key for item in again.search((), filter={"text": "Alice drinks green tea"})] == ["tea"]
    with sa.create_engine(f"sqlite:///{tmp_path}/store.db").connect() as connection:
        tables = sa.inspect(connection).get_table_names()
        listed = connection.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'index'")
        indexes = {name for (name,) in listed}
    assert "lg_items" in tables
    assert any(name.startswith("lg_items_field_") for name in indexes)
    assert not any(table.startswith("memwoven_") for table in tables)


def test_async_store_from_url(tmp_path: Path) -> None:
    async def run() -> None:
        store = AsyncMemwovenStore.from_url(f"sqlite:///{tmp_path}/async.db", table_prefix="a_")
        async with store:
            assert isinstance(store, AsyncMemwovenStore)
            await store.aput(("n",), "k", {"v": 1})
            item = await store.aget(("n",), "k")
            assert item is not None
            assert item.value == {"v": 1}

    asyncio.run(run())
    with MemwovenStore.from_url(f"sqlite:///{tmp_path}/async.db?table_prefix=a_") as sync:
        assert [item.key for item in sync.search(("n",))] == ["k"]


def test_memory_and_refusals(tmp_path: Path) -> None:
    with MemwovenStore.from_url("memory://") as store:
        assert isinstance(store.items, InMemoryItemMemory)
    with pytest.raises(InvalidInputError, match="vectors only"):
        MemwovenStore.from_url("qdrant+memory://")
    with pytest.raises(InvalidInputError, match="unsupported scheme"):
        MemwovenStore.from_url("nosuch://x")
    with pytest.raises(InvalidInputError, match="table_prefix"):
        MemwovenStore.from_url("memory://", table_prefix="x_")
    with pytest.raises(InvalidInputError, match="must be a string"):
        MemwovenStore.from_url(None)  # type: ignore[arg-type]
    bad_index = {"dims": 0, "embed": EMBED}
    with pytest.raises(InvalidInputError, match="dimension must be a positive int"):
        MemwovenStore.from_url(f"sqlite:///{tmp_path}/never.db", index=bad_index)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []  # refused before anything was created
