"""memwoven document store for LlamaIndex: `MemwovenDocumentStore` over any memwoven `ItemMemory`."""

from llama_index.storage.docstore.memwoven.base import MemwovenDocumentStore

__all__ = ["MemwovenDocumentStore"]
