"""memweave chat stores for LlamaIndex: `MemweaveChatStore` (chat memory buffers, chat engines) and
`MemweaveDBChatStore` (the agent `Memory`), both over any memweave `ChatMemory`; and `summarizer_from_llm`, an
LLM as the summarizer of `memweave.policies.SummarizingChatMemory`."""

from llama_index.storage.chat_store.memweave.base import MemweaveChatStore
from llama_index.storage.chat_store.memweave.db import MemweaveDBChatStore
from llama_index.storage.chat_store.memweave.summarize import LLMSummarizer, summarizer_from_llm

__all__ = ["LLMSummarizer", "MemweaveChatStore", "MemweaveDBChatStore", "summarizer_from_llm"]
