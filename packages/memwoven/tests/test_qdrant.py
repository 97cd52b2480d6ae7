from __future__ import annotations

import asyncio
import itertools
import json
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient, QdrantClient, models

from memwoven.backends import qdrant as qdrant_backend
from memwoven.backends.memory import InMemoryVectorMemory
from memwoven.backends.qdrant import QdrantVectorMemory, list_collections, point_id, translate_filter
from memwoven.contracts import Metric, VectorMemory
from memwoven.errors import BackendUnavailableError, CorruptMemoryError, DimensionMismatchError, InvalidInputError
from memwoven.filters import compile_filter
from memwoven.models import VectorDocument
from memwoven.testing import VectorMemoryContract
from memwoven.testing.vector import FILTER_CASES, FILTER_CORPUS
from memwoven.urls import open_vector_memory

_names = itertools.count()


def doc(doc_id: str, *vector: float, **metadata: Any) -> VectorDocument:
    return VectorDocument(id=doc_id, content=f"text {doc_id}", embedding=list(vector), metadata=metadata)


def shared_client_reopen(memory: VectorMemory) -> VectorMemory:
    """A second memory over the same client (a local directory admits one client at a time)."""
    assert isinstance(memory, QdrantVectorMemory)
    return QdrantVectorMemory(
        memory.client, async_client=memory._async_client, collection=memory.collection, metric=memory.metric
    )


class TestQdrantInMemory(VectorMemoryContract):
    @pytest.fixture
    def vector_memory_factory(self) -> Callable[..., VectorMemory]:
        def factory(dimension: int | None, metric: Metric) -> VectorMemory:
            return QdrantVectorMemory(
                "qdrant+memory://", collection=f"c{next(_names)}", dimension=dimension, metric=metric
            )

        return factory

    def reopen(self, memory: VectorMemory) -> VectorMemory:
        return shared_client_reopen(memory)


class TestQdrantLocalDirectory(VectorMemoryContract):
    @pytest.fixture
    def vector_memory_factory(self, tmp_path: Path) -> Callable[..., VectorMemory]:
        def factory(dimension: int | None, metric: Metric) -> VectorMemory:
            return QdrantVectorMemory(
                f"qdrant+local://{tmp_path / f'q{next(_names)}'}", dimension=dimension, metric=metric
            )

        return factory

    def reopen(self, memory: VectorMemory) -> VectorMemory:
        return shared_client_reopen(memory)


class TestQdrantNativeAsyncDriver(VectorMemoryContract):
    """The native async driver, exercised over an in-process `AsyncQdrantClient` (no server needed).

    The sync and async clients are two separate in-memory stores here; only the async mode runs (the sync mode is
    `TestQdrantInMemory`).
    """

    @pytest.fixture(params=["async"])
    def mode(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def vector_memory_factory(self) -> Iterator[Callable[..., VectorMemory]]:
        clients: list[tuple[QdrantClient, AsyncQdrantClient]] = []

        def factory(dimension: int | None, metric: Metric) -> VectorMemory:
            clients.append((QdrantClient(":memory:"), AsyncQdrantClient(":memory:")))
            return QdrantVectorMemory(clients[-1][0], async_client=clients[-1][1], dimension=dimension, metric=metric)

        yield factory
        for sync_client, _ in clients:
            sync_client.close()

    def reopen(self, memory: VectorMemory) -> VectorMemory:
        return shared_client_reopen(memory)


@pytest.fixture
def memory() -> Iterator[QdrantVectorMemory]:
    with QdrantVectorMemory("qdrant+memory://") as memory:
        yield memory


def test_a_local_directory_persists_across_clients(tmp_path: Path) -> None:
    url = f"qdrant+local://{tmp_path}"
    with QdrantVectorMemory(url, collection="docs", metric="dot") as memory:
        memory.store([doc("a", 1.0, 2.0, 3.0, k="v"), doc("b", 0.5, 0.0, 0.0)])
    with QdrantVectorMemory(url, collection="docs", metric="dot") as reopened:
        dimensions = [reopened.dimension]
        assert reopened.count() == 2
        assert [*dimensions, reopened.dimension] == [None, 3]
        assert reopened.get(["a"]) == [doc("a", 1.0, 2.0, 3.0, k="v")]
        with pytest.raises(DimensionMismatchError):
            reopened.store([doc("c", 1.0, 2.0)])
    with pytest.raises(InvalidInputError, match="Dot"), QdrantVectorMemory(url, collection="docs") as m:
        m.search([1.0, 2.0, 3.0])


def test_another_dimension_fails_at_open_and_frees_the_directory(tmp_path: Path) -> None:
    url = f"qdrant+local://{tmp_path}"
    with QdrantVectorMemory(url, collection="docs", dimension=4) as fresh:  # no collection yet: nothing to check
        assert fresh.dimension == 4
    with QdrantVectorMemory(url, collection="docs") as memory:
        memory.store([doc("a", 1.0, 2.0, 3.0)])
    for _ in range(2):  # a failed open closes its client, releasing the directory's lock
        with pytest.raises(DimensionMismatchError, match="has dimension 3, not 4"):
            QdrantVectorMemory(url, collection="docs", dimension=4)
    with pytest.raises(DimensionMismatchError):
        open_vector_memory(url, collection="docs", dimension=4)
    with pytest.raises(InvalidInputError, match="Cosine"):
        QdrantVectorMemory(url, collection="docs", dimension=3, metric="dot")

    async def open_in_async_code() -> int:
        with pytest.raises(DimensionMismatchError):
            QdrantVectorMemory(url, collection="docs", dimension=4)
        async with QdrantVectorMemory(url, collection="docs", dimension=3) as memory:
            return await memory.acount()

    assert asyncio.run(open_in_async_code()) == 1


def test_async_twins_share_the_local_directory_with_sync_calls(tmp_path: Path) -> None:
    memory = QdrantVectorMemory(f"qdrant+local://{tmp_path}")

    async def scenario() -> list[str]:
        await memory.astore([doc(f"d{i}", 1.0, float(i)) for i in range(20)])
        memory.delete(["d0"])
        results = await asyncio.gather(*(memory.asearch([1.0, float(i)], top_k=1) for i in range(1, 20)))
        await memory.aclose()
        return [hits[0].document.id for hits in results]

    assert asyncio.run(scenario()) == [f"d{i}" for i in range(1, 20)]


def test_string_ids_map_to_stable_uuid_points(memory: QdrantVectorMemory) -> None:
    assert point_id("doc-1") == point_id("doc-1") != point_id("doc-2")
    memory.store([doc("doc-1", 1.0, 0.0), doc("\U0001f600 x", 0.0, 1.0)])
    [record] = memory.client.retrieve(memory.collection, ids=[point_id("doc-1")], with_payload=True)
    assert record.payload is not None
    assert record.payload["id"] == "doc-1"
    assert [d.id for d in memory.get(["\U0001f600 x", "doc-1", "doc-1"])] == ["\U0001f600 x", "doc-1", "doc-1"]


@pytest.mark.parametrize("doc_id", ["doc-1", "d", "\U0001f600 x", "é" * 300, "a:b{c}*?[", "0"])
def test_point_ids_are_uuid5_of_the_fixed_namespace(doc_id: str) -> None:
    namespace = uuid.UUID("8a0f6f4e-3c55-5a8e-9a4b-6d656d776561")  # stored points depend on it: never changes
    assert point_id(doc_id) == str(uuid.uuid5(namespace, doc_id))


def test_cosine_embeddings_come_back_as_stored(memory: QdrantVectorMemory) -> None:
    vector = [0.1, -3.5, 1e-3, 250.0]
    memory.store([doc("a", *vector)])
    assert memory.get(["a"])[0].embedding == pytest.approx(vector, rel=1e-6)
    assert memory.search(vector, top_k=1)[0].document.embedding == pytest.approx(vector, rel=1e-6)


def test_cosine_embeddings_come_back_as_stored_from_a_reopened_directory(tmp_path: Path) -> None:
    url = f"qdrant+local://{tmp_path}"
    with QdrantVectorMemory(url, collection="docs") as memory:
        memory.store([doc("a", 3.0, 4.0), doc("b", 0.0, 10.0)])
    with QdrantVectorMemory(url, collection="docs") as reopened:  # local mode reloads the vectors un-normalized
        expected = [3.0, 4.0, 0.0, 10.0]
        assert [x for d in reopened.get(["a", "b"]) for x in d.embedding] == pytest.approx(expected, rel=1e-6)
        reopened.search([1.0, 0.0], top_k=1)  # which normalizes them in place
        assert [x for d in reopened.get(["a", "b"]) for x in d.embedding] == pytest.approx(expected, rel=1e-6)


def test_ties_beyond_the_first_page_are_broken_by_id(memory: QdrantVectorMemory) -> None:
    ids = [f"t{i:02d}" for i in range(40)]
    random.Random(7).shuffle(ids)
    memory.store([doc(i, 1.0, 0.0) for i in ids] + [doc("best", 1.0, 0.01), doc("far", 0.0, 1.0)])
    hits = memory.search([1.0, 0.01], top_k=5)
    assert [h.document.id for h in hits] == ["best", "t00", "t01", "t02", "t03"]
    filtered = memory.search([1.0, 0.01], top_k=3, filter={"$not": {"nothing": True}}, threshold=0.5)
    assert [h.document.id for h in filtered] == ["best", "t00", "t01"]


def test_a_selective_filter_that_qdrant_cannot_express_still_finds_the_top_k(memory: QdrantVectorMemory) -> None:
    memory.store([doc(f"d{i:03d}", 1.0, i / 100, tag=["x"] if i % 50 else "x") for i in range(200)])
    hits = memory.search([1.0, 0.0], top_k=3, filter={"tag": "x"})  # Qdrant matches the arrays too
    assert [h.document.id for h in hits] == ["d000", "d050", "d100"]


def test_filter_translation_is_never_stricter_than_the_filter() -> None:
    client = QdrantClient(":memory:")
    client.create_collection("f", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
    extra = [
        doc("l1", *([1.0] * 8), kind=["post"], year=[2020, "x"], lang=[None], n=2**53 + 1),
        doc("l2", *([1.0] * 8), kind={"a": 1}, year=2020.0, tags="b", public=[True]),
    ]
    corpus = FILTER_CORPUS + extra
    client.upsert(
        "f",
        points=[
            models.PointStruct(
                id=point_id(d.id), vector=list(d.embedding), payload={"metadata": d.model_dump()["metadata"]}
            )
            for d in corpus
        ],
    )
    cases = [spec for spec, _ in FILTER_CASES] + [
        {"kind": {"$nin": ["post", "note"]}},
        {"$not": {"$or": [{"kind": {"$ne": "post"}}, {"lang": {"$exists": True}}]}},
        {"$not": {"year": {"$nin": [2020]}}},
        {"year": {"$in": []}},
        {"n": 2**53 + 1},
        {"$or": [{"tags": {"$contains": "b"}}, {"a.b": 1}]},
        {"year": {"$gt": "2000"}},
    ]
    for spec in cases:
        predicate = compile_filter(spec)
        expected = {point_id(d.id) for d in corpus if predicate(d.metadata)}
        condition = translate_filter(spec)
        if condition is False:
            assert expected == set(), spec
            continue
        query_filter = None if condition is True else models.Filter(must=[condition])
        found = {str(p.id) for p in client.scroll("f", scroll_filter=query_filter, limit=100)[0]}
        assert expected <= found, (json.dumps(spec), expected - found)
    assert translate_filter({"kind": "post", "year": {"$gte": 2020}}) == models.Filter(
        must=[
            models.FieldCondition(key="metadata.kind", match=models.MatchValue(value="post")),
            models.FieldCondition(key="metadata.year", range=models.Range(gte=2020)),
        ]
    )
    client.close()


def test_random_operations_match_the_in_memory_backend(memory: QdrantVectorMemory) -> None:
    rng = random.Random(3)
    model = InMemoryVectorMemory(dimension=4)
    for step in range(150):
        action = rng.random()
        if action < 0.6:
            batch = [
                doc(f"d{rng.randrange(30)}", *(rng.uniform(-1.0, 1.0) for _ in range(4)), g=rng.randrange(3))
                for _ in range(rng.randrange(1, 6))
            ]
            memory.store(batch)
            model.store(batch)
        elif action < 0.9:
            ids = [f"d{rng.randrange(30)}" for _ in range(3)]
            memory.delete(ids)
            model.delete(ids)
        elif action < 0.93:
            memory.clear()
            model.clear()
        query = [rng.gauss(0.0, 1.0) for _ in range(4)]
        top_k = rng.randrange(1, 8)
        spec = rng.choice([None, {"g": 1}, {"g": {"$ne": 2}}])
        expected = model.search(query, top_k=top_k, filter=spec)
        actual = memory.search(query, top_k=top_k, filter=spec)
        assert [h.document.id for h in actual] == [h.document.id for h in expected], step
        assert [h.score for h in actual] == pytest.approx([h.score for h in expected], abs=1e-6)
        assert memory.count() == model.count()


_CANCELLING = [doc("cancel", 16777216.0, 3.0, -16777216.0), doc("b1", 3.5, 0.0, 0.0), doc("b2", 3.4, 0.0, 0.0)]


@pytest.mark.parametrize("norms", ["engine", "ordered", "ordered-legacy", "scan"])
def test_dot_searches_allow_for_qdrants_rounding_by_the_largest_norm(
    norms: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Qdrant scores "cancel" 3.0 for [1, 1, 1] (its terms cancel in float32), memwoven 4.0
    reference = InMemoryVectorMemory(metric="dot")
    reference.store(_CANCELLING)
    with QdrantVectorMemory("qdrant+memory://", metric="dot") as memory:
        memory.store(_CANCELLING)
        if norms != "engine":  # as on a server: the norms come from the payloads, or from every vector
            monkeypatch.setattr(qdrant_backend, "_largest_norm", lambda client, collection: None)
        if norms == "ordered-legacy":  # written without its norm, as memwoven did for dot before
            payload = {"id": "cancel", "content": "text cancel", "metadata": {}}
            point = models.PointStruct(id=point_id("cancel"), vector=list(_CANCELLING[0].embedding), payload=payload)
            memory.client.upsert(memory.collection, points=[point])
        if norms == "scan":  # a server without a float index on the norm
            memory._norms_ordered = False
        for options in ({"top_k": 1}, {"top_k": 5, "threshold": 3.75}, {"top_k": 2, "threshold": 3.45}):
            expected = [(h.document.id, h.score) for h in reference.search([1.0, 1.0, 1.0], **options)]
            assert [(h.document.id, h.score) for h in memory.search([1.0, 1.0, 1.0], **options)] == expected


def test_dot_searches_of_random_embeddings_match_the_in_memory_backend() -> None:
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((400, 384)).astype(np.float32) * rng.uniform(0.5, 30.0, (400, 1)).astype(np.float32)
    documents = [doc(f"d{i:03d}", *row) for i, row in enumerate(vectors.tolist())]
    reference = InMemoryVectorMemory(metric="dot")
    reference.store(documents)
    with QdrantVectorMemory("qdrant+memory://", metric="dot") as memory:
        memory.store(documents)
        for query in rng.standard_normal((10, 384)).tolist():
            expected = reference.search(query, top_k=5)
            assert memory.search(query, top_k=5) == expected
            threshold = expected[2].score
            assert memory.search(query, top_k=5, threshold=threshold) == reference.search(
                query, top_k=5, threshold=threshold
            )


def test_payload_indexes_are_created_on_request(memory: QdrantVectorMemory) -> None:
    with pytest.raises(InvalidInputError, match="store documents first"):
        memory.create_payload_index("kind")
    memory.store([doc("a", 1.0, 0.0, kind="post")])
    with pytest.warns(UserWarning, match="no effect in the local Qdrant"):
        memory.create_payload_index("kind", "keyword")
    with pytest.raises(InvalidInputError):
        memory.create_payload_index("kind", "nonsense")
    with pytest.raises(InvalidInputError):
        memory.create_payload_index("a.b")
    assert [h.document.id for h in memory.search([1.0, 0.0], filter={"kind": "post"})] == ["a"]


def test_foreign_points_are_reported_as_corrupt(memory: QdrantVectorMemory) -> None:
    memory.store([doc("a", 1.0, 0.0)])
    memory.client.upsert(memory.collection, points=[models.PointStruct(id=7, vector=[0.0, 1.0], payload={"x": 1})])
    with pytest.raises(CorruptMemoryError, match="point 7"):
        memory.search([0.0, 1.0])


@pytest.mark.parametrize(
    "payload",
    [
        {"id": "b", "content": "", "metadata": {}, "norm": 5.0},  # another document's id: not this point's
        {"id": "a", "content": "", "metadata": {}},  # cosine without its norm
        {"id": "a", "content": "", "metadata": {}, "norm": float("nan")},
        {"id": "a", "content": "", "metadata": {}, "norm": True},
        {"id": "a", "content": "", "metadata": {}, "norm": -5.0},
        {"id": "a", "content": "", "metadata": {}, "norm": 1e300},
        {"id": "a", "content": "", "metadata": {"k": float("nan")}, "norm": 5.0},
    ],
)
def test_damaged_points_are_reported_as_corrupt(memory: QdrantVectorMemory, payload: dict[str, Any]) -> None:
    memory.store([doc("a", 3.0, 4.0), doc("b", 1.0, 0.0)])
    point = models.PointStruct(id=point_id("a"), vector=[3.0, 4.0], payload=payload)
    memory.client.upsert(memory.collection, points=[point])
    with pytest.raises(CorruptMemoryError, match=point_id("a")):
        memory.get(["a"])
    with pytest.raises(CorruptMemoryError, match=point_id("a")):
        memory.search([1.0, 0.0], top_k=5)
    assert memory.get(["b"]) == [doc("b", 1.0, 0.0)]
    if payload["id"] != "a":
        with pytest.raises(CorruptMemoryError, match=point_id("a")):
            memory.ids()


def test_a_lone_surrogate_is_refused_before_any_write() -> None:
    local = QdrantClient(":memory:")
    local.create_collection("c", vectors_config=models.VectorParams(size=2, distance=models.Distance.COSINE))
    info = local.get_collection("c").model_dump(mode="json")
    writes: list[bytes] = []

    def server(request: httpx.Request) -> httpx.Response:  # a fake REST server holding collection "c"
        if request.url.path.endswith("/exists"):
            return httpx.Response(200, json={"result": {"exists": True}, "status": "ok", "time": 0})
        if request.method == "GET" and request.url.path == "/collections/c":
            return httpx.Response(200, json={"result": info, "status": "ok", "time": 0})
        writes.append(request.content)
        return httpx.Response(200, json={"result": {"operation_id": 1, "status": "completed"}, "status": "ok"})

    client = QdrantClient(url="http://fake:6333", check_compatibility=False)
    client._client.openapi_client.client._client = httpx.Client(transport=httpx.MockTransport(server))
    memory = QdrantVectorMemory(client, collection="c", batch_size=1)
    for bad in (doc("bad", 0.0, 1.0).model_copy(update={"content": "x\ud800y"}), doc("bad", 0.0, 1.0, k="\udfff")):
        with pytest.raises(InvalidInputError, match="surrogate"):
            memory.store([doc("good", 1.0, 0.0), bad])
    assert writes == []
    client.close()


@pytest.mark.parametrize(
    "vectors",
    [
        models.VectorParams(
            size=2,
            distance=models.Distance.COSINE,
            multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
        ),
        models.VectorParams(size=2, distance=models.Distance.COSINE, datatype=models.Datatype.FLOAT16),
        models.VectorParams(size=2, distance=models.Distance.COSINE, datatype=models.Datatype.UINT8),
        {"named": models.VectorParams(size=2, distance=models.Distance.COSINE)},
    ],
)
def test_collections_of_other_vectors_are_refused_and_not_listed(vectors: Any) -> None:
    client = QdrantClient(":memory:")
    client.create_collection("foreign", vectors_config=vectors)
    client.create_collection("ours", vectors_config=models.VectorParams(size=2, distance=models.Distance.COSINE))
    assert [c.name for c in list_collections(client)] == ["ours"]
    with pytest.raises(InvalidInputError, match="'foreign'"):
        QdrantVectorMemory(client, collection="foreign", dimension=2)
    memory = QdrantVectorMemory(client, collection="foreign")
    for read in (memory.count, lambda: memory.search([1.0, 0.0]), lambda: memory.store([doc("a", 1.0, 0.0)])):
        with pytest.raises(InvalidInputError, match="'foreign'"):
            read()
    client.close()


def test_large_stores_are_batched(memory: QdrantVectorMemory, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    upsert = memory.client.upsert

    def counting_upsert(**kwargs: Any) -> Any:
        calls.append(len(kwargs["points"]))
        return upsert(**kwargs)

    monkeypatch.setattr(memory.client, "upsert", counting_upsert)
    memory._batch_size = 100
    memory.store([doc(f"d{i}", 1.0, float(i)) for i in range(250)])
    assert calls == [100, 100, 50]
    assert memory.count() == 250


def test_an_unreachable_server_raises_backend_unavailable() -> None:
    with QdrantVectorMemory("qdrant://127.0.0.1:1", timeout=2) as memory:
        with pytest.raises(BackendUnavailableError, match=r"127\.0\.0\.1"):
            memory.count()
        with pytest.raises(BackendUnavailableError, match=r"127\.0\.0\.1"):
            asyncio.run(memory.acount())


@pytest.mark.parametrize(
    "location",
    ["qdrant+local://host/path", "qdrant+local://", "http://127.0.0.1:6333", "qdrant://", "qdrant+memory"],
)
def test_bad_locations_are_rejected(location: str) -> None:
    with pytest.raises(InvalidInputError):
        QdrantVectorMemory(location)


def test_bad_options_are_rejected() -> None:
    for options in ({"collection": "a/b"}, {"batch_size": 0}, {"metric": "l2"}, {"dimension": -1}):
        with pytest.raises(InvalidInputError):
            QdrantVectorMemory("qdrant+memory://", **options)


def test_a_generator_is_read_in_batches_and_validated_whole_before_any_write() -> None:
    with QdrantVectorMemory("qdrant+memory://", batch_size=3) as memory:
        memory.store(doc(f"d{i % 5}", 1.0, float(i)) for i in range(8))  # ids repeat across batches: last one wins
        assert memory.count() == 5
        assert [d.embedding[1] for d in memory.get(["d0", "d1", "d2"])] == pytest.approx([5.0, 6.0, 7.0], rel=1e-6)

        def bad_at_seven() -> Iterator[VectorDocument | dict[str, Any]]:
            yield from (doc(f"n{i}", 1.0, float(i)) for i in range(7))
            yield {"id": "n7", "embedding": [1.0, float("nan")]}

        with pytest.raises(InvalidInputError, match="document 7"):  # the position counted over the whole input
            memory.store(bad_at_seven())
        with pytest.raises(DimensionMismatchError):
            memory.store(doc(f"m{i}", *([1.0] * (2 if i < 4 else 3))) for i in range(6))
        assert memory.count() == 5  # nothing of either refused store was written


def test_client_options_with_a_client_passed_in_are_refused() -> None:
    """They were ignored: the client is the caller's, configured already."""
    client = QdrantClient(location=":memory:")
    with pytest.raises(InvalidInputError, match=r"client options \(timeout\)"):
        QdrantVectorMemory(client, timeout=3)
    with QdrantVectorMemory("qdrant+memory://", timeout=3, collection="c") as memory:  # a client option: taken
        assert memory.collection == "c"
    client.close()
    for option in ({"location": "elsewhere"}, {"path": "/tmp/elsewhere"}):  # the URL's own: refused, not a TypeError
        with pytest.raises(InvalidInputError, match="unexpected keyword argument"):
            QdrantVectorMemory("qdrant+memory://", **option)
