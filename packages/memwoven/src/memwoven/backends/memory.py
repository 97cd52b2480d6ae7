"""In-process backends: nothing persisted, everything exact. Useful for tests, notebooks and caches.

The chat memory never blocks, so its async twins call the sync methods directly (`_blocking = False`); the vector
memory's scans are CPU work, so its twins run them off the event loop in a worker thread, like any blocking
backend's (the contract's default twins).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from memwoven import _clock
from memwoven._steps import async_twin
from memwoven.contracts import ChatMemory, DocumentsIn, History, MessagesIn, Metric, check_id, next_version
from memwoven.errors import ConcurrentModificationError, InvalidInputError
from memwoven.history import message_ids, not_stored
from memwoven.models import Message, ScoredDocument, VectorDocument, coerce_messages, coerce_messages_after
from memwoven.vector_index import Scan, SearchQuery, VectorIndex, VectorMemoryBase

__all__ = ["InMemoryChatMemory", "InMemoryVectorMemory"]

_Entry = tuple[list[Message], int, int, set[str]]  # (buffer, count, version, the ids of buffer[:count])
_EMPTY: _Entry = ([], 0, 0, set())  # an absent session; its buffer and ids are never extended


class InMemoryChatMemory(ChatMemory):
    """Chat histories in a dict. Messages are immutable, so snapshots share them without copying.

    A session is stored as (buffer, count, version, ids): its history is ``buffer[:count]``. A buffer only ever
    grows (a save stores a new one), so an append extends it in place, in O(added), while a reader holding the
    older count still sees exactly its own history. `ids`, the set of its message ids (CM10), grows the same way.

    With `ttl` (seconds) a session expires when it has not been written for that long (every write resets it):
    it then reads as absent, and `cleanup_expired()` frees it.
    """

    _blocking = False  # a dict behind a lock: the async twins call the sync methods directly

    def __init__(self, *, ttl: float | None = None) -> None:
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0):
            raise InvalidInputError(f"ttl must be a positive number of seconds, got {ttl!r}")
        self.ttl = ttl
        self._lock = threading.Lock()
        self._sessions: dict[str, _Entry] = {}
        self._deadlines: dict[str, float] = {}  # with a ttl: session id -> _clock.monotonic() it expires at

    def __repr__(self) -> str:
        return "InMemoryChatMemory()" if self.ttl is None else f"InMemoryChatMemory(ttl={self.ttl})"

    def load_versioned(self, session_id: str) -> History:
        """Return the session's messages and version."""
        buffer, count, version, _ = self._live(check_id(session_id))
        return History(buffer[:count], version)

    def load(self, session_id: str) -> list[Message]:
        """Return a snapshot of the session's messages, in saved order ([] for an unknown session)."""
        # The contract's default runs through the step engine, which costs as much again as this read (~1.5 µs);
        # its `aload` (through `aload_versioned`) stays.
        return self.load_versioned(session_id).messages

    def save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        """Replace the session's history."""
        check_id(session_id)
        known = self._sessions.get(session_id, _EMPTY)
        new, same = coerce_messages_after(messages, known[0])
        with self._lock:
            current = self._current_version(session_id, expected_version)
            if not new:
                self._sessions.pop(session_id, None)
                self._deadlines.pop(session_id, None)
                return 0
            entry = self._live(session_id)
            if entry is known and same == known[1] and entry[1]:  # the stored history, then more: O(added)
                ids = entry[3]
                ids.update(message_ids(new[same:], already=ids))
            else:
                ids = set(message_ids(new))
            return self._store(session_id, new, len(new), next_version(current), ids)

    def append(self, session_id: str, messages: MessagesIn) -> int:
        """Append to the session's history."""
        check_id(session_id)
        batch = coerce_messages(messages)
        message_ids(batch)  # refused before anything else
        with self._lock:
            buffer, count, current, ids = self._live(session_id)
            added = not_stored(batch, ids)
            if not added:
                return current
            if not count:  # absent or expired: a new buffer and id set (never the shared empty ones)
                buffer, ids = [], set()
            buffer.extend(added)  # the latest entry's buffer holds exactly its count: older readers keep theirs
            ids.update(message.id for message in added if message.id is not None)
            return self._store(session_id, buffer, len(buffer), next_version(current), ids)

    def sessions(self) -> list[str]:
        """The stored session ids, sorted."""
        if self.ttl is None:
            return sorted(self._sessions)
        return sorted(session_id for session_id in list(self._sessions) if self._live(session_id)[2])

    def cleanup_expired(self) -> int:
        """Free the sessions whose TTL ran out (they already read as absent); return how many."""
        with self._lock:
            now = _clock.monotonic()
            expired = [session_id for session_id, deadline in self._deadlines.items() if deadline <= now]
            for session_id in expired:
                del self._sessions[session_id], self._deadlines[session_id]
            return len(expired)

    def _live(self, session_id: str) -> _Entry:
        """The session's (buffer, count, version, ids), or an empty session if it expired."""
        if self.ttl is not None and self._deadlines.get(session_id, float("inf")) <= _clock.monotonic():
            return _EMPTY
        return self._sessions.get(session_id, _EMPTY)

    def _store(self, session_id: str, buffer: list[Message], count: int, version: int, ids: set[str]) -> int:
        self._sessions[session_id] = (buffer, count, version, ids)
        if self.ttl is not None:
            self._deadlines[session_id] = _clock.monotonic() + self.ttl
        return version

    def _current_version(self, session_id: str, expected_version: int | None) -> int:
        current = self._live(session_id)[2]
        if expected_version is not None and expected_version != current:
            raise ConcurrentModificationError(
                f"session {session_id!r} is at version {current}, not {expected_version}; reload and retry"
            )
        return current

    acleanup_expired = async_twin(cleanup_expired)  # called directly: `_blocking` is False


class InMemoryVectorMemory(VectorMemoryBase):
    """A `VectorIndex` behind a lock: one contiguous float32 matrix, exact top-k.

    ``scan="bfloat16"`` (needs `memwoven[simd]`) keeps a half-size bfloat16 copy of the vectors that each search
    reads first, then scores only the rows that could make the top k in float32: the same results for about half
    the bytes read per search, at 1.5x the memory.
    """

    def __init__(self, *, dimension: int | None = None, metric: Metric = "cosine", scan: Scan = "float32") -> None:
        self._index = VectorIndex(dimension, metric, scan=scan)
        self.metric = self._index.metric
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        scan = "" if self._index.scan == "float32" else f", scan={self._index.scan!r}"
        return f"InMemoryVectorMemory(dimension={self.dimension}, metric={self.metric!r}{scan})"

    @property
    def dimension(self) -> int | None:
        """The embedding dimension (None until the first store)."""
        return self._index.dimension

    def store(self, documents: DocumentsIn) -> None:
        """Insert or replace documents by id."""
        with self._lock:
            self._index.upsert(self._index.prepare(documents))

    def _query_dimension(self) -> int | None:
        return self._index.dimension

    def _scan(self, query: SearchQuery) -> list[ScoredDocument]:
        """Exact top-k search."""
        with self._lock:
            return self._index.query(query)

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

    def ids(self) -> list[str]:
        """The ids of every document, sorted."""
        with self._lock:
            return sorted(self._index.ids)
