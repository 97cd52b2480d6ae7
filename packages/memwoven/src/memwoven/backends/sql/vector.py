"""`SQLVectorMemory`: one collection of embedded documents in an SQL table, searched exactly in process.

The table is the durable copy; each object searches a `VectorIndex` it keeps in step with it incrementally.
Every write bumps the collection's `version` and stamps the rows it writes (upserts, and tombstones for
deletes) with it, under the collection row's lock, so versions follow commit order. Before each read an object
reads the collection row (one small query): if the version moved, it fetches only the rows stamped after the
version it has seen and applies them; if the `generation` moved (someone cleared the collection), it reloads.
Its own writes are applied to its index directly after they commit.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from memwoven._steps import Steps, twins
from memwoven.backends.sql._base import SQLBackend, SQLOptions
from memwoven.backends.sql._engine import Database, Work
from memwoven.backends.sql._pgvector import (
    EmbeddingsTable,
    Search,
    approximate_candidates,
    candidates,
    check_hnsw_dimension,
    check_index_options,
    check_search_mode,
    ensure_hnsw,
    jsonb_metadata,
    norms,
)
from memwoven.backends.sql._schema import Tables, check_identifier, insert_ignoring, key_of, upsert
from memwoven.contracts import CollectionInfo, DocumentsIn, Metric, check_collection, check_ids
from memwoven.errors import CorruptMemoryError, DimensionMismatchError, InvalidInputError
from memwoven.models import FrozenDict, ScoredDocument, VectorDocument, freeze_json
from memwoven.vector_index import (
    DocumentBatch,
    SearchQuery,
    VectorIndex,
    VectorMemoryBase,
    check_dimension,
    check_metric,
    check_stored_dimension,
    require_utf8,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["SQLVectorMemory", "list_collections"]

T = TypeVar("T")
_CHUNK = 500  # ids per DELETE ... IN (...) statement


class _Collection(NamedTuple):
    """The collection row: `version` moves on every write, `generation` on every clear."""

    version: int
    generation: int
    dimension: int | None


class _Changes(NamedTuple):
    live: DocumentBatch
    removed: list[str]


def _dump_metadata(metadata: FrozenDict) -> str:
    return json.dumps(metadata, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


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
        self._changes_query = (  # built once: a refresh runs before every read
            sa.select(c.c.name, c.c.version, c.c.generation, c.c.dimension)
            .add_columns(v.c.doc_id, v.c.content, v.c.metadata, v.c.embedding, v.c.deleted)
            .select_from(c.outerjoin(v, newer))
            .where(c.c.collection_key == self._key)
        )
        self._lock = threading.Lock()  # guards the index and the state below; never held during I/O
        self._index = VectorIndex(dimension, self.metric)
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
        batch = self._index.prepare(documents)  # validated before anything is written
        require_utf8(batch)
        if self._db.dialect == "postgresql" and any("\x00" in content for content in batch.contents):
            raise InvalidInputError("PostgreSQL text cannot hold NUL characters (document content)")
        if not batch.ids:
            yield Work(_ignore)
            return
        dimension = int(batch.vectors.shape[1])
        if self.hnsw is not None:
            check_hnsw_dimension(dimension)
        vectors = batch.vectors.astype("<f4", copy=False)
        rows = [
            {
                "collection_key": self._key,
                "doc_key": key_of(doc_id),
                "doc_id": doc_id,
                "content": content,
                "metadata": _dump_metadata(metadata),
                "embedding": vector.tobytes(),
                "deleted": False,
            }
            for doc_id, content, metadata, vector in zip(batch.ids, batch.contents, batch.metadata, vectors)
        ]
        server_rows = (
            [
                {
                    "collection_key": self._key,
                    "doc_key": row["doc_key"],
                    "embedding": vector,
                    "norm": norm,
                    "meta": jsonb_metadata(row["metadata"]),
                }
                for row, vector, norm in zip(rows, vectors, norms(vectors))
            ]
            if self._embeddings is not None
            else []
        )

        def body(connection: Connection) -> _Collection:
            state = self._bump(connection)
            if state.dimension is None:
                connection.execute(self._collection_update().values(dimension=dimension))
            elif state.dimension != dimension:
                raise DimensionMismatchError(
                    f"embedding has dimension {dimension}, collection {self.collection!r} has {state.dimension}"
                )
            upsert(connection, self._vectors, [{**row, "version": state.version} for row in rows])
            if self._embeddings is not None:
                upsert(connection, self._embeddings.table, server_rows)
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

        self._applied((yield Work(body, write=True)), VectorIndex.clear, cleared=True)

    clear, aclear = twins(_clear)

    def _ids(self) -> Steps[list[str]]:
        """The ids of every stored document, sorted."""
        if self._embeddings is not None:
            ids: list[str] = yield Work(self._server_ids)
            return ids
        return (yield from self._read_steps(_sorted_ids))

    ids, aids = twins(_ids)

    def drop_tables(self) -> None:
        """Drop every table of this prefix (all the sessions and collections stored under it). Irreversible."""
        if self._embeddings is not None:
            with self._db.translated(), self._db.engine.begin() as connection:
                self._embeddings.drop(connection)
        super().drop_tables()

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

        def decode(rows: Sequence[Any]) -> DocumentBatch:
            return self._decode(rows, dimension).live

        search = Search(embeddings, self._vectors, self._key, self.metric, query, vector, decode)
        if self.hnsw is None:
            batches = candidates(connection, search)
        else:  # _ensure_hnsw ran first
            batches = approximate_candidates(connection, search, self.hnsw, bool(self._iterative))
        index = VectorIndex(dimension, self.metric)
        for batch in batches:
            index.upsert(batch)
        return index.query(query)

    def _server_get(self, connection: Connection, wanted: list[str]) -> list[VectorDocument]:
        state = self._server_state(connection)
        v = self._vectors
        keys = list(dict.fromkeys(key_of(doc_id) for doc_id in wanted))
        found: list[Any] = []
        for start in range(0, len(keys), _CHUNK):
            columns = (v.c.doc_id, v.c.content, v.c.metadata, v.c.embedding, v.c.deleted)
            chunk = v.c.doc_key.in_(keys[start : start + _CHUNK])
            found.extend(connection.execute(sa.select(*columns).where(self._live(), chunk)).all())
        by_id = {document.id: document for document in self._decode(found, state.dimension).live.documents()}
        return [by_id[doc_id] for doc_id in wanted if doc_id in by_id]

    def _server_count(self, connection: Connection) -> int:
        self._server_state(connection)
        return int(connection.execute(sa.select(sa.func.count()).where(self._live())).scalar_one())

    def _server_ids(self, connection: Connection) -> list[str]:
        self._server_state(connection)
        return sorted(connection.execute(sa.select(self._vectors.c.doc_id).where(self._live())).scalars())

    def _read_steps(self, read: Callable[[VectorIndex], T]) -> Steps[T]:
        """Bring the index up to date with the table, then `read` it."""
        yield Work(self._refresh)
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
        written after the version this index has seen (an index range scan). When `clear()` moved the generation
        meanwhile, a second statement reloads every live row.
        """
        c, v = self._collections, self._vectors
        columns = (v.c.doc_id, v.c.content, v.c.metadata, v.c.embedding, v.c.deleted)
        while True:
            with self._lock:
                base = (self._generation, self._seen)
            rows = connection.execute(self._changes_query, {"seen": base[1]}).all()
            if not rows:
                raise CorruptMemoryError(f"collection {self.collection!r}: its row in {c.name} is missing")
            head = rows[0]
            if head.name != self.collection:
                raise CorruptMemoryError(f"collection {self.collection!r}: its row holds the name {head.name[:80]!r}")
            stored = _Collection(int(head.version), int(head.generation), head.dimension)
            if base >= (stored.generation, stored.version):
                return
            reload = base[0] != stored.generation
            found: Sequence[Any] = [row for row in rows if row.doc_id is not None]
            if reload:
                live = sa.select(*columns).where(v.c.collection_key == self._key, sa.not_(v.c.deleted))
                found = connection.execute(live).all()
            changes = self._decode(found, stored.dimension)
            with self._lock:
                if (self._generation, self._seen) != base:
                    continue  # another call moved the index meanwhile; look again
                index = VectorIndex(stored.dimension, self.metric) if reload else self._index
                index.remove(changes.removed)
                index.upsert(changes.live)
                self._index = index
                self._generation, self._seen = stored.generation, stored.version
                return

    def _decode(self, rows: Sequence[Any], dimension: int | None) -> _Changes:
        ids: list[str] = []
        contents: list[str] = []
        metadata: list[FrozenDict] = []
        blobs: list[bytes] = []
        removed: list[str] = []
        for row in rows:
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
            except ValueError as error:
                raise CorruptMemoryError(
                    f"collection {self.collection!r}: document {row.doc_id!r} has unreadable metadata ({error})"
                ) from None
            ids.append(row.doc_id)
            contents.append(row.content)
            blobs.append(blob)
        # A read-only view of the joined bytes (no copy on little-endian machines): the index copies the rows in.
        joined = np.frombuffer(b"".join(blobs), dtype="<f4").astype(np.float32, copy=False)
        vectors = joined.reshape(len(ids), dimension or 0)
        return _Changes(DocumentBatch(ids, contents, metadata, vectors), removed)

    # After commit -------------------------------------------------------------------------------------------

    def _opened(self, state: _Collection) -> None:
        with self._lock:
            self._learn_dimension(state.dimension)
            if state.version == 0 and self._seen < 0:  # never written: the empty index is up to date
                self._generation, self._seen = state.generation, state.version

    def _applied(self, state: _Collection, change: Callable[[VectorIndex], object], *, cleared: bool = False) -> None:
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


def _sorted_ids(index: VectorIndex) -> list[str]:
    return sorted(index.ids)
