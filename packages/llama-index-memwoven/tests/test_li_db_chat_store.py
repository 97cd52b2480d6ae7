"""MemwovenDBChatStore on every backend: the AsyncDBChatStore API and LlamaIndex's agent `Memory` (flush archives)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.storage.chat_store.base_db import MessageStatus

from llama_index.storage.chat_store.memwoven import MemwovenChatStore, MemwovenDBChatStore
from llama_index.storage.chat_store.memwoven.db import STATUS_KEY
from memwoven import ChatMemory, Message
from memwoven.errors import InvalidInputError

ACTIVE, ARCHIVED = MessageStatus.ACTIVE, MessageStatus.ARCHIVED


def said(*texts: str) -> list[ChatMessage]:
    return [ChatMessage(role="user" if i % 2 == 0 else "assistant", content=text) for i, text in enumerate(texts)]


def texts(messages: list[ChatMessage]) -> list[str | None]:
    return [message.content for message in messages]


def test_the_async_db_chat_store_api(chat_memory: ChatMemory) -> None:
    store = MemwovenDBChatStore(chat_memory)

    async def scenario() -> None:
        await store.set_messages("k", said("a", "b", "c"))
        await store.add_message("k", ChatMessage(role="user", content="d"))
        await store.add_messages("k", said("old-1", "old-2"), status=ARCHIVED)
        assert texts(await store.get_messages("k")) == ["a", "b", "c", "d"]
        assert texts(await store.get_messages("k", status=ARCHIVED)) == ["old-1", "old-2"]
        assert texts(await store.get_messages("k", status=None, offset=2, limit=3)) == ["c", "d", "old-1"]
        assert (await store.count_messages("k"), await store.count_messages("k", status=None)) == (4, 6)

        assert texts(await store.archive_oldest_messages("k", 2)) == ["a", "b"]
        assert texts(await store.get_messages("k", status=ARCHIVED)) == ["a", "b", "old-1", "old-2"]
        assert texts(await store.delete_oldest_messages("k", 1)) == ["c"]
        deleted = await store.delete_message("k", 0)
        assert deleted is not None
        assert deleted.content == "a"
        assert await store.delete_message("k", 99) is None
        await store.delete_messages("k", status=ARCHIVED)
        assert texts(await store.get_messages("k", status=None)) == ["d"]
        assert await store.get_keys() == ["k"]
        await store.delete_messages("k")
        assert await store.get_keys() == []

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "page", [{"offset": -1}, {"limit": -1}, {"offset": 1, "limit": -2}, {"limit": 1.5}, {"offset": True}]
)
def test_a_page_of_messages_is_counted_in_ints_from_zero(chat_memory: ChatMemory, page: dict[str, Any]) -> None:
    # not Python slicing from the end: SQL stores refuse negatives or read them each their own way
    store = MemwovenDBChatStore(chat_memory)

    async def scenario() -> None:
        await store.add_messages("k", said("a", "b", "c", "d"))
        assert texts(await store.get_messages("k", offset=10)) == []
        assert texts(await store.get_messages("k", offset=None, limit=0)) == []
        with pytest.raises(InvalidInputError, match="must be an int >= 0"):
            await store.get_messages("k", **page)

    asyncio.run(scenario())


def test_status_is_message_metadata_and_set_messages_applies_one_status(chat_memory: ChatMemory) -> None:
    store = MemwovenDBChatStore(chat_memory)

    async def scenario() -> None:
        await store.set_messages("k", said("a", "b"))
        await store.archive_oldest_messages("k", 1)
        assert [m.metadata.get(STATUS_KEY) for m in chat_memory.load("k")] == ["archived", None]
        await store.set_messages("k", await store.get_messages("k", status=None), status=ARCHIVED)
        assert await store.count_messages("k") == 0
        assert texts(await store.get_messages("k", status=ARCHIVED)) == ["a", "b"]

    asyncio.run(scenario())


def test_archiving_leaves_a_foreign_message_as_it_was_but_its_status(chat_memory: ChatMemory) -> None:
    foreign = Message(role="user", content="hi", metadata={"lang": "en"}, extras={"langchain": {"type": "human"}})
    chat_memory.save("k", [foreign])
    asyncio.run(MemwovenDBChatStore(chat_memory).archive_oldest_messages("k", 1))
    (archived,) = chat_memory.load("k")
    assert archived.metadata == {"lang": "en", STATUS_KEY: "archived"}
    assert archived.model_copy(update={"metadata": foreign.metadata}) == foreign


def test_memory_flushes_by_archiving_and_loses_nothing(chat_memory: ChatMemory, reopen_chat: ChatMemory) -> None:
    memory = Memory.from_defaults(
        session_id="agent-1",
        chat_store=MemwovenDBChatStore(chat_memory),
        token_limit=60,
        token_flush_size=20,
        chat_history_token_ratio=0.5,
    )
    conversation = said(*[f"turn {i}: some words to use tokens" for i in range(16)])
    for message in conversation:
        memory.put(message)
    store = MemwovenDBChatStore(reopen_chat)
    archived = asyncio.run(store.get_messages("agent-1", status=ARCHIVED))
    active = asyncio.run(store.get_messages("agent-1"))
    assert archived
    assert active
    assert texts(archived + active) == texts(conversation)  # archived, not lost, order kept
    assert texts(memory.get_all()) == texts(conversation)
    assert texts(memory.get()) == texts(active)
    # the whole session stays readable as plain chat history
    assert texts(MemwovenChatStore(reopen_chat).get_messages("agent-1")) == texts(conversation)


def test_memory_set_and_reset(chat_memory: ChatMemory) -> None:
    memory = Memory.from_defaults(
        session_id="s", chat_store=MemwovenDBChatStore(chat_memory), chat_history=said("a", "b")
    )
    assert texts(memory.get_all()) == ["a", "b"]
    asyncio.run(memory.aput_messages(said("c", "d")))
    memory.set(said("x"))
    assert texts(memory.get_all()) == ["x"]
    memory.reset()
    assert memory.get_all() == []
    assert chat_memory.sessions() == []
