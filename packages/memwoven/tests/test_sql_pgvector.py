"""`SQLVectorMemory(search="server")`: pgvector search in PostgreSQL, on a private server with the extension.

The conformance suite runs against server mode (sync and async); the rest compares its results with the exact
in-process index on random collections (paging, filters, thresholds, both metrics).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memwoven import open_vector_memory
from memwoven.backends.sql import SQLVectorMemory
from memwoven.contracts import VectorMemory
from memwoven.errors import InvalidInputError
from memwoven.models import ScoredDocument, VectorDocument
from memwoven.testing import VectorMemoryContract
from memwoven.vector_index import VectorIndex
from memwoven_test_support import unique_name

pytestmark = pytest.mark.service


def _server_memory(url: str, prefix: str, **options: object) -> SQLVectorMemory:
    return SQLVectorMemory(url, table_prefix=prefix, search="server", **options)  # type: ignore[arg-type]


class TestPgvectorVector(VectorMemoryContract):
    @pytest.fixture
    def vector_memory_factory(self, pgvector_url: str) -> Iterator[Callable[..., VectorMemory]]:
        prefix = unique_name("pgv") + "_"
        made: list[SQLVectorMemory] = []

        def make(dimension: int | None, metric: str) -> VectorMemory:
            collection = unique_name("c")
            memory = _server_memory(pgvector_url, prefix, collection=collection, dimension=dimension, metric=metric)
            made.append(memory)
            return memory

        yield make
        if made:
            with contextlib.suppress(Exception):
                made[0].drop_tables()

    def reopen(self, memory: VectorMemory) -> VectorMemory:
        assert isinstance(memory, SQLVectorMemory)
        return _server_memory(
            str(memory.engine.url.render_as_string(hide_password=False)),
            memory.table_prefix,
            collection=memory.collection,
            metric=memory.metric,
        )

    @contextlib.contextmanager
    def neighbour(self, memory: VectorMemory) -> Iterator[VectorMemory]:
        assert isinstance(memory, SQLVectorMemory)
        with _server_memory(
            memory.engine.url.render_as_string(hide_password=False),
            memory.table_prefix,
            collection=memory.collection + "s",
        ) as neighbour:
            yield neighbour


def _corpus(count: int, dimension: int, seed: int) -> list[VectorDocument]:
    generator = random.Random(seed)
    documents = []
    for i in range(count):
        vector = [generator.gauss(0, 1) for _ in range(dimension)]
        if i % 7 == 0:  # exact duplicates of an earlier vector: ties broken by id
            vector = [generator.choice([1.0, -1.0]) for _ in range(dimension)]
        metadata: dict[str, object] = {"tenant": i % 13, "kind": generator.choice(["a", "b", "c"])}
        if i % 5 == 0:
            metadata["rank"] = i
        if i % 11 == 0:
            metadata["note"] = "nul\x00inside"
        documents.append(VectorDocument(id=f"d{i:05d}", content=f"c{i}", embedding=vector, metadata=metadata))
    return documents


FILTERS: list[dict[str, object] | None] = [
    None,
    {"tenant": 7},
    {"tenant": {"$in": [1, 2, 3]}, "kind": "b"},
    {"kind": {"$ne": "a"}},
    {"rank": {"$gte": 100}},
    {"$or": [{"tenant": 0}, {"kind": "c"}]},
    {"note": "nul\x00inside"},
    {"tenant": 99},
]


def _same_hits(got: list[ScoredDocument], expected: list[ScoredDocument]) -> None:
    """The same documents in the same order, with float32 scores equal up to BLAS's rounding (a few ulps)."""
    assert [hit.document.id for hit in got] == [hit.document.id for hit in expected]
    assert [hit.score for hit in got] == pytest.approx([hit.score for hit in expected], rel=1e-6, abs=1e-6)
    assert [hit.document for hit in got] == [hit.document for hit in expected]


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_server_search_equals_the_exact_index(pgvector_url: str, metric: str) -> None:
    dimension = 24
    documents = _corpus(1500, dimension, seed=5)
    index = VectorIndex(dimension, metric)  # type: ignore[arg-type]
    index.upsert(index.prepare(documents))
    memory = _server_memory(pgvector_url, unique_name("pgv") + "_", collection="c", metric=metric)
    try:
        memory.store(documents)
        memory.delete([f"d{i:05d}" for i in range(0, 1500, 9)])
        index.remove([f"d{i:05d}" for i in range(0, 1500, 9)])
        generator = random.Random(1)
        for round_ in range(12):
            query = (
                list(documents[generator.randrange(1500)].embedding)
                if round_ % 3 == 0
                else [generator.gauss(0, 1) for _ in range(dimension)]
            )
            for filter_ in FILTERS:
                for top_k in (1, 10, 300):
                    expected = index.search(query, top_k=top_k, filter=filter_)
                    got = memory.search(query, top_k=top_k, filter=filter_)
                    _same_hits(got, expected)
                    scores = [hit.score for hit in expected]
                    middle = len(scores) // 2
                    if middle and scores[middle - 1] - scores[middle] > 1e-4:  # away from float32 rounding
                        threshold = (scores[middle - 1] + scores[middle]) / 2
                        expected = index.search(query, top_k=top_k, threshold=threshold, filter=filter_)
                        got = memory.search(query, top_k=top_k, threshold=threshold, filter=filter_)
                        _same_hits(got, expected)
                        assert len(got) == middle
        assert memory.count() == len(index)
        assert memory.ids() == sorted(index.ids)
    finally:
        memory.drop_tables()


def test_server_mode_holds_no_index_and_a_new_object_reads_the_table(pgvector_url: str) -> None:
    prefix = unique_name("pgv") + "_"
    writer = _server_memory(pgvector_url, prefix, collection="c")
    try:
        writer.store(_corpus(50, 4, seed=2))
        reader = _server_memory(pgvector_url, prefix, collection="c")
        with reader:
            assert reader.count() == 50
            assert reader.dimension == 4
            assert len(reader._index) == 0  # nothing loaded in process
            assert [h.document.id for h in reader.search([1.0, 0.0, 0.0, 0.0], top_k=3)] == [
                h.document.id for h in writer.search([1.0, 0.0, 0.0, 0.0], top_k=3)
            ]
        assert len(writer._index) == 0
    finally:
        writer.drop_tables()


def test_the_url_option_selects_server_search(pgvector_url: str) -> None:
    prefix = unique_name("pgv") + "_"
    memory = open_vector_memory(f"{pgvector_url}?search=server&table_prefix={prefix}", collection="c")
    assert isinstance(memory, SQLVectorMemory)
    try:
        assert memory.search_mode == "server"
        assert "search='server'" in repr(memory)
        memory.store([VectorDocument(id="a", content="", embedding=[1.0, 0.0], metadata={})])
        assert memory.search([1.0, 0.0], top_k=1)[0].score == 1.0
    finally:
        memory.drop_tables()
    with pytest.raises(InvalidInputError, match="search"):
        open_vector_memory(f"{pgvector_url}?search=nearby", collection="c")


def test_server_search_needs_postgresql(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="PostgreSQL"):
        SQLVectorMemory(f"sqlite:///{tmp_path}/v.db", search="server")
    assert SQLVectorMemory(f"sqlite:///{tmp_path}/v.db").search_mode == "client"
