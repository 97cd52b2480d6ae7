"""memwoven chat stores for LlamaIndex: `MemwovenChatStore` (chat memory buffers, chat engines) and
`MemwovenDBChatStore` (the agent `Memory`), both over any memwoven `ChatMemory`; and `summarizer_from_llm`, an
LLM as the summarizer of `memwoven.policies.SummarizingChatMemory`."""

from llama_index.storage.chat_store.memwoven.base import MemwovenChatStore
from llama_index.storage.chat_store.memwoven.db import MemwovenDBChatStore
from llama_index.storage.chat_store.memwoven.summarize import LLMSummarizer, summarizer_from_llm

__all__ = ["LLMSummarizer", "MemwovenChatStore", "MemwovenDBChatStore", "summarizer_from_llm"]
