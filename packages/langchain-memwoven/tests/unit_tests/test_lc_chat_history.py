"""`MemwovenChatMessageHistory` on the in-memory backend: one `append` per add, native async, ownership."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_memwoven import MemwovenChatMessageHistory
from memwoven import History, InMemoryChatMemory, InvalidInputError, Message
from memwoven.contracts import MessagesIn

TURN: list[BaseMessage] = [
    SystemMessage("Be brief."),
    HumanMessage("What's 6 x 7?", id="h1"),
    AIMessage("", tool_calls=[{"name": "multiply", "args": {"a": 6, "b": 7}, "id": "c1"}], id="a1"),
    ToolMessage("42", tool_call_id="c1", artifact={"exact": True}),
    AIMessage("42.", usage_metadata={"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}),
]


def _without_ids(messages: list[BaseMessage]) -> list[BaseMessage]:
    return [message.model_copy(update={"id": None}) for message in messages]


class CountingMemory(InMemoryChatMemory):
    """Records which contract methods the history calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def load_versioned(self, session_id: str) -> History:
        self.calls.append("load")
        return super().load_versioned(session_id)

    def save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        self.calls.append("save")
        return super().save(session_id, messages, expected_version=expected_version)

    def append(self, session_id: str, messages: MessagesIn) -> int:
        self.calls.append("append")
        return super().append(session_id, messages)


def test_add_messages_is_one_append_and_reads_back_exactly() -> None:
    memory = CountingMemory()
    history = MemwovenChatMessageHistory(memory, "s1")
    history.add_messages(TURN)
    assert memory.calls == ["append"]
    assert history.messages == TURN
    history.add_user_message("again")
    history.add_ai_message("sure")
    stored = history.messages
    assert _without_ids(stored) == _without_ids([*TURN, HumanMessage("again"), AIMessage("sure")])
    assert all(message.id for message in stored)
    assert memory.calls == ["append", "load", "append", "append", "load"]
    history.clear()
    assert history.messages == []
    assert memory.sessions() == []


async def test_async_methods_use_the_async_twins() -> None:
    calls: list[str] = []

    class AsyncCounting(InMemoryChatMemory):
        async def aload_versioned(self, session_id: str) -> History:
            calls.append("aload")
            return await super().aload_versioned(session_id)

        async def aappend(self, session_id: str, messages: MessagesIn) -> int:
            calls.append("aappend")
            return await super().aappend(session_id, messages)

        async def asave(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
            calls.append("asave")
            return await super().asave(session_id, messages, expected_version=expected_version)

    history = MemwovenChatMessageHistory(AsyncCounting(), "s1")
    await history.aadd_messages(TURN)
    assert await history.aget_messages() == TURN
    await history.aclear()
    assert await history.aget_messages() == []
    assert calls == ["aappend", "aload", "asave", "aload"]


def test_sessions_are_independent_and_visible_to_the_core() -> None:
    memory = InMemoryChatMemory()
    MemwovenChatMessageHistory(memory, "a").add_messages([HumanMessage("for a")])
    MemwovenChatMessageHistory(memory, "b").add_messages([HumanMessage("for b")])
    assert _without_ids(MemwovenChatMessageHistory(memory, "a").messages) == [HumanMessage("for a")]
    assert memory.sessions() == ["a", "b"]
    stored = memory.load("a")[0]
    assert (stored.role, stored.content) == ("user", "for a")
    memory.append("a", [Message(role="assistant", content="written by another framework")])
    assert MemwovenChatMessageHistory(memory, "a").messages[-1] == AIMessage("written by another framework")


def test_from_url_refuses_an_option_the_memory_does_not_take() -> None:
    with pytest.raises(InvalidInputError, match="unexpected keyword argument 'no_such_option'"):
        MemwovenChatMessageHistory.from_url("memory://", "s", no_such_option=1)


def test_from_url_owns_its_memory() -> None:
    closed: list[bool] = []
    with MemwovenChatMessageHistory.from_url("memory://", "s") as history:
        history.memory.close = lambda: closed.append(True)  # type: ignore[method-assign]
        history.add_messages([HumanMessage("hi")])
        assert _without_ids(history.messages) == [HumanMessage("hi")]
    assert closed == [True]
    shared = InMemoryChatMemory()
    shared.close = lambda: closed.append(False)  # type: ignore[method-assign]
    MemwovenChatMessageHistory(shared, "s").close()
    assert closed == [True]


@pytest.mark.parametrize("session_id", ["", "nul\x00", 42])
def test_bad_session_ids_are_refused(session_id: Any) -> None:
    with pytest.raises(InvalidInputError):
        MemwovenChatMessageHistory(InMemoryChatMemory(), session_id)


def test_unstorable_messages_write_nothing() -> None:
    memory = InMemoryChatMemory()
    history = MemwovenChatMessageHistory(memory, "s")
    with pytest.raises(InvalidInputError):
        history.add_messages([HumanMessage("fine"), ToolMessage("x", tool_call_id="c", artifact=b"bytes")])
    assert memory.sessions() == []


def test_every_message_gets_an_id_so_a_retried_add_is_stored_once() -> None:
    memory = InMemoryChatMemory()
    history = MemwovenChatMessageHistory(memory, "s")
    turn = [HumanMessage("hello"), AIMessage("hi", id="given")]
    history.add_messages(turn)
    assert turn[0].id
    assert turn[1].id == "given"
    history.add_messages(turn)  # e.g. retried after a timeout whose outcome was unknown
    assert history.messages == turn
    assert [m.id for m in memory.load("s")] == [turn[0].id, "given"]


def test_an_empty_id_is_no_id() -> None:
    history = MemwovenChatMessageHistory(InMemoryChatMemory(), "s")
    history.add_messages([HumanMessage("first", id="")])
    history.add_messages([HumanMessage("second", id=""), AIMessage("third", id="")])
    stored = history.messages
    assert [m.content for m in stored] == ["first", "second", "third"]
    assert len({m.id for m in stored}) == 3


def test_messages_given_as_a_generator_are_all_stored() -> None:
    history = MemwovenChatMessageHistory(InMemoryChatMemory(), "s")
    history.add_messages(message for message in [HumanMessage("hi"), AIMessage("hello")])
    assert [m.content for m in history.messages] == ["hi", "hello"]
