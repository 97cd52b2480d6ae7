"""EmbedFnEmbedding (an EmbedFn as a LlamaIndex embedding, batched) and embed_fn_from_embedding (the reverse)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.embeddings import MockEmbedding

from llama_index.embeddings.memwoven import EmbedFnEmbedding, embed_fn_from_embedding
from memwoven.embed import EmbedFn, HashingEmbedFn
from memwoven.errors import EmbeddingError
from memwoven.testing import EmbedFnContract


class CountingEmbedFn(HashingEmbedFn):
    """Records the size of every batch it is asked to embed."""

    def __init__(self) -> None:
        super().__init__(32)
        self.batches: list[int] = []

    def embed_many(self, texts: Sequence[str]) -> list[list[float]]:
        self.batches.append(len(texts))
        return super().embed_many(texts)


def test_texts_are_embedded_a_batch_at_a_time() -> None:
    embed_fn = CountingEmbedFn()
    model = EmbedFnEmbedding(embed_fn, embed_batch_size=4)
    texts = [f"text number {i}" for i in range(10)]
    vectors = model.get_text_embedding_batch(texts)
    assert embed_fn.batches == [4, 4, 2]
    assert vectors == HashingEmbedFn(32).embed_many(texts)
    assert asyncio.run(model.aget_text_embedding_batch(texts)) == vectors


def test_queries_and_texts_get_the_function_s_vectors() -> None:
    embed_fn = HashingEmbedFn(32)
    model = EmbedFnEmbedding(embed_fn)
    assert model.model_name == embed_fn.model_id
    assert model.embed_fn is embed_fn
    assert model.get_query_embedding("cats") == model.get_text_embedding("cats") == embed_fn.embed("cats")
    assert asyncio.run(model.aget_query_embedding("cats")) == embed_fn.embed("cats")
    assert asyncio.run(model.aget_text_embedding("cats")) == embed_fn.embed("cats")


class TestEmbedFnFromEmbedding(EmbedFnContract):
    """A LlamaIndex embedding turned into an EmbedFn passes memwoven's EmbedFn conformance suite."""

    @pytest.fixture
    def embed_fn(self) -> EmbedFn:
        return embed_fn_from_embedding(EmbedFnEmbedding(HashingEmbedFn(48)))


def test_embed_fn_from_embedding_finds_the_dimension_and_names_the_model() -> None:
    embed_fn = embed_fn_from_embedding(MockEmbedding(embed_dim=8))
    assert embed_fn.dimension == 8
    assert embed_fn.model_id == "llama_index:MockEmbedding:unknown"
    assert embed_fn_from_embedding(MockEmbedding(embed_dim=8), dimension=8).embed_many(["a", "b"]) == [[0.5] * 8] * 2
    wide = embed_fn_from_embedding(MockEmbedding(embed_dim=16), model_id="mock:16")  # a cache keeps it apart
    assert (wide.model_id, wide.dimension) == ("mock:16", 16)


class Broken(BaseEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        raise RuntimeError("no service")

    async def _aget_query_embedding(self, query: str) -> list[float]:
        raise RuntimeError("no service")

    def _get_text_embedding(self, text: str) -> list[float]:
        raise RuntimeError("no service")


def test_a_failing_embedding_model_raises_embedding_error() -> None:
    with pytest.raises(EmbeddingError, match="no service"):
        embed_fn_from_embedding(Broken(), dimension=4).embed("x")
