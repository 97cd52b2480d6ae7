"""`WorkingMemory`: a scoped key-value scratchpad for an agent, persisted on any `ItemMemory`.

A scope is one namespace of the item memory, ``("memwoven", "working", *namespace, scope_id)`` (`namespace` is
empty by default: labels of your own, a tenant say), and each entry one item, its key the entry's key::

    Item(namespace=("memwoven", "working", "agent-1"), key="task",
         value={"value": <the JSON value>, "importance": 0.9, "order": <creation stamp, ns>}, ttl=<the entry's>)

A write touches one item: `set` reads the entry, then creates it only if still absent (``expected_version=0``,
read again on a conflict) or replaces it keeping its place, so concurrent writers to a scope lose nothing (the
last `set` of a key wins) and never duplicate an entry; `delete` deletes one item. Listings read the scope's
namespace alone (items of a namespace nested under it belong to another scope and are left out), in the order
keys were first set (the `order` stamp). With `ttl`, each entry expires that many seconds after its last `set`
(the item memory's expiry: it reads as absent at once, and `cleanup_expired()` of the item memory frees it).
Values are JSON values (str, int, float, bool, None, lists and dicts of them); they are returned as plain, mutable
copies.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from pydantic import JsonValue, TypeAdapter, ValidationError

from memwoven._steps import Call, Steps, twins
from memwoven.contracts import ItemMemory, check_id, check_namespace, check_ttl, compare_and_set
from memwoven.errors import CorruptMemoryError, InvalidInputError
from memwoven.models import Item, freeze_json, thaw
from memwoven.policies._base import ItemRecords, check_count, check_items, next_order

__all__ = ["WORKING_ROOT", "WorkingMemory"]

WORKING_ROOT = ("memwoven", "working")
"""The first labels of every working-memory namespace."""

_JSON = TypeAdapter(JsonValue)


def _render(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


class _Entry(NamedTuple):
    key: str
    value: Any
    importance: float


class WorkingMemory(ItemRecords):
    """A key-value scratchpad for one scope (an agent, a task, a run), stored in an `ItemMemory`.

    Every method has an async twin (``aset``, ``aget``, ...), which calls the item memory's async twins.
    `importance` (0 to 1) orders `to_context_string()` and lets it leave out minor entries. `ttl` (seconds, None:
    never) is how long an entry lives after each `set` unless that `set` says otherwise.
    """

    def __init__(
        self, store: ItemMemory, scope_id: str, *, namespace: Sequence[str] = (), ttl: float | None = None
    ) -> None:
        self.store = check_items(store, "WorkingMemory")
        self.scope_id = check_id(scope_id, "scope id")
        labels = check_namespace(namespace, "namespace", prefix=True)
        self.namespace = check_namespace((*WORKING_ROOT, *labels, self.scope_id), "working memory namespace")
        self.ttl = check_ttl(ttl)

    def __repr__(self) -> str:
        return f"WorkingMemory({self.store!r}, {self.scope_id!r})"

    # Validation and reading ------------------------------------------------------------------------------------

    def _new_value(self, key: str, value: Any, importance: float) -> dict[str, Any]:
        check_id(key, "key")
        if isinstance(importance, bool) or not isinstance(importance, (int, float)) or not 0 <= importance <= 1:
            raise InvalidInputError(f"importance must be a number from 0 to 1, got {importance!r}")
        try:
            value = freeze_json(_JSON.validate_python(value, strict=True))
        except (ValidationError, ValueError) as error:
            raise InvalidInputError(f"the value of {key!r} is not a JSON value ({error})") from None
        return {"value": value, "importance": float(importance)}

    def _entry(self, item: Item) -> _Entry:
        importance = item.value.get("importance")
        if isinstance(importance, bool) or not isinstance(importance, (int, float)) or "value" not in item.value:
            raise CorruptMemoryError(f"working memory {self.namespace!r} holds an item that is not an entry")
        self._order(item)
        return _Entry(item.key, item.value["value"], float(importance))

    def _found(self, key: str) -> Steps[_Entry | None]:
        item: Item | None = yield Call(self.store, "get", (self.namespace, check_id(key, "key")))
        return None if item is None else self._entry(item)

    def _entries(self) -> Steps[list[_Entry]]:
        """The entries in the order their keys were first set."""
        return [self._entry(item) for item in (yield from self._stored(self.namespace))]

    # Sync API (each method: one item read or written, or the scope listed) and its async twins ------------------

    def _set(self, key: str, value: Any, importance: float = 0.5, *, ttl: float | None = None) -> Steps[None]:
        """Set `key` to a JSON `value` (replacing any previous value, in place) with an `importance` from 0 to 1;
        `ttl`: the seconds it lives from now (default: this memory's `ttl`)."""
        new = self._new_value(key, value, importance)
        expiry = self.ttl if ttl is None else check_ttl(ttl)

        def attempt() -> Steps[None]:
            item: Item | None = yield Call(self.store, "get", (self.namespace, key))
            # A new entry is created only if still absent, so writers racing to create it agree on its place; a
            # replacement keeps the place read (whoever writes last wins, as with any set).
            order = next_order() if item is None else self._order(item)
            options = {"ttl": expiry, "expected_version": 0 if item is None else None}
            yield Call(self.store, "put", (self.namespace, key, {**new, "order": order}), options)

        yield from compare_and_set(attempt, f"working memory entry {key!r}")

    set, aset = twins(_set)

    def _get(self, key: str, default: Any = None) -> Steps[Any]:
        """The value of `key`, or `default`."""
        found = yield from self._found(key)
        return default if found is None else thaw(found.value)

    get, aget = twins(_get)

    def _has(self, key: str) -> Steps[bool]:
        """True if `key` is set."""
        return (yield from self._found(key)) is not None

    has, ahas = twins(_has)

    def _importance(self, key: str) -> Steps[float | None]:
        """The importance of `key`, or None if it is not set."""
        found = yield from self._found(key)
        return None if found is None else found.importance

    importance, aimportance = twins(_importance)

    def _delete(self, key: str) -> Steps[bool]:
        """Remove `key`; return whether it was set."""
        existed: bool = yield Call(self.store, "delete", (self.namespace, check_id(key, "key")))
        return existed

    delete, adelete = twins(_delete)

    def _keys(self) -> Steps[list[str]]:
        """The keys, in the order they were first set."""
        return [entry.key for entry in (yield from self._entries())]

    keys, akeys = twins(_keys)

    def _items(self) -> Steps[list[tuple[str, Any]]]:
        """(key, value) pairs, in the order the keys were first set."""
        return [(entry.key, thaw(entry.value)) for entry in (yield from self._entries())]

    items, aitems = twins(_items)

    def _to_dict(self) -> Steps[dict[str, Any]]:
        """Every entry as a plain dict."""
        return dict((yield from self._items()))

    to_dict, ato_dict = twins(_to_dict)

    def _clear(self) -> Steps[None]:
        """Remove every entry of this scope."""
        yield from self._delete_all(self.namespace)

    clear, aclear = twins(_clear)

    def _to_context_string(
        self, *, min_importance: float = 0.0, max_items: int | None = None, title: str = "Working memory:"
    ) -> Steps[str]:
        """The entries as lines for a prompt, most important first ("" when empty)."""
        check_count(max_items, "max_items", optional=True)
        entries = sorted((yield from self._entries()), key=lambda entry: (-entry.importance, entry.key))
        lines = [f"- {e.key}: {_render(e.value)}" for e in entries if e.importance >= min_importance]
        lines = lines[:max_items] if max_items is not None else lines
        return "\n".join([title, *lines]) if lines else ""

    to_context_string, ato_context_string = twins(_to_context_string)
