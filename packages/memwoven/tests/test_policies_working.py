"""WorkingMemory on every backend: the scratchpad API, scopes, persistence, concurrency, async twins."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from policy_backends import BACKENDS, backend_fixture, reopen

from memwoven import ChatMemory, CorruptMemoryError, InMemoryChatMemory, InvalidInputError, Message
from memwoven.policies import SummarizingChatMemory, TrimmingChatMemory, WorkingMemory


@pytest.fixture(params=BACKENDS)
def chat_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChatMemory]:
    yield from backend_fixture(request, tmp_path)


def test_the_scratchpad(chat_memory: ChatMemory) -> None:
    working = WorkingMemory(chat_memory, "agent-1")
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
    working.clear()
    assert working.to_dict() == {}
    assert working.to_context_string() == ""


def test_scopes_share_a_backend_without_seeing_each_other(chat_memory: ChatMemory) -> None:
    first, second = WorkingMemory(chat_memory, "a"), WorkingMemory(chat_memory, "b")
    first.set("k", 1)
    second.set("k", 2)
    assert (first.get("k"), second.get("k")) == (1, 2)
    first.clear()
    assert second.to_dict() == {"k": 2}
    assert chat_memory.load("a") == []  # chat sessions are not touched either
    other = reopen(chat_memory)
    assert WorkingMemory(other, "b").get("k") == 2  # persisted, seen through another object
    if other is not chat_memory:
        other.close()


def test_async_twins(chat_memory: ChatMemory) -> None:
    async def scenario() -> None:
        working = WorkingMemory(chat_memory, "async")
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


def test_concurrent_writers_lose_nothing() -> None:
    working = WorkingMemory(InMemoryChatMemory(), "shared")
    threads = [threading.Thread(target=lambda w=w: [working.set(f"{w}-{i}", i) for i in range(20)]) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(working.keys()) == 80


def test_values_keys_and_importance_are_validated() -> None:
    working = WorkingMemory(InMemoryChatMemory(), "v")
    for bad in (float("nan"), object(), b"bytes", (1, 2), {1: "non-string key"}):
        with pytest.raises(InvalidInputError):
            working.set("k", bad)
    for importance in (-0.1, 1.5, True, "high"):
        with pytest.raises(InvalidInputError):
            working.set("k", 1, importance=importance)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        working.set("", 1)
    with pytest.raises(InvalidInputError):
        WorkingMemory(InMemoryChatMemory(), "")
    assert working.keys() == []


def test_a_foreign_message_in_a_scope_is_reported() -> None:
    memory = InMemoryChatMemory()
    working = WorkingMemory(memory, "x")
    memory.append(working.session_id, [Message(role="user", content="not an entry")])
    with pytest.raises(CorruptMemoryError):
        working.keys()


def test_conversation_policies_never_rewrite_the_scratchpad(chat_memory: ChatMemory) -> None:
    summarizing = SummarizingChatMemory(chat_memory, summarizer=lambda ms: "gist", trigger=4, keep_recent=1)
    for store in (summarizing, TrimmingChatMemory(summarizing, max_messages=3)):
        working = WorkingMemory(store, "agent")
        assert working.store is chat_memory  # entries live in the backend under the policies
        for i in range(8):
            working.set(f"k{i}", i)
        assert working.to_dict() == {f"k{i}": i for i in range(8)}
        working.clear()
