from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from memweave.backends.redis import RedisChatMemory
from memweave.contracts import ChatMemory
from memweave.testing import ChatMemoryContract
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
