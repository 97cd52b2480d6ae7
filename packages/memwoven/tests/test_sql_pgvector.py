"""`SQLVectorMemory(search="server")`: pgvector search in PostgreSQL, on a private server with the extension.

The conformance suite runs against server mode (sync and async); the rest compares its results with the exact
in-process index on random collections (paging, filters, thresholds, both metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import pq

from memwoven import open_vector_memory
from memwoven.backends.sql import SQLVectorMemory, _pgvector
from memwoven.backends.sql._pgvector import QueryVector, register_vector_dumper
from memwoven.contracts import VectorMemory
from memwoven.errors import InvalidInputError
from memwoven.models import ScoredDocument, VectorDocument
from memwoven.testing import VectorMemoryContract
from memwoven.urls import vector_collections
from memwoven.vector_index import VectorIndex
from memwoven_test_support import unique_name

pytestmark = pytest.mark.service


def _server_memory(url: str, prefix: str, **options: object) -> SQLVectorMemory:
    return SQLVectorMemory(url, table_prefix=prefix, search="server", **options)  # type: ignore[arg-type]


class TestPgvectorVector(VectorMemoryContract):
    options: ClassVar[dict[str, object]] = {}  # the server-search options every memory of the class is opened with

    @pytest.fixture
    def vector_memory_factory(self, pgvector_url: str) -> Iterator[Callable[..., VectorMemory]]:
        prefix = unique_name("pgv") + "_"
        made: list[SQLVectorMemory] = []

        def make(dimension: int | None, metric: str) -> VectorMemory:
            collection = unique_name("c")
            memory = _server_memory(
                pgvector_url, prefix, collection=collection, dimension=dimension, metric=metric, **self.options
            )
            made.append(memory)
            return memory

        yield make
        if made:
            with contextlib.suppress(Exception):
                made[0].drop_tables()

    def reopen(self, memory: VectorMemory) -> VectorMemory:
        assert isinstance(memory, SQLVectorMemory)
        return _server_memory(
            str(memory.engine.url.render_as_string(hide_password=False)),
            memory.table_prefix,
            collection=memory.collection,
            metric=memory.metric,
            **self.options,
        )

    @contextlib.contextmanager
    def neighbour(self, memory: VectorMemory) -> Iterator[VectorMemory]:
        assert isinstance(memory, SQLVectorMemory)
        with _server_memory(
            memory.engine.url.render_as_string(hide_password=False),
            memory.table_prefix,
            collection=memory.collection + "s",
            **self.options,
        ) as neighbour:
            yield neighbour


def _corpus(count: int, dimension: int, seed: int) -> list[VectorDocument]:
    generator = random.Random(seed)
    documents = []
    for i in range(count):
        vector = [generator.gauss(0, 1) for _ in range(dimension)]
        if i % 7 == 0:  # exact duplicates of an earlier vector: ties broken by id
            vector = [generator.choice([1.0, -1.0]) for _ in range(dimension)]
        metadata: dict[str, object] = {"tenant": i % 13, "kind": generator.choice(["a", "b", "c"])}
        if i % 5 == 0:
            metadata["rank"] = i
        if i % 11 == 0:
            metadata["note"] = "nul\x00inside"
        documents.append(VectorDocument(id=f"d{i:05d}", content=f"c{i}", embedding=vector, metadata=metadata))
    return documents


def _indexed_corpus(count: int, dimension: int, seed: int, metric: str) -> tuple[list[VectorDocument], VectorIndex]:
    """`_corpus` and an exact in-process index of it."""
    documents = _corpus(count, dimension, seed)
    index = VectorIndex(dimension, metric)  # type: ignore[arg-type]
    index.upsert(index.prepare(documents))
    return documents, index


FILTERS: list[dict[str, object] | None] = [
    None,
    {"tenant": 7},
    {"tenant": {"$in": [1, 2, 3]}, "kind": "b"},
    {"kind": {"$ne": "a"}},
    {"rank": {"$gte": 100}},
    {"$or": [{"tenant": 0}, {"kind": "c"}]},
    {"note": "nul\x00inside"},
    {"tenant": 99},
]


def _same_hits(got: list[ScoredDocument], expected: list[ScoredDocument]) -> None:
    """The same documents in the same order, with float32 scores equal up to BLAS's rounding (a few ulps)."""
    assert [hit.document.id for hit in got] == [hit.document.id for hit in expected]
    assert [hit.score for hit in got] == pytest.approx([hit.score for hit in expected], rel=1e-6, abs=1e-6)
    assert [hit.document for hit in got] == [hit.document for hit in expected]


@pytest.mark.parametrize("binary", [True, False], ids=["psycopg3", "other-driver"])
@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_server_search_equals_the_exact_index(
    pgvector_url: str, metric: str, binary: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not binary:  # a driver without psycopg 3's adapters: the query vector goes as text cast to vector
        monkeypatch.setattr(_pgvector, "register_vector_dumper", lambda connection: False)
    dimension = 24
    documents, index = _indexed_corpus(1500, dimension, 5, metric)
    memory = _server_memory(pgvector_url, unique_name("pgv") + "_", collection="c", metric=metric)
    try:
        memory.store(documents)
        memory.delete([f"d{i:05d}" for i in range(0, 1500, 9)])
        index.remove([f"d{i:05d}" for i in range(0, 1500, 9)])
        generator = random.Random(1)
        for round_ in range(12):
            query = (
                list(documents[generator.randrange(1500)].embedding)
                if round_ % 3 == 0
                else [generator.gauss(0, 1) for _ in range(dimension)]
            )
            for filter_ in FILTERS:
                for top_k in (1, 10, 300):
                    expected = index.search(query, top_k=top_k, filter=filter_)
                    got = memory.search(query, top_k=top_k, filter=filter_)
                    _same_hits(got, expected)
                    scores = [hit.score for hit in expected]
                    middle = len(scores) // 2
                    if middle and scores[middle - 1] - scores[middle] > 1e-4:  # away from float32 rounding
                        threshold = (scores[middle - 1] + scores[middle]) / 2
                        expected = index.search(query, top_k=top_k, threshold=threshold, filter=filter_)
                        got = memory.search(query, top_k=top_k, threshold=threshold, filter=filter_)
                        _same_hits(got, expected)
                        assert len(got) == middle
        assert memory.count() == len(index)
        assert memory.ids() == sorted(index.ids)
    finally:
        memory.drop_tables()


@pytest.mark.parametrize("index", [None, "hnsw"])
def test_the_preselection_keeps_integers_a_float_equals(pgvector_url: str, index: str | None) -> None:
    # jsonb compares decimal text: 2.0**80 is written 1.2089258196146292e+24 and 1e23 as 1e+23, neither the integer
    # it equals; the pre-selection must not drop those documents (the filters compare exact values).
    documents = [
        VectorDocument(id="big", content="", embedding=[1.0, 0.0], metadata={"a": 2**80}),
        VectorDocument(id="e23", content="", embedding=[0.0, 1.0], metadata={"a": 99999999999999991611392}),
        VectorDocument(id="half", content="", embedding=[1.0, 1.0], metadata={"a": 0.5}),
        VectorDocument(id="two", content="", embedding=[1.0, 2.0], metadata={"a": 2}),
    ]
    memory = _server_memory(pgvector_url, unique_name("pgv") + "_", collection="c", index=index)
    try:
        memory.store(documents)
        for filter_, expected in [
            ({"a": 2.0**80}, ["big"]),
            ({"a": 1e23}, ["e23"]),
            ({"a": {"$in": [1e23, 5]}}, ["e23"]),
            ({"a": {"$eq": 2.0**80}}, ["big"]),
            ({"a": 0.5}, ["half"]),
            ({"a": 2.0}, ["two"]),
        ]:
            assert sorted(hit.document.id for hit in memory.search([1.0, 1.0], top_k=5, filter=filter_)) == expected
    finally:
        memory.drop_tables()
    # Exact floats stay pre-selected (a GIN index answers them); the others are left to Python.
    assert _pgvector._equalities({"a": 0.5, "b": 2.0, "c": 2**53, "d": -(2.0**53)}) == [
        ("a", [0.5]),
        ("b", [2.0]),
        ("c", [2**53]),
        ("d", [-(2.0**53)]),
    ]
    assert _pgvector._equalities({"a": 2.0**80, "b": 1e23, "c": {"$in": [1.5, 2.0**54]}, "d": 2**53 + 1}) == []


@pytest.mark.parametrize(("index", "target"), [(None, 64), ("hnsw", 2)])  # the first row of the second page
def test_a_delete_between_pages_skips_no_row(
    pgvector_url: str, index: str | None, target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another client deletes the nearest row once the first page is read: pages read by offset in separate
    # statements would then start one row late and skip the target, the only match. The pages after the first
    # share a snapshot, read again from the start.
    prefix = unique_name("pgv") + "_"
    memory = _server_memory(pgvector_url, prefix, collection="c", index=index)
    other = _server_memory(pgvector_url, prefix, collection="c", index=index)
    try:
        memory.store(
            VectorDocument(
                id=f"d{i:03d}",
                content="",
                embedding=[math.cos(i * 0.005), math.sin(i * 0.005)],  # ranked by i from the query [1, 0]
                metadata={"t": int(i == target)},
            )
            for i in range(200)
        )
        filter_ = {"t": {"$gt": 0}}  # no equality: no pre-selection, every row is paged through
        assert [hit.document.id for hit in memory.search([1.0, 0.0], top_k=1, filter=filter_)] == [f"d{target:03d}"]
        absorb, pages = _pgvector._absorb, []

        def absorb_then_delete(*args: Any, **kwargs: Any) -> Any:
            pages.append(absorb(*args, **kwargs))
            if len(pages) == 1:
                other.delete(["d000"])
            return pages[-1]

        monkeypatch.setattr(_pgvector, "_absorb", absorb_then_delete)
        statements: list[str] = []
        sa.event.listen(memory.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
        assert [hit.document.id for hit in memory.search([1.0, 0.0], top_k=1, filter=filter_)] == [f"d{target:03d}"]
        assert len(pages) == 2
        assert [sql for sql in statements if sql.startswith(("BEGIN", "ROLLBACK"))] == [
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
            "ROLLBACK",
        ]
        # The snapshot ended with the search: the next one sees a write made since.
        other.store([VectorDocument(id="new", content="", embedding=[1.0, 0.0], metadata={"t": 1})])
        assert [hit.document.id for hit in memory.search([1.0, 0.0], top_k=1, filter=filter_)] == ["new"]
        statements.clear()
        assert [hit.document.id for hit in memory.search([1.0, 0.0], top_k=1)] == ["new"]  # one page: no snapshot
        assert not [sql for sql in statements if sql.startswith(("BEGIN", "ROLLBACK"))]
    finally:
        memory.drop_tables()
        other.close()


@pytest.mark.parametrize("index", [None, "hnsw"])
def test_a_connection_lost_or_a_search_cancelled_between_pages_is_retried_or_cancelled(
    pgvector_url: str, index: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The snapshot of the pages after the first was ended with a ROLLBACK on the connection SQLAlchemy had
    # invalidated, which raised PendingRollbackError: no retry through the pool, and no CancelledError.
    memory = _server_memory(pgvector_url, unique_name("pgv") + "_", collection="c", index=index)
    try:
        memory.store(
            VectorDocument(id=f"d{i:03d}", content="", embedding=[math.cos(i * 0.005), math.sin(i * 0.005)])
            for i in range(200)
        )
        filter_ = {"i": {"$gt": 0}}  # no match: every page is read
        absorb, pages = _pgvector._absorb, []

        def absorb_then_lose_the_snapshot(*args: Any, **kwargs: Any) -> Any:
            pages.append(1)
            if len(pages) == 2:  # the snapshot's first page is read: its connection goes
                with psycopg.connect(pgvector_url, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE state = 'idle in transaction' AND datname = current_database()"
                    )
            return absorb(*args, **kwargs)

        monkeypatch.setattr(_pgvector, "_absorb", absorb_then_lose_the_snapshot)
        assert memory.search([1.0, 0.0], top_k=1, filter=filter_) == []  # retried through the pool
        assert len(pages) > 2
        pages.clear()
        assert asyncio.run(memory.asearch([1.0, 0.0], top_k=1, filter=filter_)) == []
        assert len(pages) > 2
        monkeypatch.setattr(_pgvector, "_absorb", lambda *args, **kwargs: [pages.append(1), absorb(*args, **kwargs)][1])

        async def cancelled() -> list[Any]:
            search = asyncio.ensure_future(memory.asearch([1.0, 0.0], top_k=1, filter=filter_))
            while len(pages) < 2:  # noqa: ASYNC110 - waits for the page counter the patched reader moves
                await asyncio.sleep(0)
            search.cancel()  # in the snapshot, at its next statement
            with pytest.raises(asyncio.CancelledError):
                await search
            return await memory.asearch([1.0, 0.0], top_k=1)

        pages.clear()
        assert [hit.document.id for hit in asyncio.run(cancelled())] == ["d000"]
    finally:
        memory.drop_tables()


def test_short_vectors_are_found_by_cosine_search(pgvector_url: str) -> None:
    # pgvector's <=> sums squared norms in float32: 1e-23 squared underflows to 0 (a NaN distance, sorted after
    # every row, so paging stopped before it) and 1e-20 squared keeps a few bits; the exact search must find both.
    generator = random.Random(2)
    documents = [
        VectorDocument(id=f"n{i:02d}", content="", embedding=[generator.gauss(0, 1), generator.gauss(3, 1)])
        for i in range(100)
    ]
    documents.append(VectorDocument(id="tiny", content="", embedding=[1e-23, 0.0]))
    documents.append(VectorDocument(id="short", content="", embedding=[-3e-21, -1e-20]))
    index = VectorIndex(2, "cosine")
    index.upsert(index.prepare(documents))
    memory = _server_memory(pgvector_url, unique_name("pgv") + "_", collection="c")
    try:
        memory.store(documents)
        # short queries too: their float32 dot with a short row underflowed in the database (distance 1)
        for query in ([0.0, -1.0], [1.0, -1.0], [0.0, 1.0], [1e-23, 0.0], [1e-23, 1e-25], [-3e-30, -1e-29]):
            for top_k in (1, 2, 5):
                _same_hits(memory.search(query, top_k=top_k), index.search(query, top_k=top_k))
        assert {"short", "tiny"} <= {hit.document.id for hit in memory.search([0.0, -1.0], top_k=5)}
    finally:
        memory.drop_tables()


def test_server_mode_holds_no_index_and_a_new_object_reads_the_table(pgvector_url: str) -> None:
    prefix = unique_name("pgv") + "_"
    writer = _server_memory(pgvector_url, prefix, collection="c")
    try:
        writer.store(_corpus(50, 4, seed=2))
        reader = _server_memory(pgvector_url, prefix, collection="c")
        with reader:
            assert reader.count() == 50
            assert reader.dimension == 4
            assert len(reader._index) == 0  # nothing loaded in process
            assert [h.document.id for h in reader.search([1.0, 0.0, 0.0, 0.0], top_k=3)] == [
                h.document.id for h in writer.search([1.0, 0.0, 0.0, 0.0], top_k=3)
            ]
        assert len(writer._index) == 0
    finally:
        writer.drop_tables()


def test_the_url_option_selects_server_search(pgvector_url: str) -> None:
    prefix = unique_name("pgv") + "_"
    memory = open_vector_memory(f"{pgvector_url}?search=server&table_prefix={prefix}", collection="c")
    assert isinstance(memory, SQLVectorMemory)
    try:
        assert memory.search_mode == "server"
        assert "search='server'" in repr(memory)
        memory.store([VectorDocument(id="a", content="", embedding=[1.0, 0.0], metadata={})])
        assert memory.search([1.0, 0.0], top_k=1)[0].score == 1.0
    finally:
        memory.drop_tables()
    with pytest.raises(InvalidInputError, match="search"):
        open_vector_memory(f"{pgvector_url}?search=nearby", collection="c")


def test_server_search_needs_postgresql(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="PostgreSQL"):
        SQLVectorMemory(f"sqlite:///{tmp_path}/v.db", search="server")
    assert SQLVectorMemory(f"sqlite:///{tmp_path}/v.db").search_mode == "client"


# HNSW (index="hnsw"): approximate server search -------------------------------------------------------------


class TestPgvectorHnswVector(TestPgvectorVector):
    """The conformance suite with the HNSW index, where its guarantees hold: every collection it builds is far
    smaller than the first page the index is asked for plus ef_search=1000, so the index scan reaches every row and
    the results are exact (the suite's exactness cases do not hold on large collections; see the recall test)."""

    options: ClassVar[dict[str, object]] = {"index": "hnsw", "ef_search": 1000}


def _statements(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, bool]]:
    """Record every statement psycopg's cursors send from now on (SQLAlchemy's and the HNSW pages, which run on the
    driver's cursor): its text, its parameters and whether its results come in binary format."""
    seen: list[tuple[str, Any, bool]] = []
    execute = psycopg.Cursor.execute

    def record(cursor: psycopg.Cursor[Any], query: Any, params: Any = None, **options: Any) -> Any:
        binary = options.get("binary")
        seen.append((str(query), params, cursor.format == pq.Format.BINARY if binary is None else binary))
        return execute(cursor, query, params, **options)

    monkeypatch.setattr(psycopg.Cursor, "execute", record)
    return seen


def _index_definitions(memory: SQLVectorMemory, prefix: str) -> list[str]:
    with memory.engine.connect() as connection:
        found = connection.execute(
            sa.text("SELECT indexdef FROM pg_indexes WHERE indexname LIKE :name"), {"name": f"{prefix}hnsw_%"}
        )
        return sorted(found.scalars())


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_hnsw_search_is_approximate_with_exact_scores_through_the_index(
    pgvector_url: str, metric: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dimension = 24
    documents, index = _indexed_corpus(3000, dimension, 8, metric)
    prefix = unique_name("pgh") + "_"
    memory = _server_memory(pgvector_url, prefix, collection="c", metric=metric, index="hnsw", ef_search=100)
    neighbour = _server_memory(pgvector_url, prefix, collection="n", metric=metric, index="hnsw")
    try:
        memory.store(documents)
        neighbour.store(documents[:10])
        gone = [f"d{i:05d}" for i in range(0, 3000, 9)]
        memory.delete(gone)
        index.remove(gone)
        memory.search(list(documents[1].embedding), top_k=10)  # the first search builds the index
        statements = _statements(monkeypatch)
        generator = random.Random(4)
        found = total = 0
        for _ in range(20):
            query = [generator.gauss(0, 1) for _ in range(dimension)]
            for filter_ in (None, {"tenant": 7}, {"kind": {"$ne": "a"}}):
                expected = index.search(query, top_k=10, filter=filter_)
                got = memory.search(query, top_k=10, filter=filter_)
                assert len(got) == 10
                exact = {hit.document.id: hit.score for hit in index.search(query, top_k=3000, filter=filter_)}
                for hit in got:  # every row returned matches, with its exact float32 score
                    assert hit.score == pytest.approx(exact[hit.document.id], rel=1e-6, abs=1e-6)
                assert [hit.score for hit in got] == sorted((hit.score for hit in got), reverse=True)
                found += len({h.document.id for h in got} & {h.document.id for h in expected})
                total += len(expected)
                threshold = got[4].score
                above = memory.search(query, top_k=10, threshold=threshold, filter=filter_)
                assert [h.document.id for h in above] == [h.document.id for h in got[:4]]  # exclusive
        assert found / total >= 0.9  # recall@10 (it is ~0.99 here; 1.0 is not promised)
        # Each search is its page statements alone (no SET LOCAL, COMMIT): each sets ef_search, and pgvector 0.8's
        # iterative scan where a pre-selection may reject rows, for its own transaction; the vector is bound. A
        # search of several pages reads those after the first in one snapshot (`_pgvector._Pages`).
        assert not [sql for sql, _, _ in statements if "SET LOCAL" in sql or "COMMIT" in sql]
        snapshots = [sql for sql, _, _ in statements if sql.startswith(("BEGIN", "ROLLBACK"))]
        assert snapshots == ["BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "ROLLBACK"] * (len(snapshots) // 2)
        statements = [statement for statement in statements if statement[0] not in snapshots]
        pages = [(sql, parameters) for sql, parameters, binary in statements if " AS VECTOR(24)" in sql.upper()]
        assert len(pages) == len(statements) >= 20 * 3 * 2  # nothing but page statements
        assert all(binary for _, _, binary in statements)  # results in binary format
        assert all(isinstance(parameters, dict) for _, parameters in pages)
        values = [set(parameters.values()) for _, parameters in pages]
        assert all({"hnsw.ef_search", "100"} <= found for found in values)
        assert any("relaxed_order" in found for found in values)  # the {"tenant": 7} pre-selection
        assert any("relaxed_order" not in found for found in values)  # unfiltered first pages
        assert all(any(isinstance(value, QueryVector) for value in found) for found in values)  # binary, bound
        first = next((sql, dict(found)) for sql, found in pages if "relaxed_order" not in set(found.values()))
        with memory.engine.connect() as connection:
            connection = connection.execution_options(isolation_level="AUTOCOMMIT")
            register_vector_dumper(connection)
            assert len(connection.exec_driver_sql(first[0], first[1]).all()) == 11
            assert connection.exec_driver_sql("SHOW hnsw.ef_search").scalar() == "40"  # ended with the statement
        with memory.engine.begin() as connection:
            register_vector_dumper(connection)
            # 3,000 rows are few enough for the planner to sort them instead; without sorts it must show whether the
            # partial expression index can order this very statement's rows
            connection.exec_driver_sql("SET LOCAL enable_sort = off; SET LOCAL enable_incremental_sort = off")
            plan = "\n".join(connection.exec_driver_sql("EXPLAIN " + first[0], first[1]).scalars())
            # the statement's own setting governs its index scan: without iterative scan, ef_search rows at most
            one = {key: "1" if value == "100" else value for key, value in first[1].items()}
            assert len(connection.exec_driver_sql(first[0], one).all()) == 1
        assert f"Index Scan using {prefix}hnsw_" in plan
        assert len(_index_definitions(memory, prefix)) == 1  # built by a collection's first search
        hits = neighbour.search(list(documents[3].embedding), top_k=20)
        assert hits[0].document.id == "d00003"
        assert len(hits) == 10  # its own rows only
        definitions = _index_definitions(memory, prefix)
        assert len(definitions) == 2  # one per collection, each over its own rows
        assert all("WHERE" in definition and "collection_key" in definition for definition in definitions)
        operators = "vector_cosine_ops" if metric == "cosine" else "vector_ip_ops"
        assert all(f"::vector({dimension})) {operators}" in definition for definition in definitions)
    finally:
        memory.drop_tables()


def test_a_warm_hnsw_search_is_one_statement_on_the_driver_cursor(
    pgvector_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the index exists, an unfiltered search is one statement, sent on psycopg's cursor with binary results
    (not through SQLAlchemy's execution), its text the same for every query vector; if the server drops the kept
    read connection, the search runs again on a new one and the caller sees nothing."""
    documents, index = _indexed_corpus(400, 8, 3, "cosine")
    memory = _server_memory(pgvector_url, unique_name("pgh") + "_", collection="c", index="hnsw", ef_search=100)
    try:
        memory.store(documents)
        memory.search(list(documents[0].embedding), top_k=5)  # builds the index, learns the dimension
        through_sqlalchemy: list[str] = []
        sa.event.listen(memory.engine, "before_cursor_execute", lambda *args: through_sqlalchemy.append(args[2]))
        statements = _statements(monkeypatch)
        for position in (3, 4):
            query = list(documents[position].embedding)
            got = memory.search(query, top_k=5)
            _same_hits(got, index.search(query, top_k=5))  # 400 rows, ef_search 100 + 6: the scan reaches all
        assert [(binary, sql == statements[0][0]) for sql, _, binary in statements] == [(True, True), (True, True)]
        assert through_sqlalchemy == []
        # A filter's values are parameters of the SQL kept per filter shape: other values, the same text.
        firsts = []
        for tenants in ([1, 2, 3], [4, 5, 6]):
            statements.clear()
            filter_ = {"tenant": {"$in": tenants}, "kind": "b"}
            query = list(documents[6].embedding)
            _same_hits(memory.search(query, top_k=5, filter=filter_), index.search(query, top_k=5, filter=filter_))
            firsts.append(statements[0])  # the first page
        assert firsts[0][0] == firsts[1][0]
        assert {"1", "2", "3"} <= set(firsts[0][1].values())
        assert not {"1", "2", "3"} & set(firsts[1][1].values())
        (pinned,) = memory._db._pinned._free  # type: ignore[union-attr]  # one, calls being sequential
        pid = pinned.connection.dbapi_connection.info.backend_pid  # type: ignore[union-attr]
        with psycopg.connect(pgvector_url, autocommit=True) as killer:
            assert killer.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        query = list(documents[5].embedding)
        _same_hits(memory.search(query, top_k=5), index.search(query, top_k=5))
    finally:
        memory.drop_tables()


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_hnsw_search_through_another_driver(pgvector_url: str, metric: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without psycopg 3's adapters the page statement binds the vector as text and reads the results in text format
    (embeddings in base64) through SQLAlchemy: the same hits."""
    monkeypatch.setattr(_pgvector, "register_vector_dumper", lambda connection: False)
    documents, index = _indexed_corpus(400, 8, 6, metric)
    memory = _server_memory(
        pgvector_url, unique_name("pgh") + "_", collection="c", metric=metric, index="hnsw", ef_search=100
    )
    try:
        memory.store(documents)
        statements = _statements(monkeypatch)
        for position, filter_ in ((7, None), (8, {"tenant": {"$in": [1, 2]}}), (9, {"kind": "c"})):
            query = list(documents[position].embedding)
            got = memory.search(query, top_k=5, filter=filter_)
            _same_hits(got, index.search(query, top_k=5, filter=filter_))
        pages = [(sql, binary) for sql, _, binary in statements if " AS VECTOR(8)" in sql.upper()]
        assert pages
        assert all("encode(" in sql and not binary for sql, binary in pages)
    finally:
        memory.drop_tables()


def test_hnsw_options_are_checked_before_anything_is_written(pgvector_url: str, tmp_path: Path) -> None:
    bad: list[dict[str, object]] = [
        {"search": "server", "index": "ivfflat"},
        {"search": "client", "index": "hnsw"},
        {"search": "server", "ef_search": 100},  # without index="hnsw"
        {"search": "server", "index": "hnsw", "ef_search": 0},
        {"search": "server", "index": "hnsw", "ef_search": 1001},
        {"search": "server", "index": "hnsw", "hnsw_m": 1},
        {"search": "server", "index": "hnsw", "hnsw_m": True},
        {"search": "server", "index": "hnsw", "hnsw_m": 16, "hnsw_ef_construction": 20},  # < 2 m
        {"search": "server", "index": "hnsw", "dimension": 2001},
    ]
    for options in bad:
        with pytest.raises(InvalidInputError):
            SQLVectorMemory(pgvector_url, table_prefix="never_", **options)  # type: ignore[arg-type]
    prefix = unique_name("pgh") + "_"
    memory = _server_memory(pgvector_url, prefix, collection="wide", index="hnsw")
    try:
        with pytest.raises(InvalidInputError, match="2000"):
            memory.store([VectorDocument(id="a", content="", embedding=[1.0] * 2001, metadata={})])
        assert memory.count() == 0
        assert memory.dimension is None
    finally:
        memory.drop_tables()
    with pytest.raises(InvalidInputError, match="PostgreSQL"):
        SQLVectorMemory(f"sqlite:///{tmp_path}/v.db", search="server", index="hnsw")


def test_the_url_carries_the_hnsw_options(pgvector_url: str) -> None:
    prefix = unique_name("pgh") + "_"
    url = f"{pgvector_url}?search=server&index=hnsw&hnsw_m=8&hnsw_ef_construction=32&ef_search=77&table_prefix={prefix}"
    memory = open_vector_memory(url, collection="c")
    assert isinstance(memory, SQLVectorMemory)
    try:
        assert memory.hnsw is not None
        assert (memory.hnsw.m, memory.hnsw.ef_construction, memory.hnsw.ef_search) == (8, 32, 77)
        assert "index='hnsw', hnsw_m=8, hnsw_ef_construction=32, ef_search=77" in repr(memory)
        assert memory.search([1.0, 0.0], top_k=1) == []  # no dimension yet: nothing to index
        memory.store([VectorDocument(id="a", content="", embedding=[1.0, 0.0], metadata={})])
        assert memory.search([1.0, 0.0], top_k=1)[0].score == 1.0
        assert [c.name for c in vector_collections(url)] == ["c"]
    finally:
        memory.drop_tables()
    for query, match in (
        ("index=hnsw&ef_search=ten", "whole number"),
        ("index=hnsw&ef_search=-3", "whole number"),
        ("index=hnsw&ef_search=5000", "ef_search"),
        ("index=flat", "unknown index"),
        ("ef_search=50", "only apply with index='hnsw'"),
    ):
        with pytest.raises(InvalidInputError, match=match):
            open_vector_memory(f"{pgvector_url}?search=server&{query}", collection="c")
