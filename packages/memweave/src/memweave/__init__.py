"""memweave: memory for LLM agents.

Two contracts, `ChatMemory` (a session's ordered history) and `VectorMemory` (embedded documents with exact
top-k search), plus `EmbedFn` (text -> vector), with backends from in-process to SQL servers.
"""

from memweave.backends.memory import InMemoryChatMemory, InMemoryVectorMemory
from memweave.contracts import ChatMemory, ChatSession, History, Metric, VectorMemory
from memweave.errors import (
    BackendUnavailableError,
    ConcurrentModificationError,
    CorruptMemoryError,
    DimensionMismatchError,
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

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
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
