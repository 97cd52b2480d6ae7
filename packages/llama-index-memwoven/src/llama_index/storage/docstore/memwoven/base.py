"""`MemwovenDocumentStore`: LlamaIndex's `KVDocumentStore` on a `MemwovenKVStore`, as every LlamaIndex docstore
integration is built on its key-value store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.storage.docstore.keyval_docstore import KVDocumentStore

from llama_index.storage.kvstore.memwoven import MemwovenKVStore
from memwoven.contracts import ItemMemory

__all__ = ["DEFAULT_BATCH_SIZE", "MemwovenDocumentStore"]

DEFAULT_BATCH_SIZE = 100
"""Nodes written per `put_many` (one transaction on SQL backends) by `add_documents`; LlamaIndex's default, 1,
would make one transaction per node."""


class MemwovenDocumentStore(KVDocumentStore):
    """A LlamaIndex document (node) store over a memwoven `ItemMemory`, through `MemwovenKVStore`.

    Nodes, their hashes and the ref-doc infos are items in the collections ``<namespace>/data``,
    ``<namespace>/metadata`` and ``<namespace>/ref_doc_info`` (`namespace` defaults to ``"docstore"``), under the
    key-value store's `namespace_prefix`. Nothing is kept in the process: another process (or a later run) over the
    same storage sees the same documents, so `StorageContext.persist` has nothing to write.
    """

    def __init__(
        self,
        memwoven_kvstore: MemwovenKVStore,
        namespace: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        node_collection_suffix: str | None = None,
        ref_doc_collection_suffix: str | None = None,
        metadata_collection_suffix: str | None = None,
    ) -> None:
        super().__init__(
            memwoven_kvstore,
            namespace=namespace,
            batch_size=batch_size,
            node_collection_suffix=node_collection_suffix,
            ref_doc_collection_suffix=ref_doc_collection_suffix,
            metadata_collection_suffix=metadata_collection_suffix,
        )
        self._memwoven_kvstore = memwoven_kvstore

    @classmethod
    def from_item_memory(
        cls,
        items: ItemMemory,
        *,
        namespace_prefix: Sequence[str] = (),
        namespace: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> MemwovenDocumentStore:
        """A document store over `items` (its key-value store's collections under `namespace_prefix`)."""
        return cls(MemwovenKVStore(items, namespace_prefix=namespace_prefix), namespace, batch_size)

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
        *,
        namespace_prefix: Sequence[str] = (),
        namespace: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        **options: Any,
    ) -> MemwovenDocumentStore:
        """A document store over the item memory a memwoven URL names (default `$MEMWOVEN_ITEM_URL`), e.g.
        ``postgresql://app@db/app``; `options` go to `open_item_memory`. `kvstore.close()` closes it."""
        return cls(MemwovenKVStore.from_url(url, namespace_prefix=namespace_prefix, **options), namespace, batch_size)

    @property
    def kvstore(self) -> MemwovenKVStore:
        """The memwoven key-value store underneath."""
        return self._memwoven_kvstore
