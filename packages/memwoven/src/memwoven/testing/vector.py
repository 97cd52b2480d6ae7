"""`VectorMemoryContract`: the conformance tests of invariants VM1-VM8, for any `VectorMemory`."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from memwoven.contracts import VectorMemory
from memwoven.errors import DimensionMismatchError, InvalidInputError
from memwoven.models import VectorDocument
from memwoven.testing._driver import MODES, Driver, StorageHooks, driving
from memwoven.testing.samples import OVER_THE_LIMITS, values_at_the_limits
from memwoven.vector_index import VectorMemoryBase

__all__ = ["VectorMemoryContract"]

DIMENSION = 8
VectorMemoryFactory = Callable[..., VectorMemory]


def axis(i: int, weight: float = 1.0, dimension: int = DIMENSION) -> list[float]:
    """A vector along axis `i` with a small component on the next axis (so no two axes tie)."""
    vector = [0.0] * dimension
    vector[i % dimension] = weight
    vector[(i + 1) % dimension] += 0.1
    return vector


def doc(doc_id: str, vector: list[float], **metadata: Any) -> VectorDocument:
    """A document whose content is `text <id>`."""
    return VectorDocument(id=doc_id, content=f"text {doc_id}", embedding=vector, metadata=metadata)


FILTER_CORPUS = [
    doc("p1", axis(0), kind="post", year=2020, tags=["a", "b"], score=0.5, public=True, flags=[True, False]),
    doc("p2", axis(1), kind="post", year=2022, tags=["b"], score=1, public=False, flags=[1, 0], owner={"admin": 1}),
    doc("n1", axis(2), kind="note", year=2024, tags=[], lang="en"),
    doc("n2", axis(3), kind="note", year="2024", lang=None),
    doc("x1", axis(4)),
]

FILTER_CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({"kind": "post"}, {"p1", "p2"}),
    ({"kind": {"$eq": "note"}}, {"n1", "n2"}),
    ({"kind": {"$ne": "post"}}, {"n1", "n2", "x1"}),
    ({"year": {"$in": [2020, 2024]}}, {"p1", "n1"}),
    ({"year": {"$nin": [2020, 2024]}}, {"p2", "n2", "x1"}),
    ({"year": {"$gt": 2020}}, {"p2", "n1"}),
    ({"year": {"$gte": 2020, "$lt": 2024}}, {"p1", "p2"}),
    ({"year": {"$lte": 2022}}, {"p1", "p2"}),
    ({"lang": {"$exists": True}}, {"n1", "n2"}),
    ({"lang": {"$exists": False}}, {"p1", "p2", "x1"}),
    ({"lang": None}, {"n2"}),
    ({"tags": {"$contains": "b"}}, {"p1", "p2"}),
    ({"public": True}, {"p1"}),
    ({"score": 1}, {"p2"}),
    ({"public": 1}, set()),  # booleans never equal numbers
    ({"flags": [1, 0]}, {"p2"}),  # ... nor inside arrays and objects
    ({"flags": {"$in": [[True, False]]}}, {"p1"}),
    ({"flags": {"$ne": [1, 0]}}, {"p1", "n1", "n2", "x1"}),
    ({"owner": {"admin": True}}, set()),
    ({"$or": [{"kind": "note"}, {"year": 2020}]}, {"p1", "n1", "n2"}),
    ({"$and": [{"kind": "post"}, {"year": {"$gt": 2021}}]}, {"p2"}),
    ({"$not": {"kind": "post"}}, {"n1", "n2", "x1"}),
    ({"kind": "post", "public": False}, {"p2"}),
    ({}, {"p1", "p2", "n1", "n2", "x1"}),
]


class VectorMemoryContract(StorageHooks[VectorMemory]):
    """Subclass this in a test module and provide `vector_memory_factory`: `(dimension, metric) -> memory`.

    The factory returns a fresh, empty memory; `dimension` may be None when `lazy_dimension` is True (the first
    store fixes it). The optional `reopen(memory)` hook returns a second object over the same storage. Every
    test runs twice: through the sync API and through the async twins.
    """

    lazy_dimension: bool = True

    @pytest.fixture
    def vector_memory_factory(self) -> VectorMemoryFactory:
        """A factory of fresh, empty memories. Override in the subclass."""
        raise NotImplementedError("provide a `vector_memory_factory` fixture: (dimension, metric) -> VectorMemory")

    @pytest.fixture(params=MODES)
    def mode(self, request: pytest.FixtureRequest) -> str:
        """sync or async."""
        return str(request.param)

    @pytest.fixture
    def opener(self, mode: str) -> Iterator[_Opener]:
        """Wraps memories in drivers of the test's mode and closes them all after the test."""
        with driving(_Nothing(), mode) as anchor, _Opener(anchor) as opener:
            yield opener

    @pytest.fixture
    def make(self, vector_memory_factory: VectorMemoryFactory, opener: _Opener) -> Callable[..., Driver]:
        """Build drivers over fresh memories: `make(dimension=8, metric="cosine")`."""
        return lambda dimension=DIMENSION, metric="cosine": opener.open(vector_memory_factory(dimension, metric))

    @pytest.fixture
    def memory(self, make: Callable[..., Driver]) -> Driver:
        """A fresh cosine memory of dimension 8."""
        return make()

    @pytest.fixture
    def other(self, memory: Driver, opener: _Opener) -> Driver:
        """A second object over the same storage as `memory` (skips if the backend has none)."""
        second = self.reopen(memory.target)
        if second is None:
            pytest.skip(f"{type(memory.target).__name__} keeps its data private to one object")
        return opener.open(second)

    # VM1 -----------------------------------------------------------------------------------------------------

    def test_vm1_store_upserts_by_id(self, memory: Driver) -> None:
        memory.store([doc("a", axis(0), v=1), doc("b", axis(1))])
        memory.store([doc("a", axis(2), v=2)])
        assert memory.count() == 2
        [stored] = memory.get(["a"])
        assert stored.metadata == {"v": 2}
        assert stored.embedding == pytest.approx(axis(2))
        assert memory.search(axis(2), top_k=1)[0].document.id == "a"

    def test_vm1_the_last_duplicate_in_one_batch_wins(self, memory: Driver) -> None:
        memory.store([doc("a", axis(0), v=1), doc("a", axis(1), v=2), doc("a", axis(2), v=3)])
        assert memory.count() == 1
        assert memory.get(["a"])[0].metadata == {"v": 3}

    @pytest.mark.parametrize(
        "replaced",
        [[0.0] * DIMENSION, [1e39, *axis(0)[1:]], [1e19] * DIMENSION],  # no cosine; beyond float32; norm too large
        ids=["zero", "beyond float32", "huge norm"],
    )
    @pytest.mark.parametrize("how", ["list", "iterator", "arrays"])
    def test_vm1_a_replaced_duplicate_is_validated_too(self, memory: Driver, replaced: list[float], how: str) -> None:
        documents = [{"id": "a", "embedding": replaced}, {"id": "a", "embedding": axis(0)}]
        if how == "arrays":
            self._columnar(memory)
        writes = {
            "list": lambda: memory.store(documents),
            "iterator": lambda: memory.store(iter(documents)),
            "arrays": lambda: memory.store_arrays(["a", "a"], [replaced, axis(0)]),
        }
        with pytest.raises(InvalidInputError):
            writes[how]()
        assert memory.count() == 0

    def test_vm1_plain_dicts_are_accepted(self, memory: Driver) -> None:
        memory.store([{"id": "a", "content": "hello", "embedding": axis(0), "metadata": {"k": "v"}}])
        assert memory.get(["a"])[0].content == "hello"

    # VM2 -----------------------------------------------------------------------------------------------------

    def test_vm2_dimension_is_fixed(self, memory: Driver) -> None:
        memory.store([doc("a", axis(0))])
        assert memory.target.dimension == DIMENSION
        with pytest.raises(DimensionMismatchError):
            memory.store([doc("b", [1.0] * (DIMENSION + 1))])
        with pytest.raises(DimensionMismatchError):
            memory.search([1.0] * (DIMENSION - 1))
        assert memory.count() == 1

    def test_vm2_the_first_store_fixes_a_lazy_dimension(self, make: Callable[..., Driver]) -> None:
        if not self.lazy_dimension:
            pytest.skip("this backend needs its dimension at construction")
        memory = make(None)
        dimensions = [memory.target.dimension]
        memory.store([doc("a", [1.0, 2.0, 3.0])])
        dimensions.append(memory.target.dimension)
        assert dimensions == [None, 3]
        with pytest.raises(DimensionMismatchError):
            memory.store([doc("b", [1.0, 2.0])])

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 1e39, 10**400])  # 10**400: beyond floats
    def test_vm2_non_finite_values_are_rejected_before_writing(self, memory: Driver, bad: float) -> None:
        memory.store([doc("a", axis(0))])
        vector = axis(1)
        vector[3] = bad
        with pytest.raises(InvalidInputError):
            memory.store([doc("ok", axis(2)), {"id": "bad", "embedding": vector}])
        with pytest.raises(InvalidInputError):
            memory.search(vector)
        assert memory.count() == 1
        assert memory.get(["ok", "bad"]) == []

    @pytest.mark.parametrize(
        "bad",
        [
            {"id": "", "embedding": axis(0)},
            {"id": "nul\x00", "embedding": axis(0)},
            {"id": "x", "embedding": []},
            {"id": "x", "embedding": ["a"] * DIMENSION},
            {"id": "x", "embedding": axis(0), "metadata": {"set": {1, 2}}},
            {"id": "x", "embedding": axis(0), "metadata": "not an object"},
            {"id": "x", "embedding": [0.0] * DIMENSION},  # a zero vector has no cosine
            {"id": b"x", "embedding": axis(0)},  # bytes are no id: `get` and `delete` take only str
            {"id": "x", "content": b"bytes", "embedding": axis(0)},
            {"id": "x", "embedding": axis(0), "metadata": {"a": [{b"key": 1}]}},
            "not a document",
        ],
    )
    def test_vm2_bad_documents_are_rejected_before_writing(self, memory: Driver, bad: Any) -> None:
        with pytest.raises(InvalidInputError):
            memory.store([doc("ok", axis(1)), bad])
        assert memory.count() == 0

    @pytest.mark.parametrize(
        "bad",
        [
            {"id": "lone \ud800"},
            {"content": "pasted \ud83d"},
            {"metadata": {"k": ["\udfff"]}},
            {"metadata": {"k": {"\udc00": 1}}},
        ],
        ids=["id", "content", "metadata", "metadata-key"],
    )
    @pytest.mark.parametrize("how", ["store", "arrays"])
    def test_vm2_a_lone_surrogate_is_refused_before_writing(
        self, memory: Driver, bad: dict[str, Any], how: str
    ) -> None:
        """A lone surrogate has no UTF-8 form: no store can hold it, so none accepts it (the in-process one too)."""
        kept = doc("kept", axis(0))
        memory.store([kept])
        fields: dict[str, Any] = {"id": "bad", "content": "", "metadata": {}, **bad}
        if how == "store":
            with pytest.raises(InvalidInputError):
                memory.store([doc("ok", axis(1)), {**fields, "embedding": axis(2)}])
        else:
            self._columnar(memory)
            rows = np.array([axis(1), axis(2)], dtype=np.float32)
            with pytest.raises(InvalidInputError):
                memory.store_arrays(
                    ["ok", fields["id"]], rows, contents=["ok", fields["content"]], metadata=[{}, fields["metadata"]]
                )
        assert memory.ids() == ["kept"]
        assert [(d.id, d.content) for d in memory.get(["kept"])] == [("kept", kept.content)]
        # an id with one was never stored: get and delete refuse it as store does (content and metadata are checked
        # on write only, so what an earlier release stored with one still reads back, see docs/contracts.md)
        with pytest.raises(InvalidInputError):
            memory.get(["kept", "lone \ud800"])
        with pytest.raises(InvalidInputError):
            memory.delete(["kept", "lone \ud800"])
        assert memory.ids() == ["kept"]

    # VM3 / VM4 / VM5 -------------------------------------------------------------------------------------------

    def test_vm3_results_are_sorted_by_score_descending(self, memory: Driver) -> None:
        memory.store([doc(f"d{i}", axis(i, weight=1.0 + i)) for i in range(DIMENSION)])
        query = [float(i + 1) for i in range(DIMENSION)]
        hits = memory.search(query, top_k=DIMENSION)
        scores = [hit.score for hit in hits]
        assert scores == sorted(scores, reverse=True)
        assert len(hits) == DIMENSION
        assert all(-1.0 <= s <= 1.0 for s in scores)

    def test_vm3_ties_are_broken_by_id(self, memory: Driver) -> None:
        memory.store([doc(i, axis(0)) for i in ["c", "a", "d", "b"]] + [doc("z", axis(1))])
        hits = memory.search(axis(0), top_k=3)
        assert [h.document.id for h in hits] == ["a", "b", "c"]
        assert hits[0].score == hits[1].score == hits[2].score

    def test_vm3_identical_embeddings_tie_wherever_they_lie(self, make: Callable[..., Driver]) -> None:
        """Identical embeddings score the same whatever their rows and whatever a filter selects (BLAS sums the
        rows left over at the end of its blocks in another order: identical rows scored apart, untied)."""
        for seed in range(6):
            rng = np.random.default_rng(seed)
            shared, query = rng.standard_normal((2, 384)).astype(np.float32).tolist()
            memory = make(384, "cosine")
            memory.clear()  # a factory may open one collection each time
            memory.store([doc(i, shared, twin=True) for i in ("c", "a", "b")])
            hits = memory.search(query, top_k=3)
            assert [h.document.id for h in hits] == ["a", "b", "c"], seed
            assert len({h.score for h in hits}) == 1, seed
            memory.store([doc(f"o{i}", v) for i, v in enumerate(rng.standard_normal((13, 384)).tolist())])
            filtered = memory.search(query, top_k=3, filter={"twin": True})
            assert [(h.document.id, h.score) for h in filtered] == [(h.document.id, h.score) for h in hits], seed

    def test_vm4_top_k_is_an_upper_bound(self, memory: Driver) -> None:
        memory.store([doc(f"d{i}", axis(i)) for i in range(3)])
        assert len(memory.search(axis(0), top_k=10)) == 3
        assert len(memory.search(axis(0), top_k=2)) == 2
        assert memory.search(axis(0), top_k=0) == []
        with pytest.raises(InvalidInputError):
            memory.search(axis(0), top_k=-1)

    def test_vm4_an_empty_memory_finds_nothing(self, memory: Driver) -> None:
        assert memory.search(axis(0)) == []

    def test_vm5_threshold_is_exclusive(self, memory: Driver) -> None:
        memory.store([doc("a", axis(0)), doc("b", axis(1)), doc("c", axis(2))])
        hits = memory.search(axis(0), top_k=3)
        second = hits[1].score
        above = memory.search(axis(0), top_k=3, threshold=second)
        assert [h.document.id for h in above] == [hits[0].document.id]
        at_or_above = memory.search(axis(0), top_k=3, threshold=math.nextafter(second, -math.inf) - 1e-6)
        assert [h.document.id for h in at_or_above] == [h.document.id for h in hits[:2]]

    def test_vm5_a_score_just_above_the_threshold_passes(self, make: Callable[..., Driver]) -> None:
        """The float32 score 0.10000000149 is above 0.1: compared after rounding 0.1 to float32 (numpy's rule for a
        float and a float32 array) the two were equal and the hit was dropped."""
        memory = make(2, "dot")
        memory.store([doc("a", [0.1, 0.0])])
        assert [h.document.id for h in memory.search([1.0, 0.0], top_k=1, threshold=0.1)] == ["a"]
        assert memory.search([1.0, 0.0], top_k=1, threshold=10**400) == []  # an int beyond floats
        assert len(memory.search([1.0, 0.0], top_k=1, threshold=-(10**400))) == 1

    def test_cosine_scores_and_dot_scores(self, make: Callable[..., Driver]) -> None:
        cosine = make(4, "cosine")
        cosine.store([doc("a", [2.0, 0.0, 0.0, 0.0]), doc("b", [1.0, 1.0, 0.0, 0.0])])
        hits = cosine.search([3.0, 0.0, 0.0, 0.0], top_k=2)
        assert [h.document.id for h in hits] == ["a", "b"]
        assert hits[0].score == pytest.approx(1.0, abs=1e-6)
        assert hits[1].score == pytest.approx(1 / math.sqrt(2), abs=1e-6)
        dot = make(4, "dot")
        dot.store([doc("a", [2.0, 0.0, 0.0, 0.0]), doc("b", [1.0, 5.0, 0.0, 0.0])])
        hits = dot.search([3.0, 1.0, 0.0, 0.0], top_k=2)
        assert [(h.document.id, h.score) for h in hits] == [("b", pytest.approx(8.0)), ("a", pytest.approx(6.0))]

    # VM6 -----------------------------------------------------------------------------------------------------

    def test_vm6_metadata_is_returned_exactly_as_stored(self, memory: Driver) -> None:
        metadata: dict[str, Any] = {
            "int": 3,
            "float": 0.1,
            "big": 2**53,
            "bool": False,
            "null": None,
            "text": 'caf\u00e9 \u65e5\u672c \U0001f600 "quoted" \\',
            "list": [1, "two", [3.5], {"four": None}],
            "nested": {"a": {"b": {"c": []}}},
            "empty": {},
            "": "empty key",
        }
        memory.store([VectorDocument(id="m", content="c", embedding=axis(0), metadata=metadata)])
        [stored] = memory.get(["m"])
        assert stored.metadata == metadata
        assert json.dumps(stored.metadata, sort_keys=True) == json.dumps(metadata, sort_keys=True)
        assert type(stored.metadata["int"]) is int
        assert type(stored.metadata["bool"]) is bool
        assert memory.search(axis(0), top_k=1)[0].document.metadata == metadata

    @pytest.mark.parametrize(("spec", "expected"), FILTER_CASES, ids=[json.dumps(c[0]) for c in FILTER_CASES])
    def test_vm6_filters_select_on_metadata(self, memory: Driver, spec: dict[str, Any], expected: set[str]) -> None:
        memory.store(FILTER_CORPUS)
        hits = memory.search(axis(0), top_k=10, filter=spec)
        assert {h.document.id for h in hits} == expected

    def test_vm6_filters_combine_with_top_k_and_threshold(self, memory: Driver) -> None:
        memory.store(FILTER_CORPUS)
        hits = memory.search(axis(0), top_k=1, filter={"kind": "note"})
        assert [h.document.id for h in hits] == ["n1"] or [h.document.id for h in hits] == ["n2"]
        assert memory.search(axis(0), top_k=5, filter={"kind": "note"}, threshold=0.99) == []

    @pytest.mark.parametrize("bad", [{"year": {"$regex": ".*"}}, {"$where": "1=1"}, {"year": {"$in": 2020}}, "kind"])
    def test_vm6_bad_filters_are_rejected(self, memory: Driver, bad: Any) -> None:
        memory.store(FILTER_CORPUS)
        with pytest.raises(InvalidInputError):
            memory.search(axis(0), filter=bad)

    # VM7 -----------------------------------------------------------------------------------------------------

    def test_vm7_delete_of_unknown_ids_is_a_no_op(self, memory: Driver) -> None:
        memory.store([doc("a", axis(0)), doc("b", axis(1)), doc("c", axis(2))])
        memory.delete(["missing"])
        memory.delete([])
        assert memory.count() == 3
        memory.delete(["b", "missing", "b"])
        assert memory.count() == 2
        assert memory.get(["a", "b", "c"]) == memory.get(["a", "c"])
        assert [h.document.id for h in memory.search(axis(1), top_k=3)] != []
        assert "b" not in {h.document.id for h in memory.search(axis(1), top_k=3)}

    def test_vm7_a_lone_string_is_not_a_list_of_ids(self, memory: Driver) -> None:
        memory.store([doc("a", axis(0)), doc("ab", axis(1))])
        with pytest.raises(InvalidInputError):
            memory.delete("ab")
        with pytest.raises(InvalidInputError):
            memory.get("ab")
        assert memory.count() == 2

    def test_get_returns_documents_in_the_order_asked(self, memory: Driver) -> None:
        memory.store([doc("a", axis(0)), doc("b", axis(1)), doc("c", axis(2))])
        assert [d.id for d in memory.get(["c", "missing", "a"])] == ["c", "a"]
        assert memory.get([]) == []

    def test_clear_empties_the_collection(self, memory: Driver) -> None:
        memory.store([doc("a", axis(0)), doc("b", axis(1))])
        memory.clear()
        assert memory.count() == 0
        assert memory.search(axis(0)) == []
        memory.store([doc("c", axis(2))])
        assert [d.id for d in memory.get(["a", "c"])] == ["c"]

    def test_many_documents_and_deletes_keep_search_exact(self, memory: Driver) -> None:
        docs = [doc(f"d{i:03d}", [math.sin(i * (k + 1)) + 1.5 for k in range(DIMENSION)]) for i in range(300)]
        memory.store(docs)
        memory.delete([f"d{i:03d}" for i in range(0, 300, 3)])
        kept = [d for i, d in enumerate(docs) if i % 3]
        query = [math.cos(k) for k in range(DIMENSION)]

        def cosine(vector: list[float]) -> float:
            dot = sum(a * b for a, b in zip(vector, query))
            return dot / math.sqrt(sum(a * a for a in vector) * sum(b * b for b in query))

        expected = sorted(kept, key=lambda d: (-cosine(list(d.embedding)), d.id))[:10]
        hits = memory.search(query, top_k=10)
        assert [h.document.id for h in hits] == [d.id for d in expected]
        assert memory.count() == 200

    # VM8 -----------------------------------------------------------------------------------------------------

    def test_vm8_documents_are_json_serializable(self, memory: Driver) -> None:
        memory.store(FILTER_CORPUS)
        for stored in memory.get([d.id for d in FILTER_CORPUS]):
            exported = json.loads(stored.model_dump_json(exclude={"embedding"}))
            assert exported["id"] == stored.id
            assert exported["metadata"] == stored.metadata
            assert VectorDocument.model_validate_json(stored.model_dump_json()) == stored

    def test_vm8_a_name_or_prefix_is_a_boundary(self, memory: Driver) -> None:
        with self.neighbour(memory.target) as neighbour:
            if neighbour is None:
                pytest.skip(f"{type(memory.target).__name__} has no collection name or prefix option")
            memory.store([doc("a", axis(0)), doc("b", axis(1))])
            assert neighbour.ids() == []
            assert neighbour.get(["a"]) == []
            assert neighbour.search(axis(0)) == []
            neighbour.delete(["a"])
            neighbour.store([doc("b", axis(2), other=True)])
            assert memory.ids() == ["a", "b"]
            assert memory.get(["b"])[0].metadata == {}
            assert neighbour.ids() == ["b"]

    def test_vm8_every_accepted_value_reads_back_equal(self, memory: Driver) -> None:
        values = values_at_the_limits()
        text = values["text"].replace("\x00", "")  # NUL: in JSON it is escaped, but PostgreSQL text cannot hold it
        stored = VectorDocument(id="limits", content=text, embedding=axis(0), metadata=values)
        memory.store([stored])
        exact = stored.model_dump_json(exclude={"embedding"})
        assert [d.model_dump_json(exclude={"embedding"}) for d in memory.get(["limits"])] == [exact]
        second = self.reopen(memory.target)
        if second is not None:  # and from a fresh object, which decodes what was stored
            with driving(second, "async" if memory.is_async else "sync", memory.loop) as fresh:
                assert [d.model_dump_json(exclude={"embedding"}) for d in fresh.get(["limits"])] == [exact]

    @pytest.mark.parametrize("over", OVER_THE_LIMITS, ids=["int-digits", "negative-int-digits", "depth"])
    def test_vm8_values_past_the_limits_are_refused(self, memory: Driver, over: dict[str, Any]) -> None:
        memory.store([doc("kept", axis(0))])
        with pytest.raises(InvalidInputError):
            memory.store([doc("new", axis(1)), {"id": "bad", "embedding": axis(2), "metadata": over}])
        assert memory.ids() == ["kept"]

    def test_vm8_ids_list_every_document_so_a_collection_can_be_read_whole(self, memory: Driver) -> None:
        assert memory.ids() == []
        memory.store([doc(i, axis(n)) for n, i in enumerate(["b", "é", "a", "c", "B"])])
        memory.delete(["c"])
        memory.store([doc("a", axis(5), v=2)])
        ids = memory.ids()
        assert ids == sorted(["a", "b", "é", "B"])
        assert [d.id for d in memory.get(ids)] == ids
        assert memory.get(["a"])[0].metadata == {"v": 2}
        memory.clear()
        assert memory.ids() == []

    def test_documents_reads_every_match_of_a_filter_by_id(self, memory: Driver) -> None:
        assert memory.documents() == []
        memory.store(FILTER_CORPUS)
        for spec, expected in FILTER_CASES:
            assert [d.id for d in memory.documents(spec)] == sorted(expected), spec
        assert memory.documents() == memory.get(sorted(d.id for d in FILTER_CORPUS))
        with pytest.raises(InvalidInputError):
            memory.documents({"year": {"$regex": ".*"}})

    # Columnar ingest (`store_arrays`) -------------------------------------------------------------------------

    def _columnar(self, memory: Driver) -> None:
        if not isinstance(memory.target, VectorMemoryBase):
            pytest.skip(f"{type(memory.target).__name__} has no store_arrays")

    def _read_back(self, memory: Driver, ids: list[str]) -> list[VectorDocument]:
        """The documents with `ids` as stored: read by a fresh object when the backend has one."""
        second = self.reopen(memory.target)
        if second is None:
            return list(memory.get(ids))
        with driving(second, "async" if memory.is_async else "sync", memory.loop) as fresh:
            return list(fresh.get(ids))

    @pytest.mark.parametrize("count", [3, 150])  # a small batch and one for a bulk path (PostgreSQL's COPY)
    def test_store_arrays_stores_what_store_stores(self, make: Callable[..., Driver], count: int) -> None:
        columnar, plain = make(), make()
        self._columnar(columnar)
        rng = np.random.default_rng(count)
        ids = [f"d{i}" for i in range(count)] + ["d0", "é\u2603"]  # "d0" again: the last one wins
        vectors = rng.standard_normal((len(ids), DIMENSION)).astype(np.float32)
        contents = [f"text {i}" for i in range(len(ids))]
        metadata: list[dict[str, Any]] = [{"n": i, "even": i % 2 == 0} if i % 3 else {} for i in range(len(ids))]
        plain.store(
            [
                {"id": i, "embedding": v.tolist(), "content": c, "metadata": m}
                for i, v, c, m in zip(ids, vectors, contents, metadata)
            ]
        )
        columnar.store_arrays(ids, vectors, contents=contents, metadata=metadata)
        unique = sorted(set(ids))
        assert self._read_back(columnar, unique) == plain.get(unique)
        assert columnar.count() == plain.count() == count + 1
        query = rng.standard_normal(DIMENSION).tolist()
        assert columnar.search(query, top_k=5, filter={"even": True}) == plain.search(
            query, top_k=5, filter={"even": True}
        )
        # replacing half the documents and adding one, without contents or metadata
        replaced = [f"d{i}" for i in range(1, count, 2)] + ["new"]
        again = rng.standard_normal((len(replaced), DIMENSION)).astype(np.float32)
        columnar.store_arrays(replaced, again)
        plain.store([{"id": i, "embedding": v.tolist()} for i, v in zip(replaced, again)])
        unique.append("new")
        assert self._read_back(columnar, unique) == plain.get(unique)
        assert columnar.search(query, top_k=3, filter={"n": 1}) == []

    def test_store_arrays_keeps_the_last_of_repeated_ids(self, memory: Driver) -> None:
        self._columnar(memory)
        vectors = np.array([axis(0), axis(1), axis(2)], dtype=np.float32)
        memory.store_arrays(["a", "a", "a"], vectors, metadata=[{"v": 1}, {"v": 2}, {"v": 3}])
        assert memory.count() == 1
        [stored] = memory.get(["a"])
        assert stored.metadata == {"v": 3}
        assert stored.embedding == pytest.approx(axis(2))

    @pytest.mark.parametrize(
        "bad",
        [
            {"embeddings": [[math.nan] + [1.0] * (DIMENSION - 1)] * 2},
            {"embeddings": [[math.inf] * DIMENSION] * 2},
            {"embeddings": [[1.0] * (DIMENSION + 1)] * 2},  # another dimension than the stored one
            {"embeddings": [[0.0] * DIMENSION] * 2},  # a zero vector has no cosine
            {"embeddings": [1.0] * DIMENSION},  # not 2-D
            {"embeddings": [[[1.0] * DIMENSION]] * 2},
            {"embeddings": [[1.0] * DIMENSION] * 3},  # more rows than ids
            {"ids": []},  # rows without ids
            {"ids": ["ok", ""]},
            {"ids": ["ok", "nul\x00"]},
            {"ids": ["ok", 7]},
            {"ids": "ab"},
            {"contents": ["one"]},
            {"contents": ["one", 2]},
            {"metadata": [{}, {"set": {1, 2}}]},
            {"metadata": [{}, "not an object"]},
            {"metadata": [{}]},
        ],
    )
    def test_store_arrays_refuses_bad_input_before_writing(self, memory: Driver, bad: dict[str, Any]) -> None:
        self._columnar(memory)
        memory.store([doc("kept", axis(0))])
        arguments: dict[str, Any] = {"ids": ["ok", "bad"], "embeddings": np.array([axis(1), axis(2)]), **bad}
        with pytest.raises(InvalidInputError):
            memory.store_arrays(
                arguments.pop("ids"), np.asarray(arguments.pop("embeddings"), dtype=np.float64), **arguments
            )
        assert memory.ids() == ["kept"]

    @pytest.mark.parametrize(
        "rows",
        [
            np.array([axis(0), axis(1)]) + 1j,  # numpy would drop the imaginary part
            np.array([axis(0), axis(1)]).astype("m8[s]"),
            np.array([axis(0), axis(1)]).astype("M8[s]"),
            np.ma.masked_array([axis(0), axis(1)], mask=[[False] * DIMENSION, [True] + [False] * (DIMENSION - 1)]),
            np.array([axis(0), [None, *axis(1)[1:]]], dtype=object),
            [axis(0), [10**400, *axis(1)[1:]]],  # beyond floats
            [[str(v) for v in axis(0)], [str(v) for v in axis(1)]],  # numbers as text: lax parsing took them
            np.array([axis(0), axis(1)], dtype=object).astype(str).astype(object),
            np.array([axis(0), axis(1)], dtype=bool),  # booleans taken as 0 and 1
            [[v > 0 for v in axis(0)], [v > 0 for v in axis(1)]],
        ],
        ids=[
            "complex",
            "timedelta",
            "datetime",
            "masked",
            "object None",
            "huge int",
            "numeric strings",
            "object strings",
            "bool array",
            "bools",
        ],
    )
    def test_store_arrays_and_search_refuse_the_embeddings_store_refuses(self, memory: Driver, rows: Any) -> None:
        self._columnar(memory)
        with pytest.raises(InvalidInputError):
            memory.store([{"id": f"d{i}", "embedding": row} for i, row in enumerate(rows)])
        with pytest.raises(InvalidInputError):
            memory.store_arrays(["d0", "d1"], rows)
        with pytest.raises(InvalidInputError):
            memory.search(rows[1])
        assert memory.count() == 0

    # A second object over the same storage ------------------------------------------------------------------

    def test_writes_are_seen_through_another_object(self, memory: Driver, other: Driver) -> None:
        memory.store([doc("a", axis(0)), doc("b", axis(1))])
        assert other.count() == 2
        assert other.search(axis(1), top_k=1)[0].document.id == "b"
        other.store([doc("c", axis(2), by="other")])
        other.delete(["a"])
        assert memory.count() == 2
        assert [h.document.id for h in memory.search(axis(2), top_k=1)] == ["c"]
        assert memory.get(["a"]) == []
        other.clear()
        assert memory.count() == 0
        assert memory.search(axis(0)) == []


class _Nothing:
    """A stand-in target that only owns the event loop of the test."""

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class _Opener:
    """Opens drivers on the anchor's loop and closes every one of them at the end."""

    def __init__(self, anchor: Driver) -> None:
        self.anchor = anchor
        self.opened: list[Any] = []

    def open(self, target: VectorMemory) -> Driver:
        self.opened.append(target)
        return Driver(target, self.anchor.loop)

    def __enter__(self) -> _Opener:
        return self

    def __exit__(self, *exc: object) -> None:
        for target in reversed(self.opened):
            if self.anchor.loop is None:
                target.close()
            else:
                self.anchor.run(target.aclose())
