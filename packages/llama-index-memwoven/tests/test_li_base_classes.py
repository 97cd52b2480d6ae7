from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.storage.chat_store.base import BaseChatStore
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index.embeddings.memwoven import EmbedFnEmbedding
from llama_index.storage.chat_store.memwoven import MemwovenChatStore, MemwovenDBChatStore
from llama_index.vector_stores.memwoven import MemwovenVectorStore


def test_chat_store_class() -> None:
    assert BaseChatStore.__name__ in [b.__name__ for b in MemwovenChatStore.__mro__]


def test_db_chat_store_class() -> None:
    assert AsyncDBChatStore.__name__ in [b.__name__ for b in MemwovenDBChatStore.__mro__]


def test_vector_store_class() -> None:
    assert BasePydanticVectorStore.__name__ in [b.__name__ for b in MemwovenVectorStore.__mro__]


def test_embedding_class() -> None:
    assert BaseEmbedding.__name__ in [b.__name__ for b in EmbedFnEmbedding.__mro__]
