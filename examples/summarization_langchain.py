"""A LangChain chat whose long history is summarized by a LangChain chat model, through memwoven. Offline.

    uv run python examples/summarization_langchain.py [path/to/memory.db]

The chat history is a `MemwovenChatMessageHistory` on a `SummarizingChatMemory` over SQLite; the model is sent
what the history holds. Past 10 stored messages, the middle of the history goes to the summarizer,
`summarizer_from_chat_model(model)`, and the session becomes: the pinned system prompt, one summary message and
the 4 most recent messages. The originals are kept in the session's archive. Both models are offline stand-ins:
the assistant replies from a script, and the "summarizing model" is a tiny `BaseChatModel` that lists the
questions it finds in the transcript it is given (a real model would write prose).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from langchain_memwoven import MemwovenChatMessageHistory, summarizer_from_chat_model
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


class ExtractiveSummaryModel(BaseChatModel):
    """Stands in for a chat model asked to summarize: it lists the user's questions found in the transcript."""

    @property
    def _llm_type(self) -> str:
        return "extractive-summary"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, **kwargs: Any) -> ChatResult:
        asked: list[str] = []
        for line in str(messages[-1].content).splitlines():  # the transcript memwoven sends
            if line.startswith("The user asked: "):  # inside the earlier summary: keep what it says
                asked += line.removeprefix("The user asked: ").split(" / ")
            elif line.startswith("user: "):
                asked.append(line.removeprefix("user: "))
        summary = "The user asked: " + " / ".join(asked)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=summary))])


def main(path: Path) -> dict[str, Any]:
    """Chat through the questions; return what is stored, archived and sent to the model."""
    memory = SummarizingChatMemory(
        SQLChatMemory(f"sqlite:///{path}"),
        summarizer=summarizer_from_chat_model(ExtractiveSummaryModel()),
        trigger=10,
        keep_first=1,  # the system prompt stays pinned
        keep_recent=4,
    )
    session = "trip"
    memory.clear(session)  # start afresh if the file is reused (the archive too)
    memory.clear(archive_id(session))
    history = MemwovenChatMessageHistory(memory, session)
    history.add_messages([SystemMessage(content="You are a friendly travel assistant.")])
    model = GenericFakeChatModel(messages=iter([AIMessage(content=f"Here is my advice #{n}.") for n in range(1, 99)]))
    for question in QUESTIONS:
        asked = HumanMessage(content=question)
        reply = model.invoke([*history.messages, asked])  # the stored history: pinned, summary, recent
        history.add_messages([asked, reply])  # one atomic append; compaction runs when it passes the trigger

    stored = memory.load(session)
    summary = next(m for m in stored if is_summary(m))
    window = memory.context_window(session, max_tokens=120).load()
    print(f"{len(QUESTIONS) * 2 + 1} messages written; {len(stored)} stored, {len(memory.archived(session))} archived")
    print(f"summary ({summary.metadata['memwoven_summary']['layers']} layers): {summary.text!r}")
    print(f"a 120-token window holds {len(window)} messages ({window.tokens} tokens):")
    for message in window:
        print(f"  {message.role}: {message.text[:100]!r}")
    result = {"stored": stored, "archived": memory.archived(session), "window": window}
    memory.close()
    return result


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "summarization.db")
