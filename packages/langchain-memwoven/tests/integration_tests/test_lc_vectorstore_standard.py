"""LangChain's standard vector store suite (sync and async) on every backend."""

from __future__ import annotations

import pytest
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from langchain_memwoven import MemwovenVectorStore


class TestMemwovenVectorStoreStandard(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, backend) -> VectorStore:  # type: ignore[no-untyped-def]
        return MemwovenVectorStore(backend.vector(), self.get_embeddings())
