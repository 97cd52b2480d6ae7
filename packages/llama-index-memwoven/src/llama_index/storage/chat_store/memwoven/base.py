"""`MemwovenChatStore`: LlamaIndex's `BaseChatStore` over any memwoven `ChatMemory`."""

from __future__ import annotations

from typing import Any, TypeVar

from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr
from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store.base import BaseChatStore

from llama_index.storage.chat_store.memwoven import _edits
from llama_index.storage.chat_store.memwoven._convert import to_chat, to_chat_many, to_core, to_core_many
from memwoven.contracts import ChatMemory
from memwoven.models import Message
from memwoven.namespaces import check_namespace, keys_in_namespace, namespaced_id
from memwoven.urls import open_chat_memory

__all__ = ["MemwovenChatStore", "SessionStore"]

_Store = TypeVar("_Store", bound="SessionStore")


class SessionStore(BaseModel):
    """What both chat stores share: a `ChatMemory` and the mapping of keys to its sessions."""

    key_prefix: str = Field(default="", description="The namespace of this store's keys: '' or ending with ':'.")
    _memory: ChatMemory = PrivateAttr()

    def __init__(self, memory: ChatMemory, *, key_prefix: str = "", **kwargs: Any) -> None:
        super().__init__(key_prefix=check_namespace(key_prefix, "key_prefix"), **kwargs)
        self._memory = memory

    @classmethod
    def from_url(cls: type[_Store], url: str | None = None, *, key_prefix: str = "", **options: Any) -> _Store:
        """Open the chat memory a memwoven URL names (default `$MEMWOVEN_CHAT_URL`), e.g. `sqlite:///chat.db`."""
        return cls(open_chat_memory(url, **options), key_prefix=key_prefix)

    @property
    def memory(self) -> ChatMemory:
        """The memwoven chat memory underneath."""
        return self._memory

    def close(self) -> None:
        """Release the chat memory's connections (the async ones are better released by `aclose`)."""
        self._memory.close()

    async def aclose(self) -> None:
        """Release the chat memory's connections, on the running event loop."""
        await self._memory.aclose()

    def _session(self, key: str) -> str:
        return namespaced_id(self.key_prefix, key)

    def _keys(self, sessions: list[str]) -> list[str]:
        return keys_in_namespace(self.key_prefix, sessions)

    def _delete(self, key: str, select: _edits.Selector) -> list[Message]:
        """Remove the messages `select` picks from the session of `key` (optimistic, retried); return them."""
        pick = _edits.Pick(select)
        self._memory.update(self._session(key), pick)
        return pick.picked

    async def _adelete(self, key: str, select: _edits.Selector) -> list[Message]:
        """Async twin of `_delete`."""
        pick = _edits.Pick(select)
        await self._memory.aupdate(self._session(key), pick)
        return pick.picked


class MemwovenChatStore(SessionStore, BaseChatStore):
    """A LlamaIndex chat store whose keys are sessions of a memwoven `ChatMemory` (in memory, files, SQL, ...).

    `add_message` is an atomic append; `set_messages` replaces a whole session; the deletions are read-modify-write
    steps under the session's optimistic version, retried on conflict, so concurrent writers lose nothing. A
    `key_prefix` (ending with ':', e.g. ``"tenant1:"``) is a namespace (`memwoven.namespaces`): key `k` is the
    session ``key_prefix + k`` (any ':' or '%' of `k` escaped), and `get_keys` lists only the keys of that prefix,
    never those of another prefix, even one that starts with it. Without one, keys are the session ids.
    """

    @classmethod
    def class_name(cls) -> str:
        """The LlamaIndex class name."""
        return "MemwovenChatStore"

    def __init__(self, memory: ChatMemory, *, key_prefix: str = "", **kwargs: Any) -> None:
        # spelled out (not only inherited) so that pydantic's mypy plugin keeps this signature
        super().__init__(memory, key_prefix=key_prefix, **kwargs)

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Replace the messages of `key` (messages read from it and unchanged are kept exactly as stored)."""
        self._memory.update(self._session(key), lambda stored: to_core_many(messages, stored))

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Async twin of `set_messages`."""
        await self._memory.aupdate(self._session(key), lambda stored: to_core_many(messages, stored))

    def get_messages(self, key: str) -> list[ChatMessage]:
        """The messages of `key`, oldest first ([] for an unknown key)."""
        return to_chat_many(self._memory.load(self._session(key)))

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        """Async twin of `get_messages`."""
        return to_chat_many(await self._memory.aload(self._session(key)))

    def add_message(self, key: str, message: ChatMessage) -> None:
        """Append a message to `key` (atomic)."""
        self._memory.append(self._session(key), [to_core(message)])

    async def async_add_message(self, key: str, message: ChatMessage) -> None:
        """Async twin of `add_message`."""
        await self._memory.aappend(self._session(key), [to_core(message)])

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Delete every message of `key` and return them (None if there were none)."""
        return to_chat_many(self._delete(key, _edits.every)) or None

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        """Async twin of `delete_messages`."""
        return to_chat_many(await self._adelete(key, _edits.every)) or None

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Delete the message at list position `idx` of `key` and return it (None if there is none)."""
        return _first(self._delete(key, _edits.position(idx)))

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Async twin of `delete_message`."""
        return _first(await self._adelete(key, _edits.position(idx)))

    def delete_last_message(self, key: str) -> ChatMessage | None:
        """Delete the last message of `key` and return it (None if there is none)."""
        return _first(self._delete(key, _edits.last))

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        """Async twin of `delete_last_message`."""
        return _first(await self._adelete(key, _edits.last))

    def get_keys(self) -> list[str]:
        """The keys of this store's non-empty sessions (those under `key_prefix`), sorted."""
        return self._keys(self._memory.sessions())

    async def aget_keys(self) -> list[str]:
        """Async twin of `get_keys`."""
        return self._keys(await self._memory.asessions())


def _first(messages: list[Message]) -> ChatMessage | None:
    return to_chat(messages[0]) if messages else None
