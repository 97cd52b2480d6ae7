"""`MemwovenSaver.thread_messages`: a LangGraph thread's messages as memwoven `Message`s (roles, text, tool calls
and results), kept in a memwoven `ChatMemory` and turned back into the same LangChain messages; sync and async."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from typing import Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph

from langchain_memwoven.messages import from_memwoven_messages
from langgraph.checkpoint.memwoven import MemwovenSaver
from memwoven import InMemoryChatMemory, InMemoryItemMemory, InvalidInputError


def _thread(saver: MemwovenSaver) -> list[Any]:
    def turn(state: MessagesState) -> dict[str, Any]:
        call = {"name": "add", "args": {"a": 2, "b": 3}, "id": "c1", "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call]), ToolMessage("5", tool_call_id="c1"), AIMessage("5")]}

    builder = StateGraph(MessagesState)
    builder.add_node("turn", turn)
    builder.add_edge(START, "turn")
    graph = builder.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "t1"}}
    graph.invoke({"messages": [("user", "2 + 3?")]}, config)
    return list(graph.get_state(config).values["messages"])


def test_a_threads_messages_become_memwoven_messages() -> None:
    saver = MemwovenSaver(InMemoryItemMemory())
    langchain_messages = _thread(saver)
    messages = saver.thread_messages("t1")
    assert [(m.role, m.text) for m in messages] == [
        ("user", "2 + 3?"),
        ("assistant", ""),
        ("tool", "5"),
        ("assistant", "5"),
    ]
    assert [(c.name, c.arguments) for c in messages[1].tool_calls] == [("add", {"a": 2, "b": 3})]
    assert messages[2].tool_call_id == "c1"
    assert asyncio.run(saver.athread_messages("t1")) == messages
    chat = InMemoryChatMemory()
    chat.save("t1", messages)  # kept, exported or summarized with memwoven's tools from here
    assert from_memwoven_messages(chat.load("t1")) == langchain_messages
    assert saver.thread_messages("no-such-thread") == []


class Counter(TypedDict):
    count: int


def test_a_channel_without_messages_is_refused() -> None:
    saver = MemwovenSaver(InMemoryItemMemory())
    builder = StateGraph(Counter)
    builder.add_node("count", lambda state: {"count": state["count"] + 1})
    builder.add_edge(START, "count")
    builder.compile(checkpointer=saver).invoke({"count": 0}, {"configurable": {"thread_id": "c"}})
    with pytest.raises(InvalidInputError, match="no list of messages"):
        saver.thread_messages("c", channel="count")


def test_a_message_json_cannot_hold_is_shown_with_its_standard_fields(caplog: pytest.LogCaptureFixture) -> None:
    saver = MemwovenSaver(InMemoryItemMemory())
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    reply = [AIMessage("hello", id="a1", response_metadata={"created_at": when}), ToolMessage("t", tool_call_id="c")]
    reply[1].artifact = b"\x89PNG"
    builder = StateGraph(MessagesState)
    builder.add_node("reply", lambda state: {"messages": reply})
    builder.add_edge(START, "reply")
    builder.compile(checkpointer=saver).invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "t"}})
    with caplog.at_level(logging.WARNING):
        messages = saver.thread_messages("t")
    assert [(m.role, m.text, "langchain" in m.extras) for m in messages] == [
        ("user", "hi", True),
        ("assistant", "hello", False),
        ("tool", "t", False),
    ]
    assert "['response_metadata']['created_at'] is a datetime" in caplog.text
    assert "['artifact'] is a bytes" in caplog.text
