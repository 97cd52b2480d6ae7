"""`WorkingMemory`: a scoped key-value scratchpad for an agent, persisted on any `ChatMemory`.

Storage rides on the chat contract, so every backend (and its atomicity, versions, TTL and conformance tests)
serves it unchanged: a scope is one session, ``memwoven:working:<scope_id>`` by default (the scope id in the
`namespace`, see `memwoven.namespaces`: no two scopes or namespaces share a session), holding one message per
entry in insertion order::

    Message(role="system", content="<key>: <value as JSON>",
            metadata={"memwoven_working": {"key": ..., "value": <JSON value>, "importance": 0.5}})

The content is a readable rendering; the metadata is the source of truth. Writes are read-modify-write under the
session's optimistic version (`ChatMemory.update`), so concurrent writers to one scope lose nothing, and scopes
never see each other. Given a policy wrapper (`SummarizingChatMemory`, `TrimmingChatMemory`), the scratchpad is
stored in the backend under it: conversation policies never summarize or trim entries. Values are JSON values
(str, int, float, bool, None, lists and dicts of them); they are returned as plain, mutable copies.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import JsonValue, TypeAdapter, ValidationError

from memwoven.contracts import ChatMemory, check_id
from memwoven.errors import CorruptMemoryError, InvalidInputError
from memwoven.models import Message, freeze_json
from memwoven.namespaces import check_namespace, namespaced_id
from memwoven.policies._base import unwrap

__all__ = ["WORKING_KEY", "WorkingMemory"]

WORKING_KEY = "memwoven_working"
"""The `Message.metadata` key of a working-memory entry."""

_JSON = TypeAdapter(JsonValue)
_MISSING = object()


def thaw(value: Any) -> Any:
    """A deep, mutable copy of a (frozen) JSON value."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    return value


def _render(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _entry(message: Message, session_id: str) -> tuple[str, Any, float]:
    data: Any = message.metadata.get(WORKING_KEY)
    if not isinstance(data, dict) or not isinstance(data.get("key"), str) or "value" not in data:
        raise CorruptMemoryError(f"working memory {session_id!r} holds a message that is not an entry")
    importance = data.get("importance", 0.5)
    return data["key"], data["value"], float(importance) if isinstance(importance, (int, float)) else 0.5


def _entries(messages: Sequence[Message], session_id: str) -> dict[str, tuple[Any, float]]:
    return {key: (value, importance) for key, value, importance in (_entry(m, session_id) for m in messages)}


def _message(key: str, value: Any, importance: float) -> Message:
    return Message(
        role="system",
        content=f"{key}: {_render(value)}",
        metadata={WORKING_KEY: {"key": key, "value": value, "importance": importance}},
    )


def _with(messages: list[Message], session_id: str, key: str, entry: Message) -> list[Message]:
    """The entries with `key` set: replaced in place if present, else added at the end."""
    keys = [_entry(m, session_id)[0] for m in messages]
    if key in keys:
        return [entry if k == key else m for k, m in zip(keys, messages)]
    return [*messages, entry]


def _without(messages: list[Message], session_id: str, key: str) -> list[Message]:
    return [m for m in messages if _entry(m, session_id)[0] != key]


class WorkingMemory:
    """A key-value scratchpad for one scope (an agent, a task, a run), stored in a `ChatMemory`.

    Every method has an async twin (``aset``, ``aget``, ...). `importance` (0 to 1) orders
    `to_context_string()` and lets it leave out minor entries. `store` may be a policy wrapper: entries are kept
    in the backend under it (`store` is that backend).
    """

    def __init__(self, store: ChatMemory, scope_id: str, *, namespace: str = "memwoven:working:") -> None:
        self.store = unwrap(store)
        self.scope_id = check_id(scope_id, "scope id")
        self.session_id = check_id(namespaced_id(check_namespace(namespace), scope_id), "working memory session id")

    def __repr__(self) -> str:
        return f"WorkingMemory({self.store!r}, {self.scope_id!r})"

    # Validation and pure helpers -----------------------------------------------------------------------------

    def _new_entry(self, key: str, value: Any, importance: float) -> Message:
        check_id(key, "key")
        if isinstance(importance, bool) or not isinstance(importance, (int, float)) or not 0 <= importance <= 1:
            raise InvalidInputError(f"importance must be a number from 0 to 1, got {importance!r}")
        try:
            value = freeze_json(_JSON.validate_python(value, strict=True))
        except (ValidationError, ValueError) as error:
            raise InvalidInputError(f"the value of {key!r} is not a JSON value ({error})") from None
        return _message(key, value, float(importance))

    def _set_change(self, key: str, value: Any, importance: float) -> Any:
        entry = self._new_entry(key, value, importance)
        return lambda messages: _with(messages, self.session_id, key, entry)

    def _read(self, messages: list[Message]) -> dict[str, tuple[Any, float]]:
        return _entries(messages, self.session_id)

    def _get(self, messages: list[Message], key: str, default: Any) -> Any:
        found = self._read(messages).get(key)
        return default if found is None else thaw(found[0])

    def _importance(self, messages: list[Message], key: str) -> float | None:
        found = self._read(messages).get(key)
        return None if found is None else found[1]

    def _items(self, messages: list[Message]) -> list[tuple[str, Any]]:
        return [(key, thaw(value)) for key, (value, _) in self._read(messages).items()]

    def _delete_change(self, key: str) -> Any:
        return lambda messages: _without(messages, self.session_id, key)

    def _context(self, messages: list[Message], min_importance: float, max_items: int | None, title: str) -> str:
        entries = sorted(self._read(messages).items(), key=lambda item: (-item[1][1], item[0]))
        lines = [f"- {key}: {_render(value)}" for key, (value, importance) in entries if importance >= min_importance]
        lines = lines[:max_items] if max_items is not None else lines
        return "\n".join([title, *lines]) if lines else ""

    # Sync API (each method: one read or one read-modify-write, then a pure helper) -----------------------------

    def set(self, key: str, value: Any, importance: float = 0.5) -> None:
        """Set `key` to a JSON `value` (replacing any previous value) with an `importance` from 0 to 1."""
        self.store.update(self.session_id, self._set_change(key, value, importance))

    def get(self, key: str, default: Any = None) -> Any:
        """The value of `key`, or `default`."""
        return self._get(self.store.load(self.session_id), key, default)

    def has(self, key: str) -> bool:
        """True if `key` is set."""
        return key in self._read(self.store.load(self.session_id))

    def importance(self, key: str) -> float | None:
        """The importance of `key`, or None if it is not set."""
        return self._importance(self.store.load(self.session_id), key)

    def delete(self, key: str) -> bool:
        """Remove `key`; return whether it was set."""
        if not self.has(key):
            return False
        self.store.update(self.session_id, self._delete_change(key))
        return True

    def keys(self) -> list[str]:
        """The keys, in the order they were first set."""
        return list(self._read(self.store.load(self.session_id)))

    def items(self) -> list[tuple[str, Any]]:
        """(key, value) pairs, in the order the keys were first set."""
        return self._items(self.store.load(self.session_id))

    def to_dict(self) -> dict[str, Any]:
        """Every entry as a plain dict."""
        return dict(self.items())

    def clear(self) -> None:
        """Remove every entry of this scope."""
        self.store.clear(self.session_id)

    def to_context_string(
        self, *, min_importance: float = 0.0, max_items: int | None = None, title: str = "Working memory:"
    ) -> str:
        """The entries as lines for a prompt, most important first ("" when empty)."""
        return self._context(self.store.load(self.session_id), min_importance, max_items, title)

    # Async API -------------------------------------------------------------------------------------------------

    async def aset(self, key: str, value: Any, importance: float = 0.5) -> None:
        """Async twin of `set`."""
        await self.store.aupdate(self.session_id, self._set_change(key, value, importance))

    async def aget(self, key: str, default: Any = None) -> Any:
        """Async twin of `get`."""
        return self._get(await self.store.aload(self.session_id), key, default)

    async def ahas(self, key: str) -> bool:
        """Async twin of `has`."""
        return key in self._read(await self.store.aload(self.session_id))

    async def aimportance(self, key: str) -> float | None:
        """Async twin of `importance`."""
        return self._importance(await self.store.aload(self.session_id), key)

    async def adelete(self, key: str) -> bool:
        """Async twin of `delete`."""
        if not await self.ahas(key):
            return False
        await self.store.aupdate(self.session_id, self._delete_change(key))
        return True

    async def akeys(self) -> list[str]:
        """Async twin of `keys`."""
        return list(self._read(await self.store.aload(self.session_id)))

    async def aitems(self) -> list[tuple[str, Any]]:
        """Async twin of `items`."""
        return self._items(await self.store.aload(self.session_id))

    async def ato_dict(self) -> dict[str, Any]:
        """Async twin of `to_dict`."""
        return dict(await self.aitems())

    async def aclear(self) -> None:
        """Async twin of `clear`."""
        await self.store.aclear(self.session_id)

    async def ato_context_string(
        self, *, min_importance: float = 0.0, max_items: int | None = None, title: str = "Working memory:"
    ) -> str:
        """Async twin of `to_context_string`."""
        return self._context(await self.store.aload(self.session_id), min_importance, max_items, title)
