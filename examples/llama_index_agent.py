"""A LlamaIndex agent whose chat memory and retrieval index share one SQLite file, through memwoven. Offline.

    uv run python examples/llama_index_agent.py [path/to/memory.db]

The LLM is scripted (no API key, no network): for each question it calls the `search_notes` tool, which retrieves
from a `VectorStoreIndex` over `MemwovenVectorStore`, then answers with what the tool found. The conversation goes
to LlamaIndex's agent `Memory` over `MemwovenDBChatStore`. Run it twice: the second run finds the notes already
indexed and the first conversation still in memory.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import Memory
from llama_index.core.schema import TextNode
from llama_index.core.tools import FunctionTool

from llama_index.embeddings.memwoven import EmbedFnEmbedding
from llama_index.storage.chat_store.memwoven import MemwovenDBChatStore
from llama_index.vector_stores.memwoven import MemwovenVectorStore
from memwoven.embed import HashingEmbedFn

NOTES = [
    "The team standup is at 9:30 every weekday, in the small meeting room.",
    "Expense reports are due on the last Friday of each month.",
    "The staging database is refreshed from production every Sunday night.",
    "New laptops are ordered through the IT portal and arrive within a week.",
]
QUESTIONS = ["When is the standup?", "When are expense reports due?", "How do I get a new laptop?"]


def scripted_llm(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """Stands in for a function-calling LLM: search the notes for the question, then answer from the result."""
    last = messages[-1]
    if last.role == MessageRole.TOOL:
        return ChatMessage(role="assistant", content=f"According to the notes: {last.content}")
    search = ToolCallBlock(
        tool_call_id=f"call-{len(messages)}", tool_name="search_notes", tool_kwargs={"query": last.content}
    )
    return ChatMessage(role="assistant", blocks=[search])


async def main(path: Path) -> None:
    """Index the notes (first run only), then ask the agent the questions, with memory in the same file."""
    url = f"sqlite:///{path}"
    vector_store = MemwovenVectorStore.from_url(url, collection="notes")
    index = VectorStoreIndex.from_vector_store(vector_store, embed_model=EmbedFnEmbedding(HashingEmbedFn(384)))
    if await vector_store.client.acount() == 0:
        await index.ainsert_nodes([TextNode(text=note) for note in NOTES])
    retriever = index.as_retriever(similarity_top_k=1)

    async def search_notes(query: str) -> str:
        """Find the note that best answers `query`."""
        return (await retriever.aretrieve(query))[0].get_content()

    chat_store = MemwovenDBChatStore.from_url(url)
    memory = Memory.from_defaults(session_id="example-user", chat_store=chat_store)
    remembered = await memory.aget_all()
    print(f"{len(remembered)} messages remembered from earlier runs in {path}")
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(async_fn=search_notes)],
        llm=MockFunctionCallingLLM(response_generator=scripted_llm),
        system_prompt="Answer from the team notes.",
    )
    for question in QUESTIONS:
        print(f"user:  {question}")
        print(f"agent: {await agent.run(question, memory=memory)}")
    messages, notes = len(await memory.aget_all()), await vector_store.client.acount()
    print(f"{messages} messages in memory now; the notes index holds {notes}")
    await chat_store.aclose()
    await vector_store.aclose()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.gettempdir()) / "memwoven-llama.db"))
