"""`MemwovenKVStore`: LlamaIndex's `BaseKVStore` over any memwoven `ItemMemory`.

A collection is the item namespace ``(*namespace_prefix, collection)``, a key is the item's key and the value is
the item's value, a JSON object (what LlamaIndex stores there is JSON already: nodes as `doc_to_json`, index
structures as `index_struct_to_json`, hashes and ref-doc infos as plain dicts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.storage.kvstore.types import DEFAULT_BATCH_SIZE, DEFAULT_COLLECTION, BaseKVStore

from memwoven._steps import Call, Runner, Steps, twins
from memwoven.contracts import ItemMemory, ItemWrite, check_item_key, check_item_value, check_namespace
from memwoven.errors import InvalidInputError
from memwoven.models import Item, thaw
from memwoven.urls import open_item_memory

__all__ = ["MemwovenKVStore"]


class MemwovenKVStore(BaseKVStore, Runner):
    """A LlamaIndex key-value store whose collections are namespaces of a memwoven `ItemMemory` (in memory, SQLite,
    PostgreSQL, MariaDB/MySQL, ...).

    Collection `c` is the namespace ``(*namespace_prefix, c)``: stores with different prefixes over one
    `ItemMemory` never see each other's items, and the default prefix, ``()``, puts each collection at the top.
    Values must be JSON objects (`InvalidInputError` otherwise, before anything is written). `put_all` writes
    `batch_size` items per `put_many` (one transaction on SQL backends); every method has an async twin
    (`aput`, `aget`, `aget_all`, `adelete`, `aput_all`) running on the item memory's own async twins.
    """

    def __init__(self, items: ItemMemory, *, namespace_prefix: Sequence[str] = ()) -> None:
        if not isinstance(items, ItemMemory):
            raise InvalidInputError(f"MemwovenKVStore needs a memwoven ItemMemory, got {type(items).__name__}")
        self._items = items
        self._prefix = check_namespace(namespace_prefix, "namespace_prefix", prefix=True)

    @classmethod
    def from_url(
        cls, url: str | None = None, *, namespace_prefix: Sequence[str] = (), **options: Any
    ) -> MemwovenKVStore:
        """A key-value store over the item memory a memwoven URL names (default `$MEMWOVEN_ITEM_URL`), e.g.
        ``sqlite:///storage.db``; `options` go to `open_item_memory` (`table_prefix=`, ...). `close()` closes it."""
        return cls(open_item_memory(url, **options), namespace_prefix=namespace_prefix)

    @property
    def items(self) -> ItemMemory:
        """The memwoven item memory underneath."""
        return self._items

    @property
    def namespace_prefix(self) -> tuple[str, ...]:
        """The labels before each collection's name in the item namespaces of this store."""
        return self._prefix

    def __repr__(self) -> str:
        return f"MemwovenKVStore({self._items!r}, namespace_prefix={self._prefix!r})"

    def _namespace(self, collection: str) -> tuple[str, ...]:
        return check_namespace((*self._prefix, collection), "collection")

    def _put(self, key: str, val: dict[str, Any], collection: str = DEFAULT_COLLECTION) -> Steps[None]:
        """Store `val` (a JSON object) under `key` in `collection`, replacing any value there."""
        yield Call(self._items, "put", (self._namespace(collection), key, val))

    def _put_all(
        self,
        kv_pairs: Sequence[tuple[str, dict[str, Any]]],
        collection: str = DEFAULT_COLLECTION,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Steps[None]:
        """Store each (key, value) pair in `collection`, `batch_size` pairs per `put_many` (each all or nothing).

        Every pair is validated before the first batch is written; a key given twice keeps its last value, as
        one `put` after another would.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be an int >= 1, got {batch_size!r:.120}")
        namespace = self._namespace(collection)
        latest: dict[str, dict[str, Any]] = {}
        for pair in kv_pairs:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise InvalidInputError(f"expected a (key, value) pair, got {pair!r:.120}")
            key, value = check_item_key(namespace, pair[0])[1], check_item_value(pair[1])
            latest.pop(key, None)  # a repeated key moves to its last position
            latest[key] = value
        writes = [ItemWrite(namespace, key, value) for key, value in latest.items()]
        for start in range(0, len(writes), batch_size):
            yield Call(self._items, "put_many", (writes[start : start + batch_size],))

    def _get(self, key: str, collection: str = DEFAULT_COLLECTION) -> Steps[dict[str, Any] | None]:
        """The value of `key` in `collection` (a fresh, mutable dict), or None."""
        item: Item | None = yield Call(self._items, "get", (self._namespace(collection), key))
        return None if item is None else thaw(item.value)

    def _get_all(self, collection: str = DEFAULT_COLLECTION) -> Steps[dict[str, dict[str, Any]]]:
        """Every key of `collection` and its value (fresh, mutable dicts)."""
        namespace = self._namespace(collection)
        found: list[Item] = yield Call(self._items, "list", (namespace,))
        # `list` takes a prefix: a store whose prefix continues this namespace keeps its items deeper down.
        return {item.key: thaw(item.value) for item in found if item.namespace == namespace}

    def _delete(self, key: str, collection: str = DEFAULT_COLLECTION) -> Steps[bool]:
        """Delete `key` from `collection`; return whether it was there."""
        deleted: bool = yield Call(self._items, "delete", (self._namespace(collection), key))
        return deleted

    def _close(self) -> Steps[None]:
        """Release the item memory's connections (the async ones are better released by `aclose`)."""
        yield Call(self._items, "close")

    put, aput = twins(_put)
    put_all, aput_all = twins(_put_all)
    get, aget = twins(_get)
    get_all, aget_all = twins(_get_all)
    delete, adelete = twins(_delete)
    close, aclose = twins(_close)
