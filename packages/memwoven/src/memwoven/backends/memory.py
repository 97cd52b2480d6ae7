"""In-process backends: nothing persisted, everything exact. Useful for tests, notebooks and caches.

The chat and item memories never block, so their async twins call the sync methods directly (`_blocking = False`);
the vector memory's scans are CPU work, so its twins run them off the event loop in a worker thread, like any blocking
backend's (the contract's default twins).
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

import memwoven._clock as _clock
from memwoven._steps import async_twin
from memwoven.contracts import (
    ChatMemory,
    DocumentsIn,
    Filter,
    History,
    ItemKeys,
    ItemMemory,
    ItemOrder,
    ItemWrite,
    MessagesIn,
    Metric,
    Namespace,
    check_id,
    check_item_key,
    check_item_keys,
    check_item_writes,
    check_max_depth,
    check_namespace,
    check_order,
    check_page,
    check_version,
    namespace_matches,
    next_version,
)
from memwoven.errors import ConcurrentModificationError, InvalidInputError
from memwoven.filters import Predicate, compile_filter
from memwoven.history import message_ids, not_stored
from memwoven.models import (
    FrozenDict,
    Item,
    Message,
    ScoredDocument,
    VectorDocument,
    coerce_messages,
    coerce_messages_after,
)
from memwoven.vector_index import Scan, SearchQuery, VectorIndex, VectorMemoryBase

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


class _Stored(NamedTuple):
    item: Item
    deadline: float | None  # _clock.monotonic() the item expires at (None: never)


def _utc(wall_ms: int) -> datetime:
    return datetime.fromtimestamp(wall_ms / 1000, tz=timezone.utc)


class InMemoryItemMemory(ItemMemory):
    """Items in a dict of namespaces, each a dict of keys, behind one lock. Items are immutable values, so reads
    hand out the stored ones without copying.

    Expiry is measured on the process's monotonic clock (`_clock.monotonic`); `expires_at` reports the same
    moment on the wall clock. `list` and `count` scan the namespaces under the prefix, `namespaces` every one.
    """

    _blocking = False  # dicts behind a lock: the async twins call the sync methods directly

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._namespaces: dict[Namespace, dict[str, _Stored]] = {}

    def __repr__(self) -> str:
        return "InMemoryItemMemory()"

    def get(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool = False) -> Item | None:
        """The item, or None."""
        address = check_item_key(namespace, key)
        with self._lock:
            return self._get(*address, refresh_ttl, _clock.monotonic())

    def get_many(self, keys: ItemKeys, *, refresh_ttl: bool = False) -> builtins.list[Item | None]:
        """The items asked for, in order (None where absent)."""
        addresses = check_item_keys(keys)
        with self._lock:
            now = _clock.monotonic()
            return [self._get(namespace, key, refresh_ttl, now) for namespace, key in addresses]

    def put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        *,
        ttl: float | None = None,
        expected_version: int | None = None,
    ) -> int:
        """Create or replace the item; return its new version."""
        return self.put_many([ItemWrite(namespace, key, value, ttl, expected_version)])[0]

    def put_many(self, writes: Iterable[ItemWrite | tuple[Any, ...]]) -> builtins.list[int]:
        """Write every item, or none of them if an expected version does not match."""
        checked = check_item_writes(writes)
        with self._lock:
            now = _clock.monotonic()
            current = [self._live(namespace, key, now) for namespace, key, *_ in checked]
            for (namespace, key, _, _, expected), stored in zip(checked, current):
                self._check_version(namespace, key, stored, expected)
            wall = _clock.wall_ms()
            return [
                self._write(namespace, key, value, ttl, stored, now, wall)
                for (namespace, key, value, ttl, _), stored in zip(checked, current)
            ]

    def delete(self, namespace: Sequence[str], key: str, *, expected_version: int | None = None) -> bool:
        """Delete the item; return whether it existed."""
        address = check_item_key(namespace, key)
        expected = check_version(expected_version)
        with self._lock:
            stored = self._live(*address, _clock.monotonic())
            self._check_version(*address, stored, expected)
            self._remove(*address)
            return stored is not None

    def delete_many(self, keys: ItemKeys) -> int:
        """Delete the items; return how many existed."""
        addresses = set(check_item_keys(keys))
        with self._lock:
            now = _clock.monotonic()
            existed = sum(self._live(namespace, key, now) is not None for namespace, key in addresses)
            for namespace, key in addresses:
                self._remove(namespace, key)
            return existed

    def list(
        self,
        namespace_prefix: Sequence[str] = (),
        *,
        filter: Filter | None = None,
        order: ItemOrder = "asc",
        after: str | None = None,
        before: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> builtins.list[Item]:
        """The matching items, sorted by key (then namespace)."""
        prefix = check_namespace(namespace_prefix, "namespace prefix", prefix=True)
        predicate = compile_filter(filter) if filter is not None else None
        descending = check_order(order) == "desc"
        low = None if after is None else check_id(after, "after key")
        high = None if before is None else check_id(before, "before key")
        limit, offset = check_page(limit, offset)
        items = [
            item
            for item in self._matching(prefix, predicate)
            if (low is None or item.key > low) and (high is None or item.key < high)
        ]
        items.sort(key=lambda item: (item.key, item.namespace), reverse=descending)
        end = None if limit is None else offset + limit
        return items[offset:end]

    def count(self, namespace_prefix: Sequence[str] = (), *, filter: Filter | None = None) -> int:
        """How many items match."""
        prefix = check_namespace(namespace_prefix, "namespace prefix", prefix=True)
        predicate = compile_filter(filter) if filter is not None else None
        return len(self._matching(prefix, predicate))

    def namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> builtins.list[Namespace]:
        """The namespaces holding items, matched, cut and paged."""
        head = () if prefix is None else check_namespace(prefix, "namespace prefix", prefix=True)
        tail = () if suffix is None else check_namespace(suffix, "namespace suffix", prefix=True)
        depth = check_max_depth(max_depth)
        limit, offset = check_page(limit, offset)
        with self._lock:
            now = _clock.monotonic()
            found = {
                namespace[:depth]
                for namespace, items in self._namespaces.items()
                if namespace_matches(namespace, head, tail) and any(_alive(stored, now) for stored in items.values())
            }
        end = None if limit is None else offset + limit
        return sorted(found)[offset:end]

    def cleanup_expired(self) -> int:
        """Free the expired items; return how many."""
        with self._lock:
            now = _clock.monotonic()
            expired = [
                (namespace, key)
                for namespace, items in self._namespaces.items()
                for key, stored in items.items()
                if not _alive(stored, now)
            ]
            for namespace, key in expired:
                self._remove(namespace, key)
            return len(expired)

    def _matching(self, prefix: Namespace, predicate: Predicate | None) -> builtins.list[Item]:
        with self._lock:
            now = _clock.monotonic()
            candidates = [
                stored.item
                for namespace, items in self._namespaces.items()
                if namespace[: len(prefix)] == prefix
                for stored in items.values()
                if _alive(stored, now)
            ]
        return candidates if predicate is None else [item for item in candidates if predicate(item.value)]

    def _live(self, namespace: Namespace, key: str, now: float) -> _Stored | None:
        items = self._namespaces.get(namespace)
        stored = None if items is None else items.get(key)
        return stored if stored is not None and _alive(stored, now) else None

    def _get(self, namespace: Namespace, key: str, refresh: bool, now: float) -> Item | None:
        stored = self._live(namespace, key, now)
        if stored is None:
            return None
        ttl = stored.item.ttl
        if not refresh or ttl is None:
            return stored.item
        item = stored.item.model_copy(update={"expires_at": _utc(_clock.wall_ms() + round(ttl * 1000))})
        self._namespaces[namespace][key] = _Stored(item, now + ttl)
        return item

    @staticmethod
    def _check_version(namespace: Namespace, key: str, stored: _Stored | None, expected: int | None) -> None:
        version = 0 if stored is None else stored.item.version
        if expected is not None and expected != version:
            raise ConcurrentModificationError(
                f"item {key!r:.200} in {namespace!r:.200} is at version {version}, not {expected}; reload and retry"
            )

    def _write(
        self,
        namespace: Namespace,
        key: str,
        value: FrozenDict,
        ttl: float | None,
        stored: _Stored | None,
        now: float,
        wall: int,
    ) -> int:
        existing = self._namespaces.get(namespace, {}).get(key)  # expired or not: versions never repeat
        version = next_version(0 if existing is None else existing.item.version)
        updated = _utc(wall)
        item = Item.model_construct(
            namespace=namespace,
            key=key,
            value=value,
            version=version,
            created_at=updated if stored is None else stored.item.created_at,
            updated_at=updated,
            expires_at=None if ttl is None else _utc(wall + round(ttl * 1000)),
            ttl=ttl,
        )
        self._namespaces.setdefault(namespace, {})[key] = _Stored(item, None if ttl is None else now + ttl)
        return version

    def _remove(self, namespace: Namespace, key: str) -> None:
        items = self._namespaces.get(namespace)
        if items is not None and items.pop(key, None) is not None and not items:
            del self._namespaces[namespace]


def _alive(stored: _Stored, now: float) -> bool:
    return stored.deadline is None or now < stored.deadline
