"""memwoven index store for LlamaIndex: `MemwovenIndexStore` over any memwoven `ItemMemory`."""

from llama_index.storage.index_store.memwoven.base import MemwovenIndexStore

__all__ = ["MemwovenIndexStore"]
