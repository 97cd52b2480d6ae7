"""`LRUCache`: the one bounded, thread-safe least-recently-used map memwoven keeps recent sessions in.

The chat backends (`history.SnapshotCache`, `FileChatMemory`) and `EncryptedChatMemory` remember what they last
read or wrote of their most recent sessions in one of these; a cache is only ever a shortcut, so what it drops
costs time, never correctness.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

from memwoven.errors import InvalidInputError

__all__ = ["LRUCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """At most `size` entries, the least recently used (read or written) dropped first; `size` 0 keeps nothing.

    Every method holds the cache's lock, so one cache may be shared by threads.
    """

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidInputError(f"cache_size must be a non-negative int, got {size!r}")
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:  # not between a put's insert and its eviction
            return len(self._entries)

    def get(self, key: K) -> V | None:
        """The value remembered for `key` (now the most recently used), or None."""
        with self._lock:
            try:
                self._entries.move_to_end(key)
            except KeyError:
                return None
            return self._entries[key]

    def put(self, key: K, value: V) -> None:
        """Remember `value` for `key` as the most recently used, dropping the least recently used beyond `size`."""
        if self.size == 0:
            return
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def drop(self, key: K) -> None:
        """Forget `key` (nothing happens if it is not remembered)."""
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._entries.clear()
