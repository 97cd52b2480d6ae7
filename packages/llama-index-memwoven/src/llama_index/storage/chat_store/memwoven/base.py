"""`MemwovenChatStore`: LlamaIndex's `BaseChatStore` over any memwoven `ChatMemory`."""

from __future__ import annotations

from typing import Any, TypeVar

from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr
from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store.base import BaseChatStore

from llama_index.storage.chat_store.memwoven import _edits
from llama_index.storage.chat_store.memwoven._convert import to_chat, to_chat_many, to_core, to_core_many
from memwoven._steps import Call, Runner, Steps, twins
from memwoven.contracts import ChatMemory
from memwoven.errors import InvalidInputError
from memwoven.models import Message
from memwoven.namespaces import check_namespace, keys_in_namespace, namespaced_id
from memwoven.urls import open_chat_memory

__all__ = ["MemwovenChatStore", "SessionStore"]

_Store = TypeVar("_Store", bound="SessionStore")


class SessionStore(BaseModel, Runner):
    """What both chat stores share: a `ChatMemory` and the mapping of keys to its sessions."""

    key_prefix: str = Field(default="", description="The namespace of this store's keys: '' or ending with ':'.")
    _memory: ChatMemory = PrivateAttr()

    def __init__(self, memory: ChatMemory, *, key_prefix: str = "", **kwargs: Any) -> None:
        if not isinstance(memory, ChatMemory):
            raise InvalidInputError(f"{type(self).__name__} needs a memwoven ChatMemory, got {type(memory).__name__}")
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

    def _close(self) -> Steps[None]:
        """Release the chat memory's connections (the async ones are better released by `aclose`)."""
        yield Call(self._memory, "close")

    close, aclose = twins(_close)

    def _session(self, key: str) -> str:
        return namespaced_id(self.key_prefix, key)

    def _keys(self, sessions: list[str]) -> list[str]:
        return keys_in_namespace(self.key_prefix, sessions)

    def _delete_steps(self, key: str, select: _edits.Selector) -> Steps[list[Message]]:
        """Remove the messages `select` picks from the session of `key` (optimistic, retried); return them."""
        pick = _edits.Pick(select)
        yield Call(self._memory, "update", (self._session(key), pick))
        return pick.picked

    _delete, _adelete = twins(_delete_steps)


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

    def _set_messages(self, key: str, messages: list[ChatMessage]) -> Steps[None]:
        """Replace the messages of `key` (messages read from it and unchanged are kept exactly as stored)."""
        yield Call(self._memory, "update", (self._session(key), lambda stored: to_core_many(messages, stored)))

    def _get_messages(self, key: str) -> Steps[list[ChatMessage]]:
        """The messages of `key`, oldest first ([] for an unknown key)."""
        return to_chat_many((yield Call(self._memory, "load", (self._session(key),))))

    def _add_message(self, key: str, message: ChatMessage) -> Steps[None]:
        """Append a message to `key` (atomic)."""
        yield Call(self._memory, "append", (self._session(key), [to_core(message)]))

    def _delete_messages(self, key: str) -> Steps[list[ChatMessage] | None]:
        """Delete every message of `key` and return them (None if there were none)."""
        return to_chat_many((yield from self._delete_steps(key, _edits.every))) or None

    def _delete_message(self, key: str, idx: int) -> Steps[ChatMessage | None]:
        """Delete the message at list position `idx` of `key` and return it (None if there is none)."""
        return _first((yield from self._delete_steps(key, _edits.position(idx))))

    def _delete_last_message(self, key: str) -> Steps[ChatMessage | None]:
        """Delete the last message of `key` and return it (None if there is none)."""
        return _first((yield from self._delete_steps(key, _edits.last)))

    def _get_keys(self) -> Steps[list[str]]:
        """The keys of this store's non-empty sessions (those under `key_prefix`), sorted."""
        return self._keys((yield Call(self._memory, "sessions")))

    set_messages, aset_messages = twins(_set_messages)
    get_messages, aget_messages = twins(_get_messages)
    add_message, async_add_message = twins(_add_message, async_name="async_add_message")  # LlamaIndex's name
    delete_messages, adelete_messages = twins(_delete_messages)
    delete_message, adelete_message = twins(_delete_message)
    delete_last_message, adelete_last_message = twins(_delete_last_message)
    get_keys, aget_keys = twins(_get_keys)


def _first(messages: list[Message]) -> ChatMessage | None:
    return to_chat(messages[0]) if messages else None
