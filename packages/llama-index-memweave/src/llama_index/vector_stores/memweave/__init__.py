"""memweave vector store for LlamaIndex: `MemweaveVectorStore` over any memweave `VectorMemory`."""

from llama_index.vector_stores.memweave.base import MemweaveVectorStore

__all__ = ["MemweaveVectorStore"]
