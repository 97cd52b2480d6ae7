"""memwoven key-value store for LlamaIndex: `MemwovenKVStore` over any memwoven `ItemMemory`."""

from llama_index.storage.kvstore.memwoven.base import MemwovenKVStore

__all__ = ["MemwovenKVStore"]
