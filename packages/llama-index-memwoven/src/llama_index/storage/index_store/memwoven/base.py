"""`MemwovenIndexStore`: LlamaIndex's `KVIndexStore` on a `MemwovenKVStore`, as every LlamaIndex index-store
integration is built on its key-value store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.storage.index_store.keyval_index_store import KVIndexStore

from llama_index.storage.kvstore.memwoven import MemwovenKVStore
from memwoven.contracts import ItemMemory

__all__ = ["MemwovenIndexStore"]


class MemwovenIndexStore(KVIndexStore):
    """A LlamaIndex index store over a memwoven `ItemMemory`, through `MemwovenKVStore`.

    Each index structure is an item keyed by its index id in the collection ``<namespace>/data`` (`namespace`
    defaults to ``"index_store"``), under the key-value store's `namespace_prefix`; `load_index_from_storage` in
    another process finds it there.
    """

    def __init__(
        self,
        memwoven_kvstore: MemwovenKVStore,
        namespace: str | None = None,
        collection_suffix: str | None = None,
    ) -> None:
        super().__init__(memwoven_kvstore, namespace=namespace, collection_suffix=collection_suffix)
        self._memwoven_kvstore = memwoven_kvstore

    @classmethod
    def from_item_memory(
        cls, items: ItemMemory, *, namespace_prefix: Sequence[str] = (), namespace: str | None = None
    ) -> MemwovenIndexStore:
        """An index store over `items` (its key-value store's collections under `namespace_prefix`)."""
        return cls(MemwovenKVStore(items, namespace_prefix=namespace_prefix), namespace)

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
        *,
        namespace_prefix: Sequence[str] = (),
        namespace: str | None = None,
        **options: Any,
    ) -> MemwovenIndexStore:
        """An index store over the item memory a memwoven URL names (default `$MEMWOVEN_ITEM_URL`), e.g.
        ``sqlite:///storage.db``; `options` go to `open_item_memory`. `kvstore.close()` closes it."""
        return cls(MemwovenKVStore.from_url(url, namespace_prefix=namespace_prefix, **options), namespace)

    @property
    def kvstore(self) -> MemwovenKVStore:
        """The memwoven key-value store underneath."""
        return self._memwoven_kvstore
