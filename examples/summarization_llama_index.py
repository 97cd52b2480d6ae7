"""A LlamaIndex chat engine whose long history is summarized by a LlamaIndex LLM, through memwoven. Offline.

    uv run python examples/summarization_llama_index.py [path/to/memory.db]

The chat engine's memory is a `ChatMemoryBuffer` over `MemwovenChatStore`, on a `SummarizingChatMemory` over
SQLite. Past 10 stored messages, the middle of the history goes to the summarizer, `summarizer_from_llm(llm)`,
and the session becomes: the pinned first message, one summary message and the 4 most recent messages. The
originals are kept in the session's archive. Both LLMs are offline stand-ins (LlamaIndex `CustomLLM`s): the
assistant answers from a script, and the "summarizing LLM" lists the questions it finds in the transcript it is
given (a real LLM would write prose). The second half runs the same conversation through the async API
(`achat`), where the summarizer is called with `achat` too.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse, LLMMetadata, MessageRole
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.memory import ChatMemoryBuffer

from llama_index.storage.chat_store.memwoven import MemwovenChatStore, summarizer_from_llm
from memwoven.backends.sql import SQLChatMemory
from memwoven.policies import SummarizingChatMemory, archive_id, is_summary

QUESTIONS = [
    "Which city should I visit in Portugal?",
    "What is the best season to go?",
    "How many days do I need in Lisbon?",
    "Is the tram 28 worth it?",
    "Where can I eat pastéis de nata?",
    "Can I take a day trip to Sintra?",
    "How do I get from the airport to the centre?",
    "Do I need cash or are cards fine?",
]


class ScriptedAssistant(CustomLLM):
    """Stands in for the chat LLM: answers with a numbered piece of advice, saying how much history it was sent."""

    @property
    def metadata(self) -> LLMMetadata:
        """What LlamaIndex needs to know about the LLM."""
        return LLMMetadata(model_name="scripted-assistant", is_chat_model=True)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """The scripted answer to the last message."""
        summaries = sum(1 for m in messages if m.role == MessageRole.SYSTEM and "asked" in (m.content or ""))
        text = f"Advice for {messages[-1].content!r} (I was sent {len(messages)} messages, {summaries} summary)."
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text))

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Unused: the chat engine calls `chat`."""
        return CompletionResponse(text="(not used)")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        """Unused: the chat engine calls `chat`."""
        yield CompletionResponse(text="(not used)", delta="(not used)")


class ExtractiveSummaryLLM(ScriptedAssistant):
    """Stands in for an LLM asked to summarize: it lists the user's questions found in the transcript."""

    @property
    def metadata(self) -> LLMMetadata:
        """What LlamaIndex needs to know about the LLM."""
        return LLMMetadata(model_name="extractive-summary", is_chat_model=True)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """The questions of the transcript, those of the earlier summary first."""
        asked: list[str] = []
        for line in (messages[-1].content or "").splitlines():  # the transcript memwoven sends
            if line.startswith("The user asked: "):  # inside the earlier summary: keep what it says
                asked += line.removeprefix("The user asked: ").split(" / ")
            elif line.startswith("user: "):
                asked.append(line.removeprefix("user: "))
        return ChatResponse(
            message=ChatMessage(role=MessageRole.ASSISTANT, content="The user asked: " + " / ".join(asked))
        )


def open_memory(path: Path) -> SummarizingChatMemory:
    """SQLite under a summarizing policy: compact past 10 messages, keep the first one and the last 4."""
    return SummarizingChatMemory(
        SQLChatMemory(f"sqlite:///{path}"),
        summarizer=summarizer_from_llm(ExtractiveSummaryLLM()),
        trigger=10,
        keep_first=1,  # the first question stays verbatim
        keep_recent=4,
    )


def engine(memory: SummarizingChatMemory, session: str) -> SimpleChatEngine:
    """A chat engine whose memory buffer reads and writes `session` of `memory`."""
    for stale in (session, archive_id(session)):  # start afresh if the file is reused
        memory.clear(stale)
    buffer = ChatMemoryBuffer.from_defaults(
        chat_store=MemwovenChatStore(memory), chat_store_key=session, token_limit=4_000
    )
    return SimpleChatEngine.from_defaults(llm=ScriptedAssistant(), memory=buffer)


def report(memory: SummarizingChatMemory, session: str) -> dict[str, Any]:
    """Print and return what is stored and archived for `session`."""
    stored, archived = memory.load(session), memory.archived(session)
    summary = next(m for m in stored if is_summary(m))
    info: Any = summary.metadata["memwoven_summary"]
    print(f"[{session}] {len(QUESTIONS) * 2} messages written; {len(stored)} stored, {len(archived)} archived")
    print(f"[{session}] summary ({info['layers']} layers): {summary.text!r}")
    for message in stored:
        print(f"  {message.role}: {message.text[:110]!r}")
    return {"stored": stored, "archived": archived}


def main(path: Path) -> dict[str, Any]:
    """Chat through the questions with the sync and the async API; return what is stored and archived."""
    memory = open_memory(path)
    chat = engine(memory, "trip")
    for question in QUESTIONS:
        print(f"> {question}\n  {chat.chat(question).response}")
    result = {"sync": report(memory, "trip")}

    async def conversation() -> None:
        achat = engine(memory, "trip-async")
        for question in QUESTIONS:
            await achat.achat(question)

    asyncio.run(conversation())
    result["async"] = report(memory, "trip-async")
    memory.close()
    return result


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "summarization.db")
