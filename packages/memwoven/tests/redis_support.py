"""What the Redis test modules share: key cleanup, a private cluster, and the contract suites' hooks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from memwoven_test_support import redis_url, unique_name
from memwoven_test_support.redis_servers import redis_cluster


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[str]:
    """A private 3-master Redis Cluster on free loopback ports, for each test module that uses it (assign it to a
    module global of the same name)."""
    with redis_cluster(3) as url:
        yield url


@pytest.fixture
def redis_prefix() -> Iterator[tuple[str, str]]:
    """(URL, a unique key prefix) on the shared Redis; the prefix's keys are deleted afterwards (never FLUSH).
    Assign it to a module global of the same name, like `cluster_url`."""
    url, prefix = redis_url(), unique_name("mwtest")
    yield url, prefix
    delete_prefix(url, prefix)


def delete_prefix(url: str, prefix: str) -> None:
    """Delete a test's keys with SCAN + DEL (never FLUSH: the server is shared)."""
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


class RedisHooks:
    """`reopen` and `neighbour` for a contract suite of a Redis backend (put it first among the bases): other
    objects on the memory's server, made by `sibling`."""

    def url(self, memory: Any) -> str:
        """The URL of the server `memory` uses."""
        return str(memory._url)

    def sibling(self, memory: Any, suffix: str) -> Any:
        """A new object on `memory`'s server and storage, its prefix or collection name extended by `suffix`."""
        raise NotImplementedError

    def empty(self, memory: Any) -> None:
        """Remove what the tests stored through `memory`."""
        raise NotImplementedError

    def reopen(self, memory: Any) -> Any:
        return self.sibling(memory, "")

    @contextlib.contextmanager
    def neighbour(self, memory: Any) -> Iterator[Any]:
        with self.sibling(memory, "s") as neighbour:
            try:
                yield neighbour
            finally:
                self.empty(neighbour)
