from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import redis
import redis.asyncio
import redis_support
from redis_support import RedisHooks, delete_prefix

from memwoven import vector_index
from memwoven.backends.memory import InMemoryVectorMemory
from memwoven.backends.redis_vector import SCRIPTS, RedisVectorMemory
from memwoven.contracts import Metric, VectorMemory
from memwoven.errors import BackendUnavailableError, CorruptMemoryError, DimensionMismatchError, InvalidInputError
from memwoven.models import VectorDocument
from memwoven.testing import VectorMemoryContract
from memwoven.urls import open_vector_memory
from memwoven_test_support import redis_url, unique_name
from memwoven_test_support.redis_servers import redis_server

_names = itertools.count()


def doc(doc_id: str, *vector: float, **metadata: object) -> VectorDocument:
    return VectorDocument(id=doc_id, content=f"text {doc_id}", embedding=list(vector), metadata=metadata)


@pytest.fixture
def redis_prefix() -> Iterator[tuple[str, str]]:
    """A unique key prefix on the shared Redis; its keys are deleted afterwards."""
    url, prefix = redis_url(), unique_name("mwtest")
    yield url, prefix
    delete_prefix(url, prefix)


@pytest.fixture
def open_memory(redis_prefix: tuple[str, str]) -> Iterator[Callable[..., RedisVectorMemory]]:
    """Open memories on this test's prefix (collection "c" unless told), closing them all afterwards."""
    url, prefix = redis_prefix
    opened: list[RedisVectorMemory] = []

    def open_memory(collection: str = "c", **options: object) -> RedisVectorMemory:
        memory = RedisVectorMemory(url, prefix=prefix, collection=collection, **options)  # type: ignore[arg-type]
        opened.append(memory)
        return memory

    yield open_memory
    for memory in opened:
        memory.close()


def factory(url: str, prefix: str) -> Callable[..., VectorMemory]:
    """A `vector_memory_factory`: fresh collections under `prefix` on the server at `url`."""

    def make(dimension: int | None, metric: Metric) -> VectorMemory:
        return RedisVectorMemory(url, prefix=prefix, collection=f"c{next(_names)}", dimension=dimension, metric=metric)

    return make


class RedisVectorHooks(RedisHooks, VectorMemoryContract):
    """The vector contract on Redis: other objects on the server, on the memory's collection or one extending it."""

    def sibling(self, memory: RedisVectorMemory, suffix: str) -> RedisVectorMemory:
        collection = memory.collection + suffix
        return RedisVectorMemory(self.url(memory), prefix=memory.prefix, collection=collection, metric=memory.metric)

    def empty(self, memory: RedisVectorMemory) -> None:
        memory.clear()


class TestRedisVectorMemory(RedisVectorHooks):
    @pytest.fixture
    def vector_memory_factory(self, redis_prefix: tuple[str, str]) -> Callable[..., VectorMemory]:
        return factory(*redis_prefix)

    def url(self, memory: RedisVectorMemory) -> str:
        return redis_url()  # not the memory's URL, where a password would be redacted


cluster_url = redis_support.cluster_url  # a private cluster, for this module


class TestRedisClusterVectorMemory(RedisVectorHooks):
    @pytest.fixture
    def vector_memory_factory(self, cluster_url: str) -> Callable[..., VectorMemory]:
        return factory(cluster_url, unique_name("mwc"))


def test_collections_spread_over_the_cluster_and_keep_their_keys_in_one_slot(cluster_url: str) -> None:
    prefix = unique_name("mwc")
    slots = set()
    for i in range(12):
        with RedisVectorMemory(cluster_url, prefix=prefix, collection=f"c{i}") as memory:
            memory.store([doc("a", 1.0, 0.0), doc("b", 0.0, 1.0)])
            memory.delete(["b"])
            assert [h.document.id for h in memory.search([1.0, 0.1])] == ["a"]
            key_slots = {memory._client.keyslot(key) for key in memory._keys}
            assert len(key_slots) == 1
            slots |= key_slots
    assert len({slot // 5462 for slot in slots}) > 1  # 16384 slots over 3 masters


def test_two_objects_see_each_others_store_delete_and_clear(open_memory: Callable[..., RedisVectorMemory]) -> None:
    first, second = open_memory(), open_memory()
    first.store([doc("a", 1.0, 0.0, v=1), doc("b", 0.0, 1.0)])
    assert second.count() == 2
    assert second.dimension == 2
    second.store([doc("a", 1.0, 1.0, v=2), doc("c", 1.0, 0.5)])
    second.delete(["b"])
    assert [d.metadata for d in first.get(["a", "b", "c"])] == [{"v": 2}, {}]
    assert [h.document.id for h in first.search([1.0, 0.5], top_k=3)] == ["c", "a"]
    first.clear()
    second.store([doc("d", 0.0, 1.0)])
    first.store([doc("e", 1.0, 0.0)])
    for memory in (first, second):
        assert [h.document.id for h in memory.search([1.0, 1.0], top_k=5)] == ["d", "e"]


def test_incremental_pulls_apply_only_the_changes(open_memory: Callable[..., RedisVectorMemory]) -> None:
    first, second = open_memory(), open_memory()
    assert first.count() == 0  # positioned at the start of the (empty) stream
    first.store([doc(f"d{i}", 1.0, float(i)) for i in range(20)])
    assert second.count() == 20
    index = second._index
    first.store([doc("d3", 1.0, -3.0)])
    first.delete(["d4", "missing"])
    assert second.count() == 19
    assert second._index is index  # pulled and applied in place, not reloaded
    assert second.get(["d3"])[0].embedding == [1.0, -3.0]
    assert second._position == first._position  # the writer applied its own writes locally


def test_a_trimmed_stream_triggers_a_full_reload(open_memory: Callable[..., RedisVectorMemory]) -> None:
    first, second = open_memory(), open_memory()
    first.store([doc("a", 1.0, 0.0)])
    assert second.count() == 1
    behind = second._index
    for i in range(5):
        first.store([doc(f"n{i}", 1.0, float(i))])
    first.delete(["a"])
    first._client.xtrim(first._keys[3], maxlen=2, approximate=False)  # as MAXLEN ~ does to a lagging client
    assert sorted(d.id for d in second.get(["a", "n0", "n1", "n2", "n3", "n4"])) == ["n0", "n1", "n2", "n3", "n4"]
    assert second._index is not behind  # the gap in sequence numbers made it reload
    assert second._position is not None
    assert second._position.seq == 7


def test_random_operations_through_three_clients_match_one_in_memory_model(
    open_memory: Callable[..., RedisVectorMemory],
) -> None:
    rng = random.Random(5)
    clients = [open_memory(), open_memory(), open_memory()]
    model = InMemoryVectorMemory(dimension=3)
    for step in range(200):
        client, action = rng.choice(clients), rng.random()
        if action < 0.5:
            batch = [
                doc(f"d{rng.randrange(25)}", *(rng.uniform(-1.0, 1.0) for _ in range(3)), g=rng.randrange(3))
                for _ in range(rng.randrange(1, 5))
            ]
            client.store(batch)
            model.store(batch)
        elif action < 0.8:
            ids = [f"d{rng.randrange(25)}" for _ in range(2)]
            client.delete(ids)
            model.delete(ids)
        elif action < 0.83:
            client.clear()
            model.clear()
        elif action < 0.86:
            client._client.xtrim(client._keys[3], maxlen=rng.randrange(3), approximate=False)
        reader = rng.choice(clients)
        query, spec = [rng.gauss(0.0, 1.0) for _ in range(3)], rng.choice([None, {"g": {"$ne": 1}}])
        expected = model.search(query, top_k=5, filter=spec)
        assert [h.document.id for h in reader.search(query, top_k=5, filter=spec)] == [
            h.document.id for h in expected
        ], step
        assert reader.count() == model.count(), step


def test_the_stream_is_capped_and_a_lagging_client_still_catches_up(
    open_memory: Callable[..., RedisVectorMemory],
) -> None:
    writer, reader = open_memory(max_changes=10), open_memory()
    writer.store([doc("seed", 1.0, 0.0)])
    assert reader.count() == 1
    for i in range(300):
        writer.store([doc(f"d{i % 50}", 1.0, float(i))])
    assert writer._client.xlen(writer._keys[3]) < 300
    assert reader.count() == 51
    assert reader.get(["d49"])[0].embedding == [1.0, 299.0]


def test_deleting_the_keys_behind_a_client_is_noticed(open_memory: Callable[..., RedisVectorMemory]) -> None:
    first, second = open_memory(), open_memory()
    first.store([doc("a", 1.0, 0.0), doc("b", 0.0, 1.0)])
    assert second.count() == 2
    first._client.delete(*first._keys)
    assert second.count() == 0
    first.store([doc("c", 1.0, 1.0)])
    assert [d.id for d in second.get(["a", "b", "c"])] == ["c"]


@pytest.mark.parametrize("lost", [(0, 1), (0,), (1,)])
def test_hashes_lost_behind_a_kept_config_are_reported(
    open_memory: Callable[..., RedisVectorMemory], lost: tuple[int, ...]
) -> None:
    """Eviction removes whole keys: losing the documents' hashes while the config and stream stay read as an
    empty (or half-empty) collection before the config kept the count of the last change."""
    first = open_memory()
    first.store([doc("a", 1.0, 0.0), doc("b", 0.0, 1.0)])
    first._client.delete(*(first._keys[i] for i in lost))
    with pytest.raises(CorruptMemoryError, match=r"its last change left 2 documents|is missing"):
        open_memory().count()  # one hash lost: a fresh object's reload names the first unpaired document
    with pytest.raises(CorruptMemoryError, match=r"its last change left 2 documents|is missing"):
        first.search([1.0, 0.0])


def test_a_change_by_a_writer_that_does_not_count_is_not_taken_for_damage(
    open_memory: Callable[..., RedisVectorMemory],
) -> None:
    """A writer of an earlier release (its scripts keep no count) during a rolling deploy: the count stamped by
    an earlier change no longer describes the collection, and is not held against it until a counting write."""
    first = open_memory()
    first.store([doc("a", 1.0, 0.0), doc("b", 0.0, 1.0)])
    count_line = "  redis.call('HSET', KEYS[3], 'count', redis.call('HLEN', KEYS[2]), 'counted', seq)\n"
    assert count_line in SCRIPTS["delete"]
    earlier_delete = first._client.register_script(SCRIPTS["delete"].replace(count_line, ""))
    assert earlier_delete(keys=first._keys, args=[10_000, "a"])
    assert [d.id for d in open_memory().get(["a", "b"])] == ["b"]
    first.store([doc("c", 1.0, 1.0)])  # counted again
    first._client.delete(first._keys[0], first._keys[1])
    with pytest.raises(CorruptMemoryError, match="its last change left 2 documents"):
        open_memory().count()


def test_the_dimension_and_metric_are_persisted(open_memory: Callable[..., RedisVectorMemory]) -> None:
    open_memory(metric="dot").store([doc("a", 1.0, 2.0, 3.0)])
    reopened = open_memory(metric="dot")
    assert reopened.count() == 1
    assert reopened.dimension == 3
    with pytest.raises(DimensionMismatchError):
        open_memory(dimension=4, metric="dot")
    with pytest.raises(DimensionMismatchError):
        open_memory(metric="dot").store([doc("b", 1.0, 2.0)])
    with pytest.raises(InvalidInputError, match="dot"):
        open_memory(metric="cosine").search([1.0, 2.0, 3.0])
    with pytest.raises(InvalidInputError, match="dot"):
        open_memory(metric="cosine").store([doc("b", 1.0, 2.0, 3.0)])
    cleared = open_memory(metric="dot")
    cleared.clear()
    assert cleared.dimension == 3
    with pytest.raises(DimensionMismatchError):
        open_memory(metric="dot").store([doc("b", 1.0, 2.0)])
    assert open_memory(metric="dot").count() == 0


def test_another_dimension_fails_at_open_without_reading_documents(
    redis_prefix: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, prefix = redis_prefix
    with RedisVectorMemory(url, prefix=prefix, collection="c", dimension=4) as fresh:  # nothing stored yet
        assert fresh.dimension == 4
    with RedisVectorMemory(url, prefix=prefix, collection="c") as memory:
        memory.store([doc("a", 1.0, 2.0, 3.0)])

    def no_sync(self: RedisVectorMemory) -> None:
        raise AssertionError("opening read the documents")

    monkeypatch.setattr(RedisVectorMemory, "_sync_steps", no_sync)
    with pytest.raises(DimensionMismatchError, match="has dimension 3, not 4"):
        RedisVectorMemory(url, prefix=prefix, collection="c", dimension=4)
    with pytest.raises(DimensionMismatchError):
        open_vector_memory(url, collection="c", dimension=4, prefix=prefix)
    with pytest.raises(InvalidInputError, match="cosine"):
        RedisVectorMemory(url, prefix=prefix, collection="c", dimension=3, metric="dot")

    async def open_in_async_code() -> None:
        with pytest.raises(DimensionMismatchError):
            RedisVectorMemory(url, prefix=prefix, collection="c", dimension=4)
        async with RedisVectorMemory(url, prefix=prefix, collection="c", dimension=3) as memory:
            assert memory.dimension == 3

    asyncio.run(open_in_async_code())


def test_hostile_ids_and_collections_stay_apart(open_memory: Callable[..., RedisVectorMemory]) -> None:
    ids = ["*", "a:b", "{x}", "[a-z]", "é \U0001f600", "a b\nc", "0-0", "\x01"]
    first, other = open_memory("one"), open_memory("two")
    first.store([doc(i, 1.0, float(n)) for n, i in enumerate(ids)])
    other.store([doc("*", 0.0, 1.0)])
    reader = open_memory("one")
    assert [d.id for d in reader.get(ids)] == ids
    reader.delete(ids[:4])
    assert sorted(d.id for d in first.get(ids)) == sorted(ids[4:])
    assert other.get(["*"])[0].embedding == [0.0, 1.0]


def test_corrupt_documents_are_reported(open_memory: Callable[..., RedisVectorMemory]) -> None:
    memory = open_memory()
    memory.store([doc("a", 1.0, 0.0), doc("b", 0.0, 1.0)])
    memory._client.hset(memory._keys[1], "b", b"\x00\x01")
    with pytest.raises(CorruptMemoryError, match="'b'"):
        open_memory().count()
    memory._client.hset(memory._keys[1], "b", memory._client.hget(memory._keys[1], "a"))
    memory._client.hset(memory._keys[0], "a", b"{not json")
    with pytest.raises(CorruptMemoryError, match="'a'"):
        open_memory().count()


@pytest.mark.parametrize(
    ("vector", "metric"),
    [([float("nan"), 0.0], "dot"), ([0.0, 0.0], "cosine"), ([3e38, 3e38], "dot")],
    ids=["NaN", "zero vector (cosine)", "norm beyond float32"],
)
def test_a_vector_store_refuses_is_reported(
    open_memory: Callable[..., RedisVectorMemory], vector: list[float], metric: str
) -> None:
    """A stored vector `store` refuses raises `CorruptMemoryError` naming it, loaded whole or pulled as a change:
    only finiteness was checked, and a zero vector scored 0 under cosine, an overlong one inf or NaN."""
    memory = open_memory(metric=metric)
    memory.store([doc("a", 1.0, 0.0), doc("b", 0.0, 1.0)])
    reader = open_memory(metric=metric)
    assert len(reader.search([1.0, 1.0])) == 2  # loaded before the damage: it pulls only the changes after it
    memory.store([doc("c", 1.0, 1.0)])
    for doc_id in ("b", "c"):
        memory._client.hset(memory._keys[1], doc_id, np.array(vector, dtype="<f4").tobytes())
    for opened in (reader, open_memory(metric=metric)):
        with pytest.raises(CorruptMemoryError, match=r"'[bc]': its vector is damaged"):
            opened.search([1.0, 1.0])


@pytest.mark.parametrize(("field", "value"), [("metric", "garbage"), ("dimension", "0"), ("seq", "-5"), ("seq", "x")])
def test_a_damaged_config_is_reported(open_memory: Callable[..., RedisVectorMemory], field: str, value: str) -> None:
    memory = open_memory()
    memory.store([doc("a", 1.0, 0.0)])
    memory._client.hset(memory._keys[2], field, value)
    with pytest.raises(CorruptMemoryError, match="collection 'c"):
        open_memory().count()


def test_async_twins_share_the_local_index_with_sync_calls(open_memory: Callable[..., RedisVectorMemory]) -> None:
    memory, other = open_memory(), open_memory()

    async def scenario() -> list[str]:
        await memory.astore([doc("a", 1.0, 0.0)])
        other.store([doc("b", 0.9, 0.1)])
        hits = await memory.asearch([1.0, 0.0], top_k=2)
        return [h.document.id for h in hits]

    assert asyncio.run(scenario()) == ["a", "b"]
    assert memory.count() == 2


def test_an_unreachable_server_raises_backend_unavailable() -> None:
    with (
        redis_server() as server,
        RedisVectorMemory(server.url, collection="c", socket_timeout=2) as memory,
    ):
        memory.store([doc("a", 1.0, 0.0)])
        server.stop(kill=True)
        with pytest.raises(BackendUnavailableError) as raised:
            memory.search([1.0, 0.0])
        assert "127.0.0.1" in str(raised.value)
        server.start()
        memory.store([doc("b", 0.0, 1.0)])
        assert memory.count() == 1  # the server kept no data (no persistence): the client reloads cleanly


def test_bad_construction_arguments_are_rejected() -> None:
    for options in ({"prefix": "a b"}, {"collection": "{x}"}, {"max_changes": 0}, {"metric": "l2"}, {"dimension": 0}):
        with pytest.raises(InvalidInputError):
            RedisVectorMemory("redis://127.0.0.1:1/0", **options)


def test_async_methods_work_from_every_loop_whatever_the_clients(redis_prefix: tuple[str, str]) -> None:
    """From a URL (a client per loop), a sync client alone (worker threads) or with an async client (which serves
    the first loop; later loops use threads), the async methods work from successive event loops."""
    url, prefix = redis_prefix
    memories = [
        RedisVectorMemory(url, prefix=prefix, collection="url"),
        RedisVectorMemory(redis.Redis.from_url(url), prefix=prefix, collection="alone"),
        RedisVectorMemory(
            redis.Redis.from_url(url), async_client=redis.asyncio.Redis.from_url(url), prefix=prefix, collection="lent"
        ),
    ]

    async def store_and_search(memory: RedisVectorMemory, i: int) -> list[str]:
        await memory.astore([doc(f"d{i}", 1.0, float(i))])
        return [hit.document.id for hit in await memory.asearch([1.0, float(i)], top_k=1)]

    for memory in memories:
        for i in range(3):
            assert asyncio.run(store_and_search(memory, i)) == [f"d{i}"]
        assert memory.ids() == ["d0", "d1", "d2"]
        memory.close()


def test_what_an_earlier_release_stored_with_a_lone_surrogate_still_reads(
    open_memory: Callable[..., RedisVectorMemory], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Earlier releases stored content and metadata holding a lone surrogate on Redis (JSON-escaped). Only new writes
    refuse one (VM2): such documents still read back as stored, and delete removes them."""
    legacy = VectorDocument(id="old", content="pasted \ud83d", embedding=[1.0, 0.0], metadata={"k\udc00": ["\udfff"]})
    with monkeypatch.context() as patch:
        patch.setattr(vector_index, "require_utf8", lambda batch: None)  # the check earlier releases did not make
        open_memory().store([legacy, doc("new", 0.0, 1.0)])
    memory = open_memory()  # a fresh object: decodes what was stored
    assert memory.ids() == ["new", "old"]
    assert memory.get(["old"]) == [legacy]
    assert asyncio.run(memory.aget(["old"])) == [legacy]
    assert [hit.document for hit in memory.search([1.0, 0.0], top_k=1)] == [legacy]
    assert memory.documents() == [doc("new", 0.0, 1.0), legacy]
    with pytest.raises(InvalidInputError):
        memory.store([legacy])  # writing it again is refused, and writes nothing
    memory.delete(["old"])
    assert open_memory().ids() == ["new"]
