"""Redis chat sessions damaged behind memwoven's back: detected, never returned as data (issue 19 §4).

Each damage of the matrix is one a person, another program or the server itself (an eviction under memory
pressure) can do to a session's keys while leaving every value readable: the meta key gone while the lists stay,
lists reversed or reordered together, a version lowered, a digest changed or added, a message replaced by another
valid one, the ids set evicted or added to, another session's keys copied over. After it, a fresh object's `load`
raises `CorruptMemoryError` naming the session (sync and async); an `append`, whose checks are O(1) (counts, the
last rolling digest, the seal), refuses every damage those can see; `sessions()` never silently leaves the session
out; other sessions are untouched; and a plain `save` (after `clear` where a key has the wrong type) repairs it.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import redis
from reliability_stores import Store, fresh_store

from memwoven import Message
from memwoven.backends.redis import RedisChatMemory
from memwoven.errors import CorruptMemoryError
from memwoven.history import encode_message

pytestmark = pytest.mark.timeout(120)

HISTORY = [
    Message(role="user", content="one", id="m1"),
    Message(role="assistant", content="two", id="m2"),
    Message(role="user", content="three"),
    Message(role="assistant", content="four", id="m4"),
]
OTHER = [Message(role="user", content="bystander", id="b1")]
FORGED = encode_message(Message(role="assistant", content="forged", id="m2")).encode()


def _reverse(client: redis.Redis, key: str) -> None:
    items = client.lrange(key, 0, -1)
    client.delete(key)
    client.rpush(key, *reversed(items))


def _swap(client: redis.Redis, key: str, i: int, j: int) -> None:
    first, second = client.lindex(key, i), client.lindex(key, j)
    client.lset(key, i, second)
    client.lset(key, j, first)


def _copy_session(client: redis.Redis, source: list[str], target: list[str]) -> None:
    for old, new in zip(source, target):
        client.copy(old, new, replace=True)
    client.hset(target[0], "id", "victim")


class Damage(NamedTuple):
    do: Callable[[redis.Redis, list[str], list[str]], Any]  # client, victim's keys, bystander's keys
    append_sees_it: bool  # an O(1) check of the append refuses it
    unnamed: bool = False  # the session's id is gone with it: `sessions()` raises
    clear_first: bool = False  # a key of the wrong type: a save cannot write over it


# key index: 0 meta (hash), 1 msgs (list), 2 digests (list), 3 ids (set)
DAMAGES: dict[str, Damage] = {
    "meta-evicted": Damage(lambda c, k, o: c.delete(k[0]), True, unnamed=True),
    "meta-id-deleted": Damage(lambda c, k, o: c.hdel(k[0], "id"), True, unnamed=True),
    "meta-version-deleted": Damage(lambda c, k, o: c.hdel(k[0], "version"), True),
    "only-the-ids-left": Damage(lambda c, k, o: c.delete(k[0], k[1], k[2]), True, unnamed=True),
    "lists-reversed": Damage(lambda c, k, o: (_reverse(c, k[1]), _reverse(c, k[2])), True),
    "messages-reversed": Damage(lambda c, k, o: _reverse(c, k[1]), False),
    "first-two-swapped-in-both-lists": Damage(lambda c, k, o: (_swap(c, k[1], 0, 1), _swap(c, k[2], 0, 1)), False),
    "version-lowered": Damage(lambda c, k, o: c.hincrby(k[0], "version", -1), True),
    "version-raised": Damage(lambda c, k, o: c.hincrby(k[0], "version", 1), True),
    "version-zero": Damage(lambda c, k, o: c.hset(k[0], "version", "0"), True),
    "count-changed": Damage(lambda c, k, o: c.hincrby(k[0], "count", 1), True),
    "seal-changed": Damage(lambda c, k, o: c.hset(k[0], "seal", "0" * 40), True),
    "digest-added": Damage(lambda c, k, o: c.rpush(k[2], c.lindex(k[2], -1)), True),
    "digest-changed": Damage(lambda c, k, o: c.lset(k[2], 1, "0" * 40 + ":m2"), False),
    "last-digest-changed": Damage(lambda c, k, o: c.lset(k[2], -1, "0" * 40 + ":m4"), True),
    "digest-lost-its-id": Damage(lambda c, k, o: c.lset(k[2], 0, c.lindex(k[2], 0)[:40]), False),
    "digests-evicted": Damage(lambda c, k, o: c.delete(k[2]), True),
    "message-forged": Damage(lambda c, k, o: c.lset(k[1], 1, FORGED), False),
    "last-message-forged": Damage(lambda c, k, o: c.lset(k[1], -1, FORGED), False),
    "message-and-digest-added": Damage(
        lambda c, k, o: (c.rpush(k[1], FORGED), c.rpush(k[2], c.lindex(k[2], -1)), c.hincrby(k[0], "count", 1)), True
    ),
    "messages-evicted": Damage(lambda c, k, o: c.delete(k[1]), True),
    "ids-evicted": Damage(lambda c, k, o: c.delete(k[3]), True),
    "id-added": Damage(lambda c, k, o: c.sadd(k[3], "m9"), True),
    "ids-wrong-type": Damage(lambda c, k, o: (c.delete(k[3]), c.set(k[3], "x")), True, clear_first=True),
    "copied-from-another-session": Damage(lambda c, k, o: _copy_session(c, o, k), True),
}


@pytest.fixture
def redis_store(tmp_path: Path) -> Iterator[Store]:
    with fresh_store("redis", tmp_path, "mwdmg") as store:
        yield store


def _chat(store: Store) -> RedisChatMemory:
    memory = store.chat()
    assert isinstance(memory, RedisChatMemory)
    return memory


def _raw(client: redis.Redis, keys: list[str]) -> list[Any]:
    """Everything stored under `keys` (to show that a refused write changed nothing)."""
    return [client.dump(key) for key in keys]


@pytest.mark.parametrize("name", list(DAMAGES))
def test_a_damaged_session_is_detected_and_repaired(redis_store: Store, name: str) -> None:
    damage = DAMAGES[name]
    writer = _chat(redis_store)
    writer.save("victim", HISTORY)
    writer.save("bystander", OTHER)
    client = redis.Redis.from_url(redis_store.location)
    keys = writer._keys("victim")
    damage.do(client, keys, writer._keys("bystander"))
    damaged = _raw(client, keys)

    reader = _chat(redis_store)
    with pytest.raises(CorruptMemoryError, match="victim"):
        reader.load("victim")
    asyncio.run(_refused(_chat(redis_store), lambda memory: memory.aload("victim"), "victim"))
    if damage.append_sees_it:  # and the old messages never come back through an append
        for memory in (reader, writer):  # the writer remembers the history: that changes nothing
            with pytest.raises(CorruptMemoryError, match="victim"):
                memory.append("victim", [Message(role="user", content="never on a damaged history", id="new")])
        asyncio.run(_refused(_chat(redis_store), lambda m: m.aappend("victim", [Message(role="user")]), "victim"))
        assert _raw(client, keys) == damaged
    with pytest.raises(CorruptMemoryError, match="victim"):
        reader.load("victim")
    assert reader.load("bystander") == OTHER

    if damage.unnamed:  # its id is unknown, so it cannot be listed: the listing refuses, naming its keys
        tag = re.escape(keys[0].rsplit(":", 1)[0])
        with pytest.raises(CorruptMemoryError, match=tag):
            reader.sessions()
        asyncio.run(_refused(_chat(redis_store), lambda memory: memory.asessions(), tag))
    else:
        assert reader.sessions() == ["bystander", "victim"]

    if damage.clear_first:
        reader.clear("victim")
    repaired = [Message(role="user", content="repaired", id="m1"), HISTORY[1]]
    reader.save("victim", repaired)
    with _chat(redis_store) as fresh:
        assert fresh.load("victim") == repaired
        assert fresh.sessions() == ["bystander", "victim"]
        fresh.append("victim", [HISTORY[1], HISTORY[3]])  # ids stay unique: only m4 is new
        assert fresh.load("victim") == [*repaired, HISTORY[3]]
    client.close()
    for memory in (reader, writer):
        memory.close()


async def _refused(memory: RedisChatMemory, call: Callable[[RedisChatMemory], Any], pattern: str) -> None:
    """`call(memory)` through the async API raises CorruptMemoryError matching `pattern`; the memory is closed."""
    try:
        with pytest.raises(CorruptMemoryError, match=pattern):
            await call(memory)
    finally:
        await memory.aclose()


def test_a_save_with_a_version_never_writes_over_damage(redis_store: Store) -> None:
    """Only a plain save replaces a damaged history; one with `expected_version` refuses and writes nothing."""
    writer = _chat(redis_store)
    version = writer.save("victim", HISTORY)
    client = redis.Redis.from_url(redis_store.location)
    keys = writer._keys("victim")
    client.lset(keys[2], -1, "0" * 40 + ":m4")  # the O(1) checks of a write see this one
    damaged = _raw(client, keys)
    with pytest.raises(CorruptMemoryError, match="victim"):
        writer.save("victim", [*HISTORY, Message(role="user", content="five")], expected_version=version)
    assert _raw(client, keys) == damaged
    client.close()
    writer.close()


def test_listing_while_sessions_come_and_go_never_reports_damage(redis_store: Store) -> None:
    """`sessions()` confirms a session without its meta key atomically, so one being written, cleared or
    expiring at that moment is not reported as damaged."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn(worker: int) -> None:
        with _chat(redis_store) as memory, redis_store.chat(ttl=0.001) as expiring:  # expires 1 ms after a write
            i = 0
            while not stop.is_set():
                try:
                    session = f"w{worker}-{i % 7}"
                    memory.append(session, [Message(role="user", content="x", id=f"{i}")])
                    memory.clear(session)
                    expiring.append(f"e{worker}-{i % 5}", [Message(role="user", content="y", id=f"{i}")])
                except BaseException as error:
                    errors.append(error)
                    return
                i += 1

    workers = [threading.Thread(target=churn, args=(w,)) for w in range(2)]
    for worker in workers:
        worker.start()
    try:
        with _chat(redis_store) as lister:
            for _ in range(300):
                lister.sessions()
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
    assert not errors, errors
