"""`summarizer_from_chat_model`: a LangChain chat model summarizing for `SummarizingChatMemory`, sync and async."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from langchain_memwoven import MemwovenChatMessageHistory, summarizer_from_chat_model
from memwoven import InMemoryChatMemory, Message, ToolCall
from memwoven.policies import SUMMARY_PROMPT, SummarizationError, SummarizingChatMemory, is_summary


def _fake(*answers: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=itertools.cycle([AIMessage(content=answer) for answer in answers]))


def _history(turns: int) -> list[Message]:
    messages = []
    for turn in range(turns):
        messages.append(Message(role="user", content=f"question {turn}"))
        messages.append(Message(role="assistant", content=f"answer {turn}"))
    return messages


def test_the_model_gets_instructions_and_a_transcript_under_the_summarizer_session() -> None:
    seen: list[tuple[list[BaseMessage], RunnableConfig]] = []

    def model(messages: list[BaseMessage], config: RunnableConfig) -> AIMessage:
        seen.append((messages, config))
        return AIMessage(content=[{"type": "text", "text": "the "}, {"type": "text", "text": "gist"}])

    summarizer = summarizer_from_chat_model(RunnableLambda(model))
    call = Message(role="assistant", tool_calls=[ToolCall(id="1", name="weather", arguments={"city": "Oslo"})])
    text = summarizer([Message(role="user", content="Weather?"), call], session_id="s:summarizer")
    assert text == "the gist"
    (messages, config) = seen[0]
    assert isinstance(messages[0], SystemMessage)
    assert messages[0].content == SUMMARY_PROMPT
    assert isinstance(messages[1], HumanMessage)
    assert messages[1].content == 'user: Weather?\n\nassistant called weather({"city":"Oslo"})'
    assert config["configurable"]["session_id"] == "s:summarizer"
    assert config["metadata"]["memwoven_session_id"] == "s:summarizer"


def test_summarizing_through_the_langchain_history() -> None:
    memory = SummarizingChatMemory(
        InMemoryChatMemory(), summarizer=summarizer_from_chat_model(_fake("A summary.")), trigger=8, keep_recent=2
    )
    history = MemwovenChatMessageHistory(memory, "chat")
    for turn in range(5):
        history.add_messages([HumanMessage(content=f"question {turn}"), AIMessage(content=f"answer {turn}")])
    messages = history.messages
    assert isinstance(messages[0], SystemMessage)
    assert str(messages[0].content).endswith("A summary.")
    assert len(messages) <= 8
    assert len(memory.archived("chat")) + len(messages) - 1 == 10


def test_async_path_uses_ainvoke() -> None:
    async def scenario() -> list[Message]:
        memory = SummarizingChatMemory(
            InMemoryChatMemory(), summarizer=summarizer_from_chat_model(_fake("async gist")), trigger=4, keep_recent=1
        )
        await memory.aappend("s", _history(3))
        return await memory.aload("s")

    stored = asyncio.run(scenario())
    assert is_summary(stored[0])
    assert stored[0].text.endswith("async gist")


def test_a_model_with_message_history_files_its_calls_under_the_summarizer_session() -> None:
    inner = InMemoryChatMemory()
    model = RunnableWithMessageHistory(_fake("gist"), lambda session_id: MemwovenChatMessageHistory(inner, session_id))
    memory = SummarizingChatMemory(inner, summarizer=summarizer_from_chat_model(model), trigger=4, keep_recent=1)
    memory.save("chat", _history(3))
    assert inner.sessions() == ["chat", "chat:archive", "chat:summarizer"]
    assert [m.role for m in inner.load("chat:summarizer")] == ["system", "user", "assistant"]
    assert [m.text for m in memory.load("chat")][1:] == ["answer 2"]


def test_failures_propagate_and_bad_models_are_refused() -> None:
    def broken(messages: Any) -> AIMessage:
        raise TimeoutError("model timed out")

    memory = SummarizingChatMemory(
        InMemoryChatMemory(), summarizer=summarizer_from_chat_model(RunnableLambda(broken)), trigger=4, keep_recent=1
    )
    with pytest.raises(SummarizationError, match="model timed out") as raised:
        memory.save("s", _history(3))
    cause = raised.value.__cause__
    assert raised.value.stored
    assert cause is not None
    assert isinstance(cause.__cause__, TimeoutError)
    assert memory.load("s") == _history(3)
    with pytest.raises(TypeError):
        summarizer_from_chat_model("gpt-4o")  # type: ignore[arg-type]
