"""memweave: memory for LLM agents.

Two contracts, `ChatMemory` (a session's ordered history) and `VectorMemory` (embedded documents with exact
top-k search), plus `EmbedFn` (text -> vector), with backends from in-process to SQL servers.

The Redis and Qdrant backends need extras and are imported from their modules:
`memweave.backends.redis.RedisChatMemory`, `memweave.backends.redis_vector.RedisVectorMemory`,
`memweave.backends.qdrant.QdrantVectorMemory` (or opened by URL with `open_chat_memory` / `open_vector_memory`).
"""

from memweave.backends.file import FileChatMemory, FileVectorMemory
from memweave.backends.memory import InMemoryChatMemory, InMemoryVectorMemory
from memweave.backends.sql import SQLChatMemory, SQLVectorMemory
from memweave.contracts import ChatMemory, ChatSession, History, Metric, VectorMemory
from memweave.embed import EmbedFn, HashingEmbedFn
from memweave.errors import (
    BackendUnavailableError,
    ConcurrentModificationError,
    CorruptMemoryError,
    DimensionMismatchError,
    EmbeddingError,
    InvalidInputError,
    MemweaveError,
)
from memweave.models import (
    ContentPart,
    ImagePart,
    Message,
    OpaquePart,
    Role,
    ScoredDocument,
    TextPart,
    ToolCall,
    VectorDocument,
)
from memweave.urls import open_chat_memory, open_vector_memory

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "EmbedFn",
    "EmbeddingError",
    "FileChatMemory",
    "FileVectorMemory",
    "HashingEmbedFn",
    "SQLChatMemory",
    "SQLVectorMemory",
    "open_chat_memory",
    "open_vector_memory",
    "ChatMemory",
    "ChatSession",
    "ConcurrentModificationError",
    "ContentPart",
    "CorruptMemoryError",
    "DimensionMismatchError",
    "History",
    "ImagePart",
    "InMemoryChatMemory",
    "InMemoryVectorMemory",
    "InvalidInputError",
    "MemweaveError",
    "Message",
    "Metric",
    "OpaquePart",
    "Role",
    "ScoredDocument",
    "TextPart",
    "ToolCall",
    "VectorDocument",
    "VectorMemory",
    "__version__",
]
