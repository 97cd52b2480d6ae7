"""The SQL pre-selection of item filters (`backends/sql/_filters.py`): it never drops a match, on every database,
and it does select (a filter that matches few items reads few rows)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import sqlean
from filter_support import combined_filters
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sql_support import KINDS, sql_place

from memwoven import CorruptMemoryError, InvalidInputError, Item, ItemWrite, SQLItemMemory
from memwoven.backends.sql import _driver
from memwoven.backends.sql._base import SQLOptions
from memwoven.backends.sql._filters import prefilter
from memwoven.backends.sql._schema import has_nul, key_of, value_jsonb
from memwoven.filters import compile_filter

FIELDS = ["a", "b", "a.b", "c d", 'q"uote', "n"]
SCALARS: list[Any] = [
    0, 1, -1, 2, 1.0, 1.5, -2.25, 2**53, 2**53 + 1, 2**63 + 5, 1e300, 10**400, -(10**400), "nul\x00inside",
    "", "x", "X", "xy", "é", "É", "z\u00e9", "\U0001f600", "1", "true", "null",
    'q"x', "back\\slash", "tab\there", "\x1f", "</",
    True, False, None,
]  # fmt: skip


def _value(rng: random.Random) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for field in FIELDS:
        roll = rng.random()
        if roll < 0.25:
            continue
        if roll < 0.8:
            value[field] = rng.choice(SCALARS)
        elif roll < 0.9:
            value[field] = [rng.choice(SCALARS) for _ in range(rng.randrange(3))]
        else:
            value[field] = {"b": rng.choice(SCALARS)}
    return value


OPERATORS = ["$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists", "$contains"]
scalars = st.sampled_from(SCALARS)


@st.composite
def _field_condition(draw: st.DrawFn) -> dict[str, Any]:
    field = draw(st.sampled_from(FIELDS))
    op = draw(st.sampled_from([*OPERATORS, "plain"]))
    if op == "plain":
        return {field: draw(scalars)}
    if op in ("$in", "$nin"):
        return {field: {op: draw(st.lists(scalars, max_size=3))}}
    if op == "$exists":
        return {field: {op: draw(st.booleans())}}
    if op in ("$gt", "$gte", "$lt", "$lte"):
        operand = draw(scalars.filter(lambda v: isinstance(v, (int, float, str)) and not isinstance(v, bool)))
        return {field: {op: operand}}
    return {field: {op: draw(scalars)}}


filters = combined_filters(_field_condition())


@pytest.fixture(scope="module", params=KINDS)
def stored(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SQLItemMemory, list[Item]]]:
    """300 items of random values in one namespace (plus a neighbour namespace), on each database."""
    with sql_place(request.param, tmp_path_factory.mktemp("filters")) as (url, prefix):
        memory = SQLItemMemory(url, table_prefix=prefix)
        try:
            rng = random.Random(20261123)
            memory.put_many([(("t",), f"k{i:03}", _value(rng)) for i in range(300)])
            memory.put(("t-other",), "k000", {"a": 1})
            yield memory, memory.list(("t",))
        finally:
            memory.drop_tables()
            memory.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=filters)
def test_the_database_keeps_every_match(stored: tuple[SQLItemMemory, list[Item]], spec: dict[str, Any]) -> None:
    memory, everything = stored
    predicate = compile_filter(spec)
    expected = [item.key for item in everything if predicate(item.value)]
    assert [item.key for item in memory.list(("t",), filter=spec)] == expected
    assert memory.count(("t",), filter=spec) == len(expected)
    assert [item.key for item in memory.list(("t",), filter=spec, limit=2, offset=1)] == expected[1:3]


@pytest.mark.parametrize(
    "spec",
    [
        {"a": "x"},
        {"a": 1},
        {"a": True},
        {"a": {"$in": ["x", "é"]}},
        {"a": {"$gt": 1}, "b": {"$lte": 2}},
        {"a.b": "x"},
        {"$or": [{"a": "x"}, {"b": 0}]},
        {"c d": {"$exists": True}, "n": {"$ne": 1}},
    ],
)
def test_a_selective_filter_is_answered_by_the_database(
    stored: tuple[SQLItemMemory, list[Item]], spec: dict[str, Any]
) -> None:
    memory, everything = stored
    items = memory._items
    with memory.engine.connect() as connection:
        preselection = memory._preselection(spec, connection.dialect.name)
        assert preselection is not None
        assert memory._preselection(spec, connection.dialect.name) is preselection  # built once per filter
        condition = preselection.condition
        selected = connection.execute(sa.select(sa.func.count()).where(condition, items.c.namespace == "t\x01"))
        rows = int(selected.scalar_one())
    predicate = compile_filter(spec)
    matching = sum(1 for item in everything if predicate(item.value))
    assert matching <= rows < len(everything) / 2 if matching < len(everything) / 4 else matching <= rows


def test_what_cannot_be_translated_selects_nothing(tmp_path: Path) -> None:
    value = sa.column("value")
    for spec in [{"a": {"$ne": 1}}, {"$not": {"a": 1}}, {"a": None}, {"a": [1]}, {"a": {"$contains": 1}}]:
        assert prefilter(spec, value, "sqlite") is None
    assert prefilter({'q"uote': 1}, value, "sqlite") is None  # not in a text path
    binary, nul = sa.literal_column(value_jsonb()), sa.literal_column(has_nul(), sa.Boolean)
    assert prefilter({'q"uote': 1}, value, "postgresql", binary, nul) is not None  # a bound parameter
    with pytest.raises(ValueError, match="as jsonb"):
        prefilter({"a": 1}, value, "postgresql", binary)
    assert prefilter({"a": {"$gt": "x"}}, value, "mariadb") is None  # collation order is not code point order
    assert prefilter({"a": 2**60}, value, "sqlite") is None  # beyond float precision


def test_a_filter_value_holding_nul_is_answered_exactly(sql_kind: str, tmp_path: Path) -> None:
    with sql_place(sql_kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        memory.put(("t",), "a", {"s": "public\x00' OR '1'='1"})
        memory.put(("t",), "b", {"s": "public"})
        assert [i.key for i in memory.list(("t",), filter={"s": "public\x00' OR '1'='1"})] == ["a"]
        assert [i.key for i in memory.list(("t",), filter={"s": {"$in": ["x\x00", "public"]}})] == ["b"]
        memory.drop_tables()


def test_values_holding_nul_elsewhere_are_kept(sql_kind: str, tmp_path: Path) -> None:
    """On PostgreSQL a value whose text holds an escaped NUL is NULL as jsonb (jsonb refuses it): the
    pre-selection keeps it by its text, so a filter on another field still finds it, and nothing else is lost."""
    with sql_place(sql_kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        values: dict[str, dict[str, Any]] = {
            "a": {"s": "x", "other": "n\x00ul", "n": 1},
            "b": {"s": "x", "n": 1},
            "c": {"s": "y", "other": ["\x00"], "n": 2, "deep": {"s": "x"}},
            "d": {"s": "x\x00", "n": 2},
            "e": {"s": "\\u0000", "n": True},  # no NUL, but the text the NUL test looks for: NULL as jsonb
        }
        memory.put_many([(("t",), key, value) for key, value in values.items()])
        for spec in [
            {"s": "x"},
            {"s": {"$in": ["y", "x"]}},
            {"n": 1},
            {"n": {"$gte": 2}},
            {"n": True},
            {"deep.s": "x"},
            {"s": "\\u0000"},
            {"other": {"$exists": True}},
            {"$or": [{"s": "y"}, {"n": 1}]},
        ]:
            predicate = compile_filter(spec)
            expected = [key for key, value in values.items() if predicate(value)]
            assert [item.key for item in memory.list(("t",), filter=spec)] == expected, spec
            assert memory.count(("t",), filter=spec) == len(expected), spec
        if sql_kind == "postgresql":
            with memory.engine.connect() as connection:
                items = memory._items
                copies = connection.execute(sa.select(items.c.item_key, sa.literal_column(value_jsonb()).is_(None)))
                assert sorted(copies) == [("a", True), ("b", False), ("c", True), ("d", True), ("e", True)]
        memory.drop_tables()


@pytest.mark.service
def test_a_schema_named_by_a_reserved_word_is_quoted_in_filters(tmp_path: Path) -> None:
    """PostgreSQL's pre-selection names the table in SQL text: a schema such as ``order`` must be quoted there."""
    with sql_place("postgresql", tmp_path) as (url, prefix):
        memory = SQLItemMemory(url, table_prefix=prefix, schema="order")
        try:
            memory.put_many([(("t",), "a", {"s": "x"}), (("t",), "b", {"s": "y", "n": "\x00"})])
            assert [item.key for item in memory.list(("t",), filter={"s": "x"})] == ["a"]
            assert memory.count(("t",), filter={"s": "y"}) == 1
        finally:
            memory.drop_tables()
            memory.close()
            with contextlib.suppress(sa.exc.DBAPIError), sa.create_engine(url).begin() as connection:
                connection.execute(sa.text('DROP SCHEMA IF EXISTS "order"'))  # only if no other test uses it


@pytest.mark.parametrize("damage", ["not json", '{"s": "x"'])
def test_a_filter_never_passes_over_malformed_text(sql_kind: str, tmp_path: Path, damage: str) -> None:
    if sql_kind == "postgresql":
        pytest.skip("PostgreSQL's json column refuses text that is not JSON")
    with sql_place(sql_kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        _damage(memory, damage)
        _raises_on_every_filter(memory)
        memory.drop_tables()


@pytest.mark.parametrize("damage", ["[1]", '"text"'])
def test_json_that_is_no_object_is_never_returned(sql_kind: str, tmp_path: Path, damage: str) -> None:
    """A filter the damaged row cannot match may pass over it (the database selects by its JSON), but it is never
    returned, and a read that reaches it raises."""
    with sql_place(sql_kind, tmp_path) as (url, prefix), SQLItemMemory(url, table_prefix=prefix) as memory:
        _damage(memory, damage)
        with pytest.raises(CorruptMemoryError):
            memory.list(("t",))
        for spec in [{"s": "x"}, {"s": {"$gt": "a"}}]:
            try:
                found = memory.list(("t",), filter=spec)
            except CorruptMemoryError:
                continue
            assert [item.key for item in found] == ["a"]
        memory.drop_tables()


def _raises_on_every_filter(memory: SQLItemMemory) -> None:
    """Filters the damaged item b (`_damage`) matches or not: each listing and count reaches it and raises."""
    for spec in [{"s": "x"}, {"s": {"$gt": "a"}}, {"n": {"$exists": True}}, {"n": 1}]:
        with pytest.raises(CorruptMemoryError):
            memory.list(("t",), filter=spec)
        with pytest.raises(CorruptMemoryError):
            memory.count(("t",), filter=spec)


def _damage(memory: SQLItemMemory, damage: str) -> None:
    """Items a = {"s": "x"} and b, whose stored value is then replaced by `damage`."""
    memory.put(("t",), "a", {"s": "x"})
    memory.put(("t",), "b", {"s": "y"})
    items = memory._items
    with memory.engine.begin() as connection:
        connection.execute(sa.update(items).where(items.c.item_key == "b").values(value=damage))


@pytest.mark.parametrize("damage", ['{"s": "y",}', "{s: 'y'}", "{'s': 'x', n: 1,}"])
def test_a_filter_never_passes_over_json5_where_sqlite_reads_it(tmp_path: Path, damage: str) -> None:
    """SQLite 3.42+ reads JSON5 without an error: damaged text that happens to be JSON5 must still raise."""
    assert sqlean.sqlite_version_info >= (3, 42)
    engine = sa.create_engine(f"sqlite:///{tmp_path}/json5.db", module=sqlean)
    with SQLItemMemory(engine) as memory:
        _damage(memory, damage)
        _raises_on_every_filter(memory)
    engine.dispose()


# indexed_fields (SQLite): tests written on each field's indexed expression ----------------------------------

INDEXED = ["a", "b", "a.b", "c d", "n"]


@pytest.fixture(scope="module", params=["sqlite3", "sqlean"])
def indexed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SQLItemMemory, list[Item]]]:
    """The items of `stored` in an SQLite table with indexed fields (Python's SQLite, and sqlean's, which reads
    JSON5): listed over every namespace, the pre-selection's tests on those fields are written on their index."""
    path = tmp_path_factory.mktemp("indexed") / "items.db"
    engine = sa.create_engine(f"sqlite:///{path}", **({"module": sqlean} if request.param == "sqlean" else {}))
    memory = SQLItemMemory(engine, indexed_fields=INDEXED)
    try:
        rng = random.Random(20261123)
        memory.put_many([(("t",), f"k{i:03}", _value(rng)) for i in range(300)])
        memory.put(("t-other",), "k000", {"a": 1, "a.b": "x"})
        yield memory, memory.list(())
    finally:
        memory.close()
        engine.dispose()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=filters)
def test_indexed_fields_keep_every_match(indexed: tuple[SQLItemMemory, list[Item]], spec: dict[str, Any]) -> None:
    memory, everything = indexed
    predicate = compile_filter(spec)
    expected = [(item.namespace, item.key) for item in everything if predicate(item.value)]
    assert [(item.namespace, item.key) for item in memory.list((), filter=spec)] == expected
    assert memory.count((), filter=spec) == len(expected)
    paged = memory.list((), filter=spec, limit=2, offset=1, order="desc")
    assert [(item.namespace, item.key) for item in paged] == expected[::-1][1:3]


def test_the_item_memory_spells_out_every_sql_option() -> None:
    """`SQLItemMemory` lists the SQL backends' options in its signature (`open_item_memory` refuses others by it):
    none may go missing there."""
    parameters = inspect.signature(SQLItemMemory).parameters
    assert set(SQLOptions.__annotations__) <= set(parameters)
    assert all(parameter.kind is not parameter.VAR_KEYWORD for parameter in parameters.values())


def test_indexed_fields_are_checked_before_anything_connects(tmp_path: Path) -> None:
    for bad in ["topic", ["$a"], ['q"uote'], [1], ["a/b"], None]:
        with pytest.raises(InvalidInputError, match="indexed"):
            SQLItemMemory(f"sqlite:///{tmp_path}/never.db", indexed_fields=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "never.db").exists()
    memory = SQLItemMemory(f"sqlite:///{tmp_path}/items.db", indexed_fields=("x", "y.z", "x"))
    assert memory.indexed_fields == ("x", "y.z")
    assert "indexed_fields=('x', 'y.z')" in repr(memory)
    memory.close()


def test_a_wide_prefix_reads_an_indexed_field_off_its_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over every namespace or a prefix holding many items, a filter on an indexed field reads its index (the
    plan SQLite gives the statements the listing and the count ran says so); a narrow prefix keeps to the
    namespace index. An existing table gets its indexes on first use."""
    url = f"sqlite:///{tmp_path}/items.db"
    writes = [
        ItemWrite(("users", f"u{i // 100:02d}"), f"m{i % 100:03d}", {"topic": f"t{i % 50}", "user": {"tier": i % 3}})
        for i in range(1_200)
    ]
    in_order = sorted(writes, key=lambda write: (write.key, write.namespace))
    with SQLItemMemory(url) as memory:
        memory.put_many(writes)
    statements: list[tuple[str, Any]] = []  # what ran on the driver's cursor, and through SQLAlchemy
    driver_rows = _driver.rows

    def recorded(connection: Any, text: str, parameters: Any, **options: Any) -> Any:
        statements.append((text, parameters))
        return driver_rows(connection, text, parameters, **options)

    monkeypatch.setattr(_driver, "rows", recorded)
    with SQLItemMemory(url, indexed_fields=["topic", "user.tier"]) as memory:
        sa.event.listen(memory.engine, "before_cursor_execute", lambda *args: statements.append(args[2:4]))
        cases: list[tuple[tuple[str, ...], dict[str, Any], str]] = [
            # (keys m049, m099, ...: past the first rows in key order, among which a wide prefix's page is first
            # looked for)
            ((), {"topic": "t49"}, "topic"),
            (("users",), {"topic": {"$in": ["t48", "t49"]}}, "topic"),
            (("users",), {"user.tier": 2, "topic": {"$gte": "t48", "$lt": "t5"}}, "either"),
            (("users", "u03"), {"topic": "t49"}, "namespace"),
        ]
        for prefix, spec, index in cases:
            predicate = compile_filter(spec)
            expected = [
                (write.namespace, write.key)
                for write in in_order
                if write.namespace[: len(prefix)] == prefix and predicate(write.value)
            ]
            statements.clear()
            assert [(item.namespace, item.key) for item in memory.list(prefix, filter=spec, limit=7)] == expected[:7]
            assert memory.count(prefix, filter=spec) == len(expected)
            ranges = [  # the listing and the count (not the walk of the first rows in key order)
                (text, parameters)
                for text, parameters in statements
                if text.startswith("SELECT") and "json_" in text and "rowid IN" not in text
            ]
            assert len(ranges) == 2, statements
            with contextlib.closing(sqlean.connect(f"{tmp_path}/items.db")) as connection:
                for text, parameters in ranges:
                    rows = connection.execute(f"EXPLAIN QUERY PLAN {text}", parameters)
                    plan = " ".join(row[-1] for row in rows)
                    if index == "namespace":
                        assert "items_by_namespace" in plan, plan
                        assert "items_field_" not in plan, plan
                    elif index == "topic":
                        assert f"items_field_{key_of('topic')[:16]}" in plan, plan
                    else:
                        assert "items_field_" in plan, plan
            listed, counted = asyncio.run(_async_twins(memory, prefix, spec))  # through the async engine too
            assert ([(item.namespace, item.key) for item in listed], counted) == (expected[:7], len(expected))


async def _async_twins(memory: SQLItemMemory, prefix: tuple[str, ...], spec: dict[str, Any]) -> tuple[list[Item], int]:
    listed = await memory.alist(prefix, filter=spec, limit=7)
    counted = await memory.acount(prefix, filter=spec)
    await memory.aclose()  # this loop's engine; the sync one stays
    return listed, counted


def test_a_value_that_is_not_json_leaves_the_field_unindexed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """SQLite refuses to index a field over text that is not JSON: the memory works without the index, and the
    damaged item still raises when read."""
    url = f"sqlite:///{tmp_path}/items.db"
    with SQLItemMemory(url) as memory:
        _damage(memory, "not json")
    with SQLItemMemory(url, indexed_fields=["s"]) as memory:
        assert memory.get(("t",), "a") is not None
        assert "no index of 's'" in caplog.text
        with pytest.raises(CorruptMemoryError):
            memory.list((), filter={"s": "x"})
        memory.delete(("t",), "b")
        assert [item.key for item in memory.list((), filter={"s": "x"})] == ["a"]
    with SQLItemMemory(url, indexed_fields=["s"]) as memory:  # with the damage gone, the index is made
        assert memory.count((), filter={"s": "x"}) == 1
        with contextlib.closing(sqlean.connect(f"{tmp_path}/items.db")) as connection:
            names = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert f"memwoven_items_field_{key_of('s')[:16]}" in names
