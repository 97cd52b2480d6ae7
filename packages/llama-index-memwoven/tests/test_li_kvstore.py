"""MemwovenKVStore on every item backend (in-memory, SQLite, PostgreSQL, MariaDB).

The first group runs the scenarios of LlamaIndex's own key-value store tests against it, rewritten here with only
the construction changed (the source of each is named; llama_index is MIT-licensed, (c) Jerry Liu and LlamaIndex
contributors): llama-index-core's tests/storage/kvstore/test_simple_kvstore.py and test_mutable_mapping_kvstore.py,
and llama-index-storage-kvstore-postgres's tests/test_postgres.py. `persist` / `to_dict` belong to the in-memory
store; their tests become a reload from a second object over the same storage. The rest is memwoven's part: exact
JSON round trips, collections and namespace prefixes as boundaries, batches through `put_many`, validation before
any write, and the async methods running on the item memory's async twins only.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from li_item_spy import spy
from llama_index.core.storage.kvstore.types import BaseKVStore

from llama_index.storage.kvstore.memwoven import MemwovenKVStore
from memwoven import InMemoryItemMemory, ItemMemory
from memwoven.errors import InvalidInputError


@pytest.fixture
def kvstore(item_memory: ItemMemory) -> MemwovenKVStore:
    return MemwovenKVStore(item_memory)


# LlamaIndex's own key-value store tests ----------------------------------------------------------------------


def test_kvstore_basic(kvstore: MemwovenKVStore) -> None:
    """test_simple_kvstore.py::test_kvstore_basic, and the postgres store's test_kvstore_basic."""
    kvstore.put("test_key", {"test_obj_key": "test_obj_val"})
    assert kvstore.get("test_key") == {"test_obj_key": "test_obj_val"}
    assert kvstore.get("test_key", collection="non_existent") is None
    assert kvstore.delete("test_key")


def test_kvstore_persist(item_memory: ItemMemory, reopen_items: ItemMemory) -> None:
    """test_simple_kvstore.py::test_kvstore_persist and ::test_kvstore_dict: what one store object wrote, another
    over the same storage reads (there is nothing to persist: every write is stored)."""
    MemwovenKVStore(item_memory).put("test_key", {"test_obj_key": "test_obj_val"})
    loaded = MemwovenKVStore(reopen_items)
    assert len(loaded.get_all()) == 1
    assert loaded.get("test_key") == {"test_obj_key": "test_obj_val"}


def test_is_a_kvstore(kvstore: MemwovenKVStore) -> None:
    """test_mutable_mapping_kvstore.py::test_simple_kvstore."""
    assert isinstance(kvstore, BaseKVStore)
    kvstore.put(key="foo", val={"foo": "bar"})
    assert kvstore.get_all() == {"foo": {"foo": "bar"}}


def test_sync_methods(kvstore: MemwovenKVStore) -> None:
    """test_mutable_mapping_kvstore.py::test_sync_methods."""
    kvstore.put(key="foo", val={"foo": "bar"})
    assert kvstore.get("foo") == {"foo": "bar"}
    assert kvstore.get("bar") is None
    kvstore.put(key="bar", val={"bar": "foo"})
    assert kvstore.get_all() == {"foo": {"foo": "bar"}, "bar": {"bar": "foo"}}
    kvstore.delete(key="bar")
    assert kvstore.get_all() == {"foo": {"foo": "bar"}}


def test_async_methods(kvstore: MemwovenKVStore) -> None:
    """test_mutable_mapping_kvstore.py::test_async_methods."""

    async def scenario() -> None:
        await kvstore.aput(key="foo", val={"foo": "bar"})
        assert await kvstore.aget("foo") == {"foo": "bar"}
        assert await kvstore.aget("bar") is None
        await kvstore.aput(key="bar", val={"bar": "foo"})
        assert await kvstore.aget_all() == {"foo": {"foo": "bar"}, "bar": {"bar": "foo"}}
        await kvstore.adelete(key="bar")
        assert await kvstore.aget_all() == {"foo": {"foo": "bar"}}

    asyncio.run(scenario())


def test_kvstore_async_basic(kvstore: MemwovenKVStore) -> None:
    """The postgres store's test_kvstore_async_basic."""

    async def scenario() -> None:
        await kvstore.aput("test_key_basic", {"test_obj_key": "test_obj_val"})
        assert await kvstore.aget("test_key_basic") == {"test_obj_key": "test_obj_val"}
        assert await kvstore.aget("test_key_basic", collection="non_existent") is None
        assert await kvstore.adelete("test_key_basic")

    asyncio.run(scenario())


def test_kvstore_delete(kvstore: MemwovenKVStore) -> None:
    """The postgres store's test_kvstore_delete (plus: a second delete finds nothing)."""
    kvstore.put("test_key_delete", {"test_obj_key": "test_obj_val"})
    assert kvstore.get("test_key_delete") == {"test_obj_key": "test_obj_val"}
    assert kvstore.delete("test_key_delete")
    assert kvstore.get("test_key_delete") is None
    assert not kvstore.delete("test_key_delete")


def test_kvstore_adelete(kvstore: MemwovenKVStore) -> None:
    """The postgres store's test_kvstore_adelete."""

    async def scenario() -> None:
        await kvstore.aput("test_key_delete", {"test_obj_key": "test_obj_val"})
        assert await kvstore.aget("test_key_delete") == {"test_obj_key": "test_obj_val"}
        assert await kvstore.adelete("test_key_delete")
        assert await kvstore.aget("test_key_delete") is None
        assert not await kvstore.adelete("test_key_delete")

    asyncio.run(scenario())


def test_kvstore_getall(kvstore: MemwovenKVStore) -> None:
    """The postgres store's test_kvstore_getall."""
    kvstore.put("test_key_1", {"test_obj_key": "test_obj_val"})
    assert kvstore.get("test_key_1") == {"test_obj_key": "test_obj_val"}
    kvstore.put("test_key_2", {"test_obj_key": "test_obj_val"})
    assert kvstore.get("test_key_2") == {"test_obj_key": "test_obj_val"}
    assert len(kvstore.get_all()) == 2
    kvstore.delete("test_key_1")
    kvstore.delete("test_key_2")
    assert kvstore.get_all() == {}


def test_kvstore_agetall(kvstore: MemwovenKVStore) -> None:
    """The postgres store's test_kvstore_agetall."""

    async def scenario() -> None:
        await kvstore.aput("test_key_1", {"test_obj_key": "test_obj_val"})
        assert await kvstore.aget("test_key_1") == {"test_obj_key": "test_obj_val"}
        await kvstore.aput("test_key_2", {"test_obj_key": "test_obj_val"})
        assert await kvstore.aget("test_key_2") == {"test_obj_key": "test_obj_val"}
        assert len(await kvstore.aget_all()) == 2
        await kvstore.adelete("test_key_1")
        await kvstore.adelete("test_key_2")
        assert await kvstore.aget_all() == {}

    asyncio.run(scenario())


def test_kvstore_putall(kvstore: MemwovenKVStore) -> None:
    """The postgres store's test_kvstore_putall (async), and the same through the sync `put_all`."""
    pairs = [("test_key_putall_1", {"test_obj_key": "test_obj_val"}), ("test_key_putall_2", {"k2": "v2"})]

    async def scenario() -> None:
        await kvstore.aput_all(pairs)
        assert await kvstore.aget("test_key_putall_1") == {"test_obj_key": "test_obj_val"}
        assert await kvstore.aget("test_key_putall_2") == {"k2": "v2"}

    asyncio.run(scenario())
    kvstore.put_all(pairs, collection="sync")
    assert kvstore.get_all("sync") == dict(pairs)


# memwoven's part ---------------------------------------------------------------------------------------------

VALUES: list[dict[str, Any]] = [
    {},
    {"__data__": {"id_": "n1", "text": "héllo 🌍", "metadata": {"page": 3, "score": 0.25}}, "__type__": "1"},
    {"nested": {"deep": [1, [2, {"x": None}], True, -0.5]}, "big": 2**62, "empty": {"": []}},
    {"a.b": 1, "a": {"b": 2}, "quote\"'\\": "\n\t\x01"},
]


@pytest.mark.parametrize("value", VALUES)
def test_values_read_back_equal_and_fresh(kvstore: MemwovenKVStore, value: dict[str, Any]) -> None:
    kvstore.put("k", value)
    read = kvstore.get("k")
    assert read == value
    assert type(read) is dict
    assert kvstore.get_all() == {"k": value}
    assert read is not None
    read["added"] = 1  # LlamaIndex edits what it reads (the docstore pops legacy fields): that is a copy
    assert kvstore.get("k") == value


def test_put_replaces_the_whole_value(kvstore: MemwovenKVStore) -> None:
    kvstore.put("k", {"a": 1, "b": 2})
    kvstore.put("k", {"c": 3})
    assert kvstore.get("k") == {"c": 3}


def test_collections_are_separate(kvstore: MemwovenKVStore) -> None:
    kvstore.put("k", {"in": "one"}, collection="docstore/data")
    kvstore.put("k", {"in": "two"}, collection="docstore/metadata")
    assert kvstore.get("k", collection="docstore/data") == {"in": "one"}
    assert kvstore.delete("k", collection="docstore/metadata")
    assert kvstore.get_all("docstore/metadata") == {}
    assert kvstore.get_all("docstore/data") == {"k": {"in": "one"}}
    assert kvstore.get_all("docstore") == {}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ((), ("tenant1",)),
        (("tenant1",), ("tenant10",)),
        (("tenant1",), ("tenant1", "x")),
        (("t",), ("t", "data")),  # the second's collection "data" is a namespace below the first's "data"
        (("a:b",), ("a", "b")),
    ],
)
def test_namespace_prefixes_never_meet(
    item_memory: ItemMemory, first: tuple[str, ...], second: tuple[str, ...]
) -> None:
    one, two = (
        MemwovenKVStore(item_memory, namespace_prefix=first),
        MemwovenKVStore(item_memory, namespace_prefix=second),
    )
    one.put("k", {"owner": "one"})
    two.put_all([("k", {"owner": "two"}), ("only-two", {"owner": "two"})])
    assert one.get_all() == {"k": {"owner": "one"}}
    assert two.get_all() == {"k": {"owner": "two"}, "only-two": {"owner": "two"}}
    assert asyncio.run(one.aget_all()) == {"k": {"owner": "one"}}
    assert one.get("only-two") is None
    assert not one.delete("only-two")
    assert two.delete("k")
    assert one.get("k") == {"owner": "one"}


def test_items_are_where_the_mapping_says(item_memory: ItemMemory) -> None:
    store = MemwovenKVStore(item_memory, namespace_prefix=["app", "llama"])
    assert store.namespace_prefix == ("app", "llama")
    store.put("node-1", {"text": "hi"}, collection="docstore/data")
    item = item_memory.get(("app", "llama", "docstore/data"), "node-1")
    assert item is not None
    assert item.value == {"text": "hi"}
    assert store.items is item_memory


def test_put_all_writes_batches_through_put_many(item_memory: ItemMemory) -> None:
    store = MemwovenKVStore(item_memory)
    calls = spy(item_memory)
    pairs = [(f"k{i}", {"i": i}) for i in range(5)]
    store.put_all(pairs, batch_size=2)
    assert [(name, len(writes)) for name, writes in calls] == [("put_many", 2), ("put_many", 2), ("put_many", 1)]
    calls.clear()
    asyncio.run(store.aput_all(pairs, collection="c", batch_size=4))
    assert [(name, len(writes)) for name, writes in calls] == [("aput_many", 4), ("aput_many", 1)]
    assert store.get_all() == store.get_all("c") == {key: value for key, value in pairs}
    calls.clear()
    store.put_all([])
    assert calls == []


def test_put_all_keeps_the_last_value_of_a_repeated_key(kvstore: MemwovenKVStore) -> None:
    kvstore.put_all([("a", {"v": 1}), ("b", {"v": 2}), ("a", {"v": 3})], batch_size=1)
    assert kvstore.get_all() == {"a": {"v": 3}, "b": {"v": 2}}
    asyncio.run(kvstore.aput_all([("c", {"v": 1}), ("c", {"v": 2})], batch_size=10))
    assert kvstore.get("c") == {"v": 2}


def test_async_methods_run_on_the_async_twins(item_memory: ItemMemory) -> None:
    store = MemwovenKVStore(item_memory, namespace_prefix=("p",))
    calls = spy(item_memory)

    async def scenario() -> None:
        await store.aput("k", {"v": 1})
        await store.aput_all([("k2", {"v": 2})])
        assert await store.aget("k") == {"v": 1}
        assert await store.aget_all() == {"k": {"v": 1}, "k2": {"v": 2}}
        assert await store.adelete("k")

    asyncio.run(scenario())
    assert [name for name, _ in calls] == ["aput", "aput_many", "aget", "alist", "adelete"]
    calls.clear()
    store.put("k", {"v": 1})
    store.get("k")
    store.get_all()
    store.delete("k")
    assert [name for name, _ in calls] == ["put", "get", "list", "delete"]


BAD_VALUES: list[Any] = [["not", "an", "object"], "text", None, {"x": {1, 2}}, {"x": float("nan")}, {1: "int key"}]


@pytest.mark.parametrize("value", BAD_VALUES)
def test_values_that_are_no_json_object_are_refused(kvstore: MemwovenKVStore, value: Any) -> None:
    with pytest.raises(InvalidInputError):
        kvstore.put("k", value)
    with pytest.raises(InvalidInputError):
        asyncio.run(kvstore.aput("k", value))
    assert kvstore.get_all() == {}


@pytest.mark.parametrize("bad", [("", {"v": 1}), ("k\x00", {"v": 1}), ("k", {"x": {1, 2}}), ("k",), "k"])
def test_put_all_validates_every_pair_before_the_first_batch(kvstore: MemwovenKVStore, bad: Any) -> None:
    pairs = [*[(f"k{i}", {"i": i}) for i in range(6)], bad]
    with pytest.raises(InvalidInputError):
        kvstore.put_all(pairs, batch_size=2)
    with pytest.raises(InvalidInputError):
        asyncio.run(kvstore.aput_all(pairs, batch_size=2))
    assert kvstore.get_all() == {}


@pytest.mark.parametrize("batch_size", [0, -1, 1.5, True, "2"])
def test_a_bad_batch_size_is_refused(kvstore: MemwovenKVStore, batch_size: Any) -> None:
    with pytest.raises(InvalidInputError, match="batch_size"):
        kvstore.put_all([("k", {"v": 1})], batch_size=batch_size)
    assert kvstore.get_all() == {}


def test_bad_keys_and_collections_are_refused(kvstore: MemwovenKVStore) -> None:
    for call in (
        lambda: kvstore.put("", {"v": 1}),
        lambda: kvstore.put("k", {"v": 1}, collection=""),
        lambda: kvstore.get("k\x00"),
        lambda: kvstore.get_all(collection=""),
        lambda: kvstore.delete("", collection="c"),
    ):
        with pytest.raises(InvalidInputError):
            call()
    assert kvstore.get_all() == {}


@pytest.mark.parametrize("prefix", ["tenant", ("",), ("a\x00",), [1]])
def test_a_bad_namespace_prefix_is_refused(prefix: Any) -> None:
    with pytest.raises(InvalidInputError, match="namespace_prefix"):
        MemwovenKVStore(InMemoryItemMemory(), namespace_prefix=prefix)


def test_it_needs_an_item_memory() -> None:
    with pytest.raises(InvalidInputError, match="ItemMemory"):
        MemwovenKVStore({})  # type: ignore[arg-type]


def test_close_closes_the_item_memory(item_memory: ItemMemory) -> None:
    store = MemwovenKVStore(item_memory)
    calls: list[str] = []
    item_memory.close = lambda: calls.append("close")  # type: ignore[method-assign]
    store.close()
    assert calls == ["close"]
    assert "MemwovenKVStore(" in repr(store)
