"""Writing a validated `DocumentBatch` into `{prefix}vectors` (and pgvector's embeddings table) by each driver's
fastest path, inside the caller's transaction.

PostgreSQL: binary ``COPY`` (after deleting the rows the batch replaces, when the collection has any: an upsert
by delete and insert, under the lock the caller's version bump holds). The other databases, and batches too small
for a ``COPY`` to pay off: the dialect's upsert statement, executed for chunks of rows (SQLite runs it as one
prepared statement), so no more than a chunk of rows is ever built in Python at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memwoven.backends.sql._packet import check_rows
from memwoven.backends.sql._pgvector import EmbeddingsTable, jsonb_metadata, norms
from memwoven.backends.sql._schema import key_of, upsert, upsert_rows
from memwoven.models import FrozenDict
from memwoven.vector_index import DocumentBatch

__all__ = ["write_documents"]

_CHUNK = 4096  # rows built and sent at once
_COPY_MIN = 64  # fewer rows: one upsert statement costs less than the COPY's extra statements
_VECTOR_COLUMNS = ("collection_key", "doc_key", "doc_id", "content", "metadata", "embedding", "version", "deleted")
_ROW_FIXED = 512  # a vector row's values but its id, content, metadata and embedding, escaped (`_packet.check_rows`)
_VECTOR_TYPES = ("text", "text", "text", "text", "text", "bytea", "int8", "bool")
_EMBEDDING_COLUMNS = ("collection_key", "doc_key", "embedding", "norm", "meta")
# pgvector's `vector` and PostgreSQL's `jsonb` are sent in their binary forms, built here, as raw bytes
_EMBEDDING_TYPES = ("text", "text", "bytea", "float8", "bytea")
_JSONB_VERSION = b"\x01"


def _dump_metadata(metadata: FrozenDict) -> str:
    """A document's metadata as the JSON text the vectors table stores."""
    return json.dumps(metadata, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def write_documents(
    connection: Connection,
    vectors: sa.Table,
    embeddings: EmbeddingsTable | None,
    collection_key: str,
    batch: DocumentBatch,
    version: int,
) -> None:
    """Insert or replace the batch's documents (stamped with `version`), and their pgvector rows if `embeddings`."""
    unordered = [key_of(doc_id) for doc_id in batch.ids]
    # In key order: the primary key's index then grows at one end (or merges in order) instead of taking every row
    # at a random place, which is most of the database's work for a large batch
    order = sorted(range(len(unordered)), key=unordered.__getitem__)
    keys = [unordered[position] for position in order]
    texts = [_dump_metadata(metadata) if metadata else "{}" for metadata in batch.metadata]
    cells = batch.vectors.astype("<f4", copy=False)  # float32 little-endian, as the blob column holds it
    ids, contents = batch.ids, batch.contents
    rows = (  # built one at a time: never a list of a million blobs
        (
            collection_key,
            key,
            ids[position],
            contents[position],
            texts[position],
            cells[position].tobytes(),
            version,
            False,
        )
        for key, position in zip(keys, order)
    )
    if connection.dialect.name != "postgresql":
        check_rows(
            connection,
            [ids, contents, texts],
            _ROW_FIXED + 2 * cells.shape[1] * cells.itemsize,
            lambda i: f"document {ids[i]!r:.200}",
        )
        upsert_rows(connection, vectors, _VECTOR_COLUMNS, rows, _CHUNK)
    elif len(keys) < _COPY_MIN:
        upsert(connection, vectors, [dict(zip(_VECTOR_COLUMNS, row)) for row in rows])
        if embeddings is not None:
            server_rows = _embedding_rows(collection_key, keys, texts, batch, order)
            upsert(connection, embeddings.table, [dict(zip(_EMBEDDING_COLUMNS, row)) for row in server_rows])
    else:
        _replace_by_copy(connection, vectors, collection_key, keys, _VECTOR_COLUMNS, _VECTOR_TYPES, rows)
        if embeddings is not None:
            server_rows = _embedding_rows(collection_key, keys, texts, batch, order, binary=True)
            _replace_by_copy(
                connection, embeddings.table, collection_key, keys, _EMBEDDING_COLUMNS, _EMBEDDING_TYPES, server_rows
            )


def _embedding_rows(
    collection_key: str,
    keys: list[str],
    texts: list[str],
    batch: DocumentBatch,
    order: list[int],
    *,
    binary: bool = False,
) -> Iterator[tuple[Any, ...]]:
    """The pgvector table's rows, the batch's documents taken in `order` (`keys` already is): the embedding as a
    float32 array (or, `binary`, pgvector's binary form: int16 dimension, int16 0, big-endian float32s), its norm,
    and the metadata as JSON text (or jsonb's binary form)."""
    header = np.array([batch.vectors.shape[1], 0], dtype=">i2").tobytes()
    for start in range(0, len(keys), _CHUNK):
        positions = order[start : start + _CHUNK]
        cells = batch.vectors[positions]
        metas = [jsonb_metadata(texts[position]) for position in positions]
        chunk = zip(keys[start : start + _CHUNK], cells.astype(">f4") if binary else cells, norms(cells), metas)
        for key, cell, length, meta in chunk:
            if binary:
                encoded = None if meta is None else _JSONB_VERSION + meta.encode("utf-8")
                yield collection_key, key, header + cell.tobytes(), length, encoded
            else:
                yield collection_key, key, cell, length, meta


def _replace_by_copy(
    connection: Connection,
    table: sa.Table,
    collection_key: str,
    keys: list[str],
    columns: tuple[str, ...],
    types: tuple[str, ...],
    rows: Iterable[tuple[Any, ...]],
) -> None:
    """Delete the collection's rows with these keys (if it has any row), then COPY `rows` in."""
    stored = connection.execute(sa.select(sa.exists().where(table.c.collection_key == collection_key))).scalar()
    if stored:
        from sqlalchemy.dialects import postgresql  # only on PostgreSQL: other databases never load its dialect

        wanted = sa.bindparam("keys", keys, type_=postgresql.ARRAY(sa.Text))
        connection.execute(
            sa.delete(table).where(table.c.collection_key == collection_key, table.c.doc_key == sa.any_(wanted))
        )
    preparer = connection.dialect.identifier_preparer
    statement = (
        f"COPY {preparer.format_table(table)} ({', '.join(preparer.quote(name) for name in columns)})"
        " FROM STDIN (FORMAT BINARY)"
    )
    driver = connection.connection.driver_connection
    import psycopg

    if isinstance(driver, psycopg.Connection):
        with driver.cursor() as cursor, cursor.copy(statement) as copy:
            copy.set_types(list(types))
            for row in rows:
                copy.write_row(row)
        return
    from sqlalchemy.util import await_only

    await_only(_acopy(driver, statement, types, rows))  # the async engine's connection, in its `run_sync` greenlet


async def _acopy(driver: Any, statement: str, types: tuple[str, ...], rows: Iterable[tuple[Any, ...]]) -> None:
    async with driver.cursor() as cursor, cursor.copy(statement) as copy:
        copy.set_types(list(types))
        for row in rows:
            await copy.write_row(row)
