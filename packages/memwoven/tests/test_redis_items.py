"""The ItemMemory contract (IM1-IM11) and the reference-model state machine on Redis, standalone and Cluster, plus
what is particular to `RedisItemMemory`: its keys, damage, boundaries between prefixes and chunked listings."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import redis
import redis_support
from clock_support import Clock
from redis_support import RedisHooks, delete_prefix

import memwoven._clock as _clock
from memwoven import ItemWrite
from memwoven.backends import redis_items
from memwoven.backends.redis import RedisChatMemory
from memwoven.backends.redis_items import RedisItemMemory
from memwoven.contracts import ItemMemory
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError, InvalidInputError
from memwoven.testing import ItemMemoryContract, turn
from memwoven.urls import open_item_memory
from memwoven_test_support import redis_url, unique_name

redis_prefix = redis_support.redis_prefix  # a unique key prefix on the shared Redis, deleted afterwards


class RedisItemHooks(RedisHooks, ItemMemoryContract):
    """The item contract on Redis: other objects on the server, under the memory's prefix or one extending it;
    expiry measured on `memwoven._clock`, which the `clock` fixture moves."""

    def sibling(self, memory: RedisItemMemory, suffix: str) -> RedisItemMemory:
        return RedisItemMemory(self.url(memory), prefix=memory.prefix + suffix)

    def empty(self, memory: RedisItemMemory) -> None:
        memory._client.delete(*memory._keys)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)


class TestRedisItemMemory(RedisItemHooks):
    @pytest.fixture
    def item_memory(self, clock: Clock, redis_prefix: tuple[str, str]) -> ItemMemory:
        self.clock = clock
        url, prefix = redis_prefix
        return RedisItemMemory(url, prefix=prefix)

    def url(self, memory: RedisItemMemory) -> str:
        return redis_url()  # not the memory's URL, where a password would be redacted


cluster_url = redis_support.cluster_url  # a private cluster, for this module


class TestRedisClusterItemMemory(RedisItemHooks):
    # Each call crosses to the slot's node through the cluster client; 100 sequences per mode keep this class
    # near the standalone one's time (the standalone class runs the full 200).
    state_machine_examples = 100

    @pytest.fixture
    def item_memory(self, clock: Clock, cluster_url: str) -> ItemMemory:
        self.clock = clock
        return RedisItemMemory(cluster_url, prefix=unique_name("mwc"))


# What is particular to Redis ---------------------------------------------------------------------------------


@pytest.fixture
def memory(redis_prefix: tuple[str, str]) -> Iterator[RedisItemMemory]:
    url, prefix = redis_prefix
    with RedisItemMemory(url, prefix=prefix) as memory:
        yield memory


def test_memories_spread_over_the_cluster_and_keep_their_keys_in_one_slot(cluster_url: str) -> None:
    slots = set()
    for _ in range(12):
        with RedisItemMemory(cluster_url, prefix=unique_name("mwc")) as memory:
            versions = memory.put_many([(("a",), "k", {"v": 1}), (("b", "c"), "k", {"v": 2}, 60)])
            with pytest.raises(ConcurrentModificationError):  # all or nothing across namespaces, in one script
                memory.put_many([(("a",), "k", {"v": 3}), (("b", "c"), "k", {"v": 4}, None, versions[1] + 1)])
            assert [item.value["v"] for item in memory.list()] == [1, 2]
            key_slots = {memory._client.keyslot(key) for key in memory._keys}
            assert len(key_slots) == 1
            slots |= key_slots
    assert len({slot // 5462 for slot in slots}) > 1  # 16384 slots over 3 masters


@pytest.mark.parametrize(
    "damage",
    [
        "not-json",
        "not-an-object",
        "lone-surrogate",
        "bad-header",
        "version-0",
        "leading-zero",
        "no-record",
        "stray-member",
        "wrong-type",
        "no-expiry",
        "stray-expiry",
    ],
)
def test_damaged_items_raise_corrupt_memory_error(memory: RedisItemMemory, damage: str) -> None:
    memory.put(("n",), "k", {"v": 1}, ttl=None if damage == "stray-expiry" else 60)
    memory.put(("m",), "k", {"v": 2})
    client, (data, index, expiry, _) = memory._client, memory._keys
    member = redis_items._member(("n",), "k")
    version, rest = client.hget(data, member).split(b",", 1)
    if damage == "not-json":
        client.hset(data, member, client.hget(data, member)[:-1])
    elif damage == "not-an-object":
        client.hset(data, member, client.hget(data, member).rsplit(b",", 1)[0] + b",[1]")
    elif damage == "lone-surrogate":  # escaped: json reads it, no write stores it
        client.hset(data, member, client.hget(data, member).rsplit(b",", 1)[0] + b',{"v":"\\ud800"}')
    elif damage == "bad-header":
        client.hset(data, member, b"x" + rest)
    elif damage == "version-0":  # no write leaves it: never taken for an absent item
        client.hset(data, member, b"0," + rest)
    elif damage == "leading-zero":  # read as the version, where compare-and-set refuses it
        client.hset(data, member, b"0" + version + b"," + rest)
    elif damage == "no-record":
        client.hdel(data, member)
    elif damage == "stray-member":
        client.zadd(index, {b"n\x01k": 0})  # no NUL between the namespace and the key
    elif damage == "no-expiry":  # the item would read as never expiring
        client.zrem(expiry, member)
    elif damage == "stray-expiry":  # the item would read as expiring without a ttl
        client.zadd(expiry, {member: time.time_ns() // 1_000_000 + 60_000})
    else:
        client.delete(data)
        client.set(data, b"not a hash")
    with pytest.raises(CorruptMemoryError, match=r"item memory|item 'k'"):
        memory.list()
    if damage == "stray-member":
        with pytest.raises(CorruptMemoryError):
            memory.namespaces()
        return
    for refresh in (False, True):  # a damaged item is never read as absent, nor repaired by a refresh
        with pytest.raises(CorruptMemoryError, match="item"):
            memory.get(("n",), "k", refresh_ttl=refresh)
    if damage in ("bad-header", "version-0", "leading-zero"):
        for expected in (0, int(version)):
            with pytest.raises(CorruptMemoryError, match="expected_version"):
                memory.put(("n",), "k", {"v": 3}, expected_version=expected)
            with pytest.raises(CorruptMemoryError, match="expected_version"):
                memory.delete(("n",), "k", expected_version=expected)
    if damage != "wrong-type":  # a plain put replaces a damaged item, with a version above every one given out
        assert memory.put(("n",), "k", {"v": 3}) > int(version)
        assert [item.value["v"] for item in memory.list()] == [2, 3]


@pytest.mark.parametrize("damage", ["no-index", "no-record", "index-score"])
def test_listings_counts_and_namespaces_notice_a_lost_key_or_record(memory: RedisItemMemory, damage: str) -> None:
    """Listings walk the index: without it (evicted, deleted) they read an empty memory, and a count without the
    records read passed over a lost one, and a member scored other than 0 hid namespaces. The data hash and the
    index hold as many members, always, and every member is scored 0."""
    memory.put(("u", "1"), "a", {"v": 1})
    memory.put(("u", "1"), "b", {"v": 2})
    data, index, _, _ = memory._keys
    if damage == "no-index":
        memory._client.delete(index)
    elif damage == "no-record":
        memory._client.hdel(data, redis_items._member(("u", "1"), "a"))
    else:
        memory._client.zadd(index, {redis_items._member(("u", "1"), "a"): 5})
    for listing in (memory.list, memory.count, memory.namespaces, lambda: memory.count(("u",))):
        with pytest.raises(CorruptMemoryError, match="different numbers of items"):
            listing()


def test_prefixes_that_start_one_another_never_meet(redis_prefix: tuple[str, str]) -> None:
    url, prefix = redis_prefix
    names = [prefix, prefix + "b", prefix + ":b", prefix + ":items", prefix + "-"]
    memories = [RedisItemMemory(url, prefix=name) for name in names]
    chat = RedisChatMemory(url, prefix=prefix + ":items")  # its SCAN pattern, <prefix>:items:{*}:*, meets our keys
    try:
        for i, memory in enumerate(memories):
            memory.put(("a",), "k", {"i": i}, ttl=60)
            memory.put(("a", str(i)), "k", {"i": i})
        for i, memory in enumerate(memories):
            assert [item.value["i"] for item in memory.list()] == [i, i]
            assert memory.namespaces() == [("a",), ("a", str(i))]
            assert memory.get(("a", str(i + 1)), "k") is None
        assert chat.sessions() == []
        chat.save("s", [turn(1)])
        assert memories[0].delete_many([(("a",), "k"), (("a", "0"), "k"), (("a", "1"), "k")]) == 2
        assert memories[0].cleanup_expired() == 0
        assert [memory.count() for memory in memories] == [0, 2, 2, 2, 2]
        assert chat.sessions() == ["s"]
    finally:
        for memory in memories:
            memory.close()
        chat.close()
        for name in names[1:]:
            delete_prefix(url, name)


def test_bad_prefixes_are_refused_before_connecting() -> None:
    for prefix in ("", "a{b}", "a*", "a b", "x" * 65, "a\n"):
        with pytest.raises(InvalidInputError):
            RedisItemMemory("redis://127.0.0.1:1/0", prefix=prefix)


def test_listings_and_namespaces_walk_the_index_in_chunks(
    memory: RedisItemMemory, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_items, "_CHUNK", 3)
    monkeypatch.setattr(redis_items, "_NAMESPACES_PER_CALL", 2)
    memory.put_many([ItemWrite(("a", f"n{i % 4}"), f"k{i:02}", {"i": i}) for i in range(20)])
    memory.put_many([ItemWrite(("a", "n9"), f"k{i}", {"i": i}, ttl=1) for i in range(7)])  # expire: skipped
    memory.put_many([ItemWrite(("ab",), "k", {"i": -1}), ItemWrite(("a\x01",), "k", {"i": -2})])
    clock.advance(2)
    assert [item.value["i"] for item in memory.list(("a",))] == list(range(20))
    assert memory.count(("a",)) == 20
    assert memory.count(("a",), filter={"i": {"$gte": 10}}) == 10
    assert memory.count(("a",)) == len(memory.list(("a",), after="k03", before="k19")) + 5
    assert memory.namespaces(prefix=("a",)) == [("a", f"n{i}") for i in range(4)]
    assert memory.namespaces() == [("a", f"n{i}") for i in range(4)] + [("a\x01",), ("ab",)]
    assert memory.cleanup_expired() == 7
    assert memory.cleanup_expired() == 0
    assert memory._client.zcard(memory._keys[1]) == 22


def test_the_async_twins_work_from_one_event_loop_after_another(memory: RedisItemMemory) -> None:
    """The async twins run on each event loop's own client, one loop after another."""
    memory.put(("n",), "k", {"v": 1})

    async def read() -> int:
        item = await memory.aget(("n",), "k")
        assert item is not None
        return int(item.value["v"])

    assert asyncio.run(read()) == asyncio.run(read()) == 1
    assert repr(memory).startswith("RedisItemMemory(")
    assert memory.prefix in repr(memory)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="a cancellation redis-py swallowed is seen by Task.cancelling")
def test_a_cancelled_call_raises_cancelled_error_even_if_redis_py_returns_the_reply(memory: RedisItemMemory) -> None:
    """redis-py's asyncio client may catch a cancellation that arrives while it waits for the reply and return the
    reply: a timeout around a write (`asyncio.wait_for`, a LangGraph run cancelled) was then lost."""
    memory.put(("n",), "k", {"v": 0})

    async def cancel_each_point() -> list[str]:
        outcomes = []
        for turns in range(8):
            task = asyncio.ensure_future(memory.aput(("n",), "k", {"v": turns}))
            for _ in range(turns):
                await asyncio.sleep(0)
            if not task.cancel():
                await task  # done already: nothing to cancel
                continue
            try:
                await task
            except asyncio.CancelledError:
                outcomes.append("cancelled")
            else:
                outcomes.append(f"returned after {turns} turns")
        return outcomes

    outcomes = asyncio.run(cancel_each_point())
    assert outcomes
    assert set(outcomes) == {"cancelled"}, outcomes
    assert memory.get(("n",), "k") is not None  # the object still works


def test_a_ttl_under_half_a_millisecond_lives_one_millisecond(
    memory: RedisItemMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time_ns() // 1_000_000
    monkeypatch.setattr(_clock, "wall_ms", lambda: now)  # time stands still: rounded to 0 ms it expired at once
    memory.put(("n",), "k", {"v": 1}, ttl=1e-6)
    for refresh in (False, True):
        item = memory.get(("n",), "k", refresh_ttl=refresh)
        assert item is not None
        assert (item.ttl, item.expires_at) == (1e-6, _clock.utc(now + 1))
    monkeypatch.setattr(_clock, "wall_ms", lambda: now + 1)
    assert memory.get(("n",), "k") is None


def test_refresh_moves_only_the_expiry(memory: RedisItemMemory, clock: Clock) -> None:
    version = memory.put(("n",), "k", {"v": 1}, ttl=10)
    clock.advance(6)
    item = memory.get(("n",), "k", refresh_ttl=True)
    assert item is not None
    assert (item.version, item.ttl) == (version, 10)
    score = memory._client.zscore(memory._keys[2], redis_items._member(("n",), "k"))
    assert item.expires_at is not None
    assert score == item.expires_at.timestamp() * 1000
    clock.advance(6)
    assert memory.get(("n",), "k") is not None
    client = redis.Redis.from_url(redis_url())
    assert client.exists(*memory._keys) == 4  # data, index, expiry, clock
    client.close()


# A process running read-modify-write loops: each success bumps the counter and logs itself (expected version 0)
# in one put_many, so a batch that lost the race must leave no log entry behind.
_WRITER = """
import os, sys
from memwoven.backends.redis_items import RedisItemMemory
from memwoven.errors import ConcurrentModificationError

url, prefix, writes = sys.argv[1], sys.argv[2], int(sys.argv[3])
with RedisItemMemory(url, prefix=prefix) as memory:
    done = 0
    while done < writes:
        item = memory.get(("counter",), "n")
        count, version = (item.value["n"], item.version) if item else (0, 0)
        try:
            memory.put_many([
                (("counter",), "n", {"n": count + 1}, None, version),
                (("log", str(os.getpid())), str(count + 1), {}, None, 0),
            ])
        except ConcurrentModificationError:
            continue
        done += 1
"""


def test_compare_and_set_from_8_processes_loses_no_update(redis_prefix: tuple[str, str]) -> None:
    """On standalone Redis only: the same script decides on a cluster (whose threaded IM4 test runs above), and
    8 interpreters starting at once are the slow part here."""
    url, prefix = redis_prefix
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, url, prefix, "15"]) for _ in range(8)]
    assert [writer.wait(timeout=300) for writer in writers] == [0] * 8
    with RedisItemMemory(url, prefix=prefix) as memory:
        counter = memory.get(("counter",), "n")
        assert counter is not None
        assert counter.value["n"] == 120
        logged = memory.list(("log",))
        assert sorted(int(item.key) for item in logged) == list(range(1, 121))  # every count logged exactly once
        assert len(memory.namespaces(prefix=("log",))) == 8


def test_open_item_memory_opens_redis_urls_with_their_prefix(redis_prefix: tuple[str, str]) -> None:
    url, prefix = redis_prefix
    with open_item_memory(f"{url}?prefix={prefix}") as memory, RedisItemMemory(url, prefix=prefix) as same:
        assert isinstance(memory, RedisItemMemory)
        memory.put(("n",), "k", {"v": 1})
        assert [item.value for item in same.list()] == [{"v": 1}]
    with pytest.raises(InvalidInputError):
        open_item_memory(f"{url}?prefix=a{{b}}")


@pytest.mark.parametrize("decode_responses", [False, True])
def test_clients_you_built_serve_sync_and_async(redis_prefix: tuple[str, str], decode_responses: bool) -> None:
    url, prefix = redis_prefix
    client = redis.Redis.from_url(url, decode_responses=decode_responses)
    with RedisItemMemory(client, prefix=prefix) as memory:
        memory.put_many([(("a", "é"), "k\x01", {"v": "ü"}, 60), (("a",), "k", {"v": 1})])
        assert [(item.namespace, item.key) for item in memory.list(("a",))] == [(("a",), "k"), (("a", "é"), "k\x01")]
        assert memory.namespaces() == [("a",), ("a", "é")]
        assert memory.count(("a", "é")) == 1

        async def read() -> list[str]:
            return [item.key for item in await memory.alist(order="desc")]

        assert asyncio.run(read()) == ["k\x01", "k"]  # the sync client in a worker thread: no async one given
