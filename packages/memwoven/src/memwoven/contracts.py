"""The storage contracts, `ChatMemory`, `VectorMemory` and `ItemMemory`, and the validation every backend shares.

A backend implements the sync methods marked abstract. The async twins default to running the sync method off
the event loop (in a worker thread), or directly for a backend whose methods never block (`_blocking = False`);
backends whose driver is natively async override them. The numbered
invariants (CM1-CM10, VM1-VM8, IM1-IM11) are documented in docs/contracts.md and tested by `memwoven.testing`.
"""

from __future__ import annotations

import builtins
import logging
import random
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, TypedDict, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from typing_extensions import Unpack

from memwoven._steps import Call, Invoke, Runner, Sleep, Steps, arun, async_twin, run, twins
from memwoven.errors import ConcurrentModificationError, InvalidInputError
from memwoven.filters import Predicate, compile_filter
from memwoven.models import FrozenDict, Item, Message, ScoredDocument, VectorDocument, coerce_item_value, thaw

__all__ = [
    "MAX_TTL",
    "WILDCARD",
    "ChatMemory",
    "ChatSession",
    "CheckedWrite",
    "CollectionInfo",
    "History",
    "ItemAddress",
    "ItemMemory",
    "ItemOrder",
    "ItemQuery",
    "ItemWrite",
    "ListOptions",
    "Metric",
    "Namespace",
    "NamespaceQuery",
    "PlainItem",
    "SupportsExpiry",
    "VectorMemory",
    "check_collection",
    "check_expected",
    "check_id",
    "check_ids",
    "check_item_key",
    "check_item_keys",
    "check_item_value",
    "check_namespace",
    "check_page",
    "check_ttl",
    "cleanup_expired_steps",
    "compare_and_set",
    "is_collection_name",
    "namespace_matches",
    "next_version",
    "page_of",
]

Metric = Literal["cosine", "dot"]
MessagesIn = Iterable[Message | Mapping[str, Any]]
DocumentsIn = Iterable[VectorDocument | Mapping[str, Any]]
Filter = Mapping[str, Any]

MAX_ID_BYTES = 65_536
READ_CHUNK = 1000  # documents `VectorMemory.documents` reads at once
OPTIMISTIC_TRIES = 2  # conflicts after which a backend with a write lock runs `update` under it
_T = TypeVar("_T")
logger = logging.getLogger("memwoven.update")
_Self = TypeVar("_Self", bound="_Closable")


def check_id(value: object, what: str = "session id") -> str:
    """Return `value` if it is a usable id: a non-empty string, valid UTF-8, no NUL, at most 64 KiB."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidInputError(f"{what} cannot be empty")
    if "\x00" in value:
        raise InvalidInputError(f"{what} cannot contain NUL characters")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} is not valid Unicode (it contains a lone surrogate)") from None
    if size > MAX_ID_BYTES:
        raise InvalidInputError(f"{what} is {size} bytes long; the limit is {MAX_ID_BYTES}")
    return value


_COLLECTION_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def is_collection_name(value: object) -> bool:
    """Whether `value` is a usable vector collection name (the one rule of every backend and URL)."""
    return isinstance(value, str) and _COLLECTION_NAME.fullmatch(value) is not None


def check_collection(value: object) -> str:
    """Return `value` if it is a collection name: 1-100 letters, digits, '_', '.', '-', not starting with '.' or
    '-' (a file name, a Redis key part and a Qdrant collection alike)."""
    if not is_collection_name(value):
        raise InvalidInputError(
            f"collection names are 1-100 letters, digits, '_', '.' and '-' (not first), got {value!r:.120}"
        )
    return value  # type: ignore[return-value]


def check_ids(ids: Iterable[str], what: str = "document id") -> list[str]:
    """Validate a collection of ids (a lone string is refused: it would iterate as characters)."""
    if isinstance(ids, (str, bytes)):
        raise InvalidInputError(f"expected a list of {what}s, got a single {type(ids).__name__}")
    values = list(ids)
    if _plain_ids(values):
        return values
    return [check_id(value, what) for value in values]


def _plain_ids(values: list[Any]) -> bool:
    """Whether every value passes `check_id`, tested over all of them at once (a million ids in a few tens of
    milliseconds); False when any may not, for `check_id` to name the culprit."""
    try:
        joined = "".join(values)  # a TypeError unless every value is a str
    except TypeError:
        return False
    if not values or "\x00" in joined or not all(values) or max(map(len, values)) * 4 > MAX_ID_BYTES:
        return not values
    if not joined.isascii():
        try:
            joined.encode("utf-8")
        except UnicodeEncodeError:
            return False
    return True


def _backoff(attempt: int) -> float:
    """Seconds to wait after the `attempt`-th conflict of `update`: random, growing, capped at 0.2 s.

    Without it, writers that keep colliding retry in lockstep and some run out of retries.
    """
    return random.uniform(0, min(0.2, 0.001 * 2**attempt))  # noqa: S311 - jitter, not a secret


def compare_and_set(attempt: Callable[[], Steps[_T]], what: str, retries: int = 16) -> Steps[_T]:
    """Run `attempt()` (reads, then compare-and-set writes) until none of its writes conflicts: after a
    `ConcurrentModificationError` it pauses `_backoff` and starts again from fresh reads; after `retries` conflicts,
    `ConcurrentModificationError` saying `what` kept changing."""
    for tried in range(retries):
        try:
            return (yield from attempt())
        except ConcurrentModificationError:
            yield Sleep(_backoff(tried))
    raise ConcurrentModificationError(f"{what} kept changing; gave up after {retries} tries")


_clock_lock = threading.Lock()
_last_tick = 0  # the last reading of this process's version clock


def next_version(current: int) -> int:
    """The version a session or item gets on its next write: above `current`, from this process's version clock.

    Versions are time-based so that a session cleared and re-created never reuses an old version number (no
    ABA: a writer holding a version from before the clear cannot overwrite the new history). The clock is the
    wall clock in nanoseconds, moved on by one where it would not move (coarse, frozen in a test, stepped back), so
    it never repeats within a process. Only its own readings are remembered: a stored version far above the clock
    (another process's, or a test's near the limit) raises that session's or item's next version alone.
    """
    global _last_tick
    with _clock_lock:
        _last_tick = max(time.time_ns(), _last_tick + 1)
        return max(current + 1, _last_tick)


class History(NamedTuple):
    """A session's messages together with the version they were read at (0 for an unknown session)."""

    messages: list[Message]
    version: int


class CollectionInfo(NamedTuple):
    """A stored vector collection, as listed by `memwoven.urls.vector_collections`: its name, metric and dimension
    (None until its first store fixes it)."""

    name: str
    metric: Metric
    dimension: int | None


class _Closable(Runner):
    """Close and context-manager support shared by every backend. Its default async twins run the sync methods
    through `Runner._off_loop` (a backend whose methods never block sets `_blocking = False`)."""

    def close(self) -> None:
        """Release connections and files. The default does nothing."""

    aclose = async_twin(close)

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class ChatMemory(_Closable, ABC):
    """Ordered chat histories keyed by session id. `save` replaces a whole history atomically.

    One object serves any number of sessions over one connection pool; `session(id)` gives a bound view.
    """

    @abstractmethod
    def load_versioned(self, session_id: str) -> History:
        """Return a snapshot of the session's messages and the version they were read at."""

    @abstractmethod
    def save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        """Replace the session's whole history atomically and return its new version.

        With `expected_version`, raise `ConcurrentModificationError` unless the stored version still matches.
        Saving an empty list removes the session.
        """

    @abstractmethod
    def append(self, session_id: str, messages: MessagesIn) -> int:
        """Atomically add `messages` at the end of the session and return its new version.

        Idempotent by message id (CM10): a message whose `id` is already stored in the session is not stored
        again; when nothing is new, nothing is written and the current version is returned.
        """

    @abstractmethod
    def sessions(self) -> list[str]:
        """List the ids of the stored (non-empty) sessions, sorted."""

    aload_versioned = async_twin(load_versioned)
    asave = async_twin(save)
    aappend = async_twin(append)
    asessions = async_twin(sessions)

    def _load(self, session_id: str) -> Steps[list[Message]]:
        """Return a snapshot of the session's messages, in saved order ([] for an unknown session)."""
        history: History = yield Call(self, "load_versioned", (session_id,))
        return history.messages

    load, aload = twins(_load)

    def _clear(self, session_id: str) -> Steps[None]:
        """Remove the session and all its messages."""
        yield Call(self, "save", (session_id, []))

    clear, aclear = twins(_clear)

    def _update(
        self,
        session_id: str,
        change: Callable[[list[Message]], MessagesIn | Awaitable[MessagesIn]],
        *,
        retries: int = 16,
    ) -> Steps[int]:
        """Read-modify-write a session under its optimistic version, retrying on conflict (with random backoff).

        `change` gets the messages and returns the new history; from async code (`aupdate`) it may be a coroutine
        function (from sync code one is refused with `InvalidInputError`). A backend with a per-session write lock
        (`_update_locked`) switches to it after `OPTIMISTIC_TRIES` conflicts, so a busy session cannot starve the
        update; `retries` at or below that stays optimistic.
        """
        return (yield from self._update_steps(session_id, change, retries))

    update, aupdate = twins(_update)

    def _update_steps(self, session_id: str, change: Callable[[list[Message]], Any], retries: int) -> Steps[int]:
        locked = self._has_update_lock() and retries > OPTIMISTIC_TRIES
        version = yield from self._optimistic_steps(session_id, change, OPTIMISTIC_TRIES if locked else retries)
        if version is not None:
            return version
        if locked:
            logger.info("session %r kept changing: updating it under its write lock", session_id)
            locked_version: int = yield Call(self, "_update_locked", (session_id, change))
            return locked_version
        raise ConcurrentModificationError(f"session {session_id!r} kept changing; gave up after {retries} tries")

    def _optimistic_steps(
        self,
        session_id: str,
        change: Callable[[list[Message]], Any],
        tries: int,
        pause: Callable[[int], float] = _backoff,
    ) -> Steps[int | None]:
        """Up to `tries` optimistic read-modify-writes, pausing `pause(attempt)` after each conflict: the new
        version, or None if every try conflicted."""
        for attempt in range(tries):
            messages, version = yield Call(self, "load_versioned", (session_id,))
            new = yield Invoke(change, (messages,))
            try:
                saved: int = yield Call(self, "save", (session_id, new), {"expected_version": version})
            except ConcurrentModificationError:
                logger.debug("session %r changed during update (attempt %d); retrying", session_id, attempt + 1)
                yield Sleep(pause(attempt))
            else:
                return saved
        return None

    def _try_update(
        self,
        session_id: str,
        change: Callable[[list[Message]], MessagesIn],
        tries: int,
        pause: Callable[[int], float],
    ) -> int | None:
        """`_optimistic_steps` run from sync code (for a backend's own locked update)."""
        return run(self._optimistic_steps(session_id, change, tries, pause))

    def _has_update_lock(self) -> bool:
        """Whether this backend overrides `_update_locked` (and `_aupdate_locked`)."""
        return type(self)._update_locked is not ChatMemory._update_locked

    def _update_locked(self, session_id: str, change: Callable[[list[Message]], MessagesIn]) -> int:
        """Run `change` and write its result while holding the session's write lock (backends that have one)."""
        raise NotImplementedError

    async def _aupdate_locked(
        self, session_id: str, change: Callable[[list[Message]], MessagesIn | Awaitable[MessagesIn]]
    ) -> int:
        """`_update_locked` from async code; `change` may be a coroutine function."""
        raise NotImplementedError

    def session(self, session_id: str) -> ChatSession:
        """A view of one session with the per-session shape: `load()`, `save(messages)`, ..."""
        return ChatSession(self, check_id(session_id))

    async def _atry_update(
        self,
        session_id: str,
        change: Callable[[list[Message]], MessagesIn | Awaitable[MessagesIn]],
        tries: int,
        pause: Callable[[int], float],
    ) -> int | None:
        """`_optimistic_steps` run from async code (for a backend's own locked update)."""
        return await arun(self._optimistic_steps(session_id, change, tries, pause))


@runtime_checkable
class SupportsExpiry(Protocol):
    """An optional capability: a memory whose entries expire (a `ttl` option) can delete the expired ones, which
    already read as absent. `isinstance(memory, SupportsExpiry)` tells whether a memory has it."""

    def cleanup_expired(self) -> int:
        """Delete what expired; return how many sessions (or documents) were deleted."""
        ...

    async def acleanup_expired(self) -> int:
        """`cleanup_expired` from async code."""
        ...


@runtime_checkable
class _Expiring(Protocol):
    """A memory with a sync `cleanup_expired` only (`SupportsExpiry` has the async one too)."""

    def cleanup_expired(self) -> int: ...


class _InThread(Runner):
    """The step target for a memory whose `cleanup_expired` has no async twin: from async code, a worker thread."""

    def __init__(self, memory: _Expiring) -> None:
        self.memory = memory

    def cleanup_expired(self) -> int:
        """The memory's `cleanup_expired`."""
        return int(self.memory.cleanup_expired())

    acleanup_expired = async_twin(cleanup_expired)


def cleanup_expired_steps(memory: object) -> Steps[int]:
    """The steps of `cleanup_expired()` of any memory that has one, sync only or not: how many expired sessions
    (or documents, or items) it deleted; 0 for a memory without it."""
    if not isinstance(memory, _Expiring):
        return 0
    target = memory if isinstance(memory, SupportsExpiry) else _InThread(memory)
    removed = yield Call(target, "cleanup_expired")
    return int(removed)


class ChatSession(Runner):
    """One session of a `ChatMemory`: the same operations without the session id argument."""

    def __init__(self, memory: ChatMemory, session_id: str) -> None:
        self.memory = memory
        self.session_id = session_id

    def __repr__(self) -> str:
        return f"ChatSession({self.memory!r}, {self.session_id!r})"

    def _load(self) -> Steps[list[Message]]:
        """Return the session's messages."""
        messages: list[Message] = yield Call(self.memory, "load", (self.session_id,))
        return messages

    def _load_versioned(self) -> Steps[History]:
        """Return the session's messages and version."""
        history: History = yield Call(self.memory, "load_versioned", (self.session_id,))
        return history

    def _save(self, messages: MessagesIn, *, expected_version: int | None = None) -> Steps[int]:
        """Replace the session's history."""
        version: int = yield Call(
            self.memory, "save", (self.session_id, messages), {"expected_version": expected_version}
        )
        return version

    def _append(self, messages: MessagesIn) -> Steps[int]:
        """Append to the session's history."""
        version: int = yield Call(self.memory, "append", (self.session_id, messages))
        return version

    def _clear(self) -> Steps[None]:
        """Remove the session."""
        yield Call(self.memory, "clear", (self.session_id,))

    load, aload = twins(_load)
    load_versioned, aload_versioned = twins(_load_versioned)
    save, asave = twins(_save)
    append, aappend = twins(_append)
    clear, aclear = twins(_clear)

    def _update(
        self, change: Callable[[list[Message]], MessagesIn | Awaitable[MessagesIn]], *, retries: int = 16
    ) -> Steps[int]:
        """Read-modify-write the session under its optimistic version (`change` may be async from `aupdate`)."""
        version: int = yield Call(self.memory, "update", (self.session_id, change), {"retries": retries})
        return version

    update, aupdate = twins(_update)


class VectorMemory(_Closable, ABC):
    """One collection of embedded documents with one fixed dimension and metric.

    `store` upserts by id; `search` returns at most `top_k` hits sorted by score descending (ties by id), keeping
    only scores strictly above `threshold`. With the cosine metric scores lie in [-1, 1].
    """

    metric: Metric = "cosine"

    @property
    @abstractmethod
    def dimension(self) -> int | None:
        """The embedding dimension, or None until the first store fixes it."""

    def _check_at_open(self, check: Callable[[], object]) -> None:
        """Run a constructor's check of the stored collection against this object; on failure, close and re-raise."""
        try:
            check()
        except BaseException:
            self.close()  # e.g. an embedded Qdrant client holds its directory's lock until closed
            raise

    @abstractmethod
    def store(self, documents: DocumentsIn) -> None:
        """Insert or replace documents by id."""

    @abstractmethod
    def search(
        self,
        embedding: Sequence[float],
        *,
        top_k: int = 4,
        threshold: float | None = None,
        filter: Filter | None = None,
    ) -> list[ScoredDocument]:
        """Return the `top_k` documents most similar to `embedding` whose metadata matches `filter`."""

    @abstractmethod
    def get(self, ids: Iterable[str]) -> list[VectorDocument]:
        """Return the documents with these ids, in the order asked, skipping unknown ids."""

    @abstractmethod
    def delete(self, ids: Iterable[str]) -> None:
        """Delete documents by id; unknown ids are ignored."""

    @abstractmethod
    def count(self) -> int:
        """The number of stored documents."""

    @abstractmethod
    def clear(self) -> None:
        """Delete every document of the collection."""

    def ids(self) -> list[str]:
        """The ids of every stored document, sorted: with `get`, the way to read a whole collection (VM8).

        This default finds them with one search over the whole collection (`top_k=count()`), which lists every
        document on a backend whose search is exact; the built-in backends override it with a direct listing.
        """
        total, dimension = self.count(), self.dimension
        if total == 0 or dimension is None:
            return []
        probe = [1.0] + [0.0] * (dimension - 1)  # any non-zero query: only the set of hits matters
        return sorted(hit.document.id for hit in self.search(probe, top_k=total))

    def _documents(self, filter: Filter | None = None) -> Steps[builtins.list[VectorDocument]]:
        """Every document whose metadata matches `filter` (all without one), by id: read exactly through `ids` and
        `get`, `READ_CHUNK` at a time, where a search for them could miss some on an approximate (HNSW) index."""
        predicate = None if filter is None else compile_filter(filter)
        ids: builtins.list[str] = yield Call(self, "ids")
        found: builtins.list[VectorDocument] = []
        for start in range(0, len(ids), READ_CHUNK):
            documents: builtins.list[VectorDocument] = yield Call(self, "get", (ids[start : start + READ_CHUNK],))
            found += [document for document in documents if predicate is None or predicate(document.metadata)]
        return found

    documents, adocuments = twins(_documents)

    astore = async_twin(store)
    asearch = async_twin(search)
    aget = async_twin(get)
    adelete = async_twin(delete)
    acount = async_twin(count)
    aclear = async_twin(clear)
    aids = async_twin(ids)


# ItemMemory ----------------------------------------------------------------------------------------------------

Namespace = tuple[str, ...]
"""An item's namespace: one or more labels, a path from the most general (``("users", "u1", "facts")``)."""
ItemOrder = Literal["asc", "desc"]
ItemAddress = tuple[Namespace, str]
"""An item's validated address: (namespace, key)."""
ItemKeys = Iterable[tuple[Sequence[str], str]]
WILDCARD = "*"
"""In the `prefix` and `suffix` of `ItemMemory.namespaces`, a label matching any one label."""


class ItemWrite(NamedTuple):
    """One write of `ItemMemory.put_many`: the arguments of `put` (a plain tuple of 3 to 5 values works too)."""

    namespace: Sequence[str]
    key: str
    value: Mapping[str, Any]
    ttl: float | None = None
    expected_version: int | None = None


class CheckedWrite(NamedTuple):
    """An `ItemWrite` validated: what a backend's `ItemMemory._write` receives."""

    namespace: Namespace
    key: str
    value: FrozenDict
    ttl: float | None
    expected_version: int | None


class ListOptions(TypedDict, total=False):
    """The options of `ItemMemory.list` after its namespace prefix (what `list_plain` takes too)."""

    filter: Filter | None
    order: ItemOrder
    after: str | None
    before: str | None
    limit: int | None
    offset: int


class PlainItem(NamedTuple):
    """An item as `ItemMemory.list_plain` returns it: the fields of `Item`, its value a plain dict of the caller's
    own (not frozen: a fresh copy nobody else holds), for callers that hand values on as mutable dicts."""

    namespace: Namespace
    key: str
    value: dict[str, Any]
    version: int
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    ttl: float | None

    @classmethod
    def of(cls, item: Item) -> PlainItem:
        """The plain copy of `item`."""
        value: dict[str, Any] = thaw(item.value)
        return cls(
            item.namespace, item.key, value, item.version, item.created_at, item.updated_at, item.expires_at, item.ttl
        )


def check_namespace(value: object, what: str = "namespace", *, prefix: bool = False) -> Namespace:
    """Return `value` as a namespace tuple if usable: a tuple or list of labels, each a usable id (`check_id`),
    together at most 64 KiB of UTF-8. A namespace has at least one label; a `prefix` may have none (everything)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise InvalidInputError(f"{what} must be a tuple of strings, got {type(value).__name__}")
    labels = tuple(check_id(label, f"{what} label") for label in value)
    if not labels and not prefix:
        raise InvalidInputError(f"{what} needs at least one label")
    size = sum(len(label.encode("utf-8")) for label in labels)
    if size > MAX_ID_BYTES:
        raise InvalidInputError(f"{what} is {size} bytes long; the limit is {MAX_ID_BYTES}")
    return labels


def check_item_key(namespace: object, key: object) -> tuple[Namespace, str]:
    """Validate an item's address: (`check_namespace`, `check_id` of the key)."""
    return check_namespace(namespace), check_id(key, "item key")


def check_item_keys(keys: ItemKeys) -> list[tuple[Namespace, str]]:
    """Validate a collection of (namespace, key) pairs (a lone pair or string is refused)."""
    if isinstance(keys, (str, bytes, Mapping)):
        raise InvalidInputError(f"expected a list of (namespace, key) pairs, got a {type(keys).__name__}")
    checked = []
    for pair in keys:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise InvalidInputError(f"expected a (namespace, key) pair, got {pair!r:.120}")
        checked.append(check_item_key(*pair))
    return checked


MAX_TTL = 1e10
"""The longest ttl an item may have, in seconds (about 317 years): its expiry must be a time every backend can
represent (a `datetime`, epoch milliseconds in a 64-bit integer)."""


def check_ttl(value: object) -> float | None:
    """Return `value` if it is None or a positive number of seconds up to `MAX_TTL`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TTL:
        raise InvalidInputError(f"ttl must be a positive number of seconds up to {MAX_TTL:.0e}, got {value!r:.120}")
    return float(value)


def check_item_value(value: object) -> FrozenDict:
    """Validate an item's value (a JSON object within the limits) into a frozen one (`models.coerce_item_value`)."""
    return coerce_item_value(value)


def check_expected(namespace: Namespace, key: str, version: int, expected: int | None) -> None:
    """Raise `ConcurrentModificationError` unless `expected` is None or the item's current `version` (0: absent)."""
    if expected is not None and expected != version:
        raise ConcurrentModificationError(
            f"item {key!r:.200} in {namespace!r:.200} is at version {version}, not {expected}; reload and retry"
        )


def namespace_matches(namespace: Namespace, prefix: Namespace = (), suffix: Namespace = ()) -> bool:
    """Whether `namespace` starts with `prefix` and ends with `suffix`, label by label (`WILDCARD` matching any
    one label): LangGraph's `list_namespaces` rule. A prefix is a boundary: ``("a",)`` never matches ``("ab",)``."""
    if len(namespace) < len(prefix) or len(namespace) < len(suffix):
        return False
    head = all(p in (WILDCARD, label) for p, label in zip(prefix, namespace))
    tail = not suffix or all(s in (WILDCARD, label) for s, label in zip(suffix, namespace[-len(suffix) :]))
    return head and tail


def _check_writes(writes: Iterable[ItemWrite | tuple[Any, ...]]) -> list[CheckedWrite]:
    """Validate `put_many`'s writes; two writes of one item are refused (their order would decide)."""
    if isinstance(writes, (str, bytes, Mapping)):
        raise InvalidInputError(f"expected a list of item writes, got a {type(writes).__name__}")
    checked = []
    seen: set[ItemAddress] = set()
    namespaces: dict[object, Namespace] = {}  # validated already: a batch writes many items per namespace
    for position, write in enumerate(writes):
        if not isinstance(write, tuple) or not 3 <= len(write) <= 5:
            raise InvalidInputError(f"write {position} must be an ItemWrite or a tuple of 3 to 5 values")
        namespace, key, value, ttl, expected = ItemWrite(*write)
        try:
            known = namespaces.get(namespace)
        except TypeError:  # unhashable: refused below
            known = None
        if known is None:
            known = check_namespace(namespace)
            namespaces[known] = known
        address = (known, check_id(key, "item key"))
        if address in seen:
            raise InvalidInputError(f"write {position}: item {address!r:.200} is written twice in one batch")
        seen.add(address)
        checked.append(CheckedWrite(*address, check_item_value(value), check_ttl(ttl), _check_version(expected)))
    return checked


def _check_version(value: object) -> int | None:
    """Return an `expected_version` if it is None or an int >= 0 (0: the item must not exist)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"expected_version must be None or an int >= 0, got {value!r:.120}")
    return value


def check_page(limit: object, offset: object) -> tuple[int | None, int]:
    """Validate a page: `limit` None (no limit) or an int >= 0, `offset` an int >= 0."""
    for name, value in (("limit", limit), ("offset", offset)):
        if value is None and name == "limit":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInputError(f"{name} must be an int >= 0, got {value!r:.120}")
    return limit, offset  # type: ignore[return-value]


def page_of(values: list[_T], limit: int | None, offset: int) -> list[_T]:
    """The page of `values` that `check_page`'s `limit` and `offset` select."""
    return values[offset:] if limit is None else values[offset : offset + limit]


class ItemQuery(NamedTuple):
    """A validated `ItemMemory.list` or `count`, as a backend's `_select` receives it."""

    prefix: Namespace
    filter: Filter | None
    """The filter as given (validated): for a backend that translates it into its own query language."""
    predicate: Predicate | None
    """The filter compiled (`memwoven.filters`): for a backend that evaluates it on the values it reads."""
    descending: bool = False
    after: str | None = None
    before: str | None = None
    limit: int | None = None
    offset: int = 0

    @classmethod
    def of(
        cls,
        namespace_prefix: object,
        filter: object = None,
        order: object = "asc",
        after: object = None,
        before: object = None,
        limit: object = None,
        offset: object = 0,
    ) -> ItemQuery:
        """Validate the arguments of `list` (`InvalidInputError`)."""
        if order not in ("asc", "desc"):
            raise InvalidInputError(f'order must be "asc" or "desc", got {order!r:.120}')
        return cls(
            check_namespace(namespace_prefix, "namespace prefix", prefix=True),
            filter,  # type: ignore[arg-type]  # compile_filter checked it
            None if filter is None else compile_filter(filter),  # type: ignore[arg-type]
            order == "desc",
            None if after is None else check_id(after, "after key"),
            None if before is None else check_id(before, "before key"),
            *check_page(limit, offset),
        )

    def in_range(self, key: str) -> bool:
        """Whether `key` lies between `after` and `before` (both excluded)."""
        return (self.after is None or key > self.after) and (self.before is None or key < self.before)

    def answer(self, items: Iterable[Item]) -> list[Item]:
        """The query's answer computed in Python over `items`, the live items under its prefix: those in range
        whose value matches, sorted by key then namespace (code point order), paged."""
        predicate = self.predicate
        found = [item for item in items if self.in_range(item.key) and (predicate is None or predicate(item.value))]
        found.sort(key=lambda item: (item.key, item.namespace), reverse=self.descending)
        return self.page(found)

    def page(self, values: list[_T]) -> list[_T]:
        """`values` (in the query's order) with `offset` skipped and at most `limit` kept."""
        return page_of(values, self.limit, self.offset)


class NamespaceQuery(NamedTuple):
    """A validated `ItemMemory.namespaces`."""

    prefix: Namespace = ()
    suffix: Namespace = ()
    max_depth: int | None = None
    limit: int | None = None
    offset: int = 0

    @classmethod
    def of(
        cls,
        prefix: object = None,
        suffix: object = None,
        max_depth: object = None,
        limit: object = None,
        offset: object = 0,
    ) -> NamespaceQuery:
        """Validate the arguments of `namespaces` (`InvalidInputError`)."""
        if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1):
            raise InvalidInputError(f"max_depth must be None or an int >= 1, got {max_depth!r:.120}")
        return cls(
            () if prefix is None else check_namespace(prefix, "namespace prefix", prefix=True),
            () if suffix is None else check_namespace(suffix, "namespace suffix", prefix=True),
            max_depth,
            *check_page(limit, offset),
        )

    @property
    def fixed(self) -> Namespace:
        """The labels of `prefix` before its first wildcard: every namespace asked for starts with them."""
        return self.prefix[: self.prefix.index(WILDCARD)] if WILDCARD in self.prefix else self.prefix

    def answer(self, namespaces: Iterable[Namespace]) -> list[Namespace]:
        """The matching ones of `namespaces`, cut to `max_depth` labels, without duplicates, sorted, paged."""
        found = {ns[: self.max_depth] for ns in namespaces if namespace_matches(ns, self.prefix, self.suffix)}
        return page_of(sorted(found), self.limit, self.offset)


class ItemMemory(_Closable, ABC):
    """JSON objects addressed by (namespace, key), with a version per item, optional expiry and listing by
    namespace prefix. The invariants IM1-IM11 are in docs/contracts.md.

    Every operation validates all of its input before anything is read or written (`InvalidInputError`). Expired
    items read as absent everywhere (version 0 included) until `cleanup_expired` frees them.

    The public methods are written once, here: each validates its arguments and hands them, checked, to the
    backend's hooks (`_read`, `_write`, `_delete_items`, `_select`, `_stored_namespaces`, `_expire`, optionally
    `_count_matching`), which are steps (`memwoven._steps`); an in-process backend writes them with `no_io`.
    """

    def _get(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool = False) -> Steps[Item | None]:
        """The item, or None if it does not exist (or expired). With `refresh_ttl`, an item with a `ttl` gets
        its expiry moved to now + ttl (nothing else changes: neither its version nor `updated_at`)."""
        items: builtins.list[Item | None] = yield from self._read([check_item_key(namespace, key)], bool(refresh_ttl))
        return items[0]

    get, aget = twins(_get)

    def _get_many(self, keys: ItemKeys, *, refresh_ttl: bool = False) -> Steps[builtins.list[Item | None]]:
        """`get` of each (namespace, key) pair, in the order asked (None where absent)."""
        addresses = check_item_keys(keys)
        if not addresses:
            return []
        items: builtins.list[Item | None] = yield from self._read(addresses, bool(refresh_ttl))
        return items

    get_many, aget_many = twins(_get_many)

    def _put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        *,
        ttl: float | None = None,
        expected_version: int | None = None,
    ) -> Steps[int]:
        """Create or replace the item and return its new version (greater than any it had before).

        `ttl` (seconds) makes it expire that long after this write; None: never. With `expected_version`, raise
        `ConcurrentModificationError` unless the stored version still matches (0: the item must not exist).
        """
        versions: builtins.list[int] = yield from self._write(
            _check_writes([ItemWrite(namespace, key, value, ttl, expected_version)])
        )
        return versions[0]

    put, aput = twins(_put)

    def _put_many(self, writes: Iterable[ItemWrite | tuple[Any, ...]]) -> Steps[builtins.list[int]]:
        """`put` of each `ItemWrite` (namespace, key, value, ttl=None, expected_version=None); the new versions in
        order. All or nothing: if any expected version does not match, `ConcurrentModificationError` and nothing is
        written (a backend without transactions documents otherwise). One item twice is `InvalidInputError`."""
        checked = _check_writes(writes)
        if not checked:
            return []
        versions: builtins.list[int] = yield from self._write(checked)
        return versions

    put_many, aput_many = twins(_put_many)

    def _delete(self, namespace: Sequence[str], key: str, *, expected_version: int | None = None) -> Steps[bool]:
        """Delete the item; return whether it existed. With `expected_version`, raise
        `ConcurrentModificationError` unless the stored version matches (0: succeeds only if absent)."""
        address = check_item_key(namespace, key)
        existed: int = yield from self._delete_items([address], _check_version(expected_version))
        return existed > 0

    delete, adelete = twins(_delete)

    def _delete_many(self, keys: ItemKeys) -> Steps[int]:
        """Delete each (namespace, key) pair (unknown ones are ignored); return how many existed."""
        addresses = builtins.list(dict.fromkeys(check_item_keys(keys)))
        if not addresses:
            return 0
        existed: int = yield from self._delete_items(addresses, None)
        return existed

    delete_many, adelete_many = twins(_delete_many)

    def _list(
        self,
        namespace_prefix: Sequence[str] = (),
        *,
        filter: Filter | None = None,
        order: ItemOrder = "asc",
        after: str | None = None,
        before: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> Steps[builtins.list[Item]]:
        """The items whose namespace starts with `namespace_prefix` (label by label; () is every item) and whose
        value matches `filter` (`memwoven.filters`, dotted paths reaching into nested objects), sorted by key, then
        namespace, in code point order (`order="desc"` reverses it); only keys > `after` and < `before`; then
        `offset` skipped and at most `limit` returned."""
        query = ItemQuery.of(namespace_prefix, filter, order, after, before, limit, offset)
        if query.limit == 0:
            return []
        items: builtins.list[Item] = yield from self._select(query)
        return items

    list, alist = twins(_list)

    def _list_plain(
        self, namespace_prefix: Sequence[str] = (), **options: Unpack[ListOptions]
    ) -> Steps[builtins.list[PlainItem]]:
        """`list` (the same options), each item as a `PlainItem` (its value a mutable dict of the caller's own): for
        callers that would copy every value out of its frozen `Item` (a backend may then skip freezing it)."""
        query = ItemQuery.of(namespace_prefix, **options)
        if query.limit == 0:
            return []
        items: builtins.list[PlainItem] = yield from self._select_plain(query)
        return items

    list_plain, alist_plain = twins(_list_plain)

    def _count(self, namespace_prefix: Sequence[str] = (), *, filter: Filter | None = None) -> Steps[int]:
        """How many items `list(namespace_prefix, filter=filter)` returns."""
        counted: int = yield from self._count_matching(ItemQuery.of(namespace_prefix, filter))
        return counted

    count, acount = twins(_count)

    def _namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> Steps[builtins.list[Namespace]]:
        """The namespaces holding at least one item that match `prefix` and `suffix` (`namespace_matches`: "*"
        matches any one label), each cut to its first `max_depth` labels, without duplicates, sorted; then
        `offset` skipped and at most `limit` returned."""
        query = NamespaceQuery.of(prefix, suffix, max_depth, limit, offset)
        stored: Iterable[Namespace] = yield from self._stored_namespaces(query.fixed)
        return query.answer(stored)

    namespaces, anamespaces = twins(_namespaces)

    def _cleanup_expired(self) -> Steps[int]:
        """Delete the expired items (they already read as absent); return how many."""
        removed: int = yield from self._expire()
        return removed

    cleanup_expired, acleanup_expired = twins(_cleanup_expired)

    # The backend's hooks: each receives validated arguments. ---------------------------------------------------

    @abstractmethod
    def _read(self, addresses: Sequence[ItemAddress], refresh: bool) -> Steps[builtins.list[Item | None]]:
        """The live items at `addresses` (not empty, maybe repeated), in order, None where absent or expired. With
        `refresh`, each found item that has a `ttl` gets its expiry moved to now + ttl (and is returned so)."""

    @abstractmethod
    def _write(self, writes: Sequence[CheckedWrite]) -> Steps[builtins.list[int]]:
        """Apply `writes` (not empty, distinct items; namespace a tuple, value frozen, ttl and expected version
        checked) all or nothing, `check_expected` failing before anything is written; the new versions in order
        (`next_version` of the stored one, expired or not: a version is never reused)."""

    @abstractmethod
    def _delete_items(self, addresses: Sequence[ItemAddress], expected: int | None) -> Steps[int]:
        """Delete the items at `addresses` (not empty, distinct); return how many were live. `expected` (given
        with one address only) is checked first with `check_expected`."""

    @abstractmethod
    def _select(self, query: ItemQuery) -> Steps[builtins.list[Item]]:
        """The answer to `query` (`ItemQuery.answer` computes it in Python over the live items of its prefix)."""

    def _select_plain(self, query: ItemQuery) -> Steps[builtins.list[PlainItem]]:
        """`_select`'s answer as `PlainItem`s: by default, copies of its items."""
        items: builtins.list[Item] = yield from self._select(query)
        return [PlainItem.of(item) for item in items]

    def _count_matching(self, query: ItemQuery) -> Steps[int]:
        """How many items match `query` (which has no page): by default, the length of `_select`'s answer."""
        items: builtins.list[Item] = yield from self._select(query)
        return len(items)

    @abstractmethod
    def _stored_namespaces(self, prefix: Namespace) -> Steps[Iterable[Namespace]]:
        """The namespaces holding live items that start with `prefix` (no wildcard in it), duplicates allowed."""

    @abstractmethod
    def _expire(self) -> Steps[int]:
        """Delete the expired items; return how many."""
