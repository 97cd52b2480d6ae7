"""The SQL vector backend with its machine-wide cache (`cache_dir`): the conformance suite, processes sharing a
file, and files that must not be used (damaged, another collection, generation or database)."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from process_support import process_context, start
from sql_support import sql_place

from memwoven import _vector_cache as vector_cache
from memwoven._vector_cache import CachedIndex, CacheFile, CacheWriter, writing
from memwoven.backends.sql import SQLVectorMemory
from memwoven.backends.sql._schema import Tables
from memwoven.contracts import VectorMemory
from memwoven.errors import CorruptMemoryError, InvalidInputError
from memwoven.testing import VectorMemoryContract
from memwoven.urls import open_vector_memory, vector_collections
from memwoven.vector_index import inverse_norms
from memwoven_test_support import unique_name

CACHED_KINDS = ("sqlite", "postgresql", "mariadb")


@pytest.fixture(params=CACHED_KINDS)
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    with sql_place(request.param, tmp_path) as place:
        yield place


class AlwaysMapped(SQLVectorMemory):
    """Reads as a process that just started would, on every call: forgets its index first, so each read maps the
    collection's newest cache file and applies the changes made since it was written (or writes one)."""

    def _refresh(self, connection: Any) -> None:
        with self._lock:
            self._generation, self._seen = -1, -1
        super()._refresh(connection)


class TestSQLVectorCached(VectorMemoryContract):
    @pytest.fixture
    def vector_memory_factory(self, where: tuple[str, str], tmp_path: Path) -> Iterator[Callable[..., VectorMemory]]:
        opened: list[SQLVectorMemory] = []

        def make(dimension: int | None, metric: str) -> VectorMemory:
            opened.append(
                AlwaysMapped(
                    where[0],
                    table_prefix=where[1],
                    collection=unique_name("c"),
                    dimension=dimension,
                    metric=metric,  # type: ignore[arg-type]
                    cache_dir=tmp_path / "cache",
                )
            )
            return opened[-1]

        yield make
        for memory in opened:
            memory.close()

    def reopen(self, memory: VectorMemory) -> VectorMemory:
        assert isinstance(memory, SQLVectorMemory)
        return AlwaysMapped(
            memory.engine.url,
            table_prefix=memory.table_prefix,
            collection=memory.collection,
            metric=memory.metric,
            cache_dir=memory.cache_dir or False,
        )

    @contextlib.contextmanager
    def neighbour(self, memory: VectorMemory) -> Iterator[VectorMemory]:
        assert isinstance(memory, SQLVectorMemory)
        with AlwaysMapped(
            memory.engine.url,
            table_prefix=memory.table_prefix,
            collection=memory.collection + "s",
            cache_dir=memory.cache_dir or False,
        ) as neighbour:
            yield neighbour


def _docs(vectors: np.ndarray, start: int = 0, **metadata: Any) -> list[dict[str, Any]]:
    return [
        {"id": f"d{start + i}", "content": f"text {start + i}", "embedding": v.tolist(), "metadata": metadata}
        for i, v in enumerate(vectors)
    ]


def _open(where: tuple[str, str], cache: Path | bool, **options: Any) -> SQLVectorMemory:
    return SQLVectorMemory(where[0], table_prefix=where[1], collection="docs", cache_dir=cache, **options)


def _files(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.glob("*.mwvc"))


@pytest.fixture
def filled(where: tuple[str, str], tmp_path: Path) -> tuple[np.ndarray, Path]:
    """300 random 8-dimensional documents in collection "docs", and a cache directory holding them."""
    vectors = np.random.default_rng(3).standard_normal((300, 8)).astype(np.float32)
    cache = tmp_path / "cache"
    with _open(where, False) as writer:
        writer.store(_docs(vectors, tag="a"))
    with _open(where, cache) as first:
        assert first.count() == 300  # loads from the table and writes the file
    assert len(_files(cache)) == 1
    return vectors, cache


def _top(memory: SQLVectorMemory, vector: np.ndarray, k: int = 5) -> list[tuple[str, float]]:
    return [(hit.document.id, hit.score) for hit in memory.search(vector.tolist(), top_k=k)]


def test_a_second_object_maps_the_file_and_answers_as_the_table(
    where: tuple[str, str], filled: tuple[np.ndarray, Path]
) -> None:
    vectors, cache = filled
    with _open(where, cache) as cached, _open(where, False) as plain:
        query = vectors[17] + 0.1
        assert _top(cached, query) == _top(plain, query)
        assert isinstance(cached._index, CachedIndex)  # mapped, not read from the table
        assert cached._index.base.count == 300
        assert cached.get(["d5", "nope", "d7"]) == plain.get(["d5", "nope", "d7"])
        assert cached.ids() == plain.ids()
        hits = cached.search(query.tolist(), top_k=300, filter={"tag": "a"}, threshold=0.0)
        assert [h.document.id for h in hits] == [
            h.document.id for h in plain.search(query.tolist(), top_k=300, filter={"tag": "a"}, threshold=0.0)
        ]


def test_changes_after_the_file_reach_every_object(where: tuple[str, str], filled: tuple[np.ndarray, Path]) -> None:
    vectors, cache = filled
    with _open(where, cache) as reader, _open(where, cache) as writer:
        assert reader.count() == 300
        writer.store(_docs(vectors[:2] * -1, start=0, tag="b"))  # d0, d1 replaced
        writer.delete(["d2"])
        writer.store(_docs(vectors[:1], start=1000))  # d1000 new
        for memory in (reader, writer):  # read-your-writes and the other object's freshness
            assert memory.count() == 300
            assert memory.get(["d2"]) == []
            assert [d.metadata for d in memory.get(["d0", "d1"])] == [{"tag": "b"}, {"tag": "b"}]
            top = _top(memory, vectors[2], k=300)
            assert "d2" not in [i for i, _ in top]
            assert top[0][0] != "d2"
            assert _top(memory, -vectors[0], k=1)[0][0] == "d0"
            assert {h.document.id for h in memory.search(vectors[0].tolist(), top_k=300, filter={"tag": "b"})} == {
                "d0",
                "d1",
            }
        with _open(where, cache) as late:  # maps the old file, then applies the changes since
            assert late.count() == 300
            assert isinstance(late._index, CachedIndex)
            assert late.get(["d2"]) == []
            assert _top(late, vectors[0], k=1)[0][0] == "d1000"  # d0 now points the other way


def test_clear_moves_to_a_new_generation(where: tuple[str, str], filled: tuple[np.ndarray, Path]) -> None:
    vectors, cache = filled
    with _open(where, cache) as reader, _open(where, cache) as writer:
        assert reader.count() == 300
        writer.clear()
        assert reader.count() == 0
        assert reader.search(vectors[0].tolist()) == []
        writer.store(_docs(vectors[:3], start=500))
    with _open(where, cache) as late:  # the generation-0 file is never used for generation 1
        assert late.count() == 3
        assert late.ids() == ["d500", "d501", "d502"]
        assert _top(late, vectors[0], k=1)[0][0] == "d500"
    assert all(".1." in name for name in _files(cache))  # the new generation's file replaced the old one


def _damage(path: Path, offset: int) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0x40]))


@pytest.mark.parametrize("damage", ["matrix", "ids", "header", "truncated", "format 1"])
def test_a_damaged_file_is_ignored_and_rebuilt(
    where: tuple[str, str], filled: tuple[np.ndarray, Path], damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    vectors, cache = filled
    (path,) = cache.glob("*.mwvc")
    with _open(where, False) as plain:
        expected = _top(plain, vectors[9])
    if damage == "truncated":
        with path.open("r+b") as file:
            file.truncate(path.stat().st_size - 4096)
    elif damage == "format 1":  # an older memwoven's magic (its files had CRC-32 checksums)
        with path.open("r+b") as file:
            file.write(b"MWVCACHE")
    else:
        opened = CacheFile.open(path, path.name.split(".")[0], 8, "cosine")
        assert opened is not None
        section = {"matrix": "matrix", "ids": "ids", "header": None}[damage]
        offset = 40 if section is None else opened.sections[section][0]
        del opened
        _damage(path, offset + 9 * 4)  # row 9's first float, or bytes of the first id / the header
    with caplog.at_level(logging.WARNING, logger="memwoven._vector_cache"), _open(where, cache) as reader:
        assert _top(reader, vectors[9]) == expected
        assert isinstance(reader._index, CachedIndex)  # a fresh file, written from the table
    assert any("damaged" in record.message for record in caplog.records)
    (rebuilt,) = cache.glob("*.mwvc")
    assert CacheFile.open(rebuilt, rebuilt.name.split(".")[0], 8, "cosine") is not None


def test_a_file_of_another_collection_or_database_is_not_used(
    where: tuple[str, str], filled: tuple[np.ndarray, Path], tmp_path: Path
) -> None:
    vectors, cache = filled
    (path,) = cache.glob("*.mwvc")
    identity = path.name.split(".")[0]
    other_vectors = np.random.default_rng(4).standard_normal((50, 8)).astype(np.float32)
    with SQLVectorMemory(where[0], table_prefix=where[1], collection="other") as other:
        other.store(_docs(other_vectors))
    with SQLVectorMemory(where[0], table_prefix=where[1], collection="other", cache_dir=cache) as other:
        assert other.count() == 50  # loaded from the table: its own file
    other_files = [p for p in cache.glob("*.mwvc") if not p.name.startswith(identity)]
    assert len(other_files) == 1
    # the other collection's file under this collection's name: its header names the other collection
    path.unlink()
    other_files[0].rename(path)
    with _open(where, cache) as reader:
        assert _top(reader, vectors[4], k=1)[0][0] == "d4"
        assert reader.count() == 300
    # the tables dropped and made again: the same names, version (1) and generation, but a new database token
    with _open(where, False) as dropper:
        dropper.drop_tables()
    with _open(where, False) as writer:
        writer.store(_docs(-vectors))
    with _open(where, cache) as reader:
        assert _top(reader, -vectors[4], k=1)[0][0] == "d4"
        assert reader.get(["d4"])[0].embedding == (-vectors[4]).tolist()


def test_copies_of_a_database_read_only_the_files_of_their_own_history(tmp_path: Path) -> None:
    """A copied database (tenants made from one template file, a backup restored) keeps the cache token and goes
    on from the same versions with other writes: each copy maps only the files its database vouches for, never
    another copy's documents."""
    cache = tmp_path / "cache"

    def memory(name: str) -> SQLVectorMemory:
        return SQLVectorMemory(f"sqlite:///{tmp_path / name}.db", collection="kb", cache_dir=cache)

    def copy(source: str, target: str) -> None:
        with sqlite3.connect(tmp_path / f"{source}.db") as src, sqlite3.connect(tmp_path / f"{target}.db") as dst:
            src.backup(dst)
        src.close()
        dst.close()

    def store(name: str, doc_id: str, vector: list[float]) -> None:
        with memory(name) as writer:
            writer.store([{"id": doc_id, "content": doc_id, "embedding": vector}])

    def read(name: str) -> tuple[list[str], list[str], bool]:
        with memory(name) as reader:
            hits = [hit.document.id for hit in reader.search([1.0, 0.0], top_k=5)]
            return reader.ids(), hits, isinstance(reader._index, CachedIndex)

    with memory("template") as template:
        assert template.count() == 0
    copy("template", "a")
    copy("template", "b")
    store("a", "a-secret", [1.0, 0.0])
    assert read("a") == (["a-secret"], ["a-secret"], True)  # wrote a's file, at version 1
    store("b", "b-doc", [0.0, 1.0])  # b at version 1 too
    assert read("b") == (["b-doc"], ["b-doc"], True)
    copy("a", "a-backup")
    store("a", "a-later", [0.8, 0.6])
    assert read("a")[0] == ["a-later", "a-secret"]  # a's file at version 2
    copy("a-backup", "a")  # restored to version 1
    store("a", "a-other", [0.6, 0.8])  # version 2 again, another history
    assert read("a") == (["a-other", "a-secret"], ["a-secret", "a-other"], True)


def test_a_collection_made_again_after_its_rows_were_deleted_maps_no_file_of_the_old_one(
    where: tuple[str, str], filled: tuple[np.ndarray, Path]
) -> None:
    vectors, cache = filled  # the old collection's file, vouched for at generation 0, version 1
    tables = Tables.build(where[1], None)
    with _open(where, False) as plain, plain.engine.begin() as connection:  # an operator deletes the collection
        connection.execute(sa.delete(tables.vectors))
        connection.execute(sa.delete(tables.collections))
    with _open(where, False) as writer:  # made again: its versions start over
        writer.store(_docs(vectors[:3], start=500))
    with _open(where, cache) as reader:
        assert reader.ids() == ["d500", "d501", "d502"]
        assert _top(reader, vectors[0], k=1)[0][0] == "d500"


def test_drop_tables_removes_the_cache_files_of_its_collections(
    where: tuple[str, str], filled: tuple[np.ndarray, Path]
) -> None:
    vectors, cache = filled
    with _open(where, False) as plain, SQLVectorMemory(where[0], table_prefix=where[1], collection="more") as other:
        other.store(_docs(vectors[:3]))
        unrelated = cache / f"{'0' * 40}.0.1.{'a' * 32}.mwvc"  # another database's
        unrelated.write_bytes(b"")
        with SQLVectorMemory(where[0], table_prefix=where[1], collection="more", cache_dir=cache) as reader:
            assert reader.count() == 3  # writes its file
        assert len(_files(cache)) == 3
        assert len(list(cache.glob("*.lock"))) == 2
        with _open(where, cache) as dropping:
            dropping.drop_tables()
        assert sorted(p.name for p in cache.iterdir()) == [unrelated.name]
        assert not plain.has_tables()


def test_a_file_of_format_3_is_not_served_its_rows_were_not_checked(
    where: tuple[str, str], filled: tuple[np.ndarray, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before format 4 a file was written from the table's rows unchecked, under valid checksums: one written while
    a row was damaged (NaN) served that row's NaN score after the row was mended. Such a file is rebuilt."""
    vectors, cache = filled
    table = Tables.build(where[1], None).vectors
    with _open(where, False) as plain:
        expected = _top(plain, vectors[9])

        def set_d9(embedding: np.ndarray) -> None:
            with plain.engine.begin() as connection:
                statement = sa.update(table).where(table.c.doc_id == "d9")
                connection.execute(statement.values(embedding=embedding.astype("<f4").tobytes()))

        set_d9(np.full(8, np.nan))
        with monkeypatch.context() as older:

            def unchecked(vectors: np.ndarray, metric: str, corrupt: object) -> np.ndarray:
                return inverse_norms(vectors)

            older.setattr(vector_cache, "_FORMAT", 3)
            for module in (vector_cache, sys.modules[SQLVectorMemory.__module__]):
                older.setattr(module, "stored_scales", unchecked, raising=False)
            for path in cache.glob("*.mwvc"):
                path.unlink()
            with _open(where, cache) as writer:
                assert writer.count() == 300  # its file written, row d9 in it
        set_d9(vectors[9])
    (path,) = cache.glob("*.mwvc")
    with _open(where, cache) as reader:
        assert _top(reader, vectors[9]) == expected
    assert not path.exists()


def test_a_damaged_row_is_never_written_to_a_file(where: tuple[str, str], filled: tuple[np.ndarray, Path]) -> None:
    """A row `store` refuses raises `CorruptMemoryError` as the file is written (from the table, or by the writer
    given it), and no file is left holding it."""
    _, cache = filled
    table = Tables.build(where[1], None).vectors
    with _open(where, False) as plain, plain.engine.begin() as connection:
        statement = sa.update(table).where(table.c.doc_id == "d9")
        connection.execute(statement.values(embedding=np.zeros(8, "<f4").tobytes()))
    for path in cache.glob("*.mwvc"):
        path.unlink()
    with _open(where, cache) as reader, pytest.raises(CorruptMemoryError, match="'d9'"):
        reader.count()
    assert _files(cache) == []
    writer = CacheWriter(cache, "x" * 40, 2, "dot")
    with pytest.raises(CorruptMemoryError, match="'b'"):
        writer.add(["a", "b"], ["", ""], ["{}", "{}"], np.array([[1.0, 0.0], [np.inf, 0.0]], np.float32))
    writer.abort()


def test_a_file_of_the_earlier_format_is_removed_when_a_file_is_written(
    where: tuple[str, str], filled: tuple[np.ndarray, Path]
) -> None:
    """Files of format 2 were named without a stamp: never mapped now, and removed by the next file written (each
    is a whole copy of a collection's embeddings)."""
    _, cache = filled
    (path,) = cache.glob("*.mwvc")
    identity = path.name.split(".")[0]
    legacy = cache / f"{identity}.0.1.mwvc"
    legacy.write_bytes(b"a file of format 2")
    path.unlink()
    with _open(where, cache) as reader:
        assert reader.count() == 300  # read from the table, its file written
    assert not legacy.exists()
    assert len(_files(cache)) == 1


def test_a_dead_writers_temporary_file_is_removed_when_a_file_is_written(
    where: tuple[str, str], filled: tuple[np.ndarray, Path]
) -> None:
    _, cache = filled
    (path,) = cache.glob("*.mwvc")
    identity = path.name.split(".")[0]
    dead, elsewhere = CacheWriter(cache, identity, 8, "cosine"), CacheWriter(cache, "f" * 40, 8, "cosine")
    dead.add(["x"], [""], ["{}"], np.ones((1, 8), np.float32))
    dead._file.close()  # killed while writing: neither committed nor aborted
    path.unlink()
    try:
        with _open(where, cache) as reader:
            assert reader.count() == 300  # read from the table, its file written
        assert not dead._path.exists()
        assert elsewhere._path.exists()  # another collection's, maybe being written now
    finally:
        elsewhere.abort()


def test_a_file_the_database_cannot_record_still_serves_its_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another connection holds SQLite's write lock while a reader writes its file: the file is not recorded (no
    other process maps it, logged), and this process maps it (it read the table through it all the same). The
    read waits for the lock briefly, not for the whole busy timeout (30 s)."""
    url, cache = f"sqlite:///{tmp_path}/v.db", tmp_path / "cache"
    with SQLVectorMemory(url, collection="c") as writer:
        writer.store([{"id": f"d{i}", "embedding": [1.0, float(i)]} for i in range(20)])
    reader = SQLVectorMemory(url, collection="c", cache_dir=cache)
    assert reader.count() == 20  # its first file, recorded
    with SQLVectorMemory(url, collection="c") as writer:
        writer.clear()  # a new generation: the reader's next read loads the table and writes a new file
        writer.store([{"id": f"e{i}", "embedding": [1.0, float(i)]} for i in range(30)])
    other = sqlite3.connect(tmp_path / "v.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with caplog.at_level(logging.WARNING):
            started = time.monotonic()
            assert reader.count() == 30
            assert time.monotonic() - started < 5
        assert isinstance(reader._index, CachedIndex)
        for _ in range(3):  # every pooled connection waits the usual busy timeout again
            with reader._db.engine.connect() as connection:
                assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    finally:
        other.execute("ROLLBACK")
        other.close()
        reader.close()
    assert "not recorded in the database" in caplog.text


def test_a_process_started_after_the_file_maps_it_and_sees_later_writes(
    where: tuple[str, str], filled: tuple[np.ndarray, Path]
) -> None:
    vectors, cache = filled
    context = process_context()
    results, proceed = context.Queue(), context.Event()
    script = """
from memwoven.backends.sql import SQLVectorMemory
from memwoven._vector_cache import CachedIndex
memory = SQLVectorMemory(url, table_prefix=prefix, collection="docs", cache_dir=cache)
results.put((memory.search(query, top_k=1)[0].document.id, isinstance(memory._index, CachedIndex)))
proceed.wait(60)
results.put((memory.search(query, top_k=1)[0].document.id, memory.count()))
memory.close()
"""
    query = vectors[42].tolist()
    child = start(
        context, script, url=where[0], prefix=where[1], cache=str(cache), query=query, results=results, proceed=proceed
    )
    try:
        assert results.get(timeout=120) == ("d42", True)
        with _open(where, cache) as writer:
            writer.delete(["d42"])
            writer.store(_docs(vectors[42:43], start=900))
        proceed.set()
        assert results.get(timeout=120) == ("d900", 300)
    finally:
        child.join(timeout=60)
    assert child.exitcode == 0


def test_many_changes_since_the_file_write_a_new_one(where: tuple[str, str], filled: tuple[np.ndarray, Path]) -> None:
    _, cache = filled
    more = np.random.default_rng(5).standard_normal((4200, 8)).astype(np.float32)
    with _open(where, False) as writer:
        writer.store(_docs(more, start=10_000))
    before = _files(cache)
    with _open(where, cache) as reader:
        assert reader.count() == 4500
        assert isinstance(reader._index, CachedIndex)
        assert reader._index.base.count == 4500
    after = _files(cache)
    assert len(after) == 1
    assert after != before
    with _open(where, cache) as late:
        assert _top(late, more[77], k=1)[0][0] == "d10077"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, "env"),
        ("on", "env"),
        ("True", "env"),
        ("YES", "env"),
        ("1", "env"),
        (False, None),
        ("off", None),
        ("False", None),  # as a URL's ?cache_dir=False reads: not a directory named "False"
        ("Off", None),
        ("no", None),
        ("0", None),
        ("elsewhere", "elsewhere"),
        ("relative", "relative"),
        ("~/home-relative", "home/home-relative"),
    ],
)
def test_cache_dir_values(
    where: tuple[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: Any, expected: str | None
) -> None:
    monkeypatch.setenv("MEMWOVEN_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    if value == "elsewhere":
        value = tmp_path / "elsewhere"
    with _open(where, value) as memory:
        monkeypatch.chdir("/")  # the directory was resolved when the object was made
        assert memory.cache_dir == (None if expected is None else tmp_path / expected)


def test_cache_dir_refuses_other_values(where: tuple[str, str]) -> None:
    with pytest.raises(InvalidInputError, match="cache_dir"):
        _open(where, 3)  # type: ignore[arg-type]


def test_the_url_can_name_the_cache_dir(where: tuple[str, str], filled: tuple[np.ndarray, Path]) -> None:
    vectors, cache = filled
    separator = "&" if "?" in where[0] else "?"
    url = f"{where[0]}{separator}table_prefix={where[1]}&cache_dir={cache}"
    with open_vector_memory(url, collection="docs") as memory:
        assert isinstance(memory, SQLVectorMemory)
        assert memory.cache_dir == cache
        assert _top(memory, vectors[3], k=1)[0][0] == "d3"
        assert isinstance(memory._index, CachedIndex)
    assert [c.name for c in vector_collections(url)] == ["docs"]


@pytest.mark.parametrize("cached", [False, True], ids=["no-cache", "cache"])
def test_a_clear_during_a_full_load_is_not_mixed_in(
    where: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
) -> None:
    import memwoven.backends.sql.vector as sql_vector

    monkeypatch.setattr(sql_vector, "_PAGE", 50)  # several ranges
    vectors = np.random.default_rng(6).standard_normal((300, 8)).astype(np.float32)
    with _open(where, False) as writer:
        writer.store(_docs(vectors))
    read_pages = SQLVectorMemory._live_pages
    cleared: list[bool] = []

    def pages(self: SQLVectorMemory, connection: Any, expected: int) -> Iterator[Any]:
        for number, rows in enumerate(read_pages(self, connection, expected)):
            if number == 1 and not cleared:  # another process clears and refills between two pages
                with _open(where, False) as other:
                    other.clear()
                    other.store(_docs(vectors[:5], start=700))
                cleared.append(True)
            yield rows

    monkeypatch.setattr(SQLVectorMemory, "_live_pages", pages)
    old, new = sorted(f"d{i}" for i in range(300)), [f"d{i}" for i in range(700, 705)]
    with _open(where, tmp_path / "cache" if cached else False) as reader:
        assert reader.ids() in (old, new)  # one state or the other (SQLite reads in one snapshot), never a mix
        assert cleared
        assert reader.ids() == new
        assert _top(reader, vectors[3], k=1)[0][0] == "d703"
    with _open(where, tmp_path / "cache" if cached else False) as late:
        assert late.ids() == new


def test_a_long_lived_reader_moves_to_a_new_file_unless_another_process_writes_one(
    where: tuple[str, str], filled: tuple[np.ndarray, Path]
) -> None:
    _, cache = filled
    (identity,) = {name.split(".")[0] for name in _files(cache)}
    more = np.random.default_rng(8).standard_normal((4200, 8)).astype(np.float32)
    with _open(where, cache) as reader, _open(where, False) as writer:
        assert reader.count() == 300
        assert isinstance(reader._index, CachedIndex)
        before = _files(cache)
        writer.store(_docs(more, start=10_000))
        with writing(cache, identity, wait=True):  # as if another process were writing a file
            assert reader.count() == 4500  # from the overlay
            assert _top(reader, more[5], k=1)[0][0] == "d10005"
            assert _files(cache) == before
        writer.delete(["d10005"])
        assert reader.count() == 4499  # the lock is free: this read writes a new file and maps it
        assert _files(cache) != before
        assert isinstance(reader._index, CachedIndex)
        assert reader._index.base.count >= 4499
        assert len(reader._index.overlay) <= 1
        assert reader.get(["d10005"]) == []
        assert _top(reader, more[6], k=1)[0][0] == "d10006"


def test_a_process_starting_while_another_writes_the_file_waits_and_maps_it(
    where: tuple[str, str], filled: tuple[np.ndarray, Path], tmp_path: Path
) -> None:
    import threading

    vectors, cache = filled
    (path,) = cache.glob("*.mwvc")
    identity = path.name.split(".")[0]
    kept = tmp_path / "kept.mwvc"
    path.rename(kept)  # no file yet: the first reader would read the table
    inode = kept.stat().st_ino
    result: list[Any] = []
    context = process_context()
    held, release = context.Event(), context.Event()
    script = """
from memwoven._vector_cache import writing
with writing(cache, identity, wait=True):  # writing the file
    held.set()
    release.wait(60)
"""
    writer = start(context, script, cache=cache, identity=identity, held=held, release=release)
    try:
        assert held.wait(60)
        with _open(where, cache) as reader:
            thread = threading.Thread(target=lambda: result.append(_top(reader, vectors[11], k=1)))
            thread.start()
            thread.join(0.5)
            assert thread.is_alive()  # waiting for the writer's file
            kept.rename(path)  # the writer's file, in place
            release.set()
            thread.join(60)
            assert result == [[("d11", pytest.approx(1.0))]]
            assert isinstance(reader._index, CachedIndex)
            assert reader._index.base.path == path  # mapped, not written again
    finally:
        release.set()
        writer.join(60)
    assert _files(cache) == [path.name]
    assert path.stat().st_ino == inode  # the same file, not one written again under its name


def test_async_first_reads_never_block_the_event_loop_on_the_lock(
    where: tuple[str, str], filled: tuple[np.ndarray, Path], tmp_path: Path
) -> None:
    """Two first reads of one object on one loop (the second must not wait, on the loop's thread, for the lock the
    first holds while it awaits the table), then a first read while another process writes the file: both load."""
    _, cache = filled
    (identity,) = {name.split(".")[0] for name in _files(cache)}
    fresh, busy = tmp_path / "fresh", tmp_path / "busy"
    context = process_context()
    results, locked = context.Queue(), context.Event()
    script = """
import asyncio
from memwoven.backends.sql import SQLVectorMemory

async def first_reads(cache):
    memory = SQLVectorMemory(url, table_prefix=prefix, collection="docs", cache_dir=cache)
    try:
        return await asyncio.gather(memory.acount(), memory.acount(), memory.aids())
    finally:
        await memory.aclose()

async def main():
    counts = await first_reads(fresh)
    results.put(counts[:2] + [len(counts[2])])
    locked.wait(60)
    counts = await first_reads(busy)
    results.put(counts[:2] + [len(counts[2])])

asyncio.run(main())
"""
    child = start(
        context, script, url=where[0], prefix=where[1], fresh=fresh, busy=busy, results=results, locked=locked
    )
    try:
        assert results.get(timeout=20) == [300, 300, 300]
        # the first read wrote one; on SQLite a concurrent first read may write a second when recording the first
        # in the database met another task's write ("not recorded in the database ... database is locked", logged)
        assert _files(fresh)
        with writing(busy, identity, wait=True):  # as another process writing it
            locked.set()
            assert results.get(timeout=20) == [300, 300, 300]  # read from the table meanwhile
        assert _files(busy) == []
    finally:
        locked.set()
        child.join(10)
        child.kill()  # if hung
        child.join(10)
