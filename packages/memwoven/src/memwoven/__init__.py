"""memwoven: memory for LLM agents.

Two contracts, `ChatMemory` (a session's ordered history) and `VectorMemory` (embedded documents with exact
top-k search), plus `EmbedFn` (text -> vector), with backends from in-process to SQL servers.

The Redis and Qdrant backends need extras and are imported from their modules:
`memwoven.backends.redis.RedisChatMemory`, `memwoven.backends.redis_vector.RedisVectorMemory`,
`memwoven.backends.qdrant.QdrantVectorMemory` (or opened by URL with `open_chat_memory` / `open_vector_memory`).
"""

from memwoven.backends.file import FileChatMemory, FileVectorMemory
from memwoven.backends.memory import InMemoryChatMemory, InMemoryVectorMemory
from memwoven.backends.sql import SQLChatMemory, SQLVectorMemory
from memwoven.contracts import ChatMemory, ChatSession, History, Metric, VectorMemory
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
    Message,
    OpaquePart,
    Role,
    ScoredDocument,
    TextPart,
    ToolCall,
    VectorDocument,
)
from memwoven.urls import open_chat_memory, open_vector_memory

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
    "MemwovenError",
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
