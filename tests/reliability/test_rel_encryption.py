"""The encryption wrappers on every backend: contended updates all land, and tokens stay in their collection.

8 threads (then 8 tasks) x 25 read-modify-write increments of a counter kept in a message's metadata, through
two `EncryptedChatMemory` objects over one store: no increment raises (no `ConcurrentModificationError`: after
its optimistic tries the wrapper takes the inner memory's per-session write lock) and the count ends at 200, on
every backend with such a lock. Then a document's stored token is copied, raw, into another collection of the
same store under the same id: reading it there raises `CorruptMemoryError` naming the document.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import pytest
from reliability_stores import SHARED_KINDS, VECTOR_KINDS, Store

from memwoven import Message, VectorDocument
from memwoven.encryption import EncryptedChatMemory, EncryptedVectorMemory, generate_key
from memwoven.errors import CorruptMemoryError

pytestmark = pytest.mark.timeout(300)

KEY = generate_key()
ID_KEY = generate_key()
WRITERS = 8
INCREMENTS = 25
SESSION = "counter ☃"
THINK = 0.002  # seconds each change takes


def _next(messages: list[Message]) -> list[Message]:
    count = messages[0].metadata["n"] if messages else 0
    assert isinstance(count, int)
    return [Message(role="user", content="counter", metadata={"n": count + 1})]


def _increment(messages: list[Message]) -> list[Message]:
    time.sleep(THINK)  # a change that takes a moment, as a real one does: the other writers get in meanwhile
    return _next(messages)


async def _aincrement(messages: list[Message]) -> list[Message]:
    await asyncio.sleep(THINK)
    return _next(messages)


@pytest.fixture
def chats(store: Store) -> Iterator[list[EncryptedChatMemory]]:
    """Two wrappers over two inner objects of one store (closed before the store is cleaned up)."""
    with ExitStack() as stack:
        yield [stack.enter_context(EncryptedChatMemory(store.chat(), key=KEY, id_key=ID_KEY)) for _ in range(2)]


def _check_count(store: Store, errors: list[BaseException]) -> None:
    assert not errors, f"{len(errors)} of {WRITERS * INCREMENTS} increments failed, e.g. {errors[0]!r}"
    with EncryptedChatMemory(store.chat(), key=KEY, id_key=ID_KEY) as fresh:
        [message] = fresh.load(SESSION)
    assert message.metadata["n"] == WRITERS * INCREMENTS


@pytest.mark.parametrize("store", SHARED_KINDS, indirect=True)
def test_contended_updates_all_land(store: Store, chats: list[EncryptedChatMemory]) -> None:
    errors: list[BaseException] = []

    def writer(chat: EncryptedChatMemory) -> None:
        for _ in range(INCREMENTS):
            try:
                chat.update(SESSION, _increment)
            except Exception as error:
                errors.append(error)

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(writer, [chats[w % 2] for w in range(WRITERS)]))
    _check_count(store, errors)


@pytest.mark.parametrize("store", SHARED_KINDS, indirect=True)
def test_contended_async_updates_all_land(store: Store, chats: list[EncryptedChatMemory]) -> None:
    errors: list[BaseException] = []

    async def writer(chat: EncryptedChatMemory) -> None:
        for _ in range(INCREMENTS):
            try:
                await chat.aupdate(SESSION, _aincrement)
            except Exception as error:
                errors.append(error)

    async def race() -> None:
        await asyncio.gather(*(writer(chats[w % 2]) for w in range(WRITERS)))
        for chat in chats:
            await chat.aclose()

    asyncio.run(race())
    _check_count(store, errors)


@pytest.mark.parametrize("hashed", [False, True], ids=["plain-ids", "hashed-ids"])
@pytest.mark.parametrize("store", VECTOR_KINDS, indirect=True)
def test_a_token_copied_to_another_collection_does_not_decrypt_there(store: Store, hashed: bool) -> None:
    def collection(name: str) -> EncryptedVectorMemory:
        inner = store.vector(name, dimension=3)
        named = name if store.kind == "memory" else None  # an in-memory collection has no name of its own
        return EncryptedVectorMemory(inner, key=KEY, id_key=ID_KEY if hashed else None, collection=named)

    with collection("notes") as notes, collection("other") as other:
        notes.store([VectorDocument(id="secret", content="locker 4711", embedding=[1.0, 0.0, 0.0])])
        other.store([VectorDocument(id="own", content="mine", embedding=[0.0, 1.0, 0.0])])
        other.inner.store(notes.inner.get([notes.stored_id("secret")]))  # the raw stored document, same id
        named = re.escape(f"(stored as {other.stored_id('secret')})" if hashed else "secret")
        with pytest.raises(CorruptMemoryError, match="document 'secret' fails authentication"):
            other.get(["secret"])
        with pytest.raises(CorruptMemoryError, match=f"document '{named}' fails authentication"):
            other.search([1.0, 0.0, 0.0], top_k=1)

        async def read_async() -> None:  # in one event loop, which the async clients are closed in
            try:
                with pytest.raises(CorruptMemoryError, match="document 'secret' fails authentication"):
                    await other.aget(["secret"])
                with pytest.raises(CorruptMemoryError, match=f"document '{named}' fails authentication"):
                    await other.asearch([1.0, 0.0, 0.0], top_k=1, filter={"k": 1})
            finally:
                await other.aclose()

        if hashed:  # listing decrypts every document
            with pytest.raises(CorruptMemoryError, match=named):
                other.ids()
        assert notes.get(["secret"])[0].content == "locker 4711"
        assert other.get(["own"])[0].content == "mine"
        asyncio.run(read_async())
