"""Storage damaged by hand raises `CorruptMemoryError` naming the session (or document), and spares the rest.

The conformance suite already damages one message per backend (its `corrupt_session` hooks), the file tests a
dozen ways of damaging a session file, and the SQL tests message rows and embeddings. This module adds what those
leave out: Redis keys altered in every way a person or another program can (a version that is not a number, a
message list cut short or added to, keys of the wrong type), SQL chat sessions altered in every way that leaves
each row valid on its own (a body replaced by another message, rows swapped, removed, added or copied from
another session, the session row deleted), and SQL document rows with unreadable metadata or a collection row
naming another collection. After the damage a fresh object must refuse the damaged data (never a
silent `[]` or a partial history), keep serving everything else, and a plain save (or `clear`) must repair it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from reliability_stores import Store, fresh_store

from memwoven import Message, SQLChatMemory, SQLVectorMemory, VectorDocument
from memwoven.backends.redis import RedisChatMemory
from memwoven.backends.sql._schema import Tables, key_of
from memwoven.backends.sql.chat import _chain
from memwoven.errors import CorruptMemoryError
from memwoven.history import encode_message

pytestmark = pytest.mark.timeout(60)

HISTORY = [Message(role="user", content="one"), Message(role="assistant", content="two")]
OTHER = [Message(role="user", content="bystander")]

# key index: 0 meta (hash), 1 msgs (list), 2 digests (list)
REDIS_DAMAGES: dict[str, Callable[[redis.Redis, list[str]], Any]] = {
    "version-not-a-number": lambda c, k: c.hset(k[0], "version", "abc"),
    "id-missing": lambda c, k: c.hdel(k[0], "id"),
    "id-of-another-session": lambda c, k: c.hset(k[0], "id", "bystander"),
    "messages-deleted": lambda c, k: c.delete(k[1]),
    "message-removed": lambda c, k: c.rpop(k[1]),
    "message-added": lambda c, k: c.rpush(k[1], b'{"role":"user","content":"injected"}'),
    "message-not-json": lambda c, k: c.lset(k[1], 0, b"{not json"),
    "message-not-a-message": lambda c, k: c.lset(k[1], 1, b'{"role":"wizard"}'),
    "messages-wrong-type": lambda c, k: (c.delete(k[1]), c.set(k[1], "x")),
    "meta-wrong-type": lambda c, k: (c.delete(k[0]), c.set(k[0], "x")),
}


@pytest.fixture
def redis_store(tmp_path: Path) -> Iterator[Store]:
    with fresh_store("redis", tmp_path, "mwc") as store:
        yield store


@pytest.mark.parametrize("damage", list(REDIS_DAMAGES))
def test_damaged_redis_sessions(redis_store: Store, damage: str) -> None:
    writer = redis_store.chat()
    assert isinstance(writer, RedisChatMemory)
    writer.save("victim", HISTORY)
    writer.save("bystander", OTHER)
    client = redis.Redis.from_url(redis_store.location)
    REDIS_DAMAGES[damage](client, writer._keys("victim"))
    client.close()
    reader = redis_store.chat()
    with pytest.raises(CorruptMemoryError, match="victim"):
        reader.load("victim")
    asyncio.run(_refused_async(redis_store.chat(), lambda memory: memory.aload("victim"), "victim"))
    if damage not in ("id-missing", "message-not-json", "message-not-a-message"):
        # an append is O(1): it checks the session's id, length and key types, not every stored message
        with pytest.raises(CorruptMemoryError, match="victim"):
            reader.append("victim", [Message(role="user", content="never on a damaged history")])
    assert reader.load("bystander") == OTHER
    if damage in ("meta-wrong-type", "id-missing"):  # the listing reads each session's id from its meta: it
        with pytest.raises(CorruptMemoryError):  # refuses to hide a session it cannot name
            reader.sessions()
    else:
        assert "bystander" in reader.sessions()
    if damage.endswith("wrong-type") or damage == "version-not-a-number":
        reader.clear("victim")  # a damaged version or key type cannot be compared or written over: clear, then save
    reader.save("victim", [Message(role="user", content="repaired")])
    assert redis_store.chat().load("victim") == [Message(role="user", content="repaired")]
    reader.close()
    writer.close()


async def _refused_async(memory: Any, call: Callable[[Any], Any], name: str) -> None:
    """`call(memory)` through the async API raises CorruptMemoryError naming `name`; the memory is closed after."""
    try:
        with pytest.raises(CorruptMemoryError, match=name):
            await call(memory)
    finally:
        await memory.aclose()


# SQL chat sessions ------------------------------------------------------------------------------------------

SQL_HISTORY = [Message(role="user", content=f"turn {i}", id=f"h{i}") for i in range(3)]
FORGED = Message(role="assistant", content="words never said", id="h1")


def _message_rows(connection: sa.Connection, tables: Tables, key: str) -> list[Any]:
    messages = tables.messages
    query = sa.select(messages).where(messages.c.session_key == key).order_by(messages.c.seq)
    return list(connection.execute(query))


def _set_row(connection: sa.Connection, tables: Tables, key: str, seq: int, **values: Any) -> None:
    messages = tables.messages
    connection.execute(sa.update(messages).where(messages.c.session_key == key, messages.c.seq == seq).values(**values))


def _set_session(connection: sa.Connection, tables: Tables, key: str, **values: Any) -> None:
    connection.execute(sa.update(tables.sessions).where(tables.sessions.c.session_key == key).values(**values))


def _rechain_forgery(connection: sa.Connection, tables: Tables, key: str) -> None:
    """Replace message 1 and recompute its digest from message 0's, as a forger who knows the scheme would."""
    body = encode_message(FORGED)
    previous = bytes(_message_rows(connection, tables, key)[0].chain)
    _set_row(connection, tables, key, 1, body=body, chain=_chain(previous, body))


def _swap_rows(connection: sa.Connection, tables: Tables, key: str) -> None:
    first, second = _message_rows(connection, tables, key)[:2]
    _set_row(connection, tables, key, 0, message_key=None)  # the unique index on ids holds during the swap
    _set_row(connection, tables, key, 1, body=first.body, chain=first.chain, message_key=first.message_key)
    _set_row(connection, tables, key, 0, body=second.body, chain=second.chain, message_key=second.message_key)


def _copy_history(connection: sa.Connection, tables: Tables, key: str, source: str) -> None:
    """Make session `key` hold exactly the rows of session `source`, session row included (except its id)."""
    messages, sessions = tables.messages, tables.sessions
    connection.execute(sa.delete(messages).where(messages.c.session_key == key))
    rows = [{**row._asdict(), "session_key": key} for row in _message_rows(connection, tables, source)]
    connection.execute(sa.insert(messages), rows)
    source_row = connection.execute(sa.select(sessions).where(sessions.c.session_key == source)).one()
    _set_session(connection, tables, key, message_count=source_row.message_count, chain=source_row.chain)


def _add_row(connection: sa.Connection, tables: Tables, key: str) -> None:
    last = _message_rows(connection, tables, key)[-1]
    connection.execute(sa.insert(tables.messages).values({**last._asdict(), "seq": last.seq + 1, "message_key": None}))


# Each leaves every row valid on its own: only the rolling digests and the session row can tell.
SQL_CHAT_DAMAGES: dict[str, Callable[[sa.Connection, Tables, str, str], Any]] = {
    "session-row-deleted": lambda c, t, k, _: c.execute(sa.delete(t.sessions).where(t.sessions.c.session_key == k)),
    "body-replaced-by-another-message": lambda c, t, k, _: _set_row(c, t, k, 1, body=encode_message(FORGED)),
    "body-and-its-digest-replaced": lambda c, t, k, _: _rechain_forgery(c, t, k),
    "rows-swapped": lambda c, t, k, _: _swap_rows(c, t, k),
    "last-row-removed-and-count-lowered": lambda c, t, k, _: (
        c.execute(sa.delete(t.messages).where(t.messages.c.session_key == k, t.messages.c.seq == 2)),
        _set_session(c, t, k, message_count=2),
    ),
    "row-added-past-the-count": lambda c, t, k, _: _add_row(c, t, k),
    "count-raised": lambda c, t, k, _: _set_session(c, t, k, message_count=4),
    "session-digest-changed": lambda c, t, k, _: _set_session(c, t, k, chain=bytes(16)),
    "history-copied-from-another-session": lambda c, t, k, other: _copy_history(c, t, k, other),
}
# An append reads the session row, not the messages: it refuses what that row (or the insert) reveals.
SQL_APPEND_REFUSES = ("session-row-deleted", "row-added-past-the-count")


@pytest.mark.parametrize("damage", list(SQL_CHAT_DAMAGES))
def test_damaged_sql_sessions(sql_store: Store, damage: str) -> None:
    opened = [sql_store.chat() for _ in range(3)]
    writer, reader, repairer = opened
    writer.save("victim", SQL_HISTORY)
    writer.save("bystander", OTHER)
    assert isinstance(writer, SQLChatMemory)
    with writer.engine.begin() as connection:
        SQL_CHAT_DAMAGES[damage](
            connection, Tables.build(sql_store.prefix, None), key_of("victim"), key_of("bystander")
        )
    with pytest.raises(CorruptMemoryError, match="victim"):
        reader.load("victim")
    asyncio.run(_refused_async(sql_store.chat(), lambda memory: memory.aload("victim"), "victim"))
    with pytest.raises(CorruptMemoryError, match="victim"):
        reader.update("victim", lambda messages: [*messages, Message(role="user", content="never")])
    more = [Message(role="user", content="never on a damaged history", id="h9")]
    if damage in SQL_APPEND_REFUSES:  # a CorruptMemoryError, never the database's IntegrityError
        with pytest.raises(CorruptMemoryError, match="victim"):
            reader.append("victim", more)
        asyncio.run(_refused_async(sql_store.chat(), lambda memory: memory.aappend("victim", more), "victim"))
    assert reader.load("bystander") == OTHER
    assert "bystander" in reader.sessions()
    # The original history saved by an object that never read the session: it must not keep what it cannot verify.
    repairer.save("victim", SQL_HISTORY)
    with sql_store.chat() as fresh:
        assert fresh.load("victim") == SQL_HISTORY
    for memory in opened:
        memory.close()


# SQL document rows ------------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with fresh_store(request.param, tmp_path, "mwc") as store:
        yield store


def _sql_damage(memory: Any, statement: Any) -> None:
    with memory.engine.begin() as connection:
        connection.execute(statement)


@pytest.mark.parametrize("damage", ["metadata-an-array", "metadata-not-json", "collection-renamed", "row-deleted"])
def test_damaged_sql_document_rows(sql_store: Store, damage: str) -> None:
    vectors = Tables.build(sql_store.prefix, None).vectors
    collections = Tables.build(sql_store.prefix, None).collections
    writer = sql_store.vector("victim", dimension=2)
    bystander = sql_store.vector("bystander", dimension=2)
    writer.store([VectorDocument(id="a", embedding=[1.0, 0.0]), VectorDocument(id="b", embedding=[0.0, 1.0])])
    bystander.store([VectorDocument(id="z", embedding=[1.0, 1.0], metadata={"k": 1})])
    row = sa.update(vectors).where(vectors.c.collection_key == key_of("victim"), vectors.c.doc_id == "b")
    statement = {
        "metadata-an-array": row.values(metadata="[1, 2]"),
        "metadata-not-json": row.values(metadata="{not json"),
        "collection-renamed": sa.update(collections)
        .where(collections.c.collection_key == key_of("victim"))
        .values(name="someone else"),
        "row-deleted": sa.delete(collections).where(collections.c.collection_key == key_of("victim")),
    }[damage]
    if damage == "metadata-not-json" and sql_store.kind == "postgresql":
        with pytest.raises(sa.exc.DBAPIError):  # the native json column refuses it: this damage cannot happen there
            _sql_damage(writer, statement)
        return
    _sql_damage(writer, statement)
    reader = sql_store.vector("victim")
    assert isinstance(reader, SQLVectorMemory)
    expected = "'b'" if damage.startswith("metadata") else "victim"
    with pytest.raises(CorruptMemoryError, match=expected):
        reader.search([1.0, 0.0])
    asyncio.run(_refused_async(sql_store.vector("victim"), lambda memory: memory.acount(), expected))
    with sql_store.vector("bystander") as fresh:
        assert fresh.get(["z"])[0].metadata == {"k": 1}
    for memory in (reader, writer, bystander):
        memory.close()


# Redis vector keys ------------------------------------------------------------------------------------------

# key index: 0 docs (hash), 1 vecs (hash), 2 config (hash), 3 changes (stream)
REDIS_VECTOR_DAMAGES: dict[str, Callable[[redis.Redis, list[str]], Any]] = {
    "docs-wrong-type": lambda c, k: (c.delete(k[0]), c.set(k[0], "x")),
    "vectors-wrong-type": lambda c, k: (c.delete(k[1]), c.set(k[1], "x")),
    "config-wrong-type": lambda c, k: (c.delete(k[2]), c.set(k[2], "x")),
    "changes-wrong-type": lambda c, k: (c.delete(k[3]), c.set(k[3], "x")),
    "dimension-not-a-number": lambda c, k: c.hset(k[2], "dimension", "abc"),
    "metadata-an-array": lambda c, k: c.hset(k[0], "a", b'{"content":"x","metadata":[1]}'),
    "vector-truncated": lambda c, k: c.hset(k[1], "a", b"\x00\x00\x80"),
    "vector-deleted": lambda c, k: c.hdel(k[1], "a"),
    "document-deleted": lambda c, k: c.hdel(k[0], "a"),
}


@pytest.mark.parametrize("damage", list(REDIS_VECTOR_DAMAGES))
def test_damaged_redis_collections(redis_store: Store, damage: str) -> None:
    writer = redis_store.vector("victim", dimension=2)
    bystander = redis_store.vector("bystander", dimension=2)
    writer.store([VectorDocument(id="a", embedding=[1.0, 0.0]), VectorDocument(id="b", embedding=[0.0, 1.0])])
    bystander.store([VectorDocument(id="z", embedding=[1.0, 1.0])])
    client = redis.Redis.from_url(redis_store.location)
    REDIS_VECTOR_DAMAGES[damage](client, writer._keys)  # type: ignore[attr-defined]
    client.close()
    with redis_store.vector("victim") as reader, pytest.raises(CorruptMemoryError, match="victim"):
        reader.search([1.0, 0.0])
    asyncio.run(_refused_async(redis_store.vector("victim"), lambda memory: memory.acount(), "victim"))
    with redis_store.vector("bystander") as fresh:
        assert [d.id for d in fresh.get(["z"])] == ["z"]
    for memory in (writer, bystander):
        memory.close()


@pytest.mark.parametrize("half", [0, 1], ids=["document", "vector"])
def test_half_deleted_document_seen_by_an_incremental_pull(redis_store: Store, half: int) -> None:
    """A reader that pulls a change naming a document whose other half was deleted raises, not drops it."""
    writer = redis_store.vector("victim", dimension=2)
    reader = redis_store.vector("victim")
    writer.store([VectorDocument(id="a", embedding=[1.0, 0.0])])
    assert reader.count() == 1  # synced: the next read pulls only the changes after this one
    writer.store([VectorDocument(id="b", embedding=[0.0, 1.0])])
    client = redis.Redis.from_url(redis_store.location)
    client.hdel(writer._keys[half], "b")  # type: ignore[attr-defined]
    client.close()
    with pytest.raises(CorruptMemoryError, match="'b'"):
        reader.search([1.0, 0.0])
    for memory in (reader, writer):
        memory.close()
