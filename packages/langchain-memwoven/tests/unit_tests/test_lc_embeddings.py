"""`EmbedFnEmbeddings` passes LangChain's embeddings suites; `embed_fn_from_embeddings` passes memwoven's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests

from langchain_memwoven import EmbedFnEmbeddings, embed_fn_from_embeddings
from memwoven import InvalidInputError
from memwoven.embed import EmbedFn, HashingEmbedFn
from memwoven.errors import EmbeddingError
from memwoven.testing import EmbedFnContract


class _OverHashing:
    """The standard suites' parameters: an `EmbedFnEmbeddings` over memwoven's offline hashing embedder."""

    @property
    def embeddings_class(self) -> type[EmbedFnEmbeddings]:
        return EmbedFnEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"embed_fn": HashingEmbedFn(16)}


class TestEmbedFnEmbeddingsUnit(_OverHashing, EmbeddingsUnitTests):
    pass


class TestEmbedFnEmbeddingsStandard(_OverHashing, EmbeddingsIntegrationTests):
    """The "integration" suite needs no service here: the hashing embedder is offline."""


class TestEmbedFnFromEmbeddings(EmbedFnContract):
    @pytest.fixture
    def embed_fn(self) -> EmbedFn:
        return embed_fn_from_embeddings(DeterministicFakeEmbedding(size=12))


def test_embed_fn_embeddings_batches_through_embed_many() -> None:
    calls: list[list[str]] = []

    class Counting(HashingEmbedFn):
        def embed_many(self, texts: Any) -> list[list[float]]:
            calls.append(list(texts))
            return super().embed_many(texts)

    embeddings = EmbedFnEmbeddings(Counting(8))
    assert len(embeddings.embed_documents(["a", "b", "c"])) == 3
    assert calls == [["a", "b", "c"]]
    assert embeddings.embed_query("a") == HashingEmbedFn(8).embed("a")


def test_embed_fn_from_embeddings_batches_and_knows_its_dimension() -> None:
    calls: list[list[str]] = []

    class Counting(DeterministicFakeEmbedding):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            calls.append(texts)
            return super().embed_documents(texts)

    embed_fn = embed_fn_from_embeddings(Counting(size=5), model_id="fake-5")
    assert embed_fn.embed_many(["x", "y"]) == DeterministicFakeEmbedding(size=5).embed_documents(["x", "y"])
    assert calls == [["x", "y"]]
    assert embed_fn.dimension == 5
    assert embed_fn.model_id == "fake-5"
    assert embed_fn_from_embeddings(DeterministicFakeEmbedding(size=3)).dimension == 3  # probed


def test_queries_go_through_embed_query_and_get_their_own_model_id() -> None:
    class Asymmetric(DeterministicFakeEmbedding):
        def embed_query(self, text: str) -> list[float]:
            return super().embed_query("query: " + text)

        async def aembed_query(self, text: str) -> list[float]:
            return self.embed_query(text)

    embed_fn = embed_fn_from_embeddings(Asymmetric(size=5), model_id="fake-5", queries=True)
    expected = [Asymmetric(size=5).embed_query(text) for text in ("x", "y")]
    assert embed_fn.embed_many(["x", "y"]) == expected
    assert asyncio.run(embed_fn.aembed_many(["x", "y"])) == expected
    assert embed_fn.model_id == "fake-5:query"  # query vectors are not document vectors


def test_wrappers_unwrap() -> None:
    inner = HashingEmbedFn(8)
    assert embed_fn_from_embeddings(EmbedFnEmbeddings(inner)) is inner


class _Broken(Embeddings):
    def __init__(self, result: Any = None, error: Exception | None = None) -> None:
        self.result, self.error = result, error

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)


@pytest.mark.parametrize(
    "broken",
    [
        _Broken(error=RuntimeError("provider down")),
        _Broken(result=[[1.0, float("nan")]]),
        _Broken(result=[[]]),
        _Broken(result=[[1.0], [2.0]]),
        _Broken(result=["not a vector"]),
        _Broken(result=None),
    ],
)
@pytest.mark.parametrize("queries", [False, True], ids=["documents", "queries"])
def test_failures_raise_embedding_error(broken: _Broken, queries: bool) -> None:
    embed_fn = embed_fn_from_embeddings(broken, dimension=2, queries=queries)
    with pytest.raises(EmbeddingError):
        embed_fn.embed_many(["one"])
    with pytest.raises(EmbeddingError):
        asyncio.run(embed_fn.aembed_many(["one"]))


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        EmbedFnEmbeddings("not an embed fn")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        embed_fn_from_embeddings(HashingEmbedFn(8))  # type: ignore[arg-type]
