"""`SQLItemMemory`: the items of an `ItemMemory` in SQLite, PostgreSQL or MariaDB/MySQL, one row each.

One table, ``{prefix}items`` (`memwoven.backends.sql._schema`): the primary key is the SHA-256 of the item's
address (`_address`), the namespace and the key are stored as text compared in code point order (SQLite's BINARY
collation, PostgreSQL ``COLLATE "C"``, UTF-8 bytes in a BLOB on MariaDB/MySQL), the value as its JSON text, the
version, the creation and update times (epoch ms), the expiry (``expires_at_ms``, indexed; NULL: never) and the
``ttl`` that set it. The key is a digest rather than (namespace, key) itself because ids are up to 64 KiB, beyond
what a PostgreSQL or InnoDB index entry holds.

The namespace encoding. A namespace is stored as one string: each label, escaped, followed by ``\\x01``::

    encode(("a", "b")) == "a\\x01b\\x01"      escapes: "\\x02" -> "\\x02\\x03", "\\x01" -> "\\x02\\x02"

Labels never hold NUL (`check_id`), so after escaping every label character is ``\\x02`` or above and the
separator sorts below all of them. Hence (1) the namespaces *starting with* a prefix, label by label, are exactly
the strings starting with the prefix's encoding: ``("a",)`` is ``"a\\x01"``, which ``"ab\\x01"`` does not start
with (a prefix is a label boundary); (2) those strings form one range, ``[P, P[:-1] + "\\x02")``, which an index
scans; (3) the strings sort as the tuples do (a shorter label, followed by the separator, sorts first), so
``ORDER BY item_key, namespace`` is the contract's order. The indexed column is ``ns_head``, the first
`HEAD_CHARS` characters of the encoding: a prefix that short is a range on it; a longer one is an equality on
its head plus the range on the full text.

Every write runs in one transaction. On PostgreSQL and MariaDB a write first inserts placeholder rows (version 0)
for the items it writes that are absent, ignoring those that exist, then locks them all (``FOR UPDATE``, in
address order), so that compare-and-set sees the latest committed version and a concurrent creation of the same
item waits; the placeholders are overwritten (or rolled back) before the transaction ends, so no reader sees
them. SQLite runs writes one at a time (``BEGIN IMMEDIATE``). `put_many` checks every expected version before it
writes anything: all or nothing.

`list` and `count`: SQL selects the namespace prefix, the key range (after/before), the live items and the order.
(MariaDB/MySQL compare BLOBs in ORDER BY and DISTINCT on their first ``max_sort_length`` bytes only, so
there the rows are re-sorted in Python, exactly, and paged there; `namespaces` adds the SHA-2 of each namespace
to its DISTINCT.) The filter (`memwoven.filters`, dotted paths) is evaluated in Python over the rows of that
prefix, and `limit` and `offset` are applied after it. Pushing the filter down to the database (SQLite JSON1,
PostgreSQL jsonb, MariaDB JSON_EXTRACT) is the next step, all of it at once: a half pushed-down filter would page
wrongly.
`namespaces` selects the distinct namespaces of the fixed leading labels of `prefix` in SQL, then matches the
wildcards and the suffix in Python (`namespace_matches`).

Expiry is measured on `memwoven._clock.wall_ms()`: an item whose ``expires_at_ms`` is not after now reads as
absent everywhere, version 0 included, until `cleanup_expired()` deletes it.
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

import memwoven._clock as _clock
from memwoven._steps import Steps, twins
from memwoven.backends.sql._base import SQLBackend
from memwoven.backends.sql._engine import Work
from memwoven.backends.sql._schema import HEAD_CHARS, key_of, upsert
from memwoven.contracts import (
    WILDCARD,
    Filter,
    ItemKeys,
    ItemMemory,
    ItemOrder,
    ItemWrite,
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
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError
from memwoven.filters import Predicate, compile_filter
from memwoven.models import FrozenDict, Item, freeze_json

__all__ = ["SQLItemMemory", "decode_namespace", "encode_namespace"]

_SEPARATOR = "\x01"
_ESCAPE = "\x02"
_ESCAPED = re.compile("\x02(.)", re.DOTALL)
_IN_CHUNK = 500  # addresses per IN (...): far below every driver's parameter limit
_MYSQL = ("mysql", "mariadb")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_COLUMNS = ("namespace", "item_key", "value", "version", "created_ms", "updated_ms", "expires_at_ms", "ttl")


def encode_namespace(namespace: Sequence[str]) -> str:
    """The stored form of a namespace (or a prefix): each label escaped, then followed by the separator."""
    return "".join(
        label.replace(_ESCAPE, "\x02\x03").replace(_SEPARATOR, "\x02\x02") + _SEPARATOR for label in namespace
    )


def decode_namespace(encoded: str) -> Namespace:
    """The namespace `encode_namespace` encoded."""
    if not encoded.endswith(_SEPARATOR):
        raise ValueError("an encoded namespace ends with the separator")
    return tuple(
        _ESCAPED.sub(lambda m: _SEPARATOR if m[1] == "\x02" else _ESCAPE, label)
        for label in encoded[:-1].split(_SEPARATOR)
    )


def _address(encoded_namespace: str, key: str) -> str:
    """The row key of an item: the SHA-256 of its encoded namespace, NUL (in no label or key) and its key."""
    return key_of(f"{encoded_namespace}\x00{key}")


class _Row:
    """An item's row as read: the columns of `_COLUMNS`."""

    __slots__ = _COLUMNS

    namespace: str
    item_key: str
    value: str
    version: int
    created_ms: int
    updated_ms: int
    expires_at_ms: int | None
    ttl: float | None


class SQLItemMemory(SQLBackend, ItemMemory):
    """Items in an SQL database, one row each (see the module's documentation for the layout).

    `url_or_engine` is a URL (``sqlite:///memwoven.db``, ``postgresql://user:pw@host/db``, ``mysql://...``,
    ``mariadb://...``), an `Engine` (async calls then run in a thread unless `async_engine` is given too) or an
    `AsyncEngine`, as for `SQLChatMemory`; tables are created on first use. The async API works from any event
    loop; close with `aclose()` from a loop still running, else `close()`.
    """

    def __init__(
        self,
        url_or_engine: str | URL | Engine | AsyncEngine,
        *,
        table_prefix: str = "memwoven_",
        schema: str | None = None,
        pool_size: int = 5,
        pool_timeout: float = 30.0,
        async_engine: AsyncEngine | None = None,
    ) -> None:
        super().__init__(url_or_engine, table_prefix, schema, pool_size, pool_timeout, async_engine)
        self._items = self._tables.items
        self._own_tables = [self._items]

    def __repr__(self) -> str:
        return f"SQLItemMemory({self._options_repr()})"

    def _setup_steps(self) -> Steps[None]:
        yield self._create_tables()

    # Reads --------------------------------------------------------------------------------------------------

    def _get(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool = False) -> Steps[Item | None]:
        """The item, or None if it does not exist (or expired); `refresh_ttl` moves an item's expiry to now + ttl."""
        address = check_item_key(namespace, key)
        items: builtins.list[Item | None] = yield from self._get_many_steps([address], refresh_ttl)
        return items[0]

    get, aget = twins(_get)

    def _get_many(self, keys: ItemKeys, *, refresh_ttl: bool = False) -> Steps[builtins.list[Item | None]]:
        """The items asked for, in order (None where absent or expired)."""
        addresses = check_item_keys(keys)
        items: builtins.list[Item | None] = yield from self._get_many_steps(addresses, refresh_ttl)
        return items

    get_many, aget_many = twins(_get_many)

    def _get_many_steps(
        self, addresses: Sequence[tuple[Namespace, str]], refresh: bool
    ) -> Steps[builtins.list[Item | None]]:
        if not addresses:
            return []
        wanted = {_address(encode_namespace(ns), key): (ns, key) for ns, key in addresses}

        def body(connection: Connection) -> dict[str, Item]:
            now = _clock.wall_ms()
            rows = self._rows_at(connection, builtins.list(wanted), lock=False)
            found = {}
            for address, row in rows.items():
                if not _alive(row.expires_at_ms, now):
                    continue
                if refresh and row.ttl is not None:
                    row.expires_at_ms = now + round(row.ttl * 1000)
                    items = self._items
                    connection.execute(
                        sa.update(items)
                        .where(items.c.address == address, items.c.version == row.version)
                        .values(expires_at_ms=row.expires_at_ms)
                    )
                found[address] = _item(row, wanted[address])
            return found

        found: dict[str, Item] = yield Work(body, write=refresh)
        return [found.get(_address(encode_namespace(ns), key)) for ns, key in addresses]

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
        """The matching items, sorted by key then namespace (code point order), paged after the filter."""
        prefix = check_namespace(namespace_prefix, "namespace prefix", prefix=True)
        predicate = compile_filter(filter) if filter is not None else None
        descending = check_order(order) == "desc"
        low = None if after is None else check_id(after, "after key")
        high = None if before is None else check_id(before, "before key")
        limit, offset = check_page(limit, offset)
        if limit == 0:
            return []
        items = self._items

        def body(connection: Connection) -> builtins.list[Item]:
            query = sa.select(*(items.c[name] for name in _COLUMNS)).where(*self._live_in(prefix))
            if low is not None:
                query = query.where(items.c.item_key > low)
            if high is not None:
                query = query.where(items.c.item_key < high)
            columns = (items.c.item_key, items.c.namespace)
            query = query.order_by(*(column.desc() if descending else column for column in columns))
            exact = connection.dialect.name not in _MYSQL
            if predicate is None and exact:  # no filter: the page too is SQL's
                query = query.offset(offset) if offset else query
                query = query.limit(limit) if limit is not None else query
            rows = builtins.list(connection.execute(query))
            if not exact:  # MariaDB/MySQL sort BLOBs on their first `max_sort_length` bytes: make it exact
                rows.sort(key=lambda row: (row.item_key, row.namespace), reverse=descending)
            found = [_item(row) for row in rows]
            if predicate is not None:
                found = [item for item in found if predicate(item.value)]
            if predicate is None and exact:
                return found
            return found[offset:] if limit is None else found[offset : offset + limit]

        listed: builtins.list[Item] = yield Work(body)
        return listed

    list, alist = twins(_list)

    def _count(self, namespace_prefix: Sequence[str] = (), *, filter: Filter | None = None) -> Steps[int]:
        """How many items `list(namespace_prefix, filter=filter)` returns."""
        prefix = check_namespace(namespace_prefix, "namespace prefix", prefix=True)
        predicate: Predicate | None = compile_filter(filter) if filter is not None else None
        items = self._items

        def body(connection: Connection) -> int:
            if predicate is None:
                query = sa.select(sa.func.count()).select_from(items).where(*self._live_in(prefix))
                return int(connection.execute(query).scalar_one())
            values = connection.execute(sa.select(items.c.value).where(*self._live_in(prefix))).scalars()
            return sum(1 for value in values if predicate(_decode_value(value)))

        counted: int = yield Work(body)
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
        """The namespaces holding live items that match `prefix` and `suffix` ("*": any one label), cut to
        `max_depth` labels, without duplicates, sorted, then paged."""
        head = () if prefix is None else check_namespace(prefix, "namespace prefix", prefix=True)
        tail = () if suffix is None else check_namespace(suffix, "namespace suffix", prefix=True)
        depth = check_max_depth(max_depth)
        limit, offset = check_page(limit, offset)
        fixed = head[: head.index(WILDCARD)] if WILDCARD in head else head  # SQL selects on these labels
        items = self._items

        def body(connection: Connection) -> builtins.list[str]:
            query = sa.select(items.c.namespace).distinct().where(*self._live_in(fixed))
            if connection.dialect.name in _MYSQL:  # their DISTINCT compares BLOBs on the first `max_sort_length` bytes
                query = query.add_columns(sa.func.sha2(items.c.namespace, 256))
            return builtins.list(connection.execute(query).scalars())

        stored: builtins.list[str] = yield Work(body)
        found = set()
        for encoded in stored:
            namespace = decode_namespace(encoded)
            if namespace_matches(namespace, head, tail):
                found.add(namespace[:depth])
        end = None if limit is None else offset + limit
        return sorted(found)[offset:end]

    namespaces, anamespaces = twins(_namespaces)

    # Writes -------------------------------------------------------------------------------------------------

    def _put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        *,
        ttl: float | None = None,
        expected_version: int | None = None,
    ) -> Steps[int]:
        """Create or replace the item and return its new version; with `expected_version`, only if the stored
        version matches (0: the item must not exist)."""
        versions: builtins.list[int] = yield from self._put_many(
            [ItemWrite(namespace, key, value, ttl, expected_version)]
        )
        return versions[0]

    put, aput = twins(_put)

    def _put_many(self, writes: Iterable[ItemWrite | tuple[Any, ...]]) -> Steps[builtins.list[int]]:
        """Write every item in one transaction, or none of them if an expected version does not match."""
        checked = check_item_writes(writes)
        if not checked:
            return []
        prepared = []
        for namespace, key, value, ttl, expected in checked:
            encoded = encode_namespace(namespace)
            prepared.append((_address(encoded, key), encoded, namespace, key, _encode_value(value), ttl, expected))

        def body(connection: Connection) -> builtins.list[int]:
            placeholders = {address: (encoded, key) for address, encoded, _, key, *_ in prepared}
            stored = self._locked(connection, placeholders)
            now = _clock.wall_ms()
            for address, _, namespace, key, _, _, expected in prepared:
                _check_version(namespace, key, _current(stored.get(address), now), expected)
            rows, versions = [], []
            for address, encoded, _, key, text, ttl, _ in prepared:
                row = stored.get(address)
                version = next_version(0 if row is None else row.version)  # expired or not: never reused
                live = row is not None and row.version > 0 and _alive(row.expires_at_ms, now)
                rows.append(
                    {
                        "address": address,
                        "namespace": encoded,
                        "ns_head": encoded[:HEAD_CHARS],
                        "item_key": key,
                        "value": text,
                        "version": version,
                        "created_ms": row.created_ms if live and row is not None else now,
                        "updated_ms": now,
                        "expires_at_ms": None if ttl is None else now + round(ttl * 1000),
                        "ttl": ttl,
                    }
                )
                versions.append(version)
            for start in range(0, len(rows), _IN_CHUNK):
                upsert(connection, self._items, rows[start : start + _IN_CHUNK])
            return versions

        versions: builtins.list[int] = yield Work(body, write=True)
        return versions

    put_many, aput_many = twins(_put_many)

    def _delete(self, namespace: Sequence[str], key: str, *, expected_version: int | None = None) -> Steps[bool]:
        """Delete the item; return whether it existed (live). With `expected_version`, only if it matches."""
        checked_namespace, checked_key = check_item_key(namespace, key)
        expected = check_version(expected_version)
        encoded = encode_namespace(checked_namespace)
        address = _address(encoded, checked_key)
        items = self._items

        def body(connection: Connection) -> bool:
            row = self._rows_at(connection, [address], lock=True).get(address)
            now = _clock.wall_ms()
            current = _current(row, now)
            _check_version(checked_namespace, checked_key, current, expected)
            if row is not None:
                connection.execute(sa.delete(items).where(items.c.address == address))
            return current > 0

        existed: bool = yield Work(body, write=True)
        return existed

    delete, adelete = twins(_delete)

    def _delete_many(self, keys: ItemKeys) -> Steps[int]:
        """Delete the items (unknown ones are ignored); return how many existed (live)."""
        addresses = sorted({_address(encode_namespace(ns), key) for ns, key in check_item_keys(keys)})
        if not addresses:
            return 0
        items = self._items

        def body(connection: Connection) -> int:
            rows = self._rows_at(connection, addresses, lock=True)
            now = _clock.wall_ms()
            for start in range(0, len(addresses), _IN_CHUNK):
                chunk = addresses[start : start + _IN_CHUNK]
                connection.execute(sa.delete(items).where(items.c.address.in_(chunk)))
            return sum(1 for row in rows.values() if _current(row, now) > 0)

        existed: int = yield Work(body, write=True)
        return existed

    delete_many, adelete_many = twins(_delete_many)

    def _cleanup_expired(self) -> Steps[int]:
        """Delete the expired items (they already read as absent); return how many."""
        items = self._items

        def body(connection: Connection) -> int:
            now = _clock.wall_ms()
            result = connection.execute(sa.delete(items).where(items.c.expires_at_ms <= now))
            return int(result.rowcount or 0)

        removed: int = yield Work(body, write=True)
        return removed

    cleanup_expired, acleanup_expired = twins(_cleanup_expired)

    # Helpers ------------------------------------------------------------------------------------------------

    def _live_in(self, prefix: Namespace) -> builtins.list[sa.ColumnElement[bool]]:
        """SQL: the item is live and its namespace starts with `prefix`, label by label."""
        items = self._items
        now = _clock.wall_ms()
        conditions = [sa.or_(items.c.expires_at_ms.is_(None), items.c.expires_at_ms > now)]
        if not prefix:
            return conditions
        low = encode_namespace(prefix)
        high = low[:-1] + chr(ord(_SEPARATOR) + 1)  # the strings starting with `low` are exactly [low, high)
        if len(low) <= HEAD_CHARS:
            conditions += [items.c.ns_head >= low, items.c.ns_head < high]
        else:
            conditions += [items.c.ns_head == low[:HEAD_CHARS], items.c.namespace >= low, items.c.namespace < high]
        return conditions

    def _rows_at(self, connection: Connection, addresses: Sequence[str], *, lock: bool) -> dict[str, _Row]:
        """The rows at `addresses` (locked `FOR UPDATE` where the database has row locks and `lock` is set)."""
        items = self._items
        rows: dict[str, _Row] = {}
        for start in range(0, len(addresses), _IN_CHUNK):
            query = sa.select(items.c.address, *(items.c[name] for name in _COLUMNS)).where(
                items.c.address.in_(addresses[start : start + _IN_CHUNK])
            )
            if lock and connection.dialect.name != "sqlite":
                query = query.order_by(items.c.address).with_for_update()
            for found in connection.execute(query):
                row = _Row()
                for name in _COLUMNS:
                    setattr(row, name, getattr(found, name))
                rows[found.address] = row
        return rows

    def _locked(self, connection: Connection, wanted: Mapping[str, tuple[str, str]]) -> dict[str, _Row]:
        """Lock the rows of `wanted` (address -> (encoded namespace, key)), creating placeholders (version 0) for
        the absent ones so that a concurrent creation waits; return the rows (placeholders included)."""
        addresses = sorted(wanted)
        dialect = connection.dialect.name
        if dialect != "sqlite":  # SQLite: the whole database is this transaction's (BEGIN IMMEDIATE)
            items = self._items
            placeholders = [
                {
                    "address": address,
                    "namespace": wanted[address][0],
                    "ns_head": wanted[address][0][:HEAD_CHARS],
                    "item_key": wanted[address][1],
                    "value": "{}",
                    "version": 0,
                    "created_ms": 0,
                    "updated_ms": 0,
                }
                for address in addresses
            ]
            for start in range(0, len(placeholders), _IN_CHUNK):
                chunk = placeholders[start : start + _IN_CHUNK]
                if dialect == "postgresql":
                    connection.execute(postgresql_insert(items).on_conflict_do_nothing(), chunk)
                else:
                    statement = mysql_insert(items)
                    ignoring = statement.on_duplicate_key_update({"address": statement.inserted.address})
                    connection.execute(ignoring, chunk)
        return self._rows_at(connection, addresses, lock=True)


def _alive(expires_at_ms: int | None, now: int) -> bool:
    return expires_at_ms is None or expires_at_ms > now


def _current(row: _Row | None, now: int) -> int:
    """The version a write or a delete compares with: 0 for an absent, placeholder or expired item."""
    if row is None or not _alive(row.expires_at_ms, now):
        return 0
    return int(row.version)


def _check_version(namespace: Namespace, key: str, version: int, expected: int | None) -> None:
    if expected is not None and expected != version:
        raise ConcurrentModificationError(
            f"item {key!r:.200} in {namespace!r:.200} is at version {version}, not {expected}; reload and retry"
        )


def _encode_value(value: FrozenDict) -> str:
    """An item's value as stored: compact JSON text, as the vector backend stores metadata."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _decode_value(text: str) -> FrozenDict:
    try:
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
        frozen: FrozenDict = freeze_json(value)
    except ValueError as error:
        raise CorruptMemoryError(f"a stored item's value is unreadable ({error})") from None
    return frozen


def _utc(epoch_ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=epoch_ms)


def _item(row: Any, address: tuple[Namespace, str] | None = None) -> Item:
    """The `Item` of a row (`address`: its namespace and key when known, saving the decoding)."""
    namespace, key = address if address is not None else (decode_namespace(row.namespace), row.item_key)
    return Item.model_construct(
        namespace=namespace,
        key=key,
        value=_decode_value(row.value),
        version=int(row.version),
        created_at=_utc(int(row.created_ms)),
        updated_at=_utc(int(row.updated_ms)),
        expires_at=None if row.expires_at_ms is None else _utc(int(row.expires_at_ms)),
        ttl=None if row.ttl is None else float(row.ttl),
    )
