"""`FileVectorMemory`: one `.npz` file per vector collection (format in `memwoven.backends.file`)."""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

import numpy as np

from memwoven.backends.file._fs import (
    DEFAULT_LOCK_TIMEOUT,
    FORMAT,
    CancellableThreads,
    StatKey,
    atomic_write,
    check_lock_timeout,
    dumps,
    is_int,
    loads,
    stat_key,
    write_lock,
)
from memwoven.contracts import CollectionInfo, DocumentsIn, Metric, check_id, check_ids, is_collection_name
from memwoven.errors import (
    CorruptMemoryError,
    InvalidInputError,
)
from memwoven.models import (
    ScoredDocument,
    VectorDocument,
    freeze_json,
)
from memwoven.vector_index import (
    DocumentBatch,
    SearchQuery,
    VectorIndex,
    VectorMemoryBase,
    as_matrix,
    check_dimension,
    check_metric,
    check_stored_dimension,
)

__all__ = ["FileVectorMemory", "list_collections"]

# Vector memory ---------------------------------------------------------------------------------------------------

_MEMBERS = {"header", "embeddings", "documents"}


def list_collections(directory: str | os.PathLike[str]) -> list[CollectionInfo]:
    """The vector collections stored in `directory` (its `<collection>.npz` files), sorted by name.

    Reads each file's header; a file that cannot be decoded raises `CorruptMemoryError`.
    """
    root = Path(directory)
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.glob("*.npz")):
        if not is_collection_name(path.stem):
            continue
        try:
            header = _read_collection(path.read_bytes())[0]
        except FileNotFoundError:  # deleted meanwhile
            continue
        except Exception as error:  # noqa: BLE001 - any failure to decode is damage, as in `FileVectorMemory`
            raise CorruptMemoryError(f"vector collection {str(path)!r} is corrupt: {error}") from None
        found.append(CollectionInfo(path.stem, header["metric"], header["dimension"]))
    return found


def _encode_collection(index: VectorIndex, stream: IO[bytes]) -> None:
    """Write the collection as an uncompressed `.npz`: JSON header, float32 embeddings, documents JSON."""
    header = dumps({"format": FORMAT, "dimension": index.dimension, "metric": index.metric, "count": len(index)})
    documents = dumps(
        [
            {"id": doc_id, "content": content, "metadata": metadata}
            for doc_id, content, metadata in zip(index.ids, index.contents, index.metadata)
        ]
    )
    np.savez(
        stream,
        header=np.frombuffer(header, dtype=np.uint8),
        embeddings=np.ascontiguousarray(index.matrix, dtype=np.float32),
        documents=np.frombuffer(documents, dtype=np.uint8),
    )


def _read_collection(data: bytes) -> tuple[dict[str, Any], Any, Any]:
    """Open the `.npz` bytes: (header, embeddings array, documents JSON). Raises anything on damage."""
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        if set(archive.files) != _MEMBERS:
            raise ValueError(f"expected the arrays {sorted(_MEMBERS)}, found {sorted(archive.files)}")
        header_bytes, embeddings, documents_bytes = archive["header"], archive["embeddings"], archive["documents"]
    for blob in (header_bytes, documents_bytes):
        if blob.dtype != np.uint8 or blob.ndim != 1:
            raise ValueError("the JSON members must be flat uint8 arrays")
    header = loads(header_bytes.tobytes())
    if not isinstance(header, dict) or header.keys() != {"format", "dimension", "metric", "count"}:
        raise ValueError("the header does not have the expected fields")
    if header["format"] != FORMAT or type(header["format"]) is not int:
        raise ValueError(f"unknown format {header['format']!r}")
    dimension, count = header["dimension"], header["count"]
    if not (dimension is None or is_int(dimension, 1)) or not is_int(count, 0) or (count and dimension is None):
        raise ValueError("the header has a bad dimension or count")
    if header["metric"] not in ("cosine", "dot"):
        raise ValueError(f"unknown metric {header['metric']!r}")
    if embeddings.dtype != np.float32 or embeddings.shape != (count, dimension or 0):
        raise ValueError(f"embeddings are {embeddings.dtype}{embeddings.shape}, expected float32({count}, {dimension})")
    return header, embeddings, loads(documents_bytes.tobytes())


def _build_index(header: dict[str, Any], embeddings: Any, documents: Any) -> VectorIndex:
    """Rebuild the index from decoded file contents, checking every document. Raises anything on damage."""
    metric = check_metric(header["metric"])
    index = VectorIndex(header["dimension"], metric)
    if not isinstance(documents, list) or len(documents) != header["count"]:
        raise ValueError("the documents do not match the header's count")
    ids, contents, metadata = [], [], []
    for item in documents:
        if not isinstance(item, dict) or item.keys() != {"id", "content", "metadata"}:
            raise ValueError("a document does not have the fields id, content, metadata")
        if not isinstance(item["content"], str) or not isinstance(item["metadata"], dict):
            raise ValueError(f"document {item['id']!r} has a bad content or metadata")
        ids.append(check_id(item["id"], "document id"))
        contents.append(item["content"])
        metadata.append(freeze_json(item["metadata"]))
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate document ids")
    if ids:
        vectors = as_matrix(embeddings, header["dimension"], metric)  # finite, non-zero for cosine
        index.upsert(DocumentBatch(ids=ids, contents=contents, metadata=metadata, vectors=vectors))
    return index


class FileVectorMemory(CancellableThreads, VectorMemoryBase):
    """One vector collection in one crash-safe `.npz` file, searched in memory with an exact `VectorIndex`.

    Every operation first checks the file's stat and reloads it if another object or process changed it. The
    dimension and metric are stored in the file: reopening with another dimension raises
    `DimensionMismatchError`, with another metric `InvalidInputError`. Writers lock the file (see
    `FileChatMemory` for `lock_timeout`) and rewrite it whole, so each write costs O(collection size).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        dimension: int | None = None,
        metric: Metric = "cosine",
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
    ) -> None:
        lock_timeout = check_lock_timeout(lock_timeout)
        self.path = Path(path).absolute()
        self._requested = check_dimension(dimension)
        self.metric = check_metric(metric)
        self.lock_timeout = lock_timeout
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._guard = threading.RLock()
        self._index = VectorIndex(self._requested, self.metric)
        self._key: StatKey | None = None
        self._stored_dimension: int | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise InvalidInputError(f"{self.path.parent} is not a directory") from None
        with self._guard:
            if self._unpersisted():  # checked first without the lock, whose file only writers make
                with self._writing():
                    if self._unpersisted():
                        self._rewrite(lambda index: None)  # persist the collection with its dimension and metric

    def __repr__(self) -> str:
        return f"FileVectorMemory({str(self.path)!r}, dimension={self._index.dimension}, metric={self.metric!r})"

    @property
    def dimension(self) -> int | None:
        """The embedding dimension (None until the first store, by any object, fixes it)."""
        with self._guard:
            self._refresh()
            return self._index.dimension

    def store(self, documents: DocumentsIn) -> None:
        """Insert or replace documents by id; the whole batch is validated before the file is rewritten."""
        with self._guard, self._writing():
            self._refresh()
            batch = self._index.prepare(documents)
            if batch.ids:
                self._rewrite(lambda index: index.upsert(batch))

    def _scan(self, query: SearchQuery) -> list[ScoredDocument]:
        """Exact top-k search over the current contents of the file."""
        with self._guard:
            self._refresh()
            return self._index.query(query)

    def get(self, ids: Iterable[str]) -> list[VectorDocument]:
        """Documents by id, in the order asked."""
        with self._guard:
            self._refresh()
            return self._index.get(ids)

    def delete(self, ids: Iterable[str]) -> None:
        """Delete documents by id; unknown ids are ignored (and nothing is written)."""
        wanted = check_ids(ids)
        with self._guard, self._writing():
            self._refresh()
            if any(doc_id in self._index.rows for doc_id in wanted):
                self._rewrite(lambda index: index.remove(wanted))

    def count(self) -> int:
        """The number of documents."""
        with self._guard:
            self._refresh()
            return len(self._index)

    def clear(self) -> None:
        """Delete every document (the dimension and metric stay)."""
        with self._guard, self._writing():
            self._refresh()
            if len(self._index):
                self._rewrite(lambda index: index.clear())

    def ids(self) -> list[str]:
        """The ids of every document, sorted."""
        with self._guard:
            self._refresh()
            return sorted(self._index.ids)

    def _unpersisted(self) -> bool:
        """Whether the file lacks the collection or the dimension asked for (caller holds `_guard`)."""
        return self._refresh() is None or (self._requested is not None and self._stored_dimension is None)

    def _writing(self) -> AbstractContextManager[None]:
        return write_lock(self._lock_path, self.lock_timeout, f"vector collection {str(self.path)!r}")

    def _refresh(self) -> StatKey | None:
        """Reload the file if it changed since it was last read or written (caller holds `_guard`).

        Returns the stat key of the file now loaded, None if there is no file.
        """
        try:
            if stat_key(os.stat(self.path)) == self._key:
                return self._key
            with open(self.path, "rb") as stream:
                key = stat_key(os.fstat(stream.fileno()))
                data = stream.read()
        except FileNotFoundError:  # deleted behind our back: an empty collection, recreated by the next write
            self._index, self._key, self._stored_dimension = VectorIndex(self._requested, self.metric), None, None
            return None
        self._index = self._decode(data)
        self._key = key
        return key

    def _decode(self, data: bytes) -> VectorIndex:
        try:
            header, embeddings, documents = _read_collection(data)
        except Exception as error:  # noqa: BLE001 - any failure to decode the bytes is damage, whatever raised it
            raise CorruptMemoryError(f"vector collection {str(self.path)!r} is corrupt: {error}") from None
        if header["metric"] != self.metric:
            raise InvalidInputError(f"{self.path} holds a {header['metric']!r} collection, not {self.metric!r}")
        stored = header["dimension"]
        check_stored_dimension(stored, self._requested, f"vector collection {str(self.path)!r}")
        try:
            index = _build_index(header, embeddings, documents)
        except Exception as error:  # noqa: BLE001 - likewise for what the bytes decode to
            raise CorruptMemoryError(f"vector collection {str(self.path)!r} is corrupt: {error}") from None
        self._stored_dimension = stored
        if index.dimension is None and self._requested is not None:
            index = VectorIndex(self._requested, self.metric)
        return index

    def _rewrite(self, change: Callable[[VectorIndex], object]) -> None:
        """Apply `change` to the index and write it (caller holds the write lock and has just refreshed)."""
        try:
            change(self._index)
            floor = self._key.mtime_ns if self._key is not None else None
            self._key = atomic_write(
                self.path, lambda stream: _encode_collection(self._index, stream), mtime_after=floor
            )
            self._stored_dimension = self._index.dimension
        except BaseException:  # the index may be ahead of the file: reload it on next use
            self._index, self._key = VectorIndex(self._requested, self.metric), None
            raise
