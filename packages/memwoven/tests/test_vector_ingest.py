"""Columnar ingest's validation: the whole-array checks agree with the per-document ones they stand for."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memwoven._steps import run
from memwoven.contracts import DocumentsIn, VectorMemory, check_id, check_ids
from memwoven.errors import InvalidInputError
from memwoven.models import VectorDocument, coerce_documents
from memwoven.vector_index import _MAPPED_BYTES, DocumentBatch, VectorIndex, as_matrix, inverse_norms, store_columns

DIMENSION = 4


def _per_id(values: list[Any]) -> list[str] | type[InvalidInputError]:
    try:
        return [check_id(value, "document id") for value in values]
    except InvalidInputError:
        return InvalidInputError


def _all_at_once(values: list[Any]) -> list[str] | type[InvalidInputError]:
    try:
        return check_ids(values)
    except InvalidInputError:
        return InvalidInputError


ids = st.one_of(
    st.text(max_size=6),
    st.text(alphabet="a\x00\ud800\u00e9", max_size=4),  # "", NUL, a lone surrogate
    # about the 64 KiB limit of UTF-8 bytes, at 1 to 3 bytes a character
    st.builds(lambda char, count: char * count, st.sampled_from("a\u00e9\u2603"), st.integers(16_380, 22_000)),
    st.integers(),
    st.none(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ids, max_size=6))
def test_check_ids_decides_as_check_id_does_one_by_one(values: list[Any]) -> None:
    assert _all_at_once(values) == _per_id(values)


documents = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d\u00e9"]),  # few ids: repeats are common
        st.lists(st.floats(0.5, 100, width=32), min_size=DIMENSION, max_size=DIMENSION),
        st.text(max_size=5),
        st.dictionaries(st.text(max_size=3), st.one_of(st.integers(-5, 5), st.text(max_size=3), st.booleans())),
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(documents)
def test_a_batch_of_arrays_is_the_batch_of_the_same_documents(rows: list[tuple[Any, ...]]) -> None:
    index = VectorIndex(DIMENSION)
    expected = index.prepare([{"id": i, "embedding": e, "content": c, "metadata": m} for i, e, c, m in rows])
    columns = list(zip(*rows)) or [[], [], [], []]
    found = DocumentBatch.of_arrays(
        columns[0],
        np.array(columns[1], dtype=np.float32).reshape(len(rows), DIMENSION),
        columns[2],
        columns[3],
        dimension=DIMENSION,
        metric="cosine",
    )
    assert (found.ids, found.contents, found.metadata) == (expected.ids, expected.contents, expected.metadata)
    assert np.array_equal(found.vectors, expected.vectors)
    assert found.scales is None or np.array_equal(found.scales, inverse_norms(found.vectors))
    assert found.positions is None or found.positions == {doc_id: row for row, doc_id in enumerate(found.ids)}
    # an index filled from the columns (taking the batch's norms and id map) is the one filled from the documents
    by_arrays, by_documents = VectorIndex(DIMENSION), VectorIndex(DIMENSION)
    for index, batch in ((by_arrays, found), (by_documents, expected)):
        index.upsert(batch)
        index.upsert(batch)  # a second time: every id replaced
    assert by_arrays.rows == by_documents.rows == {doc_id: row for row, doc_id in enumerate(expected.ids)}
    assert np.array_equal(by_arrays.matrix, by_documents.matrix)
    assert np.array_equal(by_arrays._inverse_norms[: len(by_arrays)], by_documents._inverse_norms[: len(by_documents)])
    if found.positions is not None and found.ids:
        found.positions.clear()  # the index holds a copy of the batch's map, not the map itself
        assert by_arrays.rows == by_documents.rows


def test_missing_contents_and_metadata_share_one_value() -> None:
    batch = DocumentBatch.of_arrays(
        ["a", "b"], np.ones((2, DIMENSION), np.float32), None, None, dimension=None, metric="cosine"
    )
    assert batch.contents == ["", ""]
    assert batch.metadata == [{}, {}]
    assert batch.metadata[0] is batch.metadata[1]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_value_is_refused_whatever_its_row(bad: float) -> None:
    matrix = np.ones((5, DIMENSION), np.float32)
    matrix[3, 2] = bad
    with pytest.raises(InvalidInputError, match="NaN or infinity"):
        as_matrix(matrix, DIMENSION, "dot")


def test_a_finite_row_whose_squares_overflow_is_refused_for_its_norm() -> None:
    matrix = np.ones((2, DIMENSION), np.float32)
    matrix[1] = 3e38  # finite, but its sum of squares is not
    with pytest.raises(InvalidInputError, match="norm"):
        as_matrix(matrix, DIMENSION, "dot")


class _Recording(VectorMemory):
    """A `VectorMemory` of its own (not a built-in backend): only `store` is used here."""

    def __init__(self) -> None:
        self.stored: list[VectorDocument] = []

    @property
    def dimension(self) -> int | None:
        return None

    def store(self, documents: DocumentsIn) -> None:
        self.stored.extend(coerce_documents(documents))

    def search(self, embedding: Any, **kwargs: Any) -> list[Any]:
        raise NotImplementedError

    def get(self, ids: Any) -> list[VectorDocument]:
        raise NotImplementedError

    def delete(self, ids: Any) -> None:
        raise NotImplementedError

    def count(self) -> int:
        return len(self.stored)

    def clear(self) -> None:
        self.stored.clear()


def test_store_columns_stores_documents_into_any_vector_memory() -> None:
    memory = _Recording()
    run(store_columns(memory, ["a", "b"], [[1.0, 2.0], [3.0, 4.0]], metadata=[{"k": 1}, {}]))
    assert memory.stored == [
        VectorDocument(id="a", embedding=[1.0, 2.0], metadata={"k": 1}),
        VectorDocument(id="b", embedding=[3.0, 4.0]),
    ]
    with pytest.raises(InvalidInputError):
        run(store_columns(memory, ["c"], [[1.0, 2.0]], contents=["one", "two"]))
    assert memory.count() == 2


def test_a_matrix_past_the_mapped_size_holds_the_rows_written_and_grows() -> None:
    rows = _MAPPED_BYTES // (384 * 4) + 10  # its own mapping from the first store on
    vectors = np.random.default_rng(3).standard_normal((2 * rows, 384)).astype(np.float32)
    ids = [f"d{i}" for i in range(2 * rows)]
    index = VectorIndex(384)
    index.upsert(DocumentBatch.of_arrays(ids[:rows], vectors[:rows], None, None, dimension=384, metric="cosine"))
    assert index.matrix.ctypes.data % 64 == 0
    index.upsert(DocumentBatch.of_arrays(ids[rows:], vectors[rows:], None, None, dimension=384, metric="cosine"))
    assert index.matrix.ctypes.data % 64 == 0
    assert np.array_equal(index.matrix, vectors)
    assert [hit.document.id for hit in index.search(vectors[rows + 5].tolist(), top_k=1)] == [f"d{rows + 5}"]
