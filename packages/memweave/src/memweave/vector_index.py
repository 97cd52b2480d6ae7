"""The exact in-process vector index every embedded and SQL vector backend searches with (sans I/O).

Vectors live in one contiguous float32 matrix (grown by doubling) with an id -> row map; deletes move the last
row into the hole so the live rows stay contiguous. A search is one matrix-vector product over the live rows
and an `argpartition` top-k, with no per-query rebuilding.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from memweave.contracts import DocumentsIn, Filter, Metric, check_id, check_ids
from memweave.errors import DimensionMismatchError, InvalidInputError
from memweave.filters import compile_filter
from memweave.models import FrozenDict, FrozenList, ScoredDocument, VectorDocument, coerce_documents

__all__ = [
    "DocumentBatch",
    "VectorIndex",
    "as_matrix",
    "as_query",
    "check_dimension",
    "check_metric",
    "check_search_args",
    "require_utf8",
]

Matrix = npt.NDArray[np.float32]
_ALIGNMENT = 64  # bytes: a cache line, and what AVX-512 loads want


@dataclass(frozen=True)
class DocumentBatch:
    """Validated documents ready to write: unique ids (last occurrence wins) and their float32 rows."""

    ids: list[str]
    contents: list[str]
    metadata: list[FrozenDict]
    vectors: Matrix

    def documents(self) -> list[VectorDocument]:
        """The batch as `VectorDocument`s."""
        return [
            VectorDocument.model_construct(id=i, content=c, embedding=FrozenList(v.tolist()), metadata=m)
            for i, c, m, v in zip(self.ids, self.contents, self.metadata, self.vectors)
        ]


def check_metric(metric: str) -> Metric:
    """Validate a metric name."""
    if metric not in ("cosine", "dot"):
        raise InvalidInputError(f"unknown metric {metric!r}; use 'cosine' or 'dot'")
    return metric  # type: ignore[return-value]


def check_dimension(dimension: int | None) -> int | None:
    """Validate a dimension given at construction (None: fixed by the first store)."""
    if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1):
        raise InvalidInputError(f"dimension must be a positive int, got {dimension!r}")
    return dimension


def check_search_args(top_k: int, threshold: float | None) -> None:
    """Validate the scalar arguments of `search`."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise InvalidInputError(f"top_k must be a non-negative int, got {top_k!r}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
        raise InvalidInputError(f"threshold must be a number, got {threshold!r}")


def as_matrix(vectors: Any, dimension: int | None, metric: Metric) -> Matrix:
    """Turn embeddings into a (n, dimension) float32 matrix, checking dimension, finiteness and zero norms."""
    try:
        with np.errstate(over="ignore"):  # values beyond float32 become inf and are rejected below
            matrix = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise InvalidInputError(f"embeddings must be equal-length lists of numbers ({error})") from None
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    if matrix.ndim != 2 or matrix.shape[1] == 0:
        raise InvalidInputError("embeddings must be non-empty lists of numbers")
    if dimension is not None and matrix.shape[1] != dimension:
        raise DimensionMismatchError(f"embedding has dimension {matrix.shape[1]}, the collection has {dimension}")
    if not np.isfinite(matrix).all():
        raise InvalidInputError("embeddings cannot contain NaN or infinity (or values beyond float32 range)")
    if metric == "cosine":
        with np.errstate(over="ignore"):
            squares = np.einsum("ij,ij->i", matrix, matrix)
        if not np.all(squares > 0):
            raise InvalidInputError("a zero vector has no direction; cosine similarity is undefined for it")
        if not np.isfinite(squares).all():  # its norm is beyond float32: cosine scores would be NaN
            raise InvalidInputError("an embedding's norm is beyond float32 range; scale it down")
    return matrix


def require_utf8(batch: DocumentBatch) -> None:
    """Refuse documents whose content or metadata has no UTF-8 form (a lone surrogate), for stores that need it."""
    for doc_id, content, metadata in zip(batch.ids, batch.contents, batch.metadata):
        try:
            content.encode("utf-8")
            if metadata:
                json.dumps(metadata, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInputError(
                f"document {doc_id[:80]!r}: its content or metadata holds a lone surrogate, which UTF-8 cannot encode"
            ) from None


def _stack(embeddings: list[list[float]]) -> Matrix:
    """Validated embeddings (lists of floats) as one float32 matrix; `np.fromiter` is several times faster here."""
    width = len(embeddings[0])
    if any(len(embedding) != width for embedding in embeddings):
        raise DimensionMismatchError("the embeddings of one batch have different dimensions")
    with np.errstate(over="ignore"):  # values beyond float32 become inf and are rejected by as_matrix
        flat = np.fromiter(itertools.chain.from_iterable(embeddings), dtype=np.float32, count=len(embeddings) * width)
    return flat.reshape(len(embeddings), width)


def as_query(embedding: Sequence[float], dimension: int | None, metric: Metric) -> Matrix:
    """Validate a query embedding into a float32 vector."""
    if isinstance(embedding, (str, bytes)) or np.ndim(embedding) != 1:
        raise InvalidInputError("a query embedding must be a flat list of numbers")
    return as_matrix(embedding, dimension, metric).reshape(-1)


class VectorIndex:
    """An exact, in-process index of documents: contiguous float32 rows, id -> row map, metadata per row."""

    def __init__(self, dimension: int | None = None, metric: Metric = "cosine") -> None:
        self.dimension = check_dimension(dimension)
        self.metric = check_metric(metric)
        self.ids: list[str] = []
        self.rows: dict[str, int] = {}
        self.contents: list[str] = []
        self.metadata: list[FrozenDict] = []
        self._matrix: Matrix = _aligned_rows(0, dimension or 0)
        self._inverse_norms: Matrix = np.empty(0, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def matrix(self) -> Matrix:
        """The live rows (a view, not a copy)."""
        return self._matrix[: len(self.ids)]

    def prepare(self, documents: DocumentsIn) -> DocumentBatch:
        """Validate documents against this index (ids, dimension, finiteness) without changing anything."""
        docs = coerce_documents(documents)
        latest: dict[str, int] = {}
        for position, doc in enumerate(docs):
            latest[check_id(doc.id, "document id")] = position
        unique = [docs[position] for position in latest.values()]
        vectors = as_matrix(_stack([doc.embedding for doc in unique]), self.dimension, self.metric) if unique else None
        return DocumentBatch(
            ids=[doc.id for doc in unique],
            contents=[doc.content for doc in unique],
            metadata=[doc.metadata for doc in unique],  # type: ignore[misc]
            vectors=vectors if vectors is not None else np.empty((0, self.dimension or 0), dtype=np.float32),
        )

    def upsert(self, batch: DocumentBatch) -> None:
        """Insert or replace the batch's documents (already validated by `prepare`)."""
        if not batch.ids:
            return
        if self.dimension is None:
            self.dimension = batch.vectors.shape[1]
            self._matrix = _aligned_rows(0, self.dimension)
        rows = np.empty(len(batch.ids), dtype=np.intp)
        for position, (doc_id, content, metadata) in enumerate(zip(batch.ids, batch.contents, batch.metadata)):
            row = self.rows.get(doc_id)
            if row is None:
                row = self.rows[doc_id] = len(self.ids)
                self.ids.append(doc_id)
                self.contents.append(content)
                self.metadata.append(metadata)
            else:
                self.contents[row] = content
                self.metadata[row] = metadata
            rows[position] = row
        self._reserve(len(self.ids))
        first = int(rows[0])
        if np.array_equal(rows, np.arange(first, first + len(rows))):
            target: slice | npt.NDArray[np.intp] = slice(first, first + len(rows))  # a plain copy, not a scatter
        else:
            target = rows
        self._matrix[target] = batch.vectors
        self._inverse_norms[target] = _inverse_norms(batch.vectors)

    def remove(self, ids: Iterable[str]) -> int:
        """Delete documents by id (unknown ids ignored); returns how many were removed."""
        removed = 0
        for doc_id in check_ids(ids):
            row = self.rows.pop(doc_id, None)
            if row is None:
                continue
            last = len(self.ids) - 1
            if row != last:  # move the last row into the hole to keep rows contiguous
                moved = self.ids[last]
                self.ids[row], self.contents[row], self.metadata[row] = moved, self.contents[last], self.metadata[last]
                self._matrix[row] = self._matrix[last]
                self._inverse_norms[row] = self._inverse_norms[last]
                self.rows[moved] = row
            self.ids.pop()
            self.contents.pop()
            self.metadata.pop()
            removed += 1
        return removed

    def clear(self) -> None:
        """Remove every document (the dimension stays fixed)."""
        self.ids, self.rows, self.contents, self.metadata = [], {}, [], []

    def get(self, ids: Iterable[str]) -> list[VectorDocument]:
        """The stored documents with these ids, in the order asked."""
        return [self.document(row) for row in (self.rows.get(i) for i in check_ids(ids)) if row is not None]

    def document(self, row: int) -> VectorDocument:
        """The document at one row."""
        return VectorDocument.model_construct(
            id=self.ids[row],
            content=self.contents[row],
            embedding=FrozenList(self._matrix[row].tolist()),
            metadata=self.metadata[row],
        )

    def search(
        self,
        embedding: Sequence[float],
        *,
        top_k: int = 4,
        threshold: float | None = None,
        filter: Filter | None = None,
    ) -> list[ScoredDocument]:
        """Exact top-k search: scores descending, ties by id, only scores > threshold, metadata matching filter."""
        check_search_args(top_k, threshold)
        predicate = compile_filter(filter) if filter is not None else None
        query = as_query(embedding, self.dimension, self.metric)
        if top_k == 0 or not self.ids:
            return []
        scores = self.matrix @ query
        if self.metric == "cosine":
            scores *= self._inverse_norms[: len(self.ids)] / np.float32(np.linalg.norm(query))
            np.clip(scores, -1.0, 1.0, out=scores)
        candidates: npt.NDArray[np.intp] | None = None
        if predicate is not None:
            keep = np.fromiter((predicate(m) for m in self.metadata), dtype=bool, count=len(self.metadata))
            candidates = np.flatnonzero(keep)
        if threshold is not None:
            above = np.flatnonzero(scores > threshold)
            candidates = above if candidates is None else np.intersect1d(candidates, above, assume_unique=True)
        pool = scores if candidates is None else scores[candidates]
        rows = _top_rows(pool, top_k)
        if candidates is not None:
            rows = candidates[rows]
        ranked = sorted(rows.tolist(), key=lambda r: (-scores[r], self.ids[r]))[:top_k]
        return [ScoredDocument.model_construct(document=self.document(r), score=float(scores[r])) for r in ranked]

    def _reserve(self, size: int) -> None:
        capacity = self._matrix.shape[0]
        if size <= capacity:
            return
        # Headroom even on the first allocation, so the write after a bulk load does not copy the whole matrix
        # (the pages past the live rows are never touched, so they cost address space, not memory).
        new_capacity = max(size + size // 4, 2 * capacity, 16)
        matrix = _aligned_rows(new_capacity, self.dimension or 0)
        matrix[:capacity] = self._matrix
        norms = np.empty(new_capacity, dtype=np.float32)
        norms[:capacity] = self._inverse_norms
        self._matrix, self._inverse_norms = matrix, norms


def _aligned_rows(rows: int, dimension: int) -> Matrix:
    """An uninitialised C-contiguous (rows, dimension) float32 matrix starting on a 64-byte (cache line) boundary."""
    size = rows * dimension * 4
    buffer = np.empty(size + _ALIGNMENT, dtype=np.uint8)
    start = -buffer.ctypes.data % _ALIGNMENT
    return buffer[start : start + size].view(np.float32).reshape(rows, dimension)


def _inverse_norms(vectors: Matrix) -> Matrix:
    norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors, dtype=np.float32))
    with np.errstate(divide="ignore"):
        return np.where(norms > 0, 1.0 / norms, 0.0).astype(np.float32)


def _top_rows(scores: Matrix, top_k: int) -> npt.NDArray[np.intp]:
    """Positions of the top_k scores, plus any positions tied with the k-th score (for the id tie-break)."""
    if top_k >= len(scores):
        return np.arange(len(scores))
    part = np.argpartition(-scores, top_k - 1)[:top_k]
    return np.flatnonzero(scores >= scores[part].min())
