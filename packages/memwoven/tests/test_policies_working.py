"""WorkingMemory on every item memory: the scratchpad API, the stored layout, scopes and namespaces, persistence,
expiry, concurrent writers, async twins (through the item memory's), validation and damage."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clock_support import Clock
from policy_backends import ITEM_BACKENDS, AsyncOnly, items_fixture, reopen_items, run_together

from memwoven import (
    CorruptMemoryError,
    InMemoryChatMemory,
    InMemoryItemMemory,
    InvalidInputError,
    ItemMemory,
    SQLItemMemory,
)
from memwoven.policies import WORKING_ROOT, WorkingMemory


@pytest.fixture(params=ITEM_BACKENDS)
def items(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ItemMemory]:
    yield from items_fixture(request.param, tmp_path)


def test_the_scratchpad(items: ItemMemory) -> None:
    working = WorkingMemory(items, "agent-1")
    assert working.keys() == []
    assert working.get("missing", "default") == "default"
    assert not working.has("x")
    working.set("task", "book a table", importance=0.9)
    working.set("guests", 2)
    working.set("prefs", {"cuisine": ["thai", "sushi"], "budget": None})
    working.set("task", "book a table for two", importance=1.0)  # replaced in place
    assert working.keys() == ["task", "guests", "prefs"]
    assert working.to_dict() == {
        "task": "book a table for two",
        "guests": 2,
        "prefs": {"cuisine": ["thai", "sushi"], "budget": None},
    }
    prefs = working.get("prefs")
    prefs["cuisine"].append("mutable copy")  # values come back as plain, mutable copies
    assert working.get("prefs")["cuisine"] == ["thai", "sushi"]
    assert working.items()[1] == ("guests", 2)
    assert working.importance("guests") == 0.5
    assert working.delete("guests")
    assert not working.delete("guests")
    assert working.importance("guests") is None
    assert working.to_context_string() == (
        'Working memory:\n- task: book a table for two\n- prefs: {"cuisine": ["thai", "sushi"], "budget": null}'
    )
    assert working.to_context_string(min_importance=0.95) == "Working memory:\n- task: book a table for two"
    assert working.to_context_string(max_items=1, title="Now:") == "Now:\n- task: book a table for two"
    working.set("guests", 3)  # deleted, then set again: a new entry, last
    assert working.keys() == ["task", "prefs", "guests"]
    working.clear()
    assert working.to_dict() == {}
    assert working.to_context_string() == ""
    assert items.count() == 0


def test_one_item_per_entry(items: ItemMemory) -> None:
    working = WorkingMemory(items, "agent", namespace=("tenant-1",))
    assert working.namespace == (*WORKING_ROOT, "tenant-1", "agent") == ("memwoven", "working", "tenant-1", "agent")
    working.set("task", {"what": "book"}, importance=0.75)
    first = items.get(working.namespace, "task")
    assert first is not None
    assert first.value["value"] == {"what": "book"}
    assert first.value["importance"] == 0.75
    working.set("task", "booked")
    second = items.get(working.namespace, "task")
    assert second is not None
    assert second.value["order"] == first.value["order"]  # its place is kept
    assert second.version > first.version
    assert second.created_at == first.created_at
    working.set("other", 1)
    assert [item.key for item in items.list()] == ["other", "task"]  # nothing else is stored
    assert items.namespaces() == [working.namespace]


def test_scopes_and_namespaces_never_see_each_other(items: ItemMemory) -> None:
    first, second = WorkingMemory(items, "a"), WorkingMemory(items, "b")
    nested = WorkingMemory(items, "x", namespace=("a",))  # its namespace lies under first's
    tenant = WorkingMemory(items, "a", namespace=("t",))
    for value, working in enumerate((first, second, nested, tenant)):
        working.set("k", value)
    assert [w.get("k") for w in (first, second, nested, tenant)] == [0, 1, 2, 3]
    assert first.keys() == ["k"]
    first.clear()
    assert (first.to_dict(), second.to_dict(), nested.to_dict(), tenant.to_dict()) == ({}, {"k": 1}, {"k": 2}, {"k": 3})
    other = reopen_items(items)
    assert WorkingMemory(other, "b").get("k") == 1  # persisted, seen through another object
    assert WorkingMemory(other, "x", namespace=("a",)).keys() == ["k"]
    if other is not items:
        other.close()


def test_async_twins(items: ItemMemory) -> None:
    async def scenario() -> None:
        working = WorkingMemory(items, "async")
        await working.aset("step", 1, importance=0.2)
        await working.aset("plan", ["a", "b"])
        assert await working.aget("step") == 1
        assert await working.ahas("plan")
        assert await working.akeys() == ["step", "plan"]
        assert await working.aimportance("step") == 0.2
        assert await working.aitems() == [("step", 1), ("plan", ["a", "b"])]
        assert await working.ato_dict() == {"step": 1, "plan": ["a", "b"]}
        assert (await working.ato_context_string()).startswith("Working memory:\n- plan:")
        assert await working.adelete("step")
        assert not await working.adelete("step")
        await working.aclear()
        assert await working.ato_dict() == {}

    asyncio.run(scenario())


def test_the_async_twins_use_the_item_memorys_async_twins() -> None:
    working = WorkingMemory(AsyncOnly(), "s")

    async def scenario() -> dict[str, Any]:
        await working.aset("a", 1)
        await working.aset("a", 2)
        assert await working.aget("a") == 2
        await working.adelete("a")
        await working.aset("b", [1])
        return await working.ato_dict()

    assert asyncio.run(scenario()) == {"b": [1]}
    with pytest.raises(AssertionError):
        working.keys()


def test_entries_expire(clock: Clock) -> None:
    items = InMemoryItemMemory()
    working = WorkingMemory(items, "s", ttl=60)
    working.set("short", 1, ttl=5)
    working.set("default", 2)
    clock.advance(30)
    working.set("default", 3)  # a set starts the window again
    assert working.keys() == ["default"]
    assert working.get("short") is None
    clock.advance(40)
    assert working.to_dict() == {"default": 3}
    clock.advance(30)
    assert working.to_dict() == {}
    assert WorkingMemory(items, "forever").ttl is None
    with pytest.raises(InvalidInputError):
        WorkingMemory(items, "s", ttl=0)
    with pytest.raises(InvalidInputError):
        working.set("k", 1, ttl=-1)


def test_entries_expire_in_sql(clock: Clock, tmp_path: Path) -> None:
    with SQLItemMemory(f"sqlite:///{tmp_path}/ttl.db") as items:
        working = WorkingMemory(items, "s")
        working.set("k", 1, ttl=10)
        working.set("kept", 2)
        clock.advance(11)
        assert working.keys() == ["kept"]
        assert items.cleanup_expired() == 1


def test_concurrent_writers_lose_nothing(items: ItemMemory) -> None:
    working = WorkingMemory(items, "shared")

    def write(writer: int) -> None:
        for i in range(15):
            working.set(f"{writer}-{i}", i)  # a key of its own
            working.set("shared", writer)  # and one all of them rewrite

    run_together(4, write)
    entries = working.to_dict()
    assert len(entries) == 61
    assert all(entries[f"{w}-{i}"] == i for w in range(4) for i in range(15))
    assert entries["shared"] in range(4)
    assert working.keys().index("shared") <= 4  # set early (after at most each first key), then kept in place
    assert items.count() == 61


def test_values_keys_importance_and_options_are_validated() -> None:
    items = InMemoryItemMemory()
    working = WorkingMemory(items, "v")
    for bad in (float("nan"), object(), b"bytes", (1, 2), {1: "non-string key"}):
        with pytest.raises(InvalidInputError):
            working.set("k", bad)
    for importance in (-0.1, 1.5, True, "high"):
        with pytest.raises(InvalidInputError):
            working.set("k", 1, importance=importance)  # type: ignore[arg-type]
    for key in ("", "nul\x00"):
        with pytest.raises(InvalidInputError):
            working.set(key, 1)
        with pytest.raises(InvalidInputError):
            working.get(key)
    with pytest.raises(InvalidInputError):
        WorkingMemory(items, "")
    with pytest.raises(InvalidInputError):
        WorkingMemory(items, "s", namespace="memwoven:working:")  # labels, not a string
    with pytest.raises(InvalidInputError):
        WorkingMemory(items, "s", namespace=("",))
    with pytest.raises(TypeError, match="ItemMemory"):
        WorkingMemory(InMemoryChatMemory(), "s")  # type: ignore[arg-type]
    assert items.count() == 0


def test_a_foreign_item_in_a_scope_is_reported() -> None:
    items = InMemoryItemMemory()
    working = WorkingMemory(items, "x")
    working.set("fine", 1)
    items.put(working.namespace, "stranger", {"not": "an entry"})
    with pytest.raises(CorruptMemoryError):
        working.keys()
    with pytest.raises(CorruptMemoryError):
        working.get("stranger")
    items.put(working.namespace, "stranger", {"value": 1, "importance": 0.5, "order": "first"})
    with pytest.raises(CorruptMemoryError):
        working.to_dict()
    working.clear()  # a scope can always be cleared
    assert items.count() == 0
