"""The ItemMemory contract (IM1-IM11) and the reference-model state machine on the in-memory backend and the SQL
backend (SQLite, PostgreSQL, MariaDB), plus what is particular to them and to the `Item` model."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sqlite3
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from clock_support import Clock
from process_support import process_context, start
from pydantic import ValidationError
from sql_support import SQLHooks, sql_place

import memwoven._clock as _clock
from memwoven import InMemoryItemMemory, Item, ItemMemory, ItemWrite, SQLItemMemory, contracts
from memwoven._steps import Call, Steps, arun, run
from memwoven.backends.sql import _driver
from memwoven.backends.sql.items import decode_namespace, encode_namespace
from memwoven.contracts import check_namespace, namespace_matches
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError, InvalidInputError
from memwoven.testing import ItemMemoryContract


class TestInMemoryItemMemory(ItemMemoryContract):
    @pytest.fixture
    def item_memory(self, clock: Clock) -> ItemMemory:
        self.clock = clock
        return InMemoryItemMemory()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)


# The SQL backend on each database ---------------------------------------------------------------------------


class TestSQLItems(SQLHooks, ItemMemoryContract):
    @pytest.fixture
    def item_memory(self, clock: Clock, sql_kind: str, tmp_path: Path) -> Iterator[ItemMemory]:
        self.clock = clock
        with sql_place(sql_kind, tmp_path) as (url, prefix):
            yield SQLItemMemory(url, table_prefix=prefix)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_compare_and_set_retries_with_backoff_from_fresh_reads_then_gives_up(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pauses: list[int] = []
    monkeypatch.setattr(contracts, "_backoff", lambda tried: pauses.append(tried) or 0.0)
    items = InMemoryItemMemory()
    items.put(("ns",), "k", {"n": 0})
    conflicts = [2]  # how many more writes another writer beats

    def increment() -> Steps[int]:
        item = yield Call(items, "get", (("ns",), "k"))
        if conflicts[0]:
            conflicts[0] -= 1
            items.put(("ns",), "k", {"n": item.value["n"] + 10})  # the other writer, after this read
        version: int = yield Call(
            items, "put", (("ns",), "k", {"n": item.value["n"] + 1}), {"expected_version": item.version}
        )
        return version

    drive: Callable[[Steps[int]], int] = run if mode == "sync" else lambda steps: asyncio.run(arun(steps))
    version = drive(contracts.compare_and_set(increment, "the counter"))
    assert pauses == [0, 1]
    item = items.get(("ns",), "k")
    assert item is not None
    assert (item.value["n"], item.version) == (21, version)
    conflicts[0] = 99
    with pytest.raises(ConcurrentModificationError, match=r"^the counter kept changing; gave up after 3 tries$"):
        drive(contracts.compare_and_set(increment, "the counter", retries=3))
    assert pauses == [0, 1, 0, 1, 2]


def test_the_namespace_encoding_keeps_boundaries_and_order() -> None:
    spaces = [("a",), ("ab",), ("a", "b"), ("a\x01",), ("a\x02",), ("a", "\x01b"), ("\x02\x02",), ("\x01\x03",)]
    spaces += [("a", "b", "c"), ("a\x01b",), ("a", "b\x02"), ("a b",), ("z" * 150, "y")]
    for namespace in spaces:
        assert decode_namespace(encode_namespace(namespace)) == namespace
        assert "\x00" not in encode_namespace(namespace)
    assert sorted(spaces) == sorted(spaces, key=encode_namespace)  # the stored strings sort as the tuples do
    for prefix in spaces:
        starting = {ns for ns in spaces if ns[: len(prefix)] == prefix}
        assert {ns for ns in spaces if encode_namespace(ns).startswith(encode_namespace(prefix))} == starting


def test_long_namespaces_and_keys_are_listed_by_prefix(sql_kind: str, tmp_path: Path) -> None:
    with sql_place(sql_kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        long = "x" * 150
        memory.put((long, "a"), "k", {"v": 1})
        memory.put((long, "a", "b"), "k" * 5000, {"v": 2})
        memory.put((long, "ab"), "k", {"v": 3})
        memory.put((long + "y",), "k", {"v": 4})
        assert [i.value["v"] for i in memory.list((long, "a"))] == [1, 2]
        assert [i.value["v"] for i in memory.list((long,))] == [1, 3, 2]
        assert memory.count((long, "a", "b")) == 1
        assert memory.namespaces(prefix=(long, "*"), max_depth=2) == [(long, "a"), (long, "ab")]
        assert "SQLItemMemory(" in repr(memory)
        # differing only after 2,000 characters: still apart and in code point order (MariaDB sorts BLOBs on a prefix)
        shared = "s" * 2000
        memory.put_many([((shared + "b",), shared + "b", {"v": 5}), ((shared + "a",), shared + "a", {"v": 6})])
        memory.put((shared + "a",), shared + "c", {"v": 7})
        assert [ns for ns in memory.namespaces() if ns[0] == shared + "a" or ns[0] == shared + "b"] == [
            (shared + "a",),
            (shared + "b",),
        ]
        assert [i.value["v"] for i in memory.list(after=shared)] == [6, 5, 7]
        assert [i.value["v"] for i in memory.list(after=shared, order="desc", limit=2)] == [7, 5]
        # keys sharing their indexed head (key_head): the page is still in (key, namespace) order
        assert [i.value["v"] for i in memory.list(limit=4, offset=2)] == [4, 2, 6, 5]
        assert [i.value["v"] for i in memory.list((long,), order="desc", limit=2)] == [2, 3]


def test_get_many_of_more_than_one_statement_of_addresses_never_sees_half_a_put_many(
    sql_kind: str, tmp_path: Path
) -> None:
    """put_many is all or nothing, and so is what get_many sees of it: reads run outside a transaction (or in READ
    COMMITTED), so a read of 1,000 items in two statements saw a put_many landing between them half applied."""
    keys = [(("t",), f"k{i:04d}") for i in range(1_000)]
    with (
        sql_place(sql_kind, tmp_path) as (url, prefix),
        SQLItemMemory(url, table_prefix=prefix) as reader,
        SQLItemMemory(url, table_prefix=prefix) as writer,
    ):
        writer.put_many([(namespace, key, {"g": 0}) for namespace, key in keys])
        assert reader.get(*keys[0]) is not None  # the reader's first statements (its tables checked) are done
        selects = []

        def write_after_the_first_select(connection: Any, cursor: Any, statement: str, *args: Any) -> None:
            if statement.lstrip().upper().startswith("SELECT"):
                selects.append(statement)
                if len(selects) == 1:
                    writer.put_many([(namespace, key, {"g": 1}) for namespace, key in keys])

        sa.event.listen(reader.engine, "after_cursor_execute", write_after_the_first_select)
        generations = {item.value["g"] for item in reader.get_many(keys) if item is not None}
        assert (len(selects), len(generations)) == (1, 1)


def test_a_namespaces_items_are_neighbours_in_the_primary_key(sql_kind: str, tmp_path: Path) -> None:
    """Row keys start with a digest of the namespace, so a batch or a thread's writes land on few index pages."""
    with sql_place(sql_kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        memory.put_many([(("a", str(n)), f"k{i}", {"i": i}) for n in range(3) for i in range(20)])
        items = memory._items
        with memory.engine.connect() as connection:
            rows = connection.execute(sa.select(items.c.namespace, items.c.address).order_by(items.c.address)).all()
        in_order = [namespace for namespace, _ in rows]
        assert len(rows) == 60
        assert len(set(in_order)) == 3
        assert sum(1 for a, b in itertools.pairwise(in_order) if a != b) == 2  # three runs, one per namespace
        assert len({address for _, address in rows}) == 60
        memory.drop_tables()


def test_sqlite_lists_a_wide_prefix_in_key_order_exactly(
    clock: Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite reads the first page of a wide prefix off the index in key order, among a bounded number of rows,
    and falls back to the prefix's range when they do not hold it: every listing equals the in-memory backend's,
    both ways are taken, and a table made without that index gets it."""
    from memwoven.backends.sql import items as sql_items

    monkeypatch.setattr(sql_items, "_WIDE", 6)  # small numbers, so that a few dozen items take both ways
    monkeypatch.setattr(sql_items, "_WALK_ROWS", 3)
    monkeypatch.setattr(sql_items, "_WALK_PER_ITEM", 1)
    monkeypatch.setattr(sql_items, "_RECOUNT", 2)
    outcomes: list[bool] = []
    walked = sql_items.SQLItemMemory._walked

    def spy(self: SQLItemMemory, *args: object) -> object:
        page = walked(self, *args)  # type: ignore[arg-type]
        outcomes.append(page is not None)
        return page

    monkeypatch.setattr(sql_items.SQLItemMemory, "_walked", spy)
    url = f"sqlite:///{tmp_path}/items.db"
    reference = InMemoryItemMemory()
    with SQLItemMemory(url) as memory:
        writes = [ItemWrite(("a", f"n{i % 4}"), f"k{i:02d}", {"i": i, "odd": i % 2}) for i in range(40)]
        writes += [ItemWrite(("b",), f"k{i:02d}x", {"i": i, "odd": i % 2}) for i in range(0, 40, 7)]
        writes += [ItemWrite(("a", "short"), f"k{i:02d}y", {"i": i, "odd": 1}, ttl=1) for i in range(0, 12, 3)]
        for target in memory, reference:
            target.put_many(writes)
        clock.advance(2)  # the short-lived items expire: live neither in the walk nor in the range
        prefixes: list[tuple[str, ...]] = [(), ("a",), ("a", "n1"), ("b",), ("a", "short")]
        filters: list[dict[str, object] | None] = [None, {"odd": 1}, {"i": {"$gte": 30}}]
        for prefix in prefixes:
            for spec in filters:
                for order in ("asc", "desc"):
                    for limit, offset in ((1, 0), (3, 2), (10, 0), (5, 30)):
                        query = {"filter": spec, "order": order, "limit": limit, "offset": offset}
                        expected = [(i.namespace, i.key) for i in reference.list(prefix, **query)]  # type: ignore[arg-type]
                        found = [(i.namespace, i.key) for i in memory.list(prefix, **query)]  # type: ignore[arg-type]
                        assert found == expected, (prefix, query)
        assert True in outcomes
        assert False in outcomes
        with contextlib.closing(sqlite3.connect(f"{tmp_path}/items.db")) as connection:
            connection.execute("DROP INDEX memwoven_items_in_order")
    with SQLItemMemory(url) as memory:
        assert memory.count(("a",)) == 40  # setting up the tables made the index again
    with contextlib.closing(sqlite3.connect(f"{tmp_path}/items.db")) as connection:
        indexes = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "memwoven_items_in_order" in indexes
    assert "memwoven_items_by_key" not in indexes


def test_postgres_single_writes_reuse_the_kept_connection_and_survive_losing_it(tmp_path: Path) -> None:
    """On PostgreSQL, writes of one statement (a put without compare-and-set; a put_many of new items, one
    all-or-none INSERT) run in autocommit on the connection kept for reads: a refused insert leaves nothing written
    and the connection kept; if the server drops it, the write runs again through the pool, applied once."""
    with sql_place("postgresql", tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:

        def pinned_pid() -> int:
            (connection,) = memory._db._pinned._free  # type: ignore[union-attr]  # one, calls being sequential
            return int(connection.connection.dbapi_connection.info.backend_pid)  # type: ignore[union-attr]

        first = memory.put(("n",), "a", {"v": 1})
        pid = pinned_pid()
        through_sqlalchemy: list[str] = []  # item writes are compiled once and sent on psycopg's cursor
        sa.event.listen(memory.engine, "before_cursor_execute", lambda *args: through_sqlalchemy.append(args[2]))
        created = memory.put_many([ItemWrite(("n",), key, {"v": 2}, expected_version=0) for key in ("b", "c")])
        assert through_sqlalchemy == []
        assert [memory.get(("n",), key).version for key in ("b", "c")] == created  # type: ignore[union-attr]
        with pytest.raises(ConcurrentModificationError):  # "c" is stored: the whole batch is refused
            memory.put_many([ItemWrite(("n",), key, {"v": 3}, expected_version=0) for key in ("d", "c")])
        assert memory.get(("n",), "d") is None
        assert pinned_pid() == pid  # the same server process served every call
        killer = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        with killer.begin() as connection:
            connection.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        killer.dispose()
        assert memory.put(("n",), "a", {"v": 4}) > first  # through the pool
        memory.put_many([ItemWrite(("n",), "e", {"v": 5}, expected_version=0)])
        assert [(i.key, i.value["v"]) for i in memory.list(("n",))] == [("a", 4), ("b", 2), ("c", 2), ("e", 5)]
        assert pinned_pid() != pid


def test_postgres_keeps_two_connections_for_single_statements(tmp_path: Path) -> None:
    """Two callers at once (a LangGraph step writes its checkpoint and its task's writes together) each run on a
    kept connection; a third takes the pool. The pool's checkout was a quarter of a checkpoint write's CPU."""
    with sql_place("postgresql", tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        pinned = memory._db._pinned
        assert pinned is not None
        memory.put(("n",), "a", {"v": 0})
        checkouts: list[object] = []
        sa.event.listen(memory.engine, "checkout", lambda *args: checkouts.append(args[0]))
        with pinned._held() as first:  # another caller is using the kept connection
            assert first is not None
            memory.put(("n",), "a", {"v": 1})  # opens the second
            assert len(checkouts) == 1
            memory.put(("n",), "a", {"v": 2})
            memory.put_many([ItemWrite(("n",), "b", {"v": 2}, expected_version=0)])
            assert memory.get(("n",), "b") is not None
            assert len(checkouts) == 1  # the second was kept
            with pinned._held() as second:  # both in use: the pool's turn
                assert second is not None
                assert second is not first
                memory.put(("n",), "a", {"v": 3})
                assert len(checkouts) == 2
        assert len(pinned._free) == 2
        assert memory.get(("n",), "a").value == {"v": 3}  # type: ignore[union-attr]


def test_postgres_async_calls_keep_two_connections_per_loop(tmp_path: Path) -> None:
    """Async single statements on PostgreSQL run on connections kept by their event loop (two, as for threads):
    no pool checkout once they are open; one the server dropped is replaced through the pool; the loop's end
    returns them (nothing left checked out)."""
    with sql_place("postgresql", tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        checkouts: list[object] = []
        pools: list[sa.pool.Pool] = []

        async def main() -> None:
            first = await memory.aput(("n",), "a", {"v": 0})
            mine = memory._db._loops[asyncio.get_running_loop()]
            assert mine.engine is not None
            pools.append(mine.engine.sync_engine.pool)
            sa.event.listen(mine.engine.sync_engine, "checkout", lambda *args: checkouts.append(args[0]))
            await asyncio.gather(*(memory.aput(("n",), f"k{i}", {"v": i}) for i in range(2)))
            assert (mine.kept_size, len(mine.kept), len(checkouts)) == (2, 2, 1)  # the second was opened
            await asyncio.gather(*(memory.aput(("n",), f"k{i}", {"v": i}) for i in range(2)))
            await memory.aget(("n",), "a")
            assert len(checkouts) == 1  # both were kept
            pids = [kept.sync_connection.connection.dbapi_connection.info.backend_pid for kept in mine.kept]  # type: ignore[union-attr]
            killer = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
            with killer.begin() as connection:
                for pid in pids:
                    connection.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            killer.dispose()
            assert await memory.aput(("n",), "a", {"v": 1}) > first  # the dead connection dropped, run through the pool
            assert (await memory.aget(("n",), "a")).value == {"v": 1}  # type: ignore[union-attr]
            assert len(checkouts) == 3

        asyncio.run(main())
        assert pools[0].checkedout() == 0  # the loop's end returned the kept connections
        assert memory.get(("n",), "k1").value == {"v": 1}  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_kept_connection_in_use_at_close_or_invalidated_is_not_kept(kind: str, tmp_path: Path) -> None:
    """`close` while a caller uses a kept connection closes it when the caller is done (it used to go back to the
    free list of a disposed pool); one invalidated during a call (an interrupted statement) is dropped, not handed
    to every later call; the next call opens a new one."""
    with sql_place(kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        memory.put(("n",), "a", {"v": 0})
        assert memory.get(("n",), "a") is not None
        pinned = memory._db._pinned
        assert pinned is not None
        with pinned._held() as connection:
            assert connection is not None
            pinned.close()
        assert connection.closed
        assert pinned._free == []
        assert pinned._opened == 0
        assert memory.get(("n",), "a") is not None  # opens a new one
        (kept,) = pinned._free
        with pinned._held() as connection:
            assert connection is kept
            connection.invalidate()
        assert pinned._free == []
        assert pinned._opened == 0
        assert memory.get(("n",), "a").value == {"v": 0}  # type: ignore[union-attr]
        assert len(pinned._free) == 1
        assert pinned._free[0] is not kept


def test_postgres_async_kept_connection_cancelled_while_opening_is_given_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call cancelled while its kept connection is being opened leaves the count as it was: else two such
    cancellations would leave the loop never keeping one again."""
    with sql_place("postgresql", tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        memory.put(("n",), "a", {"v": 0})

        async def main() -> None:
            await memory.aget(("n",), "a")
            mine = memory._db._loops[asyncio.get_running_loop()]
            assert (mine.kept_open, len(mine.kept)) == (1, 1)
            engine = mine.by_mode["read"]

            class Cancelled:
                def connect(self) -> Any:
                    raise asyncio.CancelledError

            monkeypatch.setitem(mine.by_mode, "read", Cancelled())
            for _ in range(3):  # two of them at once: the first takes the free kept connection
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.gather(memory.aget(("n",), "a"), memory.aget(("n",), "a"))
                assert mine.kept_open == 1
            monkeypatch.setitem(mine.by_mode, "read", engine)
            await asyncio.gather(*(memory.aget(("n",), "a") for _ in range(2)))
            assert (mine.kept_open, len(mine.kept)) == (2, 2)

        asyncio.run(main())


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_create_whose_reply_was_lost_reports_success_not_a_conflict(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create (expected_version=0) is one statement, run again on a new connection if its connection fails:
    when the first run had been applied and only its reply was lost, the second finds the rows stored. They are
    this call's rows, so it reports their versions (it used to report a conflict); a rival's rows stay a
    conflict, and nothing is ever written twice."""
    with sql_place(kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        memory.put(("n",), "warm", {"v": 0})
        real_rows = _driver.rows
        losses: list[bool] = []  # per connection lost: whether the insert had been applied

        def lose_the_connection(applied: bool) -> Any:
            def rows(connection: sa.Connection, text: str, parameters: Any, **options: Any) -> Any:
                if not text.startswith("INSERT") or losses:
                    return real_rows(connection, text, parameters, **options)
                if applied:  # autocommit: applied once executed
                    list(real_rows(connection, text, parameters, **options))
                losses.append(applied)
                connection.invalidate()
                error = connection.dialect.loaded_dbapi.OperationalError("server closed the connection unexpectedly")
                raise sa.exc.DBAPIError.instance(text, parameters, error, Exception, connection_invalidated=True)

            return rows

        monkeypatch.setattr(_driver, "rows", lose_the_connection(applied=True))
        created = memory.put_many([ItemWrite(("n",), key, {"k": key}, expected_version=0) for key in ("a", "b")])
        assert losses == [True]
        stored = memory.get_many([(("n",), "a"), (("n",), "b")])
        assert created == [item.version for item in stored if item is not None]
        monkeypatch.setattr(_driver, "rows", real_rows)
        rival = memory.put(("n",), "c", {"by": "rival"}, expected_version=0)
        losses.clear()
        monkeypatch.setattr(_driver, "rows", lose_the_connection(applied=False))
        with pytest.raises(ConcurrentModificationError):  # run again, it finds "c" stored, but not by this call
            memory.put(("n",), "c", {"by": "me"}, expected_version=0)
        assert losses == [False]
        kept = memory.get(("n",), "c")
        assert kept is not None
        assert (kept.version, kept.value) == (rival, {"by": "rival"})
        assert [item.key for item in memory.list(("n",))] == ["a", "b", "c", "warm"]


def test_the_async_twins_run_on_the_loop_and_are_named() -> None:
    memory = InMemoryItemMemory()
    assert not memory._blocking
    assert InMemoryItemMemory.aput.__name__ == "aput"
    assert InMemoryItemMemory.anamespaces.__doc__ == "Async twin of `namespaces`."

    async def use() -> tuple[int, int]:
        version = await memory.aput(("n",), "k", {"v": 1})
        return version, (await memory.aget(("n",), "k")).version  # type: ignore[union-attr]

    version, read = asyncio.run(use())
    assert version == read


def test_item_times_are_timezone_aware_utc() -> None:
    moment = datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    item = Item(namespace=("n",), key="k", value={"a": [1]}, version=1, created_at=moment, updated_at=moment)
    assert item.created_at == moment
    assert item.created_at.tzinfo == timezone.utc
    assert Item.model_validate_json(item.model_dump_json()) == item
    with pytest.raises(TypeError):
        item.value["a"].append(2)
    for bad in (
        {"created_at": datetime(2026, 1, 1)},
        {"namespace": ()},
        {"key": ""},
        {"version": 0},
        {"ttl": 0},
        {"ttl": float("inf")},
        {"value": {"x": float("nan")}},
    ):
        fields = {"namespace": ("n",), "key": "k", "value": {}, "version": 1, "created_at": moment}
        with pytest.raises(ValidationError):
            Item.model_validate({"updated_at": moment, **fields, **bad})


def test_namespace_matching_is_label_by_label() -> None:
    assert namespace_matches(("a", "b"), ("a",))
    assert not namespace_matches(("ab",), ("a",))
    assert namespace_matches(("a", "b", "c"), ("*", "b"), ("c",))
    assert not namespace_matches(("a",), (), ("a", "a"))
    assert namespace_matches(("*",), ("*",))
    assert check_namespace(["a", "b"]) == ("a", "b")
    assert check_namespace((), prefix=True) == ()
    with pytest.raises(InvalidInputError):
        check_namespace(())


def test_expired_items_are_freed_by_cleanup(clock: Clock) -> None:
    memory = InMemoryItemMemory()
    memory.put_many([ItemWrite(("n",), f"k{i}", {"i": i}, ttl=1) for i in range(3)])
    memory.put(("m",), "k", {"v": 1}, ttl=10)
    clock.advance(2)
    assert memory.namespaces() == [("m",)]
    assert memory.cleanup_expired() == 3
    assert memory._by_namespace.keys() == {("m",)}  # the emptied namespace is gone too
    assert repr(memory) == "InMemoryItemMemory()"


_COUNTER = """
from memwoven import ConcurrentModificationError, SQLItemMemory

memory = SQLItemMemory(url, table_prefix=prefix)
done = conflicts = 0
while done < increments:
    item = memory.get(("counters",), "n")
    try:
        memory.put(("counters",), "n", {"n": item.value["n"] + 1}, expected_version=item.version)
    except ConcurrentModificationError:
        conflicts += 1
    else:
        done += 1
memory.close()
results.put(conflicts)
"""


def test_compare_and_set_from_eight_processes_loses_nothing(sql_kind: str, tmp_path: Path) -> None:
    """8 processes each add 1 to one counter 15 times, by compare-and-set with retries: it ends at exactly 120."""
    processes, increments = 8, 15
    context = process_context()
    results = context.Queue()
    with sql_place(sql_kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        memory.put(("counters",), "n", {"n": 0})
        children = [
            start(context, _COUNTER, url=url, prefix=prefix, increments=increments, results=results)
            for _ in range(processes)
        ]
        conflicts = [results.get(timeout=180) for _ in children]
        for child in children:
            child.join(timeout=30)
            assert child.exitcode == 0
        item = memory.get(("counters",), "n")
        assert item is not None
        assert item.value == {"n": processes * increments}
        assert sum(conflicts) >= 0  # each child reported: none died between its writes and its report


@pytest.mark.parametrize("backend", ["memory", "sql"])
def test_a_ttl_under_half_a_millisecond_lives_one_millisecond(
    backend: str, sql_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "memory" and sql_kind != "sqlite":
        pytest.skip("the in-memory backend runs once")
    now = time.time_ns() // 1_000_000
    monkeypatch.setattr(_clock, "wall_ms", lambda: now)  # time stands still: rounded to 0 ms it expired at once
    monkeypatch.setattr(_clock, "monotonic", lambda: now / 1000)
    with contextlib.ExitStack() as stack:
        if backend == "memory":
            memory: ItemMemory = InMemoryItemMemory()
        else:
            url, prefix = stack.enter_context(sql_place(sql_kind, tmp_path))
            memory = stack.enter_context(SQLItemMemory(url, table_prefix=prefix))
        memory.put(("n",), "k", {"v": 1}, ttl=1e-6)
        memory.put_many([ItemWrite(("n",), "j", {"v": 2}, 1e-6)])
        for refresh in (False, True):
            for item in memory.get_many([(("n",), "k"), (("n",), "j")], refresh_ttl=refresh):
                assert item is not None
                assert (item.ttl, item.expires_at) == (1e-6, _clock.utc(now + 1))
        monkeypatch.setattr(_clock, "wall_ms", lambda: now + 1)
        monkeypatch.setattr(_clock, "monotonic", lambda: (now + 1) / 1000)
        assert memory.get_many([(("n",), "k"), (("n",), "j")]) == [None, None]


@pytest.mark.parametrize("damage", ["x", "", "\x02x\x01", "a\x01\x01"])
def test_a_damaged_namespace_column_raises_corrupt_memory(sql_kind: str, tmp_path: Path, damage: str) -> None:
    """A row whose namespace column holds no encoded namespace is damage, not a namespace to guess."""
    with sql_place(sql_kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        memory.put(("t",), "a", {"s": 1})
        memory.put(("t",), "b", {"s": 2})
        items = memory._items
        with memory.engine.begin() as connection:
            connection.execute(sa.update(items).where(items.c.item_key == "b").values(namespace=damage))
        with pytest.raises(CorruptMemoryError):
            memory.list(())
        with pytest.raises(CorruptMemoryError):
            memory.namespaces()
        if sql_kind == "mariadb":  # text kept as UTF-8 bytes: bytes that are not UTF-8
            with memory.engine.begin() as connection:
                connection.execute(sa.text(f"UPDATE {items.name} SET item_key = X'FF' WHERE item_key = 'a'"))
            with pytest.raises(CorruptMemoryError):
                memory.list(("t",))
        memory.drop_tables()


@pytest.mark.parametrize(("column", "damage"), [("namespace", "u\x01"), ("namespace", "t\x01x\x01"), ("item_key", "c")])
def test_a_column_moved_to_another_namespace_or_key_raises_corrupt_memory(
    sql_kind: str, tmp_path: Path, column: str, damage: str
) -> None:
    """A damaged namespace or key column that still reads as one (another tenant's namespace, another key) is
    caught by the row key it no longer matches: never listed as an item of that namespace."""
    with sql_place(sql_kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        memory.put(("t",), "a", {"s": 1})
        memory.put(("t",), "b", {"s": 2})
        memory.put(("u",), "a", {"s": 3})
        items = memory._items
        with memory.engine.begin() as connection:
            moved = sa.update(items).where(items.c.item_key == "b")
            head = "ns_head" if column == "namespace" else "key_head"  # the indexed head goes with it
            connection.execute(moved.values({column: damage, head: damage}))
        where = ("u",) if damage == "u\x01" else ("t",)
        for listing in (memory.list, memory.list_plain):
            with pytest.raises(CorruptMemoryError, match="row key"):
                listing(where)
            with pytest.raises(CorruptMemoryError, match="row key"):
                listing((), filter={"s": 2}, limit=1)
        if column == "namespace":  # nor named among the stored namespaces
            with pytest.raises(CorruptMemoryError, match="row key"):
                memory.namespaces()
            with pytest.raises(CorruptMemoryError, match="row key"):
                memory.namespaces(prefix=where)
        else:
            assert memory.namespaces() == [("t",), ("u",)]
        assert memory.get(("t",), "b") is not None  # read by its row key: what was written
        memory.drop_tables()


ROW_DAMAGE: dict[str, dict[str, Any]] = {  # of an item written with a ttl
    "version-0": {"version": 0},
    "version-negative": {"version": -7},
    "created-far-ahead": {"created_ms": 10**16},
    "updated-far-back": {"updated_ms": -(10**15)},
    "expiry-far-ahead": {"expires_at_ms": 10**16},
    "ttl-negative": {"ttl": -1.0},
    "ttl-zero": {"ttl": 0.0},
    "ttl-without-expiry": {"expires_at_ms": None},
    "expiry-without-ttl": {"ttl": None},
}
_DAMAGED_READS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("get", (("t",), "victim"), {}),
    ("get", (("t",), "victim"), {"refresh_ttl": True}),
    ("get_many", ([(("t",), "intact"), (("t",), "victim")],), {}),
    ("list", (("t",),), {}),
    ("list_plain", (("t",),), {}),
    ("list", ((),), {"filter": {"s": 1}}),
    ("list_plain", ((),), {"filter": {"s": 1}}),
    ("list_plain", (("t",),), {"limit": 5, "offset": 1}),
]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("damage", list(ROW_DAMAGE))
def test_a_damaged_version_ttl_expiry_or_time_column_raises_corrupt_memory(
    sql_kind: str, tmp_path: Path, damage: str, mode: str
) -> None:
    """A row holding a version, ttl, expiry or time no write leaves (a version below 1, a ttl not positive, a ttl
    without an expiry or the reverse, a time beyond `datetime`'s range) is damage: every read, `list_plain`
    included, raises CorruptMemoryError naming the item, never an item carrying it nor an OverflowError; a refresh
    writes nothing over it; a plain delete still removes it."""
    with sql_place(sql_kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        memory.put(("t",), "victim", {"s": 1}, ttl=600.0)
        memory.put(("t",), "intact", {"s": 2})
        items = memory._items
        victim = sa.select(items).where(items.c.item_key == "victim")
        with memory.engine.begin() as connection:
            connection.execute(sa.update(items).where(items.c.item_key == "victim").values(ROW_DAMAGE[damage]))
            damaged = connection.execute(victim).one()
        if mode == "sync":
            for name, args, kwargs in _DAMAGED_READS:
                with pytest.raises(CorruptMemoryError, match=r"'victim'.*damaged"):
                    getattr(memory, name)(*args, **kwargs)
        else:
            reader = SQLItemMemory(url, table_prefix=prefix)

            async def read_all() -> None:
                try:
                    for name, args, kwargs in _DAMAGED_READS:
                        with pytest.raises(CorruptMemoryError, match=r"'victim'.*damaged"):
                            await getattr(reader, "a" + name)(*args, **kwargs)
                finally:
                    await reader.aclose()

            asyncio.run(read_all())
        with memory.engine.connect() as connection:
            assert connection.execute(victim).one() == damaged  # not "repaired" by the refresh
        assert [item.key for item in memory.list(("t",), filter={"s": 2})] == ["intact"]
        assert memory.delete(("t",), "victim") == (0 if damage.startswith("version") else 1)  # counted if it read live
        assert memory.get(("t",), "victim") is None
        memory.drop_tables()


@pytest.mark.parametrize(
    "damage",
    [
        "expires_at_ms = 'damaged'",
        "expires_at_ms = X'00'",
        "expires_at_ms = expires_at_ms + 0.5",
        "version = 1.5",
        "version = 'x'",
        "created_ms = created_ms + 0.75",
        "updated_ms = 'x'",
    ],
)
def test_sqlite_an_integer_column_holding_text_or_a_real_raises_corrupt_memory(tmp_path: Path, damage: str) -> None:
    """SQLite keeps text or a REAL in an integer column: every read and compare-and-set raises CorruptMemoryError
    (never a TypeError, nor an item whose version is the REAL truncated, which a compare-and-set would then
    accept); a plain delete still removes it."""
    with sql_place("sqlite", tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        written = memory.put(("t",), "victim", {"s": 1}, ttl=600.0)
        memory.put(("t",), "intact", {"s": 2})
        with memory.engine.begin() as connection:
            connection.exec_driver_sql(f"UPDATE {memory._items.name} SET {damage} WHERE item_key = 'victim'")
        for name, args, kwargs in _DAMAGED_READS:
            with pytest.raises(CorruptMemoryError, match=r"'victim'.*damaged"):
                getattr(memory, name)(*args, **kwargs)
        for expected in (0, 1, written):
            with pytest.raises(CorruptMemoryError, match="'victim'"):
                memory.put(("t",), "victim", {"s": 3}, expected_version=expected)
            with pytest.raises(CorruptMemoryError, match="'victim'"):
                memory.delete(("t",), "victim", expected_version=expected)
        assert memory.delete(("t",), "victim") is True
        assert memory.get(("t",), "victim") is None
        assert [item.key for item in memory.list(("t",))] == ["intact"]


def test_a_committed_version_0_is_damage_not_an_absent_item(sql_kind: str, tmp_path: Path) -> None:
    """A stored row at version 0 (only a write's own placeholders, inside its transaction, are) is damage: a write
    expecting the item absent, or a delete expecting a version, raises CorruptMemoryError rather than taking it
    for absent and overwriting an item `get` would return; a plain write replaces it."""
    with sql_place(sql_kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        memory.put(("t",), "victim", {"s": 1})
        items = memory._items
        with memory.engine.begin() as connection:
            connection.execute(sa.update(items).where(items.c.item_key == "victim").values(version=0))
        with pytest.raises(CorruptMemoryError, match="'victim'"):
            memory.put(("t",), "victim", {"s": 2}, expected_version=0)
        with pytest.raises(CorruptMemoryError, match="'victim'"):
            memory.put_many([ItemWrite(("t",), "other", {"s": 3}, None, 0), ItemWrite(("t",), "victim", {}, None, 0)])
        with pytest.raises(CorruptMemoryError, match="'victim'"):
            memory.delete(("t",), "victim", expected_version=1)
        assert memory.get(("t",), "other") is None  # all or nothing
        with pytest.raises(CorruptMemoryError, match="'victim'"):
            memory.get(("t",), "victim")  # nothing was written over it
        version = memory.put(("t",), "victim", {"s": 4})
        stored = memory.get(("t",), "victim")
        assert stored is not None
        assert (stored.value, stored.version) == ({"s": 4}, version)
        assert version > 0
        memory.drop_tables()


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ('{"a":' * 65 + "1" + "}" * 65, True),  # nests deeper than MAX_JSON_DEPTH
        ('{"a":1e400}', True),  # beyond float's range: infinity
        ('{"a":[-1E+999]}', True),
        ('{"a":' + "9" * 4400 + "}", True),  # more digits than MAX_INT_DIGITS
        ('{"a":' * 64 + "1" + "}" * 64, False),  # as deep as allowed
        ('{"a":[' + ",".join(["{}"] * 100) + '],"b":"[[[{{{"}', False),  # many brackets, shallow
        ('{"a":1.5e300,"b":-0.0}', False),
        ('{"a":"\\ud800"}', True),  # a lone surrogate, escaped: no write stores one (IM6)
        ('{"a":["x\\uDFFFy"]}', True),
        ('{"\\udbff":1}', True),
        ('{"a":"\\ud83d\\ude00 \\\\ud800"}', False),  # a surrogate pair, then a backslash and "ud800"
    ],
)
def test_list_plain_refuses_the_damaged_values_list_refuses(
    sql_kind: str, tmp_path: Path, text: str, refused: bool
) -> None:
    """`list_plain` holds a stored value to the limits `list` does (freeze_json's): never a value `list` refuses."""
    if sql_kind == "postgresql" and refused and "\\ud" in text.lower():
        pytest.skip("PostgreSQL's json type refuses a lone surrogate: no such damage to read")
    with sql_place(sql_kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        memory.put(("t",), "victim", {"s": 1})
        items = memory._items
        with memory.engine.begin() as connection:
            connection.execute(sa.update(items).where(items.c.item_key == "victim").values(value=text))
        if refused:
            for listing in (memory.list, memory.list_plain):
                with pytest.raises(CorruptMemoryError, match="unreadable"):
                    listing(("t",))
        else:
            assert [item.value for item in memory.list_plain(("t",))] == [item.value for item in memory.list(("t",))]
        memory.drop_tables()


@pytest.mark.service
def test_a_create_racing_a_delete_and_a_rival_create_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: a compare-and-set creation (expected_version=0) of a stored item inserts no placeholder over it,
    which locks nothing; if another session deletes the row before it is locked and a rival creates it again, the
    first must find the rival's row, not write over it: one creation wins, never both."""
    with (
        sql_place("postgresql", tmp_path) as (url, prefix),
        SQLItemMemory(url, table_prefix=prefix) as memory,
        SQLItemMemory(url, table_prefix=prefix) as other,
    ):
        memory.put(("n",), "k", {"by": "first"})
        locking = SQLItemMemory._rows_at
        raced: list[int] = []

        def racing(self: SQLItemMemory, connection: sa.Connection, addresses: list[str], *, lock: bool) -> object:
            if self is not memory or not lock or raced:
                return locking(self, connection, addresses, lock=lock)
            other.delete(("n",), "k")  # between the placeholder (none: the row was stored) and the lock
            rows = locking(self, connection, addresses, lock=lock)
            raced.append(other.put(("n",), "k", {"by": "rival"}, expected_version=0))  # before this one writes
            return rows

        monkeypatch.setattr(SQLItemMemory, "_rows_at", racing)
        with pytest.raises(ConcurrentModificationError):
            memory.put(("n",), "k", {"by": "racer"}, expected_version=0)
        assert raced
        stored = other.get(("n",), "k")
        assert stored is not None
        assert (stored.value, stored.version) == ({"by": "rival"}, raced[0])
        memory.drop_tables()
