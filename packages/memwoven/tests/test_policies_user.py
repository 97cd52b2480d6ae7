"""UserMemory on every item memory: dedupe by key, the cap (archived), delete, extraction, rendering, the stored
layout, users and namespaces apart, concurrent adders, async twins (through the item memory's) and damage."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from policy_backends import ITEM_BACKENDS, AsyncOnly, items_fixture, reopen_items, run_together

from memwoven import CorruptMemoryError, InMemoryChatMemory, InMemoryItemMemory, InvalidInputError, ItemMemory, Message
from memwoven.policies import USER_ROOT, UserMemory, fact_key, normalize_fact


@pytest.fixture(params=ITEM_BACKENDS)
def items(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ItemMemory]:
    yield from items_fixture(request.param, tmp_path)


def test_facts_dedupe_cap_and_delete(items: ItemMemory) -> None:
    user = UserMemory(items, "alice", max_facts=3)
    assert user.add("Prefers tea over coffee")
    assert not user.add("  prefers TEA over   coffee ")  # the same fact, ignoring case and spacing
    assert user.add_many(["Lives in Lyon", "lives in lyon", "Has a cat named Miso", ""]) == [
        "Lives in Lyon",
        "Has a cat named Miso",
    ]
    assert user.add("Works as a nurse")  # past the cap: the oldest fact goes to the archive
    assert user.facts() == ["Lives in Lyon", "Has a cat named Miso", "Works as a nurse"]
    assert user.archived() == ["Prefers tea over coffee"]
    assert user.has("HAS A CAT NAMED MISO")
    assert user.delete("has a cat named miso")
    assert not user.delete("nope")
    assert user.to_context_string() == "Known facts about the user:\n- Lives in Lyon\n- Works as a nurse"
    assert user.to_context_string(max_facts=1, title="About Alice:") == "About Alice:\n- Works as a nurse"
    other = reopen_items(items)
    assert UserMemory(other, "alice").facts() == ["Lives in Lyon", "Works as a nurse"]  # across sessions/objects
    if other is not items:
        other.close()
    assert UserMemory(items, "bob").facts() == []  # users do not see each other
    user.clear()
    assert user.facts() == []
    assert user.to_context_string() == ""
    assert user.archived() == ["Prefers tea over coffee"]


def test_one_item_per_fact_keyed_by_its_normal_form(items: ItemMemory) -> None:
    user = UserMemory(items, "u", namespace=("tenant-1",), max_facts=1)
    assert user.namespace == (*USER_ROOT, "tenant-1", "u", "facts") == ("memwoven", "user", "tenant-1", "u", "facts")
    assert user.archive_namespace == ("memwoven", "user", "tenant-1", "u", "archive")
    user.add("Likes  Jazz")
    assert fact_key("likes jazz") == fact_key(" LIKES\tjazz ") != fact_key("likes jaz")
    stored = items.get(user.namespace, fact_key("likes jazz"))
    assert stored is not None
    assert stored.value["fact"] == "Likes Jazz"  # whitespace collapsed, case kept
    user.add("Plays chess")
    assert [item.key for item in items.list(user.archive_namespace)] == [fact_key("likes jazz")]
    assert items.namespaces() == [user.archive_namespace, user.namespace]
    assert user.add("likes jazz")  # archived facts are not known ones
    assert user.archived() == ["Likes Jazz", "Plays chess"]
    assert user.facts() == ["likes jazz"]


def test_users_and_namespaces_never_see_each_other(items: ItemMemory) -> None:
    alice, bob = UserMemory(items, "alice"), UserMemory(items, "bob")
    nested = UserMemory(items, "x", namespace=("alice", "facts"))  # its namespaces lie under alice's facts
    tenant = UserMemory(items, "alice", namespace=("t",))
    for user in (alice, bob, nested, tenant):
        user.add(f"I am {user.user_id} in {user.namespace}")
    assert [len(user.facts()) for user in (alice, bob, nested, tenant)] == [1, 1, 1, 1]
    alice.clear()
    assert alice.facts() == []
    assert [len(user.facts()) for user in (bob, nested, tenant)] == [1, 1, 1]
    assert UserMemory(items, "alice:archive").facts() == []


def test_learning_with_an_extractor_sync_and_async() -> None:
    def extract(messages: list[Message]) -> list[str]:
        return [m.text.removeprefix("I ").capitalize() for m in messages if m.role == "user" and "I " in m.text]

    async def aextract(messages: list[Message]) -> list[str]:
        return extract(messages)

    chat = [Message(role="user", content="I like jazz"), Message(role="assistant", content="Noted.")]
    user = UserMemory(InMemoryItemMemory(), "u", extractor=extract)
    assert user.learn(chat) == ["Like jazz"]
    assert user.learn(chat) == []
    assert asyncio.run(user.alearn([Message(role="user", content="I run marathons")])) == ["Run marathons"]
    async_user = UserMemory(InMemoryItemMemory(), "u", extractor=aextract)
    assert async_user.learn(chat) == ["Like jazz"]  # an async extractor from sync code
    with pytest.raises(InvalidInputError):
        UserMemory(InMemoryItemMemory(), "u").learn(chat)


def test_async_twins(items: ItemMemory) -> None:
    async def scenario() -> None:
        user = UserMemory(items, "carol", max_facts=2, archive=False)
        assert await user.aadd("Speaks French")
        assert not await user.aadd("speaks french")
        assert await user.aadd_many(["Born in 1990", "Vegetarian"]) == ["Born in 1990", "Vegetarian"]
        assert await user.afacts() == ["Born in 1990", "Vegetarian"]
        assert await user.aarchived() == []  # archive=False: the dropped fact is gone
        assert await user.ahas("vegetarian")
        assert await user.adelete("Vegetarian")
        assert await user.ato_context_string() == "Known facts about the user:\n- Born in 1990"
        await user.aclear()
        assert await user.afacts() == []

    asyncio.run(scenario())
    assert items.count() == 0


def test_the_async_twins_use_the_item_memorys_async_twins() -> None:
    async def aextract(messages: list[Message]) -> list[str]:
        return [m.text for m in messages]

    user = UserMemory(AsyncOnly(), "u", max_facts=2, extractor=aextract)

    async def scenario() -> tuple[list[str], list[str]]:
        assert await user.aadd_many(["a", "b", "c"]) == ["a", "b", "c"]
        assert await user.alearn([Message(role="user", content="d")]) == ["d"]
        assert await user.ahas("c")
        assert await user.adelete("c")
        return await user.afacts(), await user.aarchived()

    assert asyncio.run(scenario()) == (["d"], ["a", "b"])
    with pytest.raises(AssertionError):
        user.facts()


def test_past_the_cap_in_one_call() -> None:
    user = UserMemory(InMemoryItemMemory(), "dave", max_facts=6)
    assert user.add_many([f"fact {i}" for i in range(8)]) == [f"fact {i}" for i in range(8)]
    assert user.facts() == [f"fact {i}" for i in range(2, 8)]
    assert user.archived() == ["fact 0", "fact 1"]


def test_concurrent_adders_store_each_fact_once(items: ItemMemory) -> None:
    user = UserMemory(items, "shared")
    added: list[str] = []

    def work(worker: int) -> None:
        for i in range(12):
            added.extend(user.add_many([f"shared {i}", f"SHARED  {i + 1}", f"own {worker}-{i}"]))

    run_together(4, work)
    shared = [normalize_fact(fact) for fact in added if normalize_fact(fact).startswith("shared")]
    assert sorted(shared) == sorted(f"shared {i}" for i in range(13))  # each added by exactly one writer
    assert len(added) == 13 + 48
    assert sorted(user.facts()) == sorted(added)
    assert items.count() == 61


def test_concurrent_adders_past_the_cap_lose_nothing(items: ItemMemory) -> None:
    user = UserMemory(items, "capped", max_facts=10)
    run_together(4, lambda worker: [user.add(f"fact {worker}-{i}") for i in range(10)])
    facts, archived = user.facts(), user.archived()
    assert 0 < len(facts) <= 10
    assert not set(facts) & set(archived)
    assert sorted(facts + archived) == sorted(f"fact {w}-{i}" for w in range(4) for i in range(10))


def test_validation() -> None:
    items = InMemoryItemMemory()
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InvalidInputError):
            UserMemory(items, "u", max_facts=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        UserMemory(items, "u").add_many("a single string")
    with pytest.raises(InvalidInputError):
        UserMemory(items, "u").add_many(["fine", 42])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError):
        UserMemory(items, "u").add("lone \ud800 surrogate")
    for fact in (None, 42):
        with pytest.raises(InvalidInputError):
            UserMemory(items, "u").has(fact)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        UserMemory(items, "")
    with pytest.raises(InvalidInputError):
        UserMemory(items, "u", namespace="memwoven:user:")  # a str is a Sequence[str], and refused
    with pytest.raises(InvalidInputError):
        UserMemory(items, "u", extractor="not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ItemMemory"):
        UserMemory(InMemoryChatMemory(), "u")  # type: ignore[arg-type]
    assert items.count() == 0
    assert normalize_fact("  Hello\tWORLD ") == "hello world"


def test_a_foreign_item_among_the_facts_is_reported() -> None:
    items = InMemoryItemMemory()
    user = UserMemory(items, "u")
    user.add("fine")
    items.put(user.namespace, "stranger", {"order": 1})
    with pytest.raises(CorruptMemoryError):
        user.facts()
    user.clear()
    assert items.count() == 0
