"""`summarizer_from_chat_model`: a LangChain chat model as memwoven's summarizer (sync and async).

```python
from langchain_memwoven import summarizer_from_chat_model
from memwoven.policies import SummarizingChatMemory

memory = SummarizingChatMemory(SQLChatMemory("sqlite:///chat.db"), trigger=60, keep_recent=12,
                               summarizer=summarizer_from_chat_model(ChatOpenAI(model="gpt-4o-mini")))
```

The model gets a system message with the instructions (memwoven's `SUMMARY_PROMPT` unless you give another) and
one human message with a plain-text transcript of the messages to summarize, tool calls and results included,
so any chat model can summarize any history, whatever tools it was built with. The call runs with
``configurable={"session_id": "<id>:summarizer"}`` and that id in its metadata: a model wrapped in
`RunnableWithMessageHistory`, or a tracer, files the call under the summarizer's own session, never the parent's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig

from memwoven import Message
from memwoven._steps import Call, Steps, twins
from memwoven.policies import SUMMARY_PROMPT, Summarizer, render_transcript

__all__ = ["ChatModelSummarizer", "summarizer_from_chat_model"]

RUN_NAME = "memwoven-summarizer"


def _text(result: Any) -> str:
    """The text of what a chat model (or any runnable) returned."""
    if isinstance(result, BaseMessage):
        return str(result.text)
    return result if isinstance(result, str) else str(result)


class ChatModelSummarizer(Summarizer):
    """Summarizes messages with a LangChain chat model (or any runnable from messages to a message or text)."""

    def __init__(self, model: BaseLanguageModel[Any] | Runnable[Any, Any], *, prompt: str = SUMMARY_PROMPT) -> None:
        """Wrap `model`; `prompt` is the system instruction sent before the transcript."""
        if not isinstance(model, Runnable):
            raise TypeError(f"expected a LangChain chat model or runnable, got {type(model).__name__}")
        self.model = model
        self.prompt = prompt

    def __repr__(self) -> str:
        return f"ChatModelSummarizer({self.model!r})"

    def _input(self, messages: Sequence[Message]) -> list[BaseMessage]:
        return [SystemMessage(content=self.prompt), HumanMessage(content=render_transcript(messages))]

    @staticmethod
    def _config(session_id: str | None) -> RunnableConfig:
        config: RunnableConfig = {"run_name": RUN_NAME, "tags": [RUN_NAME]}
        if session_id is not None:
            config["metadata"] = {"memwoven_session_id": session_id}
            config["configurable"] = {"session_id": session_id}
        return config

    def _summarize(self, messages: list[Message], *, session_id: str | None = None) -> Steps[str]:
        """Summarize `messages` with one `invoke` of the model (`ainvoke` from async code)."""
        config = self._config(session_id)
        result = yield Call(self.model, "invoke", (self._input(messages),), {"config": config})
        return _text(result)

    __call__, acall = twins(_summarize, name="__call__", async_name="acall")


def summarizer_from_chat_model(
    model: BaseLanguageModel[Any] | Runnable[Any, Any], *, prompt: str = SUMMARY_PROMPT
) -> ChatModelSummarizer:
    """memwoven's summarizer callable from a LangChain chat model: pass it to `SummarizingChatMemory`."""
    return ChatModelSummarizer(model, prompt=prompt)
