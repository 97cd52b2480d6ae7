"""In-process backends: nothing persisted, everything exact. Useful for tests, notebooks and caches.

Their operations never block on I/O, so the async twins call the sync bodies directly instead of using a thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from memweave.contracts import (
    ChatMemory,
    DocumentsIn,
    Filter,
    History,
    MessagesIn,
    Metric,
    VectorMemory,
    check_id,
    next_version,
)
from memweave.errors import ConcurrentModificationError
from memweave.models import Message, ScoredDocument, VectorDocument, coerce_messages
from memweave.vector_index import VectorIndex

__all__ = ["InMemoryChatMemory", "InMemoryVectorMemory"]


class InMemoryChatMemory(ChatMemory):
    """Chat histories in a dict. Messages are immutable, so snapshots share them without copying."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, tuple[tuple[Message, ...], int]] = {}

    def __repr__(self) -> str:
        return "InMemoryChatMemory()"

    def load_versioned(self, session_id: str) -> History:
        """Return the session's messages and version."""
        messages, version = self._sessions.get(check_id(session_id), ((), 0))
        return History(list(messages), version)

    def save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        """Replace the session's history."""
        check_id(session_id)
        new = tuple(coerce_messages(messages))
        with self._lock:
            current = self._current_version(session_id, expected_version)
            if not new:
                self._sessions.pop(session_id, None)
                return 0
            version = next_version(current)
            self._sessions[session_id] = (new, version)
            return version

    def append(self, session_id: str, messages: MessagesIn) -> int:
        """Append to the session's history."""
        check_id(session_id)
        added = tuple(coerce_messages(messages))
        with self._lock:
            old, current = self._sessions.get(session_id, ((), 0))
            if not added:
                return current
            version = next_version(current)
            self._sessions[session_id] = (old + added, version)
            return version

    def sessions(self) -> list[str]:
        """The stored session ids, sorted."""
        return sorted(self._sessions)

    def _current_version(self, session_id: str, expected_version: int | None) -> int:
        current = self._sessions.get(session_id, ((), 0))[1]
        if expected_version is not None and expected_version != current:
            raise ConcurrentModificationError(
                f"session {session_id!r} is at version {current}, not {expected_version}; reload and retry"
            )
        return current

    async def aload_versioned(self, session_id: str) -> History:
        """Async twin of `load_versioned` (no I/O, so no thread)."""
        return self.load_versioned(session_id)

    async def asave(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        """Async twin of `save`."""
        return self.save(session_id, messages, expected_version=expected_version)

    async def aappend(self, session_id: str, messages: MessagesIn) -> int:
        """Async twin of `append`."""
        return self.append(session_id, messages)

    async def asessions(self) -> list[str]:
        """Async twin of `sessions`."""
        return self.sessions()

    async def aclose(self) -> None:
        """Nothing to release."""


class InMemoryVectorMemory(VectorMemory):
    """A `VectorIndex` behind a lock: one contiguous float32 matrix, exact top-k."""

    def __init__(self, dimension: int | None = None, *, metric: Metric = "cosine") -> None:
        self._index = VectorIndex(dimension, metric)
        self.metric = self._index.metric
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"InMemoryVectorMemory(dimension={self.dimension}, metric={self.metric!r})"

    @property
    def dimension(self) -> int | None:
        """The embedding dimension (None until the first store)."""
        return self._index.dimension

    def store(self, documents: DocumentsIn) -> None:
        """Insert or replace documents by id."""
        with self._lock:
            self._index.upsert(self._index.prepare(documents))

    def search(
        self,
        embedding: Sequence[float],
        *,
        top_k: int = 4,
        threshold: float | None = None,
        filter: Filter | None = None,
    ) -> list[ScoredDocument]:
        """Exact top-k search."""
        with self._lock:
            return self._index.search(embedding, top_k=top_k, threshold=threshold, filter=filter)

    def get(self, ids: Iterable[str]) -> list[VectorDocument]:
        """Documents by id, in the order asked."""
        with self._lock:
            return self._index.get(ids)

    def delete(self, ids: Iterable[str]) -> None:
        """Delete documents by id."""
        with self._lock:
            self._index.remove(ids)

    def count(self) -> int:
        """The number of documents."""
        return len(self._index)

    def clear(self) -> None:
        """Delete every document."""
        with self._lock:
            self._index.clear()

    async def astore(self, documents: DocumentsIn) -> None:
        """Async twin of `store`."""
        self.store(documents)

    async def asearch(
        self,
        embedding: Sequence[float],
        *,
        top_k: int = 4,
        threshold: float | None = None,
        filter: Filter | None = None,
    ) -> list[ScoredDocument]:
        """Async twin of `search`."""
        return self.search(embedding, top_k=top_k, threshold=threshold, filter=filter)

    async def aget(self, ids: Iterable[str]) -> list[VectorDocument]:
        """Async twin of `get`."""
        return self.get(ids)

    async def adelete(self, ids: Iterable[str]) -> None:
        """Async twin of `delete`."""
        self.delete(ids)

    async def acount(self) -> int:
        """Async twin of `count`."""
        return self.count()

    async def aclear(self) -> None:
        """Async twin of `clear`."""
        self.clear()

    async def aclose(self) -> None:
        """Nothing to release."""
