from __future__ import annotations

from collections.abc import Callable

import pytest

from memweave import InMemoryChatMemory, InMemoryVectorMemory
from memweave.contracts import ChatMemory, VectorMemory
from memweave.testing import ChatMemoryContract, VectorMemoryContract


class TestInMemoryChatMemory(ChatMemoryContract):
    @pytest.fixture
    def chat_memory(self) -> ChatMemory:
        return InMemoryChatMemory()


class TestInMemoryVectorMemory(VectorMemoryContract):
    @pytest.fixture
    def vector_memory_factory(self) -> Callable[..., VectorMemory]:
        return lambda dimension, metric: InMemoryVectorMemory(dimension, metric=metric)
