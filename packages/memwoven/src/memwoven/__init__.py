"""memwoven: memory for LLM agents.

Three contracts, `ChatMemory` (a session's ordered history), `VectorMemory` (embedded documents with exact
top-k search) and `ItemMemory` (JSON objects by namespace and key), plus `EmbedFn` (text -> vector), with backends
from in-process to SQL servers.

The Redis and Qdrant backends need extras and are imported from their modules:
`memwoven.backends.redis.RedisChatMemory`, `memwoven.backends.redis_vector.RedisVectorMemory`,
`memwoven.backends.redis_items.RedisItemMemory`, `memwoven.backends.qdrant.QdrantVectorMemory` (or opened by URL
with `open_chat_memory` / `open_vector_memory`; items with `open_item_memory`).

Every name here is imported on first use, so `import memwoven.models` (what a framework adapter needs for the
data types) does not pay for SQLAlchemy, numpy or any backend.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    __version__: str
    from memwoven.backends.file import FileChatMemory, FileItemMemory, FileVectorMemory
    from memwoven.backends.memory import InMemoryChatMemory, InMemoryItemMemory, InMemoryVectorMemory
    from memwoven.backends.sql import SQLChatMemory, SQLItemMemory, SQLVectorMemory
    from memwoven.contracts import ChatMemory, ChatSession, History, ItemMemory, ItemWrite, Metric, VectorMemory
    from memwoven.embed import EmbedFn, HashingEmbedFn
    from memwoven.errors import (
        BackendUnavailableError,
        ConcurrentModificationError,
        CorruptMemoryError,
        DimensionMismatchError,
        EmbeddingError,
        InvalidInputError,
        MemwovenError,
    )
    from memwoven.models import (
        ContentPart,
        ImagePart,
        Item,
        Message,
        OpaquePart,
        Role,
        ScoredDocument,
        TextPart,
        ToolCall,
        VectorDocument,
    )
    from memwoven.urls import open_chat_memory, open_item_memory, open_vector_memory

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["FileChatMemory", "FileItemMemory", "FileVectorMemory"], "memwoven.backends.file"),
    **dict.fromkeys(["InMemoryChatMemory", "InMemoryItemMemory", "InMemoryVectorMemory"], "memwoven.backends.memory"),
    **dict.fromkeys(["SQLChatMemory", "SQLItemMemory", "SQLVectorMemory"], "memwoven.backends.sql"),
    **dict.fromkeys(
        ["ChatMemory", "ChatSession", "History", "ItemMemory", "ItemWrite", "Metric", "VectorMemory"],
        "memwoven.contracts",
    ),
    **dict.fromkeys(["EmbedFn", "HashingEmbedFn"], "memwoven.embed"),
    **dict.fromkeys(
        [
            "BackendUnavailableError",
            "ConcurrentModificationError",
            "CorruptMemoryError",
            "DimensionMismatchError",
            "EmbeddingError",
            "InvalidInputError",
            "MemwovenError",
        ],
        "memwoven.errors",
    ),
    **dict.fromkeys(
        [
            "ContentPart",
            "ImagePart",
            "Item",
            "Message",
            "OpaquePart",
            "Role",
            "ScoredDocument",
            "TextPart",
            "ToolCall",
            "VectorDocument",
        ],
        "memwoven.models",
    ),
    **dict.fromkeys(["open_chat_memory", "open_item_memory", "open_vector_memory"], "memwoven.urls"),
}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed distribution's, the one version source (importlib.metadata is slow)
        from importlib import metadata

        value: Any = metadata.version("memwoven")
    elif name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'memwoven' has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, "__version__"})


__all__ = [
    "BackendUnavailableError",
    "ChatMemory",
    "ChatSession",
    "ConcurrentModificationError",
    "ContentPart",
    "CorruptMemoryError",
    "DimensionMismatchError",
    "EmbedFn",
    "EmbeddingError",
    "FileChatMemory",
    "FileItemMemory",
    "FileVectorMemory",
    "HashingEmbedFn",
    "History",
    "ImagePart",
    "InMemoryChatMemory",
    "InMemoryItemMemory",
    "InMemoryVectorMemory",
    "InvalidInputError",
    "Item",
    "ItemMemory",
    "ItemWrite",
    "MemwovenError",
    "Message",
    "Metric",
    "OpaquePart",
    "Role",
    "SQLChatMemory",
    "SQLItemMemory",
    "SQLVectorMemory",
    "ScoredDocument",
    "TextPart",
    "ToolCall",
    "VectorDocument",
    "VectorMemory",
    "__version__",
    "open_chat_memory",
    "open_item_memory",
    "open_vector_memory",
]
