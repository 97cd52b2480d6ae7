"""`summarizer_from_llm`: a LlamaIndex LLM as memwoven's summarizer (sync and async).

```python
from llama_index.storage.chat_store.memwoven import summarizer_from_llm
from memwoven.policies import SummarizingChatMemory

memory = SummarizingChatMemory(SQLChatMemory("sqlite:///chat.db"), trigger=60, keep_recent=12,
                               summarizer=summarizer_from_llm(OpenAI(model="gpt-4o-mini")))
store = MemwovenChatStore(memory)  # chat engines and memory buffers now read compacted histories
```

The LLM gets a system message with the instructions (memwoven's `SUMMARY_PROMPT` unless you give another) and
one user message with a plain-text transcript of the messages to summarize, tool calls and results included. A
LlamaIndex LLM call is stateless, so the summarizer's session (``<id>:summarizer``) needs no routing: nothing it
does is written to the parent session.
"""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.llms import LLM

from memwoven import Message
from memwoven._steps import Call, Steps, twins
from memwoven.policies import SUMMARY_PROMPT, Summarizer, render_transcript

__all__ = ["LLMSummarizer", "summarizer_from_llm"]


class LLMSummarizer(Summarizer):
    """Summarizes messages with a LlamaIndex `LLM`: one `chat` call (`achat` on the async path)."""

    def __init__(self, llm: LLM, *, prompt: str = SUMMARY_PROMPT) -> None:
        """Wrap `llm`; `prompt` is the system instruction sent before the transcript."""
        if not isinstance(llm, LLM):
            raise TypeError(f"expected a LlamaIndex LLM, got {type(llm).__name__}")
        self.llm = llm
        self.prompt = prompt

    def __repr__(self) -> str:
        return f"LLMSummarizer({type(self.llm).__name__})"

    def _input(self, messages: Sequence[Message]) -> list[ChatMessage]:
        return [
            ChatMessage(role=MessageRole.SYSTEM, content=self.prompt),
            ChatMessage(role=MessageRole.USER, content=render_transcript(messages)),
        ]

    @staticmethod
    def _text(response: ChatResponse) -> str:
        return response.message.content or ""

    def _summarize(self, messages: list[Message], *, session_id: str | None = None) -> Steps[str]:
        """Summarize `messages` with one `chat` call (`achat` from async code)."""
        response: ChatResponse = yield Call(self.llm, "chat", (self._input(messages),))
        return self._text(response)

    __call__, acall = twins(_summarize, name="__call__", async_name="acall")


def summarizer_from_llm(llm: LLM, *, prompt: str = SUMMARY_PROMPT) -> LLMSummarizer:
    """memwoven's summarizer callable from a LlamaIndex LLM: pass it to `SummarizingChatMemory`."""
    return LLMSummarizer(llm, prompt=prompt)
