"""The exact in-process vector index every embedded and SQL vector backend searches with (sans I/O).

Vectors live in one contiguous float32 matrix (grown by doubling) with an id -> row map; deletes move the last
row into the hole so the live rows stay contiguous. A search is one matrix-vector product over the live rows
and an `argpartition` top-k, with no per-query rebuilding.

With ``scan="bfloat16"`` the index also keeps each row's direction in bfloat16 (half the bytes) and a search
first scans that copy with SimSIMD's kernel. The scan's error has a proven bound (`_BF16_ERROR`), so every row
whose exact score could reach the top k (or pass the threshold) is kept as a candidate, and only those are scored
again in float32: the results are exactly those of the float32 scan, for half the bytes read.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import mmap
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import TypeAdapter, ValidationError

from memwoven._columns import Columns
from memwoven._steps import Call, Steps, async_twin, twins
from memwoven.contracts import DocumentsIn, Filter, Metric, VectorMemory, check_id, check_ids
from memwoven.errors import DimensionMismatchError, InvalidInputError
from memwoven.filters import Predicate, compile_filter
from memwoven.models import (
    FrozenDict,
    FrozenList,
    Real,
    ScoredDocument,
    VectorDocument,
    coerce_documents,
    coerce_metadata,
)

__all__ = [
    "DocumentBatch",
    "Matrix",
    "Rows",
    "SearchQuery",
    "VectorIndex",
    "VectorMemoryBase",
    "as_matrix",
    "as_query",
    "best_rows",
    "check_dimension",
    "check_metric",
    "check_scan",
    "check_search_args",
    "check_stored_dimension",
    "cosine_query",
    "exact_scores",
    "inverse_norms",
    "rank",
    "require_utf8",
    "rounding_margin",
    "store_columns",
    "stored_scales",
]

Matrix = npt.NDArray[np.float32]
Halves = npt.NDArray[np.uint16]  # bfloat16 values as raw bits (numpy has no bfloat16 type)
Squares = npt.NDArray[np.float64]  # squared norms
Rows = npt.NDArray[np.intp]
Scan = Literal["float32", "bfloat16"]
_ALIGNMENT = 64  # bytes: a cache line, and what AVX-512 loads want
# A matrix this large gets a mapping of its own (page-aligned) whose live rows are faulted in at once: the first
# 1M x 384 fill of a process on a Firecracker VM spent 1.3-1.6 s of system time so, 2.6-3.1 s a page at a time
_MAPPED_BYTES = 1 << 20
_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23 if sys.platform == "linux" else None)  # Linux 5.14+
# Bound on |bfloat16 dot - exact dot| of two unit vectors, as a multiple of 1: each element rounded to 8
# significant bits (relative error <= 2**-8 per factor, so <= 2 * 2**-8 + 2**-16 per product), plus a float32
# accumulation of `dimension` products (<= dimension * 2**-24, doubled for safety).
_BF16_ROUNDING = 2 * 2**-8 + 2**-16
_BF16_ACCUMULATION = 2 * 2**-24


@dataclass(frozen=True)
class DocumentBatch:
    """Validated documents ready to write: unique ids (last occurrence wins) and their float32 rows.

    `scales` (1 / each row's norm) and `positions` (id -> position in the batch), when given, are what
    `VectorIndex.upsert` would otherwise compute again: the validation already had them."""

    ids: list[str]
    contents: list[str]
    metadata: list[FrozenDict]
    vectors: Matrix
    scales: Matrix | None = field(default=None, compare=False, repr=False)
    positions: dict[str, int] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of_arrays(
        cls,
        ids: Iterable[str],
        embeddings: Any,
        contents: Iterable[str] | None,
        metadata: Iterable[Mapping[str, Any]] | None,
        *,
        dimension: int | None,
        metric: Metric,
    ) -> DocumentBatch:
        """Validate documents given as columns into a batch, as `VectorIndex.prepare` validates documents (ids,
        dimension, finiteness, metadata; the last of repeated ids wins), but over whole arrays: `embeddings` is an
        (n, d) array taken as it is when it is C-contiguous float32, and missing contents and metadata are ""
        and one shared empty object, so no per-row object is built beyond the ids."""
        id_list = check_ids(ids.tolist() if isinstance(ids, np.ndarray) else ids)
        count = len(id_list)
        numbers = _numbers(embeddings)
        if numbers.ndim != 2 and (count or numbers.size):
            raise InvalidInputError("embeddings must be an (n, dimension) array: one row per id")
        if numbers.ndim == 2 and len(numbers) != count:
            raise InvalidInputError(f"{count} ids but {len(numbers)} embeddings")
        vectors, squares = _checked_matrix(numbers, dimension, metric) if count else (None, None)
        content_list = _column(contents, count, "contents", "")
        if contents is not None and not all(isinstance(content, str) for content in content_list):
            raise InvalidInputError("contents must be strings")
        metadata_list = _column(metadata, count, "metadata", _EMPTY)
        if metadata is not None:
            metadata_list = coerce_metadata(metadata_list)
        if vectors is None or squares is None:
            return cls([], [], [], np.empty((0, dimension or 0), dtype=np.float32))
        require_utf8(cls(id_list, content_list, metadata_list, vectors))
        scales = _inverse(squares)
        latest = dict(zip(id_list, range(count)))  # the last occurrence of an id wins, at the place of its first
        if len(latest) == count:
            return cls(id_list, content_list, metadata_list, vectors, scales, latest)
        keep = list(latest.values())
        picked = np.array(keep, dtype=np.intp)
        content_list = [content_list[position] for position in keep]
        metadata_list = [metadata_list[position] for position in keep]
        return cls(list(latest), content_list, metadata_list, vectors[picked], scales[picked])

    def documents(self) -> list[VectorDocument]:
        """The batch as `VectorDocument`s."""
        return [
            VectorDocument.model_construct(id=i, content=c, embedding=FrozenList(v.tolist()), metadata=m)
            for i, c, m, v in zip(self.ids, self.contents, self.metadata, self.vectors)
        ]


_MAX_SQUARED_NORM = np.float32(np.finfo(np.float32).max / 2)
_SMALL_SQUARE = 2.0**-100  # float32 sums of squares below this are summed again in float64
_MIN_NORM = 1e-37  # a shorter vector has no direction: the inverse of its norm is beyond float32
_EMPTY = FrozenDict()  # the metadata of every row stored without any: one object, shared
_REALS: TypeAdapter[list[float]] = TypeAdapter(list[Real])  # a `VectorDocument` embedding's values


def _column(values: Iterable[Any] | None, count: int, what: str, default: Any) -> list[Any]:
    """A column of `count` values as a list (`default` repeated when None), refusing another length."""
    if values is None:
        return [default] * count
    if isinstance(values, (str, bytes, Mapping)):
        raise InvalidInputError(f"{what} must be a list with one value per id, got a single {type(values).__name__}")
    found = values.tolist() if isinstance(values, np.ndarray) else list(values)
    if len(found) != count:
        raise InvalidInputError(f"{count} ids but {len(found)} {what}")
    return found


def check_metric(metric: str) -> Metric:
    """Validate a metric name."""
    if metric not in ("cosine", "dot"):
        raise InvalidInputError(f"unknown metric {metric!r}; use 'cosine' or 'dot'")
    return metric  # type: ignore[return-value]


def check_scan(scan: str) -> Scan:
    """Validate a scan precision; "bfloat16" needs SimSIMD (the `memwoven[simd]` extra)."""
    if scan not in ("float32", "bfloat16"):
        raise InvalidInputError(f"unknown scan {scan!r}; use 'float32' or 'bfloat16'")
    if scan == "bfloat16":
        try:
            import simsimd  # noqa: F401
        except ImportError:
            raise ModuleNotFoundError("scan='bfloat16' needs SimSIMD: pip install 'memwoven[simd]'") from None
    return scan  # type: ignore[return-value]


def check_dimension(dimension: int | None) -> int | None:
    """Validate a dimension given at construction (None: fixed by the first store)."""
    if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1):
        raise InvalidInputError(f"dimension must be a positive int, got {dimension!r}")
    return dimension


def check_stored_dimension(stored: int | None, wanted: int | None, what: str) -> None:
    """Refuse to open `what`, a stored collection, with another dimension than the one it was stored with."""
    if stored is not None and wanted is not None and stored != wanted:
        raise DimensionMismatchError(
            f"{what} has dimension {stored}, not {wanted}: open it with dimension={stored} or without a dimension"
        )


def check_search_args(top_k: int, threshold: float | None) -> None:
    """Validate the scalar arguments of `search`."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise InvalidInputError(f"top_k must be a non-negative int, got {top_k!r}")
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or (isinstance(threshold, float) and math.isnan(threshold))  # an int may be too large for a float
    ):
        raise InvalidInputError(f"threshold must be a number, got {threshold!r:.80}")


def _as_threshold(threshold: float | None) -> float | None:
    """A checked threshold as a float (an int beyond floats: an infinity)."""
    if threshold is None:
        return None
    try:
        return float(threshold)
    except OverflowError:
        return math.inf if threshold > 0 else -math.inf


def _float32_floor(value: float) -> np.float32:
    """The largest float32 at most `value`: a float32 score is above `value` exactly when it is above this. (numpy
    compares float32 scores with a float after rounding it to the nearest float32, which may be above it: the
    score 0.10000000149 equalled 0.1 so rounded, and was dropped by the threshold 0.1.)"""
    with np.errstate(over="ignore"):
        floor = np.float32(value)
    below: np.float32 = np.nextafter(floor, np.float32(-np.inf))
    return below if float(floor) > value else floor


def as_matrix(vectors: Any, dimension: int | None, metric: Metric) -> Matrix:
    """Turn embeddings into a (n, dimension) float32 matrix, checking dimension, finiteness and zero norms."""
    return _checked_matrix(vectors, dimension, metric)[0]


def _numbers(vectors: Any) -> npt.NDArray[Any]:
    """Embeddings as an array of real numbers, refusing what `store` refuses: complex numbers, dates, durations,
    records and masked arrays (numpy would drop the imaginary part or the mask); an object array's values are
    validated one by one as a `VectorDocument`'s embedding is."""
    if isinstance(vectors, np.ma.MaskedArray):
        raise InvalidInputError("embeddings cannot be a masked array: fill its masked values first")
    try:
        array = np.asarray(vectors)
    except (TypeError, ValueError) as error:
        raise InvalidInputError(f"embeddings must be equal-length lists of numbers ({error})") from None
    if array.dtype.kind in "cmMVUSb":  # numpy would parse strings and take booleans as 0 and 1
        raise InvalidInputError(f"embeddings must be real numbers, not {array.dtype}")
    if array.dtype.kind != "O":
        return array
    try:
        values = _REALS.validate_python(array.ravel().tolist())
    except ValidationError as error:
        first = error.errors()[0]
        raise InvalidInputError(f"embeddings must be numbers: {first['msg']}, got {first['input']!r:.80}") from None
    return np.array(values, dtype=np.float64).reshape(array.shape)


def _checked_matrix(vectors: Any, dimension: int | None, metric: Metric) -> tuple[Matrix, Squares]:
    """`as_matrix`, and the squared norm of each row it computed to check them."""
    numbers = _numbers(vectors)
    try:
        with np.errstate(over="ignore"):  # values beyond float32 become inf and are rejected below
            matrix = np.asarray(numbers, dtype=np.float32)
    except ValueError as error:  # strings that are not numbers
        raise InvalidInputError(f"embeddings must be equal-length lists of numbers ({error})") from None
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    if matrix.ndim != 2 or matrix.shape[1] == 0:
        raise InvalidInputError("embeddings must be non-empty lists of numbers")
    _check_width(matrix.shape[1], dimension)
    with np.errstate(over="ignore", invalid="ignore"):
        squares = _squared_norms(matrix)
    refused = _refused(matrix, squares, metric)
    if refused is not None:
        raise InvalidInputError(refused[1])
    return matrix, squares


def stored_scales(vectors: Matrix, metric: Metric, corrupt: Callable[[int, str], Exception]) -> Matrix:
    """`inverse_norms` of embeddings read back from storage, checked as `store` checks what it writes (finite,
    norm within range, not zero for cosine): raises `corrupt(row, problem)` for the first row it would refuse."""
    with np.errstate(over="ignore", invalid="ignore"):
        squares = _squared_norms(vectors)
    refused = _refused(vectors, squares, metric)
    if refused is not None:
        raise corrupt(*refused)
    return _inverse(squares)


def _refused(matrix: Matrix, squares: Squares, metric: Metric) -> tuple[int, str] | None:
    """The first row of `matrix` (whose squared norms are `squares`) that `store` refuses, and why; None if none."""
    # |a.b| <= |a| |b| (Cauchy-Schwarz): with every squared norm at most half the float32 range, no score (and no
    # partial sum of one) can overflow to inf or NaN, whatever the metric. NaN and ±inf propagate into their row's
    # sum of squares, which this comparison refuses: no matrix-sized temporary.
    fits = squares <= _MAX_SQUARED_NORM
    if metric == "cosine":
        fits &= squares >= _MIN_NORM**2
    if fits.all():
        return None
    row = int(np.argmin(fits))
    if not np.isfinite(matrix[row]).all():
        return row, "embeddings cannot contain NaN or infinity (or values beyond float32 range)"
    if squares[row] > _MAX_SQUARED_NORM:
        return row, "an embedding's norm is beyond float32 range (over 1.3e19); scale it down"
    return row, "a zero vector (or one of norm under 1e-37) has no direction; cosine similarity is undefined for it"


def _check_width(width: int, dimension: int | None) -> None:
    if dimension is not None and width != dimension:
        raise DimensionMismatchError(f"embedding has dimension {width}, the collection has {dimension}")


def require_utf8(batch: DocumentBatch) -> None:
    """Refuse (`InvalidInputError`) a batch with a document whose content or metadata has no UTF-8 form (a lone
    surrogate): no store can hold one, so none accepts one (VM2). Ids are `check_id`'s, which refuses them too."""
    # the common batch passes at C speed: ASCII contents (else each encoded alone: no joined copy), the metadata
    # encoded a chunk at a time
    filled = [m for m in batch.metadata if m]
    if (all(map(str.isascii, batch.contents)) or all(map(_utf8, batch.contents))) and all(
        _utf8(json.dumps(filled[start : start + _UTF8_CHUNK], ensure_ascii=False))
        for start in range(0, len(filled), _UTF8_CHUNK)
    ):
        return
    for doc_id, content, metadata in zip(batch.ids, batch.contents, batch.metadata):
        if not (_utf8(content) and (not metadata or _utf8(json.dumps(metadata, ensure_ascii=False)))):
            raise InvalidInputError(
                f"document {doc_id[:80]!r}: its content or metadata holds a lone surrogate, which UTF-8 cannot encode"
            )


_UTF8_CHUNK = 4096  # metadata objects encoded at once by `require_utf8`


def _utf8(text: str) -> bool:
    """Whether `text` has a UTF-8 form (no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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


@dataclass(frozen=True, eq=False)
class SearchQuery:
    """The validated arguments of one search: `vector` is a flat float32 query, finite (and not zero for the
    cosine metric), whose dimension `vector_for` checks against the collection's."""

    vector: Matrix
    top_k: int
    threshold: float | None
    filter: Filter | None
    predicate: Predicate | None  # the compiled `filter`

    @classmethod
    def of(
        cls,
        embedding: Sequence[float],
        top_k: int,
        threshold: float | None,
        filter: Filter | None,
        metric: Metric,
        dimension: int | None = None,
    ) -> SearchQuery:
        """Validate the arguments of `search` (the embedding against `dimension` too, if given)."""
        check_search_args(top_k, threshold)
        predicate = compile_filter(filter) if filter is not None else None
        return cls(as_query(embedding, dimension, metric), top_k, _as_threshold(threshold), filter, predicate)

    def vector_for(self, dimension: int | None) -> Matrix:
        """The query vector, refused (`DimensionMismatchError`) if the collection has another dimension."""
        _check_width(len(self.vector), dimension)
        return self.vector


class VectorIndex:
    """An exact, in-process index of documents: contiguous float32 rows, id -> row map, metadata per row
    (with ``scan="bfloat16"``, also a bfloat16 copy of each row's direction, scanned first)."""

    def __init__(self, dimension: int | None = None, metric: Metric = "cosine", *, scan: Scan = "float32") -> None:
        self.dimension = check_dimension(dimension)
        self.metric = check_metric(metric)
        self.scan = check_scan(scan)
        self.ids: list[str] = []
        self.rows: dict[str, int] = {}
        self.contents: list[str] = []
        self.metadata: list[FrozenDict] = []
        self._columns = Columns()  # the metadata column-wise, for filters
        self._matrix: Matrix = _aligned_rows(0, dimension or 0)
        self._inverse_norms: Matrix = np.empty(0, dtype=np.float32)
        self._directions: Halves | None = _aligned_rows(0, dimension or 0, np.uint16) if scan == "bfloat16" else None

    @classmethod
    def of_batch(cls, batch: DocumentBatch, metric: Metric = "cosine") -> VectorIndex:
        """An index holding exactly `batch` (unique ids, rows validated), built in one pass: it takes the batch's
        matrix as its own when that is a writable C-contiguous float32 array (no copy), so a bulk load costs the
        matrix once."""
        vectors = batch.vectors
        index = cls(int(vectors.shape[1]), metric)
        if not batch.ids:
            return index
        if vectors.dtype != np.float32 or not vectors.flags.c_contiguous or not vectors.flags.writeable:
            vectors = np.array(vectors, dtype=np.float32, order="C")
        index.ids, index.contents, index.metadata = list(batch.ids), list(batch.contents), list(batch.metadata)
        index.rows = {doc_id: row for row, doc_id in enumerate(index.ids)}
        index._columns.reserve(len(index.ids), len(index.ids))
        for row, metadata in enumerate(index.metadata):
            index._columns.set(row, metadata)
        index._matrix = vectors
        index._inverse_norms = inverse_norms(vectors) if batch.scales is None else batch.scales
        return index

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def matrix(self) -> Matrix:
        """The live rows (a view, not a copy)."""
        return self._matrix[: len(self.ids)]

    def prepare(self, documents: DocumentsIn, *, stored: bool = False) -> DocumentBatch:
        """Validate documents against this index (ids, dimension, finiteness, `require_utf8`) without changing
        anything: every document, those a later one of the same id replaces too (as `DocumentBatch.of_arrays`).
        `stored`: documents read back from a store, not to be written; one an earlier release stored may hold a lone
        surrogate, which only new writes refuse."""
        docs = coerce_documents(documents)
        if not docs:
            return DocumentBatch([], [], [], np.empty((0, self.dimension or 0), dtype=np.float32))
        latest: dict[str, int] = {}
        for position, doc in enumerate(docs):
            latest[check_id(doc.id, "document id")] = position
        vectors = as_matrix(_stack([doc.embedding for doc in docs]), self.dimension, self.metric)
        if len(latest) < len(docs):
            docs = [docs[position] for position in latest.values()]
            vectors = vectors[list(latest.values())]
        batch = DocumentBatch(
            ids=[doc.id for doc in docs],
            contents=[doc.content for doc in docs],
            metadata=[doc.metadata for doc in docs],  # type: ignore[misc]
            vectors=vectors,
        )
        if not stored:
            require_utf8(batch)
        return batch

    def upsert(self, batch: DocumentBatch) -> None:
        """Insert or replace the batch's documents (already validated by `prepare`)."""
        if not batch.ids:
            return
        _check_width(batch.vectors.shape[1], self.dimension)
        if self.dimension is None:
            self.dimension = batch.vectors.shape[1]
            self._matrix = _aligned_rows(0, self.dimension)
            if self._directions is not None:
                self._directions = _aligned_rows(0, self.dimension, np.uint16)
        first = len(self.ids)
        if not self.rows and batch.positions is not None:  # the batch's id map is this index's: a copy of it
            self.rows = dict(batch.positions)
            appended = True
        elif appended := self.rows.keys().isdisjoint(batch.ids):  # only new ids: appended, no per-row loop
            self.rows.update(zip(batch.ids, range(first, first + len(batch.ids))))
        if appended:
            rows = np.arange(first, first + len(batch.ids))
            self.ids.extend(batch.ids)
            self.contents.extend(batch.contents)
            self.metadata.extend(batch.metadata)
            previous: list[FrozenDict | None] | None = None  # every row new
        else:
            rows, previous = self._place(batch)
        self._reserve(len(self.ids))
        self._columns.reserve(len(self.ids), self._matrix.shape[0])
        if previous is not None or any(batch.metadata):  # rows without metadata, old or new, have no column entry
            for row, metadata, old in zip(rows.tolist(), batch.metadata, previous or itertools.repeat(None)):
                if metadata or old:
                    self._columns.set(row, metadata, old)
        first = int(rows[0])
        if np.array_equal(rows, np.arange(first, first + len(rows))):
            target: slice | npt.NDArray[np.intp] = slice(first, first + len(rows))  # a plain copy, not a scatter
        else:
            target = rows
        scales = batch.scales if batch.scales is not None else inverse_norms(batch.vectors)
        self._matrix[target] = batch.vectors
        self._inverse_norms[target] = scales
        if self._directions is not None:
            self._directions[target] = _bfloat16(batch.vectors * scales[:, None])

    def _place(self, batch: DocumentBatch) -> tuple[Rows, list[FrozenDict | None]]:
        """Give each document of the batch its row (its own if stored, else a new one at the end); return the rows
        and the metadata each replaced (None for a new row)."""
        rows = np.empty(len(batch.ids), dtype=np.intp)
        previous: list[FrozenDict | None] = []
        for position, (doc_id, content, metadata) in enumerate(zip(batch.ids, batch.contents, batch.metadata)):
            row = self.rows.get(doc_id)
            if row is None:
                row = self.rows[doc_id] = len(self.ids)
                self.ids.append(doc_id)
                self.contents.append(content)
                self.metadata.append(metadata)
                previous.append(None)
            else:
                previous.append(self.metadata[row])
                self.contents[row] = content
                self.metadata[row] = metadata
            rows[position] = row
        return rows, previous

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
                self._columns.move(last, row, self.metadata[last], self.metadata[row])
                self.ids[row], self.contents[row], self.metadata[row] = moved, self.contents[last], self.metadata[last]
                self._matrix[row] = self._matrix[last]
                self._inverse_norms[row] = self._inverse_norms[last]
                if self._directions is not None:
                    self._directions[row] = self._directions[last]
                self.rows[moved] = row
            else:
                self._columns.clear_row(row, self.metadata[row])
            self.ids.pop()
            self.contents.pop()
            self.metadata.pop()
            removed += 1
        self._columns.size = len(self.ids)
        return removed

    def clear(self) -> None:
        """Remove every document (the dimension stays fixed)."""
        self.ids, self.rows, self.contents, self.metadata = [], {}, [], []
        self._columns.clear()

    def get(self, ids: Iterable[str]) -> list[VectorDocument]:
        """The stored documents with these ids, in the order asked."""
        return [self.document(row) for row in (self.rows.get(i) for i in check_ids(ids)) if row is not None]

    def document(self, row: int) -> VectorDocument:
        """The document at one row."""
        return _document(self.ids, self.contents, self.metadata, self._matrix, row)

    def search(
        self,
        embedding: Sequence[float],
        *,
        top_k: int = 4,
        threshold: float | None = None,
        filter: Filter | None = None,
    ) -> list[ScoredDocument]:
        """Exact top-k search: scores descending, ties by id, only scores > threshold, metadata matching filter."""
        return self.query(SearchQuery.of(embedding, top_k, threshold, filter, self.metric, self.dimension))

    def query(self, search: SearchQuery) -> list[ScoredDocument]:
        """`search` with its arguments validated already (the query's dimension is checked here)."""
        query = search.vector_for(self.dimension)
        top_k, threshold, predicate = search.top_k, search.threshold, search.predicate
        if top_k == 0 or not self.ids:
            return []
        rows: Rows | None = None  # the rows still in the running, ascending (None: every live row)
        if predicate is not None and search.filter is not None:
            rows = self._selected(search.filter, predicate)
        if self._directions is not None:
            rows = self._prescan(self._directions, query, rows, top_k, threshold)
        picked, scores = best_rows(self.matrix, self._inverse_norms[: len(self.ids)], query, rows, search, self.metric)
        return _hits(self.ids, self.contents, self.metadata, self._matrix, picked, scores, top_k)

    def _selected(self, spec: Filter, predicate: Predicate) -> Rows:
        """The live rows whose metadata matches `spec`, ascending: the columns' mask where it is exact, else the
        predicate run on the rows that mask leaves (or on every row)."""
        mask, exact = self._columns.mask(spec)
        if mask is None:
            metadata = self.metadata
            return np.flatnonzero(np.fromiter((predicate(m) for m in metadata), bool, len(metadata)))
        rows: Rows = np.flatnonzero(mask)
        if not exact:
            metadata = self.metadata
            rows = rows[np.fromiter((predicate(metadata[r]) for r in rows.tolist()), bool, len(rows))]
        return rows

    def _prescan(
        self, directions: Halves, query: Matrix, rows: Rows | None, top_k: int, threshold: float | None
    ) -> Rows:
        """The rows (of `rows`) whose exact score may pass the threshold and reach the top k, by a bfloat16 scan."""
        import simsimd

        live = len(self.ids)
        eligible = np.arange(live) if rows is None else rows
        length = _norm(query)
        if length == 0.0:  # a zero query (dot metric) scores every row 0
            return eligible
        unit = _bfloat16(query / np.float32(length))[None]
        scan = simsimd.cdist(unit, directions[:live], metric="dot", dtype="bf16", out_dtype="float32")
        approx = np.asarray(scan, dtype=np.float32)[0]
        error = _BF16_ROUNDING + (self.dimension or 0) * _BF16_ACCUMULATION + 2**-20  # for unit vectors
        margin = np.full(live, np.float32(error))
        if self.metric == "dot":  # the scores, and so their error, scale with both vectors' lengths
            inverse_norms = self._inverse_norms[:live]
            lengths = np.divide(
                np.float32(length), inverse_norms, out=np.zeros(live, np.float32), where=inverse_norms > 0
            )
            approx *= lengths
            margin *= lengths
        if rows is not None:
            approx, margin = approx[rows], margin[rows]
        upper = approx + margin
        if threshold is not None:
            passing = upper > _float32_floor(threshold)
            eligible, approx, margin, upper = eligible[passing], approx[passing], margin[passing], upper[passing]
        if len(eligible) <= top_k:
            return eligible
        lower = approx - margin
        kth_lower = np.partition(lower, len(lower) - top_k)[len(lower) - top_k]
        contenders: Rows = eligible[upper >= kth_lower]  # every row whose exact score can reach the k-th best one
        return contenders

    def _reserve(self, size: int) -> None:
        capacity = self._matrix.shape[0]
        if size <= capacity:
            return
        # Headroom even on the first allocation, so the write after a bulk load does not copy the whole matrix
        # (the pages past the live rows are never touched, so they cost address space, not memory).
        new_capacity = max(size + size // 4, 2 * capacity, 16)
        matrix = _aligned_rows(new_capacity, self.dimension or 0, live=size)
        matrix[:capacity] = self._matrix
        norms = np.empty(new_capacity, dtype=np.float32)
        norms[:capacity] = self._inverse_norms
        self._matrix, self._inverse_norms = matrix, norms
        if self._directions is not None:
            directions = _aligned_rows(new_capacity, self.dimension or 0, np.uint16, live=size)
            directions[:capacity] = self._directions
            self._directions = directions


class VectorMemoryBase(VectorMemory):
    """The base of the built-in vector memories: `search` and `asearch` written once. The arguments are validated
    into a `SearchQuery`, which the backend answers with `_search_query` (steps) or `_scan` (plain blocking code,
    which `asearch` runs off the event loop)."""

    def _search(
        self,
        embedding: Sequence[float],
        *,
        top_k: int = 4,
        threshold: float | None = None,
        filter: Filter | None = None,
    ) -> Steps[list[ScoredDocument]]:
        """Return the `top_k` documents most similar to `embedding` whose metadata matches `filter`."""
        query = SearchQuery.of(embedding, top_k, threshold, filter, self.metric, self._query_dimension())
        return (yield from self._search_query(query))

    search, asearch = twins(_search)

    def _store_arrays(
        self,
        ids: Iterable[str],
        embeddings: Any,
        *,
        contents: Iterable[str] | None = None,
        metadata: Iterable[Mapping[str, Any]] | None = None,
    ) -> Steps[None]:
        """Insert or replace documents given as columns: `ids`, an (n, d) array of `embeddings` (numpy float32 is
        taken without conversion), and optionally one content string and one metadata object per id.

        The same documents as ``store([{"id": i, "embedding": e, "content": c, "metadata": m}, ...])``, validated
        the same way over whole arrays (the last of repeated ids wins) before anything is written, and written
        through the backend's bulk path where it has one (PostgreSQL ``COPY``, one prepared SQLite statement).
        """
        batch = DocumentBatch.of_arrays(
            ids, embeddings, contents, metadata, dimension=self._query_dimension(), metric=self.metric
        )
        yield from self._store_batch(batch)

    store_arrays, astore_arrays = twins(_store_arrays)

    def _store_batch(self, batch: DocumentBatch) -> Steps[None]:
        """Write a validated batch; by default as documents through `store` (a backend with a faster path for a
        `DocumentBatch` overrides this)."""
        yield Call(self, "store", (batch.documents(),))

    def _query_dimension(self) -> int | None:
        """The dimension a query is checked against before any I/O, if known without any (else None: the
        backend checks it with `SearchQuery.vector_for`)."""
        return None

    def _search_query(self, query: SearchQuery) -> Steps[list[ScoredDocument]]:
        """The hits of a validated query; by default those of `_scan`, run off the event loop by `asearch`."""
        hits: list[ScoredDocument] = yield Call(self, "_scan", (query,))
        return hits

    def _scan(self, query: SearchQuery) -> list[ScoredDocument]:
        """The hits of a validated query, found by plain (blocking) code: a backend overrides this or
        `_search_query`."""
        raise NotImplementedError

    _ascan = async_twin(_scan)


def best_rows(
    matrix: Matrix, inverse_norms: Matrix, query: Matrix, rows: Rows | None, search: SearchQuery, metric: Metric
) -> tuple[Rows, Matrix]:
    """The rows of `matrix` (of `rows`, ascending; every row if None) that make the search's top k, with their
    exact scores: only scores above its threshold, and every row tied with the k-th score (for the id tie-break)."""
    scores = _scores(matrix, inverse_norms, query, rows, metric)
    if search.threshold is not None:
        above = np.flatnonzero(scores > _float32_floor(search.threshold))
        rows, scores = (above if rows is None else rows[above]), scores[above]
    top = _top_rows(scores, search.top_k)
    return (top if rows is None else rows[top]), scores[top]


def rank(batch: DocumentBatch, search: SearchQuery, metric: Metric) -> list[ScoredDocument]:
    """The hits of `search` among a few documents (unique ids), scored and ordered exactly as a `VectorIndex`
    holding them would: the server modes' rescoring of the rows their database found, without building an index."""
    query = search.vector_for(int(batch.vectors.shape[1]))
    if search.top_k == 0 or not batch.ids:
        return []
    rows: Rows | None = None
    if search.predicate is not None and search.filter is not None:
        predicate = search.predicate
        rows = np.flatnonzero([predicate(metadata) for metadata in batch.metadata])
    vectors = batch.vectors
    scales = inverse_norms(vectors) if batch.scales is None else batch.scales
    picked, scores = best_rows(vectors, scales, query, rows, search, metric)
    return _hits(batch.ids, batch.contents, batch.metadata, vectors, picked, scores, search.top_k)


def _hits(
    ids: Sequence[str],
    contents: Sequence[str],
    metadata: Sequence[FrozenDict],
    matrix: Matrix,
    picked: Rows,
    scores: Matrix,
    top_k: int,
) -> list[ScoredDocument]:
    """The top `top_k` of the rows `picked` (with their `scores`) as results: by score, ties by id."""
    ranked = sorted(zip(picked.tolist(), scores.tolist()), key=lambda hit: (-hit[1], ids[hit[0]]))[:top_k]
    return [
        ScoredDocument.model_construct(document=_document(ids, contents, metadata, matrix, row), score=score)
        for row, score in ranked
    ]


def _document(
    ids: Sequence[str], contents: Sequence[str], metadata: Sequence[FrozenDict], matrix: Matrix, row: int
) -> VectorDocument:
    return VectorDocument.model_construct(
        id=ids[row], content=contents[row], embedding=FrozenList(matrix[row].tolist()), metadata=metadata[row]
    )


def exact_scores(vectors: Matrix, query: Matrix, metric: Metric) -> Matrix:
    """The score of each row of `vectors` for `query`, exactly as an index computes it (for backends rescoring
    what their server found: its own arithmetic may score identical vectors apart)."""
    return _scores(vectors, inverse_norms(vectors), query, None, metric)


def rounding_margin(metric: Metric, dimension: int, query_norm: float, max_norm: float) -> float:
    """A bound on |a server's score - `exact_scores`| of one row, for a query of norm `query_norm` and rows of norm
    at most `max_norm` (float32 sums of `dimension` products, each side's rounding error bounded by
    dimension * 2**-24 of the product of the norms, doubled for safety)."""
    relative = 8.0 * (dimension + 2) * 2.0**-24 + 1e-6
    if metric == "cosine":
        return relative
    return relative * max(query_norm, 1e-30) * max(max_norm, 1e-30) + 1e-30


def _scores(matrix: Matrix, inverse_norms: Matrix, query: Matrix, rows: Rows | None, metric: Metric) -> Matrix:
    """Exact float32 scores of `rows` of `matrix` (every row if None), in that order.

    Each row's score is summed the same way wherever the row lies and however many rows are scored (einsum's own
    loop, as fast here as BLAS): BLAS sums the rows left over at the end of its blocks in another order, so
    identical embeddings scored differently (no tie, hence no tie-break by id) and a row's score changed with a
    filter that gathered it."""
    scores: Matrix
    if metric == "cosine":
        query, length = _cosine_scaled(query)
    if rows is None or 4 * len(rows) > len(matrix):  # gathering most of the rows costs more than scanning them all
        scores = np.einsum("ij,j->i", matrix, query)
        if rows is not None:
            scores, inverse_norms = scores[rows], inverse_norms[rows]
    else:
        scores, inverse_norms = np.einsum("ij,j->i", matrix[rows], query), inverse_norms[rows]
    if metric == "cosine":
        scores *= inverse_norms / np.float32(length)
        np.clip(scores, -1.0, 1.0, out=scores)
    return scores


def store_columns(
    memory: VectorMemory,
    ids: Sequence[str],
    embeddings: Any,
    *,
    contents: Sequence[str] | None = None,
    metadata: Sequence[Mapping[str, Any]] | None = None,
) -> Steps[None]:
    """The steps of storing documents given as columns into any `VectorMemory`: by `store_arrays` on the built-in
    backends, else as documents through `store` (for the adapters, which take any `VectorMemory`)."""
    if isinstance(memory, VectorMemoryBase):
        yield Call(memory, "store_arrays", (ids, embeddings), {"contents": contents, "metadata": metadata})
        return
    columns = zip(
        ids,
        _column(embeddings, len(ids), "embeddings", None),
        _column(contents, len(ids), "contents", ""),
        _column(metadata, len(ids), "metadata", _EMPTY),
    )
    documents = [{"id": i, "embedding": e, "content": c, "metadata": m} for i, e, c, m in columns]
    yield Call(memory, "store", (documents,))


def _aligned_rows(rows: int, dimension: int, dtype: type[np.generic] = np.float32, *, live: int = 0) -> Any:
    """An uninitialised C-contiguous (rows, dimension) matrix starting on a 64-byte (cache line) boundary, whose
    first `live` rows are about to be written (a large matrix has their pages faulted in at once)."""
    row_bytes = dimension * np.dtype(dtype).itemsize
    size = rows * row_bytes
    if size >= _MAPPED_BYTES:
        mapping = mmap.mmap(-1, size)
        if _POPULATE_WRITE is not None and live > 0:
            with contextlib.suppress(OSError):  # a kernel without it: the pages are faulted in as written
                mapping.madvise(_POPULATE_WRITE, 0, min(live * row_bytes, size))
        return np.frombuffer(mapping, dtype=dtype).reshape(rows, dimension)
    buffer = np.empty(size + _ALIGNMENT, dtype=np.uint8)
    start = -buffer.ctypes.data % _ALIGNMENT
    return buffer[start : start + size].view(dtype).reshape(rows, dimension)


def _bfloat16(values: Matrix) -> Halves:
    """float32 values rounded to bfloat16 (to nearest, ties to even), as raw 16-bit patterns (finite input)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def inverse_norms(vectors: Matrix) -> Matrix:
    """1 / the norm of each row (0 for a zero row), as float32."""
    return _inverse(_squared_norms(vectors))


def _squared_norms(vectors: Matrix) -> Squares:
    """The squared norm of each row, as float64: summed in float32 (fast), again in float64 for the rows whose
    float32 sum is small enough to have lost precision or underflowed (1e-23 squared is below float32's range)."""
    squares: Squares = np.einsum("ij,ij->i", vectors, vectors, dtype=np.float32).astype(np.float64)
    small = np.flatnonzero(squares < _SMALL_SQUARE)
    if len(small):
        rows = vectors[small].astype(np.float64)
        squares[small] = np.einsum("ij,ij->i", rows, rows)
    return squares


def cosine_query(query: Matrix) -> Matrix:
    """A cosine query scaled by a power of two (exactly: the same direction, every score the same) to a norm in
    [0.5, 1): for a short query and row, 1 / (|row| |query|) overflowed float32 to inf while their float32 dot
    underflowed (a NaN score) or lost its digits (±1); a database or Qdrant given it has the same trouble."""
    return _cosine_scaled(query)[0]


def _cosine_scaled(query: Matrix) -> tuple[Matrix, float]:
    """`cosine_query(query)` and its norm."""
    length, exponent = math.frexp(_norm(query))
    return np.ldexp(query, -exponent).astype(query.dtype, copy=False), length


def _norm(vector: Matrix) -> float:
    """The norm of one vector, summed in float64 (in float32 the squares of a norm under 1e-19 underflow)."""
    return float(np.linalg.norm(vector.astype(np.float64)))


def _inverse(squares: Squares) -> Matrix:
    """1 / the square root of each squared norm, as float32 (0 for a norm under `_MIN_NORM`: no direction)."""
    norms = np.sqrt(squares)
    with np.errstate(divide="ignore"):
        return np.where(norms >= _MIN_NORM, 1.0 / norms, 0.0).astype(np.float32)


def _top_rows(scores: Matrix, top_k: int) -> npt.NDArray[np.intp]:
    """Positions of the top_k scores, plus any positions tied with the k-th score (for the id tie-break)."""
    if top_k >= len(scores):
        return np.arange(len(scores))
    part = np.argpartition(-scores, top_k - 1)[:top_k]
    return np.flatnonzero(scores >= scores[part].min())
