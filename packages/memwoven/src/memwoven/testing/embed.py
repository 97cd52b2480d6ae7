"""`EmbedFnContract`: the conformance tests of invariants E1-E3, for any `EmbedFn`."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from memwoven.embed import EmbedFn
from memwoven.errors import InvalidInputError
from memwoven.testing._driver import MODES, Driver

__all__ = ["EmbedFnContract"]

TEXTS = [
    "The cat sat on the mat.",
    "",
    "caf\u00e9 \u65e5\u672c\u8a9e \U0001f600",
    "x" * 5000,
    "The cat sat on the mat.",
]


class EmbedFnContract:
    """Subclass this and provide the `embed_fn` fixture. Every test runs through the sync and async methods."""

    @pytest.fixture
    def embed_fn(self) -> EmbedFn:
        """The function under test. Override in the subclass."""
        raise NotImplementedError("provide an `embed_fn` fixture returning an EmbedFn")

    @pytest.fixture(params=MODES)
    def embedder(self, request: pytest.FixtureRequest, embed_fn: EmbedFn) -> Iterator[Driver]:
        """The function, driven through its sync or async methods."""
        if request.param == "sync":
            yield Driver(embed_fn)
            return
        import asyncio

        loop = asyncio.new_event_loop()
        try:
            yield Driver(embed_fn, loop)
        finally:
            loop.close()

    def test_e1_the_same_input_gives_the_same_vector(self, embedder: Driver) -> None:
        first = embedder.embed_many(TEXTS)
        assert embedder.embed_many(TEXTS) == first
        for text, vector in zip(TEXTS, first):
            assert embedder.embed(text) == pytest.approx(vector, rel=1e-5, abs=1e-6)
        assert first[0] == first[-1]

    def test_e1_vectors_have_the_declared_dimension_and_are_finite(self, embedder: Driver) -> None:
        dimension = embedder.target.dimension
        assert isinstance(dimension, int)
        assert dimension > 0
        for vector in embedder.embed_many(TEXTS):
            assert len(vector) == dimension
            assert all(isinstance(x, float) and math.isfinite(x) for x in vector)
            assert any(x != 0.0 for x in vector)

    def test_e1_sync_and_async_agree(self, embed_fn: EmbedFn) -> None:
        import asyncio

        for async_vector, vector in zip(asyncio.run(embed_fn.aembed_many(TEXTS)), embed_fn.embed_many(TEXTS)):
            assert async_vector == pytest.approx(vector, rel=1e-5, abs=1e-6)
        assert embed_fn(TEXTS[0]) == pytest.approx(embed_fn.embed(TEXTS[0]))

    def test_e2_embedding_leaves_its_input_alone(self, embedder: Driver) -> None:
        texts = list(TEXTS)
        embedder.embed_many(texts)
        assert texts == TEXTS
        assert embedder.embed_many([]) == []

    def test_e3_bad_input_raises(self, embedder: Driver) -> None:
        with pytest.raises(InvalidInputError):
            embedder.embed_many("a string, not a list")
        with pytest.raises(InvalidInputError):
            embedder.embed_many(["ok", 42])

    def test_model_id_is_stable(self, embed_fn: EmbedFn) -> None:
        assert isinstance(embed_fn.model_id, str)
        assert embed_fn.model_id
        assert embed_fn.model_id == embed_fn.model_id
