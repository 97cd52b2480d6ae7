"""Server-side search for `SQLVectorMemory(search="server")` on PostgreSQL with the pgvector extension.

The documents stay where client-side search keeps them (`{prefix}vectors`: id, content, metadata, float32 blob,
version, tombstones), written in the same transactions; beside them `{prefix}pgvector_embeddings` holds each live
document's embedding as a pgvector ``vector``, its norm, and its metadata as ``jsonb`` (NULL where the JSON text holds
an escaped NUL, which ``jsonb`` cannot), for the database to search.

A search is exact: the database orders the collection's rows by distance (pgvector's ``<#>``, minus the dot product, for
dot; for cosine ``1 + <#>`` over the stored norm times the query's, not ``<=>``, whose float32 squared norms underflow
for short rows) and returns them a page at a time (the pages after the first in one snapshot, `_Pages`); the rows read
are then scored again in float32 by `VectorIndex`, the same code client-side search runs, so scores, the exclusive
threshold, ties (by id) and filters are exactly those of client-side search. pgvector's float arithmetic differs from
numpy's by at most `rounding_margin` (a bound on the rounding error of both dot products), so paging stops only once no
unread row can score within reach of the k-th match, and the threshold is pushed into SQL widened by the same margin.
Filters are applied in Python (`memwoven.filters`, the one definition); their top-level equality and ``$in`` parts on
plain keys become a ``jsonb`` containment pre-selection (a superset of the matches), which a GIN index answers.

With ``index="hnsw"`` a search is approximate: each collection gets its own partial HNSW index on
``embedding::vector(d)`` (``WHERE collection_key = ...``: the table is shared by every collection of the prefix, and
an index on a ``vector`` column needs a fixed dimension), and a search asks it for the nearest rows a page at a time
with ``hnsw.ef_search`` and, from pgvector 0.8 and where needed, ``hnsw.iterative_scan = relaxed_order`` (so the
jsonb pre-selection in the same query does not starve the index scan) set by each page statement itself for its own
transaction: one round trip per page, nothing left set on the connection. Its SQL is compiled once per collection
and page shape and sent on psycopg's own cursor (the query vector a parameter in pgvector's binary format, results in
binary format), prepared once per connection. The rows found are rescored exactly as above, so
scores are exact float32 scores and the threshold stays exclusive; what may differ from exact search is which rows
are found (recall below 1).
"""

from __future__ import annotations

import binascii
import json
import math
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memwoven._cache import LRUCache
from memwoven.backends.sql import _driver
from memwoven.backends.sql._schema import KEY, Tables
from memwoven.contracts import Metric
from memwoven.vector_index import DocumentBatch, Matrix, SearchQuery, rounding_margin

__all__ = [
    "HNSW_MAX_DIMENSION",
    "EmbeddingsTable",
    "Hnsw",
    "QueryVector",
    "Search",
    "approximate_candidates",
    "candidates",
    "check_hnsw_dimension",
    "check_index_options",
    "check_search_mode",
    "ensure_hnsw",
    "jsonb_metadata",
    "norms",
    "register_vector_dumper",
]

_FIRST_PAGE = 64  # rows of the first page (at least 4 * top_k); each next page doubles
_PAGE_LIMIT = 65536
HNSW_MAX_DIMENSION = 2000
"""The most dimensions pgvector indexes in a ``vector`` column."""
_ITERATIVE_SCANS = (0, 8, 0)  # the pgvector version that added hnsw.iterative_scan


def check_search_mode(search: str) -> str:
    """Validate `search`: "client" (the in-process index) or "server" (pgvector)."""
    from memwoven.errors import InvalidInputError

    if search not in ("client", "server"):
        raise InvalidInputError(f"unknown search {search!r}; use 'client' or 'server'")
    return search


@dataclass(frozen=True)
class Hnsw:
    """The HNSW options of `SQLVectorMemory(index="hnsw")`: the index's `m` and `ef_construction` (used when the
    index is built) and the `ef_search` of every search (the size of the candidate list; larger: better recall,
    slower)."""

    m: int = 16
    ef_construction: int = 64
    ef_search: int = 40


_BOUNDS = {"hnsw_m": (2, 100), "hnsw_ef_construction": (4, 1000), "ef_search": (1, 1000)}  # pgvector's own limits


def check_index_options(
    search: str,
    index: str | None,
    hnsw_m: int | None,
    hnsw_ef_construction: int | None,
    ef_search: int | None,
) -> Hnsw | None:
    """Validate the index options: `index` None (exact search) or "hnsw" (server search only), and the HNSW
    parameters (pgvector's ranges; given only with ``index="hnsw"``). The HNSW options, or None."""
    from memwoven.errors import InvalidInputError

    given = {"hnsw_m": hnsw_m, "hnsw_ef_construction": hnsw_ef_construction, "ef_search": ef_search}
    if index is None:
        named = [name for name, value in given.items() if value is not None]
        if named:
            raise InvalidInputError(f"{', '.join(named)} only apply with index='hnsw'")
        return None
    if index != "hnsw":
        raise InvalidInputError(f"unknown index {index!r}; use 'hnsw' (or leave it out for exact search)")
    if search != "server":
        raise InvalidInputError("index='hnsw' needs search='server' (the index lives in PostgreSQL with pgvector)")
    for name, value in given.items():
        low, high = _BOUNDS[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high):
            raise InvalidInputError(f"{name} must be an int from {low} to {high}, got {value!r}")
    options = Hnsw(
        **{key: value for key, value in zip(("m", "ef_construction", "ef_search"), given.values()) if value is not None}
    )
    if options.ef_construction < 2 * options.m:
        raise InvalidInputError(
            f"hnsw_ef_construction must be at least twice hnsw_m, got {options.ef_construction} with m={options.m}"
        )
    return options


def check_hnsw_dimension(dimension: int | None) -> None:
    """Refuse a dimension pgvector cannot index (more than `HNSW_MAX_DIMENSION`)."""
    from memwoven.errors import InvalidInputError

    if dimension is not None and dimension > HNSW_MAX_DIMENSION:
        raise InvalidInputError(
            f"index='hnsw' indexes at most {HNSW_MAX_DIMENSION} dimensions (pgvector), got {dimension}; "
            "use exact server search (no index) or client-side search"
        )


class EmbeddingsTable:
    """`{prefix}pgvector_embeddings`, in the schema of the other tables."""

    def __init__(self, tables: Tables) -> None:
        from pgvector.sqlalchemy import Vector  # the `postgres` extra

        vectors = tables.vectors
        prefix = vectors.name.removesuffix("vectors")
        self.metadata = sa.MetaData(schema=vectors.schema)
        self.table = sa.Table(
            f"{prefix}pgvector_embeddings",
            self.metadata,
            sa.Column("collection_key", KEY, primary_key=True),
            sa.Column("doc_key", KEY, primary_key=True),
            sa.Column("embedding", Vector(), nullable=False),
            sa.Column("norm", sa.Float(53), nullable=False),
            sa.Column("meta", _JSONBText(), nullable=True),  # NULL where the JSON text holds an escaped NUL
        )
        sa.Index(f"{prefix}pgvector_by_norm", self.table.c.collection_key, self.table.c.norm)
        sa.Index(f"{prefix}pgvector_by_meta", self.table.c.meta, postgresql_using="gin")
        self.prefix = prefix

    def create(self, connection: Connection) -> None:
        """Create the extension (if this role may) and the table, if missing."""
        ensure_extension(connection)
        self.metadata.create_all(connection, checkfirst=True)

    def drop(self, connection: Connection) -> None:
        """Drop the table."""
        self.metadata.drop_all(connection, checkfirst=True)


class _JSONBText(sa.types.UserDefinedType[str]):
    """A ``jsonb`` column written from JSON text as it is (SQLAlchemy's JSONB would encode the text as a string)."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "JSONB"

    def bind_expression(self, bindvalue: Any) -> Any:
        return sa.cast(sa.type_coerce(bindvalue, sa.Text), _jsonb_type())


def ensure_extension(connection: Connection) -> None:
    """Create pgvector's `vector` extension unless the database has it."""
    found = connection.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).first()
    if found is None:
        connection.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def ensure_hnsw(
    connection: Connection, embeddings: EmbeddingsTable, collection_key: str, dimension: int, metric: Metric, hnsw: Hnsw
) -> bool:
    """Build the collection's HNSW index unless it exists; whether pgvector has iterative index scans (0.8+).

    The index is partial (this collection's rows only: the table is shared by the prefix's collections) and on
    ``embedding::vector(dimension)`` (an index needs a fixed dimension; the column has none). Its name depends on
    the collection only: the options of the object that builds it stay until it is dropped.
    """
    check_hnsw_dimension(dimension)
    table = embeddings.table
    name = f"{embeddings.prefix}hnsw_{collection_key[:16]}"
    qualified = f"{table.schema}.{name}" if table.schema else name
    if connection.execute(sa.text("SELECT to_regclass(:name)"), {"name": qualified}).scalar() is None:
        target = f"{table.schema}.{table.name}" if table.schema else table.name
        operators = "vector_cosine_ops" if metric == "cosine" else "vector_ip_ops"
        # Every value below is validated (ints, a hex key, lowercase identifiers): nothing to quote.
        connection.execute(
            sa.text(
                f"CREATE INDEX IF NOT EXISTS {name} ON {target} USING hnsw "
                f"((embedding::vector({int(dimension)})) {operators}) "
                f"WITH (m = {int(hnsw.m)}, ef_construction = {int(hnsw.ef_construction)}) "
                f"WHERE collection_key = '{_hex(collection_key)}'"
            )
        )
    version = connection.execute(sa.text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar()
    return _version(str(version or "0")) >= _ITERATIVE_SCANS


def _hex(key: str) -> str:
    if not key or any(character not in "0123456789abcdef" for character in key):
        raise ValueError(f"not a row key: {key!r}")
    return key


def jsonb_metadata(text: str) -> str | None:
    """The metadata's JSON text for the `jsonb` column, or None where it holds an escaped NUL."""
    return None if "\\u0000" in text else text


def norms(vectors: Matrix) -> list[float]:
    """The rows' Euclidean norms (in float64)."""
    wide = vectors.astype(np.float64)
    found: list[float] = np.sqrt(np.einsum("ij,ij->i", wide, wide)).tolist()
    return found


def _jsonb_type() -> Any:
    """PostgreSQL's JSONB type; its dialect package is imported at the first server-side use, not with memwoven."""
    from sqlalchemy.dialects.postgresql import JSONB

    return JSONB


def _equalities(spec: Mapping[str, Any]) -> list[tuple[str, list[Any]]]:
    """(key, values) per top-level field whose value every match equals one of (as JSON: `true` is not 1).

    Only keys without a dot (a dotted key also matches a nested path) and scalar operands that jsonb compares as
    Python does (`_plain_scalar`) of ``$eq``/``$in`` or a bare value; anything else selects nothing here (Python
    decides).
    """
    conditions: list[tuple[str, list[Any]]] = []
    for key, condition in spec.items():
        if key.startswith("$") or "." in key or "\x00" in key:
            continue
        if isinstance(condition, Mapping):
            if set(condition) == {"$eq"}:
                operands = [condition["$eq"]]
            elif set(condition) == {"$in"} and isinstance(condition["$in"], (list, tuple)):
                operands = list(condition["$in"])
            else:
                continue
        else:
            operands = [condition]
        if not operands or not all(_plain_scalar(operand) for operand in operands):
            continue
        conditions.append((key, operands))
    return conditions


def _plain_scalar(value: Any) -> bool:
    """Whether jsonb equality with `value`'s JSON text agrees with Python's: strings without NUL, booleans, and
    numbers that no stored value of another decimal form equals.

    jsonb compares the decimal text, Python the exact value: an integer beyond 2**53 or a float of such an integer
    (2.0**80, 1e23, whose shortest form is not the integer it equals) may equal a stored value written otherwise.
    Any other float equals only itself (stored, as here, in its shortest form) or an integer written exactly.
    """
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, bool):
        return True
    if isinstance(value, float):
        return math.isfinite(value) and (not value.is_integer() or abs(value) <= 2**53)
    return isinstance(value, int) and abs(value) <= 2**53


@dataclass(frozen=True)
class Search:
    """What a server search reads: the embeddings and documents tables, the collection's key and metric, the query
    and its vector, and `decode(rows)`, which turns selected document rows into a `DocumentBatch`."""

    embeddings: sa.Table
    vectors: sa.Table
    collection_key: str
    metric: Metric
    query: SearchQuery
    vector: Matrix
    decode: Callable[[Sequence[Any]], DocumentBatch]


def candidates(connection: Connection, search: Search) -> list[DocumentBatch]:
    """Every row whose exact (float32) score may place it among the query's hits, read in pages by distance.

    The batches returned hold every matching row of the true top k (with ties) and may hold more; the caller ranks
    them exactly.
    """
    e, collection_key, metric, query, vector = (
        search.embeddings,
        search.collection_key,
        search.metric,
        search.query,
        search.vector,
    )
    query_norm = float(np.linalg.norm(vector.astype(np.float64)))
    dimension = len(vector)
    values = _operand(connection, vector)
    if metric == "cosine":
        # Not pgvector's <=>, which sums the squared norms in float32: a short row's underflows (a NaN distance,
        # sorted last, or a few bits left); the dot product over the stored float64 norm is as exact as the scores.
        distance = 1.0 + e.c.embedding.max_inner_product(values) / (e.c.norm * query_norm)
        max_norm = 1.0
    else:
        distance = e.c.embedding.max_inner_product(values)  # minus the dot product
        found = connection.execute(sa.select(sa.func.max(e.c.norm)).where(e.c.collection_key == collection_key))
        max_norm = float(found.scalar() or 0.0)
    slack = rounding_margin(metric, dimension, query_norm, max_norm)
    distance = distance.label("distance")
    conditions: list[Any] = [e.c.collection_key == collection_key, *_preselection(e, query)]
    if query.threshold is not None:
        # score > threshold; pgvector's distance is 1 - score (cosine) or -score (dot)
        conditions.append(distance < _distance_bound(metric, query.threshold) + slack)
    batches: list[DocumentBatch] = []
    matched: list[float] = []  # the pgvector distances of the matching rows read, ascending
    with _Pages(connection, max(_FIRST_PAGE, 4 * query.top_k)) as pages:
        while True:
            # The ordering reads the embeddings table alone; only the page's rows are joined to their documents.
            where = list(conditions)
            if len(matched) >= query.top_k:  # read only what may still reach the k-th match
                where.append(distance <= matched[query.top_k - 1] + 2 * slack)
            ranked = sa.select(e.c.doc_key, distance).where(*where).order_by(distance, e.c.doc_key)
            rows = _read_page(connection, ranked.limit(pages.size).offset(pages.offset), search, batches)
            matched.extend(distance for distance, match, _ in rows if match)
            if len(rows) < pages.size:
                return batches
            if len(matched) >= query.top_k and rows[-1][0] > matched[query.top_k - 1] + 2 * slack:
                return batches  # every unread row is farther still
            if pages.advance():
                batches.clear()
                matched.clear()


def approximate_candidates(connection: Connection, search: Search, hnsw: Hnsw, iterative: bool) -> list[DocumentBatch]:
    """The rows the collection's HNSW index (`ensure_hnsw`) finds nearest, until `query.top_k` of them match.

    Pages of `top_k` + 1 rows, then twice as many each time (every page is one index scan, skipping what earlier pages
    read; the pages after the first in one snapshot, `_Pages`), until `top_k` rows read match the filter and a row
    farther than the k-th was read (so ties with it are read too), the index has no more, or a whole page lies beyond
    the threshold. `ef_search` (and pgvector's iterative scan, when `iterative`) is set by each page's own statement,
    for its own transaction (`_settings`; in the snapshot, until it ends: a later page never needs the scan off once an
    earlier one turned it on). Each page statement's SQL is compiled once per shape (`_hnsw_page_sql`) and sent as it
    is, with the values as parameters.
    """
    metric, query, vector = search.metric, search.query, search.vector
    equalities = _equalities(query.filter or {})
    binary = register_vector_dumper(connection)
    values: dict[str, Any] = {
        _QUERY_VECTOR: QueryVector(_vector_payload(vector)) if binary else str(vector.tolist()),
        _COLLECTION_KEY: search.collection_key,
        **_preselection_values(equalities),
    }
    shape = tuple(len(options) for _, options in equalities)
    query_norm = float(np.linalg.norm(vector.astype(np.float64)))
    batches: list[DocumentBatch] = []
    matched: list[float] = []  # the distances of the matching rows read
    farthest = -math.inf  # the largest distance read
    max_norm = 1.0 if metric == "cosine" else 0.0  # of the rows read (dot: the margin scales with it)
    # One row more than asked in the first page: a row beyond the k-th tells that no tie is left unread.
    with _Pages(connection, query.top_k + 1) as pages:
        while True:
            # A scan returns at most ef_search rows unless iterative: needed when the pre-selection rejects rows the
            # index finds, or this page ends beyond them (an unfiltered first page, the common case, is cheaper
            # without).
            scan = iterative and (bool(equalities) or pages.offset + pages.size > hnsw.ef_search)
            page_shape = _PageShape(len(vector), binary, shape, scan, pages.size, pages.offset)
            page_sql = _hnsw_page_sql(connection, search, page_shape)
            found = list(_driver.rows(connection, page_sql.text, page_sql.arguments(values, hnsw), binary=binary))
            rows = _absorb(found, search, batches, base64=not binary)
            matched.extend(distance for distance, match, _ in rows if match)
            farthest = max([farthest, *(distance for distance, _, _ in rows)])
            if metric == "dot":
                max_norm = max([max_norm, *(norm for _, _, norm in rows)])
            if len(rows) < pages.size:
                return batches
            # Equal vectors have equal distances: a row read beyond the k-th match's distance means no exact tie is
            # cut (near ties within rounding are left to approximation, or a second page would be the rule on dense
            # data).
            if len(matched) >= query.top_k and farthest > sorted(matched)[query.top_k - 1]:
                return batches  # the index scan goes outwards: what it has not read yet is farther (approximately)
            slack = rounding_margin(metric, len(vector), query_norm, max_norm)
            if query.threshold is not None and min(distance for distance, _, _ in rows) >= (
                _distance_bound(metric, query.threshold) + slack
            ):
                return batches  # every row of the page is beyond the threshold, and so are the rows after them
            if pages.advance():
                batches.clear()
                matched.clear()
                farthest = -math.inf
                max_norm = 1.0 if metric == "cosine" else 0.0


class _Pages:
    """The offset and size of a search's pages: `size` rows first, then twice as many each time (up to `_PAGE_LIMIT`).

    The first page is one statement, a snapshot of its own (no round trip more for the common single-page search);
    the pages after it share one REPEATABLE READ snapshot, begun by `advance` and ended with the ``with`` block.
    Pages of separate statements would each see the writes committed before them: a row deleted before the offset
    would shift an unread row into the pages already read, and skip it.
    """

    def __init__(self, connection: Connection, size: int) -> None:
        self.connection = connection
        self.offset = 0
        self.size = size
        self.shared = False  # whether the pages are read in the snapshot

    def __enter__(self) -> _Pages:
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        # Read only: nothing to commit, and ROLLBACK also ends a failed transaction. Not on a connection SQLAlchemy
        # invalidated (lost, or cancelled from async code), which refuses every statement until rolled back: that
        # would hide the error that invalidated it, which a retry or the cancellation needs to see.
        if not self.shared or self.connection.invalidated:
            return
        try:
            self.connection.exec_driver_sql("ROLLBACK")
        except BaseException:
            self.connection.invalidate()  # never kept with the snapshot open
            if error is None:
                raise

    def advance(self) -> bool:
        """Move to the next page; True if the search starts again, its rows read so far to be dropped: the snapshot
        begins here, and its first page holds the rows of the first page and the next."""
        following = min(2 * self.size, _PAGE_LIMIT)
        if self.shared:
            self.offset, self.size = self.offset + self.size, following
            return False
        # The read connection is in autocommit: this transaction is the driver's only one, ended in __exit__.
        self.connection.exec_driver_sql("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        self.shared = True
        self.offset, self.size = 0, self.offset + self.size + following
        return True


_QUERY_VECTOR, _COLLECTION_KEY = "query_vector", "collection_key"  # the page statement's parameter names
_EF_SEARCH = ("ef_search_setting", "ef_search")
_ITERATIVE_SCAN = ("iterative_scan_setting", "iterative_scan")


class _PageShape(NamedTuple):
    """What an HNSW page statement's SQL depends on besides the tables and the collection (`_hnsw_page_sql`): the
    dimension, whether the query vector is bound in binary, the number of values of each pre-selection equality,
    whether the statement turns the iterative scan on, and the page's LIMIT and OFFSET."""

    dimension: int
    binary: bool
    preselection: tuple[int, ...]
    iterative: bool
    limit: int
    offset: int


@dataclass(frozen=True)
class _PageSql:
    """An HNSW page statement as the driver takes it: its SQL text and its parameters' names (in order, for a
    positional paramstyle)."""

    text: str
    names: tuple[str, ...]
    positional: bool

    def arguments(self, values: Mapping[str, Any], hnsw: Hnsw) -> dict[str, Any] | tuple[Any, ...]:
        """The statement's parameters: `values` (the query vector, the pre-selection's values) and the settings."""
        settings = {
            _EF_SEARCH[0]: "hnsw.ef_search",
            _EF_SEARCH[1]: str(hnsw.ef_search),
            _ITERATIVE_SCAN[0]: "hnsw.iterative_scan",
            _ITERATIVE_SCAN[1]: "relaxed_order",
        }
        found = [(name, values[name] if name in values else settings[name]) for name in self.names]
        return tuple(value for _, value in found) if self.positional else dict(found)


_PAGE_SQL: LRUCache[tuple[Any, ...], _PageSql] = LRUCache(512)  # a few per (collection, top_k, filter shape)


def _hnsw_page_sql(connection: Connection, search: Search, shape: _PageShape) -> _PageSql:
    """The SQL of one HNSW page statement, compiled once per database driver, tables, collection, metric and shape.

    Building every page's SQLAlchemy statement and its cache key (for SQLAlchemy's compiled cache) took longer than
    PostgreSQL's index scan of a small collection: the text is kept here instead and sent as it is, on psycopg's
    cursor with binary results (`memwoven.backends.sql._driver.rows`).
    """
    e, v = search.embeddings, search.vectors
    dialect = connection.dialect
    key = (
        dialect.name,
        dialect.driver,
        dialect.paramstyle,
        e.schema,
        e.name,
        v.schema,
        v.name,
        search.collection_key,
        search.metric,
        shape,
    )
    found = _PAGE_SQL.get(key)
    if found is None:
        compiled = _hnsw_page_statement(search, shape).compile(
            dialect=dialect, compile_kwargs={"render_postcompile": True}
        )
        positional = bool(compiled.positional)
        inline = compiled.literal_execute_params  # rendered in the text
        named = (name for bind, name in compiled.bind_names.items() if bind not in inline)
        names = tuple(compiled.positiontup or ()) if positional else tuple(dict.fromkeys(named))
        found = _PageSql(compiled.string, names, positional)
        _PAGE_SQL.put(key, found)
    return found


def _hnsw_page_statement(search: Search, shape: _PageShape) -> sa.Select[Any]:
    """The page statement of `_hnsw_page_sql`: the index's nearest rows after `shape.offset`, joined to their
    documents; every value that varies between searches is a named parameter (`_PageSql.arguments`)."""
    from pgvector.sqlalchemy import Vector

    e = search.embeddings
    indexed = sa.cast(e.c.embedding, Vector(shape.dimension))  # the indexed expression, as the index names it
    values: Any
    if shape.binary:
        values = sa.bindparam(_QUERY_VECTOR, None, type_=_BoundVector())
    else:  # another driver than psycopg 3: the vector's text (each float32 as the float64 it equals), cast
        values = sa.cast(sa.bindparam(_QUERY_VECTOR, None, type_=sa.Text), Vector(shape.dimension))
    distance = indexed.cosine_distance(values) if search.metric == "cosine" else indexed.max_inner_product(values)
    # Inline, not parameters: the key, so that the planner sees that the query implies the partial index's
    # predicate; LIMIT and OFFSET, because a prepared statement's generic plan is costed for an unknown (large)
    # limit and never chosen, so every execution would be planned again.
    own = e.c.collection_key == sa.literal(search.collection_key, KEY, literal_execute=True)
    preselection = _preselection_conditions(e, shape.preselection, None)
    distance = distance.label("distance")
    ranked = (
        sa.select(e.c.doc_key, distance, e.c.norm)
        .where(own, _settings(shape.iterative), *preselection)
        .order_by(distance)
        .limit(sa.literal(shape.limit, literal_execute=True))
        .offset(sa.literal(shape.offset, literal_execute=True))
    )
    # Unordered: nothing downstream depends on the order of a page's rows (the outer sort cost ~10% of the scan).
    return _page_statement(ranked, search, base64=not shape.binary, ordered=False)


def _settings(iterative: bool) -> Any:
    """A condition of the page statement that sets ``hnsw.ef_search`` (and, when `iterative`,
    ``hnsw.iterative_scan = relaxed_order``, so the jsonb pre-selection does not starve the index scan) for the
    statement's own transaction, in the statement itself: one round trip where BEGIN, SET LOCAL and COMMIT took three.

    ``set_config(..., true)`` in an uncorrelated subquery: PostgreSQL runs it once as an init plan, and a condition on
    nothing but that plan's value is a one-time filter, checked before the index scan below it reads its first row
    (which is when pgvector reads both settings); reads run in autocommit, so the settings end with the statement.
    The names and values are parameters: every object's statement has the same text (prepared once per connection).
    """
    configured: sa.ColumnElement[Any] = sa.func.set_config(
        sa.bindparam(_EF_SEARCH[0], None, type_=sa.String),
        sa.bindparam(_EF_SEARCH[1], None, type_=sa.String),
        sa.true(),
    )
    if iterative:
        scan = sa.func.set_config(
            sa.bindparam(_ITERATIVE_SCAN[0], None, type_=sa.String),
            sa.bindparam(_ITERATIVE_SCAN[1], None, type_=sa.String),
            sa.true(),
        )
        configured = configured.op("||")(scan)
    return sa.select(configured).scalar_subquery().is_not(None)


def _vector_payload(vector: Matrix) -> bytes:
    """The query vector in pgvector's binary format: the dimension, a zero, then big-endian float32s."""
    return struct.pack(">HH", len(vector), 0) + np.asarray(vector, dtype=">f4").tobytes()


def _operand(connection: Connection, vector: Matrix) -> Any:
    """The query vector as a bound parameter: in pgvector's binary format (dimension, then big-endian float32s: the
    values exactly, no text to format in Python or parse in the server) through psycopg 3 (`register_vector_dumper`);
    through another driver (an Engine passed in), its text (each float32 as the float64 it equals, which pgvector
    reads back exactly) cast to ``vector``."""
    if register_vector_dumper(connection):
        return sa.bindparam(None, QueryVector(_vector_payload(vector)), type_=_BoundVector(), unique=True)
    from pgvector.sqlalchemy import Vector

    return sa.cast(sa.literal(str(vector.tolist()), sa.Text), Vector(len(vector)))


class QueryVector:
    """A query vector in pgvector's binary format, dumped as it is by `_VectorDumper`."""

    __slots__ = ("payload",)

    def __init__(self, payload: bytes) -> None:
        self.payload = payload


class _BoundVector(sa.types.UserDefinedType[QueryVector]):
    """A ``vector`` parameter the driver dumps (`_VectorDumper`): no bind processing, no cast in the SQL."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "VECTOR"


_DUMPER_KEY = "memwoven_vector_dumper"  # in the DBAPI connection's info: the dumper is registered on it


def register_vector_dumper(connection: Connection) -> bool:
    """Register `_VectorDumper`, with the ``vector`` type's OID in this database, on the driver connection, once per
    connection (the lookup is its one extra round trip); whether the driver is psycopg 3 (which it is registered on).
    """
    info = connection.connection.info
    if _DUMPER_KEY not in info:
        driver = connection.connection.driver_connection
        info[_DUMPER_KEY] = hasattr(driver, "adapters") and _register(connection, driver)
    return bool(info[_DUMPER_KEY])


def _register(connection: Connection, driver: Any) -> bool:
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    oid = connection.exec_driver_sql("SELECT to_regtype('vector')::oid").scalar()
    if oid is None:  # created with the tables; dropped since: the text cast then says what is missing
        return False

    class _VectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: QueryVector) -> bytes:
            return obj.payload

    _VectorDumper.oid = int(oid)
    driver.adapters.register_dumper(QueryVector, _VectorDumper)
    return True


def _distance_bound(metric: Metric, threshold: float) -> float:
    """The pgvector distance of a row scoring `threshold`: 1 - score (cosine) or -score (dot)."""
    return 1.0 - threshold if metric == "cosine" else -threshold


def _preselection(e: sa.Table, query: SearchQuery) -> list[Any]:
    """The filter's top-level equalities as jsonb conditions, their values bound: a superset of the matches (rows
    whose metadata the jsonb column could not hold pass, for Python to decide)."""
    equalities = _equalities(query.filter or {})
    shape = tuple(len(options) for _, options in equalities)
    return _preselection_conditions(e, shape, _preselection_values(equalities))


def _preselection_conditions(e: sa.Table, shape: tuple[int, ...], values: Mapping[str, str] | None) -> list[Any]:
    """One jsonb condition per equality of `_equalities`, given its number of values (`shape`): containment for one
    value (what a GIN index answers), the field extracted once and compared with each value for several. The
    parameters are named as `_preselection_values` names them; bound to `values`, or left for the caller."""
    from sqlalchemy.dialects import postgresql  # imported when first used: a SQLite worker never loads it

    def parameter(name: str) -> Any:
        return sa.bindparam(name, None if values is None else values[name], type_=sa.Text)

    conditions: list[Any] = []
    for position, count in enumerate(shape):
        test: sa.ColumnElement[bool]
        if count == 1:
            test = e.c.meta.op("@>")(sa.cast(parameter(f"pre{position}"), _jsonb_type()))
        else:
            field = e.c.meta.op("->")(parameter(f"pre{position}_key"))
            options = [sa.cast(parameter(f"pre{position}_{index}"), _jsonb_type()) for index in range(count)]
            test = field == sa.any_(postgresql.array(options))
        conditions.append(sa.or_(e.c.meta.is_(None), test))
    return conditions


def _preselection_values(equalities: list[tuple[str, list[Any]]]) -> dict[str, str]:
    """The parameters of `_preselection_conditions` for these equalities: the JSON text of ``{key: value}`` for one
    value; the key and each value's JSON text for several."""
    values: dict[str, str] = {}
    for position, (key, options) in enumerate(equalities):
        if len(options) == 1:
            values[f"pre{position}"] = json.dumps({key: options[0]}, ensure_ascii=False)
        else:
            values[f"pre{position}_key"] = key
            for index, option in enumerate(options):
                values[f"pre{position}_{index}"] = json.dumps(option, ensure_ascii=False)
    return values


class _Document(NamedTuple):
    """A live document row as `Search.decode` reads it, its embedding as bytes (float32, little-endian)."""

    doc_id: str
    content: str
    metadata: str
    embedding: bytes
    deleted: bool
    doc_key: str


def _read_page(
    connection: Connection, ranked: sa.Select[Any], search: Search, batches: list[DocumentBatch]
) -> list[tuple[float, bool, float]]:
    """Read one page (`_page_statement`) and decode it into `batches` (`_absorb`)."""
    statement = _page_statement(ranked, search, base64=True, ordered=True)
    return _absorb(connection.execute(statement).all(), search, batches, base64=True)


def _page_statement(ranked: sa.Select[Any], search: Search, *, base64: bool, ordered: bool) -> sa.Select[Any]:
    """One page of (doc_key, distance[, norm]) rows joined to their documents (doc_id, content, metadata,
    embedding, deleted, distance, norm or 0, doc_key), by distance if `ordered`; the
    embedding as base64 text if `base64` (for results in text format, where bytea is hex: twice the bytes to send
    and unescape, which at 384 dimensions made the page statement take twice as long)."""
    v, collection_key = search.vectors, search.collection_key
    page = ranked.subquery("ranked")
    norm = page.c.norm if "norm" in page.c else sa.literal(0.0, sa.Float(53))
    embedding: Any = v.c.embedding
    if base64:
        embedding = sa.func.encode(v.c.embedding, sa.literal_column("'base64'")).label("embedding")
    key = sa.bindparam(_COLLECTION_KEY, collection_key, type_=KEY)
    statement = sa.select(
        v.c.doc_id, v.c.content, v.c.metadata, embedding, v.c.deleted, page.c.distance, norm.label("n"), v.c.doc_key
    ).select_from(page.join(v, sa.and_(v.c.collection_key == key, v.c.doc_key == page.c.doc_key)))
    return statement.order_by(page.c.distance, page.c.doc_key) if ordered else statement


def _absorb(
    rows: Sequence[Sequence[Any]], search: Search, batches: list[DocumentBatch], *, base64: bool
) -> list[tuple[float, bool, float]]:
    """Decode a page's live rows (`_page_statement`'s columns; the embedding in base64 if `base64`) into `batches`;
    (distance, whether it is live and matches the filter, norm or 0) per row, in the rows' order."""
    live = [
        _Document(row[0], row[1], row[2], binascii.a2b_base64(row[3]) if base64 else row[3], False, row[7])
        for row in rows
        if not row[4]
    ]
    matches: Iterator[bool] = iter(())
    if live:
        batch = search.decode(live)
        batches.append(batch)
        predicate = search.query.predicate
        matches = iter([predicate is None or predicate(metadata) for metadata in batch.metadata])
    return [(float(row[5]), not row[4] and next(matches), float(row[6])) for row in rows]
