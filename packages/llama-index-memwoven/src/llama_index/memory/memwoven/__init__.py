"""memwoven memory blocks for LlamaIndex's `Memory`: `MemwovenFactMemoryBlock`, a `FactExtractionMemoryBlock`
whose facts are kept in a memwoven `ItemMemory`, so they survive restarts and are shared across sessions and
processes."""

from llama_index.memory.memwoven.base import DEFAULT_NAMESPACE, FACTS_FIELD, MemwovenFactMemoryBlock

__all__ = ["DEFAULT_NAMESPACE", "FACTS_FIELD", "MemwovenFactMemoryBlock"]
