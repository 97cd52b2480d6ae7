"""Vector collections on Qdrant: a server (`qdrant://host:6333`), embedded on disk (`qdrant+local:///path`) or in
memory (`qdrant+memory://`), all through one class.

Any string id maps deterministically to a UUID point id (uuid5 of a fixed namespace and the id); the payload keeps
``{"id", "content", "metadata", "norm"}`` (the embedding's norm): Qdrant stores cosine vectors normalized (local mode
reloads them from disk as given), so the original embedding is rebuilt as v / |v| times the norm (to float32
precision); a dot search bounds its rounding with the largest norm.

Filters are translated into Qdrant filters that are implied by the memwoven filter (never stricter), then every
hit is checked exactly with `memwoven.filters`: Qdrant's conditions match array elements and compare numbers across
int/float, which the core language does not, so a translation alone cannot be exact. Search over-fetches until the
top k (and every hit tied with the k-th) is settled, then sorts by score descending and id. The threshold is
exclusive, checked after Qdrant's inclusive `score_threshold`. Qdrant's float32 scores lie within `rounding_margin`
of memwoven's, which for dot scales with the largest stored norm (`_max_norm_steps`), so both the fetch-more rule
and the threshold given to Qdrant allow for it.

Each operation is a generator yielding I/O-free `_Call`s (a client method and its arguments), so one body serves
`_run` (the sync `QdrantClient`) and `_arun` (a native `AsyncQdrantClient`): `twins` makes each public method and its
async twin from it. Local mode has no async client of its own: the embedded engine is plain Python holding an
exclusive lock on its directory, so an `AsyncQdrantClient` could neither open the same path nor avoid blocking the
event loop. The async twins therefore run the sync steps in a worker thread (`asyncio.to_thread`) over the one local
client, whose calls are serialized by a lock.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import itertools
import math
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar
from urllib.parse import unquote, urlsplit

import httpx
import numpy as np
from qdrant_client import AsyncQdrantClient, QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
from qdrant_client.local.async_qdrant_local import AsyncQdrantLocal
from qdrant_client.local.qdrant_local import QdrantLocal

from memwoven._redact import redact_url
from memwoven._steps import Steps, aexecute, arun, execute, run, twins
from memwoven.backends._qdrant_filters import SAFE_KEY, as_filter, translate_filter
from memwoven.contracts import CollectionInfo, DocumentsIn, Metric, check_collection, check_ids, is_collection_name
from memwoven.errors import BackendUnavailableError, CorruptMemoryError, DimensionMismatchError, InvalidInputError
from memwoven.models import FrozenList, ScoredDocument, VectorDocument, coerce_documents, freeze_json, thaw
from memwoven.vector_index import (
    DocumentBatch,
    SearchQuery,
    VectorIndex,
    VectorMemoryBase,
    check_dimension,
    check_metric,
    check_stored_dimension,
    cosine_query,
    exact_scores,
    rounding_margin,
)

__all__ = ["QdrantVectorMemory", "list_collections", "point_id", "translate_filter"]

_T = TypeVar("_T")
_NAMESPACE = uuid.UUID("8a0f6f4e-3c55-5a8e-9a4b-6d656d776561")  # fixed forever: point ids depend on it
_DISTANCES: dict[str, models.Distance] = {"cosine": models.Distance.COSINE, "dot": models.Distance.DOT}
_LOCAL_LOCKS: weakref.WeakKeyDictionary[QdrantClient, threading.Lock] = weakref.WeakKeyDictionary()
_LOCAL_LOCKS_GUARD = threading.Lock()
# the points whose payload holds no norm Qdrant can order by (none, or not a number >= 0)
_UNSIZED = models.Filter(must_not=[models.FieldCondition(key="norm", range=models.Range(gte=0.0))])


def point_id(doc_id: str) -> str:
    """The Qdrant point id (a UUID string) that stands for a memwoven document id: ``str(uuid5(namespace, id))``.

    Computed without building a `uuid.UUID`, which costs three times as much (it shows in bulk upserts).
    """
    raw = bytearray(hashlib.sha1(_NAMESPACE.bytes + doc_id.encode("utf-8"), usedforsecurity=False).digest()[:16])
    raw[6] = raw[6] & 0x0F | 0x50  # version 5
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


@dataclass(frozen=True)
class _Call:
    """Call one method of the Qdrant client (sync and async clients share the method names)."""

    method: str
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class _Engine:
    """Read the dense vectors of a collection of an embedded (local-mode) client: `largest_norm` of them, or None
    for a server (run under the local-mode lock, as a `_Call` is)."""

    collection: str


class QdrantVectorMemory(VectorMemoryBase):
    """One vector collection on Qdrant: a `qdrant://`, `qdrants://`, `qdrant+local://` or `qdrant+memory://` URL,
    or a `QdrantClient` you built (optionally with a matching `AsyncQdrantClient`; clients you pass stay yours to
    close).

    The collection is created with the memory's metric and dimension by its first use once the dimension is known
    (given, or by the first store); given a dimension, construction looks the collection up (creating nothing) and
    raises if it exists with another dimension or metric. `batch_size`
    points go in one upsert. `exact=True` makes server searches scan instead of using HNSW (local mode always scans).
    `client_options` go to the clients built from a URL (e.g. `api_key`, `timeout`, `prefer_grpc`).
    """

    def __init__(
        self,
        location_or_client: str | QdrantClient,
        *,
        collection: str = "default",
        dimension: int | None = None,
        metric: Metric = "cosine",
        async_client: AsyncQdrantClient | None = None,
        batch_size: int = 256,
        exact: bool = False,
        **client_options: Any,
    ) -> None:
        check_collection(collection)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive int, got {batch_size!r}")
        self._dimension = check_dimension(dimension)
        self.metric = check_metric(metric)
        self.collection = collection
        self._batch_size = batch_size
        self._search_params = models.SearchParams(exact=True) if exact else None
        self._ready = False  # the collection is known to exist with this memory's dimension and metric
        self._norms_ordered = False  # Qdrant can order the points by their payload's norm (see `_max_norm_steps`)
        if isinstance(location_or_client, str):
            self._url = redact_url(location_or_client)
            self.client, self._async_client = _clients_from_location(location_or_client, client_options)
            self._owns_clients = True
        else:
            if client_options:
                raise InvalidInputError(
                    f"client options ({', '.join(sorted(client_options))}) are for a client built from a URL; "
                    "configure the QdrantClient you pass instead"
                )
            self._url = repr(location_or_client)
            self.client, self._async_client = location_or_client, async_client
            self._owns_clients = False
        self._local_lock = _local_lock(self.client)
        if self._dimension is not None:
            self._check_at_open(lambda: self._run(self._ensure_steps(None)))

    def __repr__(self) -> str:
        return f"QdrantVectorMemory({self._url!r}, collection={self.collection!r})"

    @property
    def dimension(self) -> int | None:
        """The embedding dimension: given, fixed by the first store, or read from the collection."""
        return self._dimension

    # The collection -----------------------------------------------------------------------------------------

    def _ensure_steps(self, create_with: int | None) -> Steps[bool]:
        """Check the collection's dimension and metric (creating it with `create_with` if given); False if absent."""
        if self._ready:
            return True
        name = self.collection
        if not (yield _Call("collection_exists", {"collection_name": name})):
            if create_with is None:
                return False
            vectors = models.VectorParams(size=create_with, distance=_DISTANCES[self.metric])
            try:
                yield _Call("create_collection", {"collection_name": name, "vectors_config": vectors})
            except Exception:
                if not (yield _Call("collection_exists", {"collection_name": name})):
                    raise
            else:
                if self.metric == "dot" and self._local_lock is None:  # a server orders by indexed fields only
                    index = {"field_name": "norm", "field_schema": models.PayloadSchemaType.FLOAT, "wait": True}
                    yield _Call("create_payload_index", {"collection_name": name, **index})
        info = yield _Call("get_collection", {"collection_name": name})
        params = info.config.params.vectors
        if not isinstance(params, models.VectorParams):
            raise InvalidInputError(f"collection {name!r} has named vectors; memwoven uses one unnamed vector")
        if (refusal := _foreign(params)) is not None:
            raise InvalidInputError(f"collection {name!r} {refusal}")
        if params.distance != _DISTANCES[self.metric]:
            raise InvalidInputError(f"collection {name!r} uses the {params.distance.value} distance, not {self.metric}")
        check_stored_dimension(params.size, self._dimension, f"collection {name!r}")
        self._dimension = params.size
        norm_index = (info.payload_schema or {}).get("norm")
        self._norms_ordered = self._local_lock is not None or (
            norm_index is not None and norm_index.data_type == models.PayloadSchemaType.FLOAT
        )
        self._ready = True
        return True

    def _create_payload_index(self, key: str, field_type: str | models.PayloadSchemaType = "keyword") -> Steps[None]:
        """Index the metadata field `key` (`keyword`, `integer`, `float`, `bool`, ...) to speed up its filters.

        Only the server uses payload indexes; local mode accepts and ignores them.
        """
        if not isinstance(key, str) or not SAFE_KEY.fullmatch(key):
            raise InvalidInputError(f"payload indexes need a metadata key matching {SAFE_KEY.pattern}, got {key!r}")
        try:
            schema = models.PayloadSchemaType(field_type)
        except ValueError:
            choices = ", ".join(t.value for t in models.PayloadSchemaType)
            raise InvalidInputError(f"unknown payload index type {field_type!r}; use one of: {choices}") from None
        if not (yield from self._ensure_steps(self._dimension)):
            raise InvalidInputError(f"collection {self.collection!r} does not exist yet: store documents first")
        yield _Call(
            "create_payload_index",
            {"collection_name": self.collection, "field_name": f"metadata.{key}", "field_schema": schema, "wait": True},
        )

    create_payload_index, acreate_payload_index = twins(_create_payload_index)

    # The contract, as I/O-free steps ------------------------------------------------------------------------

    def _store(self, documents: DocumentsIn) -> Steps[None]:
        """Insert or replace documents by id, `batch_size` points per upsert."""
        batch = self._prepare(documents)  # validated before anything is written
        if not batch.ids:
            return
        dimension = batch.vectors.shape[1]
        yield from self._ensure_steps(dimension)
        if dimension != self._dimension:
            raise DimensionMismatchError(
                f"embedding has dimension {dimension}, the collection {self.collection!r} has {self._dimension}"
            )
        count = len(batch.ids)
        # Qdrant keeps cosine vectors normalized: the norm rebuilds them; a dot search bounds its rounding with it
        norms = np.linalg.norm(batch.vectors.astype(np.float64), axis=1).tolist()
        for start in range(0, count, self._batch_size):
            end = min(start + self._batch_size, count)
            points = []
            # the float32 rows go out as the floats Qdrant stores; the points are built unvalidated, everything in
            # them having been checked; the metadata thawed to plain dicts and lists, which the client serializes
            # or deep-copies
            for row, (doc_id, vector) in enumerate(zip(batch.ids[start:end], batch.vectors[start:end].tolist()), start):
                payload = {
                    "id": doc_id,
                    "content": batch.contents[row],
                    "metadata": thaw(batch.metadata[row]),
                    "norm": norms[row],
                }
                points.append(models.PointStruct.model_construct(id=point_id(doc_id), vector=vector, payload=payload))
            yield _Call("upsert", {"collection_name": self.collection, "points": points, "wait": True})

    store, astore = twins(_store)

    def _prepare(self, documents: DocumentsIn) -> DocumentBatch:
        """Every document validated into one compact batch (ids, texts, metadata, float32 rows).

        An iterator (a generator) is read `batch_size` documents at a time, so each document, its embedding a list
        of Python floats, is garbage once read unless the caller holds it: a large generator never sits in memory
        whole, and the collector does not walk all of it on each pass while the rest is read and written.
        """
        index = VectorIndex(self._dimension, self.metric)
        if not isinstance(documents, Iterator):
            return index.prepare(documents)
        parts: list[DocumentBatch] = []
        read = 0
        while chunk := list(itertools.islice(documents, self._batch_size)):
            parts.append(index.prepare(coerce_documents(chunk, start=read)))  # errors name whole-input positions
            read += len(chunk)
            if parts[0].vectors.shape[1] != parts[-1].vectors.shape[1]:
                raise DimensionMismatchError("the embeddings of one batch have different dimensions")
        return _merge(parts) if parts else index.prepare([])

    def _query_dimension(self) -> int | None:
        return self._dimension

    def _search_query(self, query: SearchQuery) -> Steps[list[ScoredDocument]]:
        """The top-k documents: Qdrant's search, with exact filter semantics and ties broken by id."""
        top_k, threshold, filter, predicate = query.top_k, query.threshold, query.filter, query.predicate
        if top_k == 0 or not (yield from self._ensure_steps(self._dimension)):
            return []
        vector = query.vector_for(self._dimension)  # the collection's dimension is known now
        if self.metric == "cosine":
            vector = cosine_query(vector)
        prefilter = translate_filter(filter) if filter is not None else True
        if prefilter is False:
            return []
        # Qdrant's own float32 scores lie within `slack` of the exact ones (for dot, in proportion to the norms)
        max_norm = (yield from self._max_norm_steps()) if self.metric == "dot" else 1.0
        slack = rounding_margin(self.metric, len(vector), float(np.linalg.norm(vector.astype(np.float64))), max_norm)
        request: dict[str, Any] = {
            "collection_name": self.collection,
            "query": vector.tolist(),
            "query_filter": None if prefilter is True else as_filter(prefilter),
            "score_threshold": None if threshold is None else float(threshold - slack),  # Qdrant's is inclusive
            "search_params": self._search_params,
            "with_payload": True,
            "with_vectors": True,
        }
        limit = top_k + 1 if predicate is None else top_k + 8  # one more than asked shows whether the k-th ties
        while True:
            points = (yield _Call("query_points", {**request, "limit": limit})).points
            documents = [self._document(p) for p in points]
            # rescored as an index scores (Qdrant's arithmetic may score identical vectors apart: no tie)
            stored = np.asarray([p.vector for p in points], dtype=np.float32).reshape(len(points), len(vector))
            scores = exact_scores(stored, vector, self.metric).tolist()
            hits = [
                (score, doc)
                for score, doc in zip(scores, documents)
                if (threshold is None or score > threshold) and (predicate is None or predicate(doc.metadata))
            ]
            hits.sort(key=lambda hit: (-hit[0], hit[1].id))
            if len(points) < limit:  # nothing more to fetch
                break
            lowest = self._score(min(p.score for p in points))  # Qdrant's, a little off the exact scores
            if len(hits) >= top_k and lowest + slack < hits[top_k - 1][0]:
                break  # nothing unseen can beat or tie the k-th hit
            limit *= 4
        return [ScoredDocument.model_construct(document=doc, score=score) for score, doc in hits[:top_k]]

    def _max_norm_steps(self) -> Steps[float]:
        """An upper bound on the embedding norms in the collection: in local mode, from the engine's own vectors;
        on a server, the largest payload `norm`, read by ordering on it where the server can (a float index on
        `norm`), and the norm of each point without a usable one (written before memwoven stored it for dot) or,
        if the server cannot order, of every point, read whole."""
        engine = yield _Engine(self.collection)
        if engine is not None:
            return float(engine)
        largest, unsized = 0.0, None
        if self._norms_ordered:
            order = models.OrderBy(key="norm", direction=models.Direction.DESC)
            request = {"collection_name": self.collection, "limit": 1, "order_by": order, "with_payload": False}
            top, _ = yield _Call("scroll", request)
            largest = float(top[0].order_value) if top else 0.0
            unsized = _UNSIZED
        offset: Any = None
        while True:
            request = {"collection_name": self.collection, "scroll_filter": unsized, "limit": 1000, "offset": offset}
            points, offset = yield _Call("scroll", {**request, "with_payload": False, "with_vectors": True})
            for point in points:
                if not isinstance(point.vector, list):
                    raise CorruptMemoryError(f"collection {self.collection!r}: point {point.id} has no vector")
                largest = max(largest, float(np.linalg.norm(np.asarray(point.vector, dtype=np.float64))))
            if offset is None:
                return largest

    def _score(self, score: float) -> float:
        return min(1.0, max(-1.0, score)) if self.metric == "cosine" else score

    def _get(self, ids: Iterable[str]) -> Steps[list[VectorDocument]]:
        """Documents by id, in the order asked."""
        wanted = check_ids(ids)
        if not wanted or not (yield from self._ensure_steps(self._dimension)):
            return []
        records = yield _Call(
            "retrieve",
            {
                "collection_name": self.collection,
                "ids": [point_id(i) for i in dict.fromkeys(wanted)],
                "with_payload": True,
                "with_vectors": True,
            },
        )
        found = {doc.id: doc for doc in map(self._document, records)}
        return [found[i] for i in wanted if i in found]

    get, aget = twins(_get)

    def _delete(self, ids: Iterable[str]) -> Steps[None]:
        """Delete documents by id; unknown ids are ignored."""
        wanted = check_ids(ids)
        if not wanted or not (yield from self._ensure_steps(self._dimension)):
            return
        selector = models.PointIdsList(points=[point_id(i) for i in dict.fromkeys(wanted)])
        yield _Call("delete", {"collection_name": self.collection, "points_selector": selector, "wait": True})

    delete, adelete = twins(_delete)

    def _count(self) -> Steps[int]:
        """The exact number of documents."""
        if not (yield from self._ensure_steps(self._dimension)):
            return 0
        return int((yield _Call("count", {"collection_name": self.collection, "exact": True})).count)

    count, acount = twins(_count)

    def _ids(self) -> Steps[list[str]]:
        """The ids of every document, sorted (a scroll over the collection's payloads)."""
        if not (yield from self._ensure_steps(self._dimension)):
            return []
        ids: list[str] = []
        offset: Any = None
        while True:
            request = {"collection_name": self.collection, "limit": 1000, "offset": offset}
            points, offset = yield _Call("scroll", {**request, "with_payload": ["id"], "with_vectors": False})
            for point in points:
                doc_id = (point.payload or {}).get("id")
                if not _is_own_id(doc_id, point):
                    raise CorruptMemoryError(f"collection {self.collection!r}: point {point.id} has no id of its own")
                ids.append(doc_id)
            if offset is None:
                return sorted(ids)

    ids, aids = twins(_ids)

    def _clear(self) -> Steps[None]:
        """Delete every document; the collection (dimension, metric, payload indexes) stays."""
        if (yield from self._ensure_steps(self._dimension)):  # delete the points, keep the collection and its indexes
            selector = models.FilterSelector(filter=models.Filter())
            yield _Call("delete", {"collection_name": self.collection, "points_selector": selector, "wait": True})

    clear, aclear = twins(_clear)

    def _document(self, point: models.ScoredPoint | models.Record) -> VectorDocument:
        """The document a point holds, raising `CorruptMemoryError` if it is not one memwoven wrote."""
        payload, vector = point.payload or {}, point.vector
        doc_id, content, metadata = payload.get("id"), payload.get("content"), payload.get("metadata")
        norm = payload.get("norm") if self.metric == "cosine" else 1.0
        corrupt = CorruptMemoryError(f"collection {self.collection!r}: point {point.id} is not a memwoven document")
        if not (
            _is_own_id(doc_id, point)
            and isinstance(content, str)
            and isinstance(metadata, dict)
            and isinstance(norm, (int, float))
            and not isinstance(norm, bool)
            and 0.0 < norm < math.inf
            and isinstance(vector, list)
            and len(vector) == self._dimension
        ):
            raise corrupt
        embedding = np.asarray(vector, dtype=np.float64)
        with np.errstate(all="ignore"):  # a damaged vector (zero, huge) is refused below
            if self.metric == "cosine":  # unit length as Qdrant keeps it, or as given when local mode reloads it
                embedding *= norm / np.linalg.norm(embedding)
            values = embedding.astype(np.float32)
        if not np.isfinite(values).all():
            raise corrupt
        try:
            frozen = freeze_json(metadata)
        except (ValueError, RecursionError):
            raise corrupt from None
        return VectorDocument.model_construct(
            id=doc_id, content=content, embedding=FrozenList(values.tolist()), metadata=frozen
        )

    # Drivers ------------------------------------------------------------------------------------------------

    def _run(self, steps: Steps[_T]) -> _T:
        with self._errors():
            return run(steps, self._step)  # a failed call is thrown into the steps, which may handle it

    def _step(self, step: Any) -> Any:
        """Execute a step from sync code: a `_Call` or `_Engine` on the sync client (under the local-mode lock), or
        any other."""
        if isinstance(step, _Engine):
            call: Callable[[], Any] = functools.partial(_largest_norm, self.client, step.collection)
        elif isinstance(step, _Call):
            call = functools.partial(getattr(self.client, step.method), **step.kwargs)
        else:
            return execute(step)
        if self._local_lock is None:
            return call()
        with self._local_lock:
            return call()

    async def _arun(self, steps: Steps[_T]) -> _T:
        client = self._async_client
        if client is None:  # local mode, or no async client given: the sync steps off the event loop
            return await self._off_loop(self._run, steps)

        async def step(op: Any) -> Any:  # a `_Call` or `_Engine` on the async client, or any other step
            if isinstance(op, _Engine):
                return _largest_norm(client, op.collection)
            return await getattr(client, op.method)(**op.kwargs) if isinstance(op, _Call) else await aexecute(op)

        with self._errors():
            return await arun(steps, step)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Raise `BackendUnavailableError` for a failure that means the server could not be reached."""
        try:
            yield
        except Exception as error:
            failure = self._unavailable(error)
            if failure is None:
                raise
            raise failure from error

    def _unavailable(self, error: Exception) -> BackendUnavailableError | None:
        """A `BackendUnavailableError` naming the server if `error` means it could not be reached, else None."""
        return _unavailable(error, self._url)

    def close(self) -> None:
        """Close the clients this memory built (a local client releases its directory lock)."""
        if self._owns_clients:
            self.client.close()

    async def aclose(self) -> None:
        """Close the clients this memory built: the async client natively, on the event loop, then the sync one."""
        if self._owns_clients and self._async_client is not None:
            await self._async_client.close()
        self.close()


def _largest_norm(client: QdrantClient | AsyncQdrantClient, collection: str) -> float | None:
    """The largest norm of a local-mode collection's vectors (deleted and spare rows included), or None if the
    client is no embedded engine holding it (a server)."""
    engine = getattr(client, "_client", None)
    if not isinstance(engine, (QdrantLocal, AsyncQdrantLocal)):
        return None
    vectors = getattr(engine.collections.get(collection), "vectors", {}).get("")
    if not isinstance(vectors, np.ndarray) or vectors.ndim != 2:
        return None
    if not len(vectors):
        return 0.0
    return float(np.sqrt(np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64).max()))


def _foreign(params: models.VectorParams) -> str | None:
    """Why a collection's vectors are not the kind memwoven stores (float32, one vector a point), or None."""
    if params.multivector_config is not None:
        return "holds multivectors; memwoven uses one vector a point"
    if params.datatype not in (None, models.Datatype.FLOAT32):
        return f"stores {params.datatype.value} vectors; memwoven uses float32"
    return None


def _is_own_id(doc_id: object, point: models.ScoredPoint | models.Record) -> TypeGuard[str]:
    """Whether `doc_id` is a string whose point id is this point's (not another document's payload)."""
    return isinstance(doc_id, str) and point_id(doc_id) == str(point.id)


def _unavailable(error: Exception, where: str) -> BackendUnavailableError | None:
    """A `BackendUnavailableError` naming the server if `error` means it could not be reached, else None."""
    code = getattr(error, "code", None)  # grpc.RpcError carries a status code
    status = code() if callable(code) and type(error).__module__.startswith("grpc") else None
    if (
        isinstance(error, (ResponseHandlingException, httpx.TransportError, ConnectionError, TimeoutError))
        or (isinstance(error, UnexpectedResponse) and error.status_code in (502, 503, 504))
        or getattr(status, "name", "") in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
    ):
        return BackendUnavailableError(f"Qdrant at {where} is unavailable: {error}")
    return None


def list_collections(location_or_client: str | QdrantClient, **client_options: Any) -> list[CollectionInfo]:
    """The collections memwoven can open (one unnamed vector, cosine or dot distance), sorted by name."""
    if isinstance(location_or_client, str):
        where = redact_url(location_or_client)
        client = _clients_from_location(location_or_client, client_options)[0]
    else:
        where, client = repr(location_or_client), location_or_client
    metrics: dict[models.Distance, Metric] = {models.Distance.COSINE: "cosine", models.Distance.DOT: "dot"}
    lock = _local_lock(client)
    found = []
    try:
        with lock if lock is not None else contextlib.nullcontext():
            for name in sorted(c.name for c in client.get_collections().collections):
                params = client.get_collection(name).config.params.vectors if is_collection_name(name) else None
                if isinstance(params, models.VectorParams) and _foreign(params) is None and params.distance in metrics:
                    found.append(CollectionInfo(name, metrics[params.distance], params.size))
    except Exception as error:
        failure = _unavailable(error, where)
        if failure is None:
            raise
        raise failure from error
    finally:
        if isinstance(location_or_client, str):
            client.close()
    return found


# Clients ----------------------------------------------------------------------------------------------------


def _merge(parts: list[DocumentBatch]) -> DocumentBatch:
    """Validated batches as one, keeping (as `VectorIndex.prepare` does) the last document of each id at the
    position of its first."""
    if len(parts) == 1:
        return parts[0]
    ids = [doc_id for part in parts for doc_id in part.ids]
    contents = [content for part in parts for content in part.contents]
    metadata = [value for part in parts for value in part.metadata]
    vectors = np.concatenate([part.vectors for part in parts])
    latest = {doc_id: row for row, doc_id in enumerate(ids)}
    if len(latest) < len(ids):
        rows = list(latest.values())
        ids, contents, metadata = list(latest), [contents[r] for r in rows], [metadata[r] for r in rows]
        vectors = vectors[rows]
    return DocumentBatch(ids=ids, contents=contents, metadata=metadata, vectors=vectors)


def _local_lock(client: QdrantClient) -> threading.Lock | None:
    """The lock serializing calls to a local-mode client (shared by every memory over it), or None for a server."""
    if not isinstance(getattr(client, "_client", None), QdrantLocal):
        return None
    with _LOCAL_LOCKS_GUARD:
        return _LOCAL_LOCKS.setdefault(client, threading.Lock())


def _clients_from_location(location: str, options: dict[str, Any]) -> tuple[QdrantClient, AsyncQdrantClient | None]:
    """The sync client (and, for a server, the async client) for a `qdrant...://` URL. An option neither client
    takes raises `InvalidInputError`: a server's clients refuse it themselves (the rest go to httpx), an embedded
    one would ignore it."""
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    if parts.query or parts.fragment:  # read by no one: ?api_key= would leave the client without its key
        raise InvalidInputError(
            f"Qdrant URLs take no query string or fragment, got {redact_url(location)!r}; pass client options as "
            "keyword arguments (api_key=, timeout=, ...) or the API key as the password (qdrant://:KEY@host)"
        )
    if scheme in ("qdrant+memory", "qdrant+local"):
        for name in options:
            if name not in _CLIENT_PARAMETERS:
                raise InvalidInputError(f"QdrantVectorMemory: got an unexpected keyword argument {name!r}")
    if scheme == "qdrant+memory":
        return QdrantClient(location=":memory:", **options), None
    if scheme == "qdrant+local":
        path = unquote(parts.path)
        if parts.netloc not in ("", "localhost") or not path:
            raise InvalidInputError(
                f"qdrant+local URLs name a local directory (qdrant+local:///abs/path), got {redact_url(location)!r}"
            )
        return QdrantClient(path=path, force_disable_check_same_thread=True, **options), None  # calls are serialized
    if scheme not in ("qdrant", "qdrants") or not parts.hostname:
        raise InvalidInputError(f"not a Qdrant URL: {redact_url(location)!r}; use qdrant://host:6333")
    server: dict[str, Any] = {
        "host": parts.hostname,
        "port": parts.port or 6333,
        "https": scheme == "qdrants",
        "check_compatibility": False,  # no request at construction
    }
    if parts.password:
        server["api_key"] = unquote(parts.password)
    if parts.path.strip("/"):
        server["prefix"] = parts.path.strip("/")
    server.update(options)
    try:
        client = QdrantClient(**server)
    except TypeError as error:  # an option neither QdrantClient nor httpx takes
        raise InvalidInputError(f"QdrantVectorMemory: {error}") from None
    try:
        return client, AsyncQdrantClient(**server)
    except BaseException:
        client.close()
        raise


# The options an embedded client takes from the caller: not those its URL sets (location, path)
_CLIENT_PARAMETERS = frozenset(inspect.signature(QdrantClient.__init__).parameters) - {
    "self",
    "kwargs",
    "location",
    "path",
    "url",
    "host",
    "force_disable_check_same_thread",
}
