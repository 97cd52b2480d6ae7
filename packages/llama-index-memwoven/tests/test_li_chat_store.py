"""MemwovenChatStore on every backend: the BaseChatStore API (sync and async), ChatMemoryBuffer, concurrency."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, ClassVar

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer

from llama_index.storage.chat_store.memwoven import MemwovenChatStore
from memwoven import ChatMemory, InvalidInputError, Message


def said(*texts: str) -> list[ChatMessage]:
    return [ChatMessage(role="user" if i % 2 == 0 else "assistant", content=text) for i, text in enumerate(texts)]


def texts(messages: list[ChatMessage] | None) -> list[str | None]:
    return [message.content for message in messages or []]


class Sync:
    """Calls the store's sync methods."""

    def __init__(self, store: MemwovenChatStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return getattr(self.store, name)  # type: ignore[no-any-return]


class Async:
    """Calls the store's async twins (`aset_messages`, `async_add_message`, ...) to completion."""

    TWINS: ClassVar[dict[str, str]] = {"add_message": "async_add_message"}

    def __init__(self, store: MemwovenChatStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Callable[..., Any]:
        twin: Callable[..., Coroutine[Any, Any, Any]] = getattr(self.store, self.TWINS.get(name, "a" + name))
        return lambda *args, **kwargs: asyncio.run(twin(*args, **kwargs))


@pytest.fixture(params=[Sync, Async])
def store(request: pytest.FixtureRequest, chat_memory: ChatMemory) -> Any:
    return request.param(MemwovenChatStore(chat_memory))


def test_set_get_and_add(store: Any) -> None:
    assert store.get_messages("k") == []
    store.set_messages("k", said("a", "b"))
    store.add_message("k", ChatMessage(role="user", content="c"))
    assert texts(store.get_messages("k")) == ["a", "b", "c"]
    store.set_messages("k", said("x"))
    assert texts(store.get_messages("k")) == ["x"]
    store.set_messages("k", [])
    assert store.get_messages("k") == []
    assert store.get_keys() == []


def test_delete_message_by_position_keeps_the_order(store: Any) -> None:
    store.set_messages("k", said("a", "b", "c", "d"))
    assert store.delete_message("k", 1).content == "b"
    assert store.delete_message("k", -1).content == "d"
    assert store.delete_message("k", 5) is None
    assert store.delete_message("missing", 0) is None
    assert texts(store.get_messages("k")) == ["a", "c"]


def test_delete_last_and_delete_all(store: Any) -> None:
    assert store.delete_last_message("k") is None
    store.set_messages("k", said("a", "b"))
    assert store.delete_last_message("k").content == "b"
    assert texts(store.delete_messages("k")) == ["a"]
    assert store.delete_messages("k") is None
    assert store.get_keys() == []


def test_get_keys_lists_only_this_stores_sessions(chat_memory: ChatMemory) -> None:
    chat_memory.save("other-app:1", [Message(role="user", content="not ours")])
    store = MemwovenChatStore(chat_memory, key_prefix="llama:")
    store.set_messages("b", said("1"))
    store.set_messages("a", said("2"))
    assert store.get_keys() == ["a", "b"]
    assert asyncio.run(store.aget_keys()) == ["a", "b"]
    assert chat_memory.sessions() == ["llama:a", "llama:b", "other-app:1"]
    assert MemwovenChatStore(chat_memory).get_keys() == ["llama:a", "llama:b", "other-app:1"]


def test_a_key_prefix_is_a_namespace_no_other_prefix_reaches(chat_memory: ChatMemory) -> None:
    with pytest.raises(InvalidInputError):
        MemwovenChatStore(chat_memory, key_prefix="tenant1")  # it would start the keys of "tenant10"
    outer, inner = MemwovenChatStore(chat_memory, key_prefix="a:"), MemwovenChatStore(chat_memory, key_prefix="a:b:")
    inner.set_messages("k", said("theirs"))
    assert outer.get_keys() == []
    assert outer.get_messages("b:k") == []
    assert outer.delete_messages("b:k") is None
    outer.set_messages("b:k", said("mine"))
    assert chat_memory.sessions() == ["a:b%3Ak", "a:b:k"]
    assert texts(inner.get_messages("k")) == ["theirs"]
    assert outer.get_keys() == ["b:k"]
    assert inner.get_keys() == ["k"]


def test_a_second_store_over_the_same_storage_sees_the_writes(chat_memory: ChatMemory, reopen_chat: ChatMemory) -> None:
    MemwovenChatStore(chat_memory).set_messages("k", said("a", "b"))
    assert texts(MemwovenChatStore(reopen_chat).get_messages("k")) == ["a", "b"]


def test_chat_memory_buffer_over_the_store(chat_memory: ChatMemory, reopen_chat: ChatMemory) -> None:
    buffer = ChatMemoryBuffer.from_defaults(
        chat_store=MemwovenChatStore(chat_memory), chat_store_key="u1", token_limit=50
    )
    for i in range(30):
        buffer.put(ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"message number {i}"))
    asyncio.run(buffer.aput(ChatMessage(role="user", content="async")))
    assert len(buffer.get_all()) == 31
    assert 0 < len(buffer.get()) < 31  # the buffer's token window
    reloaded = ChatMemoryBuffer.from_defaults(chat_store=MemwovenChatStore(reopen_chat), chat_store_key="u1")
    assert [m.model_dump(mode="json") for m in reloaded.get_all()] == [
        m.model_dump(mode="json") for m in buffer.get_all()
    ]
    buffer.set(said("fresh"))
    assert texts(reloaded.get_all()) == ["fresh"]
    asyncio.run(buffer.areset())
    assert reloaded.get_all() == []


def test_concurrent_writers_lose_nothing(chat_memory: ChatMemory) -> None:
    store = MemwovenChatStore(chat_memory)
    store.set_messages("k", said(*[f"old-{i}" for i in range(20)]))
    errors: list[BaseException] = []

    def add(writer: int) -> None:
        try:
            for i in range(10):
                store.add_message("k", ChatMessage(role="user", content=f"w{writer}-{i}"))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    def delete() -> None:
        try:
            for _ in range(10):
                store.delete_message("k", 0)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=add, args=(w,)) for w in range(3)] + [threading.Thread(target=delete)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    left = texts(store.get_messages("k"))
    assert left[:10] == [f"old-{i}" for i in range(10, 20)]  # exactly the 10 oldest were deleted
    assert sorted(map(str, left[10:])) == sorted(f"w{w}-{i}" for w in range(3) for i in range(10))


def test_from_url(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/chat.db"
    store = MemwovenChatStore.from_url(url, key_prefix="app:")
    store.add_message("k", ChatMessage(role="user", content="hello"))
    store.close()
    again = MemwovenChatStore.from_url(url, key_prefix="app:")
    assert texts(again.get_messages("k")) == ["hello"]
    assert again.memory.sessions() == ["app:k"]
    asyncio.run(again.aclose())
    assert MemwovenChatStore.from_url("memory://").get_keys() == []
