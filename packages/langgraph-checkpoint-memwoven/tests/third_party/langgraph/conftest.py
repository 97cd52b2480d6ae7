# Copied from LangGraph (https://github.com/langchain-ai/langgraph) libs/checkpoint-postgres/tests/conftest.py at commit 36a505ac65e9,
# MIT License (LICENSE in this directory), Copyright (c) 2024 LangChain, Inc.
# Changed for memwoven: only the fixture that applies here is kept. Left out: the `conn` / `clear_test_db` fixtures
# (a PostgreSQL database of LangGraph's CI, emptied before each test; the stores here are made per test on the
# backends of ../../conftest.py) and DEFAULT_URI; VECTOR_TYPES is in ../../lg_store_support.py.
import pytest

from embed_test_utils import CharacterEmbeddings


@pytest.fixture
def fake_embeddings() -> CharacterEmbeddings:
    return CharacterEmbeddings(dims=500)
