"""One session, two frameworks: written through LangChain, read and written back through LlamaIndex, and back."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, MessageRole, TextBlock

from langchain_memwoven import MemwovenChatMessageHistory
from llama_index.storage.chat_store.memwoven import MemwovenChatStore
from memwoven import ChatMemory, SQLChatMemory
from memwoven_test_support import postgres_url, unique_name

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake image bytes").decode()


def langchain_turns() -> list[BaseMessage]:
    """A conversation with a system prompt, an image, two tool calls and their results."""
    return [
        SystemMessage(content="You describe pictures."),
        HumanMessage(
            content=[
                {"type": "text", "text": "What is in this picture, and what is the weather there?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            ],
            id="h1",
        ),
        AIMessage(
            content="",
            tool_calls=[
                {"name": "describe", "args": {"detail": "high"}, "id": "call_1", "type": "tool_call"},
                {"name": "weather", "args": {"city": "Cortina"}, "id": "call_2", "type": "tool_call"},
            ],
            response_metadata={"finish_reason": "tool_calls"},
            id="a1",
        ),
        ToolMessage(content="A cat on a sofa.", tool_call_id="call_1", name="describe"),
        ToolMessage(content="Sunny, 21°C", tool_call_id="call_2", name="weather"),
        AIMessage(content="A cat on a sofa; it is sunny and 21°C there.", id="a2"),
    ]


@pytest.fixture(params=["sqlite", "postgresql"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChatMemory]:
    """A SQL chat memory on SQLite or on the shared PostgreSQL (its own tables, dropped afterwards)."""
    if request.param == "sqlite":
        chat = SQLChatMemory(f"sqlite:///{tmp_path}/shared.db")
    else:
        chat = SQLChatMemory(postgres_url(), table_prefix=unique_name("mwx") + "_")
    yield chat
    if request.param != "sqlite":
        chat.drop_tables()
    chat.close()


def test_a_langchain_session_reads_in_llama_index_and_is_written_back_unchanged(memory: ChatMemory) -> None:
    history = MemwovenChatMessageHistory(memory, "trip")
    turns = langchain_turns()
    history.add_messages(turns)  # gives each message without an id one
    stored = memory.load("trip")

    store = MemwovenChatStore(memory)
    messages = store.get_messages("trip")
    assert [m.role for m in messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]
    user = messages[1]
    assert any(isinstance(b, TextBlock) and "weather" in b.text for b in user.blocks)
    [image] = [b for b in user.blocks if isinstance(b, ImageBlock)]
    assert image.image_mimetype == "image/png"
    tool_calls = [c for m in messages for c in _tool_calls(m)]
    assert tool_calls == [("call_1", "describe", {"detail": "high"}), ("call_2", "weather", {"city": "Cortina"})]
    assert [m.additional_kwargs.get("tool_call_id") for m in messages[3:5]] == ["call_1", "call_2"]
    assert messages[-1].content == "A cat on a sofa; it is sunny and 21°C there."

    store.set_messages("trip", messages)  # written back through LlamaIndex
    assert memory.load("trip") == stored
    assert history.messages == turns  # and LangChain still reads exactly what it wrote


def test_a_llama_index_session_reads_in_langchain(memory: ChatMemory) -> None:
    store = MemwovenChatStore(memory)
    store.add_message("chat", ChatMessage(role=MessageRole.USER, content="Hello from LlamaIndex"))
    store.add_message("chat", ChatMessage(role=MessageRole.ASSISTANT, content="Hi! How can I help?"))
    history = MemwovenChatMessageHistory(memory, "chat")
    assert [(type(m).__name__, m.content) for m in history.messages] == [
        ("HumanMessage", "Hello from LlamaIndex"),
        ("AIMessage", "Hi! How can I help?"),
    ]
    history.add_messages([HumanMessage(content="And from LangChain")])
    assert [m.content for m in store.get_messages("chat")] == [
        "Hello from LlamaIndex",
        "Hi! How can I help?",
        "And from LangChain",
    ]


def _tool_calls(message: ChatMessage) -> list[tuple[str, str, dict[str, object]]]:
    """The (id, name, arguments) of a message's tool calls, from its blocks or its OpenAI-style kwargs."""
    calls = []
    for block in message.blocks:
        if getattr(block, "block_type", None) == "tool_call":
            calls.append((block.tool_call_id, block.tool_name, dict(block.tool_kwargs)))  # type: ignore[attr-defined]
    for call in message.additional_kwargs.get("tool_calls", []) if not calls else []:
        function = call["function"] if isinstance(call, dict) else call.function
        calls.append((call["id"] if isinstance(call, dict) else call.id, function["name"], function["arguments"]))
    return calls
