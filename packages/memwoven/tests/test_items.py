"""The ItemMemory contract (IM1-IM11) and the reference-model state machine on the in-memory backend, plus what
is particular to it and to the `Item` model."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from clock_support import Clock
from pydantic import ValidationError

from memwoven import InMemoryItemMemory, Item, ItemMemory, ItemWrite
from memwoven.contracts import check_namespace, namespace_matches
from memwoven.errors import InvalidInputError
from memwoven.testing import ItemMemoryContract


class TestInMemoryItemMemory(ItemMemoryContract):
    @pytest.fixture
    def item_memory(self, clock: Clock) -> ItemMemory:
        self.clock = clock
        return InMemoryItemMemory()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)


def test_the_async_twins_run_on_the_loop_and_are_named() -> None:
    memory = InMemoryItemMemory()
    assert not memory._blocking
    assert InMemoryItemMemory.aput.__name__ == "aput"
    assert InMemoryItemMemory.anamespaces.__doc__ == "Async twin of `namespaces`."

    async def use() -> tuple[int, int]:
        version = await memory.aput(("n",), "k", {"v": 1})
        return version, (await memory.aget(("n",), "k")).version  # type: ignore[union-attr]

    version, read = asyncio.run(use())
    assert version == read


def test_item_times_are_timezone_aware_utc() -> None:
    moment = datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    item = Item(namespace=("n",), key="k", value={"a": [1]}, version=1, created_at=moment, updated_at=moment)
    assert item.created_at == moment
    assert item.created_at.tzinfo == timezone.utc
    assert Item.model_validate_json(item.model_dump_json()) == item
    with pytest.raises(TypeError):
        item.value["a"].append(2)
    for bad in (
        {"created_at": datetime(2026, 1, 1)},
        {"namespace": ()},
        {"key": ""},
        {"version": 0},
        {"ttl": 0},
        {"ttl": float("inf")},
        {"value": {"x": float("nan")}},
    ):
        fields = {"namespace": ("n",), "key": "k", "value": {}, "version": 1, "created_at": moment}
        with pytest.raises(ValidationError):
            Item.model_validate({"updated_at": moment, **fields, **bad})


def test_namespace_matching_is_label_by_label() -> None:
    assert namespace_matches(("a", "b"), ("a",))
    assert not namespace_matches(("ab",), ("a",))
    assert namespace_matches(("a", "b", "c"), ("*", "b"), ("c",))
    assert not namespace_matches(("a",), (), ("a", "a"))
    assert namespace_matches(("*",), ("*",))
    assert check_namespace(["a", "b"]) == ("a", "b")
    assert check_namespace((), prefix=True) == ()
    with pytest.raises(InvalidInputError):
        check_namespace(())


def test_expired_items_are_freed_by_cleanup(clock: Clock) -> None:
    memory = InMemoryItemMemory()
    memory.put_many([ItemWrite(("n",), f"k{i}", {"i": i}, ttl=1) for i in range(3)])
    memory.put(("m",), "k", {"v": 1}, ttl=10)
    clock.advance(2)
    assert memory.namespaces() == [("m",)]
    assert memory.cleanup_expired() == 3
    assert memory._namespaces.keys() == {("m",)}  # the emptied namespace is gone too
    assert repr(memory) == "InMemoryItemMemory()"
