"""The index's column-wise filters select exactly the rows the row-by-row evaluator (`compile_filter`) does."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from filter_support import combined_filters
from hypothesis import given, settings
from hypothesis import strategies as st

from memwoven.errors import InvalidInputError
from memwoven.filters import compile_filter
from memwoven.models import VectorDocument
from memwoven.vector_index import DocumentBatch, VectorIndex, require_utf8

KEYS = ["a", "b", "a.x", "user"]
# few distinct values, so that rows and operands meet often: bools beside 0 and 1, 1 beside 1.0, big ints
# beside the floats they do (10**20) and do not (2**53 + 1) equal
scalars = st.sampled_from(
    [0, 1, 2, 0.0, 1.0, 2.5, -1, True, False, "", "x", "1", None, 10**20, 1e20, 2**53 + 1, 2.0**53]
)
nested = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["x", "y"]), inner, max_size=2)
    ),
    max_leaves=4,
)
values = st.one_of(scalars, scalars, scalars, nested)  # mostly scalars, where the columns do the work
metadata = st.dictionaries(st.sampled_from(KEYS), values, max_size=4)
operand_scalars = st.one_of(scalars, scalars, scalars, st.lists(scalars, max_size=2))


def _field_condition() -> st.SearchStrategy[Any]:
    comparable = st.one_of(st.integers(-3, 3), st.floats(-3, 3), st.sampled_from(["", "x", "y"]))
    ops = st.one_of(
        st.tuples(st.sampled_from(["$eq", "$ne", "$contains"]), operand_scalars),
        st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(operand_scalars, max_size=3)),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), comparable),
        st.tuples(st.just("$exists"), st.booleans()),
    )
    return st.one_of(operand_scalars, st.dictionaries(st.just("k"), ops, min_size=1).map(lambda d: dict([d["k"]])))


fields = st.dictionaries(
    st.sampled_from(KEYS + KEYS + ["user.x", "a.y", "missing"]), _field_condition(), min_size=1, max_size=2
)
filters = combined_filters(fields, merged=fields, max_leaves=6)
# an operation: ("put", ids, metadata), ("remove", ids) or ("clear",)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.lists(st.tuples(st.integers(0, 12), metadata), min_size=1, max_size=8)),
        st.tuples(st.just("remove"), st.lists(st.integers(0, 12), max_size=4)),
        st.tuples(st.just("clear")),
    ),
    min_size=1,
    max_size=6,
)


def _apply(index: VectorIndex, operation: tuple[Any, ...]) -> None:
    if operation[0] == "put":
        docs = [VectorDocument(id=str(i), embedding=[1.0, float(i)], metadata=m) for i, m in operation[1]]
        index.upsert(index.prepare(docs))
    elif operation[0] == "remove":
        index.remove([str(i) for i in operation[1]])
    else:
        index.clear()


@settings(max_examples=400, deadline=None)
@given(operations, st.lists(filters, min_size=1, max_size=4))
def test_selected_rows_match_the_row_by_row_evaluation(ops: list[tuple[Any, ...]], specs: list[Any]) -> None:
    index = VectorIndex(2)
    for operation in ops:
        _apply(index, operation)
        for spec in specs:
            predicate = compile_filter(spec)
            expected = [row for row, m in enumerate(index.metadata) if predicate(m)]
            assert index._selected(spec, predicate).tolist() == expected, spec


def _row_by_row(index: VectorIndex, query: list[float], top_k: int, threshold: float | None, spec: Any) -> Any:
    """The search as it was before the columns: the predicate on every row, then score, threshold, top-k, ties."""
    predicate = compile_filter(spec)
    vector = np.asarray(query, dtype=np.float32)
    hits = []
    for row, m in enumerate(index.metadata):
        if predicate(m):
            score = float(
                np.clip(index.matrix[row] @ vector * index._inverse_norms[row] / np.linalg.norm(vector), -1, 1)
            )
            if threshold is None or score > threshold:
                hits.append((-score, index.ids[row]))
    return [doc_id for _, doc_id in sorted(hits)[:top_k]]


def test_filtered_search_equals_the_row_by_row_search() -> None:
    rng = np.random.default_rng(7)
    index = VectorIndex(8)
    vectors = rng.integers(-2, 3, size=(600, 8)).astype(float)  # small integers: many tied scores
    vectors[np.all(vectors == 0, axis=1)] = 1.0
    docs = [
        VectorDocument(id=f"d{i:03}", embedding=v.tolist(), metadata={"tenant": i % 7, "flag": i % 3 == 0, "n": i % 5})
        for i, v in enumerate(vectors)
    ]
    index.upsert(index.prepare(docs))
    index.remove([f"d{i:03}" for i in range(0, 600, 11)])
    specs = [{"tenant": 3}, {"flag": True}, {"tenant": {"$in": [1, 2]}, "n": {"$gte": 2}}, {"$not": {"n": 1}}]
    for spec in specs:
        for top_k in (1, 5, 50):
            for threshold in (None, 0.0, 0.5):
                query = rng.integers(-2, 3, size=8).astype(float).tolist()
                if not any(query):
                    query[0] = 1.0
                hits = [hit.document.id for hit in index.search(query, top_k=top_k, threshold=threshold, filter=spec)]
                assert hits == _row_by_row(index, query, top_k, threshold, spec)


def test_require_utf8_takes_non_ascii_batches_and_names_the_document_with_a_lone_surrogate() -> None:
    """A batch that is not all ASCII is checked a document at a time (no joined copy of every content)."""
    vectors = np.ones((3, 2), dtype=np.float32)
    require_utf8(DocumentBatch(["a", "b", "c"], ["é", "中文 😀", "x"], [{}, {"k": "ü"}, {}], vectors))
    for contents, metadata in [(["é", "ok", "x\ud800"], [{}, {}, {}]), (["é", "ok", "x"], [{}, {}, {"k": "\udc00"}])]:
        with pytest.raises(InvalidInputError, match="'c'"):
            require_utf8(DocumentBatch(["a", "b", "c"], contents, metadata, vectors))
