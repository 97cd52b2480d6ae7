"""memweave chat stores for LlamaIndex: `MemweaveChatStore` (chat memory buffers, chat engines) and
`MemweaveDBChatStore` (the agent `Memory`), both over any memweave `ChatMemory`."""

from llama_index.storage.chat_store.memweave.base import MemweaveChatStore
from llama_index.storage.chat_store.memweave.db import MemweaveDBChatStore

__all__ = ["MemweaveChatStore", "MemweaveDBChatStore"]
