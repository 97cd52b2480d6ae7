"""`MemwovenDBChatStore`: the `AsyncDBChatStore` behind LlamaIndex's agent `Memory`, over any `ChatMemory`.

Every message of a key stays in its one memwoven session, in order. An archived message carries
`metadata["llama_index_status"] = "archived"`; an active one carries nothing. Archiving is therefore a
read-modify-write of the oldest active messages' metadata under the session's optimistic version: nothing is
lost when `Memory` flushes, other frameworks reading the session still see the whole conversation, and
`MemwovenChatStore` can read and write the same sessions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus

from llama_index.storage.chat_store.memwoven import _edits
from llama_index.storage.chat_store.memwoven._convert import to_chat, to_chat_many, to_core, to_core_many
from llama_index.storage.chat_store.memwoven.base import SessionStore
from memwoven.contracts import ChatMemory, check_page, page_of
from memwoven.models import Message, freeze_json

__all__ = ["STATUS_KEY", "MemwovenDBChatStore"]

STATUS_KEY = "llama_index_status"
"""The metadata key that marks an archived message."""


class MemwovenDBChatStore(SessionStore, AsyncDBChatStore):
    """The chat store of LlamaIndex's `Memory` (`Memory.from_defaults(chat_store=...)`) over a `ChatMemory`.

    Messages keep an ACTIVE/ARCHIVED status; `Memory`'s flush archives the oldest active messages instead of
    deleting them. `idx` in `delete_message` is the position in the key's full history (all statuses).
    """

    @classmethod
    def class_name(cls) -> str:
        """The LlamaIndex class name."""
        return "MemwovenDBChatStore"

    def __init__(self, memory: ChatMemory, *, key_prefix: str = "", **kwargs: Any) -> None:
        # spelled out (not only inherited) so that pydantic's mypy plugin keeps this signature
        super().__init__(memory, key_prefix=key_prefix, **kwargs)

    async def get_messages(
        self,
        key: str,
        status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[ChatMessage]:
        """The messages of `key` with `status` (None: all), oldest first, from `offset`, at most `limit` (ints >= 0,
        `InvalidInputError` otherwise: SQL stores refuse negatives or read them each their own way)."""
        limit, start = check_page(limit, 0 if offset is None else offset)
        messages = [m for m in await self._memory.aload(self._session(key)) if _has(m, status)]
        return to_chat_many(page_of(messages, limit, start))

    async def count_messages(self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE) -> int:
        """How many messages of `key` have `status` (None: all)."""
        return sum(_has(m, status) for m in await self._memory.aload(self._session(key)))

    async def add_message(self, key: str, message: ChatMessage, status: MessageStatus = MessageStatus.ACTIVE) -> None:
        """Append one message with `status` (atomic)."""
        await self._memory.aappend(self._session(key), [_with_status(to_core(message), status)])

    async def add_messages(
        self, key: str, messages: list[ChatMessage], status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        """Append messages with `status`, all at once (atomic)."""
        await self._memory.aappend(self._session(key), [_with_status(to_core(m), status) for m in messages])

    async def set_messages(
        self, key: str, messages: list[ChatMessage], status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        """Replace every message of `key` (whatever its status) with `messages`, all with `status`."""
        await self._memory.aupdate(
            self._session(key), lambda stored: [_with_status(m, status) for m in to_core_many(messages, stored)]
        )

    async def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Delete the message at position `idx` of the key's full history and return it (None if none)."""
        deleted = await self._adelete(key, _edits.position(idx))
        return to_chat(deleted[0]) if deleted else None

    async def delete_messages(self, key: str, status: MessageStatus | None = None) -> None:
        """Delete the messages of `key` with `status` (None: all of them)."""
        await self._adelete(key, _having(status))

    async def delete_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        """Delete the `n` oldest active messages of `key` and return them."""
        return to_chat_many(await self._adelete(key, _oldest_active(n)))

    async def archive_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        """Mark the `n` oldest active messages of `key` archived and return them."""
        pick = _edits.Pick(_oldest_active(n), rewrite=lambda m: _with_status(m, MessageStatus.ARCHIVED))
        await self._memory.aupdate(self._session(key), pick)
        return to_chat_many(pick.picked)

    async def get_keys(self) -> list[str]:
        """The keys of this store's non-empty sessions (those under `key_prefix`), sorted."""
        return self._keys(await self._memory.asessions())


def _status(message: Message) -> MessageStatus:
    archived = message.metadata.get(STATUS_KEY) == MessageStatus.ARCHIVED.value
    return MessageStatus.ARCHIVED if archived else MessageStatus.ACTIVE


def _has(message: Message, status: MessageStatus | None) -> bool:
    return status is None or _status(message) == status


def _with_status(message: Message, status: MessageStatus) -> Message:
    if _status(message) == status:
        return message
    metadata = {key: value for key, value in message.metadata.items() if key != STATUS_KEY}
    if status == MessageStatus.ARCHIVED:
        metadata[STATUS_KEY] = MessageStatus.ARCHIVED.value
    return message.model_copy(update={"metadata": freeze_json(metadata)})


def _having(status: MessageStatus | None) -> _edits.Selector:
    return lambda messages: [i for i, message in enumerate(messages) if _has(message, status)]


def _oldest_active(n: int) -> _edits.Selector:
    def select(messages: list[Message]) -> Iterable[int]:
        active = [i for i, message in enumerate(messages) if _status(message) == MessageStatus.ACTIVE]
        return active[: max(n, 0)]

    return select
