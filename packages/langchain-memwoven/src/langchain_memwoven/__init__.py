"""LangChain integration for memwoven: chat history, vector store, embeddings and a summarizer for
`memwoven.policies.SummarizingChatMemory`. The LangGraph store is in langgraph-checkpoint-memwoven
(`from langgraph.store.memwoven import MemwovenStore`).

Every class only translates; storage behaviour comes from memwoven's `ChatMemory`, `VectorMemory` and `EmbedFn`.
"""

from importlib import metadata

from langchain_memwoven.chat_message_histories import MemwovenChatMessageHistory
from langchain_memwoven.embeddings import EmbedFnEmbeddings, embed_fn_from_embeddings
from langchain_memwoven.summarize import ChatModelSummarizer, summarizer_from_chat_model
from langchain_memwoven.vectorstores import MemwovenVectorStore

try:
    __version__ = metadata.version(__package__ or __name__)
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = ""

__all__ = [
    "ChatModelSummarizer",
    "EmbedFnEmbeddings",
    "MemwovenChatMessageHistory",
    "MemwovenVectorStore",
    "__version__",
    "embed_fn_from_embeddings",
    "summarizer_from_chat_model",
]
