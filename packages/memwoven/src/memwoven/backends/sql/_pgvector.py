"""Server-side search for `SQLVectorMemory(search="server")` on PostgreSQL with the pgvector extension.

The documents stay where client-side search keeps them (`{prefix}vectors`: id, content, metadata, float32 blob,
version, tombstones), written in the same transactions; beside them `{prefix}pgvector_embeddings` holds each live
document's embedding as a pgvector ``vector``, its norm, and its metadata as ``jsonb`` (NULL where the JSON text holds
an escaped NUL, which ``jsonb`` cannot), for the database to search.

A search is exact: the database orders the collection's rows by pgvector's distance (``<=>`` for cosine, ``<#>`` for
dot) and returns them a page at a time; the rows read are then scored again in float32 by `VectorIndex`, the same
code client-side search runs, so scores, the exclusive threshold, ties (by id) and filters are exactly those of
client-side search. pgvector's float arithmetic differs from numpy's by at most `margin` (a bound on the rounding
error of both dot products), so paging stops only once no unread row can score within reach of the k-th match, and
the threshold is pushed into SQL widened by the same margin. Filters are applied in Python (`memwoven.filters`, the
one definition); their top-level equality and ``$in`` parts on plain keys become a ``jsonb`` containment
pre-selection (a superset of the matches), which a GIN index answers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memwoven.backends.sql._schema import KEY, Tables
from memwoven.contracts import Metric
from memwoven.vector_index import DocumentBatch, Matrix, SearchQuery

__all__ = ["EmbeddingsTable", "candidates", "check_search_mode", "jsonb_metadata", "norms"]

_FIRST_PAGE = 64  # rows of the first page (at least 4 * top_k); each next page doubles
_PAGE_LIMIT = 65536
_UNIT_ROUNDING = 2.0**-24


def check_search_mode(search: str) -> str:
    """Validate `search`: "client" (the in-process index) or "server" (pgvector)."""
    from memwoven.errors import InvalidInputError

    if search not in ("client", "server"):
        raise InvalidInputError(f"unknown search {search!r}; use 'client' or 'server'")
    return search


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


def _jsonb(text: str) -> Any:
    return sa.cast(sa.literal(text, sa.Text), _jsonb_type())


def _equalities(spec: Mapping[str, Any]) -> list[tuple[str, list[Any]]]:
    """(key, values) per top-level field whose value every match equals one of (as JSON: `true` is not 1).

    Only keys without a dot (a dotted key also matches a nested path) and scalar operands (strings, finite numbers,
    booleans) of ``$eq``/``$in`` or a bare value; anything else selects nothing here (Python decides).
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
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) <= 2**53
    return isinstance(value, float) and math.isfinite(value)


def margin(metric: Metric, dimension: int, query_norm: float, max_norm: float) -> float:
    """A bound on |pgvector's score - numpy's float32 score| of one row (float32 sums of `dimension` products,
    each side's rounding error bounded by dimension * 2**-24 of the product of the norms, doubled for safety)."""
    relative = 8.0 * (dimension + 2) * _UNIT_ROUNDING + 1e-6
    if metric == "cosine":
        return relative
    return relative * max(query_norm, 1e-30) * max(max_norm, 1e-30) + 1e-30


def candidates(
    connection: Connection,
    *,
    embeddings: sa.Table,
    vectors: sa.Table,
    collection_key: str,
    metric: Metric,
    query: SearchQuery,
    vector: Matrix,
    decode: Any,
) -> list[DocumentBatch]:
    """Every row whose exact (float32) score may place it among the query's hits, read in pages by distance.

    `decode(rows)` turns the selected rows into a `DocumentBatch`. The batches returned hold every matching row of
    the true top k (with ties) and may hold more; the caller ranks them exactly.
    """
    e, v = embeddings, vectors
    query_norm = float(np.linalg.norm(vector.astype(np.float64)))
    dimension = len(vector)
    values = vector.tolist()
    if metric == "cosine":
        distance = e.c.embedding.cosine_distance(values)
        max_norm = 1.0
    else:
        distance = e.c.embedding.max_inner_product(values)  # minus the dot product
        found = connection.execute(sa.select(sa.func.max(e.c.norm)).where(e.c.collection_key == collection_key))
        max_norm = float(found.scalar() or 0.0)
    slack = margin(metric, dimension, query_norm, max_norm)
    distance = distance.label("distance")
    conditions: list[Any] = [e.c.collection_key == collection_key]
    if query.threshold is not None:
        # score > threshold; pgvector's distance is 1 - score (cosine) or -score (dot)
        bound = (1.0 - query.threshold if metric == "cosine" else -query.threshold) + slack
        conditions.append(distance < bound)
    if query.filter:
        for key, options in _equalities(query.filter):
            test: sa.ColumnElement[bool]
            if len(options) == 1:  # containment: what a GIN index answers
                test = e.c.meta.op("@>")(_jsonb(json.dumps({key: options[0]}, ensure_ascii=False)))
            else:
                field = e.c.meta.op("->")(sa.literal(key, sa.Text))
                values = [_jsonb(json.dumps(option, ensure_ascii=False)) for option in options]
                from sqlalchemy.dialects.postgresql import array

                test = field == sa.any_(array(values))  # the field is extracted once
            conditions.append(sa.or_(e.c.meta.is_(None), test))
    predicate = query.predicate
    batches: list[DocumentBatch] = []
    matched: list[float] = []  # the pgvector distances of the matching rows read, ascending
    page = max(_FIRST_PAGE, 4 * query.top_k)
    offset = 0
    while True:
        # The ordering reads the embeddings table alone; only the page's rows are joined to their documents.
        where = list(conditions)
        if len(matched) >= query.top_k:  # read only what may still reach the k-th match
            where.append(distance <= matched[query.top_k - 1] + 2 * slack)
        ranked = (
            sa.select(e.c.doc_key, distance)
            .where(*where)
            .order_by(distance, e.c.doc_key)
            .limit(page)
            .offset(offset)
            .subquery("ranked")
        )
        statement = (
            sa.select(v.c.doc_id, v.c.content, v.c.metadata, v.c.embedding, v.c.deleted, ranked.c.distance)
            .select_from(ranked.join(v, sa.and_(v.c.collection_key == collection_key, v.c.doc_key == ranked.c.doc_key)))
            .order_by(ranked.c.distance, ranked.c.doc_key)
        )
        rows: Sequence[Any] = connection.execute(statement).all()
        live = [row for row in rows if not row.deleted]
        if live:
            batch = decode(live)
            batches.append(batch)
            for row, metadata in zip(live, batch.metadata):
                if predicate is None or predicate(metadata):
                    matched.append(float(row.distance))
        if len(rows) < page:
            return batches
        if len(matched) >= query.top_k and float(rows[-1].distance) > matched[query.top_k - 1] + 2 * slack:
            return batches  # every unread row is farther still
        offset += page
        page = min(2 * page, _PAGE_LIMIT)
