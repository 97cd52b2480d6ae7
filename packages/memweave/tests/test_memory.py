from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from memweave import InMemoryChatMemory, InMemoryVectorMemory, Message
from memweave.contracts import ChatMemory, VectorMemory
from memweave.errors import InvalidInputError
from memweave.testing import ChatMemoryContract, VectorMemoryContract


class TestInMemoryChatMemory(ChatMemoryContract):
    @pytest.fixture
    def chat_memory(self) -> ChatMemory:
        return InMemoryChatMemory()


class TestInMemoryVectorMemory(VectorMemoryContract):
    @pytest.fixture
    def vector_memory_factory(self) -> Callable[..., VectorMemory]:
        return lambda dimension, metric: InMemoryVectorMemory(dimension, metric=metric)


def test_a_save_reusing_stored_messages_still_checks_the_new_ones_and_snapshots_the_list() -> None:
    memory = InMemoryChatMemory()
    memory.save("s", [Message(role="user", content=f"m{i}") for i in range(5)])
    history = memory.load("s")
    original = list(history)
    with pytest.raises(InvalidInputError, match="message 6"):
        memory.save("s", [*history, {"role": "user", "content": "ok"}, {"role": "nobody"}])
    with pytest.raises(InvalidInputError, match="message 2 is a int"):
        memory.save("s", [history[0], history[1], 7, *history[3:]])  # type: ignore[list-item]  # a foreign object inside the known prefix
    grown: list[Message | dict[str, str]] = [*history, {"role": "assistant", "content": "new"}]
    memory.save("s", grown)
    grown.append(Message(role="user", content="after the save"))
    history[0] = Message(role="user", content="changed by the caller")
    loaded = memory.load("s")
    assert [m.content for m in loaded] == ["m0", "m1", "m2", "m3", "m4", "new"]
    assert all(a is b for a, b in zip(loaded[:5], original, strict=True))  # shared, not copied


def test_appends_grow_one_buffer_without_touching_earlier_snapshots_or_other_sessions() -> None:
    memory = InMemoryChatMemory()
    memory.append("a", [Message(role="user", content="a0")])
    memory.append("b", [Message(role="user", content="b0")])  # both started from the absent session
    before = memory.load_versioned("a")
    memory.append("a", [Message(role="user", content="a1")])
    memory.append("a", [Message(role="user", content="a2")])
    assert [m.content for m in before.messages] == ["a0"]
    assert [m.content for m in memory.load("a")] == ["a0", "a1", "a2"]
    assert [m.content for m in memory.load("b")] == ["b0"]
    memory.save("a", memory.load("a")[:1])  # a shorter history, then an append after it
    memory.append("a", [Message(role="user", content="a3")])
    assert [m.content for m in memory.load("a")] == ["a0", "a3"]
    assert memory.load("never") == []


def test_an_append_after_expiry_starts_a_new_history() -> None:
    memory = InMemoryChatMemory(ttl=0.05)
    memory.append("s", [Message(role="user", content="old")])
    time.sleep(0.1)
    memory.append("s", [Message(role="user", content="new")])
    assert [m.content for m in memory.load("s")] == ["new"]
