"""Items of an `ItemMemory` on Redis (standalone or Cluster), with no server modules required.

A memory (one `prefix`) lives in four keys that share one hash tag, the prefix itself, so they sit in one cluster
slot and every write is one Lua script that changes them atomically::

    <prefix>:items:{<prefix>}:data    hash  member -> "<version>,<created ms>,<updated ms>,<ttl ms>,<ttl>,<JSON>"
    <prefix>:items:{<prefix>}:index   sorted set of the members, all scored 0: ordered by their bytes
    <prefix>:items:{<prefix>}:expiry  sorted set: member -> expires_at (epoch ms), for the items that expire
    <prefix>:items:{<prefix>}:clock   the last version given out

An item's member is its namespace encoded (`memwoven.backends._items`: escaped labels, each followed by
``\\x01``), NUL (in no label or key) and its key. The members under a namespace prefix are therefore one range
of the index (`ZRANGEBYLEX`), label boundaries included (``("a",)`` never reaches ``("ab",)``), so `list`,
`count` and `namespaces` read only the prefix's items, in chunks of at most `_CHUNK` (one script call each).
`namespaces` skips from one namespace to the next in the index, reading only the members of each until a live one.
Filters, the key range (after/before), the order (by key, then namespace) and the page are computed in Python
over the prefix's live items (`ItemQuery.answer`). A listing is consistent per chunk, not across chunks.

The trade-off of one slot per memory: `put_many` across any namespaces is one atomic script (all or nothing,
every expected version checked first), but one memory is served by one cluster node; memories with different
prefixes spread over the cluster. Use several prefixes to spread a very large memory.

Versions come from the server clock (microseconds), above the item's stored version and the memory's `clock`,
so they only grow, even across a delete or a server clock going back. Expiry is measured on
`memwoven._clock.wall_ms()`, sent with every call (like the SQL backend): an item whose expires_at is not after
now reads as absent everywhere, version 0 included, until `cleanup_expired()` deletes it. Redis does not expire
the keys itself (they hold the whole memory).

A key prefix is a boundary (`check_prefix`: a prefix holds no ``{``, so the first ``{`` of a key ends it), and
these keys never look like the chat backend's (``<prefix>:{<sha256>}:meta``...) or the vector backend's
(``<prefix>:vec:{<collection>}:...``). A record or member memwoven did not write raises `CorruptMemoryError`.

As in `memwoven.backends.redis`, each hook is a generator of steps yielding script calls; the sync API runs them
with the sync client, the async twins with the event loop's client (`memwoven.backends._redis`).
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

import memwoven._clock as _clock
from memwoven._steps import Steps
from memwoven.backends._items import (
    check_stored_item,
    decode_namespace,
    decode_value,
    encode_namespace,
    encode_value,
    prefix_range,
    ttl_milliseconds,
)
from memwoven.backends._redis import RedisBackend, Script, as_text, check_prefix, logger, redis_errors
from memwoven.contracts import CheckedWrite, ItemAddress, ItemMemory, ItemQuery, Namespace, check_expected
from memwoven.errors import CorruptMemoryError
from memwoven.models import Item

__all__ = ["RedisItemMemory"]

_PARTS = ("data", "index", "expiry", "clock")  # a memory's keys, in the order the scripts take them
_CHUNK = 1000  # index members per script call of a listing
_NAMESPACES_PER_CALL = 500  # namespaces per script call of `namespaces`
_Member = bytes  # an item's index member: encoded namespace, NUL, key (UTF-8)
_DISAGREE = (
    "its data hash and its index hold different numbers of items (a key evicted or deleted, a record lost), or an "
    "index member is scored other than 0"
)

# KEYS of every script: data, index, expiry, clock (`_PARTS`).
_COMMON = """
local function live(member, now)
  local at = redis.call('ZSCORE', KEYS[3], member)
  return not at or tonumber(at) > now
end
-- every write, delete and expiry changes the data hash and the index together, scoring every member 0 (the
-- index is ordered by bytes for ZRANGEBYLEX, which another score breaks): a listing that finds them of different
-- sizes (a key evicted or deleted, a record lost) or another score reports it instead of listing what remains
local function intact()
  local members = redis.call('ZCARD', KEYS[2])
  return redis.call('HLEN', KEYS[1]) == members and redis.call('ZCOUNT', KEYS[2], 0, 0) == members
end
"""

SCRIPTS = {
    # ARGV: now (ms), refresh ('1' or '0'), members. -> per member: its record ('' if the index holds it without
    # one) and expires_at ('' never), or nil and nil if absent or expired. With refresh, an item with a ttl
    # expires ttl ms from now.
    "read": _COMMON
    + """
local now, out = tonumber(ARGV[1]), {}
for i = 3, #ARGV do
  local member = ARGV[i]
  local record, at = redis.call('HGET', KEYS[1], member), redis.call('ZSCORE', KEYS[3], member)
  if not record and redis.call('ZSCORE', KEYS[2], member) then record = '' end -- indexed, no record: damaged
  if record and at and tonumber(at) <= now then record = false end
  if record and at and ARGV[2] == '1' then -- an item with a ttl has an expiry (else it is damaged: left as is)
    local ttl_ms = string.match(record, '^%d+,%d+,%d+,(%d+),')
    if ttl_ms then
      at = string.format('%.0f', now + tonumber(ttl_ms))
      redis.call('ZADD', KEYS[3], at, member)
    end
  end
  out[#out + 1] = record
  out[#out + 1] = record and (at or '') or false
end
return out
""",
    # ARGV: now (ms), n, then per write: member, expected version ('' none), ttl ms ('' none), ttl, value JSON.
    # -> {1, the new versions...}; or, with nothing written, {0, i, current version} if write i expects another
    # version, {-1, i} if write i expects a version and its stored record is damaged
    "write": _COMMON
    + """
local now, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local stored, created, written = {}, {}, {}
for i = 1, n do
  local member, expected = ARGV[5 * i - 2], ARGV[5 * i - 1]
  local record = redis.call('HGET', KEYS[1], member)
  local version, made, updated, current = nil, nil, nil, '0'
  if record then
    version, made, updated = string.match(record, '^(%d+),(%d+),(%d+),')
    -- a live record whose version no write gives (none, '0', a leading zero) is damaged: never "absent"
    if live(member, now) then current = version and string.match(version, '^[1-9]%d*$') else made = nil end
  end
  if expected ~= '' then
    if not current then return {-1, i} end
    if current ~= expected then return {0, i, current} end
  end
  -- updated_at grows with every write of an item, even within one millisecond (IM3)
  written[i] = math.max(now, tonumber(updated or '-1') + 1)
  stored[i], created[i] = tonumber(version or '0'), made or string.format('%.0f', written[i])
end
local t = redis.call('TIME')
local clock = tonumber(redis.call('GET', KEYS[4]) or '0') or 0
clock = math.max(clock, tonumber(t[1]) * 1000000 + tonumber(t[2]) - 1)
local versions = {1}
for i = 1, n do
  local member, ttl_ms = ARGV[5 * i - 2], ARGV[5 * i]
  clock = math.max(clock + 1, stored[i] + 1)
  local version = string.format('%.0f', clock)
  local at = string.format('%.0f', written[i])
  local record = table.concat({version, created[i], at, ttl_ms, ARGV[5 * i + 1], ARGV[5 * i + 2]}, ',')
  redis.call('HSET', KEYS[1], member, record)
  redis.call('ZADD', KEYS[2], 0, member)
  if ttl_ms == '' then
    redis.call('ZREM', KEYS[3], member)
  else
    redis.call('ZADD', KEYS[3], string.format('%.0f', written[i] + tonumber(ttl_ms)), member)
  end
  versions[#versions + 1] = version
end
redis.call('SET', KEYS[4], string.format('%.0f', clock))
return versions
""",
    # ARGV: now (ms), the expected version of the first member ('' none), members.
    # -> {1, how many were live}; or, with nothing deleted, {0, current version} or {-1} (damaged record)
    "delete": _COMMON
    + """
local now = tonumber(ARGV[1])
if ARGV[2] ~= '' then
  local record, current = redis.call('HGET', KEYS[1], ARGV[3]), '0'
  if record and live(ARGV[3], now) then current = string.match(record, '^([1-9]%d*),') end -- as in "write"
  if not current then return {-1} end
  if current ~= ARGV[2] then return {0, current} end
end
local existed = 0
for i = 3, #ARGV do
  if redis.call('HDEL', KEYS[1], ARGV[i]) == 1 and live(ARGV[i], now) then existed = existed + 1 end
  redis.call('ZREM', KEYS[2], ARGV[i])
  redis.call('ZREM', KEYS[3], ARGV[i])
end
return {1, existed}
""",
    # ARGV: from, to (ZRANGEBYLEX bounds), how many members at most, now (ms), '1' for the records, '0' a count.
    # -> {how many members were scanned, the last one, {member, expires_at ('' never), record (nil if none)} of
    # each live one, flattened, or how many are live}; {-1} if the data hash and the index disagree
    "range": _COMMON
    + """
if not intact() then return {-1} end
local now = tonumber(ARGV[4])
local members = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local out, live = {}, 0
for _, member in ipairs(members) do
  local at = redis.call('ZSCORE', KEYS[3], member)
  if not at or tonumber(at) > now then
    live = live + 1
    if ARGV[5] == '1' then
      out[#out + 1] = member
      out[#out + 1] = at or ''
      out[#out + 1] = redis.call('HGET', KEYS[1], member)
    end
  end
end
if ARGV[5] ~= '1' then out = live end
return {#members, members[#members] or '', out}
""",
    # ARGV: from, to (ZRANGEBYLEX bounds), how many namespaces at most, now (ms).
    # -> {the encoded namespaces holding a live item, in order; where to go on from ('' done)}, or
    # {those, '', a member without NUL} if the index holds one memwoven did not write, {{}, '', -1} if the data
    # hash and the index disagree
    "namespaces": _COMMON
    + """
if not intact() then return {{}, '', -1} end
local now, limit = tonumber(ARGV[4]), tonumber(ARGV[3])
local from, found = ARGV[1], {}
while #found < limit do
  local first = redis.call('ZRANGEBYLEX', KEYS[2], from, ARGV[2], 'LIMIT', 0, 1)[1]
  if not first then return {found, ''} end
  local cut = string.find(first, '\\0', 1, true)
  if not cut then return {found, '', first} end
  local namespace = string.sub(first, 1, cut - 1)
  -- the namespace's own members are [namespace .. NUL, namespace .. \\1); deeper namespaces come after them
  local cursor, stop, alive = '[' .. first, '(' .. namespace .. '\\1', false
  while not alive do
    local members = redis.call('ZRANGEBYLEX', KEYS[2], cursor, stop, 'LIMIT', 0, 100)
    for _, member in ipairs(members) do
      if live(member, now) then
        alive = true
        break
      end
    end
    if #members < 100 then break end
    cursor = '(' .. members[#members]
  end
  if alive then found[#found + 1] = namespace end
  from = '[' .. namespace .. '\\1'
end
return {found, from}
""",
    # ARGV: now (ms), how many at most. -> how many expired items were deleted
    "expire": """
local members = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local removed = 0
for _, member in ipairs(members) do
  removed = removed + redis.call('HDEL', KEYS[1], member)
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZREM', KEYS[3], member)
end
return {#members, removed}
""",
}


class RedisItemMemory(RedisBackend, ItemMemory):
    """Items on Redis: a `redis://`, `rediss://` or `redis+cluster://` URL, or clients you built.

    `prefix` names the memory: its keys, all in one cluster slot (see the module's documentation), never reach
    another prefix's. The async methods work from any event loop, as `RedisChatMemory`'s do; `async_client`
    serves the first loop that uses this object.
    """

    _reads_text_replies = True

    def __init__(
        self,
        url_or_client: str | redis.Redis | redis.cluster.RedisCluster,
        *,
        prefix: str = "memwoven",
        async_client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster | None = None,
        socket_timeout: float = 10.0,
    ) -> None:
        self.prefix = check_prefix(prefix)
        self._keys = [f"{prefix}:items:{{{prefix}}}:{part}" for part in _PARTS]
        self._connect(url_or_client, async_client, socket_timeout, SCRIPTS)

    def __repr__(self) -> str:
        return f"RedisItemMemory({self._url!r}, prefix={self.prefix!r})"

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """Redis errors of an operation as memwoven errors naming the memory."""
        return redis_errors(self._url, f"item memory {self.prefix!r}")

    # The hooks of `ItemMemory` -------------------------------------------------------------------------------

    def _read(self, addresses: Sequence[ItemAddress], refresh: bool) -> Steps[builtins.list[Item | None]]:
        with self._errors():
            members = [_member(namespace, key) for namespace, key in addresses]
            reply = yield Script("read", self._keys, [_clock.wall_ms(), int(refresh), *members])
            return [
                None if record is None else _item(address, record, expires)
                for address, record, expires in zip(addresses, reply[0::2], reply[1::2])
            ]

    def _write(self, writes: Sequence[CheckedWrite]) -> Steps[builtins.list[int]]:
        with self._errors():
            args: builtins.list[str | bytes | int] = [_clock.wall_ms(), len(writes)]
            for namespace, key, value, ttl, expected in writes:
                timing = ["", ""] if ttl is None else [str(ttl_milliseconds(ttl)), repr(ttl)]
                args += [_member(namespace, key), "" if expected is None else str(expected), *timing]
                args.append(encode_value(value))
            reply = yield Script("write", self._keys, args)
            status = int(reply[0])
            if status == 1:
                return [int(version) for version in reply[1:]]
            namespace, key, _, _, expected = writes[int(reply[1]) - 1]
            if status == -1:
                raise _corrupt((namespace, key), "its stored version is damaged; write it without expected_version")
            check_expected(namespace, key, int(reply[2]), expected)
            raise AssertionError("the write script refused a write whose version matches")  # pragma: no cover

    def _delete_items(self, addresses: Sequence[ItemAddress], expected: int | None) -> Steps[int]:
        with self._errors():
            members = [_member(namespace, key) for namespace, key in addresses]
            args: builtins.list[str | bytes | int] = [_clock.wall_ms(), "" if expected is None else str(expected)]
            args += members
            reply = yield Script("delete", self._keys, args)
            status = int(reply[0])
            if status == -1:
                raise _corrupt(addresses[0], "its stored version is damaged; delete it without expected_version")
            if status == 0:
                check_expected(*addresses[0], int(reply[1]), expected)
            return int(reply[1])

    def _select(self, query: ItemQuery) -> Steps[builtins.list[Item]]:
        found: builtins.list[Item] = []
        for chunk in (yield from self._scan(query.prefix, records=True)):
            for i in range(0, len(chunk), 3):  # member, expires_at, record
                found.append(_item(_address(chunk[i]), chunk[i + 2], chunk[i + 1]))
        return query.answer(found)

    def _count_matching(self, query: ItemQuery) -> Steps[int]:
        if query.predicate is not None:
            return len((yield from self._select(query)))
        counts = yield from self._scan(query.prefix, records=False)  # counted by the script: nothing read back
        return sum(int(count) for count in counts)

    def _stored_namespaces(self, prefix: Namespace) -> Steps[builtins.list[Namespace]]:
        with self._errors():
            start, stop = _bounds(prefix)
            found: builtins.list[Namespace] = []
            while start:
                args: builtins.list[str | bytes | int] = [start, stop, _NAMESPACES_PER_CALL, _clock.wall_ms()]
                encoded, start, *stray = yield Script("namespaces", self._keys, args)
                if stray == [-1]:
                    raise _corrupt(None, _DISAGREE)
                if stray:
                    raise _corrupt(None, f"its index holds {as_text(stray[0])[:200]!r}, which names no item")
                found += [_namespace(name) for name in encoded]
            return found

    def _expire(self) -> Steps[int]:
        with self._errors():
            removed = 0
            while True:
                scanned, deleted = yield Script("expire", self._keys, [_clock.wall_ms(), _CHUNK])
                removed += int(deleted)
                if int(scanned) < _CHUNK:
                    return removed

    # Helpers ------------------------------------------------------------------------------------------------

    def _scan(self, prefix: Namespace, *, records: bool) -> Steps[builtins.list[Any]]:
        """The "range" script's answer for each chunk of the index under `prefix`, in order: the live items
        (member, expires_at, record, flattened) with `records`, else how many are live."""
        with self._errors():
            start, stop = _bounds(prefix)
            chunks = []
            while True:
                args: builtins.list[str | bytes | int] = [start, stop, _CHUNK, _clock.wall_ms(), int(records)]
                scanned, *rest = yield Script("range", self._keys, args)
                if scanned == -1:
                    raise _corrupt(None, _DISAGREE)
                last, found = rest
                chunks.append(found)
                if int(scanned) < _CHUNK:
                    return chunks
                start = b"(" + _bytes(last)


def _member(namespace: Namespace, key: str) -> _Member:
    """An item's index member (and field of the data hash)."""
    return f"{encode_namespace(namespace)}\x00{key}".encode()


def _bounds(prefix: Namespace) -> tuple[bytes, bytes]:
    """The ZRANGEBYLEX bounds of the members under `prefix` (every member for ())."""
    if not prefix:
        return b"-", b"+"
    low, high = prefix_range(prefix)
    return b"[" + low.encode(), b"(" + high.encode()


def _bytes(value: bytes | str) -> bytes:
    """A reply as bytes (a client you built may decode replies)."""
    return value if isinstance(value, bytes) else value.encode()


def _namespace(encoded: bytes | str) -> Namespace:
    try:
        return decode_namespace(as_text(encoded))
    except ValueError:
        raise _corrupt(None, f"its index holds {as_text(encoded)[:200]!r}, which is no namespace") from None


def _address(member: bytes | str) -> ItemAddress:
    """The (namespace, key) of an index member."""
    encoded, nul, key = _bytes(member).partition(b"\x00")
    try:
        if not nul or not key:
            raise ValueError("no key")
        return decode_namespace(encoded.decode()), key.decode()
    except ValueError:
        raise _corrupt(None, f"its index holds {_bytes(member)[:200]!r}, which names no item") from None


def _item(address: ItemAddress, record: bytes | str | None, expires: bytes | str) -> Item:
    """The `Item` at `address` from its stored record and expiry ('' never)."""
    if not record:
        raise _corrupt(address, "it is in the index but has no record")
    try:
        version, created, updated, ttl_ms, ttl, value = as_text(record).split(",", 5)
        if not (version.isascii() and version.isdigit() and version[0] != "0"):  # as the scripts' compare-and-set
            raise ValueError(f"version {version[:40]!r} is none a write gives")
        expires_at = as_text(expires)
        if bool(expires_at) != bool(ttl_ms) or bool(ttl) != bool(ttl_ms):  # every write and refresh keeps them together
            raise ValueError("an expiry without a ttl, or a ttl without an expiry")
        expires_ms = int(float(expires_at)) if expires_at else None
        item = Item.model_construct(
            namespace=address[0],
            key=address[1],
            value=decode_value(value),
            version=int(version),
            created_at=_clock.utc(int(created)),
            updated_at=_clock.utc(int(updated)),
            expires_at=None if expires_ms is None else _clock.utc(expires_ms),
            ttl=float(ttl) if ttl else None,
        )
        check_stored_item(item.version, expires_ms, item.ttl)
    except (ValueError, CorruptMemoryError, OverflowError) as error:  # OverflowError: a time beyond datetime's range
        raise _corrupt(address, f"its stored record is damaged ({error})") from None
    return item


def _corrupt(address: ItemAddress | None, what: str) -> CorruptMemoryError:
    """The error for damaged storage, logged (the keys need a look; a plain put or delete replaces an item)."""
    subject = "an item memory" if address is None else f"item {address[1]!r:.200} in {address[0]!r:.200}"
    logger.warning("%s: %s", subject, what)
    return CorruptMemoryError(f"{subject}: {what}")
