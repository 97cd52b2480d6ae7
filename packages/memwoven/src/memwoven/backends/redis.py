"""Chat history on Redis (standalone or Cluster), with no server modules required.

Each session lives in four keys that share one hash tag, so they sit in one cluster slot and a Lua script can
change them atomically::

    <prefix>:{<sha256 of the id>}:meta     hash  the real id, the version, the message count and the seal
    <prefix>:{<sha256 of the id>}:msgs     list  message JSON
    <prefix>:{<sha256 of the id>}:digests  list  per message: the rolling digest through it, then ":<its id>"
    <prefix>:{<sha256 of the id>}:ids      set   the ids the messages carry (CM10: unique within the session)

Hashing the id means no id can collide with, or glob-match, another. The rolling digest is SHA-1 (the one hash
Lua has) of the digest before it and the message's BLAKE2b digest; the seal is SHA-1 of the id, version, count,
number of ids and the last rolling digest. Every write keeps all of it in step; an append checks in O(1) that
the meta key exists unless no key does, and that the counts and the last digest match the seal, and it skips the
messages whose id is in `ids` (a retried append is stored once). A load that fetches the messages recomputes the
rolling digests while decoding and compares them and the seal once, so a message altered, forged, moved or
dropped, a digest changed or added, a lowered version or a meta key gone while the messages stay (eviction)
raises `CorruptMemoryError` naming the session instead of returning data; `sessions()` raises for sessions left
without their meta key (their ids are unknown). A plain `save` rewrites a damaged history whole.

`save` is one script call that checks the version the diff was computed against, trims the lists to the
unchanged prefix and pushes only the changed suffix: O(change). The prefix kept is one this object verified: its
own snapshot at the stored version, or stored messages equal, body and digest, to the new ones. Versions come
from the server clock (microseconds), so they only grow, even across a clear. An optional sliding TTL is reset on
every write, as one deadline for all the session's keys so they expire together.

Each operation is written once, as a generator of steps that yields ops (script calls, scans) and receives their
results; `twins` makes its sync method, run with the sync client, and its async twin, run with the event loop's
async client (see `memwoven.backends._redis`: one per loop, or the sync client in worker threads).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from memwoven._steps import Sleep, Steps, twins
from memwoven.backends._cancel import finished_first
from memwoven.backends._items import ttl_milliseconds
from memwoven.backends._redis import Fields, RedisBackend, Scan, Script, as_text, check_prefix, logger, redis_errors
from memwoven.contracts import ChatMemory, History, MessagesIn, check_id, check_ttl
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError, InvalidInputError
from memwoven.history import (
    EMPTY,
    Snapshot,
    SnapshotCache,
    decode_message,
    digest,
    encode_message,
    message_ids,
    not_stored,
    prepare_edit,
)
from memwoven.models import Message, coerce_messages, same_prefix

__all__ = ["RedisChatMemory"]

_PARTS = ("meta", "msgs", "digests", "ids")  # a session's keys, in the order the scripts take them
_LOCK_LEASE = 30.0  # seconds an update lock lives if its holder dies
_LOCK_WAIT = 60.0  # seconds a locked update waits for its turn
_LOCK_POLL = 0.005  # seconds between attempts to take the lock
_LOCKED_TRIES = 16  # retries under the lock, against writers that do not take it (save, append)

# KEYS of every script but `clear`: meta, msgs, digests, ids (`_PARTS`).
_COMMON = """
local function seal(id, version, count, ids, head)
  return redis.sha1hex(table.concat({id, version, count, ids, head}, '\\n'))
end
local function link_at(index)
  return string.sub(redis.call('LINDEX', KEYS[3], index) or '', 1, 40)
end
-- O(1): whether the stored session is whole (or absent: none of its keys), then its version, last rolling digest,
-- message count and number of ids
local function intact(id)
  local stored, version, count, sealed = unpack(redis.call('HMGET', KEYS[1], 'id', 'version', 'count', 'seal'))
  if not version then return redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4]) == 0, '0', '', 0, 0 end
  local n, ids, head = tonumber(count), redis.call('SCARD', KEYS[4]), link_at(-1)
  local whole = stored == id and sealed and n and redis.call('LLEN', KEYS[2]) == n
    and redis.call('LLEN', KEYS[3]) == n and seal(id, version, count, ids, head) == sealed
  return whole, version, head, n, ids
end
-- a stamp: the message's 16-byte digest, then ':<its id>' if it has one
local function id_of(stamp)
  if #stamp > 16 then return string.sub(stamp, 18) end
end
-- Push the messages ARGV[first + i - 1] (their stamps n further on) but those in `skip`, each digest rolled onto
-- `head`: the last rolling digest, how many messages were pushed and how many ids added.
local function push(first, n, skip, head)
  local bodies, links, ids, added = {}, {}, {}, 0
  for i = 1, n do
    if not skip[i] then
      local stamp = ARGV[first + n + i - 1]
      head = redis.sha1hex(head .. string.sub(stamp, 1, 16))
      bodies[#bodies + 1] = ARGV[first + i - 1]
      links[#links + 1] = head .. string.sub(stamp, 17)
      ids[#ids + 1] = id_of(stamp)
    end
  end
  for i = 1, #bodies, 1000 do
    local last = math.min(i + 999, #bodies)
    redis.call('RPUSH', KEYS[2], unpack(bodies, i, last))
    redis.call('RPUSH', KEYS[3], unpack(links, i, last))
  end
  for i = 1, #ids, 1000 do added = added + redis.call('SADD', KEYS[4], unpack(ids, i, math.min(i + 999, #ids))) end
  return head, #bodies, added
end
-- Store the new version (from the server clock, above the old one) and seal; with a TTL, one deadline for every
-- key (PEXPIREAT) so that they expire together.
local function seal_and_touch(id, version, count, ids, head, ttl_ms)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local new = string.format('%.0f', math.max(now, tonumber(version) + 1))
  count = string.format('%d', count)
  redis.call('HSET', KEYS[1], 'id', id, 'version', new, 'count', count, 'seal', seal(id, new, count, ids, head))
  if ttl_ms ~= '0' then
    local at = string.format('%.0f', math.floor(now / 1000) + tonumber(ttl_ms))
    for _, key in ipairs(KEYS) do redis.call('PEXPIREAT', key, at) end
  end
  return new
end
"""

SCRIPTS = {
    # ARGV: the version the caller has cached ('0': none, never a stored version).
    # -> {version, id, changed, messages?, count?, digests?, seal?, number of ids?}, or {'0', '', 0, how many of
    # the session's keys exist} if its meta key has no version
    "load": """
local version, id, count, sealed = unpack(redis.call('HMGET', KEYS[1], 'version', 'id', 'count', 'seal'))
if not version then return {'0', '', 0, redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4])} end
if version == ARGV[1] and version ~= '0' then return {version, id or '', 0} end
return {version, id or '', 1, redis.call('LRANGE', KEYS[2], 0, -1), count or '',
  redis.call('LRANGE', KEYS[3], 0, -1), sealed or '', redis.call('SCARD', KEYS[4])}
""",
    # -> {version, id, messages, digests}
    "stored": """
local version = redis.call('HGET', KEYS[1], 'version') or '0'
local id = redis.call('HGET', KEYS[1], 'id') or ''
return {version, id, redis.call('LRANGE', KEYS[2], 0, -1), redis.call('LRANGE', KEYS[3], 0, -1)}
""",
    # ARGV: base version, id, keep, ttl ms, n, n messages, n stamps
    # -> {1, version}, or {0, version} on a version conflict, or {-1, version} if it would keep damaged messages,
    # or {-2, id} if the id of a message to write would be stored twice
    "save": _COMMON
    + """
local whole, version, head, count = intact(ARGV[2])
if version ~= ARGV[1] then return {0, version} end
local keep, n = tonumber(ARGV[3]), tonumber(ARGV[5])
if keep > 0 and not (whole and keep <= count) then return {-1, version} end
local dropped, gone = {}, {}  -- the ids of the messages after `keep`
if keep > 0 and keep < count then
  for _, link in ipairs(redis.call('LRANGE', KEYS[3], keep, -1)) do
    if #link > 40 then
      dropped[#dropped + 1] = string.sub(link, 42)
      gone[dropped[#dropped]] = true
    end
  end
end
local seen = {}
for i = 1, n do
  local id = id_of(ARGV[5 + n + i])
  if id then
    if seen[id] or (keep > 0 and not gone[id] and redis.call('SISMEMBER', KEYS[4], id) == 1) then return {-2, id} end
    seen[id] = true
  end
end
if keep + n == 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
  return {1, '0'}
end
if keep == 0 then
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
  head = ''
elseif keep < count then
  redis.call('LTRIM', KEYS[2], 0, keep - 1)
  redis.call('LTRIM', KEYS[3], 0, keep - 1)
  for i = 1, #dropped, 1000 do redis.call('SREM', KEYS[4], unpack(dropped, i, math.min(i + 999, #dropped))) end
  head = link_at(keep - 1)
end
head = push(6, n, {}, head)
return {1, seal_and_touch(ARGV[2], version, keep + n, redis.call('SCARD', KEYS[4]), head, ARGV[4])}
""",
    "clear": "return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])",
    # ARGV: id, ttl ms, n, n messages, n stamps
    # -> {old version, new version, the ids already stored (those messages were skipped)}; new = old if nothing
    # was new, '-1' if the stored session is damaged (nothing was appended)
    "append": _COMMON
    + """
local whole, version, head, count, ids = intact(ARGV[1])
local n = tonumber(ARGV[3])
if n == 0 then return {version, version, {}} end
if not whole then return {version, '-1', {}} end
local skip, stored = {}, {}
for i = 1, n do
  local id = id_of(ARGV[3 + n + i])
  if id and redis.call('SISMEMBER', KEYS[4], id) == 1 then
    skip[i] = true
    stored[#stored + 1] = id
  end
end
if #stored == n then return {version, version, stored} end
local pushed, added
head, pushed, added = push(4, n, skip, head)
return {version, seal_and_touch(ARGV[1], version, count + pushed, ids + added, head, ARGV[2]), stored}
""",
    # -> 1 if some of the session's keys exist but its meta key (or the id in it) does not
    "orphaned": """
if redis.call('HGET', KEYS[1], 'id') then return 0 end
return math.min(redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4]), 1)
""",
    # KEYS: a session's update lock. ARGV: this holder's token, the lease in ms. -> 1 if taken
    "lock": "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0",
    # KEYS: the lock. ARGV: the token. Released only by its holder (a lease that ran out may be another's now).
    "unlock": "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
}


class RedisChatMemory(RedisBackend, ChatMemory):
    """Chat histories on Redis: `redis://`, `rediss://` or `redis+cluster://` URLs, or clients you built.

    `prefix` namespaces every key; `ttl` (seconds) expires a session that has not been written for that long.
    The async methods work from any event loop (an async client per loop, made on first use, closed with the
    loop); `async_client` serves the first loop that uses this object. Without one, they run the sync client's
    calls in worker threads.
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
        self.prefix = check_prefix(prefix)
        ttl = check_ttl(ttl)
        self._ttl_ms = str(ttl_milliseconds(ttl)) if ttl else "0"  # "0": no ttl
        self._cache = SnapshotCache(cache_size)
        self._connect(url_or_client, async_client, socket_timeout, SCRIPTS)

    def __repr__(self) -> str:
        return f"RedisChatMemory({self._url!r}, prefix={self.prefix!r})"

    # Key naming ---------------------------------------------------------------------------------------------

    def _keys(self, session_id: str) -> list[str]:
        tag = hashlib.sha256(session_id.encode("utf-8")).hexdigest()
        return [f"{self.prefix}:{{{tag}}}:{part}" for part in _PARTS]

    def _lock_key(self, session_id: str) -> str:
        """The key of the session's update lock (same hash tag as its data; not one of `_PARTS`)."""
        return self._keys(check_id(session_id))[0][: -len("meta")] + "lock"

    # Operations as I/O-free steps ---------------------------------------------------------------------------

    def _load_versioned(self, session_id: str) -> Steps[History]:
        """Return the session's messages and version (one round trip; cached messages when unchanged)."""
        with self._errors(session_id):
            keys = self._keys(check_id(session_id))
            cached = self._cache.get(session_id) or EMPTY
            version_raw, stored_id, changed, *rest = yield Script("load", keys, [str(cached.version)])
            if len(rest) == 1:  # no meta key (or no version in it): absent, unless some other key remains
                self._cache.drop(session_id)
                if rest[0]:
                    raise _corrupt(session_id, "its meta key is gone (evicted or deleted) while its other keys remain")
                return History([], 0)
            version = int(version_raw)
            if as_text(stored_id) != session_id:
                raise _corrupt(session_id, f"its meta key names another session ({as_text(stored_id)!r})")
            if changed:
                raws, count, links, sealed, ids = rest
                if not count or int(count) != len(raws):  # a list cut short or added to behind memwoven's back
                    found = f"it should have {as_text(count) or '?'} messages; found {len(raws)}"
                    raise _corrupt(session_id, found)
                bodies = [as_text(raw) for raw in raws]
                messages = [decode_message(session_id, i, body) for i, body in enumerate(bodies)]
                try:
                    carried = len(message_ids(messages))
                except InvalidInputError as error:
                    raise _corrupt(session_id, str(error)) from None
                chain = _chain([_stamp(body, m) for body, m in zip(bodies, messages)])
                last = chain[-1] if chain else b""
                if chain != links or ids != carried or sealed != _seal(session_id, version, len(chain), carried, last):
                    raise _corrupt(session_id, "its messages, digests, ids or version are not as written")
                cached = Snapshot(version, messages)
                self._cache.put(session_id, cached)
            return History(list(cached.messages), version)

    load_versioned, aload_versioned = twins(_load_versioned)

    def _save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> Steps[int]:
        """Replace the session's history, writing only the changed suffix."""
        with self._errors(session_id):
            keys = self._keys(check_id(session_id))
            edit = prepare_edit(messages, self._cache.get(session_id))  # validated before anything is written
            new = edit.messages
            message_ids(new[edit.same :])  # CM10; the script checks the ids written against those kept
            trust_cache, damaged_at = True, None  # damaged_at: the version of a damaged history being replaced
            while True:
                cached = self._cache.get(session_id) if trust_cache else None
                if damaged_at is not None:  # the stored messages are damaged: keep none of them
                    base, keep, bodies = damaged_at, 0, [encode_message(m) for m in new]
                elif cached is not None and expected_version in (None, cached.version):
                    base = cached.version
                    keep = edit.same if cached is edit.base else same_prefix(new, cached.messages)
                    bodies = [encode_message(m) for m in new[keep:]]
                else:  # nothing remembered at the right version: keep the stored messages equal to the new ones
                    version_raw, _, raws, links = yield Script("stored", keys[:3], [])
                    base = int(version_raw)
                    if expected_version is not None and base != expected_version:
                        raise self._conflict(session_id, base, expected_version)
                    bodies = [encode_message(m) for m in new]
                    keep = _verified_prefix(raws, links, bodies, _chain(map(_stamp, bodies, new)))
                    bodies = bodies[keep:]
                args: list[str | bytes | int] = [str(base), session_id, keep, self._ttl_ms, len(bodies)]
                stamps = map(_stamp, bodies, new[keep:])
                ok, reply = yield Script("save", keys, [*args, *bodies, *stamps])
                if ok == 1:
                    version = int(reply)
                    self._cache.put(session_id, Snapshot(version, new))
                    return version
                if ok == -2:  # an id written is one kept or written twice: name it (CM10)
                    message_ids(new)
                    stray = f"its ids key holds {as_text(reply)!r}, which none of its messages carries"
                    raise _corrupt(session_id, stray)
                if ok == -1 and expected_version is not None:
                    raise _corrupt(
                        session_id, "its stored messages are damaged; save without a version to replace them"
                    )
                if ok == -1:
                    logger.warning("session %r: replacing its damaged history whole", session_id)
                    damaged_at = int(reply)  # a plain save replaces a damaged history: the way to repair it
                    continue
                if expected_version is not None:
                    raise self._conflict(session_id, int(reply), expected_version)
                logger.debug("session %r: changed by another writer during a save; comparing again", session_id)
                # another writer got in between (perhaps repairing a damaged history): compare again, from what
                # is stored now
                trust_cache, damaged_at = False, None

    save, asave = twins(_save)

    def _append(self, session_id: str, messages: MessagesIn) -> Steps[int]:
        """Append atomically (one script call)."""
        with self._errors(session_id):
            keys = self._keys(check_id(session_id))
            added = coerce_messages(messages)
            message_ids(added)  # CM10: two messages with one id are refused before anything is sent
            bodies = [encode_message(m) for m in added]
            args: list[str | bytes | int] = [session_id, self._ttl_ms, len(bodies)]
            old_raw, new_raw, stored = yield Script("append", keys, [*args, *bodies, *map(_stamp, bodies, added)])
            old, new = int(old_raw), int(new_raw)
            if new == -1:
                raise _corrupt(session_id, "its stored messages are damaged; nothing was appended")
            cached = self._cache.get(session_id)
            if cached is not None and cached.version == old and old != new:  # nobody else wrote in between
                written = not_stored(added, {as_text(i) for i in stored})
                self._cache.put(session_id, Snapshot(new, cached.messages + written))
            return new

    append, aappend = twins(_append)

    def _sessions(self) -> Steps[list[str]]:
        """The ids of this prefix's sessions (found with SCAN, never KEYS), sorted."""
        with self._errors(None):
            keys = [as_text(key) for key in (yield Scan(f"{self.prefix}:{{*}}:*"))]
            metas = [key for key in keys if key.endswith(":meta")]
            ids = yield Fields(metas, "id")
            named = {meta[: -len("meta")] for meta, i in zip(metas, ids) if i is not None}
            unnamed = {key[: key.rindex(":") + 1] for key in keys if key.rpartition(":")[2] in _PARTS} - named
            lost = []
            for base in sorted(unnamed):  # confirmed atomically: a session being cleared or expiring is not damage
                if (yield Script("orphaned", [base + part for part in _PARTS], [])):
                    lost.append(base + "*")
            if lost:
                logger.warning("prefix %r: sessions without their meta key: %s", self.prefix, lost)
                raise CorruptMemoryError(
                    f"prefix {self.prefix!r}: {len(lost)} session(s) lost their meta key (evicted or deleted) while "
                    f"their messages remain, so their ids are unknown: {', '.join(lost)}; clear(session_id) or delete "
                    "those keys"
                )
            return sorted(as_text(i) for i in ids if i is not None)

    sessions, asessions = twins(_sessions)

    def _clear(self, session_id: str) -> Steps[None]:
        """Delete the session's keys."""
        with self._errors(session_id):
            yield Script("clear", self._keys(check_id(session_id)), [])
            self._cache.drop(session_id)

    clear, aclear = twins(_clear)

    def _conflict(self, session_id: str, actual: int, expected: int) -> ConcurrentModificationError:
        return ConcurrentModificationError(
            f"session {session_id!r} is at version {actual}, not {expected}; reload and retry"
        )

    def _errors(self, session_id: str | None) -> contextlib.AbstractContextManager[None]:
        """Redis errors of an operation on the session (None: on sessions) as memwoven errors naming it."""
        return redis_errors(self._url, "a session" if session_id is None else f"session {session_id!r}")

    def _lock_steps(self, session_id: str, token: str) -> Steps[None]:
        """Take the session's update lock for `token`, waiting up to `_LOCK_WAIT` (then raising a conflict)."""
        with self._errors(session_id):
            key, deadline = self._lock_key(session_id), time.monotonic() + _LOCK_WAIT
            while not (yield Script("lock", [key], [token, int(_LOCK_LEASE * 1000)])):
                if time.monotonic() >= deadline:
                    raise ConcurrentModificationError(f"session {session_id!r}: its update lock stayed busy; retry")
                yield Sleep(_LOCK_POLL)

    def _unlock_steps(self, session_id: str, token: str) -> Steps[None]:
        """Release the session's update lock if `token` still holds it (a lease that ran out may be another's now)."""
        with self._errors(session_id):
            yield Script("unlock", [self._lock_key(session_id)], [token])

    def _update_locked(self, session_id: str, change: Callable[[list[Message]], MessagesIn]) -> int:
        """`update` after repeated conflicts: the optimistic loop again, but with the writers that also ended up
        here taking turns under a Redis lock (a lease). The version check still decides what is written, so a
        lease that runs out while `change` is slow can cost a retry, never a lost write."""
        token = uuid.uuid4().hex
        try:  # taken inside: interrupted once the server set the lock, it is released (`_unlock_steps` checks)
            self._run(self._lock_steps(session_id, token))
            version = self._try_update(session_id, change, _LOCKED_TRIES, _pause_under_lock)
        finally:
            self._run(self._unlock_steps(session_id, token))
        return _locked_result(session_id, version)

    async def _aupdate_locked(
        self, session_id: str, change: Callable[[list[Message]], MessagesIn | Awaitable[MessagesIn]]
    ) -> int:
        """`_update_locked` from async code, where `change` may be a coroutine function. A cancelled update releases
        the lock at once (not when the lease runs out), even if cancelled while taking it (the server may have set
        it already) or while releasing it (the release runs to its end, `finished_first`)."""
        token = uuid.uuid4().hex
        try:
            await self._arun(self._lock_steps(session_id, token))
            version = await self._atry_update(session_id, change, _LOCKED_TRIES, _pause_under_lock)
        finally:
            await finished_first(lambda _: self._arun(self._unlock_steps(session_id, token)))
        return _locked_result(session_id, version)


def _locked_result(session_id: str, version: int | None) -> int:
    if version is None:
        raise ConcurrentModificationError(f"session {session_id!r} kept changing under its update lock; retry")
    return version


def _corrupt(session_id: str, what: str) -> CorruptMemoryError:
    """The error for a damaged session, logged (its keys need a look, or a plain save to replace them)."""
    logger.warning("session %r: %s", session_id, what)
    return CorruptMemoryError(f"session {session_id!r}: {what}")


def _stamp(body: str, message: Message) -> bytes:
    """What the scripts are sent with each message: the digest of its `body`, then ':<its id>' if it has one."""
    body_digest = digest(body)
    return body_digest if message.id is None else body_digest + b":" + message.id.encode("utf-8")


def _chain(stamps: Iterable[bytes]) -> list[bytes]:
    """The `digests` list of messages with these stamps, as the scripts' `push` writes it: for each, the SHA-1
    (hex) of the rolling digest before it and its own digest, then ':<its id>' if it has one."""
    links, head = [], b""
    for stamp in stamps:
        head = hashlib.sha1(head + stamp[:16], usedforsecurity=False).hexdigest().encode()
        links.append(head + stamp[16:])
    return links


def _seal(session_id: str, version: int, count: int, ids: int, last: bytes) -> bytes:
    """The scripts' `seal` of a session whose last `digests` entry is `last`."""
    text = f"{session_id}\n{version}\n{count}\n{ids}\n".encode() + last[:40]
    return hashlib.sha1(text, usedforsecurity=False).hexdigest().encode()


def _verified_prefix(
    raws: Sequence[bytes], links: Sequence[bytes], bodies: Sequence[str], chain: Sequence[bytes]
) -> int:
    """How many leading stored messages equal the new ones, body and rolling digest (so are worth keeping)."""
    kept = 0
    for raw, link, body, mine in zip(raws, links, bodies, chain):
        if link != mine or as_text(raw) != body:
            break
        kept += 1
    return kept


def _pause_under_lock(attempt: int) -> float:
    return _LOCK_POLL * attempt
