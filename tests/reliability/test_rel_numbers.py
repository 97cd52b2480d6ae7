"""No NaN or infinite score is ever returned or ranked, and numbers a search cannot use are refused (typed).

Embeddings whose squared norm exceeds half the float32 range are refused on store and search, for both metrics:
then, by Cauchy-Schwarz, no dot product (nor a partial sum of one) can overflow. Run on every vector backend,
sync and async.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reliability_stores import VECTOR_KINDS, fresh_store

from memwoven import VectorDocument, VectorMemory
from memwoven.errors import InvalidInputError

pytestmark = pytest.mark.timeout(120)

BIG = 9.0e18  # squared norm of (BIG, BIG, 0, 0) is 1.6e38: just inside half the float32 range (1.7e38)
TOO_BIG = 1.4e19  # (TOO_BIG, TOO_BIG, 0, 0): 3.9e38, past it


@pytest.fixture(params=VECTOR_KINDS)
def dot_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorMemory]:
    with fresh_store(request.param, tmp_path, "mwn") as store, store.vector("n", dimension=4, metric="dot") as memory:
        yield memory


def _documents() -> list[VectorDocument]:
    return [
        VectorDocument(id="huge", embedding=[BIG, BIG, 0.0, 0.0]),
        VectorDocument(id="opposite", embedding=[-BIG, -BIG, 0.0, 0.0]),
        VectorDocument(id="small", embedding=[1.0, 1.0, 1.0, 1.0]),
    ]


def _check_ranking(hits: list[Any]) -> None:
    scores = [hit.score for hit in hits]
    assert all(math.isfinite(score) for score in scores), scores
    assert [hit.document.id for hit in hits] == ["huge", "small", "opposite"]
    assert scores == sorted(scores, reverse=True)


def test_dot_scores_of_the_largest_accepted_vectors_are_finite_and_ranked(dot_memory: VectorMemory) -> None:
    dot_memory.store(_documents())
    _check_ranking(dot_memory.search([BIG, BIG, 0.0, 0.0], top_k=3))
    _check_ranking(dot_memory.search([BIG, BIG, 0.0, 0.0], top_k=3, threshold=-math.inf))


def test_dot_scores_async(dot_memory: VectorMemory) -> None:
    async def run() -> list[Any]:
        await dot_memory.astore(_documents())
        return await dot_memory.asearch([BIG, BIG, 0.0, 0.0], top_k=3)

    _check_ranking(asyncio.run(run()))


@pytest.mark.parametrize(
    "embedding", [[TOO_BIG, TOO_BIG, 0.0, 0.0], [3e38, 1.0, 1.0, 1.0]], ids=["norm-past-half-range", "near-max"]
)
def test_vectors_whose_products_could_overflow_are_refused(dot_memory: VectorMemory, embedding: list[float]) -> None:
    dot_memory.store([VectorDocument(id="keep", embedding=[1.0, 0.0, 0.0, 0.0])])
    with pytest.raises(InvalidInputError):
        dot_memory.store([VectorDocument(id="x", embedding=embedding)])
    with pytest.raises(InvalidInputError):
        dot_memory.search(embedding, top_k=1)
    with pytest.raises(InvalidInputError):
        asyncio.run(dot_memory.asearch(embedding, top_k=1))
    assert [doc.id for doc in dot_memory.get(["keep", "x"])] == ["keep"]


@pytest.mark.parametrize("threshold", [math.nan, "0.5", True], ids=["nan", "string", "bool"])
def test_a_threshold_that_is_no_number_is_refused(dot_memory: VectorMemory, threshold: Any) -> None:
    dot_memory.store([VectorDocument(id="keep", embedding=[1.0, 0.0, 0.0, 0.0])])
    with pytest.raises(InvalidInputError):
        dot_memory.search([1.0, 0.0, 0.0, 0.0], top_k=1, threshold=threshold)
    with pytest.raises(InvalidInputError):
        asyncio.run(dot_memory.asearch([1.0, 0.0, 0.0, 0.0], top_k=1, threshold=threshold))


def test_infinite_thresholds_are_plain_bounds(dot_memory: VectorMemory) -> None:
    dot_memory.store([VectorDocument(id="keep", embedding=[1.0, 0.0, 0.0, 0.0])])
    assert [hit.document.id for hit in dot_memory.search([1.0, 0.0, 0.0, 0.0], threshold=-math.inf)] == ["keep"]
    assert dot_memory.search([1.0, 0.0, 0.0, 0.0], threshold=math.inf) == []
