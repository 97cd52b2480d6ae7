from typing import Any

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.storage.chat_store.base import BaseChatStore
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index.embeddings.memwoven import EmbedFnEmbedding
from llama_index.storage.chat_store.memwoven import MemwovenChatStore, MemwovenDBChatStore
from llama_index.vector_stores.memwoven import MemwovenVectorStore
from memwoven import InMemoryChatMemory, InMemoryItemMemory, InMemoryVectorMemory, InvalidInputError


def test_chat_store_class() -> None:
    assert BaseChatStore.__name__ in [b.__name__ for b in MemwovenChatStore.__mro__]


def test_db_chat_store_class() -> None:
    assert AsyncDBChatStore.__name__ in [b.__name__ for b in MemwovenDBChatStore.__mro__]


def test_vector_store_class() -> None:
    assert BasePydanticVectorStore.__name__ in [b.__name__ for b in MemwovenVectorStore.__mro__]


def test_embedding_class() -> None:
    assert BaseEmbedding.__name__ in [b.__name__ for b in EmbedFnEmbedding.__mro__]


@pytest.mark.parametrize(
    ("store", "wrong", "needed"),
    [
        (MemwovenVectorStore, InMemoryChatMemory(), "VectorMemory"),
        (MemwovenChatStore, InMemoryItemMemory(), "ChatMemory"),
        (MemwovenDBChatStore, InMemoryVectorMemory(), "ChatMemory"),
    ],
)
def test_the_wrong_kind_of_memory_is_refused_at_construction(store: Any, wrong: object, needed: str) -> None:
    with pytest.raises(
        InvalidInputError, match=f"{store.__name__} needs a memwoven {needed}, got {type(wrong).__name__}"
    ):
        store(wrong)
