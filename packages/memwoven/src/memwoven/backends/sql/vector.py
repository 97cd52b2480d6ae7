"""`SQLVectorMemory`: one collection of embedded documents in an SQL table, searched exactly in process.

The table is the durable copy; each object searches a `VectorIndex` it keeps in step with it incrementally.
Every write bumps the collection's `version` and stamps the rows it writes (upserts, and tombstones for
deletes) with it, under the collection row's lock, so versions follow commit order. Before each read an object
reads the collection row (one small query): if the version moved, it fetches only the rows stamped after the
version it has seen and applies them; if the `generation` moved (someone cleared the collection), it reloads.
Its own writes are applied to its index directly after they commit.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from memwoven._steps import Steps, twins
from memwoven._vector_cache import (
    CachedIndex,
    CacheFile,
    CacheWriter,
    cache_identity,
    default_cache_dir,
    newest,
    remove_files,
    writing,
)
from memwoven.backends.sql._base import SQLBackend, SQLOptions
from memwoven.backends.sql._bulk import write_documents
from memwoven.backends.sql._driver import OnDriver
from memwoven.backends.sql._engine import Database, Work, _loop_running_here
from memwoven.backends.sql._pgvector import (
    EmbeddingsTable,
    Search,
    approximate_candidates,
    candidates,
    check_hnsw_dimension,
    check_index_options,
    check_search_mode,
    ensure_hnsw,
)
from memwoven.backends.sql._schema import Tables, check_identifier, insert_ignoring, key_of
from memwoven.contracts import CollectionInfo, DocumentsIn, Metric, check_collection, check_ids
from memwoven.errors import BackendUnavailableError, CorruptMemoryError, DimensionMismatchError, InvalidInputError
from memwoven.models import FrozenDict, ScoredDocument, VectorDocument, freeze_json
from memwoven.vector_index import (
    DocumentBatch,
    SearchQuery,
    VectorIndex,
    VectorMemoryBase,
    check_dimension,
    check_metric,
    check_stored_dimension,
    cosine_query,
    rank,
    stored_scales,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine
    from typing_extensions import Unpack

__all__ = ["SQLVectorMemory", "check_index_options", "check_search_mode", "list_collections"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_CHUNK = 500  # ids per DELETE ... IN (...) statement
_READ_AT_ONCE = 30_000  # ids a read takes in one statement (below SQLite's 32,766 parameters)
_PAGE = 2048  # rows per statement of a full load
_CACHE_TOKEN = "vector_cache_token"  # noqa: S105 (a meta row naming the tables in cache files, not a secret)
_VOUCH = "vector_cache:"  # meta rows "vector_cache:<stamp>" -> "<collection key>:<generation>:<version>"
_VOUCH_WAIT_MS = 100  # SQLite: how long a read waits for the write lock to record its cache file
_VOUCHES_KEPT = 8  # per collection: the newest files' (a machine whose file is older writes a new one)
_NEVER = 2**62  # a version no collection reaches: the change query then returns the collection row alone


@contextlib.contextmanager
def _waiting_briefly(connection: Connection) -> Iterator[None]:
    """On SQLite, wait at most `_VOUCH_WAIT_MS` for the write lock: a read recording its cache file must not queue
    behind a long write transaction for the whole busy timeout (unrecorded, the file serves its own process)."""
    if connection.dialect.name != "sqlite":
        yield
        return
    raw: Any = connection.connection.dbapi_connection
    (usual,) = raw.execute("PRAGMA busy_timeout").fetchone()
    raw.execute(f"PRAGMA busy_timeout = {_VOUCH_WAIT_MS}")
    try:
        yield
    finally:
        raw.execute(f"PRAGMA busy_timeout = {int(usual)}")


class _Collection(NamedTuple):
    """The collection row: `version` moves on every write, `generation` on every clear."""

    version: int
    generation: int
    dimension: int | None


class _ChangeRow(NamedTuple):
    """A row of the changes query (`SQLVectorMemory._changes`), as the driver or SQLAlchemy returns it."""

    name: str
    version: int
    generation: int
    dimension: int | None
    doc_id: str | None
    content: str | None
    metadata: str | None
    embedding: bytes | None
    deleted: int | None
    doc_key: str | None


class _GenerationMoved(Exception):
    """The collection was cleared during a full load."""


class _Changes(NamedTuple):
    live: DocumentBatch
    removed: list[str]


class SQLVectorMemory(SQLBackend, VectorMemoryBase):
    """One named collection of documents in an SQL database, with exact top-k search.

    `url_or_engine`, `table_prefix`, `schema` and the pool options are as for `SQLChatMemory`. The dimension
    and metric are fixed by the first object that uses the collection (or its first store) and persisted;
    opening it later with another dimension raises `DimensionMismatchError`, with another metric
    `InvalidInputError`. Construction connects only when given a dimension, to read the collection's row (nothing
    is created) and raise at once; otherwise the first use does the check.

    `search` chooses where searches run: "client" (the default) keeps the collection in an in-process index, kept in
    step with the table; "server" (PostgreSQL with the pgvector extension, `memwoven[postgres]`) also stores each
    embedding as a pgvector ``vector`` and searches in the database (exact; see `memwoven.backends.sql._pgvector`),
    and `get`, `count` and `ids` read the table: nothing of the collection is held in process. Open every object of
    a collection with the same `search`: the server-side copy is written only by objects in "server" mode.

    `cache_dir` keeps the client-side index in a memory-mapped file shared by every process of the machine
    (`memwoven._vector_cache`): a directory (made absolute at construction), True (or "on", "true", "yes", "1", in
    any case) for `default_cache_dir()`, False (the default, or "off", "false", "no", "0") for none. A new process
    maps the collection's newest file and applies the changes since, instead of reading every row; reads stay as
    fresh as without it.

    `index="hnsw"` (server search only) makes server searches approximate through a pgvector HNSW index of the
    collection, built with `hnsw_m` (default 16) and `hnsw_ef_construction` (64) by the first object that needs it
    once the dimension is known (at most 2,000), and searched with `ef_search` (40; up to 1,000: higher finds more
    of the true neighbours, slower). Scores stay the exact float32 scores of the rows returned and the threshold
    stays exclusive, but a search may miss rows exact search would return (recall below 1).
    """

    _table_names = ("collections", "vectors")

    def __init__(
        self,
        url_or_engine: str | URL | Engine | AsyncEngine,
        *,
        collection: str = "default",
        dimension: int | None = None,
        metric: Metric = "cosine",
        search: str = "client",
        cache_dir: str | os.PathLike[str] | bool = False,
        index: str | None = None,
        hnsw_m: int | None = None,
        hnsw_ef_construction: int | None = None,
        ef_search: int | None = None,
        **options: Unpack[SQLOptions],
    ) -> None:
        self.collection = check_collection(collection)  # stored as data, keyed by its hash
        self.metric = check_metric(metric)
        self.search_mode = check_search_mode(search)
        self.hnsw = check_index_options(self.search_mode, index, hnsw_m, hnsw_ef_construction, ef_search)
        """The HNSW options (None: exact search)."""
        self._wanted_dimension = check_dimension(dimension)
        self.cache_dir = _check_cache_dir(cache_dir)
        if self.hnsw is not None:
            check_hnsw_dimension(self._wanted_dimension)
        self._iterative: bool | None = None  # once the HNSW index is known to exist: pgvector's iterative scans
        super().__init__(url_or_engine, **options)
        self._embeddings: EmbeddingsTable | None = None
        if self.search_mode == "server":
            if self._db.dialect != "postgresql":
                self.close()
                raise InvalidInputError(
                    f"search='server' needs PostgreSQL with the pgvector extension, not {self._db.dialect!r}"
                )
            self._embeddings = EmbeddingsTable(self._tables)
        self._key = key_of(self.collection)
        self._collections = self._tables.collections
        self._vectors = self._tables.vectors
        c, v = self._collections, self._vectors
        newer = sa.and_(v.c.collection_key == c.c.collection_key, v.c.version > sa.bindparam("seen"))
        self._changes_query = OnDriver(  # built once: a refresh runs before every read
            sa.select(c.c.name, c.c.version, c.c.generation, c.c.dimension)
            .add_columns(v.c.doc_id, v.c.content, v.c.metadata, v.c.embedding, v.c.deleted, v.c.doc_key)
            .select_from(c.outerjoin(v, newer))
            .where(c.c.collection_key == self._key),
            binary=True,
        )
        self._lock = threading.Lock()  # guards the index and the state below; never held during I/O
        self._index: VectorIndex | CachedIndex = VectorIndex(dimension, self.metric)
        self._generation = -1  # (generation, version) of the stored collection the index reflects
        self._seen = -1
        if self._wanted_dimension is not None:
            self._check_at_open(self._check_stored)

    def __repr__(self) -> str:
        return (
            f"SQLVectorMemory({self._options_repr()}, collection={self.collection!r}, "
            f"dimension={self.dimension}, metric={self.metric!r}"
            + (", search='server'" if self._embeddings is not None else "")
            + ("" if self.hnsw is None else f", index='hnsw', hnsw_m={self.hnsw.m}, ")
            + ("" if self.hnsw is None else f"hnsw_ef_construction={self.hnsw.ef_construction}, ")
            + ("" if self.hnsw is None else f"ef_search={self.hnsw.ef_search}")
            + ")"
        )

    @property
    def dimension(self) -> int | None:
        """The embedding dimension (None until this object learns it from the collection or a store)."""
        return self._index.dimension

    # The API: each operation validates, then yields one `Work` (a transaction) for the sync or the async engine --

    def _setup_steps(self) -> Steps[None]:
        yield self._create_tables()
        if self._embeddings is not None:
            yield Work(self._embeddings.create, write=True, ddl=True)
        self._opened((yield Work(self._open_collection, write=True)))

    def _store(self, documents: DocumentsIn) -> Steps[None]:
        """Insert or replace documents by id, in one transaction."""
        yield from self._store_batch(self._index.prepare(documents))  # validated before anything is written

    def _store_batch(self, batch: DocumentBatch) -> Steps[None]:
        if self._db.dialect == "postgresql" and any("\x00" in content for content in batch.contents):
            raise InvalidInputError("PostgreSQL text cannot hold NUL characters (document content)")
        if not batch.ids:
            yield Work(_ignore)
            return
        dimension = int(batch.vectors.shape[1])
        if self.hnsw is not None:
            check_hnsw_dimension(dimension)

        def body(connection: Connection) -> _Collection:
            state = self._bump(connection)
            if state.dimension is None:
                connection.execute(self._collection_update().values(dimension=dimension))
            elif state.dimension != dimension:
                raise DimensionMismatchError(
                    f"embedding has dimension {dimension}, collection {self.collection!r} has {state.dimension}"
                )
            write_documents(connection, self._vectors, self._embeddings, self._key, batch, state.version)
            return state._replace(dimension=dimension)

        self._applied((yield Work(body, write=True)), lambda index: index.upsert(batch))

    store, astore = twins(_store)

    def _search_query(self, query: SearchQuery) -> Steps[list[ScoredDocument]]:
        """Exact top-k search over the collection as stored."""
        if self._embeddings is not None:
            table = self._embeddings.table
            if self.hnsw is not None and self._iterative is None:
                iterative: bool | None = yield Work(self._ensure_hnsw, write=True, ddl=True)
                if iterative is None:  # the collection has no dimension yet, hence no documents
                    return []
                self._iterative = iterative
            hits: list[ScoredDocument] = yield Work(lambda connection: self._server_search(connection, table, query))
            return hits
        return (yield from self._read_steps(lambda index: index.query(query)))

    def _get(self, ids: Iterable[str]) -> Steps[list[VectorDocument]]:
        """The documents with these ids, in the order asked."""
        wanted = check_ids(ids)
        if self._embeddings is not None:
            documents: list[VectorDocument] = yield Work(lambda connection: self._server_get(connection, wanted))
            return documents
        return (yield from self._read_steps(lambda index: index.get(wanted)))

    get, aget = twins(_get)

    def _delete(self, ids: Iterable[str]) -> Steps[None]:
        """Delete documents by id; unknown ids are ignored."""
        unique = list(dict.fromkeys(check_ids(ids)))
        if not unique:
            yield Work(_ignore)
            return
        keys = [key_of(doc_id) for doc_id in unique]
        vectors = self._vectors

        def body(connection: Connection) -> _Collection:
            state = self._bump(connection)
            for start in range(0, len(keys), _CHUNK):
                connection.execute(
                    sa.update(vectors)
                    .where(
                        vectors.c.collection_key == self._key,
                        vectors.c.doc_key.in_(keys[start : start + _CHUNK]),
                        sa.not_(vectors.c.deleted),
                    )
                    .values(deleted=True, version=state.version, content="", metadata="{}", embedding=b"")
                )
                if self._embeddings is not None:
                    embeddings = self._embeddings.table
                    connection.execute(
                        sa.delete(embeddings).where(
                            embeddings.c.collection_key == self._key,
                            embeddings.c.doc_key.in_(keys[start : start + _CHUNK]),
                        )
                    )
            return state

        self._applied((yield Work(body, write=True)), lambda index: index.remove(unique))

    delete, adelete = twins(_delete)

    def _count(self) -> Steps[int]:
        """The number of stored documents."""
        if self._embeddings is not None:
            count: int = yield Work(self._server_count)
            return count
        return (yield from self._read_steps(len))

    count, acount = twins(_count)

    def _clear(self) -> Steps[None]:
        """Delete every document of the collection (its dimension and metric stay)."""

        def body(connection: Connection) -> _Collection:
            state = self._bump(connection, clear=True)
            connection.execute(sa.delete(self._vectors).where(self._vectors.c.collection_key == self._key))
            if self._embeddings is not None:
                embeddings = self._embeddings.table
                connection.execute(sa.delete(embeddings).where(embeddings.c.collection_key == self._key))
            return state

        self._applied((yield Work(body, write=True)), lambda index: index.clear(), cleared=True)

    clear, aclear = twins(_clear)

    def _ids(self) -> Steps[list[str]]:
        """The ids of every stored document, sorted."""
        if self._embeddings is not None:
            ids: list[str] = yield Work(self._server_ids)
            return ids
        return (yield from self._read_steps(_sorted_ids))

    ids, aids = twins(_ids)

    def drop_tables(self) -> None:
        """Drop every table of this prefix (all the sessions and collections stored under it), and remove the cache
        files of its collections from this object's `cache_dir`. Irreversible."""
        identities = [] if self.cache_dir is None else self._cache_identities()
        if self._embeddings is not None:
            with self._db.translated(), self._db.engine.begin() as connection:
                self._embeddings.drop(connection)
        super().drop_tables()
        if self.cache_dir is not None:
            for identity in identities:
                remove_files(self.cache_dir, identity)

    def _cache_identities(self) -> list[str]:
        """The identities naming the cache files of every collection stored under this prefix (read-only)."""
        meta, c = self._tables.meta, self._collections
        if not self._db.exists():
            return []

        def read(connection: Connection) -> list[str]:
            inspector = sa.inspect(connection)
            if not all(inspector.has_table(table.name, schema=table.schema) for table in (meta, c)):
                return []
            token = connection.execute(sa.select(meta.c.value).where(meta.c.name == _CACHE_TOKEN)).scalar()
            if token is None:
                return []
            return [cache_identity(token, key) for key in connection.execute(sa.select(c.c.collection_key)).scalars()]

        return self._db.transact(Work(read))

    # Server-side search (search="server"): reads in the database, nothing kept in process ----------------------

    def _server_state(self, connection: Connection) -> _Collection:
        state = self._read_collection(connection)
        with self._lock:
            self._learn_dimension(state.dimension)
        return state

    def _ensure_hnsw(self, connection: Connection) -> bool | None:
        """Build the collection's HNSW index if missing, once its dimension is known (`_pgvector.ensure_hnsw`):
        whether pgvector has iterative scans, or None while the collection has no dimension."""
        state = self._server_state(connection)
        if state.dimension is None or self._embeddings is None or self.hnsw is None:
            return None
        return ensure_hnsw(connection, self._embeddings, self._key, state.dimension, self.metric, self.hnsw)

    def _live(self) -> Any:
        return sa.and_(self._vectors.c.collection_key == self._key, sa.not_(self._vectors.c.deleted))

    def _server_search(self, connection: Connection, embeddings: sa.Table, query: SearchQuery) -> list[ScoredDocument]:
        # A collection's dimension never changes once set: known, it need not be read again (one round trip less).
        dimension = self.dimension if self.dimension is not None else self._server_state(connection).dimension
        vector = query.vector_for(dimension)
        if query.top_k == 0 or dimension is None:
            return []
        if self.metric == "cosine":
            vector = cosine_query(vector)

        def decode(rows: Sequence[Any]) -> DocumentBatch:
            return self._decode(rows, dimension).live

        search = Search(embeddings, self._vectors, self._key, self.metric, query, vector, decode)
        if self.hnsw is None:
            batches = candidates(connection, search)
        else:  # _ensure_hnsw ran first
            batches = approximate_candidates(connection, search, self.hnsw, bool(self._iterative))
        if len(batches) == 1:  # one page (the common case): its ids are unique, ranked without an index
            return rank(batches[0], query, self.metric)
        index = VectorIndex(dimension, self.metric)
        for batch in batches:  # pages read at different moments may hold the same id: the later one wins
            index.upsert(batch)
        return index.query(query)

    def _server_get(self, connection: Connection, wanted: list[str]) -> list[VectorDocument]:
        state = self._server_state(connection)
        v = self._vectors
        keys = list(dict.fromkeys(key_of(doc_id) for doc_id in wanted))
        found: list[Any] = []
        for start in range(0, len(keys), _READ_AT_ONCE):  # one statement: reads share no snapshot
            columns = (v.c.doc_id, v.c.content, v.c.metadata, v.c.embedding, v.c.deleted, v.c.doc_key)
            chunk = v.c.doc_key.in_(keys[start : start + _READ_AT_ONCE])
            found.extend(connection.execute(sa.select(*columns).where(self._live(), chunk)).all())
        by_id = {document.id: document for document in self._decode(found, state.dimension).live.documents()}
        return [by_id[doc_id] for doc_id in wanted if doc_id in by_id]

    def _server_count(self, connection: Connection) -> int:
        self._server_state(connection)
        return int(connection.execute(sa.select(sa.func.count()).where(self._live())).scalar_one())

    def _server_ids(self, connection: Connection) -> list[str]:
        self._server_state(connection)
        return sorted(connection.execute(sa.select(self._vectors.c.doc_id).where(self._live())).scalars())

    def _read_steps(self, read: Callable[[VectorIndex | CachedIndex], T]) -> Steps[T]:
        """Bring the index up to date with the table, then `read` it."""
        yield Work(self._refresh, single=True)
        with self._lock:
            return read(self._index)

    # Helpers run inside a transaction -----------------------------------------------------------------------

    def _collection_update(self) -> sa.Update:
        return sa.update(self._collections).where(self._collections.c.collection_key == self._key)

    def _read_collection(self, connection: Connection, *, check_documents: bool = False) -> _Collection:
        """The collection row; with `check_documents`, also refuse a never-written row over existing documents."""
        c = self._collections
        columns: list[Any] = [c.c.name, c.c.version, c.c.generation, c.c.dimension]
        if check_documents:
            # In the same statement, hence the same snapshot: another writer's documents and its version bump
            # commit together, so documents under version 0 can only mean the row was lost.
            columns.append(sa.exists().where(self._vectors.c.collection_key == self._key).label("has_documents"))
        row = connection.execute(sa.select(*columns).where(c.c.collection_key == self._key)).first()
        if row is None:
            raise CorruptMemoryError(f"collection {self.collection!r}: its row in {c.name} is missing")
        if row.name != self.collection:
            raise CorruptMemoryError(f"collection {self.collection!r}: its row holds the name {row.name[:80]!r}")
        if check_documents and int(row.version) == 0 and row.has_documents:
            raise CorruptMemoryError(f"collection {self.collection!r}: its row in {c.name} was deleted or reset")
        return _Collection(int(row.version), int(row.generation), row.dimension)

    def _open_collection(self, connection: Connection) -> _Collection:
        """Create the collection row if missing; check its metric and dimension against this object's."""
        c = self._collections
        connection.execute(
            insert_ignoring(
                connection,
                c,
                {
                    "collection_key": self._key,
                    "name": self.collection,
                    "dimension": self._wanted_dimension,
                    "metric": self.metric,
                    "version": 0,
                    "generation": 0,
                },
            )
        )
        metric = connection.execute(sa.select(c.c.metric).where(c.c.collection_key == self._key)).scalar_one()
        state = self._read_collection(connection, check_documents=True)  # every write bumps the version
        self._check_settings(metric, state.dimension)
        if state.version == 0:
            # Never written, or made again after its rows were deleted by hand: its versions start over, so files
            # vouched for at them would hold an earlier collection's documents (a file at version 0 holds none).
            meta = self._tables.meta
            stale = connection.execute(sa.select(meta.c.name).where(self._vouches())).scalars().all()
            if stale:  # deleted by name: locks those rows alone (MariaDB locks every key a range delete scans)
                connection.execute(sa.delete(meta).where(meta.c.name.in_(stale)))
        if self.cache_dir is not None:  # names this database's tables in cache files: new tables, new token
            meta = self._tables.meta
            connection.execute(insert_ignoring(connection, meta, {"name": _CACHE_TOKEN, "value": uuid.uuid4().hex}))
        wanted = self._wanted_dimension
        if wanted is not None and state.dimension is None:
            connection.execute(self._collection_update().values(dimension=wanted))
            state = state._replace(dimension=wanted)
        return state

    def _check_stored(self) -> None:
        """Check the stored collection's metric and dimension against this object's, if it exists (read-only)."""
        for row in _stored_collections(self._db, self._tables, self._key):
            self._check_settings(row.metric, row.dimension)

    def _check_settings(self, metric: str, dimension: int | None) -> None:
        if metric != self.metric:
            raise InvalidInputError(f"collection {self.collection!r} uses the {metric!r} metric, not {self.metric!r}")
        check_stored_dimension(dimension, self._wanted_dimension, f"collection {self.collection!r}")

    def _bump(self, connection: Connection, *, clear: bool = False) -> _Collection:
        """Take the collection's write lock by bumping its version (a write first, on every database)."""
        c = self._collections
        changes: dict[str, Any] = {"version": c.c.version + 1}
        if clear:
            changes["generation"] = c.c.generation + 1
        connection.execute(self._collection_update().values(**changes))
        return self._read_collection(connection)

    def _refresh(self, connection: Connection) -> None:
        """Apply to the index what changed in the table since the version it reflects.

        Usually one statement (one round trip, one consistent snapshot): the collection row joined with the rows
        written after the version this index has seen (an index range scan). The first read, and a read after
        `clear()` moved the generation, loads every live row instead (`_load`).
        """
        c = self._collections
        while True:
            with self._lock:
                base, index = (self._generation, self._seen), self._index
            # many changes over a mapped file: map a newer one (or write it), as a new process would
            stale = isinstance(index, CachedIndex) and index.wants_newer_file()
            # Before the first load, only the collection row: the load reads the rows page by page
            rows = self._changes(connection, base[1] if base[1] >= 0 else _NEVER)
            if not rows:
                raise CorruptMemoryError(f"collection {self.collection!r}: its row in {c.name} is missing")
            head = rows[0]
            if head.name != self.collection:
                raise CorruptMemoryError(f"collection {self.collection!r}: its row holds the name {head.name[:80]!r}")
            stored = _Collection(int(head.version), int(head.generation), head.dimension)
            if base >= (stored.generation, stored.version):
                return
            loaded: VectorIndex | CachedIndex | None = None
            changes = _Changes(DocumentBatch([], [], [], np.empty((0, 0), np.float32)), [])
            if base[0] != stored.generation or stale:
                try:
                    loaded = self._load(connection, stored)
                    self._check_generation(connection, stored)
                except _GenerationMoved:
                    continue  # cleared while the rows were read: their mix is no state of the collection
            else:
                changes = self._decode([row for row in rows if row.doc_id is not None], stored.dimension)
            with self._lock:
                if (self._generation, self._seen) != base:
                    continue  # another call moved the index meanwhile; look again
                if loaded is not None:
                    self._index = loaded
                else:
                    self._index.remove(changes.removed)
                    self._index.upsert(changes.live)
                self._generation, self._seen = stored.generation, stored.version
                return

    def _changes(self, connection: Connection, seen: int) -> list[_ChangeRow]:
        """The rows of the changes query (`_refresh`): the collection row joined with the documents written after
        version `seen`. On SQLite and on PostgreSQL through psycopg (with binary results: the embeddings' bytes as
        they are) its text, compiled once, runs on the driver's cursor (`_driver.OnDriver`): SQLAlchemy's execution
        (compiled cache lookup, context, result object) cost a small collection's search about as much as its
        scan."""
        return [_ChangeRow._make(row) for row in self._changes_query.rows(connection, {"seen": seen})]

    def _load(self, connection: Connection, stored: _Collection) -> VectorIndex | CachedIndex:
        """An index of every live row, as of `stored` or later: mapped from the cache directory's newest file (see
        `memwoven._vector_cache`) brought up to date, else read from the table (written to the cache directory on
        the way, when there is one).

        The reads are separate statements, so a row may be read in a state newer than the collection row read
        before them: the caller records that older version, and the next refresh applies the newer rows again
        (idempotent), as it does deletes made meanwhile.
        """
        if stored.dimension is None:  # never stored into
            return VectorIndex(None, self.metric)
        if self.cache_dir is not None:
            cached = self._load_cached(connection, stored, stored.dimension, self.cache_dir)
            if cached is not None:
                return cached
        return self._load_rows(connection, stored.dimension)

    def _load_cached(
        self, connection: Connection, stored: _Collection, dimension: int, directory: Path
    ) -> CachedIndex | None:
        """The collection mapped from its newest cache file, with the changes since applied; written from the
        table first if there is none (one loader of the machine writes it; other processes wait for its file, except
        on an event loop's thread, where waiting would freeze the loop's other tasks), or rewritten if the changes
        since are many (unless another loader is writing one). None if no file is mapped: another loader is writing
        it, or it cannot be written (logged).
        """
        meta = self._tables.meta
        token = connection.execute(sa.select(meta.c.value).where(meta.c.name == _CACHE_TOKEN)).scalar()
        if token is None:  # tables set up by a memwoven without the cache: no identity to name files by
            return None
        identity = cache_identity(token, self._key)
        index = self._mapped(connection, stored, dimension, directory, identity)
        if index is not None and not index.needs_rewrite():
            return index
        try:
            with writing(directory, identity, wait=index is None and not _loop_running_here()) as held:
                if not held:  # another loader is writing a newer file: the overlay, or the rows, serve meanwhile
                    return index
                if index is None:  # its file, if another process wrote one while this one waited
                    index = self._mapped(connection, stored, dimension, directory, identity)
                    if index is not None:
                        return index
                path = self._write_cache(connection, stored, dimension, directory, identity, index)
        except OSError as error:
            logger.warning("vector cache in %s not written (%s): the collection is read into memory", directory, error)
            return None
        opened = CacheFile.open(path, identity, dimension, self.metric)
        return None if opened is None else CachedIndex(opened, self.metric)

    def _vouched(self, connection: Connection) -> dict[str, tuple[int, int]]:
        """The stamps of the cache files this database vouches for, each with its (generation, version)."""
        meta = self._tables.meta
        vouched = {}
        for name, value in connection.execute(sa.select(meta.c.name, meta.c.value).where(self._vouches())):
            with contextlib.suppress(ValueError):  # a row not as written vouches for nothing (files are a cache)
                _, generation, version = value.rsplit(":", 2)
                vouched[name.removeprefix(_VOUCH)] = (int(generation), int(version))
        return vouched

    def _vouches(self) -> sa.ColumnElement[bool]:
        """The meta rows vouching for this collection's cache files."""
        meta = self._tables.meta
        return sa.and_(meta.c.name.startswith(_VOUCH), meta.c.value.startswith(f"{self._key}:", autoescape=True))

    def _vouch(self, stamp: str, stored: _Collection) -> None:
        """Record in the database that the cache file `stamp` holds the collection at `stored` (its own
        transaction: the reads that wrote the file run without one), keeping the newest `_VOUCHES_KEPT`."""
        meta = self._tables.meta
        with self._db.translated(), self._db.engine.connect() as connection, _waiting_briefly(connection):
            connection.begin()
            value = f"{self._key}:{stored.generation}:{stored.version}"
            connection.execute(sa.insert(meta).values(name=f"{_VOUCH}{stamp}", value=value))
            vouched = self._vouched(connection)
            older = sorted(vouched, key=vouched.__getitem__, reverse=True)[_VOUCHES_KEPT:]
            if older:
                connection.execute(sa.delete(meta).where(meta.c.name.in_([f"{_VOUCH}{s}" for s in older])))
            connection.commit()

    def _mapped(
        self, connection: Connection, stored: _Collection, dimension: int, directory: Path, identity: str
    ) -> CachedIndex | None:
        """The newest usable cache file mapped, with the changes made since its version applied, or None."""
        vouched = {stamp: at for stamp, at in self._vouched(connection).items() if at[1] <= stored.version}
        found = newest(directory, identity, stored.generation, dimension, self.metric, vouched)
        if found is None:
            return None
        index = CachedIndex(found, self.metric)
        rows = self._changes(connection, found.version)
        changes = self._decode([row for row in rows if row.doc_id is not None], dimension)
        index.remove(changes.removed)
        index.upsert(changes.live)
        return index

    def _write_cache(
        self,
        connection: Connection,
        stored: _Collection,
        dimension: int,
        directory: Path,
        identity: str,
        index: CachedIndex | None,
    ) -> Path:
        """Write the collection's cache file as of `stored` (or later): from `index` (an older file and the changes
        since), else from the table."""
        writer = CacheWriter(directory, identity, dimension, self.metric)
        try:
            if index is not None:
                index.write(writer)
            else:
                for rows in self._live_pages(connection, self._live_count(connection)):
                    page = self._decode(rows, dimension).live  # checks every row
                    hashes = np.frombuffer(bytes.fromhex("".join(row.doc_key[:16] for row in rows)), dtype=">u8")
                    writer.add(page.ids, page.contents, [row.metadata for row in rows], page.vectors, hashes)
            self._check_generation(connection, stored)
            stamp = uuid.uuid4().hex
            path = writer.commit(stored.generation, stored.version, stamp)
        except BaseException:
            writer.abort()
            raise
        try:
            self._vouch(stamp, stored)
        except (sa.exc.SQLAlchemyError, BackendUnavailableError) as error:  # its file serves this process alone
            logger.warning("vector cache %s not recorded in the database (%s): other processes ignore it", path, error)
        return path

    def _load_rows(self, connection: Connection, dimension: int) -> VectorIndex:
        """An index of every live row, read page by page into one preallocated matrix (no per-row vectors)."""
        expected = self._live_count(connection)
        matrix = np.empty((expected, dimension), dtype=np.float32)
        ids: list[str] = []
        contents: list[str] = []
        metadata: list[FrozenDict] = []
        scales: list[Any] = []  # each page's inverse norms, computed by `_decode` as it checked the rows
        for rows in self._live_pages(connection, expected):
            page = self._decode(rows, dimension).live
            start, end = len(ids), len(ids) + len(page.ids)
            if end > len(matrix):  # rows added since the count
                matrix = np.concatenate([matrix[:start], np.empty((end - start, matrix.shape[1]), np.float32)])
            matrix[start:end] = page.vectors
            ids += page.ids
            contents += page.contents
            metadata += page.metadata
            scales.append(page.scales)
        batch = DocumentBatch(ids, contents, metadata, matrix[: len(ids)], np.concatenate(scales) if scales else None)
        return VectorIndex.of_batch(batch, self.metric)

    def _check_generation(self, connection: Connection, stored: _Collection) -> None:
        """Raise `_GenerationMoved` if the collection was cleared since `stored` was read (the rows read since may
        then mix two generations)."""
        c = self._collections
        generation = connection.execute(sa.select(c.c.generation).where(c.c.collection_key == self._key)).scalar()
        if generation != stored.generation:
            raise _GenerationMoved

    def _live_count(self, connection: Connection) -> int:
        v = self._vectors
        live = sa.and_(v.c.collection_key == self._key, sa.not_(v.c.deleted))
        return int(connection.execute(sa.select(sa.func.count()).where(live)).scalar_one())

    def _live_pages(self, connection: Connection, expected: int) -> Iterator[Sequence[Any]]:
        """The collection's live rows (doc_key, doc_id, content, metadata, embedding, deleted), about `_PAGE` at a
        time: doc keys are hex SHA-256 digests, spread evenly, so the key space is cut into ranges of about
        `_PAGE` of the `expected` rows, each read by an index range scan (no sort, no page read twice; a row
        added since the count only makes its page larger)."""
        v = self._vectors
        page = sa.select(v.c.doc_key, v.c.doc_id, v.c.content, v.c.metadata, v.c.embedding, v.c.deleted).where(
            v.c.collection_key == self._key,
            sa.not_(v.c.deleted),
            v.c.doc_key >= sa.bindparam("low"),
            v.c.doc_key < sa.bindparam("high"),
        )
        pages = min(max(1, -(-expected // _PAGE)), 16**6)
        # "" sorts before and "g" after every lowercase hex key: the ranges cover the whole key space
        bounds = ["", *(f"{(16**6 * i) // pages:06x}" for i in range(1, pages)), "g"]
        for low, high in itertools.pairwise(bounds):
            rows = connection.execute(page, {"low": low, "high": high}).all()
            if rows:
                yield rows

    def _decode(self, rows: Sequence[Any], dimension: int | None) -> _Changes:
        ids: list[str] = []
        contents: list[str] = []
        metadata: list[FrozenDict] = []
        blobs: list[bytes] = []
        removed: list[str] = []
        for row in rows:
            if key_of(row.doc_id) != row.doc_key:  # an id altered, or a row copied under another key
                raise CorruptMemoryError(
                    f"collection {self.collection!r}: document {row.doc_id!r:.80} is stored under another id's key"
                )
            if row.deleted:
                removed.append(row.doc_id)
                continue
            blob = bytes(row.embedding)
            if dimension is None or len(blob) != 4 * dimension:
                raise CorruptMemoryError(
                    f"collection {self.collection!r}: document {row.doc_id!r} has a {len(blob)}-byte embedding, "
                    f"expected {dimension} float32 values"
                )
            try:
                meta = json.loads(row.metadata)
                if not isinstance(meta, dict):
                    raise ValueError("not a JSON object")
                metadata.append(freeze_json(meta))
            except (ValueError, RecursionError) as error:  # RecursionError: nested deeper than JSON is read
                raise CorruptMemoryError(
                    f"collection {self.collection!r}: document {row.doc_id!r} has unreadable metadata ({error})"
                ) from None
            ids.append(row.doc_id)
            contents.append(row.content)
            blobs.append(blob)
        # A read-only view of the joined bytes (no copy on little-endian machines): the index copies the rows in.
        joined = np.frombuffer(b"".join(blobs), dtype="<f4").astype(np.float32, copy=False)
        vectors = joined.reshape(len(ids), dimension or 0)
        scales = stored_scales(
            vectors,
            self.metric,
            lambda row, problem: CorruptMemoryError(
                f"collection {self.collection!r}: document {ids[row]!r}: its embedding is damaged: {problem}"
            ),
        )
        return _Changes(DocumentBatch(ids, contents, metadata, vectors, scales), removed)

    # After commit -------------------------------------------------------------------------------------------

    def _opened(self, state: _Collection) -> None:
        with self._lock:
            self._learn_dimension(state.dimension)
            if state.version == 0 and self._seen < 0:  # never written: the empty index is up to date
                self._generation, self._seen = state.generation, state.version

    def _applied(
        self, state: _Collection, change: Callable[[VectorIndex | CachedIndex], object], *, cleared: bool = False
    ) -> None:
        """Apply this object's committed write to its index, if the index was current just before it."""
        with self._lock:
            self._learn_dimension(state.dimension)
            if self._embeddings is not None:  # server-side search keeps no index
                return
            before = (state.generation - cleared, state.version - 1)
            if (self._generation, self._seen) == before:
                change(self._index)
                self._generation, self._seen = state.generation, state.version

    def _learn_dimension(self, dimension: int | None) -> None:
        """Give a still dimensionless (hence empty) index the collection's dimension."""
        if dimension is not None and self._index.dimension is None:
            self._index = VectorIndex(dimension, self.metric)


def list_collections(
    url_or_engine: str | URL | Engine, *, table_prefix: str = "memwoven_", schema: str | None = None
) -> list[CollectionInfo]:
    """The collections stored under `table_prefix` (and `schema`) in the database, sorted by name.

    Read-only: creates no table, and no file for an SQLite database that does not exist yet.
    """
    tables = Tables.build(
        check_identifier(table_prefix, "table_prefix"), None if schema is None else check_identifier(schema, "schema")
    )
    database = Database(url_or_engine)
    try:
        rows = _stored_collections(database, tables)
    finally:
        database.close()
    return sorted(CollectionInfo(row.name, check_metric(row.metric), row.dimension) for row in rows)


def _stored_collections(database: Database, tables: Tables, key: str | None = None) -> Sequence[Any]:
    """The (name, metric, dimension) rows of every stored collection, or of the one `key` names.

    Read-only: creates no table, and no file for an SQLite database that does not exist yet.
    """
    if not database.exists():
        return []
    c = tables.collections

    def read(connection: Connection) -> Sequence[Any]:
        if not sa.inspect(connection).has_table(c.name, schema=c.schema):
            return []
        query = sa.select(c.c.name, c.c.metric, c.c.dimension)
        return connection.execute(query if key is None else query.where(c.c.collection_key == key)).all()

    return database.transact(Work(read))


def _ignore(_: object) -> None:
    return None


def _sorted_ids(index: VectorIndex | CachedIndex) -> list[str]:
    return sorted(index.ids)


_OFF = frozenset({"off", "false", "no", "0", ""})
_ON = frozenset({"on", "true", "yes", "1"})


def _check_cache_dir(cache_dir: str | os.PathLike[str] | bool | None) -> Path | None:
    """The cache directory `cache_dir` names, absolute: False (or "off", "false", "no", "0", in any case) none, True
    (or "on", "true", "yes", "1") `default_cache_dir()`."""
    word = cache_dir.strip().lower() if isinstance(cache_dir, str) else None
    if cache_dir is None or cache_dir is False or word in _OFF:
        return None
    if cache_dir is True or word in _ON:
        return default_cache_dir().expanduser().resolve()
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise InvalidInputError(f"cache_dir must be a directory, True or False, got {cache_dir!r}")
    return Path(cache_dir).expanduser().resolve()  # a later chdir does not move it
