"""A chain with chat history and a retriever, both stored in one SQLite file. Runs offline.

    uv run python examples/langchain_history_and_retriever.py [path/to/file.db]

The documents live in a `SQLVectorMemory` collection and the conversation in a `SQLChatMemory` session of the
same file; the "model" is a small deterministic function, so no API key is needed. Run it twice: the second
run remembers the first conversation.
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from operator import itemgetter
from pathlib import Path

from langchain_core.documents import Document
from langchain_core.messages import AIMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableConfig, RunnableLambda, RunnablePassthrough
from langchain_core.runnables.history import RunnableWithMessageHistory

from langchain_memwoven import MemwovenChatMessageHistory, MemwovenVectorStore
from memwoven.embed import HashingEmbedFn
from memwoven.urls import open_chat_memory, open_vector_memory

NOTES = [
    Document(page_content="The office coffee machine is on the 3rd floor, next to the library.", id="coffee"),
    Document(page_content="Expense reports are due on the 5th of each month.", id="expenses"),
    Document(page_content="The library lends laptops for up to two weeks.", id="laptops"),
]


def offline_model(prompt: PromptValue) -> AIMessage:
    """A stand-in for a chat model: answers with the best note and counts the earlier questions."""
    messages = prompt.to_messages()
    context = str(messages[0].content).split("\n")[1]
    earlier = sum(1 for message in messages[1:-1] if message.type == "human")
    return AIMessage(f"{context} (you asked {earlier} question(s) before this one)")


def main(path: Path) -> list[str]:
    """Ask two questions with history and retrieval over the SQLite file at `path`; returns the answers."""
    url = f"sqlite:///{path}"
    store = MemwovenVectorStore(open_vector_memory(url, collection="notes"), HashingEmbedFn())
    store.add_documents(NOTES)  # upserts by id, so running again does not duplicate them
    chat_memory = open_chat_memory(url)

    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "Answer from this note:\n{context}"),
            MessagesPlaceholder("history"),
            ("human", "{question}"),
        ]
    )
    retrieve = itemgetter("question") | store.as_retriever(search_kwargs={"k": 1})
    chain = (
        RunnablePassthrough.assign(context=retrieve | (lambda docs: docs[0].page_content))
        | prompt
        | RunnableLambda(offline_model)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # RunnableWithMessageHistory is deprecated upstream
        with_history = RunnableWithMessageHistory(
            chain,
            lambda session_id: MemwovenChatMessageHistory(chat_memory, session_id),
            input_messages_key="question",
            history_messages_key="history",
        )
        config: RunnableConfig = {"configurable": {"session_id": "demo"}}
        answers = [
            with_history.invoke({"question": question}, config).content
            for question in ("Where can I get a coffee?", "When are expense reports due?")
        ]
        history = MemwovenChatMessageHistory(chat_memory, "demo").messages
    for message in history:
        print(f"{message.type:>5}: {message.content}")
    print(f"{len(history)} messages in session 'demo'; {store.memory.count()} notes; both in {path}")
    chat_memory.close()
    store.close()
    return [str(answer) for answer in answers]


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "example.db")
