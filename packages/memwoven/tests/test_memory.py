from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from clock_support import Clock

from memwoven import InMemoryChatMemory, InMemoryVectorMemory, Message, VectorDocument
from memwoven.contracts import ChatMemory, Metric, VectorMemory, next_version
from memwoven.errors import InvalidInputError
from memwoven.testing import ChatMemoryContract, VectorMemoryContract
from memwoven.vector_index import Scan, SearchQuery, VectorIndex, rank


class TestInMemoryChatMemory(ChatMemoryContract):
    @pytest.fixture
    def chat_memory(self) -> ChatMemory:
        return InMemoryChatMemory()


class TestInMemoryVectorMemory(VectorMemoryContract):
    @pytest.fixture
    def vector_memory_factory(self) -> Callable[..., VectorMemory]:
        return lambda dimension, metric: InMemoryVectorMemory(dimension=dimension, metric=metric)


class TestInMemoryVectorMemoryBfloat16Scan(VectorMemoryContract):
    @pytest.fixture
    def vector_memory_factory(self) -> Callable[..., VectorMemory]:
        return lambda dimension, metric: InMemoryVectorMemory(dimension=dimension, metric=metric, scan="bfloat16")


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_a_bfloat16_scan_returns_exactly_what_the_float32_scan_returns(metric: Metric) -> None:
    rng = np.random.default_rng(3)
    centers = rng.standard_normal((20, 64)).astype(np.float32)
    vectors = centers[rng.integers(0, 20, 3000)] + 0.02 * rng.standard_normal((3000, 64)).astype(np.float32)
    vectors[:40] = vectors[40] * (1 + 1e-4 * np.arange(40, dtype=np.float32))[:, None]  # ties below bfloat16's grain
    vectors[100] = 0.0  # a zero vector (allowed with the dot metric)
    exact, halved = InMemoryVectorMemory(metric=metric), InMemoryVectorMemory(metric=metric, scan="bfloat16")
    documents = [
        VectorDocument(id=f"d{i}", embedding=v, metadata={"part": i % 3})
        for i, v in enumerate(vectors)
        if metric == "dot" or i != 100
    ]
    for memory in (exact, halved):
        memory.store(documents)
        memory.delete(["d7", "d2999"])  # rows move: the bfloat16 copy must follow
        memory.store([VectorDocument(id="d8", embedding=vectors[40] * 3)])
    queries = [vectors[40], vectors[5] + 0.01, -vectors[9], np.zeros(64, np.float32), *rng.standard_normal((20, 64))]
    for query in queries[:3] if metric == "cosine" else queries:
        for options in ({"top_k": 10}, {"top_k": 50, "filter": {"part": 1}}, {"top_k": 5, "threshold": 0.2}):
            expected = [(hit.document.id, hit.score) for hit in exact.search(query, **options)]  # type: ignore[arg-type]
            got = [(hit.document.id, hit.score) for hit in halved.search(query, **options)]  # type: ignore[arg-type]
            assert [i for i, _ in got] == [i for i, _ in expected]
            assert np.allclose([s for _, s in got], [s for _, s in expected], rtol=1e-5, atol=1e-6)


def test_an_unknown_scan_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="unknown scan"):
        InMemoryVectorMemory(scan="float8")  # type: ignore[arg-type]


def test_a_save_reusing_stored_messages_still_checks_the_new_ones_and_snapshots_the_list() -> None:
    memory = InMemoryChatMemory()
    memory.save("s", [Message(role="user", content=f"m{i}") for i in range(5)])
    history = memory.load("s")
    original = list(history)
    with pytest.raises(InvalidInputError, match="message 6"):
        memory.save("s", [*history, {"role": "user", "content": "ok"}, {"role": "nobody"}])
    with pytest.raises(InvalidInputError, match="message 2 is a int"):
        memory.save("s", [history[0], history[1], 7, *history[3:]])  # type: ignore[list-item]  # a foreign object inside the known prefix
    grown: list[Message | dict[str, str]] = [*history, {"role": "assistant", "content": "new"}]
    memory.save("s", grown)
    grown.append(Message(role="user", content="after the save"))
    history[0] = Message(role="user", content="changed by the caller")
    loaded = memory.load("s")
    assert [m.content for m in loaded] == ["m0", "m1", "m2", "m3", "m4", "new"]
    assert all(a is b for a, b in zip(loaded[:5], original, strict=True))  # shared, not copied


def test_appends_grow_one_buffer_without_touching_earlier_snapshots_or_other_sessions() -> None:
    memory = InMemoryChatMemory()
    memory.append("a", [Message(role="user", content="a0")])
    memory.append("b", [Message(role="user", content="b0")])  # both started from the absent session
    before = memory.load_versioned("a")
    memory.append("a", [Message(role="user", content="a1")])
    memory.append("a", [Message(role="user", content="a2")])
    assert [m.content for m in before.messages] == ["a0"]
    assert [m.content for m in memory.load("a")] == ["a0", "a1", "a2"]
    assert [m.content for m in memory.load("b")] == ["b0"]
    memory.save("a", memory.load("a")[:1])  # a shorter history, then an append after it
    memory.append("a", [Message(role="user", content="a3")])
    assert [m.content for m in memory.load("a")] == ["a0", "a3"]
    assert memory.load("never") == []


def test_an_append_after_expiry_starts_a_new_history(clock: Clock) -> None:
    memory = InMemoryChatMemory(ttl=60)
    memory.append("s", [Message(role="user", content="old")])
    clock.advance(59.9)
    assert [m.content for m in memory.load("s")] == ["old"]
    clock.advance(0.1)
    memory.append("s", [Message(role="user", content="new")])
    assert [m.content for m in memory.load("s")] == ["new"]


def test_a_stored_version_far_above_the_clock_raises_only_its_own_next_version() -> None:
    """A damaged file's version (1.2e19), or another process's far ahead, is the floor of its own session's next
    version only: the process's version clock does not follow it (every later SQL write overflowed BIGINT)."""
    assert next_version(11_795_954_870_533_596_404) == 11_795_954_870_533_596_405
    assert 0 < next_version(0) < 2**63
    assert next_version(5) < next_version(5)  # never the same reading twice, whatever the clock shows


def test_vectors_of_tiny_norm_keep_their_direction() -> None:
    """Squared norms summed in float32 underflow for norms near 1e-20: such a vector was scored off its direction
    or refused as a zero vector. Their norms are summed again in float64; only norms under 1e-37 are refused."""
    memory = InMemoryVectorMemory(dimension=2)
    memory.store([VectorDocument(id="tiny", embedding=[3e-23, 4e-23]), VectorDocument(id="unit", embedding=[1, 1])])
    hits = memory.search([3.0, 4.0], top_k=2)
    assert [h.document.id for h in hits] == ["tiny", "unit"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-6)
    memory.store([VectorDocument(id="small", embedding=[1e-23, 0.0])])
    with pytest.raises(InvalidInputError, match="no direction"):
        memory.store([VectorDocument(id="subnormal", embedding=[1e-40, 0.0])])


@pytest.mark.parametrize("scan", ["float32", "bfloat16"])
@pytest.mark.parametrize("fillers", [0, 2, 40], ids=["every row", "most rows", "a few rows gathered"])
def test_a_short_query_and_short_rows_score_their_cosines(scan: Scan, fillers: int) -> None:
    """Cosine scores a short query and short rows by their directions: 1 / (|row| |query|) in float32 overflowed to
    inf for the query [1e-23, 0] (its dot with [1e-23, 0] underflowed to 0: NaN, ranked below 0.71) or [1e-30, 0]
    (scores clipped to ±1), on every scan path (with a filter keeping every row, most rows, or a few) and in `rank`,
    which rescores what a server found."""
    memory = InMemoryVectorMemory(dimension=2, scan=scan)
    short = {"kind": "short"}
    documents = [
        VectorDocument(id="tiny", embedding=[1e-23, 0.0], metadata=short),
        VectorDocument(id="unit", embedding=[1.0, 1.0], metadata=short),
        VectorDocument(id="diag", embedding=[1e-10, 1e-10], metadata=short),
        VectorDocument(id="anti", embedding=[-1e-10, 1e-11], metadata=short),
    ]
    filler = [VectorDocument(id=f"f{i}", embedding=[-1.0, -2.0], metadata={"kind": "filler"}) for i in range(fillers)]
    memory.store(documents + filler)
    expected = {"tiny": 1.0, "unit": 0.70710677, "diag": 0.70710677, "anti": -0.99503719}
    batch = VectorIndex(2).prepare(documents)
    for query in ([1e-23, 0.0], [1e-30, 0.0], [1e-20, 0.0], [1.0, 0.0]):
        for top_k in (1, 4):
            hits = memory.search(query, top_k=top_k, filter=short if fillers else None)
            ranked = rank(batch, SearchQuery.of(query, top_k, None, None, "cosine"), "cosine")
            for found in (hits, ranked):
                assert [h.document.id for h in found] == ["tiny", "diag", "unit", "anti"][:top_k]
                assert [h.score for h in found] == pytest.approx([expected[h.document.id] for h in found], abs=1e-6)
