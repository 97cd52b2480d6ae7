from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from memweave.backends.redis import RedisChatMemory
from memweave.contracts import ChatMemory
from memweave.testing import ChatMemoryContract, turn
from memweave_test_support import redis_url, unique_name


@pytest.fixture
def redis_prefix() -> Iterator[tuple[str, str]]:
    """A unique key prefix on the shared Redis; its keys are deleted afterwards (never FLUSH)."""
    url, prefix = redis_url(), unique_name("mwtest")
    yield url, prefix
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


class TestRedisChatMemory(ChatMemoryContract):
    @pytest.fixture
    def chat_memory(self, redis_prefix: tuple[str, str]) -> ChatMemory:
        url, prefix = redis_prefix
        return RedisChatMemory(url, prefix=prefix)

    def reopen(self, memory: ChatMemory) -> ChatMemory:
        assert isinstance(memory, RedisChatMemory)
        return RedisChatMemory(redis_url(), prefix=memory.prefix)

    def corrupt_session(self, memory: ChatMemory, session_id: str) -> None:
        assert isinstance(memory, RedisChatMemory)
        client = redis.Redis.from_url(redis_url())
        client.lset(memory._keys(session_id)[1], 0, b"{not json")
        client.close()


def test_a_stranger_object_saves_over_an_existing_session(redis_prefix: tuple[str, str]) -> None:
    url, prefix = redis_prefix
    with RedisChatMemory(url, prefix=prefix) as first, RedisChatMemory(url, prefix=prefix) as second:
        first.save("s", [turn(i) for i in range(5)])
        second.save("s", [turn(i) for i in range(3)] + [turn(9)])  # never loaded by `second`
        assert first.load("s") == [turn(0), turn(1), turn(2), turn(9)]
        first.append("s", [turn(10)])
        second.save("s", [*second.load("s"), turn(11)])
        assert [m.text for m in first.load("s")] == ["w-0", "w-1", "w-2", "w-9", "w-10", "w-11"]


def test_save_writes_only_the_changed_suffix(redis_prefix: tuple[str, str]) -> None:
    url, prefix = redis_prefix
    client = redis.Redis.from_url(url)
    with RedisChatMemory(url, prefix=prefix) as memory:
        memory.save("s", [turn(i) for i in range(50)])
        msgs_key = memory._keys("s")[1]
        # an equivalent encoding of message 0 that a rewrite would replace with the canonical one
        marker = b"  " + client.lindex(msgs_key, 0)
        client.lset(msgs_key, 0, marker)
        for fresh in (False, True):  # through the cache, and through the stored digests
            if fresh:
                memory._cache.forget("s")
            memory.save("s", [turn(i) for i in range(50 + fresh)] + [turn(99)])
            assert client.lindex(msgs_key, 0) == marker
        assert [m.text for m in memory.load("s")][-3:] == ["w-49", "w-50", "w-99"]
    client.close()


def test_ttl_expires_idle_sessions(redis_prefix: tuple[str, str]) -> None:
    url, prefix = redis_prefix
    with RedisChatMemory(url, prefix=prefix, ttl=60) as memory:
        memory.save("s", [turn(1)])
        client = redis.Redis.from_url(url)
        ttls = [client.pttl(key) for key in memory._keys("s")]
        assert all(0 < ttl <= 60_000 for ttl in ttls)
        client.close()
