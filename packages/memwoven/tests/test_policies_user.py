"""UserMemory on every backend: dedupe, the cap (archived), delete, extraction, rendering, async twins."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from policy_backends import BACKENDS, backend_fixture, reopen

from memwoven import ChatMemory, InMemoryChatMemory, InvalidInputError, Message
from memwoven.policies import SummarizingChatMemory, TrimmingChatMemory, UserMemory, normalize_fact


@pytest.fixture(params=BACKENDS)
def chat_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChatMemory]:
    yield from backend_fixture(request, tmp_path)


def test_facts_dedupe_cap_and_delete(chat_memory: ChatMemory) -> None:
    user = UserMemory(chat_memory, "alice", max_facts=3)
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
    other = reopen(chat_memory)
    assert UserMemory(other, "alice").facts() == ["Lives in Lyon", "Works as a nurse"]  # across sessions/objects
    if other is not chat_memory:
        other.close()
    assert UserMemory(chat_memory, "bob").facts() == []  # users do not see each other
    user.clear()
    assert user.facts() == []
    assert user.to_context_string() == ""
    assert user.archived() == ["Prefers tea over coffee"]


def test_learning_with_an_extractor_sync_and_async() -> None:
    def extract(messages: list[Message]) -> list[str]:
        return [m.text.removeprefix("I ").capitalize() for m in messages if m.role == "user" and "I " in m.text]

    async def aextract(messages: list[Message]) -> list[str]:
        return extract(messages)

    chat = [Message(role="user", content="I like jazz"), Message(role="assistant", content="Noted.")]
    user = UserMemory(InMemoryChatMemory(), "u", extractor=extract)
    assert user.learn(chat) == ["Like jazz"]
    assert user.learn(chat) == []
    assert asyncio.run(user.alearn([Message(role="user", content="I run marathons")])) == ["Run marathons"]
    async_user = UserMemory(InMemoryChatMemory(), "u", extractor=aextract)
    assert async_user.learn(chat) == ["Like jazz"]  # an async extractor from sync code
    with pytest.raises(InvalidInputError):
        UserMemory(InMemoryChatMemory(), "u").learn(chat)


def test_async_twins(chat_memory: ChatMemory) -> None:
    async def scenario() -> None:
        user = UserMemory(chat_memory, "carol", max_facts=2, archive=False)
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


def test_validation() -> None:
    with pytest.raises(InvalidInputError):
        UserMemory(InMemoryChatMemory(), "u", max_facts=0)
    with pytest.raises(InvalidInputError):
        UserMemory(InMemoryChatMemory(), "u").add_many("a single string")
    with pytest.raises(InvalidInputError):
        UserMemory(InMemoryChatMemory(), "u").add_many([42])  # type: ignore[list-item]
    assert normalize_fact("  Hello\tWORLD ") == "hello world"


def test_conversation_policies_never_rewrite_the_facts(chat_memory: ChatMemory) -> None:
    summarizing = SummarizingChatMemory(chat_memory, summarizer=lambda ms: "gist", trigger=4, keep_recent=1)
    user = UserMemory(TrimmingChatMemory(summarizing, max_messages=2), "dave", max_facts=6)
    assert user.store is chat_memory
    assert user.add_many([f"fact {i}" for i in range(8)]) == [f"fact {i}" for i in range(8)]
    assert user.facts() == [f"fact {i}" for i in range(2, 8)]
    assert user.archived() == ["fact 0", "fact 1"]
