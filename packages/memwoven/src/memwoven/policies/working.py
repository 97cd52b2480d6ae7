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
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import JsonValue, TypeAdapter, ValidationError

from memwoven._steps import Call, Steps, twins
from memwoven.contracts import ChatMemory, check_id
from memwoven.errors import CorruptMemoryError, InvalidInputError
from memwoven.models import Message, freeze_json, thaw
from memwoven.namespaces import check_namespace, namespaced_id
from memwoven.policies._base import SessionRecords, unwrap

__all__ = ["WORKING_KEY", "WorkingMemory"]

WORKING_KEY = "memwoven_working"
"""The `Message.metadata` key of a working-memory entry."""

_JSON = TypeAdapter(JsonValue)
_MISSING = object()


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


class WorkingMemory(SessionRecords):
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

    def _set_change(self, key: str, value: Any, importance: float) -> Callable[[list[Message]], list[Message]]:
        entry = self._new_entry(key, value, importance)
        return lambda messages: _with(messages, self.session_id, key, entry)

    def _delete_change(self, record: str) -> Callable[[list[Message]], list[Message]]:
        return lambda messages: _without(messages, self.session_id, record)

    def _read(self) -> Steps[dict[str, tuple[Any, float]]]:
        """The entries, by key: (value, importance)."""
        return _entries((yield from self._messages()), self.session_id)

    # Sync API (each method: one read or one read-modify-write, then a pure helper) and its async twins ---------

    def _set(self, key: str, value: Any, importance: float = 0.5) -> Steps[None]:
        """Set `key` to a JSON `value` (replacing any previous value) with an `importance` from 0 to 1."""
        yield Call(self.store, "update", (self.session_id, self._set_change(key, value, importance)))

    set, aset = twins(_set)

    def _get(self, key: str, default: Any = None) -> Steps[Any]:
        """The value of `key`, or `default`."""
        found = (yield from self._read()).get(key)
        return default if found is None else thaw(found[0])

    get, aget = twins(_get)

    def _has(self, key: str) -> Steps[bool]:
        """True if `key` is set."""
        return key in (yield from self._read())

    has, ahas = twins(_has)

    def _importance(self, key: str) -> Steps[float | None]:
        """The importance of `key`, or None if it is not set."""
        found = (yield from self._read()).get(key)
        return None if found is None else found[1]

    importance, aimportance = twins(_importance)

    def _delete(self, key: str) -> Steps[bool]:
        """Remove `key`; return whether it was set."""
        return (yield from self._delete_record(key))

    delete, adelete = twins(_delete)

    def _keys(self) -> Steps[list[str]]:
        """The keys, in the order they were first set."""
        return list((yield from self._read()))

    keys, akeys = twins(_keys)

    def _items(self) -> Steps[list[tuple[str, Any]]]:
        """(key, value) pairs, in the order the keys were first set."""
        return [(key, thaw(value)) for key, (value, _) in (yield from self._read()).items()]

    items, aitems = twins(_items)

    def _to_dict(self) -> Steps[dict[str, Any]]:
        """Every entry as a plain dict."""
        items: list[tuple[str, Any]] = yield Call(self, "items")
        return dict(items)

    to_dict, ato_dict = twins(_to_dict)

    def _clear(self) -> Steps[None]:
        """Remove every entry of this scope."""
        yield from self._clear_session()

    clear, aclear = twins(_clear)

    def _to_context_string(
        self, *, min_importance: float = 0.0, max_items: int | None = None, title: str = "Working memory:"
    ) -> Steps[str]:
        """The entries as lines for a prompt, most important first ("" when empty)."""
        entries = sorted((yield from self._read()).items(), key=lambda item: (-item[1][1], item[0]))
        lines = [f"- {key}: {_render(value)}" for key, (value, importance) in entries if importance >= min_importance]
        lines = lines[:max_items] if max_items is not None else lines
        return "\n".join([title, *lines]) if lines else ""

    to_context_string, ato_context_string = twins(_to_context_string)
