"""LangChain and LangGraph integration for memweave: chat history, vector store, embeddings, a LangGraph store and
a summarizer for `memweave.policies.SummarizingChatMemory`.

Every class only translates; storage behaviour comes from memweave's `ChatMemory`, `VectorMemory` and `EmbedFn`.
"""

from importlib import metadata

from langchain_memweave.chat_message_histories import MemweaveChatMessageHistory
from langchain_memweave.embeddings import EmbedFnEmbeddings, embed_fn_from_embeddings
from langchain_memweave.store import MemweaveStore
from langchain_memweave.summarize import ChatModelSummarizer, summarizer_from_chat_model
from langchain_memweave.vectorstores import MemweaveVectorStore

try:
    __version__ = metadata.version(__package__ or __name__)
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = ""

__all__ = [
    "ChatModelSummarizer",
    "EmbedFnEmbeddings",
    "MemweaveChatMessageHistory",
    "MemweaveStore",
    "MemweaveVectorStore",
    "__version__",
    "embed_fn_from_embeddings",
    "summarizer_from_chat_model",
]
