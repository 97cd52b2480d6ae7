"""Chat history on Redis (standalone or Cluster), with no server modules required.

Each session lives in three keys that share one hash tag, so they sit in one cluster slot and a Lua script can
change them atomically: ``<prefix>:{<sha256 of the id>}:meta`` (a hash: the real id, the version and the message
count), ``...:msgs`` (a list of message JSON) and ``...:digests`` (a list of per-message digests). Hashing the id
means no id can collide with, or glob-match, another. Keys altered behind memwoven's back (a list cut short or
added to, another session's id, keys of the wrong type) raise `CorruptMemoryError`: loads and appends refuse them,
a plain `save` rewrites the history whole.

`save` is one script call that checks the version the diff was computed against, trims the list to the unchanged
prefix and pushes only the changed suffix: O(change). Versions come from the server clock (microseconds), so they
only grow, even across a clear. An optional sliding TTL is reset on every write.

The sync and async classes share everything but I/O: each operation is a generator that yields `_Op`s
(script calls, scans) and receives their results; `_run` drives it with a sync client, `_arun` with an async one.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError, RedisClusterException, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from memwoven.contracts import ChatMemory, History, MessagesIn, check_id
from memwoven.errors import (
    BackendUnavailableError,
    ConcurrentModificationError,
    CorruptMemoryError,
    InvalidInputError,
    MemwovenError,
)
from memwoven.history import (
    EMPTY,
    Snapshot,
    SnapshotCache,
    decode_message,
    digest,
    encode_message,
    prepare_edit,
    stored_prefix,
)
from memwoven.models import Message, coerce_messages, same_prefix
from memwoven.urls import redact_text, redact_url

__all__ = ["RedisChatMemory"]

_T = TypeVar("_T")
_LOCK_LEASE = 30.0  # seconds an update lock lives if its holder dies
_LOCK_WAIT = 60.0  # seconds a locked update waits for its turn
_LOCK_POLL = 0.005  # seconds between attempts to take the lock
_LOCKED_TRIES = 16  # retries under the lock, against writers that do not take it (save, append)
# No glob or hash-tag characters. A prefix holds no '{', so in `<prefix>:{<hash>}:<part>` (chat keys) and
# `<prefix>:vec:{<name>}:<part>` (vector keys, other parts) the first '{' ends the prefix: no prefix's keys or SCAN
# patterns reach another's, even one it starts ("app", "app:x"). `\Z`, since `$` also matches before a final "\n".
KEY_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{1,64}\Z")

_NEXT_VERSION = """
local function next_version(current)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local cur = tonumber(current)
  if now <= cur then now = cur + 1 end
  return string.format('%.0f', now)
end
local function touch(ttl_ms)
  if ttl_ms ~= '0' then
    for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, ttl_ms) end
  end
end
local function intact(id)
  local stored, count = unpack(redis.call('HMGET', KEYS[1], 'id', 'count'))
  if stored and stored ~= id then return false end
  return not count or tonumber(count) == redis.call('LLEN', KEYS[2])
end
local function push(first, n)
  for i = 0, n - 1, 1000 do
    local last = math.min(i + 1000, n) - 1
    redis.call('RPUSH', KEYS[2], unpack(ARGV, first + i, first + last))
    redis.call('RPUSH', KEYS[3], unpack(ARGV, first + n + i, first + n + last))
  end
end
"""

SCRIPTS = {
    # KEYS: meta, msgs. ARGV: the version the caller has cached. -> {version, id, changed, messages?, count?}
    "load": """
local version = redis.call('HGET', KEYS[1], 'version')
if not version then return {'0', '', 0} end
local id = redis.call('HGET', KEYS[1], 'id')
if version == ARGV[1] then return {version, id, 0} end
return {version, id, 1, redis.call('LRANGE', KEYS[2], 0, -1), redis.call('HGET', KEYS[1], 'count') or ''}
""",
    # KEYS: meta, digests. -> {version, id, digests}
    "digests": """
local version = redis.call('HGET', KEYS[1], 'version') or '0'
local id = redis.call('HGET', KEYS[1], 'id') or ''
return {version, id, redis.call('LRANGE', KEYS[2], 0, -1)}
""",
    # KEYS: meta, msgs, digests. ARGV: base version, id, keep, ttl ms, n, n messages, n digests
    # -> {1, version}, or {0, version} on a version conflict, or {-1, version} if it would keep damaged messages
    "save": _NEXT_VERSION
    + """
local version = redis.call('HGET', KEYS[1], 'version') or '0'
if version ~= ARGV[1] then return {0, version} end
local keep, n = tonumber(ARGV[3]), tonumber(ARGV[5])
if keep > 0 and not intact(ARGV[2]) then return {-1, version} end
if keep + n == 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return {1, '0'}
end
if keep == 0 then
  redis.call('DEL', KEYS[2], KEYS[3])
else
  redis.call('LTRIM', KEYS[2], 0, keep - 1)
  redis.call('LTRIM', KEYS[3], 0, keep - 1)
end
push(6, n)
local new = next_version(version)
redis.call('HSET', KEYS[1], 'id', ARGV[2], 'version', new, 'count', keep + n)
touch(ARGV[4])
return {1, new}
""",
    # KEYS: meta, msgs, digests.
    "clear": "return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])",
    # KEYS: meta, msgs, digests. ARGV: id, ttl ms, n, n messages, n digests -> {old version, new version}
    # (new version '-1': the stored messages are damaged, nothing was appended)
    "append": _NEXT_VERSION
    + """
local version = redis.call('HGET', KEYS[1], 'version') or '0'
local n = tonumber(ARGV[3])
if n == 0 then return {version, version} end
if not intact(ARGV[1]) then return {version, '-1'} end
push(4, n)
local new = next_version(version)
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'version', new, 'count', redis.call('LLEN', KEYS[2]))
touch(ARGV[2])
return {version, new}
""",
}


@dataclass(frozen=True)
class _Script:
    """Run one of `SCRIPTS` on the session's keys."""

    name: str
    keys: list[str]
    args: list[str | bytes | int]


@dataclass(frozen=True)
class _Scan:
    """Find the keys matching a pattern (every node of a cluster), and read one hash field of each."""

    pattern: str
    field: str


_Op = _Script | _Scan
_Steps = Generator[_Op, Any, _T]


def as_text(value: bytes | str) -> str:
    """A Redis reply as text."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


class RedisChatMemory(ChatMemory):
    """Chat histories on Redis: `redis://`, `rediss://` or `redis+cluster://` URLs, or clients you built.

    `prefix` namespaces every key; `ttl` (seconds) expires a session that has not been written for that long.
    """

    def __init__(
        self,
        url_or_client: str | redis.Redis | redis.cluster.RedisCluster,
        *,
        async_client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster | None = None,
        prefix: str = "memwoven",
        ttl: float | None = None,
        socket_timeout: float = 10.0,
        cache_size: int = 256,
    ) -> None:
        if not isinstance(prefix, str) or not KEY_PREFIX.match(prefix):
            raise InvalidInputError(f"prefix must match {KEY_PREFIX.pattern}, got {prefix!r}")
        if ttl is not None and not ttl > 0:
            raise InvalidInputError(f"ttl must be a positive number of seconds, got {ttl!r}")
        self.prefix = prefix
        self._ttl_ms = str(int(ttl * 1000)) if ttl else "0"
        self._cache = SnapshotCache(cache_size)
        self._url, self._client, self._async_client, self._scripts, self._async_scripts = connect(
            url_or_client, async_client, socket_timeout, SCRIPTS
        )

    def __repr__(self) -> str:
        return f"RedisChatMemory({self._url!r}, prefix={self.prefix!r})"

    # Key naming ---------------------------------------------------------------------------------------------

    def _keys(self, session_id: str) -> list[str]:
        tag = hashlib.sha256(session_id.encode("utf-8")).hexdigest()
        return [f"{self.prefix}:{{{tag}}}:{part}" for part in ("meta", "msgs", "digests")]

    def _lock_key(self, session_id: str) -> str:
        """The key of the session's update lock (same hash tag as its data; `sessions()` only scans `:meta`)."""
        return self._keys(check_id(session_id))[0][: -len("meta")] + "lock"

    # Operations as I/O-free steps ---------------------------------------------------------------------------

    def _load_steps(self, session_id: str) -> _Steps[History]:
        meta, msgs, _ = self._keys(check_id(session_id))
        cached = self._cache.get(session_id) or EMPTY
        version_raw, stored_id, changed, *rest = yield _Script("load", [meta, msgs], [str(cached.version)])
        version = int(version_raw)
        if version == 0:
            self._cache.drop(session_id)
            return History([], 0)
        if as_text(stored_id) != session_id:
            raise CorruptMemoryError(f"session {session_id!r}: its keys hold another session's data")
        if changed:
            raws, count = rest
            if count and int(count) != len(raws):  # a message list cut short or added to behind memwoven's back
                raise CorruptMemoryError(f"session {session_id!r} should have {int(count)} messages; found {len(raws)}")
            cached = Snapshot(version, [decode_message(session_id, i, raw) for i, raw in enumerate(raws)])
            self._cache.put(session_id, cached)
        return History(list(cached.messages), version)

    def _save_steps(self, session_id: str, messages: MessagesIn, expected_version: int | None) -> _Steps[int]:
        keys = self._keys(check_id(session_id))
        edit = prepare_edit(messages, self._cache.get(session_id))  # validated before anything is written
        new = edit.messages
        trust_cache, damaged_at = True, None  # damaged_at: the version of a damaged history being replaced
        while True:
            cached = self._cache.get(session_id) if trust_cache else None
            if damaged_at is not None:  # the stored messages are damaged: keep none of them
                base, keep, bodies = damaged_at, 0, [encode_message(m) for m in new]
            elif cached is not None and expected_version in (None, cached.version):
                base = cached.version
                keep = edit.same if cached is edit.base else same_prefix(new, cached.messages)
                bodies = [encode_message(m) for m in new[keep:]]
            else:  # nothing remembered at the right version: compare with the stored digests
                version_raw, _, stored = yield _Script("digests", [keys[0], keys[2]], [])
                base = int(version_raw)
                if expected_version is not None and base != expected_version:
                    raise self._conflict(session_id, base, expected_version)
                all_bodies = [encode_message(m) for m in new]
                keep = stored_prefix([bytes(d) for d in stored], all_bodies)
                bodies = all_bodies[keep:]
            args: list[str | bytes | int] = [str(base), session_id, keep, self._ttl_ms, len(bodies)]
            ok, version_raw = yield _Script("save", keys, [*args, *bodies, *(digest(b) for b in bodies)])
            if ok == 1:
                version = int(version_raw)
                self._cache.put(session_id, Snapshot(version, new))
                return version
            if ok == -1 and expected_version is not None:
                raise CorruptMemoryError(
                    f"session {session_id!r}: its stored messages are damaged; save without a version to replace them"
                )
            if ok == -1:
                damaged_at = int(version_raw)  # a plain save replaces a damaged history: the way to repair it
                continue
            if expected_version is not None:
                raise self._conflict(session_id, int(version_raw), expected_version)
            trust_cache = False  # another writer got in between: diff again, against the stored digests

    def _append_steps(self, session_id: str, messages: MessagesIn) -> _Steps[int]:
        keys = self._keys(check_id(session_id))
        added = coerce_messages(messages)
        bodies = [encode_message(m) for m in added]
        args: list[str | bytes | int] = [session_id, self._ttl_ms, len(bodies)]
        old_raw, new_raw = yield _Script("append", keys, [*args, *bodies, *(digest(b) for b in bodies)])
        old, new = int(old_raw), int(new_raw)
        if new == -1:
            raise CorruptMemoryError(f"session {session_id!r}: its stored messages are damaged; nothing was appended")
        cached = self._cache.get(session_id)
        if cached is not None and cached.version == old and old != new:  # nobody else wrote in between
            self._cache.put(session_id, Snapshot(new, cached.messages + added))
        return new

    def _sessions_steps(self) -> _Steps[list[str]]:
        ids = yield _Scan(f"{self.prefix}:{{*}}:meta", "id")
        return sorted(as_text(i) for i in ids if i is not None)

    def _clear_steps(self, session_id: str) -> _Steps[None]:
        yield _Script("clear", self._keys(check_id(session_id)), [])
        self._cache.drop(session_id)

    def _conflict(self, session_id: str, actual: int, expected: int) -> ConcurrentModificationError:
        return ConcurrentModificationError(
            f"session {session_id!r} is at version {actual}, not {expected}; reload and retry"
        )

    # Drivers ------------------------------------------------------------------------------------------------

    def _run(self, steps: _Steps[_T], session_id: str | None = None) -> _T:
        return drive(steps, self._execute, self._url, _subject(session_id))

    def _execute(self, op: _Op) -> Any:
        if isinstance(op, _Script):
            return self._scripts[op.name](keys=op.keys, args=op.args)
        keys = list(self._client.scan_iter(match=op.pattern, count=1000))
        pipe = self._client.pipeline(transaction=False)
        for key in keys:
            pipe.hget(key, op.field)
        return pipe.execute()

    async def _arun(self, steps: _Steps[_T], session_id: str | None = None) -> _T:
        return await adrive(steps, self._aexecute, self._url, _subject(session_id))

    async def _aexecute(self, op: _Op) -> Any:
        assert self._async_client is not None and self._async_scripts is not None
        if isinstance(op, _Script):
            return await self._async_scripts[op.name](keys=op.keys, args=op.args)
        keys = [key async for key in self._async_client.scan_iter(match=op.pattern, count=1000)]
        pipe = self._async_client.pipeline(transaction=False)
        for key in keys:
            pipe.hget(key, op.field)
        return await pipe.execute()

    # The contract -------------------------------------------------------------------------------------------

    def load_versioned(self, session_id: str) -> History:
        """Return the session's messages and version (one round trip; cached messages when unchanged)."""
        return self._run(self._load_steps(session_id), session_id)

    def save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        """Replace the session's history, writing only the changed suffix."""
        return self._run(self._save_steps(session_id, messages, expected_version), session_id)

    def append(self, session_id: str, messages: MessagesIn) -> int:
        """Append atomically (one script call)."""
        return self._run(self._append_steps(session_id, messages), session_id)

    def clear(self, session_id: str) -> None:
        """Delete the session's keys."""
        self._run(self._clear_steps(session_id), session_id)

    def sessions(self) -> list[str]:
        """The ids of this prefix's sessions (found with SCAN, never KEYS), sorted."""
        return self._run(self._sessions_steps())

    async def aload_versioned(self, session_id: str) -> History:
        """Async twin of `load_versioned`."""
        return await self._arun(self._load_steps(session_id), session_id)

    async def asave(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        """Async twin of `save`."""
        return await self._arun(self._save_steps(session_id, messages, expected_version), session_id)

    async def aappend(self, session_id: str, messages: MessagesIn) -> int:
        """Async twin of `append`."""
        return await self._arun(self._append_steps(session_id, messages), session_id)

    async def aclear(self, session_id: str) -> None:
        """Async twin of `clear`."""
        await self._arun(self._clear_steps(session_id), session_id)

    async def asessions(self) -> list[str]:
        """Async twin of `sessions`."""
        return await self._arun(self._sessions_steps())

    def _update_locked(self, session_id: str, change: Callable[[list[Message]], MessagesIn]) -> int:
        """`update` after repeated conflicts: the optimistic loop again, but with the writers that also ended up
        here taking turns under a Redis lock (redis-py's `Lock`, a lease). The version check still decides what
        is written, so a lease that runs out while `change` is slow can cost a retry, never a lost write."""
        lock = self._client.lock(self._lock_key(session_id), timeout=_LOCK_LEASE, sleep=_LOCK_POLL)
        try:
            if not lock.acquire(blocking_timeout=_LOCK_WAIT):
                raise ConcurrentModificationError(f"session {session_id!r}: its update lock stayed busy; retry")
            try:
                version = self._try_update(session_id, change, _LOCKED_TRIES, _pause_under_lock)
                if version is not None:
                    return version
            finally:
                with contextlib.suppress(LockError):  # the lease ran out: someone else may hold it now
                    lock.release()
        except (RedisConnectionError, RedisTimeoutError, OSError) as error:
            raise BackendUnavailableError(f"Redis at {self._url} is unavailable: {error}") from error
        raise ConcurrentModificationError(f"session {session_id!r} kept changing under its update lock; retry")

    async def _aupdate_locked(
        self, session_id: str, change: Callable[[list[Message]], MessagesIn | Awaitable[MessagesIn]]
    ) -> int:
        """Async twin of `_update_locked`; `change` may be a coroutine function."""
        assert self._async_client is not None
        lock = self._async_client.lock(self._lock_key(session_id), timeout=_LOCK_LEASE, sleep=_LOCK_POLL)
        try:
            if not await lock.acquire(blocking_timeout=_LOCK_WAIT):
                raise ConcurrentModificationError(f"session {session_id!r}: its update lock stayed busy; retry")
            try:
                version = await self._atry_update(session_id, change, _LOCKED_TRIES, _pause_under_lock)
                if version is not None:
                    return version
            finally:
                with contextlib.suppress(LockError):
                    await lock.release()
        except (RedisConnectionError, RedisTimeoutError, OSError) as error:
            raise BackendUnavailableError(f"Redis at {self._url} is unavailable: {error}") from error
        raise ConcurrentModificationError(f"session {session_id!r} kept changing under its update lock; retry")

    def close(self) -> None:
        """Close the sync client's connections."""
        self._client.close()

    async def aclose(self) -> None:
        """Close the async client's connections (and the sync client's)."""
        if self._async_client is not None:
            await self._async_client.aclose()
        self._client.close()


def damaged(error: ResponseError | ValueError, what: str) -> Exception:  # shared with redis_vector
    """The error to raise for a failure inside an operation on `what`: damaged keys become `CorruptMemoryError`.

    A key of the wrong type (WRONGTYPE), a script failing on a stored value (a version that is not a number) or
    a reply that cannot be decoded means the keys were altered behind memwoven's back. Anything else
    (a server refusing writes when out of memory, ...) is raised as it is.
    """
    text = str(error)
    if isinstance(error, ResponseError) and not text.startswith("WRONGTYPE") and "user_script" not in text:
        return error
    return CorruptMemoryError(f"{what}: its Redis keys hold data memwoven did not write ({text[:200]})")


@contextlib.contextmanager
def _redis_errors(url: str, subject: str) -> Iterator[None]:
    """Redis errors become memwoven errors: unreachable -> BackendUnavailableError, damaged keys -> corrupt."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, OSError) as error:
        raise BackendUnavailableError(f"Redis at {url} is unavailable: {error}") from error
    except MemwovenError:
        raise
    except (ResponseError, ValueError) as error:
        raise damaged(error, subject) from error


def drive(steps: Generator[Any, Any, _T], execute: Callable[[Any], Any], url: str, subject: str) -> _T:
    """Run I/O-free `steps` to their result, each op through `execute` (shared with redis_vector)."""
    with _redis_errors(url, subject):
        try:
            op = next(steps)
            while True:
                op = steps.send(execute(op))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


async def adrive(
    steps: Generator[Any, Any, _T], execute: Callable[[Any], Awaitable[Any]], url: str, subject: str
) -> _T:
    """Async twin of `drive`."""
    with _redis_errors(url, subject):
        try:
            op = next(steps)
            while True:
                op = steps.send(await execute(op))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def _subject(session_id: str | None) -> str:
    return "a session" if session_id is None else f"session {session_id!r}"


def _pause_under_lock(attempt: int) -> float:
    return _LOCK_POLL * attempt


def connect(
    url_or_client: Any, async_client: Any, socket_timeout: float, scripts: Mapping[str, str]
) -> tuple[str, Any, Any, dict[str, Any], dict[str, Any] | None]:
    """A backend's Redis connection (shared with redis_vector): its URL as shown (password hidden), the sync and
    async clients (from the URL, or the clients given) and `scripts` registered on each."""
    if isinstance(url_or_client, str):
        shown = redact_url(url_or_client)
        client, async_client = clients_from_url(url_or_client, socket_timeout)
    else:
        shown, client = repr(url_or_client), url_or_client
    registered = {name: client.register_script(body) for name, body in scripts.items()}
    if async_client is None:
        return shown, client, None, registered, None
    async_registered = {name: async_client.register_script(body) for name, body in scripts.items()}
    return shown, client, async_client, registered, async_registered


def clients_from_url(url: str, socket_timeout: float) -> tuple[Any, Any]:
    """Sync and async clients for a `redis://`, `rediss://` or `redis+cluster://` URL."""
    options: dict[str, Any] = {"socket_timeout": socket_timeout, "socket_connect_timeout": socket_timeout}
    scheme, _, rest = url.partition("://")
    try:
        if scheme in ("redis+cluster", "rediss+cluster"):
            plain = f"{scheme.split('+')[0]}://{rest}"
            # the sync cluster client connects at once, to learn the slot map
            return redis.cluster.RedisCluster.from_url(plain, **options), redis.asyncio.cluster.RedisCluster.from_url(
                plain, **options
            )
        if scheme not in ("redis", "rediss", "unix"):
            raise InvalidInputError(f"not a Redis URL: {redact_url(url)!r}")
        return redis.Redis.from_url(url, **options), redis.asyncio.Redis.from_url(url, **options)
    except (RedisConnectionError, RedisTimeoutError, RedisClusterException) as error:
        raise BackendUnavailableError(
            f"Redis at {redact_url(url)} is unavailable: {redact_text(str(error), url)}"
        ) from None
    except ValueError as error:  # a port or database number that is not a number, an unknown option, ...
        if isinstance(error, InvalidInputError):
            raise
        raise InvalidInputError(f"malformed Redis URL {redact_url(url)!r}: {redact_text(str(error), url)}") from None
