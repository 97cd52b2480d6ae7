"""memwoven vector store for LlamaIndex: `MemwovenVectorStore` over any memwoven `VectorMemory`."""

from llama_index.vector_stores.memwoven.base import MemwovenVectorStore

__all__ = ["MemwovenVectorStore"]
