"""Writing a validated `DocumentBatch` into `{prefix}vectors` (and pgvector's embeddings table) by each driver's
fastest path, inside the caller's transaction.

PostgreSQL: binary ``COPY`` (after deleting the rows the batch replaces, when the collection has any: an upsert
by delete and insert, under the lock the caller's version bump holds); the vectors table's COPY data is built by
numpy a chunk of rows at a time and sent as it is, not row by row through the driver (`_vector_copy_data`). The
other databases, and batches too small for a ``COPY`` to pay off: the dialect's upsert statement, executed for
chunks of rows (SQLite runs it as one prepared statement), so no more than a chunk of rows is ever built in Python
at once.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memwoven.backends.sql._pgvector import EmbeddingsTable, jsonb_metadata, norms
from memwoven.backends.sql._schema import key_of, upsert, upsert_rows
from memwoven.models import FrozenDict
from memwoven.vector_index import DocumentBatch

__all__ = ["write_documents"]

_CHUNK = 4096  # rows built and sent at once
_COPY_MIN = 64  # fewer rows: one upsert statement costs less than the COPY's extra statements
_VECTOR_COLUMNS = ("collection_key", "doc_key", "doc_id", "content", "metadata", "embedding", "version", "deleted")
_EMBEDDING_COLUMNS = ("collection_key", "doc_key", "embedding", "norm", "meta")
# pgvector's `vector` and PostgreSQL's `jsonb` are sent in their binary forms, built here, as raw bytes
_EMBEDDING_TYPES = ("text", "text", "bytea", "float8", "bytea")
_JSONB_VERSION = b"\x01"
# Binary COPY framing (PostgreSQL's "Binary Format"): the signature, flags and header extension length; a row is
# its field count (int16) then each field as its byte length (int32) and bytes; the trailer is a field count of -1
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_COPY_TRAILER = b"\xff\xff"
# The vectors table's COPY columns, fixed-width ones first so they form one numpy record per row
_COPY_COLUMNS = ("embedding", "version", "deleted", "collection_key", "doc_key", "doc_id", "content", "metadata")
_length = struct.Struct(">i").pack
_Block = bytes | memoryview  # a piece of COPY data


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
        upsert_rows(connection, vectors, _VECTOR_COLUMNS, rows, _CHUNK)
    elif len(keys) < _COPY_MIN:
        upsert(connection, vectors, [dict(zip(_VECTOR_COLUMNS, row)) for row in rows])
        if embeddings is not None:
            server_rows = _embedding_rows(collection_key, keys, texts, batch, order)
            upsert(connection, embeddings.table, [dict(zip(_EMBEDDING_COLUMNS, row)) for row in server_rows])
    else:
        _delete_replaced(connection, vectors, collection_key, keys)
        data = _vector_copy_data(collection_key, keys, texts, batch, order, version)
        _copy(connection, vectors, _COPY_COLUMNS, data=data)
        if embeddings is not None:
            server_rows = _embedding_rows(collection_key, keys, texts, batch, order, binary=True)
            _delete_replaced(connection, embeddings.table, collection_key, keys)
            _copy(connection, embeddings.table, _EMBEDDING_COLUMNS, types=_EMBEDDING_TYPES, rows=server_rows)


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


def _vector_copy_data(
    collection_key: str, keys: list[str], texts: list[str], batch: DocumentBatch, order: list[int], version: int
) -> Iterator[_Block]:
    """The binary COPY data of the vectors table's rows (`_COPY_COLUMNS`), the batch's documents taken in `order`
    (`keys` already is): the header, then the rows a chunk at a time, then the trailer.

    Within a chunk, the rows whose texts (id, content, metadata) have the same byte lengths are one numpy array of
    records laid out as COPY wants them, filled column by column, sent as they are: no per-row Python beyond
    encoding the texts. A chunk with many different lengths (long texts) is joined row by row instead."""
    width = batch.vectors.shape[1]
    collection = collection_key.encode("ascii")
    key_size = len(collection)  # keys are hex digests (`key_of`), all of one length
    fixed = {
        "fields": (">i2", len(_COPY_COLUMNS)),
        "embedding_length": (">i4", width * 4),
        "embedding": (("<f4", (width,)), None),  # float32, little-endian, as the blob column holds it
        "version_length": (">i4", 8),
        "version": (">i8", version),
        "deleted_length": (">i4", 1),
        "deleted": ("u1", 0),
        "collection_length": (">i4", key_size),
        "collection_key": (f"S{key_size}", collection),
        "key_length": (">i4", key_size),
        "doc_key": (f"S{key_size}", None),
    }
    head = [(name, kind) for name, (kind, _) in fixed.items()]  # packed (no alignment), as the COPY format is
    columns = (batch.ids, batch.contents, texts)
    yield _COPY_HEADER
    for start in range(0, len(keys), _CHUNK):
        positions = np.array(order[start : start + _CHUNK], dtype=np.intp)
        encoded = [np.array([column[p].encode("utf-8") for p in positions.tolist()], object) for column in columns]
        sizes = [np.fromiter(map(len, values), np.int64, len(values)) for values in encoded]
        chunk_keys = np.array(keys[start : start + _CHUNK], dtype=f"S{key_size}")
        groups = _same_sizes(sizes)
        if groups is None:
            yield _joined_rows(np.dtype(head), fixed, batch.vectors[positions], chunk_keys, encoded)
            continue
        for members in groups:
            shape = [int(size[members[0]]) for size in sizes]
            texts_fields = [
                ((f"length{i}", ">i4"),) + (((f"text{i}", f"S{n}"),) if n else ()) for i, n in enumerate(shape)
            ]
            record = np.dtype(head + [field for fields in texts_fields for field in fields])
            rows = _fixed_rows(record, fixed, batch.vectors[positions[members]], chunk_keys[members])
            for i, length in enumerate(shape):
                rows[f"length{i}"] = length
                if length:
                    rows[f"text{i}"] = encoded[i][members]
            yield memoryview(rows.view(np.uint8))
    yield _COPY_TRAILER


def _same_sizes(sizes: list[Any]) -> list[Any] | None:
    """The positions of the rows whose texts have the same sizes (`sizes`: one array per text), a group each,
    ascending; None when the groups would be many (over one in 16 rows) or a text is long (1 MiB or more)."""
    if max(int(size.max()) for size in sizes) >= 1 << 20:
        return None
    combined = (sizes[0] << 40) | (sizes[1] << 20) | sizes[2]  # each size fits in 20 bits
    shapes, group = np.unique(combined, return_inverse=True)
    if len(shapes) > len(combined) // 16 + 1:
        return None
    by_group = np.argsort(group, kind="stable")
    return np.split(by_group, np.cumsum(np.bincount(group, minlength=len(shapes)))[:-1])


def _fixed_rows(record: np.dtype[Any], fixed: dict[str, tuple[Any, Any]], vectors: Any, keys: Any) -> Any:
    """Records with their fixed-width fields filled (any text fields left to the caller)."""
    rows = np.empty(len(keys), dtype=record)
    for name, (_, value) in fixed.items():
        if value is not None:
            rows[name] = value
    rows["embedding"] = vectors
    rows["doc_key"] = keys
    return rows


def _joined_rows(
    head: np.dtype[Any], fixed: dict[str, tuple[Any, Any]], vectors: Any, keys: Any, encoded: list[Any]
) -> bytes:
    """Rows joined one by one: the fixed-width fields of a record, then each text's length and bytes."""
    rows = _fixed_rows(head, fixed, vectors, keys)
    raw = memoryview(rows.view(np.uint8))
    size = head.itemsize
    pieces: list[_Block] = []
    for row, texts in enumerate(zip(*encoded)):
        pieces.append(raw[row * size : (row + 1) * size])
        pieces.extend(_length(len(text)) + text for text in texts)
    return b"".join(pieces)


def _delete_replaced(connection: Connection, table: sa.Table, collection_key: str, keys: list[str]) -> None:
    """Delete the collection's rows with these keys (if it has any row), for a COPY of their new rows."""
    stored = connection.execute(sa.select(sa.exists().where(table.c.collection_key == collection_key))).scalar()
    if stored:
        from sqlalchemy.dialects import postgresql  # only on PostgreSQL: other databases never load its dialect

        wanted = sa.bindparam("keys", keys, type_=postgresql.ARRAY(sa.Text))
        connection.execute(
            sa.delete(table).where(table.c.collection_key == collection_key, table.c.doc_key == sa.any_(wanted))
        )


def _copy(
    connection: Connection,
    table: sa.Table,
    columns: tuple[str, ...],
    *,
    data: Iterable[_Block] = (),
    types: tuple[str, ...] = (),
    rows: Iterable[tuple[Any, ...]] = (),
) -> None:
    """COPY into `table`'s `columns` in the binary format: `data` already formatted, or `rows` of `types`."""
    preparer = connection.dialect.identifier_preparer
    statement = (
        f"COPY {preparer.format_table(table)} ({', '.join(preparer.quote(name) for name in columns)})"
        " FROM STDIN (FORMAT BINARY)"
    )
    driver = connection.connection.driver_connection
    import psycopg

    if isinstance(driver, psycopg.Connection):
        with driver.cursor() as cursor, cursor.copy(statement) as copy:
            for block in data:
                copy.write(block)
            if types:
                copy.set_types(list(types))
                for row in rows:
                    copy.write_row(row)
        return
    from sqlalchemy.util import await_only

    await_only(
        _acopy(driver, statement, data, types, rows)
    )  # the async engine's connection, in its `run_sync` greenlet


async def _acopy(
    driver: Any, statement: str, data: Iterable[_Block], types: tuple[str, ...], rows: Iterable[tuple[Any, ...]]
) -> None:
    async with driver.cursor() as cursor, cursor.copy(statement) as copy:
        for block in data:
            await copy.write(block)
        if types:
            copy.set_types(list(types))
            for row in rows:
                await copy.write_row(row)
