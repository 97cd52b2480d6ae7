"""Vector collections on Redis (standalone or Cluster), with no server modules required.

A collection lives in four keys that share one hash tag, so they sit in one cluster slot and one Lua script
changes them atomically::

    <prefix>:vec:{<collection>}:docs     hash  id -> {"content": ..., "metadata": ...} (JSON)
    <prefix>:vec:{<collection>}:vecs     hash  id -> the embedding, float32 little-endian bytes
    <prefix>:vec:{<collection>}:config   hash  dimension, metric, seq (the number of the last change), count
                                               (of documents after the change numbered `counted`)
    <prefix>:vec:{<collection>}:changes  stream, one entry per write: seq, kind (store/delete/clear), ids

Search runs exactly, in the client, over an in-process `VectorIndex` kept in sync through the change stream:
every write is one script that also bumps `seq` and appends an entry naming the changed ids (the stream is
capped with ``MAXLEN ~``). Before each read the client pulls, in one script call, the entries after the last one
it applied together with the current documents of the ids they name (absent = deleted), so the result is a
consistent snapshot. A clear resets the index; a hole in the sequence numbers (the stream was trimmed past this
client's position, or the keys were deleted) triggers a full reload with HSCAN. A client's own write is applied
locally when nothing else was written in between. Several clients therefore see each other's writes.

Every write also stamps the number of documents it leaves with its own sequence number; a read whose hashes
hold another number, while the stamp is the last change's, raises `CorruptMemoryError` (hashes evicted or
deleted behind a kept config). A writer of an earlier release does not stamp, so its changes are not checked.

`get`, `count` and `search` are all served from the synced index, so a client holds the whole collection in
memory (float32 rows plus metadata), like the embedded backends. The Redis query engine (Redis 8, Redis Stack)
is not used yet: this path works the same on every Redis >= 6 and on compatible servers.

As in `memwoven.backends.redis`, each operation is a generator of steps yielding I/O-free ops; `twins` makes its
sync method, run with the sync client, and its async twin, run with the event loop's async client (see
`memwoven.backends._redis`), so no body is written twice.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, get_args

import numpy as np
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from memwoven._redact import redact_url
from memwoven._steps import Steps, twins
from memwoven.backends._redis import HScan, RedisBackend, Script, as_text, check_prefix, clients_from_url, redis_errors
from memwoven.contracts import CollectionInfo, DocumentsIn, Metric, check_collection, check_ids, is_collection_name
from memwoven.errors import (
    CorruptMemoryError,
    DimensionMismatchError,
    InvalidInputError,
)
from memwoven.models import FrozenDict, ScoredDocument, VectorDocument, freeze_json
from memwoven.vector_index import (
    DocumentBatch,
    SearchQuery,
    VectorIndex,
    VectorMemoryBase,
    check_stored_dimension,
    stored_scales,
)

__all__ = ["RedisVectorMemory", "list_collections"]

_PULL_LIMIT = 1000  # stream entries per pull; a client further behind pulls again
_START = "0-0"  # the position before any stream entry

_WRITE = """
local function check_config(dimension, metric)
  local config = redis.call('HMGET', KEYS[3], 'dimension', 'metric')
  if config[1] and dimension ~= '' and config[1] ~= dimension then return {'dimension', config[1]} end
  if config[2] and config[2] ~= metric then return {'metric', config[2]} end
  return nil
end
local function log_change(kind, ids)
  local seq = redis.call('HINCRBY', KEYS[3], 'seq', 1)
  redis.call('HSET', KEYS[3], 'count', redis.call('HLEN', KEYS[2]), 'counted', seq)
  local entry = redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[1], '*', 'seq', seq, 'kind', kind, 'ids', ids)
  return {'ok', seq, entry, redis.call('HGET', KEYS[3], 'dimension')}
end
"""

_CONFIG = """
local function config()
  local stored = redis.call('HMGET', KEYS[3], 'seq', 'dimension', 'metric', 'count', 'counted')
  stored[6], stored[7] = redis.call('HLEN', KEYS[1]), redis.call('HLEN', KEYS[2])
  return stored
end
"""

SCRIPTS = {
    # KEYS: docs, vecs, config, changes. ARGV: max changes, dimension, metric, n, n ids, n docs, n vectors.
    # -> {'ok', seq, entry, dimension} or {'dimension' | 'metric', the stored value}
    "store": _WRITE
    + """
local refused = check_config(ARGV[2], ARGV[3])
if refused then return refused end
redis.call('HSETNX', KEYS[3], 'dimension', ARGV[2])
redis.call('HSETNX', KEYS[3], 'metric', ARGV[3])
local n = tonumber(ARGV[4])
local ids = {}
for first = 0, n - 1, 500 do
  local docs, vecs = {}, {}
  for i = first, math.min(first + 500, n) - 1 do
    local id = ARGV[5 + i]
    ids[#ids + 1] = id
    docs[#docs + 1] = id
    docs[#docs + 1] = ARGV[5 + n + i]
    vecs[#vecs + 1] = id
    vecs[#vecs + 1] = ARGV[5 + 2 * n + i]
  end
  redis.call('HSET', KEYS[1], unpack(docs))
  redis.call('HSET', KEYS[2], unpack(vecs))
end
return log_change('store', table.concat(ids, '\\0'))
""",
    # KEYS: docs, vecs, config, changes. ARGV: max changes, ids... -> {'ok', seq, entry} or {} if nothing was there
    "delete": _WRITE
    + """
local removed = {}
for i = 2, #ARGV do
  if redis.call('HDEL', KEYS[2], ARGV[i]) == 1 then
    redis.call('HDEL', KEYS[1], ARGV[i])
    removed[#removed + 1] = ARGV[i]
  end
end
if #removed == 0 then return {} end
return log_change('delete', table.concat(removed, '\\0'))
""",
    # KEYS: docs, vecs, config, changes. ARGV: max changes, dimension or '', metric. The dimension stays.
    "clear": _WRITE
    + """
local refused = check_config(ARGV[2], ARGV[3])
if refused then return refused end
redis.call('DEL', KEYS[1], KEYS[2])
local result = log_change('clear', '')
redis.call('XTRIM', KEYS[4], 'MAXLEN', 1)
return result
""",
    # KEYS: docs, vecs, config, changes. ARGV: none, or the dimension or '' and the metric to create a collection
    # that does not exist yet with (a read writes nothing to one that does). -> {config (as `pull` reads it), last
    # entry id or nil}
    "head": _CONFIG
    + """
if ARGV[2] and redis.call('HEXISTS', KEYS[3], 'metric') == 0 then
  redis.call('HSET', KEYS[3], 'metric', ARGV[2])
  if ARGV[1] ~= '' then redis.call('HSETNX', KEYS[3], 'dimension', ARGV[1]) end
end
local last = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)[1]
return {config(), last and last[1] or false}
""",
    # KEYS: docs, vecs, config, changes. ARGV: the last entry applied, max entries.
    # -> {config, {{entry, seq, kind}...}, ids changed since the last clear, their docs, vectors}
    "pull": _CONFIG
    + """
local function split(text, out, seen)
  local start = 1
  while text ~= '' do
    local stop = string.find(text, '\\0', start, true)
    local id = string.sub(text, start, (stop or 0) - 1)
    if not seen[id] then
      seen[id] = true
      out[#out + 1] = id
    end
    if not stop then return end
    start = stop + 1
  end
end
local limit = tonumber(ARGV[2])
local log, ids, seen = {}, {}, {}
for _, entry in ipairs(redis.call('XRANGE', KEYS[4], ARGV[1], '+', 'COUNT', limit + 1)) do
  if entry[1] ~= ARGV[1] and #log < limit then
    local fields = {}
    for i = 1, #entry[2], 2 do fields[entry[2][i]] = entry[2][i + 1] end
    log[#log + 1] = {entry[1], fields['seq'], fields['kind']}
    if fields['kind'] == 'clear' then ids, seen = {}, {} end
    split(fields['ids'] or '', ids, seen)
  end
end
local docs, vecs = {}, {}
for first = 1, #ids, 1000 do
  local chunk = {}
  for i = first, math.min(first + 999, #ids) do chunk[#chunk + 1] = ids[i] end
  for _, value in ipairs(redis.call('HMGET', KEYS[1], unpack(chunk))) do docs[#docs + 1] = value end
  for _, value in ipairs(redis.call('HMGET', KEYS[2], unpack(chunk))) do vecs[#vecs + 1] = value end
end
return {config(), log, ids, docs, vecs}
""",
    # KEYS: docs, vecs. ARGV: ids. -> {their docs, their vectors}, read in one atomic step
    "read": """
local docs, vecs = {}, {}
for first = 1, #ARGV, 1000 do
  local chunk = {unpack(ARGV, first, math.min(first + 999, #ARGV))}
  for _, value in ipairs(redis.call('HMGET', KEYS[1], unpack(chunk))) do docs[#docs + 1] = value end
  for _, value in ipairs(redis.call('HMGET', KEYS[2], unpack(chunk))) do vecs[#vecs + 1] = value end
end
return {docs, vecs}
""",
}


@dataclass(frozen=True)
class _Position:
    """The last change stream entry applied to the local index, and its sequence number."""

    entry: str
    seq: int


class RedisVectorMemory(RedisBackend, VectorMemoryBase):
    """One vector collection on Redis: a `redis://`, `rediss://` or `redis+cluster://` URL, or clients you built.

    The collection exists (and is listed) from its first use, with its metric and `dimension` if given, else the
    dimension of its first store; given a dimension, construction reads the collection's config (one round trip,
    nothing is created) and raises if the stored dimension or metric differs. `prefix` namespaces every key;
    `max_changes` caps the change stream (a client further behind reloads fully). The async methods work from any
    event loop, as `RedisChatMemory`'s do.
    """

    def __init__(
        self,
        url_or_client: str | redis.Redis | redis.cluster.RedisCluster,
        *,
        collection: str = "default",
        dimension: int | None = None,
        metric: Metric = "cosine",
        prefix: str = "memwoven",
        async_client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster | None = None,
        max_changes: int = 10_000,
        socket_timeout: float = 10.0,
    ) -> None:
        check_prefix(prefix)
        check_collection(collection)
        if isinstance(max_changes, bool) or not isinstance(max_changes, int) or max_changes < 1:
            raise InvalidInputError(f"max_changes must be a positive int, got {max_changes!r}")
        self._index = VectorIndex(dimension, metric)  # validates both
        self.metric = self._index.metric
        self.collection = collection
        self.prefix = prefix
        self._max_changes = max_changes
        self._keys = [f"{prefix}:vec:{{{collection}}}:{part}" for part in ("docs", "vecs", "config", "changes")]
        self._position: _Position | None = None  # None: the next read reloads fully
        self._lock = threading.RLock()  # guards _index and _position; never held across I/O
        self._connect(url_or_client, async_client, socket_timeout, SCRIPTS)
        if dimension is not None:
            self._check_at_open(lambda: self._run(self._check_steps()))

    def __repr__(self) -> str:
        return f"RedisVectorMemory({self._url!r}, collection={self.collection!r}, prefix={self.prefix!r})"

    @property
    def dimension(self) -> int | None:
        """The embedding dimension: given, fixed by the first store, or read from Redis by the first operation."""
        return self._index.dimension

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """Redis errors of an operation on the collection as memwoven errors naming it."""
        return redis_errors(self._url, f"collection {self.collection!r}")

    # Writes as I/O-free steps -------------------------------------------------------------------------------

    def _store(self, documents: DocumentsIn) -> Steps[None]:
        """Insert or replace documents by id: one atomic script call, validated before anything is written."""
        with self._errors():
            batch = self._index.prepare(documents)  # everything is validated before anything is written
            if not batch.ids:
                return
            dimension = batch.vectors.shape[1]
            encoded = [
                json.dumps({"content": content, "metadata": metadata}, separators=(",", ":"))
                for content, metadata in zip(batch.contents, batch.metadata)
            ]
            vectors = [row.tobytes() for row in batch.vectors.astype("<f4", copy=False)]
            head: list[str | bytes | int] = [self._max_changes, dimension, self.metric, len(batch.ids)]
            reply = yield Script("store", self._keys, [*head, *batch.ids, *encoded, *vectors])
            self._apply_own(self._written(reply, dimension), lambda: self._index.upsert(batch))

    store, astore = twins(_store)

    def _delete(self, ids: Iterable[str]) -> Steps[None]:
        """Delete documents by id (one atomic script call); unknown ids are ignored."""
        with self._errors():
            wanted = check_ids(ids)
            if not wanted:
                return
            reply = yield Script("delete", self._keys, [self._max_changes, *wanted])
            if reply:  # something was deleted
                self._apply_own(self._written(reply, None), lambda: self._index.remove(wanted))

    delete, adelete = twins(_delete)

    def _clear(self) -> Steps[None]:
        """Delete every document; the dimension and metric stay with the collection."""
        with self._errors():
            args: list[str | bytes | int] = [self._max_changes, self._index.dimension or "", self.metric]
            position = self._written((yield Script("clear", self._keys, args)), self._index.dimension)
            with self._lock:  # after a clear the collection is empty, whatever this client had missed
                self._index = VectorIndex(self._index.dimension, self.metric)
                self._position = position

    clear, aclear = twins(_clear)

    def _written(self, reply: list[Any], dimension: int | None) -> _Position:
        """Check a write script's reply (raising if the collection refused it); return the change's position."""
        status, value = as_text(reply[0]), reply[1]
        if status == "dimension":
            raise DimensionMismatchError(f"collection {self.collection!r} has dimension {int(value)}, not {dimension}")
        if status == "metric":
            raise InvalidInputError(
                f"collection {self.collection!r} uses the {as_text(value)} metric, not {self.metric}"
            )
        if reply[3] is not None:
            with self._lock:
                self._adopt_dimension(int(reply[3]))
        return _Position(as_text(reply[2]), int(value))

    def _apply_own(self, position: _Position, change: Callable[[], object]) -> None:
        """Make this client's own write, at `position`, to the local index too if it comes right after the one the
        index is at (nothing else was written in between); otherwise the next read pulls it."""
        with self._lock:
            if self._position is not None and self._position.seq == position.seq - 1:
                change()
                self._position = position

    # Reads: sync the local index, then answer from it -------------------------------------------------------

    def _sync_steps(self) -> Steps[None]:
        """Bring the local index up to date with Redis: pull the new changes, or reload fully."""
        while True:
            position = self._position
            if position is None:
                yield from self._reload_steps()
                continue
            config, log, ids, docs, vectors = yield Script("pull", self._keys, [position.entry, _PULL_LIMIT])
            current = self._check_config(config)
            with self._lock:
                if self._position is not position:  # another caller moved the index meanwhile: pull again
                    continue
                if not self._apply(position, current, log, ids, docs, vectors):
                    self._position = None  # a hole in the sequence: the stream was trimmed
                    continue
            self._check_count(config)
            if len(log) < _PULL_LIMIT:
                return

    def _apply(
        self, position: _Position, current: int, log: list[Any], ids: list[bytes], docs: Any, vectors: Any
    ) -> bool:
        """Apply pulled changes to the index; False (and nothing applied) if some changes are missing."""
        entries = [(as_text(entry), int(seq), as_text(kind)) for entry, seq, kind in log]
        clears = [i for i, (_, _, kind) in enumerate(entries) if kind == "clear"]
        start = clears[-1] if clears else 0  # changes before a clear do not matter
        expected = entries[start][1] if clears else position.seq + 1
        if [seq for _, seq, _ in entries[start:]] != list(range(expected, expected + len(entries) - start)):
            return False
        last = entries[-1][1] if entries else position.seq
        if len(entries) < _PULL_LIMIT and last != current:
            return False  # the stream lost its newest entries (deleted or recreated keys)
        self._check_pairs(ids, docs, vectors)
        present = [i for i, doc in enumerate(docs) if doc is not None]
        batch = self._decode([ids[i] for i in present], [docs[i] for i in present], [vectors[i] for i in present])
        if clears:
            self._index = VectorIndex(self._index.dimension, self.metric)
        self._index.remove(as_text(ids[i]) for i in range(len(ids)) if docs[i] is None)
        self._index.upsert(batch)
        if entries:
            self._position = _Position(entries[-1][0], entries[-1][1])
        return True

    def _reload_steps(self) -> Steps[None]:
        """Read the whole collection with HSCAN into a fresh index, positioned at the stream's last entry; create
        the collection (its metric, and its dimension if known) if it does not exist, as SQL does at first use.

        Writes that land during the scan come after that position, so the pull that follows re-applies them.
        """
        config, last = yield Script("head", self._keys, [self._index.dimension or "", self.metric])
        current = self._check_config(config)
        docs = yield HScan(self._keys[0])
        vectors = yield HScan(self._keys[1])
        # A write between the two scans leaves an id in one hash only; read those again in one atomic step: if
        # the pair is still broken, the storage is damaged (every write changes both hashes in one script).
        unpaired = sorted(docs.keys() ^ vectors.keys())
        if unpaired:
            again_docs, again_vectors = yield Script("read", self._keys[:2], [*unpaired])
            self._check_pairs(unpaired, again_docs, again_vectors)
            for doc_id, doc, vector in zip(unpaired, again_docs, again_vectors):
                docs.pop(doc_id, None)
                vectors.pop(doc_id, None)
                if doc is not None:
                    docs[doc_id], vectors[doc_id] = doc, vector
        self._check_count(config)
        ids = list(docs)
        index = VectorIndex(self._index.dimension, self.metric)
        index.upsert(self._decode(ids, [docs[i] for i in ids], [vectors[i] for i in ids]))
        with self._lock:
            if self._position is None:
                self._index = index
                self._position = _Position(as_text(last) if last else _START, current)

    def _check_steps(self) -> Steps[None]:
        """Check the stored dimension and metric, if the collection has been written, without reading documents."""
        with self._errors():
            config, _ = yield Script("head", self._keys, [])
            self._check_config(config)

    def _check_config(self, config: list[Any]) -> int:
        """Check the stored dimension and metric against this object's; return the current sequence number.
        `CorruptMemoryError` if the config is not one memwoven writes, or the hashes lost documents."""
        seq, dimension, metric = config[:3]
        where = f"collection {self.collection!r}"
        if metric is not None and as_text(metric) not in get_args(Metric):
            raise CorruptMemoryError(f"{where}: its config holds the unknown metric {as_text(metric)[:40]!r}")
        if (dimension is not None and int(dimension) < 1) or int(seq or 0) < 0:
            raise CorruptMemoryError(f"{where}: its config holds dimension {dimension!r:.40} and seq {seq!r:.40}")
        if metric is not None and as_text(metric) != self.metric:
            raise InvalidInputError(f"{where} uses the {as_text(metric)} metric, not {self.metric}")
        if dimension is not None:
            with self._lock:
                check_stored_dimension(int(dimension), self._index.dimension, where)
                self._adopt_dimension(int(dimension))
        return int(seq or 0)

    def _check_count(self, config: list[Any]) -> None:
        """`CorruptMemoryError` if the hashes hold another number of documents than the last change left (keys
        evicted or deleted behind the config); checked after the pulled documents' own checks, which name one."""
        seq, count, counted, stored_docs, stored_vectors = config[0], *config[3:]
        if counted is not None and int(counted) == int(seq or 0) and not int(count) == stored_docs == stored_vectors:
            raise CorruptMemoryError(
                f"collection {self.collection!r}: its last change left {int(count)} documents, but its hashes hold "
                f"{stored_docs} documents and {stored_vectors} vectors (keys evicted or deleted?)"
            )

    def _adopt_dimension(self, dimension: int) -> None:
        if self._index.dimension is None:  # an index without a dimension is empty
            self._index = VectorIndex(dimension, self.metric)

    def _decode(self, ids: Sequence[bytes], docs: Sequence[bytes], vectors: Sequence[bytes]) -> DocumentBatch:
        """Stored documents as a batch for the index, raising `CorruptMemoryError` on anything unreadable."""
        dimension = self._index.dimension
        contents: list[str] = []
        metadata: list[FrozenDict] = []
        for doc_id, raw in zip(ids, docs):
            try:
                value = json.loads(raw)
                content, meta = value["content"], freeze_json(value["metadata"])
                if not isinstance(content, str) or not isinstance(meta, FrozenDict):
                    raise TypeError("content must be a string and metadata an object")
            except (ValueError, TypeError, KeyError) as error:
                raise self._corrupt(doc_id, f"its document cannot be decoded ({error.__class__.__name__})") from None
            contents.append(content)
            metadata.append(meta)
        for doc_id, vector in zip(ids, vectors):
            if dimension is None or len(vector) != 4 * dimension:
                raise self._corrupt(doc_id, f"its vector has {len(vector)} bytes, not 4 x dimension {dimension}")
        matrix = np.frombuffer(b"".join(vectors), dtype="<f4").reshape(len(ids), dimension or 0).astype(np.float32)
        scales = stored_scales(
            matrix, self.metric, lambda row, problem: self._corrupt(ids[row], f"its vector is damaged: {problem}")
        )
        return DocumentBatch([as_text(i) for i in ids], contents, metadata, matrix, scales)

    def _check_pairs(self, ids: Sequence[bytes], docs: Sequence[bytes | None], vectors: Sequence[bytes | None]) -> None:
        """Raise `CorruptMemoryError` for an id, read atomically, that has a document without a vector or back."""
        for doc_id, doc, vector in zip(ids, docs, vectors):
            if (doc is None) != (vector is None):
                missing = "vector" if vector is None else "document"
                raise self._corrupt(doc_id, f"its {missing} is missing (the other half is stored)")

    def _corrupt(self, doc_id: bytes, problem: str) -> CorruptMemoryError:
        return CorruptMemoryError(f"collection {self.collection!r}: document {as_text(doc_id)!r}: {problem}")

    def _query_dimension(self) -> int | None:
        return self._index.dimension  # bad arguments fail before any I/O

    def _search_query(self, query: SearchQuery) -> Steps[list[ScoredDocument]]:
        """Exact top-k search over the synced local index."""
        with self._errors():
            yield from self._sync_steps()
            with self._lock:
                return self._index.query(query)

    def _get(self, ids: Iterable[str]) -> Steps[list[VectorDocument]]:
        """Documents by id, in the order asked."""
        with self._errors():
            wanted = check_ids(ids)
            if not wanted:
                return []
            yield from self._sync_steps()
            with self._lock:
                return self._index.get(wanted)

    get, aget = twins(_get)

    def _count(self) -> Steps[int]:
        """The number of documents."""
        with self._errors():
            yield from self._sync_steps()
            return len(self._index)

    count, acount = twins(_count)

    def _ids(self) -> Steps[list[str]]:
        """The ids of every document, sorted (from the synced index)."""
        with self._errors():
            yield from self._sync_steps()
            with self._lock:
                return sorted(self._index.ids)

    ids, aids = twins(_ids)


def list_collections(
    url_or_client: str | redis.Redis | redis.cluster.RedisCluster,
    *,
    prefix: str = "memwoven",
    socket_timeout: float = 10.0,
) -> list[CollectionInfo]:
    """The collections stored under `prefix` (found with SCAN, never KEYS), sorted by name.

    A collection is listed from its first use (its config key holds its metric, and its dimension once known).
    """
    check_prefix(prefix)
    where = redact_url(url_or_client) if isinstance(url_or_client, str) else repr(url_or_client)
    client = clients_from_url(url_or_client, socket_timeout)[0] if isinstance(url_or_client, str) else url_or_client
    head, tail = f"{prefix}:vec:{{", "}:config"
    try:
        with redis_errors(where, f"the collections of prefix {prefix!r}"):
            found = []
            for raw in client.scan_iter(match=f"{head}*{tail}", count=1000):
                key = as_text(raw)
                name = key[len(head) : -len(tail)]
                if not is_collection_name(name):
                    continue
                dimension, metric = client.hmget(key, ["dimension", "metric"])
                if metric is None:
                    continue
                kind = as_text(metric)
                if kind != "cosine" and kind != "dot":
                    raise CorruptMemoryError(f"collection {name!r}: its config holds the unknown metric {kind!r}")
                known: Metric = "cosine" if kind == "cosine" else "dot"
                found.append(CollectionInfo(name, known, None if dimension is None else int(dimension)))
            return sorted(found)
    finally:
        if isinstance(url_or_client, str):
            client.close()
