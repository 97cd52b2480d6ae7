"""The PostgreSQL bulk path's binary COPY data, built by numpy a chunk at a time, holds the rows of the row-by-row
encoding (within a chunk, rows of the same text lengths go together: the order of rows is free)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from memwoven.backends.sql._bulk import _CHUNK, _COPY_COLUMNS, _vector_copy_data
from memwoven.backends.sql._schema import key_of
from memwoven.vector_index import DocumentBatch

DIMENSION = 3


def _field(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def _expected_rows(
    collection_key: str, batch: DocumentBatch, texts: list[str], order: list[int], version: int
) -> list[bytes]:
    """PostgreSQL's binary COPY rows written out plainly, one row and one field at a time."""
    rows = []
    for position in order:
        row = [struct.pack(">h", len(_COPY_COLUMNS))]
        row.append(_field(batch.vectors[position].astype("<f4").tobytes()))
        row.append(_field(struct.pack(">q", version)))
        row.append(_field(b"\x00"))  # deleted: false
        row.append(_field(collection_key.encode()))
        row.append(_field(key_of(batch.ids[position]).encode()))
        for text in (batch.ids[position], batch.contents[position], texts[position]):
            row.append(_field(text.encode("utf-8")))
        rows.append(b"".join(row))
    return rows


def _split(data: bytes) -> list[bytes]:
    """The rows of binary COPY data, checking its header and trailer."""
    assert data.startswith(b"PGCOPY\n\xff\r\n\x00" + bytes(8))
    rows, at = [], 19
    while (fields := struct.unpack_from(">h", data, at)[0]) != -1:
        start, at = at, at + 2
        for _ in range(fields):
            at += 4 + struct.unpack_from(">i", data, at)[0]
        rows.append(data[start:at])
    assert at + 2 == len(data)
    return rows


def _contents(kind: str, count: int) -> list[str]:
    rng = np.random.default_rng(count)
    if kind == "empty":  # the usual bulk load: every row's texts of a few lengths
        return [""] * count
    if kind == "few lengths":
        return [f"text {i % 7} \u00e9\u2603" * (i % 3) for i in range(count)]
    if kind == "many lengths":  # one group per row or so: joined row by row
        return ["x\u00e9" * int(length) for length in rng.integers(0, 300, count)]
    return ["short"] * (count - 1) + ["y" * (1 << 20)]  # one long content among short ones


@pytest.mark.parametrize("kind", ["empty", "few lengths", "many lengths", "long"])
@pytest.mark.parametrize("count", [1, 100, _CHUNK + 5])
def test_the_copy_data_is_the_row_by_row_encoding(kind: str, count: int) -> None:
    rng = np.random.default_rng(7)
    ids = [f"doc-{i}" if i % 5 else f"d\u00e9-{i}" for i in range(count)]
    batch = DocumentBatch(ids, _contents(kind, count), [], rng.standard_normal((count, DIMENSION)).astype(np.float32))
    texts = [f'{{"n":{i}}}' if i % 3 else "{}" for i in range(count)]
    unordered = [key_of(doc_id) for doc_id in ids]
    order = sorted(range(count), key=unordered.__getitem__)
    keys = [unordered[position] for position in order]
    collection = key_of("a collection")
    blocks = [bytes(block) for block in _vector_copy_data(collection, keys, texts, batch, order, 12345)]
    found = _split(b"".join(blocks))
    expected = _expected_rows(collection, batch, texts, order, 12345)
    assert sorted(found) == sorted(expected)
    # a chunk of rows at a time, in key order from one chunk to the next
    assert sorted(found[:_CHUNK]) == sorted(expected[:_CHUNK])
