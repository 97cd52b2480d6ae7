from __future__ import annotations

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
