"""In-process backends: nothing persisted, everything exact. Useful for tests, notebooks and caches.

The chat and item memories never block, so their async twins call the sync methods directly (`_blocking = False`);
the vector memory's scans are CPU work, so its twins run them off the event loop in a worker thread, like any blocking
backend's (the contract's default twins).
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from pydantic import BaseModel

import memwoven._clock as _clock
from memwoven._steps import Call, Steps, async_twin, no_io
from memwoven.backends._items import ttl_milliseconds
from memwoven.contracts import (
    ChatMemory,
    CheckedWrite,
    DocumentsIn,
    History,
    ItemAddress,
    ItemMemory,
    ItemQuery,
    MessagesIn,
    Metric,
    Namespace,
    check_expected,
    check_id,
    check_ttl,
    next_version,
)
from memwoven.errors import ConcurrentModificationError
from memwoven.history import encode_message, message_ids, not_stored
from memwoven.models import (
    Item,
    Message,
    ScoredDocument,
    VectorDocument,
    coerce_messages,
    coerce_messages_after,
)
from memwoven.vector_index import DocumentBatch, Scan, SearchQuery, VectorIndex, VectorMemoryBase

__all__ = ["InMemoryChatMemory", "InMemoryItemMemory", "InMemoryVectorMemory"]

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
        self.ttl = check_ttl(ttl)
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
        _require_utf8(new[same:])
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
            _require_utf8(added)
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


def _require_utf8(messages: Iterable[Message]) -> None:
    """Refuse (`InvalidInputError`) what no store can hold, as the others do: a message with no UTF-8 form."""
    for message in messages:
        encode_message(message)


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
        self._upsert(self._index.prepare(documents))

    def _store_batch(self, batch: DocumentBatch) -> Steps[None]:
        yield Call(self, "_upsert", (batch,))  # `astore_arrays` copies the rows in off the event loop

    def _upsert(self, batch: DocumentBatch) -> None:
        with self._lock:
            self._index.upsert(batch)

    _aupsert = async_twin(_upsert)

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


class _Stored(NamedTuple):
    item: Item
    deadline: float | None  # _clock.monotonic() the item expires at (None: never)


class InMemoryItemMemory(ItemMemory):
    """Items in a dict of namespaces, each a dict of keys, behind one lock. Items are immutable values, so reads
    hand out the stored ones without copying.

    Expiry is measured on the process's monotonic clock (`_clock.monotonic`); `expires_at` reports the same
    moment on the wall clock. `list` and `count` scan the namespaces under the prefix, `namespaces` every one.
    """

    _blocking = False  # dicts behind a lock: the async twins call the sync methods directly

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_namespace: dict[Namespace, dict[str, _Stored]] = {}

    def __repr__(self) -> str:
        return "InMemoryItemMemory()"

    @no_io
    def _read(self, addresses: Sequence[ItemAddress], refresh: bool) -> builtins.list[Item | None]:
        with self._lock:
            now = _clock.monotonic()
            return [self._found(namespace, key, refresh, now) for namespace, key in addresses]

    @no_io
    def _write(self, writes: Sequence[CheckedWrite]) -> builtins.list[int]:
        with self._lock:
            now = _clock.monotonic()
            current = [self._live(write.namespace, write.key, now) for write in writes]
            for write, stored in zip(writes, current):
                version = 0 if stored is None else stored.item.version
                check_expected(write.namespace, write.key, version, write.expected_version)
            wall = _clock.wall_ms()
            return [self._store(write, stored, now, wall) for write, stored in zip(writes, current)]

    @no_io
    def _delete_items(self, addresses: Sequence[ItemAddress], expected: int | None) -> int:
        with self._lock:
            now = _clock.monotonic()
            live = [self._live(namespace, key, now) for namespace, key in addresses]
            if expected is not None:
                check_expected(*addresses[0], 0 if live[0] is None else live[0].item.version, expected)
            for namespace, key in addresses:
                self._remove(namespace, key)
            return sum(stored is not None for stored in live)

    @no_io
    def _select(self, query: ItemQuery) -> builtins.list[Item]:
        prefix = query.prefix
        with self._lock:
            now = _clock.monotonic()
            candidates = [
                stored.item
                for namespace, items in self._by_namespace.items()
                if namespace[: len(prefix)] == prefix
                for stored in items.values()
                if _alive(stored, now)
            ]
        return query.answer(candidates)

    @no_io
    def _stored_namespaces(self, prefix: Namespace) -> builtins.list[Namespace]:
        with self._lock:
            now = _clock.monotonic()
            return [
                namespace
                for namespace, items in self._by_namespace.items()
                if namespace[: len(prefix)] == prefix and any(_alive(stored, now) for stored in items.values())
            ]

    @no_io
    def _expire(self) -> int:
        with self._lock:
            now = _clock.monotonic()
            expired = [
                (namespace, key)
                for namespace, items in self._by_namespace.items()
                for key, stored in items.items()
                if not _alive(stored, now)
            ]
            for namespace, key in expired:
                self._remove(namespace, key)
            return len(expired)

    def _live(self, namespace: Namespace, key: str, now: float) -> _Stored | None:
        items = self._by_namespace.get(namespace)
        stored = None if items is None else items.get(key)
        return stored if stored is not None and _alive(stored, now) else None

    def _found(self, namespace: Namespace, key: str, refresh: bool, now: float) -> Item | None:
        stored = self._live(namespace, key, now)
        if stored is None:
            return None
        ttl = stored.item.ttl
        if not refresh or ttl is None:
            return stored.item
        expires_at = _clock.utc(_clock.wall_ms() + ttl_milliseconds(ttl))
        item = BaseModel.model_copy(stored.item, update={"expires_at": expires_at})  # unvalidated: a UTC time
        self._by_namespace[namespace][key] = _Stored(item, now + ttl_milliseconds(ttl) / 1000)
        return item

    def _store(self, write: CheckedWrite, stored: _Stored | None, now: float, wall: int) -> int:
        namespace, key, value, ttl, _ = write
        existing = self._by_namespace.get(namespace, {}).get(key)
        version = next_version(0 if existing is None else existing.item.version)
        if existing is not None:  # IM3: updated_at grows with every write, even within one millisecond
            wall = max(wall, round(existing.item.updated_at.timestamp() * 1000) + 1)
        updated = _clock.utc(wall)
        item = Item.model_construct(
            namespace=namespace,
            key=key,
            value=value,
            version=version,
            created_at=updated if stored is None else stored.item.created_at,
            updated_at=updated,
            expires_at=None if ttl is None else _clock.utc(wall + ttl_milliseconds(ttl)),
            ttl=ttl,
        )
        self._by_namespace.setdefault(namespace, {})[key] = _Stored(
            item, None if ttl is None else now + ttl_milliseconds(ttl) / 1000
        )
        return version

    def _remove(self, namespace: Namespace, key: str) -> None:
        items = self._by_namespace.get(namespace)
        if items is not None and items.pop(key, None) is not None and not items:
            del self._by_namespace[namespace]


def _alive(stored: _Stored, now: float) -> bool:
    return stored.deadline is None or now < stored.deadline
