"""`open_item_memory`: every scheme opens its ItemMemory with the URL's options applied; bad URLs and options are
refused with `InvalidInputError` before anything connects; no password is ever shown."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from redis_support import delete_prefix
from sql_support import sql_place
from sqlalchemy.engine import make_url

import memwoven
from memwoven import BackendUnavailableError, InMemoryItemMemory, InvalidInputError, ItemMemory, SQLItemMemory
from memwoven.urls import ITEM_BACKENDS, ITEM_URL_VARIABLE, item_memory_class, open_item_memory
from memwoven_test_support import postgres_url, unique_name

UNREACHABLE = "postgresql://alice:s3cr3t-pw@127.0.0.1:1/db"  # nothing listens on port 1


def _round_trip(items: ItemMemory) -> None:
    items.put(("users", "u1"), "pref", {"tea": "green"}, ttl=60)
    found = items.get(("users", "u1"), "pref")
    assert found is not None
    assert found.value == {"tea": "green"}
    assert found.ttl == 60


def test_it_is_exported_from_memwoven() -> None:
    assert memwoven.open_item_memory is open_item_memory
    assert "open_item_memory" in memwoven.__all__


def test_memory() -> None:
    with open_item_memory("memory://") as items:
        assert isinstance(items, InMemoryItemMemory)
        _round_trip(items)


def test_sqlite_with_the_url_options_applied(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/items.db?table_prefix=app_"
    with open_item_memory(url) as items:
        assert isinstance(items, SQLItemMemory)
        assert items.table_prefix == "app_"
        _round_trip(items)
    with sa.create_engine(f"sqlite:///{tmp_path}/items.db").connect() as connection:
        assert "app_items" in sa.inspect(connection).get_table_names()
    with open_item_memory(f"sqlite:///{tmp_path}/items.db", table_prefix="app_") as again:  # as an argument
        assert again.count() == 1


@pytest.mark.parametrize("kind", ["postgresql", "mariadb"])
def test_servers(kind: str, tmp_path: Path) -> None:
    with sql_place(kind, tmp_path) as (url, prefix), open_item_memory(f"{url}?table_prefix={prefix}") as items:
        assert isinstance(items, SQLItemMemory)
        assert items.table_prefix == prefix
        _round_trip(items)
        assert items.engine.url.get_backend_name() == ("postgresql" if kind == "postgresql" else "mysql")


@pytest.mark.parametrize(
    ("url", "dialect"),
    [
        ("postgres://u@host/db", "postgresql"),
        ("postgresql+psycopg://u@host/db", "postgresql"),
        ("mysql://u@host/db", "mysql"),
        ("mariadb://u@host/db", "mariadb"),
    ],
)
def test_every_sql_scheme_opens_sql_items_without_connecting(url: str, dialect: str) -> None:
    with open_item_memory(f"{url}?table_prefix=t_&schema=mem") as items:
        assert isinstance(items, SQLItemMemory)
        assert (items.table_prefix, items.schema) == ("t_", "mem")
        assert items.engine.url.get_backend_name() == dialect
        assert "table_prefix" not in str(items.engine.url)  # taken out before the driver sees the URL


def test_postgresql_schema_from_the_url(tmp_path: Path) -> None:
    schema = unique_name("mws")
    engine = sa.create_engine(make_url(postgres_url()).set(drivername="postgresql+psycopg"))
    with engine.begin() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        with open_item_memory(f"{postgres_url()}?schema={schema}") as items:
            _round_trip(items)
        with engine.connect() as connection:
            assert "memwoven_items" in sa.inspect(connection).get_table_names(schema=schema)
    finally:
        with engine.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


def test_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ITEM_URL_VARIABLE == "MEMWOVEN_ITEM_URL"
    monkeypatch.setenv(ITEM_URL_VARIABLE, f"sqlite:///{tmp_path}/env.db?table_prefix=env_")
    with open_item_memory() as items:
        assert isinstance(items, SQLItemMemory)
        assert items.table_prefix == "env_"
    monkeypatch.delenv(ITEM_URL_VARIABLE)
    with pytest.raises(InvalidInputError, match=ITEM_URL_VARIABLE):
        open_item_memory()


@pytest.mark.parametrize("scheme", ["redis", "rediss", "redis+cluster", "file"])
def test_redis_and_file_open_their_item_memory(scheme: str, tmp_path: Path) -> None:
    kind = "file" if scheme == "file" else "redis"
    prefix = unique_name()
    url = f"file://{tmp_path}/items" if kind == "file" else f"{scheme}://127.0.0.1:6379/0?prefix={prefix}"
    found = item_memory_class(scheme)
    assert found is not None
    assert f"{found.__module__}:{found.__name__}" == ITEM_BACKENDS[kind]
    if scheme == "redis+cluster":  # a cluster client learns the slots when it is made, and 6379 is no cluster
        with pytest.raises(BackendUnavailableError):
            open_item_memory(url)
        return
    items = open_item_memory(url)
    try:
        assert isinstance(items, found)
        if scheme != "rediss":  # no TLS server here
            _round_trip(items)
            items.delete_many([(("users", "u1"), "pref")])
    finally:
        items.close()
        if kind == "redis":
            delete_prefix("redis://127.0.0.1:6379/0", prefix)  # the memory's version clock stays after a delete


def test_qdrant_stores_no_items() -> None:
    with pytest.raises(InvalidInputError, match="vectors only"):
        open_item_memory("qdrant+memory://")
    assert item_memory_class("qdrant") is None


@pytest.mark.parametrize(
    ("url", "options", "words"),
    [
        ("nosuch://host/db", {}, "unsupported scheme"),
        ("", {}, "unsupported scheme"),
        ("http://example.com", {}, "unsupported scheme"),
        ("memory+x://", {}, "unsupported scheme"),
        ("file://remotehost/path", {}, "local path"),
        ("sqlite://x.db", {}, "host 'x.db' with no file path"),
        ("memory://", {"table_prefix": "a_"}, "unexpected keyword argument 'table_prefix'"),
        (UNREACHABLE, {"no_such_option": 1}, "unexpected keyword argument 'no_such_option'"),
        (f"{UNREACHABLE}?table_prefix=", {}, "is empty in the URL"),
        (f"{UNREACHABLE}?table_prefix=a_&table_prefix=b_", {}, "table_prefix"),
        (f"{UNREACHABLE}?table_prefix=a_", {"table_prefix": "a_"}, "both in the URL and as an argument"),
        (f"{UNREACHABLE}?table_prefix=Not%20An%20Identifier", {}, "table_prefix must be"),
        (UNREACHABLE, {"schema": "a;b"}, "schema"),
        (123, {}, "must be a string"),
    ],
)
def test_bad_urls_and_options_are_refused_before_connecting(
    url: object, options: dict[str, object], words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError) as raised:
        open_item_memory(url, **options)  # type: ignore[arg-type]
    assert words in str(raised.value)
    assert "s3cr3t" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []  # no SQLite file was created


def test_the_password_never_shows() -> None:
    with open_item_memory(UNREACHABLE) as items:  # made, not connected
        assert "s3cr3t" not in repr(items)
        assert "s3cr3t" not in items.url
        assert "***" in repr(items)
    with pytest.raises(InvalidInputError) as raised:
        open_item_memory("redis2://user:s3cr3t@host/0")
    assert "s3cr3t" not in str(raised.value)
