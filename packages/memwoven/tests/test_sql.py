"""The SQL backends: the conformance suite on SQLite, PostgreSQL and MariaDB, plus SQL-specific behaviour."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from cancel_support import cancel_a_locked_update
from clock_support import Clock
from sql_support import KINDS, SQLHooks, sql_place
from sqlalchemy.ext.asyncio import create_async_engine

import memwoven._clock as _clock
from memwoven import (
    BackendUnavailableError,
    ConcurrentModificationError,
    CorruptMemoryError,
    DimensionMismatchError,
    InvalidInputError,
    ItemWrite,
    Message,
    SQLItemMemory,
)
from memwoven.backends.sql import SQLChatMemory, SQLVectorMemory, _driver
from memwoven.backends.sql._schema import SCHEMA_VERSION, Tables, key_of
from memwoven.contracts import ChatMemory, VectorMemory
from memwoven.history import encode_message
from memwoven.testing import HOSTILE_IDS, ChatMemoryContract, VectorMemoryContract, turn
from memwoven.urls import open_vector_memory
from memwoven_test_support import postgres_url, unique_name

# valid JSON (PostgreSQL's json column refuses anything else) that is not a Message
_UNDECODABLE = '{"role": "wizard", "content": 3}'


@dataclass
class Place:
    """Where one test's tables live: a URL and a table prefix no other test uses."""

    url: str
    prefix: str
    opened: list[SQLChatMemory | SQLVectorMemory] = field(default_factory=list)

    def chat(self, **options: Any) -> SQLChatMemory:
        self.opened.append(SQLChatMemory(self.url, table_prefix=self.prefix, **options))
        return self.opened[-1]  # type: ignore[return-value]

    def vector(self, **options: Any) -> SQLVectorMemory:
        self.opened.append(SQLVectorMemory(self.url, table_prefix=self.prefix, **options))
        return self.opened[-1]  # type: ignore[return-value]

    def close(self) -> None:
        for memory in self.opened:
            memory.close()


@contextmanager
def place_for(kind: str, tmp_path: Path) -> Iterator[Place]:
    """A fresh place on `kind`; on a server, this test's tables (and only those) are dropped afterwards."""
    with sql_place(kind, tmp_path) as (url, prefix):
        where = Place(url, prefix)
        try:
            yield where
        finally:
            where.close()


@pytest.fixture(params=KINDS)
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    with place_for(request.param, tmp_path) as where:
        yield where


def _execute(memory: SQLChatMemory | SQLVectorMemory, statement: sa.Executable) -> None:
    with memory.engine.begin() as connection:
        connection.execute(statement)


# The conformance suite on each database --------------------------------------------------------------------


class TestSQLChat(SQLHooks, ChatMemoryContract):
    @pytest.fixture
    def chat_memory(self, sql_kind: str, tmp_path: Path) -> Iterator[ChatMemory]:
        with place_for(sql_kind, tmp_path) as where:
            yield where.chat()

    def corrupt_session(self, memory: ChatMemory, session_id: str) -> None:
        assert isinstance(memory, SQLChatMemory)
        messages = Tables.build(memory.table_prefix, None).messages
        _execute(
            memory, sa.update(messages).where(messages.c.session_key == key_of(session_id)).values(body=_UNDECODABLE)
        )


class TestSQLVector(VectorMemoryContract):
    @pytest.fixture
    def vector_memory_factory(self, sql_kind: str, tmp_path: Path) -> Iterator[Callable[..., VectorMemory]]:
        with place_for(sql_kind, tmp_path) as where:
            yield lambda dimension, metric: where.vector(
                collection=unique_name("c"), dimension=dimension, metric=metric
            )

    def reopen(self, memory: VectorMemory) -> VectorMemory:
        assert isinstance(memory, SQLVectorMemory)
        return SQLVectorMemory(
            memory.engine.url, table_prefix=memory.table_prefix, collection=memory.collection, metric=memory.metric
        )

    @contextlib.contextmanager
    def neighbour(self, memory: VectorMemory) -> Iterator[VectorMemory]:
        assert isinstance(memory, SQLVectorMemory)
        with SQLVectorMemory(
            memory.engine.url, table_prefix=memory.table_prefix, collection=memory.collection + "s"
        ) as neighbour:
            yield neighbour


# Construction, URLs and errors -----------------------------------------------------------------------------


def test_urls_get_both_drivers_and_never_show_the_password(tmp_path: Path) -> None:
    memory = SQLChatMemory("postgresql://me:s3cret@db.invalid:5432/app")
    assert memory.engine.url.drivername == "postgresql+psycopg"
    assert memory.async_engine is not None
    assert memory.async_engine.url.drivername == "postgresql+psycopg_async"
    assert "s3cret" not in repr(memory)
    assert "***" in repr(memory)
    assert SQLChatMemory("postgres://me@db.invalid/app").engine.url.drivername == "postgresql+psycopg"
    assert SQLChatMemory("mysql://me@db.invalid/app").engine.url.drivername == "mysql+pymysql"
    maria = SQLVectorMemory("mariadb://me@db.invalid/app")
    assert maria.async_engine is not None
    assert maria.async_engine.url.drivername == "mariadb+aiomysql"
    lite = SQLChatMemory(f"sqlite:///{tmp_path}/x.db")
    assert lite.async_engine is not None
    assert lite.async_engine.url.drivername == "sqlite+aiosqlite"


_SYNC_WORKER = """
import asyncio, sys
from memwoven import SQLVectorMemory
memory = SQLVectorMemory(sys.argv[1], collection="c", dimension=2)
memory.store([{"id": "a", "embedding": [1.0, 0.0]}])
assert [hit.document.id for hit in memory.search([1.0, 0.1], top_k=1)] == ["a"]
print(sorted(m for m in ("sqlalchemy.ext.asyncio", "aiosqlite", "sqlalchemy.dialects.postgresql") if m in sys.modules))
asyncio.run(memory.asearch([1.0, 0.1], top_k=1))
print(sorted(m for m in ("sqlalchemy.ext.asyncio", "aiosqlite") if m in sys.modules))
"""


def test_a_sync_process_imports_no_async_engine_nor_other_dialects(tmp_path: Path) -> None:
    """A worker on SQLite using the sync API loads neither SQLAlchemy's asyncio extension, nor aiosqlite, nor the
    PostgreSQL dialect; its first async call builds the async engine."""
    found = subprocess.run(
        [sys.executable, "-c", _SYNC_WORKER, f"sqlite:///{tmp_path}/x.db"], capture_output=True, text=True, check=True
    )
    assert found.stdout.splitlines() == ["[]", "['aiosqlite', 'sqlalchemy.ext.asyncio']"]


@pytest.mark.parametrize(
    "url",
    ["postgresql+psycopg2://h/db", "oracle://h/db", "sqlite://", "sqlite:///:memory:", "not a url", 42],
)
def test_unusable_urls_are_refused(url: Any) -> None:
    with pytest.raises(InvalidInputError):
        SQLChatMemory(url)


@pytest.mark.parametrize("option", [{"table_prefix": "bad-prefix"}, {"table_prefix": "1x"}, {"schema": "a;b"}])
def test_identifiers_are_validated(tmp_path: Path, option: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        SQLChatMemory(f"sqlite:///{tmp_path}/x.db", **option)


def test_an_unreachable_server_raises_backend_unavailable_without_the_password() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    memory = SQLChatMemory(f"postgresql://me:s3cret@127.0.0.1:{port}/db", pool_timeout=2)
    with pytest.raises(BackendUnavailableError) as raised:
        memory.load("s")
    assert "s3cret" not in str(raised.value)
    assert f"127.0.0.1:{port}" in str(raised.value)
    with pytest.raises(BackendUnavailableError):
        asyncio.run(memory.aload("s"))
    memory.close()


def test_an_unwritable_sqlite_path_raises_backend_unavailable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    memory = SQLChatMemory(f"sqlite:///{tmp_path}/file/sub/x.db")
    with pytest.raises(BackendUnavailableError):
        memory.save("s", [turn(1)])


class _Proxy:
    """A TCP forwarder we can cut and restore, to play a database that goes away and comes back."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._server: socket.socket | None = None
        self._sockets: list[socket.socket] = []

    def start(self) -> None:
        server = socket.create_server(("127.0.0.1", self.port))
        self.port = server.getsockname()[1]
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def stop(self) -> None:
        assert self._server is not None
        for sock in [self._server, *self._sockets]:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._sockets.clear()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass


@pytest.mark.service
def test_the_same_object_works_again_when_the_server_returns(tmp_path: Path) -> None:
    with place_for("postgresql", tmp_path) as where:
        server = sa.engine.make_url(where.url)
        proxy = _Proxy((server.host or "127.0.0.1", server.port or 5432))
        proxy.start()
        memory = SQLChatMemory(server.set(port=proxy.port), table_prefix=where.prefix)
        try:
            memory.save("s", [turn(1)])
            proxy.stop()
            with pytest.raises(BackendUnavailableError):
                memory.append("s", [turn(2)])
            proxy.start()  # same port
            memory.append("s", [turn(3)])
            assert memory.load("s") == [turn(1), turn(3)]
        finally:
            memory.close()
            proxy.stop()


def test_an_sqlite_engine_taking_named_parameters_serves_the_statements_compiled_once(tmp_path: Path) -> None:
    """The hot paths compile their SQL once with positional parameters for the driver's cursor: an engine given
    with ``paramstyle="named"`` gets sqlite3's "?" there (it was sent "%s", which sqlite3 refuses)."""
    engine = sa.create_engine(f"sqlite:///{tmp_path}/named.db", paramstyle="named")
    writer, reader = SQLVectorMemory(engine, collection="c"), SQLVectorMemory(engine, collection="c")
    items = SQLItemMemory(engine)
    try:
        writer.store([_doc("x", [1.0, 0.0]), _doc("y", [0.0, 1.0])])
        assert [hit.document.id for hit in reader.search([0.0, 1.0], top_k=1)] == ["y"]
        items.put_many([ItemWrite(("n",), key, {"k": key}, expected_version=0) for key in ("a", "b")])
        assert [item.key for item in items.list(("n",), filter={"k": "b"})] == ["b"]
    finally:
        for memory in (writer, reader, items):
            memory.close()
        engine.dispose()


def test_given_engines_are_used_and_left_open(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/x.db"
    engine = sa.create_engine(url)
    memory = SQLChatMemory(engine)
    assert memory.engine is engine
    assert memory.async_engine is None
    memory.save("s", [turn(1)])
    assert asyncio.run(memory.aload("s")) == [turn(1)]  # async falls back to a thread
    memory.close()
    with engine.connect() as connection:  # still usable: the caller owns it
        assert connection.execute(sa.text("SELECT count(*) FROM memwoven_messages")).scalar() == 1

    async def with_async_engine() -> list[Message]:
        async_engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/x.db")
        both = SQLChatMemory(async_engine)
        await both.aappend("s", [turn(2)])
        loaded = await both.aload("s")
        assert both.load("s") == loaded  # the sync API gets its own engine over the same database
        await both.aclose()
        await async_engine.dispose()
        return loaded

    assert asyncio.run(with_async_engine()) == [turn(1), turn(2)]
    engine.dispose()


def test_tables_follow_the_prefix_and_record_the_schema_version(place: Place) -> None:
    memory = place.chat()
    memory.save("s", [turn(1)])
    names = set(sa.inspect(memory.engine).get_table_names())
    assert {f"{place.prefix}meta", f"{place.prefix}sessions", f"{place.prefix}messages"} <= names
    meta = Tables.build(place.prefix, None).meta
    with memory.engine.connect() as connection:
        assert connection.execute(sa.select(meta.c.value)).scalar() == SCHEMA_VERSION
    memory.close()


@pytest.mark.service
def test_a_postgres_schema_is_created_and_used() -> None:
    url, schema = postgres_url(), unique_name("mws")
    memory = SQLChatMemory(url, schema=schema, table_prefix="t_")
    try:
        memory.save("s", [turn(1)])
        with SQLChatMemory(url, schema=schema, table_prefix="t_") as other:
            assert other.load("s") == [turn(1)]
        assert "t_sessions" in sa.inspect(memory.engine).get_table_names(schema=schema)
    finally:
        with memory.engine.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        memory.close()


def test_concurrent_first_use_creates_the_tables_once(place: Place) -> None:
    errors: list[BaseException] = []

    def first_use(i: int) -> None:
        memory = place.chat()
        try:
            memory.append("s", [turn(i)])
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)
        finally:
            memory.close()

    threads = [threading.Thread(target=first_use, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(str(m.metadata["index"]) for m in place.chat().load("s")) == ["0", "1", "2", "3"]


# O(change) saves ------------------------------------------------------------------------------------------


def _record_statements(
    memory: SQLChatMemory | SQLVectorMemory, monkeypatch: pytest.MonkeyPatch, record: Callable[[str, int], None]
) -> None:
    """Call `record(text, rows)` for every statement `memory` sends from now on: through SQLAlchemy, and on the
    driver's cursor (SQLite's and PostgreSQL's hot statements: a vector read's changes query, a chat write's)."""

    def through_sqlalchemy(_c: Any, _k: Any, text: str, parameters: Any, _x: Any, many: bool) -> None:
        record(text, len(parameters) if many else 1)

    sa.event.listen(memory.engine, "before_cursor_execute", through_sqlalchemy)
    rows, execute_many = _driver.rows, _driver.execute_many

    def recorded_rows(connection: sa.Connection, text: str, parameters: Any, **options: Any) -> Any:
        if connection.engine.pool is memory.engine.pool:
            record(text, 1)
        return rows(connection, text, parameters, **options)

    def recorded_many(connection: sa.Connection, text: str, parameters: Any) -> None:
        if connection.engine.pool is memory.engine.pool:
            record(text, len(parameters))
        execute_many(connection, text, parameters)

    monkeypatch.setattr(_driver, "rows", recorded_rows)
    monkeypatch.setattr(_driver, "execute_many", recorded_many)


class _Statements:
    """Counts the statements and rows a memory sends, by kind (INSERT INTO messages, DELETE, ...)."""

    def __init__(self, memory: SQLChatMemory, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[str, int]] = []
        self.table = f"{memory.table_prefix}messages"
        _record_statements(
            memory, monkeypatch, lambda text, rows: self.log.append((" ".join(text.split()[:3]).upper(), rows))
        )

    def rows(self, prefix: str) -> int:
        return sum(n for statement, n in self.log if statement.startswith(prefix) and self.table.upper() in statement)

    def count(self, prefix: str) -> int:
        return sum(1 for statement, _ in self.log if statement.startswith(prefix) and self.table.upper() in statement)

    def reset(self) -> None:
        self.log.clear()


def test_saves_write_only_what_changed(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = place.chat()
    original = [turn(i) for i in range(200)]
    memory.save("s", original)
    statements = _Statements(memory, monkeypatch)

    history = memory.load("s")
    assert history == original
    assert statements.count("SELECT") == 0  # the snapshot was still current: no message rows fetched

    cases: list[tuple[str, list[Message], int, int]] = [
        ("append two", [*history, turn(200), turn(201)], 2, 0),
        ("change one in the middle", [*history[:100], turn(-1), *history[101:]], 100, 1),
        ("truncate", history[:50], 0, 1),
        ("unchanged", history[:50], 0, 0),
        ("equal copies of the stored messages", [m.model_copy(deep=True) for m in history[:50]], 0, 0),
    ]
    for name, new, inserted, deletes in cases:
        statements.reset()
        memory.save("s", new)
        assert (statements.rows("INSERT INTO"), statements.count("DELETE FROM")) == (inserted, deletes), name
        assert memory.load("s") == new, name
        assert place.chat().load("s") == new, name


def test_append_inserts_only_the_new_rows(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = place.chat()
    memory.save("s", [turn(i) for i in range(100)])
    statements = _Statements(memory, monkeypatch)
    memory.append("s", [turn(100), turn(101), turn(102)])
    assert statements.rows("INSERT INTO") == 3
    assert statements.count("INSERT INTO") == 1
    assert statements.count("DELETE FROM") == 0
    assert memory.load("s") == [turn(i) for i in range(103)]


def test_a_sliding_ttl_expires_idle_sessions_and_cleanup_deletes_them(place: Place, clock: Clock) -> None:
    memory = place.chat(ttl=60)
    memory.save("idle", [turn(0)])
    memory.save("busy", [turn(0)])
    for i in range(1, 4):  # every write resets the busy session's clock
        clock.advance(24)
        memory.append("busy", [turn(i)])
    assert memory.load("idle") == []
    assert memory.load_versioned("idle").version == 0
    assert memory.sessions() == ["busy"]
    assert memory.cleanup_expired() == 1
    assert memory.cleanup_expired() == 0
    assert memory.save("idle", [turn(9)], expected_version=0) > 0  # an expired session starts afresh
    assert [m.text for m in memory.load("busy")] == ["w-0", "w-1", "w-2", "w-3"]
    assert asyncio.run(_async_cleanup(memory)) == 0


async def _async_cleanup(memory: SQLChatMemory) -> int:
    try:
        return await memory.acleanup_expired()
    finally:
        await memory.aclose()


def test_a_ttl_under_a_millisecond_keeps_a_session_one_millisecond(
    place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expiry is kept in whole milliseconds, at least one (0.4 ms was rounded to 0: gone as it was written)."""
    now = [_clock.wall_ms()]
    monkeypatch.setattr(_clock, "wall_ms", lambda: now[0])  # a clock that moves only when told
    place.chat(ttl=0.0004).save("s", [turn(0)])
    assert place.chat().load("s") == [turn(0)]
    now[0] += 1
    assert place.chat().load("s") == []


def test_a_message_id_with_a_lone_surrogate_is_refused_typed_by_save_as_by_append(place: Place) -> None:
    """`save` hashed the ids before encoding any message: a bare UnicodeEncodeError (nothing written)."""
    memory = place.chat()
    for write in (memory.save, memory.append):
        with pytest.raises(InvalidInputError):
            write("s", [Message(role="user", content="hi", id="\ud800")])
    assert place.chat().load("s") == []


def test_values_equal_in_python_but_not_in_json_are_rewritten(place: Place) -> None:
    memory = place.chat()
    memory.save("s", [Message(role="user", content="x", metadata={"flag": 1})])
    memory.save("s", [Message(role="user", content="x", metadata={"flag": True})])  # True == 1 in Python
    [loaded] = place.chat().load("s")
    assert loaded.metadata["flag"] is True


@pytest.mark.parametrize("cache_size", [256, 0])
def test_another_objects_writes_are_never_hidden_by_the_cache(place: Place, cache_size: int) -> None:
    a, b = place.chat(cache_size=cache_size), place.chat()
    a.save("s", [turn(i) for i in range(10)])
    assert a.load("s") == b.load("s")
    edited = [*b.load("s")]
    edited[4] = turn(40)
    b.save("s", edited)  # same length, one message changed in the middle
    assert a.load("s") == edited
    b.save("s", [turn(0), turn(1)])
    stale = [turn(i) for i in range(10)]
    stale[7] = turn(70)
    a.save("s", stale)  # a's snapshot is stale: the stored digests decide what to keep
    assert b.load("s") == stale == a.load("s")
    b.append("s", [turn(11)])
    assert a.load("s") == [*stale, turn(11)]
    b.clear("s")
    assert a.load_versioned("s") == ([], 0)


def test_rejected_messages_are_named_by_their_position_in_the_whole_list(place: Place) -> None:
    memory = place.chat()
    memory.save("s", [turn(i) for i in range(5)])
    history = memory.load("s")  # the fast path validates only what follows the cached messages
    with pytest.raises(InvalidInputError, match="message 6"):
        memory.save("s", [*history, turn(5), {"role": "wizard"}])
    assert memory.load("s") == history


def test_a_stale_expected_version_fails_across_objects(place: Place) -> None:
    a, b = place.chat(), place.chat()
    _, version = a.load_versioned("s")
    b.save("s", [turn(1)])
    with pytest.raises(ConcurrentModificationError):
        a.save("s", [turn(2)], expected_version=version)
    assert a.load("s") == [turn(1)]


def test_hostile_session_ids_stay_apart(place: Place) -> None:
    memory = place.chat()
    for position, session_id in enumerate(HOSTILE_IDS):
        memory.append(session_id, [turn(position)])
    other = place.chat()
    assert other.sessions() == sorted(HOSTILE_IDS)
    for position, session_id in enumerate(HOSTILE_IDS):
        assert other.load(session_id) == [turn(position)]


# Corruption ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "damage",
    ["bad json", "not a message", "another message", "missing row", "session row missing", "other session id"],
)
def test_damaged_rows_raise_corrupt_memory_naming_the_session(place: Place, damage: str) -> None:
    memory = place.chat()
    memory.save("victim", [turn(0), turn(1), turn(2)])
    memory.save("bystander", [turn(9)])
    tables = Tables.build(place.prefix, None)
    key = key_of("victim")
    rows = sa.update(tables.messages).where(tables.messages.c.session_key == key, tables.messages.c.seq == 1)
    statement = {
        "bad json": rows.values(body="{truncated"),
        "not a message": rows.values(body='{"role": "wizard"}'),
        "another message": rows.values(body=encode_message(turn(7))),  # valid, with the digest column untouched
        "missing row": sa.delete(tables.messages).where(tables.messages.c.session_key == key),
        "session row missing": sa.delete(tables.sessions).where(tables.sessions.c.session_key == key),
        "other session id": sa.update(tables.sessions)
        .where(tables.sessions.c.session_key == key)
        .values(session_id="someone else"),
    }[damage]
    if damage == "bad json" and place.url.startswith("postgresql"):
        with pytest.raises(sa.exc.DBAPIError):  # the native json column refuses it: this damage cannot happen
            _execute(memory, statement)
        return
    _execute(memory, statement)
    fresh = place.chat()
    with pytest.raises(CorruptMemoryError, match="victim"):
        fresh.load("victim")
    assert fresh.load("bystander") == [turn(9)]

    async def load_async() -> None:
        async with place.chat() as memory:  # the async API, closed on its own event loop
            with pytest.raises(CorruptMemoryError, match="victim"):
                await memory.aload("victim")

    asyncio.run(load_async())


@pytest.mark.parametrize("version", ["1", "99"], ids=["older", "newer"])
def test_tables_of_another_schema_version_are_refused(place: Place, version: str) -> None:
    memory = place.chat()
    memory.save("s", [turn(1)])
    meta = Tables.build(place.prefix, None).meta
    _execute(memory, sa.update(meta).values(value=version))
    with pytest.raises(CorruptMemoryError, match=f"schema version {version}; .*memwoven export"):
        place.chat().load("s")


def test_message_rows_left_without_their_session_row(place: Place, caplog: pytest.LogCaptureFixture) -> None:
    """Reads and appends refuse them (never an IntegrityError from the database, never `[]`), and say so in the
    log; a save replaces them, as it replaces any history."""
    memory = place.chat()
    memory.save("victim", [turn(0), turn(1)])
    sessions = Tables.build(place.prefix, None).sessions
    _execute(memory, sa.delete(sessions).where(sessions.c.session_key == key_of("victim")))
    fresh = place.chat()
    for write in (
        lambda: fresh.append("victim", [turn(2)]),
        lambda: asyncio.run(fresh.aappend("victim", [turn(2)])),
        lambda: fresh.update("victim", lambda messages: [*messages, turn(2)]),
    ):
        with caplog.at_level(logging.WARNING, logger="memwoven.sql"), pytest.raises(CorruptMemoryError):
            write()
    assert "session 'victim': its message rows remain but its session row is missing" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memwoven.sql"):
        fresh.save("victim", [turn(5)])
    assert "replaced 2 message rows left without their session row" in caplog.text
    assert place.chat().load("victim") == [turn(5)]


def test_a_save_never_keeps_a_stored_row_it_did_not_verify(place: Place) -> None:
    """An object that has not read the session compares the stored bodies, not only their digests."""
    original = [turn(i) for i in range(5)]
    place.chat().save("victim", original)
    messages = Tables.build(place.prefix, None).messages
    forged = sa.update(messages).where(messages.c.session_key == key_of("victim"), messages.c.seq == 3)
    _execute(place.chat(), forged.values(body=encode_message(turn(30))))
    assert place.chat().save("victim", original) > 0
    with place.chat().engine.connect() as connection:
        bodies = connection.execute(
            sa.select(messages.c.body).where(messages.c.session_key == key_of("victim")).order_by(messages.c.seq)
        ).scalars()
        assert list(bodies) == [encode_message(m) for m in original]
    assert place.chat().load("victim") == original


# Message ids (CM10) ----------------------------------------------------------------------------------------


def _with_ids(messages: list[Message], prefix: str = "m") -> list[Message]:
    return [m.model_copy(update={"id": f"{prefix}{i}"}) for i, m in enumerate(messages)]


def test_a_unique_index_keeps_ids_apart_whatever_the_writer(place: Place) -> None:
    """The safety net under the locked lookup: the database itself refuses a second row with a stored id."""
    memory = place.chat()
    memory.save("s", _with_ids([turn(0), turn(1)]))
    memory.save("other", _with_ids([turn(0)]))  # the same id in another session is another message
    messages = Tables.build(place.prefix, None).messages
    with memory.engine.connect() as connection:
        row = connection.execute(sa.select(messages).where(messages.c.seq == 1).limit(1)).one()
    twin = {**row._asdict(), "seq": 2}
    with pytest.raises(sa.exc.IntegrityError):
        _execute(memory, sa.insert(messages).values(twin))
    _execute(memory, sa.insert(messages).values({**twin, "message_key": None}))  # rows without an id never collide


def test_sqlite_chat_writes_run_past_sqlalchemys_execution(tmp_path: Path) -> None:
    """On SQLite a chat write's statements (the session's lock, its message rows, its version) run on the driver's
    cursor (`_driver`), where SQLAlchemy's execution took ~40% of an append: none reaches SQLAlchemy's events."""
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    with SQLChatMemory(url) as memory:
        memory.save("s", [turn(0)])
        through_sqlalchemy: list[str] = []
        sa.event.listen(memory.engine, "before_cursor_execute", lambda *args: through_sqlalchemy.append(args[2]))
        memory.append("s", [turn(1), turn(2)])
        memory.save("s", [turn(i) for i in range(4)])
        assert [s for s in through_sqlalchemy if s.lstrip().upper().startswith(("INSERT", "UPDATE"))] == []
    with SQLChatMemory(url) as fresh:
        assert fresh.load("s") == [turn(i) for i in range(4)]


@pytest.mark.parametrize("many", [False, True], ids=["rows", "execute_many"])
def test_a_statement_on_an_invalidated_driver_connection_goes_to_sqlalchemy(
    tmp_path: Path, many: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """`_driver` sends a statement whose driver connection was invalidated earlier in the transaction through
    SQLAlchemy, which raises its own error (not an AttributeError of a missing cursor)."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with pytest.raises(sa.exc.SQLAlchemyError), engine.begin() as connection:  # noqa: PT012
            connection.exec_driver_sql("SELECT 1")
            connection.connection.invalidate()
            caplog.set_level(logging.DEBUG, logger="memwoven.sql")
            if many:
                _driver.execute_many(connection, "SELECT ?", [(1,), (2,)])
            else:
                list(_driver.rows(connection, "SELECT ?", (1,)))
        assert "executing through SQLAlchemy" in caplog.text
    finally:
        engine.dispose()


def test_appends_and_saves_with_ids_cost_what_changed(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    """A retried append writes nothing; a save or append of ids looks up only those ids, never the history."""
    history = _with_ids([turn(i) for i in range(200)])
    place.chat().save("s", history)
    memory = place.chat()  # has not read the session: no snapshot to lean on
    statements: list[str] = []
    _record_statements(memory, monkeypatch, lambda text, _rows: statements.append(" ".join(text.split())))
    version = memory.load_versioned("s").version
    statements.clear()
    assert memory.append("s", history[-3:]) == version  # all stored: nothing written, the version unchanged
    writes = (f"INSERT INTO {place.prefix}messages", f"UPDATE {place.prefix}sessions", "DELETE")
    assert not [s for s in statements if s.startswith(writes)]
    more = _with_ids([turn(200), turn(201)], prefix="n")
    statements.clear()
    memory.save("s", [*history, *more])
    inserts = [s for s in statements if s.startswith(f"INSERT INTO {place.prefix}messages")]
    assert len(inserts) == 1
    assert not [s for s in statements if s.startswith("DELETE")]
    assert not [s for s in statements if ".body" in s and s.startswith("SELECT")]  # no stored message read
    statements.clear()
    assert memory.append("s", [history[5], *_with_ids([turn(202)], prefix="x")]) > version
    assert not [s for s in statements if ".body" in s and s.startswith("SELECT")]
    assert place.chat().load("s") == [*history, *more, *_with_ids([turn(202)], prefix="x")]


# Vector memory --------------------------------------------------------------------------------------------


def _doc(doc_id: str, vector: list[float], **metadata: Any) -> dict[str, Any]:
    return {"id": doc_id, "content": f"text {doc_id}", "embedding": vector, "metadata": metadata}


def _statements_of(memory: SQLVectorMemory, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement `memory` sends from now on (`_record_statements`)."""
    statements: list[str] = []
    _record_statements(memory, monkeypatch, lambda text, _rows: statements.append(text))
    return statements


def test_vector_changes_reach_other_objects_incrementally(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = place.vector(collection="docs"), place.vector(collection="docs")
    a.store([_doc("x", [1.0, 0.0]), _doc("y", [0.0, 1.0])])
    assert b.count() == 2
    assert b.dimension == 2
    statements = _statements_of(b, monkeypatch)
    a.store([_doc("x", [0.5, 0.5], v=2)])
    assert [d.metadata for d in b.get(["x"])] == [{"v": 2}]
    fetched = [s for s in statements if "embedding" in s]
    assert len(fetched) == 1
    assert "version >" in fetched[0]
    a.delete(["y"])
    assert b.count() == 1
    assert b.get(["y"]) == []
    assert [h.document.id for h in b.search([0.0, 1.0])] == ["x"]
    a.clear()
    assert b.count() == 0
    assert b.search([1.0, 0.0]) == []
    b.store([_doc("z", [1.0, 1.0])])
    assert [d.id for d in a.get(["x", "y", "z"])] == ["z"]
    statements.clear()
    assert b.count() == 1
    assert len([s for s in statements if "SELECT" in s]) == 1  # nothing changed: one query, no document rows


def test_a_full_load_reads_pages_into_one_matrix(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    import tracemalloc

    import numpy as np

    import memwoven.backends.sql.vector as sql_vector

    monkeypatch.setattr(sql_vector, "_PAGE", 250)  # many pages, the last one partial
    rows, width = 5510, 512
    vectors = np.random.default_rng(7).standard_normal((rows, width)).astype(np.float32)
    writer = place.vector(collection="bulk")
    for start in range(0, rows, 1000):
        writer.store(
            [
                {"id": f"d{i}", "content": "", "embedding": vectors[i].tolist()}
                for i in range(start, start + 1000)[: rows - start]
            ]
        )
    writer.delete(["d0", "d2999"])
    reader = place.vector(collection="bulk")
    tracemalloc.start()
    try:
        assert reader.count() == rows - 2
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    matrix = rows * width * 4
    # the rows' vectors once, plus one page, ids and norms (per-row float lists or a joined copy would be >= 2x)
    assert peak < 1.3 * matrix
    hits = reader.search(vectors[4321].tolist(), top_k=1)
    assert hits[0].document.id == "d4321"
    assert hits[0].document.embedding == vectors[4321].tolist()
    assert sorted(reader.ids()) == sorted(f"d{i}" for i in range(rows) if i not in (0, 2999))


def test_collections_are_separate_and_keep_their_dimension_and_metric(place: Place) -> None:
    first = place.vector(collection="one", dimension=3)
    first.store([_doc("a", [1.0, 2.0, 3.0])])
    place.vector(collection="ONE", metric="dot").store([_doc("a", [1.0, 2.0])])  # case twin, own settings
    assert place.vector(collection="one").count() == 1
    assert place.vector(collection="ONE", metric="dot").get(["a"])[0].embedding == [1.0, 2.0]
    with pytest.raises(DimensionMismatchError):
        place.vector(collection="one", dimension=4)
    with pytest.raises(InvalidInputError):
        place.vector(collection="one", metric="dot").count()
    lazy = place.vector(collection="one")
    dimensions = [lazy.dimension]
    lazy.count()
    dimensions.append(lazy.dimension)
    assert dimensions == [None, 3]  # learnt from the stored collection
    with pytest.raises(DimensionMismatchError):
        lazy.store([_doc("b", [1.0, 2.0])])


def test_another_dimension_fails_at_open_with_one_read_of_the_collection_row(place: Place, tmp_path: Path) -> None:
    fresh = place.vector(collection="one", dimension=4)  # nothing stored: nothing to check, and nothing is created
    if place.url.startswith("sqlite"):
        assert not (tmp_path / "db").exists()
    else:
        with fresh.engine.connect() as connection:
            assert not sa.inspect(connection).has_table(Tables.build(place.prefix, None).collections.name)
    place.vector(collection="one").store([_doc("a", [1.0, 2.0, 3.0])])
    statements: list[str] = []

    def record(*args: Any) -> None:
        statements.append(args[2])

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", record)
    try:
        with pytest.raises(DimensionMismatchError, match="has dimension 3, not 4"):
            place.vector(collection="one", dimension=4)
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", record)
    assert statements
    assert not [s for s in statements if "embedding" in s or "INSERT" in s]
    with pytest.raises(DimensionMismatchError):
        open_vector_memory(place.url, collection="one", dimension=4, table_prefix=place.prefix)
    with pytest.raises(InvalidInputError, match="metric"):
        place.vector(collection="one", dimension=3, metric="dot")
    assert place.vector(collection="one", dimension=3).count() == 1

    async def open_with_the_async_engine() -> None:
        with pytest.raises(DimensionMismatchError):
            SQLVectorMemory(place.vector().async_engine, table_prefix=place.prefix, collection="one", dimension=4)

    asyncio.run(open_with_the_async_engine())


def test_hostile_document_ids_and_collection_names_stay_apart(place: Place) -> None:
    ids = list(HOSTILE_IDS)
    with pytest.raises(InvalidInputError):  # the one collection-name rule of every backend (contracts)
        place.vector(collection="x; DROP TABLE t; --", dimension=2)
    memory = place.vector(collection="x.drop_table-t", dimension=2)
    memory.store([_doc(doc_id, [1.0, float(i + 1)], i=i) for i, doc_id in enumerate(ids)])
    twin = place.vector(collection="X.DROP_table-t")  # a case twin of the name: another collection
    twin.store([_doc("plain", [1.0, 0.0])])
    reader = place.vector(collection="x.drop_table-t")
    assert reader.count() == len(ids)
    assert [d.metadata["i"] for d in reader.get(ids)] == list(range(len(ids)))
    reader.delete(["a%", "Plain"])
    assert {d.id for d in memory.get(ids)} == set(ids) - {"a%", "Plain"}
    assert twin.count() == 1


def test_concurrent_writers_through_several_objects_converge(place: Place) -> None:
    place.vector(collection="c", dimension=2).count()  # create the tables before the race
    writers = [place.vector(collection="c") for _ in range(3)]

    def work(w: int, memory: SQLVectorMemory) -> None:
        for i in range(15):
            memory.store([_doc(f"w{w}-{i}", [1.0, float(i)], w=w)])
            if i % 3 == 2:
                memory.delete([f"w{w}-{i - 1}"])
            memory.count()

    threads = [threading.Thread(target=work, args=(w, m)) for w, m in enumerate(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = {f"w{w}-{i}" for w in range(3) for i in range(15) if i % 3 != 1}
    for memory in [*writers, place.vector(collection="c")]:
        assert memory.count() == len(expected)
        assert {h.document.id for h in memory.search([1.0, 1.0], top_k=100)} == expected


def test_a_rejected_batch_writes_nothing_to_the_table(place: Place) -> None:
    memory = place.vector(collection="c", dimension=2)
    memory.store([_doc("a", [1.0, 0.0])])
    with pytest.raises(InvalidInputError):
        memory.store([_doc("b", [0.0, 1.0]), _doc("c", [float("nan"), 1.0])])
    assert place.vector(collection="c").count() == 1


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ({"embedding": b"\x00\x01"}, "'b'"),
        ({"doc_id": "forged"}, "'forged'"),  # read back as a document never stored
        ({"doc_id": "a"}, "'a'"),  # two rows of one id
        ({"metadata": '{"m":' + "[" * 100_000 + "]" * 100_000 + "}"}, "'b'"),  # RecursionError in json
    ],
)
def test_a_damaged_vector_row_raises_corrupt_memory(place: Place, damage: dict[str, Any], named: str) -> None:
    memory = place.vector(collection="c")
    if "metadata" in damage and place.url.startswith("postgresql"):
        pytest.skip("PostgreSQL keeps metadata as jsonb, which refuses JSON nested this deep")
    memory.store([_doc("a", [1.0, 0.0]), _doc("b", [0.0, 1.0])])
    vectors = Tables.build(place.prefix, None).vectors
    _execute(memory, sa.update(vectors).where(vectors.c.doc_id == "b").values(**damage))
    with pytest.raises(CorruptMemoryError, match=named):
        place.vector(collection="c").search([1.0, 0.0])


@pytest.mark.parametrize(
    ("embedding", "metric"),
    [([float("nan"), 0.0], "dot"), ([0.0, float("-inf")], "cosine"), ([0.0, 0.0], "cosine"), ([3e38, 3e38], "dot")],
    ids=["NaN", "infinity", "zero vector (cosine)", "norm beyond float32"],
)
def test_a_vector_row_store_refuses_raises_corrupt_memory(place: Place, embedding: list[float], metric: str) -> None:
    """A row holding an embedding `store` refuses (a damaged table) raises `CorruptMemoryError` naming it, whether
    the index is loaded whole or brought up to date: only its length was checked, and it scored NaN, inf or 0."""
    memory = place.vector(collection="c", metric=metric)
    memory.store([_doc("a", [1.0, 0.0]), _doc("b", [0.0, 1.0])])
    reader = place.vector(collection="c", metric=metric)
    assert len(reader.search([1.0, 1.0])) == 2  # loaded before the damage: it reads only the changes after it
    vectors = Tables.build(place.prefix, None).vectors
    memory.store([_doc("c", [1.0, 1.0])])
    damaged = np.array(embedding, dtype="<f4").tobytes()
    _execute(memory, sa.update(vectors).where(vectors.c.doc_id.in_(["b", "c"])).values(embedding=damaged))
    for opened in (reader, place.vector(collection="c", metric=metric)):
        with pytest.raises(CorruptMemoryError, match=r"'[bc]': its embedding is damaged"):
            opened.search([1.0, 1.0])


# Several processes ----------------------------------------------------------------------------------------

WRITERS = 8
APPENDS = 50


def _append_many(url: str, prefix: str, writer: int) -> None:
    memory = SQLChatMemory(url, table_prefix=prefix)
    try:
        for i in range(APPENDS):
            memory.append("shared", [turn(i, f"p{writer}")])
    finally:
        memory.close()


@pytest.mark.slow
def test_processes_appending_to_one_session_lose_nothing(place: Place) -> None:
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_append_many, args=(place.url, place.prefix, w)) for w in range(WRITERS)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
    assert [p.exitcode for p in processes] == [0] * WRITERS
    loaded = place.chat().load("shared")
    assert len(loaded) == WRITERS * APPENDS
    for w in range(WRITERS):
        assert [m.metadata["index"] for m in loaded if m.metadata["writer"] == f"p{w}"] == list(range(APPENDS))


# Event loops and pools ----------------------------------------------------------------------------------------


def _open() -> tuple[set[str], int]:
    """The sockets this process has open, and its threads (each aiosqlite connection has one)."""
    sockets = set()
    for fd in os.listdir("/proc/self/fd"):
        with suppress(OSError):  # closed meanwhile (the listing's own descriptor)
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:"):
                sockets.add(target)
    return sockets, threading.active_count()


def _left_open(before: tuple[set[str], int]) -> tuple[set[str], int]:
    """The sockets and threads opened since `before` that are still open (threads take a moment to end)."""
    deadline = time.monotonic() + 5
    while True:
        gc.collect()
        sockets, threads = _open()
        left = (sockets - before[0], max(0, threads - before[1]))
        if left == (set(), 0) or time.monotonic() > deadline:
            return left
        time.sleep(0.02)


class _Peak:
    """The most connections an engine's pool lent at once, and how many it lends now."""

    def __init__(self, engine: sa.Engine) -> None:
        self.now = self.most = 0
        self._lock = threading.Lock()
        sa.event.listen(engine, "checkout", self._out)
        sa.event.listen(engine, "checkin", self._in)

    def _out(self, *_: Any) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def _in(self, *_: Any) -> None:
        with self._lock:
            self.now -= 1


@pytest.mark.filterwarnings("error::ResourceWarning")
def test_one_object_serves_successive_event_loops_and_loops_in_threads_at_once(
    place: Place, caplog: pytest.LogCaptureFixture
) -> None:
    """Each `asyncio.run` gets the object's async engine, closed on that loop as it shuts down; loops running at
    once (in threads) get engines of their own. Every write is stored once, and no connection is left open."""
    caplog.set_level(logging.DEBUG, "memwoven.sql")
    memory = place.chat()
    memory.load("s")  # the tables and the sync pool exist before counting what is open
    before = _open()
    for i in range(5):
        asyncio.run(memory.aappend("s", [turn(i)]))
    assert caplog.text.count(f"async engine {id(memory.async_engine):#x} serves event loop") == 5
    all_there = threading.Barrier(4, timeout=30)

    async def at_once(t: int) -> None:
        await memory.aappend(f"t{t}", [turn(0)])
        all_there.wait()  # blocks this loop a moment, on purpose: every loop holds its engine now
        await asyncio.gather(*(memory.aappend(f"t{t}", [turn(i)]) for i in range(1, 50)))

    failures: list[BaseException] = []

    def in_a_thread(t: int) -> None:
        try:
            asyncio.run(at_once(t))
        except BaseException as error:  # pragma: no cover - reported below
            failures.append(error)

    threads = [threading.Thread(target=in_a_thread, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(set(re.findall(r"async engine (0x[0-9a-f]+) serves", caplog.text)[5:])) == 4
    assert caplog.text.count("closed the async engine of event loop") == 9
    assert memory.load("s") == [turn(i) for i in range(5)]
    for t in range(4):
        assert sorted(int(str(m.metadata["index"])) for m in memory.load(f"t{t}")) == list(range(50))
    assert _left_open(before) == (set(), 0)


@pytest.mark.parametrize(
    "kind",
    [
        "sqlite",
        "postgresql",
        pytest.param("mariadb", marks=pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")),
    ],
)
def test_the_connections_of_a_loop_closed_before_them_are_closed_without_it(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A loop closed without shutting down its async generators (neither `asyncio.run` nor `aclose`) leaves its
    connections open: the object closes them without that loop when it meets the next loop, or is closed. aiomysql
    cannot close a connection without its loop: those are left to the garbage collector, with a warning."""
    caplog.set_level(logging.INFO, "memwoven.sql")
    with place_for(kind, tmp_path) as place:
        memory = place.chat()
        memory.load("s")
        before = _open()
        for i, then in enumerate([lambda: asyncio.run(memory.aload("s")), memory.close]):
            loop = asyncio.new_event_loop()
            loop.run_until_complete(memory.aappend("s", [turn(i)]))
            loop.close()
            then()
        expected = "left to the garbage collector" if kind == "mariadb" else "closed the connections of event loop"
        assert caplog.text.count(expected) == 2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore" if kind == "mariadb" else "error", ResourceWarning)
            assert _left_open(before) == (set(), 0)
        assert memory.load("s") == [turn(0), turn(1)]


@pytest.mark.slow
@pytest.mark.filterwarnings("error::ResourceWarning")
def test_async_calls_beyond_the_pool_wait_their_turn(place: Place) -> None:
    """2,000 calls at once on a chat and a vector object whose pools keep 5 connections (and may open 10 more):
    every call completes, through no more than 5 connections at once (an overflow connection is closed on return;
    PostgreSQL's loop also keeps two for single statements), and none is left out when the loop ends.

    The pool timeout is generous: a shared machine can stall the server or this process for seconds, which counts
    as the server not answering. That a long line never times out on its length is
    `test_a_long_line_of_waiters_never_times_out_while_turns_end`."""
    chat = place.chat(pool_size=5, pool_timeout=15)
    vectors = place.vector(pool_size=5, pool_timeout=15, dimension=2)
    assert chat.async_engine is not None
    assert vectors.async_engine is not None
    peaks = [_Peak(chat.async_engine.sync_engine), _Peak(vectors.async_engine.sync_engine)]

    async def at_once() -> list[Any]:
        calls: list[Awaitable[Any]] = []
        for i in range(300):  # writes queue on their locks too: reads make most of the crowd
            message = Message(role="user", content=str(i), id=f"m{i}")
            calls += [chat.aappend(f"s{i % 20}", [message]), *(chat.aload(f"s{(i + n) % 20}") for n in range(4))]
        for i in range(100):
            document = {"id": f"d{i}", "embedding": [1.0, float(i)]}
            calls += [vectors.astore([document]), *(vectors.asearch([1.0, float(i + n)], top_k=1) for n in range(4))]
        return await asyncio.gather(*calls, return_exceptions=True)

    started = time.monotonic()
    outcomes = asyncio.run(at_once())
    assert [o for o in outcomes if isinstance(o, BaseException)] == []
    assert time.monotonic() - started < 60
    kept = 2 if place.url.startswith("postgresql") else 0
    assert [(peak.now, peak.most <= 5 + kept) for peak in peaks] == [(0, True), (0, True)]
    stored = [str(m.id) for s in range(20) for m in chat.load(f"s{s}")]
    assert sorted(stored) == sorted(f"m{i}" for i in range(300))
    assert vectors.count() == 100


def test_sync_calls_from_many_threads_wait_their_turn(place: Place) -> None:
    """64 threads through a pool keeping 5 connections: every call completes, through no more than 5 connections at
    once (and PostgreSQL's two kept for single statements, or an SQLite file's kept read and write connections),
    which is all that stays out. The pool timeout is generous, as in the async test above."""
    chat = place.chat(pool_size=5, pool_timeout=15)
    peak = _Peak(chat.engine)
    failures: list[BaseException] = []

    def calls(t: int) -> None:
        try:
            for i in range(15):
                chat.append(f"s{t % 8}", [Message(role="user", content=str(i), id=f"{t}-{i}")])
                chat.load(f"s{t % 8}")
        except BaseException as error:  # pragma: no cover - reported below
            failures.append(error)

    threads = [threading.Thread(target=calls, args=(t,)) for t in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    kept = {"postgresql": 2, "sqlite": 2}.get(place.url.split(":", 1)[0], 0)
    assert peak.most <= 5 + kept
    assert peak.now == kept
    assert sum(len(chat.load(f"s{s}")) for s in range(8)) == 64 * 15


@pytest.mark.service
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_wait_for_a_server_that_stopped_answering_still_ends_after_pool_timeout(tmp_path: Path, mode: str) -> None:
    """Every turn held by a transaction that cannot end (a row lock held elsewhere): a call waiting for a turn
    raises after `pool_timeout`, as it would waiting for the pool, and the held ones complete once the lock goes."""
    with place_for("postgresql", tmp_path) as place:
        memory = place.chat(pool_size=2, pool_timeout=1)
        memory.append("s", [turn(0)])
        turns = 2
        assert memory.async_engine is not None
        peak = _Peak(memory.engine if mode == "sync" else memory.async_engine.sync_engine)
        sessions = Tables.build(place.prefix, None).sessions
        elsewhere = sa.create_engine(place.url.replace("postgresql://", "postgresql+psycopg://"))
        with elsewhere.connect() as locker:
            locker.execute(sa.select(sessions.c.version).with_for_update())
            if mode == "sync":
                held = [threading.Thread(target=memory.append, args=("s", [turn(i)])) for i in range(1, turns + 1)]
                for thread in held:
                    thread.start()
                _wait_until(lambda: peak.now == turns)
                with pytest.raises(BackendUnavailableError, match="pool_timeout"):
                    memory.append("other", [turn(0)])
                locker.rollback()
                for thread in held:
                    thread.join()
            else:

                async def scenario() -> None:
                    held = [asyncio.create_task(memory.aappend("s", [turn(i)])) for i in range(1, turns + 1)]
                    while peak.now < turns:  # noqa: ASYNC110 - waits for a counter the pool events move
                        await asyncio.sleep(0.01)
                    with pytest.raises(BackendUnavailableError, match="pool_timeout"):
                        await memory.aappend("other", [turn(0)])
                    await asyncio.to_thread(locker.rollback)
                    await asyncio.gather(*held)

                asyncio.run(scenario())
        elsewhere.dispose()
        assert len(memory.load("s")) == 1 + turns


def _wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_has_tables_looks_without_creating_anything(place: Place, tmp_path: Path) -> None:
    chat = place.chat()
    assert not chat.has_tables()
    if place.url.startswith("sqlite"):
        assert not (tmp_path / "db").exists()  # not even the directory of the file
    else:
        with chat.engine.connect() as connection:
            assert not sa.inspect(connection).has_table(f"{place.prefix}meta")
    chat.save("s", [turn(1)])
    assert chat.has_tables()
    assert place.chat().has_tables()
    assert not place.vector().has_tables()  # the vector tables are not the chat tables
    place.vector(dimension=2).count()
    assert place.vector().has_tables()


def test_postgres_reads_reuse_one_connection_and_survive_losing_it(tmp_path: Path) -> None:
    """Reads on PostgreSQL go through one kept connection (no checkout or ping per read); if the server drops it,
    the read runs again through the pool, and the caller never sees the loss."""
    with place_for("postgresql", tmp_path) as place:
        writer, reader = place.chat(), place.vector(dimension=2)
        writer.append("s", [Message(role="user", content="one")])
        reader.store([{"id": "a", "embedding": [1.0, 0.0]}])
        other = place.vector()
        assert [hit.document.id for hit in other.search([1.0, 0.0])] == ["a"]
        pids = set()
        for _ in range(3):
            assert [m.text for m in writer.load("s")] == ["one"]
            pids.add(_pinned_pid(writer))
        assert len(pids) == 1  # the same server process served every read
        killer = sa.create_engine(place.url.replace("postgresql://", "postgresql+psycopg://"))
        with killer.begin() as connection:
            for memory in (writer, other):
                connection.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": _pinned_pid(memory)})
        killer.dispose()
        reader.store([{"id": "b", "embedding": [0.0, 1.0]}])
        assert [m.text for m in writer.load("s")] == ["one"]
        assert [hit.document.id for hit in other.search([0.0, 1.0], top_k=1)] == ["b"]  # the write is seen
        writer.load("s")  # the lost connection was discarded: the next read keeps a new one
        assert _pinned_pid(writer) not in pids


def _pinned_pid(memory: SQLChatMemory | SQLVectorMemory) -> int:
    (connection,) = memory._db._pinned._free  # type: ignore[union-attr]  # one, calls being sequential
    return int(connection.connection.dbapi_connection.info.backend_pid)  # type: ignore[union-attr]


def test_sqlite_writes_reuse_one_connection_and_survive_losing_it(tmp_path: Path) -> None:
    """Write transactions on an SQLite file run on one kept connection (no pool checkout per write); a failed
    write is rolled back there and the next one works; if the connection is found closed before a write commits,
    the write runs through the pool instead, once, and the caller never sees the loss."""
    with place_for("sqlite", tmp_path) as place:
        memory = place.chat()
        memory.append("s", [turn(0)])
        memory.load("s")  # the kept read connection is open too
        kept = memory._db._kept_writer
        assert kept is not None
        (connection,) = kept._free
        checkouts: list[object] = []
        sa.event.listen(memory.engine, "checkout", lambda *args: checkouts.append(args[0]))
        for i in range(1, 6):
            memory.append("s", [turn(i)])
        with pytest.raises(ConcurrentModificationError):
            memory.save("s", [turn(0)], expected_version=1)
        memory.append("s", [turn(6)])
        assert checkouts == []  # every write ran on the kept connection
        assert kept._free == [connection]
        assert len(memory.load("s")) == 7
        dbapi_of(connection).close()  # the connection is gone under memwoven's feet
        checkouts.clear()
        memory.append("s", [turn(7)])
        assert len(checkouts) == 1  # that write went through the pool
        assert [m.text for m in memory.load("s")] == [turn(i).text for i in range(8)]  # each stored once
        memory.append("s", [turn(8)])
        assert len(kept._free) == 1
        assert kept._free[0] is not connection  # a new one is kept
        assert len(memory.load("s")) == 9


def dbapi_of(connection: sa.Connection) -> Any:
    """The driver's connection under an SQLAlchemy one."""
    return connection.connection.dbapi_connection


def _file_lock(place: Place) -> str:
    """'free' if an SQLite database file can be write-locked within a second, else what stopped it."""
    import sqlite3

    connection = sqlite3.connect(place.url.removeprefix("sqlite:///"), timeout=1.0)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
    except sqlite3.OperationalError as error:
        return f"locked ({error})"
    else:
        return "free"
    finally:
        connection.close()


def _slow_writes(memory: SQLVectorMemory | SQLChatMemory, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Make `memory`'s write transactions end their bodies with a statement taking 0.3 s, and set the event
    returned (made on the running loop) just before sending it: a cancellation then lands inside a driver call."""
    from sqlalchemy.util import await_only

    entered = asyncio.Event()
    atransact = memory._db.atransact

    async def slowed(work: Any) -> Any:
        if not work.write or work.ddl:
            return await atransact(work)

        def body(connection: sa.Connection) -> Any:
            result = work.body(connection)
            dialect = connection.dialect.name
            if dialect == "sqlite":
                driver = dbapi_of(connection)
                await_only(driver.driver_connection.create_function("memwoven_sleep", 1, time.sleep))
            sleep = {"sqlite": "memwoven_sleep", "postgresql": "pg_sleep"}.get(dialect, "SLEEP")
            entered.set()
            connection.exec_driver_sql(f"SELECT {sleep}(0.3)")
            return result

        return await atransact(dataclasses.replace(work, body=body))

    monkeypatch.setattr(memory._db, "atransact", slowed)
    return entered


def test_a_cancelled_async_write_rolls_back_and_leaves_no_lock(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    """An astore cancelled inside its transaction (in a driver call, as most cancellations of a write land) raises
    CancelledError, rolls back and holds no lock: another object's write follows at once.
    (Before, SQLAlchemy invalidated the connection and aiosqlite left its SQLite connection open in the write
    transaction: the file stayed locked until the garbage collector ran.)"""
    memory, other = place.vector(dimension=2), place.vector(dimension=2)

    async def scenario() -> tuple[list[str], str, float]:
        await memory.astore([_doc("a", [1.0, 0.0])])
        entered = _slow_writes(memory, monkeypatch)
        task = asyncio.ensure_future(memory.astore([_doc("b", [0.0, 1.0])]))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        lock = _file_lock(place) if place.url.startswith("sqlite") else "free"
        started = time.monotonic()
        await asyncio.wait_for(other.astore([_doc("c", [1.0, 1.0])]), 10)
        took = time.monotonic() - started
        stored = sorted(document.id for document in await other.aget(["a", "b", "c"]))
        await memory.aclose()
        await other.aclose()
        return stored, lock, took

    gc.disable()  # the leaked connection was closed by the garbage collector, at a random moment
    try:
        stored, lock, took = asyncio.run(scenario())
    finally:
        gc.enable()
    assert lock == "free"
    assert took < 2
    assert stored == ["a", "c"]  # the cancelled write was rolled back


def test_a_cancelled_async_update_cancels_its_change_and_rolls_back(place: Place) -> None:
    """aupdate's locked path with a coroutine `change`, cancelled while `change` awaits: `change` is cancelled,
    nothing is written, the session's row is free at once."""
    memory, other = place.chat(), place.chat()

    async def scenario() -> tuple[list[Message], bool, float]:
        try:
            return await cancel_a_locked_update(memory, other)
        finally:
            await memory.aclose()
            await other.aclose()

    history, cancelled, took = asyncio.run(scenario())
    assert cancelled
    assert took < 2
    assert history == [turn(0), turn(2)]


def test_async_writes_cancelled_at_any_point_leave_the_sqlite_file_unlocked(tmp_path: Path) -> None:
    """astores cancelled after 0-39 turns of the loop (every point of the call, from the first statement to the
    commit) each raise CancelledError or complete, and never leave the file locked (with the garbage collector
    off: a leaked connection was only ever closed by it)."""
    url = f"sqlite:///{tmp_path}/c.db"

    async def scenario() -> list[str]:
        memory = SQLVectorMemory(url, dimension=4)

        def write(i: int) -> Awaitable[Any]:
            return memory.astore([_doc(f"d{j}", [1.0, j, 2.0, i + 1]) for j in range(20)])

        await write(-1)
        locked = []
        deadline = time.monotonic() + 8
        for attempt in range(240):
            task = asyncio.ensure_future(write(attempt))
            for _ in range(attempt % 40):
                await asyncio.sleep(0)
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
            lock = _file_lock(Place(url, ""))
            if lock != "free":
                locked.append(f"cancelled after {attempt % 40} turns: {lock}")
                break
            if time.monotonic() > deadline:
                break
        await memory.aclose()
        return locked

    gc.disable()
    try:
        locked = asyncio.run(scenario())
    finally:
        gc.enable()
        gc.collect()
    assert locked == []


def test_a_long_line_of_waiters_never_times_out_while_turns_end() -> None:
    """`_Turns` and `_LoopTurns` with one turn and a 1 s timeout: 60 callers holding it 0.04 s each all get it,
    the last after waiting more than twice the timeout, because turns kept ending; a caller waiting while the one
    turn is never given back raises after the timeout."""
    from memwoven.backends.sql._engine import _LoopTurns, _Turns

    hold, callers, timeout = 0.04, 60, 1.0

    def threads() -> list[float]:
        line = _Turns(1, timeout)
        waits: list[float] = []

        def call() -> None:
            started = time.monotonic()
            with line:
                waits.append(time.monotonic() - started)
                time.sleep(hold)

        workers = [threading.Thread(target=call) for _ in range(callers)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return waits

    async def tasks() -> list[float]:
        line = _LoopTurns((1, timeout))

        async def call() -> float:
            started = time.monotonic()
            async with line:
                waited = time.monotonic() - started
                await asyncio.sleep(hold)
            return waited

        return list(await asyncio.gather(*(call() for _ in range(callers))))

    for waits in (threads(), asyncio.run(tasks())):
        assert len(waits) == callers
        assert max(waits) > 2 * timeout

    stuck = _Turns(1, 0.2)
    with stuck, pytest.raises(sa.exc.TimeoutError, match=r"no transaction ended for 0\.2 s"), stuck:
        pass

    async def stuck_tasks() -> None:
        line = _LoopTurns((1, 0.2))
        async with line:
            with pytest.raises(sa.exc.TimeoutError, match=r"no transaction ended for 0\.2 s"):
                async with line:
                    pass

    asyncio.run(stuck_tasks())


def test_a_turn_waiter_cancelled_as_it_gets_its_slot_is_cancelled_and_gives_the_slot_back() -> None:
    """`_LoopTurns`: a waiter cancelled at any point around the moment a slot is handed to it raises
    CancelledError (asyncio.wait_for, before Python 3.12, returned the slot and swallowed the cancellation) and
    leaves the slot free."""
    from memwoven.backends.sql._engine import _LoopTurns

    async def scenario(turns_before_cancel: int) -> tuple[str, str, bool]:
        turns = _LoopTurns((1, 30.0))
        await turns.__aenter__()
        waiter = asyncio.ensure_future(turns.__aenter__())
        for _ in range(3):
            await asyncio.sleep(0)
        await turns.__aexit__(None, None, None)  # the slot goes to the waiter
        for _ in range(turns_before_cancel):
            await asyncio.sleep(0)
        expected = "entered" if waiter.done() else "cancelled"  # done before the cancellation: in, rightly
        waiter.cancel()
        try:
            await waiter
        except asyncio.CancelledError:
            outcome = "cancelled"
        else:
            outcome = "entered"
            await turns.__aexit__(None, None, None)
        for _ in range(5):
            await asyncio.sleep(0)
        assert turns._slots is not None
        return outcome, expected, not turns._slots.locked()

    outcomes = [asyncio.run(scenario(turns_before_cancel)) for turns_before_cancel in range(6)]
    assert [(outcome, free) for outcome, _, free in outcomes] == [(expected, True) for _, expected, _ in outcomes]
    assert {expected for _, expected, _ in outcomes} == {"entered", "cancelled"}  # both sides of the moment
