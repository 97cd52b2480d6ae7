"""`summarizer_from_llm`: a LlamaIndex LLM summarizing for `SummarizingChatMemory`, sync and async, on every backend."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata, MockLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import Field

from llama_index.storage.chat_store.memwoven import MemwovenChatStore, summarizer_from_llm
from memwoven import ChatMemory, InMemoryChatMemory, Message, ToolCall
from memwoven.policies import SUMMARY_PROMPT, SummarizingChatMemory, is_summary


class ScriptedLLM(CustomLLM):
    """Answers every chat with a fixed summary and records what it was sent."""

    answer: str = "A short summary."
    seen: list[list[ChatMessage]] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted")

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self.seen.append(list(messages))
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=self.answer))

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self.answer)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield CompletionResponse(text=self.answer, delta=self.answer)


def _history(turns: int) -> list[Message]:
    return [Message(role=role, content=f"{role} {turn}") for turn in range(turns) for role in ("user", "assistant")]


def test_the_llm_gets_instructions_and_a_transcript() -> None:
    llm = ScriptedLLM()
    call = Message(role="assistant", tool_calls=[ToolCall(id="1", name="search", arguments={"q": "owls"})])
    assert summarizer_from_llm(llm)([Message(role="user", content="Owls?"), call]) == "A short summary."
    system, user = llm.seen[0]
    assert system.role == MessageRole.SYSTEM
    assert system.content == SUMMARY_PROMPT
    assert user.role == MessageRole.USER
    assert user.content == 'user: Owls?\n\nassistant called search({"q":"owls"})'


def test_compacting_a_chat_store_on_every_backend(chat_memory: ChatMemory) -> None:
    memory = SummarizingChatMemory(
        chat_memory, summarizer=summarizer_from_llm(ScriptedLLM()), trigger=6, keep_first=1, keep_recent=2
    )
    store = MemwovenChatStore(memory)
    store.add_message("chat", ChatMessage(role=MessageRole.SYSTEM, content="Be kind."))
    for turn in range(5):
        store.add_message("chat", ChatMessage(role=MessageRole.USER, content=f"question {turn}"))
        store.add_message("chat", ChatMessage(role=MessageRole.ASSISTANT, content=f"answer {turn}"))
    messages = store.get_messages("chat")
    assert [m.content for m in messages][:1] == ["Be kind."]
    assert len(messages) <= 6
    assert messages[1].role == MessageRole.SYSTEM
    assert messages[1].content.endswith("A short summary.")
    assert len(memory.archived("chat")) + len(messages) - 2 == 10


def test_async_path_with_the_mock_llm() -> None:
    async def scenario() -> list[Message]:
        memory = SummarizingChatMemory(
            InMemoryChatMemory(), summarizer=summarizer_from_llm(MockLLM()), trigger=4, keep_recent=1
        )
        await memory.aappend("s", _history(3))
        return await memory.aload("s")

    stored = asyncio.run(scenario())
    assert is_summary(stored[0])
    assert "user: user 0" in stored[0].text
    assert [m.text for m in stored[1:]] == ["assistant 2"]


def test_an_empty_answer_or_a_non_llm_is_refused() -> None:
    from memwoven.policies import SummarizationError

    memory = SummarizingChatMemory(
        InMemoryChatMemory(), summarizer=summarizer_from_llm(ScriptedLLM(answer="")), trigger=4, keep_recent=1
    )
    with pytest.raises(SummarizationError):
        memory.save("s", _history(3))
    assert memory.load("s") == _history(3)
    with pytest.raises(TypeError):
        summarizer_from_llm("gpt-4o")  # type: ignore[arg-type]
