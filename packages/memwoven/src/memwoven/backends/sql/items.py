"""`SQLItemMemory`: the items of an `ItemMemory` in SQLite, PostgreSQL or MariaDB/MySQL, one row each.

One table, ``{prefix}items`` (`memwoven.backends.sql._schema`): the primary key is made of SHA-256 digests of the
item's namespace and of (namespace, key) (`_address`), the namespace and the key are stored as text compared in
code point order (SQLite's BINARY collation, PostgreSQL ``COLLATE "C"``, UTF-8 bytes in a BLOB on MariaDB/MySQL),
each with its first `HEAD_CHARS` characters (``ns_head``, ``key_head``, indexed), the value as its JSON text (on
PostgreSQL indexed as ``jsonb`` for filters, `memwoven.backends.sql._schema.value_jsonb`), the version, the
creation and update times (epoch ms), the expiry (``expires_at_ms``, indexed; NULL: never) and the ``ttl`` that set
it. The key is made of digests rather than (namespace, key) itself because ids are up to 64 KiB, beyond what a
PostgreSQL or InnoDB index entry holds.

The namespace encoding. A namespace is stored as one string: each label, escaped, followed by ``\\x01``::

    encode(("a", "b")) == "a\\x01b\\x01"      escapes: "\\x02" -> "\\x02\\x03", "\\x01" -> "\\x02\\x02"

Labels never hold NUL (`check_id`), so after escaping every label character is ``\\x02`` or above and the
separator sorts below all of them. Hence (1) the namespaces *starting with* a prefix, label by label, are exactly
the strings starting with the prefix's encoding: ``("a",)`` is ``"a\\x01"``, which ``"ab\\x01"`` does not start
with (a prefix is a label boundary); (2) those strings form one range, ``[P, P[:-1] + "\\x02")``, which an index
scans; (3) the strings sort as the tuples do (a shorter label, followed by the separator, sorts first), so
``ORDER BY item_key, namespace`` is the contract's order. The indexed column is ``ns_head``, the first
`HEAD_CHARS` characters of the encoding: a prefix that short is a range on it; a longer one is an equality on
its head plus the range on the full text. Listings order by ``key_head, item_key, namespace``, the same order (a
head is a prefix of its key), which the index on ``key_head`` holds in part: for the first page of a prefix
holding most items, PostgreSQL reads that index and sorts only the rows sharing a head (incremental sort) rather
than every row. On PostgreSQL the namespace range is inlined into the SQL text (as escaped literals): psycopg
prepares a statement run often, and the generic plan of a range on parameters would always take the namespace
index, sorting every row of a wide prefix. SQLite indexes keys of any length, so there the key index holds the
whole order (``key_head, item_key, namespace``); its planner, without statistics of the namespace ranges, would
still scan a prefix's range and sort it, so a page of a prefix holding many rows is first looked for among the
first rows of the table in that order (`SQLItemMemory._walked`), and only then in the range.

Every write runs in one transaction. On SQLite and PostgreSQL the items that need no compare-and-set are
written without reading them first: an upsert whose update derives the version and times from the stored row
(`_unlocked_writes`), and an insert leaving stored rows alone for those expected to be new; each returns the
versions it wrote. The rest (an expected version, or an expected-new item found stored, which may have expired)
and every write on MariaDB (whose upsert returns nothing) take the locked path: on PostgreSQL and MariaDB it first
inserts placeholder rows (version 0) for the items absent, ignoring those that exist, then locks them all (``FOR
UPDATE``, in address order), so that compare-and-set sees the latest committed version and a concurrent creation
of the same item waits; the placeholders are overwritten (or rolled back) before the transaction ends, so no
reader sees them. SQLite runs writes one at a time (``BEGIN IMMEDIATE``). `put_many` checks every expected version
in its transaction and raises before it commits: all or nothing.

`list` and `count`: SQL selects the namespace prefix, the key range (after/before), the live items, the order and
the filter's pre-selection (`_filters`: a condition on the stored JSON, in the database's JSON functions, that
keeps every match; on PostgreSQL mostly a containment test that the GIN index of the values as ``jsonb``
answers); Python then applies the filter exactly (`memwoven.filters`) to the rows it reads, and pages, stopping once
the page is full. Without a filter the page too is SQL's. (MariaDB/MySQL compare BLOBs in ORDER BY and
DISTINCT on their first ``max_sort_length`` bytes only, so there the rows are re-sorted in Python, exactly, and
paged there; `namespaces` adds the SHA-2 of each namespace to its DISTINCT.)
`namespaces` selects the distinct namespaces of the fixed leading labels of `prefix` in SQL, then matches the
wildcards and the suffix in Python (`namespace_matches`).

Expiry is measured on `memwoven._clock.wall_ms()`: an item whose ``expires_at_ms`` is not after now reads as
absent everywhere, version 0 included, until `cleanup_expired()` deletes it.
"""

from __future__ import annotations

import builtins
import functools
import logging
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

import memwoven._clock as _clock
from memwoven._cache import LRUCache
from memwoven._steps import Steps
from memwoven.backends._items import (
    check_stored_item,
    decode_namespace,
    decode_object,
    decode_value,
    encode_namespace,
    encode_value,
    prefix_range,
    ttl_milliseconds,
)
from memwoven.backends.sql import _driver
from memwoven.backends.sql._base import SQLBackend
from memwoven.backends.sql._driver import MultiRow, OnDriver
from memwoven.backends.sql._engine import Work
from memwoven.backends.sql._filters import check_indexed_fields, field_expression, prefilter
from memwoven.backends.sql._packet import check_rows
from memwoven.backends.sql._schema import HEAD_CHARS, dialect_insert, has_nul, key_of, upsert, value_jsonb
from memwoven.contracts import (
    CheckedWrite,
    ItemAddress,
    ItemMemory,
    ItemQuery,
    Namespace,
    PlainItem,
    check_expected,
    next_version,
)
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError
from memwoven.filters import filter_text
from memwoven.models import Item

__all__ = ["SQLItemMemory", "decode_namespace", "encode_namespace"]

_IN_CHUNK = 500  # addresses per IN (...): far below every driver's parameter limit
_READ_AT_ONCE = 30_000  # addresses one read takes in one statement: below SQLite's 32,766 parameters
_LOCK_ATTEMPTS = 100  # rounds of placeholders and locks of rows others keep deleting (`_locked`)
_MYSQL = ("mysql", "mariadb")
_UPSERT_RETURNING = ("sqlite", "postgresql")  # upserts returning their rows (MariaDB's ON DUPLICATE KEY cannot)
_REMEMBERED_FILTERS = 256  # filters whose SQL pre-selection (and listing statements) an items table keeps built
_WIDE = 1024  # SQLite: a prefix holding this many rows is wide enough to read in key order (`_walked`)
_WALK_ROWS = 64  # SQLite: rows read in key order for a wide prefix, plus `_WALK_PER_ITEM` per item wanted
_WALK_PER_ITEM = 8
_RECOUNT = 64  # SQLite: listings of a prefix that reuse its counted width before it is counted again
_SQL_INT_MAX = 2**63 - 1  # the largest integer SQLite and PostgreSQL take (a LIMIT or OFFSET)
_COLUMNS = ("namespace", "item_key", "value", "version", "created_ms", "updated_ms", "expires_at_ms", "ttl")
_ROW_FIXED = 2048  # an item row's values but its value, namespace and key, escaped (`_packet.check_rows`)
_LISTED = (*_COLUMNS, "address")  # a listing's columns: the row key too, checked against the namespace and key

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

_T = TypeVar("_T")
_Listed = TypeVar("_Listed", Item, PlainItem)
logger = logging.getLogger(__name__)


def _address(encoded_namespace: str, key: str) -> str:
    """The row key of an item: 16 hex digits of the SHA-256 of its encoded namespace, then 48 of the SHA-256 of
    the encoded namespace, NUL (in no label or key) and its key. A namespace's items are neighbours in the primary
    key's index, so a batch or a thread's writes touch few of its pages (the SHA-256 alone sent every insert to a
    random page: SQLite's put_many of 10,000 items ~30% slower)."""
    return _namespace_digest(encoded_namespace) + key_of(f"{encoded_namespace}\x00{key}")[:48]


_NAMESPACE_DIGEST = 16  # hex digits of the namespace's SHA-256 heading its items' row keys


@functools.lru_cache(maxsize=4096)
def _namespace_digest(encoded_namespace: str) -> str:
    return key_of(encoded_namespace)[:_NAMESPACE_DIGEST]


def _checked_address(row: Sequence[Any]) -> None:
    """`CorruptMemoryError` unless a listed row's namespace and key (its first columns) are those its row key, the
    last column, was made of: a damaged column could otherwise show an item in another namespace, or under a key
    that a `get` of it would not find."""
    if _address(row[0], row[1]) != row[-1]:
        raise CorruptMemoryError(
            f"a stored item's namespace or key does not match its row key: damaged ({row[0]!r:.100}, {row[1]!r:.100})"
        )


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

    @classmethod
    def of(cls, values: Sequence[Any]) -> _Row:
        """The row whose columns, in `_COLUMNS` order, hold `values`."""
        row = cls()
        for name, column in zip(_COLUMNS, values, strict=True):
            setattr(row, name, column)
        return row


class _Prepared(NamedTuple):
    """A checked write with its row key and encodings."""

    address: str
    encoded: str
    namespace: Namespace
    key: str
    text: str
    ttl: float | None
    expected: int | None


def _row(prepared: _Prepared, version: int, created_ms: int, written_ms: int) -> dict[str, Any]:
    """The row `prepared` writes, at `version`, written at `written_ms` (epoch ms)."""
    ttl = prepared.ttl
    return {
        "address": prepared.address,
        "namespace": prepared.encoded,
        "ns_head": prepared.encoded[:HEAD_CHARS],
        "item_key": prepared.key,
        "key_head": prepared.key[:HEAD_CHARS],
        "value": prepared.text,
        "version": version,
        "created_ms": created_ms,
        "updated_ms": written_ms,
        "expires_at_ms": None if ttl is None else written_ms + ttl_milliseconds(ttl),
        "ttl": ttl,
    }


def _in_lock_order(rows: Iterable[dict[str, Any]]) -> builtins.list[dict[str, Any]]:
    """`rows` (`_row`) in the one order concurrent writers lock them in: by namespace, then key (not address), so
    that a namespace's rows stay together in the table (SQLite's rowid order, PostgreSQL's heap) for the scans
    that read them."""
    return sorted(rows, key=lambda row: (str(row["namespace"]), str(row["item_key"])))


class _Writes(NamedTuple):
    """The unlocked writes of `SQLItemMemory._write_unlocked` on one database, each returning (address, version),
    and the insert of `SQLItemMemory._create_all`, failing if any of its rows is stored."""

    replace: sa.Insert
    create: sa.Insert
    insert: sa.Insert


def _unlocked_writes(items: sa.Table, dialect: str) -> _Writes:
    """An upsert deriving version and times from the stored row as `_write_locked` does (version above the
    stored one, creation time kept while the stored item is live, update time above the stored one, expiry moved
    along), and an insert of new items that leaves stored ones alone; both return (address, version)."""
    insert = dialect_insert(items, dialect)
    stored, given = items.c, insert.excluded
    greatest = sa.func.greatest if dialect == "postgresql" else sa.func.max  # SQLite's max of two is scalar
    written = greatest(given.updated_ms, stored.updated_ms + 1)
    live = sa.and_(stored.version > 0, sa.or_(stored.expires_at_ms.is_(None), stored.expires_at_ms > given.updated_ms))
    replace = insert.on_conflict_do_update(
        index_elements=[stored.address],
        set_={
            "value": given.value,
            "version": greatest(stored.version + 1, given.version),
            "created_ms": sa.case((live, stored.created_ms), else_=written),
            "updated_ms": written,
            "expires_at_ms": given.expires_at_ms + (written - given.updated_ms),  # NULL without a ttl
            "ttl": given.ttl,
        },
    )
    create = insert.on_conflict_do_nothing(index_elements=[stored.address])
    returned = (stored.address, stored.version)
    return _Writes(replace.returning(*returned), create.returning(*returned), insert.returning(*returned))


class _Scope(NamedTuple):
    """The live items under a namespace prefix: SQL conditions (one of `_Statements.scopes`) and their values."""

    shape: str
    conditions: tuple[sa.ColumnElement[bool], ...]
    params: dict[str, Any]


class _Preselection(NamedTuple):
    """A filter's SQL pre-selection (`_filters.prefilter`) and what it is remembered by (None: not remembered)."""

    key: tuple[str, str, bool] | None  # (dialect, the filter's text, on the indexed fields' expressions)
    condition: sa.ColumnElement[bool]


class _Statements:
    """The statements of one items table, built once with bound parameters: building and keying a statement costs
    SQLAlchemy more than SQLite takes to run a one-row read."""

    def __init__(self, items: sa.Table) -> None:
        self.items = items
        by_address = sa.select(items.c.address, *(items.c[name] for name in _COLUMNS)).where(
            items.c.address.in_(sa.bindparam("addresses", expanding=True))
        )
        self.at = by_address
        self.locked = by_address.order_by(items.c.address).with_for_update()
        alive = sa.or_(items.c.expires_at_ms.is_(None), items.c.expires_at_ms > sa.bindparam("now"))
        self.scopes: dict[str, tuple[sa.ColumnElement[bool], ...]] = {"all": (alive,)}
        for inline in (False, True):
            # Inlined (PostgreSQL): psycopg prepares a statement run 5 times, and PostgreSQL's generic plan of a
            # prepared range on bound parameters guesses it narrow, so it would walk the namespace index and sort
            # every row of a prefix holding most of the table where the key index gives a top-N at once (EXPLAIN
            # ANALYZE, 100,000 items, generic plan: 77 ms with parameters, 4-8 ms inlined).
            low: sa.BindParameter[str] = sa.bindparam("low", literal_execute=inline)
            high: sa.BindParameter[str] = sa.bindparam("high", literal_execute=inline)
            head: sa.BindParameter[str] = sa.bindparam("head", literal_execute=inline)
            suffix = "-inline" if inline else ""
            self.scopes["head" + suffix] = (alive, items.c.ns_head >= low, items.c.ns_head < high)
            self.scopes["long" + suffix] = (
                alive,
                items.c.ns_head == head,
                items.c.namespace >= low,
                items.c.namespace < high,
            )
        # SQLite: whether a prefix holds `_WIDE` rows, counted on the namespace index alone (its heads).
        self._widths = {
            shape: OnDriver(
                sa.select(sa.func.count()).select_from(
                    sa.select(sa.literal(1)).where(*conditions).limit(_WIDE).subquery()
                )
            )
            for shape, conditions in (
                ("head", (items.c.ns_head >= sa.bindparam("low"), items.c.ns_head < sa.bindparam("high"))),
                ("long", (items.c.ns_head == sa.bindparam("head"),)),
            )
        }
        self._widths_counted: LRUCache[tuple[str, str], tuple[bool, int]] = LRUCache(_REMEMBERED_FILTERS)
        self._listings: dict[tuple[Any, ...], OnDriver[sa.Select[Any]]] = {}
        self._selecting: LRUCache[tuple[Any, ...], OnDriver[sa.Select[Any]]] = LRUCache(_REMEMBERED_FILTERS)
        self.preselections: LRUCache[tuple[str, str, bool], tuple[_Preselection | None]] = LRUCache(_REMEMBERED_FILTERS)
        self._writes: dict[str, _Writes] = {}
        # The statements of `_writes` compiled per dialect (a sync and an async engine have one each).
        self._multi_row: dict[tuple[sa.Insert, sa.Dialect], MultiRow | None] = {}

    def writes(self, dialect: str) -> _Writes:
        """The unlocked writes on `dialect` (SQLite or PostgreSQL)."""
        found = self._writes.get(dialect)
        if found is None:
            found = self._writes[dialect] = _unlocked_writes(self.items, dialect)
        return found

    def listing(
        self,
        scope: _Scope,
        query: ItemQuery,
        selected: _Preselection | None = None,
        *,
        paged: bool = False,
        walked: bool = False,
    ) -> OnDriver[sa.Select[Any]]:
        """The rows of `scope` in the query's order, after/before its keys (parameters ``after``, ``before``), kept
        by the pre-selection `selected` if given, or else, `paged`, one page (parameters ``limit``, ``offset``);
        `walked` (SQLite), only among the first rows of the whole table in that order (parameter ``walk``). Run on
        SQLite as SQL text compiled once, on the driver's cursor (`OnDriver`): SQLAlchemy keys and looks up its
        compiled form on every execution, and its execution context, events and result object took three times
        SQLite's own execution of a one-namespace listing."""
        shape = (scope.shape, query.after is not None, query.before is not None, query.descending, walked)
        if selected is not None:
            if selected.key is None:
                return OnDriver(self.listing(scope, query, walked=walked).statement.where(selected.condition))
            found = self._selecting.get((*shape, *selected.key))
            if found is None:
                found = OnDriver(self.listing(scope, query, walked=walked).statement.where(selected.condition))
                self._selecting.put((*shape, *selected.key), found)
            return found
        key = (*shape, paged)
        listing = self._listings.get(key)
        if listing is None:
            items = self.items
            statement = sa.select(*(items.c[name] for name in _LISTED)).where(*scope.conditions)
            if query.after is not None:
                statement = statement.where(items.c.item_key > sa.bindparam("after"))
            if query.before is not None:
                statement = statement.where(items.c.item_key < sa.bindparam("before"))
            columns = (items.c.key_head, items.c.item_key, items.c.namespace)
            order = [column.desc() if query.descending else column for column in columns]
            if walked:  # the rows among the first ``walk`` in order: read off the index holding that order
                rowid: sa.ColumnClause[int] = sa.literal_column("rowid")
                statement = statement.where(
                    rowid.in_(sa.select(rowid).select_from(items).order_by(*order).limit(sa.bindparam("walk")))
                )
            statement = statement.order_by(*order)
            if paged:
                statement = statement.limit(sa.bindparam("limit")).offset(sa.bindparam("offset"))
            listing = self._listings[key] = OnDriver(statement)
        return listing

    def wide(self, connection: Connection, scope: _Scope) -> bool:
        """SQLite: whether the prefix of `scope` holds `_WIDE` rows or more, counted on the namespace index and
        then remembered for its next `_RECOUNT` listings (the count took a tenth of a one-namespace listing; a
        stale answer costs time, never correctness: either plan is exact)."""
        key = (scope.shape, str(scope.params["low"]))
        remembered = self._widths_counted.get(key)
        if remembered is not None and remembered[1] > 0:
            self._widths_counted.put(key, (remembered[0], remembered[1] - 1))
            return remembered[0]
        ((counted,),) = self._widths[scope.shape].execute(connection, scope.params)
        wide = bool(counted >= _WIDE)
        self._widths_counted.put(key, (wide, _RECOUNT))
        return wide

    def written(
        self, connection: Connection, statement: sa.Insert, rows: Sequence[dict[str, Any]]
    ) -> Iterable[Sequence[Any]]:
        """What the write `statement` (one of `writes`) returns for `rows` (full rows, `_row`), in statements of
        at most `_IN_CHUNK` rows. On SQLite and PostgreSQL each is the statement's SQL text, compiled once with
        positional parameters and repeated into as many VALUES groups as rows, run on the driver's cursor:
        SQLAlchemy's multi-row insert (its parameter processing, execution context and events) took ~40% of a
        checkpoint's write on SQLite and half of a small put_many's process time on PostgreSQL."""
        writing = None
        dialect = connection.dialect
        if dialect.name in _UPSERT_RETURNING:
            if (statement, dialect) not in self._multi_row:  # threads compiling it at once store the same
                keys = [column.name for column in self.items.c]
                self._multi_row[statement, dialect] = MultiRow.of(statement, dialect, keys)
            writing = self._multi_row[statement, dialect]
        for start in range(0, len(rows), _IN_CHUNK):
            chunk = rows[start : start + _IN_CHUNK]
            if isinstance(writing, MultiRow):
                text, values = writing.of_rows(chunk)
                yield from _driver.rows(connection, text, values)
            else:  # SQLAlchemy's own multi-row statement
                yield from connection.execute(statement, chunk)


class SQLItemMemory(SQLBackend, ItemMemory):
    """Items in an SQL database, one row each (see the module's documentation for the layout).

    Constructed with the SQL backends' options (`SQLBackend`: a URL or engines, `table_prefix`, `schema`, the pool);
    the table is created on first use. The async API works from any event loop; close with `aclose()` from a loop
    still running, else `close()`.

    `indexed_fields` (SQLite): filter fields (``"topic"``, ``"user.tier"`` for a nested one) to keep an index of, so
    that a filtered `list` or `count` over a prefix holding many items reads the items whose field matches
    (equality, ``$in``, comparisons) instead of testing every item's JSON: over 100,000 items, milliseconds
    instead of tens. Each index costs every write of an item some time. Created with the table, or added to an
    existing one on first use (which then takes the time to index its items); removing a field from the list
    leaves its index in place. PostgreSQL needs none (its GIN index of the values already answers equality with a
    string or a boolean on every field), and MariaDB/MySQL get none (not implemented: their filters test every
    item under the prefix).
    """

    _table_names = ("items",)

    def __init__(
        self,
        url_or_engine: str | URL | Engine | AsyncEngine,
        *,
        indexed_fields: Sequence[str] = (),
        table_prefix: str = "memwoven_",
        schema: str | None = None,
        pool_size: int = 5,
        pool_timeout: float = 30.0,
        async_engine: AsyncEngine | None = None,
    ) -> None:
        # The options spelled out (not **SQLOptions): `open_item_memory` refuses unknown ones by this signature.
        self.indexed_fields = check_indexed_fields(indexed_fields)
        """The filter fields SQLite keeps an index of (`indexed_fields`)."""
        super().__init__(
            url_or_engine,
            table_prefix=table_prefix,
            schema=schema,
            pool_size=pool_size,
            pool_timeout=pool_timeout,
            async_engine=async_engine,
        )

    @property
    def _items(self) -> sa.Table:
        return self._tables.items

    @functools.cached_property
    def _statements(self) -> _Statements:
        return _Statements(self._items)

    def __repr__(self) -> str:
        indexed = f", indexed_fields={self.indexed_fields!r}" if self.indexed_fields else ""
        return f"SQLItemMemory({self._options_repr()}{indexed})"

    def _setup_steps(self) -> Steps[None]:
        yield self._create_tables()
        if self.indexed_fields:
            yield Work(self._create_field_indexes, write=True, ddl=True)

    def _create_field_indexes(self, connection: Connection) -> None:
        """SQLite: an index of each indexed field's `field_expression`, unless there is one (named by its digest).

        A stored value that is not JSON makes SQLite refuse the index: logged, and the memory works without it
        (its filters then test every item, and reading the damaged one raises `CorruptMemoryError`)."""
        if connection.dialect.name != "sqlite":
            return
        preparer = connection.dialect.identifier_preparer
        for field in self.indexed_fields:
            name = preparer.quote(f"{self.table_prefix}items_field_{key_of(field)[:16]}")
            if self.schema is not None:  # SQLite: the index names the attached database, its table does not
                name = f"{preparer.quote_schema(self.schema)}.{name}"
            table = preparer.quote(self._items.name)
            try:
                with connection.begin_nested():
                    connection.exec_driver_sql(
                        f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({field_expression(field)})"
                    )
            except sa.exc.OperationalError as error:
                if "malformed JSON" not in str(error):
                    raise
                logger.warning("%s: no index of %r: a stored value is not JSON (%s)", self, field, error.orig)

    # The hooks of `ItemMemory` -------------------------------------------------------------------------------

    def _read(self, addresses: Sequence[ItemAddress], refresh: bool) -> Steps[builtins.list[Item | None]]:
        wanted = {_address(encode_namespace(ns), key): (ns, key) for ns, key in addresses}
        items = self._items

        def body(connection: Connection) -> dict[str, Item]:
            now = _clock.wall_ms()
            found = {}
            for address, row in self._rows_at(connection, builtins.list(wanted), lock=False).items():
                if not _alive(row.expires_at_ms, now):
                    continue
                item = found[address] = _item(row, wanted[address])  # checked before a refresh writes the row
                if refresh and item.ttl is not None:
                    refreshed = now + ttl_milliseconds(item.ttl)
                    result = connection.execute(
                        sa.update(items)
                        .where(items.c.address == address, items.c.version == row.version)
                        .values(expires_at_ms=refreshed)
                    )
                    if result.rowcount:  # else a concurrent write replaced the item (and set its own expiry)
                        row.expires_at_ms = refreshed
                        found[address] = _item(row, wanted[address])
            return found

        found: dict[str, Item] = yield Work(body, write=refresh, single=not refresh)
        return [found.get(_address(encode_namespace(ns), key)) for ns, key in addresses]

    def _write(self, writes: Sequence[CheckedWrite]) -> Steps[builtins.list[int]]:
        prepared = [
            _Prepared(_address(encoded, key), encoded, namespace, key, encode_value(value), ttl, expected)
            for namespace, key, value, ttl, expected in writes
            for encoded in (encode_namespace(namespace),)
        ]
        if (
            self._db.dialect in _UPSERT_RETURNING
            and len(prepared) <= _IN_CHUNK
            and all(p.expected == 0 for p in prepared)
        ):
            now = _clock.wall_ms()
            rows = _in_lock_order(_row(p, next_version(0), now, now) for p in prepared)
            runs: builtins.list[None] = []
            created: builtins.list[int] | None = yield Work(
                lambda c: self._create_all(c, prepared, rows, runs), write=True, single=True
            )
            if created is not None:
                return created

        def body(connection: Connection) -> builtins.list[int]:
            versions: dict[str, int] = {}
            if connection.dialect.name in _UPSERT_RETURNING:
                versions = self._write_unlocked(connection, [p for p in prepared if p.expected in (None, 0)])
            locked = [p for p in prepared if p.address not in versions]
            if locked:
                versions.update(self._write_locked(connection, locked))
            return [versions[p.address] for p in prepared]

        # Replacing at most a chunk of items is one upsert (`_write_unlocked`): atomic alone, and applying it twice
        # leaves what applying it once does (each item holding its value, at a higher version).
        single = (
            self._db.dialect in _UPSERT_RETURNING
            and len(prepared) <= _IN_CHUNK
            and all(p.expected is None for p in prepared)
        )
        versions: builtins.list[int] = yield Work(body, write=True, single=single)
        return versions

    def _write_unlocked(self, connection: Connection, prepared: Sequence[_Prepared]) -> dict[str, int]:
        """Write, in one statement each and without reading first, the items that need no compare-and-set
        (expected None: replaced, the database deriving version and times from the stored row) and those that must
        be new (expected 0: inserted unless stored); return the versions of those written. An expected-new item
        found stored is left to `_write_locked`, which tells an expired one (replaced) from a live one (refused)."""
        versions: dict[str, int] = {}
        now = _clock.wall_ms()
        statements = self._statements.writes(connection.dialect.name)
        for replace, statement in ((True, statements.replace), (False, statements.create)):
            rows = _in_lock_order(
                _row(p, next_version(0), now, now) for p in prepared if (p.expected is None) == replace
            )
            for address, version in self._statements.written(connection, statement, rows):
                versions[address] = int(version)
        return versions

    def _create_all(
        self,
        connection: Connection,
        prepared: Sequence[_Prepared],
        rows: Sequence[dict[str, Any]],
        runs: builtins.list[None],
    ) -> builtins.list[int] | None:
        """SQLite and PostgreSQL: insert `rows` (of `prepared`, all expected new) in one statement without BEGIN
        and COMMIT (on PostgreSQL one round trip where a transaction takes three); None, with nothing written, if
        any of them is stored (the statement fails as a whole): then `_write` runs its transaction, which tells an
        expired item (replaced) from a live one (refused). Run again (`runs` counts the runs) after a failure that
        may have come after the insert was applied (the reply lost with the connection), it finds the rows stored:
        if they are these very rows (version, write time and value), the insert was this call's and it succeeded,
        else the items were someone else's first. Nothing is doubled either way."""
        runs.append(None)
        try:
            versions = {
                str(address): int(version)
                for address, version in self._statements.written(
                    connection, self._statements.writes(connection.dialect.name).insert, rows
                )
            }
        except sa.exc.IntegrityError:
            if len(runs) == 1 or not self._are_stored(connection, rows):
                return None
            logger.info("a create whose reply was lost had been applied: %d items", len(rows))
            versions = {str(row["address"]): int(row["version"]) for row in rows}
        return [versions[p.address] for p in prepared]

    def _are_stored(self, connection: Connection, rows: Sequence[dict[str, Any]]) -> bool:
        """Whether each of `rows` (`_row`) is stored as it is (its version, write time and value)."""
        stored = self._rows_at(connection, [str(row["address"]) for row in rows], lock=False)
        return all(
            (found := stored.get(str(row["address"]))) is not None
            and (int(found.version), int(found.updated_ms), found.value)
            == (row["version"], row["updated_ms"], row["value"])
            for row in rows
        )

    def _write_locked(self, connection: Connection, prepared: Sequence[_Prepared]) -> dict[str, int]:
        """Write `prepared` after locking their rows and checking every expected version (all or nothing)."""
        if connection.dialect.name in _MYSQL:  # before the placeholders: they hold the namespaces and keys too
            check_rows(
                connection,
                [[p.text for p in prepared], [p.encoded for p in prepared], [p.key for p in prepared]],
                _ROW_FIXED,
                lambda i: f"item {prepared[i].key!r:.200} in {prepared[i].namespace!r:.200}",
            )
        stored = self._locked(connection, {p.address: (p.encoded, p.key) for p in prepared})
        now = _clock.wall_ms()
        for p in prepared:
            if p.expected is not None:  # a plain write replaces a damaged item, as the unlocked upsert does
                check_expected(p.namespace, p.key, _current(stored.get(p.address), now, p.namespace, p.key), p.expected)
        rows = []
        for p in prepared:
            row = stored.get(p.address)
            live = row is not None and row.version > 0 and _alive(row.expires_at_ms, now)
            written = now if row is None else max(now, int(row.updated_ms) + 1)  # IM3: updated_at grows
            version = next_version(0 if row is None else row.version)  # expired or not: never reused
            rows.append(_row(p, version, row.created_ms if live and row is not None else written, written))
        for start in range(0, len(rows), _IN_CHUNK):
            upsert(connection, self._items, rows[start : start + _IN_CHUNK])
        return {str(row["address"]): int(row["version"]) for row in rows}

    def _delete_items(self, addresses: Sequence[ItemAddress], expected: int | None) -> Steps[int]:
        wanted = sorted(_address(encode_namespace(ns), key) for ns, key in addresses)
        items = self._items

        def body(connection: Connection) -> int:
            rows = self._rows_at(connection, wanted, lock=True)
            now = _clock.wall_ms()
            if expected is not None:
                check_expected(*addresses[0], _current(rows.get(wanted[0]), now, *addresses[0]), expected)
            for start in range(0, len(wanted), _IN_CHUNK):
                connection.execute(sa.delete(items).where(items.c.address.in_(wanted[start : start + _IN_CHUNK])))
            # unchecked: a plain delete removes a damaged item too (counted if its version reads as stored)
            return sum(1 for row in rows.values() if _above(row.version, 0) and _alive(row.expires_at_ms, now))

        existed: int = yield Work(body, write=True)
        return existed

    def _select(self, query: ItemQuery) -> Steps[builtins.list[Item]]:
        listed: builtins.list[Item] = yield from self._select_as(query, _listed_item)
        return listed

    def _select_plain(self, query: ItemQuery) -> Steps[builtins.list[PlainItem]]:
        listed: builtins.list[PlainItem] = yield from self._select_as(query, _plain_item)
        return listed

    def _select_as(self, query: ItemQuery, convert: Callable[[Any], _Listed]) -> Steps[builtins.list[_Listed]]:
        """The answer to `query`, each row made an item by `convert` (`_listed_item` or `_plain_item`)."""
        if query.offset > _SQL_INT_MAX:  # past any table; SQLite and PostgreSQL take no larger LIMIT or OFFSET
            return []
        if query.limit is not None and query.limit > _SQL_INT_MAX:
            query = query._replace(limit=_SQL_INT_MAX)

        def read(connection: Connection, scope: _Scope, selected: _Preselection | None) -> builtins.list[_Listed]:
            if connection.dialect.name == "sqlite":
                walked = self._walked(connection, scope, query, selected, convert)
                if walked is not None:
                    return walked
                selected = self._on_indexes(connection, scope, query, selected)
            exact = connection.dialect.name not in _MYSQL
            paged = query.predicate is None and exact and query.limit is not None  # no filter: the page is SQL's
            statement = self._statements.listing(scope, query, selected, paged=paged)
            params = {**scope.params, "after": query.after, "before": query.before}
            if query.predicate is None and exact:
                if paged:
                    params.update(limit=query.limit, offset=query.offset)
                elif query.offset:
                    statement = OnDriver(statement.statement.offset(query.offset))
                return [convert(row) for row in statement.rows(connection, params)]
            if not exact:  # MariaDB/MySQL sort BLOBs on their first `max_sort_length` bytes: make it exact
                rows = sorted(statement.rows(connection, params), key=_order, reverse=query.descending)
                return query.page([item for item in map(convert, rows) if _matches(query, item.value)])
            wanted = None if query.limit is None else query.offset + query.limit
            found = []
            for row in statement.rows(connection, params):  # in order: stop once the page is full
                item = convert(row)
                if _matches(query, item.value):
                    found.append(item)
                    if len(found) == wanted:
                        break
            return query.page(found)

        # One statement (the fallback reading past damaged text is another, whole one too): no BEGIN on SQLite.
        listing = Work(lambda connection: self._filtered(connection, query, read), single=True)
        listed: builtins.list[_Listed] = yield listing
        return listed

    def _walked(
        self,
        connection: Connection,
        scope: _Scope,
        query: ItemQuery,
        selected: _Preselection | None,
        convert: Callable[[Any], _Listed],
    ) -> builtins.list[_Listed] | None:
        """SQLite: the page of `query` found among the first rows of the whole table in the listing's order, if
        its prefix is wide (holds `_WIDE` rows or more) and they hold the page; else None.

        SQLite's planner has no statistics of the namespace ranges: it always scans the prefix's range on the
        namespace index and sorts what it finds, which for a prefix holding most of 100,000 items took 20 ms where
        the first page in key order is 0.02 ms off the index holding that order. Reading only the first rows in
        that order bounds the cost where the prefix's rows lie elsewhere: the answer is then the range's, as
        before. Each answer is one statement's, so it is consistent without a transaction."""
        if query.limit is None or query.after is not None or query.before is not None:
            return None
        wanted = query.offset + query.limit
        if wanted == 0:
            return None
        if scope.shape != "all" and not self._statements.wide(connection, scope):
            return None
        walk = _WALK_ROWS + _WALK_PER_ITEM * wanted
        if walk > _SQL_INT_MAX:
            return None
        params = {**scope.params, "walk": walk}
        if query.predicate is None:  # the page is SQL's (a top-N sort of the rows walked)
            statement = self._statements.listing(scope, query, paged=True, walked=True)
            params.update(limit=query.limit, offset=query.offset)
            page = [convert(row) for row in statement.rows(connection, params)]
            return page if len(page) == query.limit else None
        statement = self._statements.listing(scope, query, selected, walked=True)
        found = []
        for row in statement.rows(connection, params):
            item = convert(row)
            if _matches(query, item.value):
                found.append(item)
                if len(found) == wanted:
                    return query.page(found)
        return None

    def _count_matching(self, query: ItemQuery) -> Steps[int]:
        items = self._items
        predicate = query.predicate

        def read(connection: Connection, scope: _Scope, selected: _Preselection | None) -> int:
            selected = self._on_indexes(connection, scope, query, selected)
            conditions = scope.conditions if selected is None else (*scope.conditions, selected.condition)
            if predicate is None:
                statement = sa.select(sa.func.count()).select_from(items).where(*conditions)
                return int(connection.execute(statement, scope.params).scalar_one())
            values = connection.execute(sa.select(items.c.value).where(*conditions), scope.params).scalars()
            return sum(1 for value in values if predicate(decode_value(value)))

        counted: int = yield Work(lambda connection: self._filtered(connection, query, read), single=True)
        return counted

    def _stored_namespaces(self, prefix: Namespace) -> Steps[builtins.list[Namespace]]:
        items = self._items

        def body(connection: Connection) -> builtins.list[str]:
            scope = self._live_in(prefix, connection.dialect.name)
            # with the namespace's digest heading each row key: a damaged namespace column (another tenant's
            # namespace, or one holding nothing) does not match it
            head = sa.func.substr(items.c.address, 1, _NAMESPACE_DIGEST)
            statement = sa.select(items.c.namespace, head).distinct().where(*scope.conditions)
            if connection.dialect.name in _MYSQL:  # their DISTINCT compares BLOBs on the first `max_sort_length` bytes
                statement = statement.add_columns(sa.func.sha2(items.c.namespace, 256))
            found = builtins.list(connection.execute(statement, scope.params))
            for row in found:
                if _namespace_digest(row[0]) != row[1]:
                    raise CorruptMemoryError(
                        f"a stored item's namespace does not match its row key: damaged ({row[0]!r:.100})"
                    )
            return [row[0] for row in found]  # distinct: a namespace has one digest

        stored: builtins.list[str] = yield Work(body, single=True)
        return [_stored_namespace(encoded) for encoded in stored]

    def _expire(self) -> Steps[int]:
        items = self._items

        def body(connection: Connection) -> int:
            result = connection.execute(sa.delete(items).where(items.c.expires_at_ms <= _clock.wall_ms()))
            return int(result.rowcount or 0)

        removed: int = yield Work(body, write=True)
        return removed

    # Helpers ------------------------------------------------------------------------------------------------

    def _filtered(
        self,
        connection: Connection,
        query: ItemQuery,
        read: Callable[[Connection, _Scope, _Preselection | None], _T],
    ) -> _T:
        """`read` the live items under the query's prefix kept by its filter's pre-selection (`_filters`). SQLite's
        JSON functions raise on a damaged (malformed) value: then the rows are read without it, so that decoding
        the damaged one raises `CorruptMemoryError`."""
        scope = self._live_in(query.prefix, connection.dialect.name)
        selected = None if query.filter is None else self._preselection(query.filter, connection.dialect.name)
        if selected is None:
            return read(connection, scope, None)
        try:
            return read(connection, scope, selected)
        except sa.exc.OperationalError as error:
            if "malformed JSON" not in str(error):
                raise
            logger.warning("a stored item's value is not JSON: reading %s without the filter's pre-selection", self)
            return read(connection, scope, None)

    def _on_indexes(
        self, connection: Connection, scope: _Scope, query: ItemQuery, selected: _Preselection | None
    ) -> _Preselection | None:
        """SQLite: the pre-selection of the query's filter written on the indexed fields' expressions, where the
        table has indexed fields and the prefix is wide (holds `_WIDE` items or more); else `selected`.

        Not for a narrower prefix: SQLite, without statistics, would take a field's index (an equality) over the
        namespace range, reading every item of the table whose field matches to find the few under the prefix."""
        if selected is None or query.filter is None or connection.dialect.name != "sqlite" or not self.indexed_fields:
            return selected
        if scope.shape != "all" and not self._statements.wide(connection, scope):
            return selected
        return self._preselection(query.filter, "sqlite", indexed=True)

    def _preselection(self, spec: Mapping[str, Any], dialect: str, *, indexed: bool = False) -> _Preselection | None:
        """The SQL pre-selection of the filter `spec` on `dialect` (`_filters`; on PostgreSQL, on the values as
        jsonb, `_schema.value_jsonb`; `indexed`, on SQLite, on the indexed fields' expressions), remembered per
        filter: building it costs more than SQLite takes to run a small listing, and callers tend to repeat their
        filters."""
        try:
            key = (dialect, filter_text(spec), indexed)
        except (TypeError, ValueError):  # no JSON text to tell it by (prefilter translates none of it anyway)
            key = None
        found = None if key is None else self._statements.preselections.get(key)
        if found is None:
            items = self._items
            binary: sa.ColumnElement[Any] | None = None
            nul: sa.ColumnElement[bool] | None = None
            if dialect == "postgresql":
                column = f"{self.engine.dialect.identifier_preparer.format_table(items)}.value"  # quoted if need be
                binary = sa.literal_column(value_jsonb(column))
                nul = sa.literal_column(has_nul(column), sa.Boolean)
            json5 = dialect == "sqlite" and _reads_json5(self.engine.dialect)
            fields = self.indexed_fields if indexed else ()
            condition = prefilter(spec, items.c.value, dialect, binary, nul, json5=json5, indexed=fields)
            found = (None if condition is None else _Preselection(key, condition),)
            if key is not None:
                self._statements.preselections.put(key, found)
        return found[0]

    def _live_in(self, prefix: Namespace, dialect: str) -> _Scope:
        """SQL: the item is live and its namespace starts with `prefix`, label by label (its range inlined into the
        SQL text on PostgreSQL: see `_Statements`)."""
        now = _clock.wall_ms()
        if not prefix:
            return _Scope("all", self._statements.scopes["all"], {"now": now})
        low, high = prefix_range(prefix)  # the strings starting with `low` are exactly [low, high)
        shape = "head" if len(low) <= HEAD_CHARS else "long"
        if dialect == "postgresql":
            shape += "-inline"
        params = {"now": now, "low": low, "high": high, "head": low[:HEAD_CHARS]}
        return _Scope(shape, self._statements.scopes[shape], params)

    def _rows_at(self, connection: Connection, addresses: Sequence[str], *, lock: bool) -> dict[str, _Row]:
        """The rows at `addresses` (locked `FOR UPDATE` where the database has row locks and `lock` is set).

        Unlocked, up to `_READ_AT_ONCE` addresses are one statement: reads run outside a transaction (or in READ
        COMMITTED), so statements in turn could each see another state, half of an atomic `put_many`."""
        statement = self._statements.locked if lock and connection.dialect.name != "sqlite" else self._statements.at
        chunk = _IN_CHUNK if lock else _READ_AT_ONCE
        rows: dict[str, _Row] = {}
        for start in range(0, len(addresses), chunk):
            for found in connection.execute(statement, {"addresses": addresses[start : start + chunk]}):
                rows[found.address] = _Row.of(found[1:])
        return rows

    def _locked(self, connection: Connection, wanted: Mapping[str, tuple[str, str]]) -> dict[str, _Row]:
        """Lock the rows of `wanted` (address -> (encoded namespace, key)), creating placeholders (version 0) for
        the absent ones so that a concurrent creation waits; return the rows (placeholders included).

        A placeholder is not inserted over a stored row, and on PostgreSQL that takes no lock on it: if another
        transaction deletes the row before it is locked, the lock finds nothing, and that address is tried again
        (a placeholder, then the lock), else a concurrent creation could land between this check and this write,
        and be overwritten by it."""
        if connection.dialect.name == "sqlite":  # the whole database is this transaction's (BEGIN IMMEDIATE)
            return self._rows_at(connection, sorted(wanted), lock=True)
        rows: dict[str, _Row] = {}
        missing = sorted(wanted)
        for _ in range(_LOCK_ATTEMPTS):
            self._insert_placeholders(connection, {address: wanted[address] for address in missing})
            rows.update(self._rows_at(connection, missing, lock=True))
            missing = [address for address in missing if address not in rows]
            if not missing:
                return rows
        raise ConcurrentModificationError(f"{len(missing)} items kept being deleted while being locked; retry")

    def _insert_placeholders(self, connection: Connection, wanted: Mapping[str, tuple[str, str]]) -> None:
        """Insert a placeholder row (version 0, no value) at each address of `wanted` where no row is stored."""
        addresses = sorted(wanted)
        dialect = connection.dialect.name
        items = self._items
        placeholders = [
            {
                "address": address,
                "namespace": wanted[address][0],
                "ns_head": wanted[address][0][:HEAD_CHARS],
                "item_key": wanted[address][1],
                "key_head": wanted[address][1][:HEAD_CHARS],
                "value": "{}",
                "version": 0,
                "created_ms": 0,
                "updated_ms": 0,
            }
            for address in addresses
        ]
        for start in range(0, len(placeholders), _IN_CHUNK):
            chunk = placeholders[start : start + _IN_CHUNK]
            statement = dialect_insert(items, dialect)
            if dialect == "postgresql":
                connection.execute(statement.on_conflict_do_nothing(), chunk)
            else:
                ignoring = statement.on_duplicate_key_update({"address": statement.inserted.address})
                connection.execute(ignoring, chunk)


def _reads_json5(dialect: sa.Dialect) -> bool:
    """Whether SQLite's JSON functions read JSON5 too (3.42+), for the engine's driver or Python's own."""
    versions = [getattr(dialect.loaded_dbapi, "sqlite_version_info", (0,)), sqlite3.sqlite_version_info]
    return max(versions) >= (3, 42)


def _stored_namespace(encoded: str) -> Namespace:
    """The namespace of a stored row (`CorruptMemoryError` if its column holds no encoded namespace)."""
    try:
        return decode_namespace(encoded)
    except ValueError:
        raise CorruptMemoryError(f"a stored item's namespace is damaged: {encoded!r:.200}") from None


_decoded_namespace = functools.lru_cache(maxsize=4096)(_stored_namespace)  # a page's rows share few namespaces


def _matches(query: ItemQuery, value: Mapping[str, Any]) -> bool:
    return query.predicate is None or query.predicate(value)


def _order(row: Any) -> tuple[str, str]:
    return row.item_key, row.namespace


def _above(column: Any, number: int) -> bool:
    """``column > number`` as SQL judges it: SQLite orders text and blobs (damage its dynamic typing keeps in an
    integer column) after every number, so an item holding them reads as live, and is refused as damaged."""
    return isinstance(column, (str, bytes)) or column > number


def _alive(expires_at_ms: Any, now: int) -> bool:
    return expires_at_ms is None or _above(expires_at_ms, now)


def _check_integers(version: Any, created_ms: Any, updated_ms: Any, expires_at_ms: Any) -> None:
    """`ValueError` unless a row's integer columns hold ints: SQLite's dynamic typing keeps whatever a damaged row
    holds, text, or a REAL that `int` would truncate into a version no write gave (1.5 read as 1)."""
    if (
        type(version) is not int
        or type(created_ms) is not int
        or type(updated_ms) is not int
        or (expires_at_ms is not None and type(expires_at_ms) is not int)
    ):
        raise ValueError(
            f"version {version!r:.40} or a time ({created_ms!r:.40}, {updated_ms!r:.40}, "
            f"{expires_at_ms!r:.40}) is no integer"
        )


def _current(row: _Row | None, now: int, namespace: Namespace, key: str) -> int:
    """The version a compare-and-set compares with: 0 for an absent, placeholder or expired item;
    `CorruptMemoryError` for a damaged one (a version 0 that is no placeholder would otherwise read as absent, and be
    overwritten by a write expecting none)."""
    if row is None or not _alive(row.expires_at_ms, now) or _is_placeholder(row):
        return 0
    try:
        _check_integers(row.version, row.created_ms, row.updated_ms, row.expires_at_ms)
        check_stored_item(row.version, row.expires_at_ms, None if row.ttl is None else float(row.ttl))
    except (ValueError, TypeError) as error:
        raise _damaged(namespace, key, error) from None
    return row.version


def _is_placeholder(row: _Row) -> bool:
    """Whether `row` is a placeholder `_insert_placeholders` wrote in this transaction (no write leaves a version 0,
    nor a time 0)."""
    return row.version == 0 and row.created_ms == 0 and row.updated_ms == 0


def _item(row: Any, address: tuple[Namespace, str] | None = None) -> Item:
    """The `Item` of a row (`address`: its namespace and key when known, saving the decoding), checked
    (`CorruptMemoryError` naming it if damaged)."""
    namespace, key = address if address is not None else (_decoded_namespace(row.namespace), row.item_key)
    try:
        version, expires_at_ms = row.version, row.expires_at_ms
        _check_integers(version, row.created_ms, row.updated_ms, expires_at_ms)
        ttl = None if row.ttl is None else float(row.ttl)
        check_stored_item(version, expires_at_ms, ttl)
        return Item.model_construct(
            namespace=namespace,
            key=key,
            value=decode_value(row.value),
            version=version,
            created_at=_clock.utc(row.created_ms),
            updated_at=_clock.utc(row.updated_ms),
            expires_at=None if expires_at_ms is None else _clock.utc(expires_at_ms),
            ttl=ttl,
        )
    except (ValueError, TypeError, OverflowError) as error:  # OverflowError: a time beyond datetime's range
        raise _damaged(namespace, key, error) from None


def _listed_item(row: Sequence[Any]) -> Item:
    """The `Item` of a row read by a listing (its columns in `_LISTED` order)."""
    _checked_address(row)
    return _item(_Row.of(row[:-1]))


def _plain_item(row: Any) -> PlainItem:
    """The `PlainItem` of a row read by a listing (its columns in `_LISTED` order), checked as `_item` checks."""
    _checked_address(row)
    namespace, key, value, version, created_ms, updated_ms, expires_at_ms, ttl, _ = row
    try:
        _check_integers(version, created_ms, updated_ms, expires_at_ms)
        ttl = None if ttl is None else float(ttl)
        check_stored_item(version, expires_at_ms, ttl)
        return PlainItem(
            _decoded_namespace(namespace),
            key,
            decode_object(value),
            version,
            _clock.utc(created_ms),
            _clock.utc(updated_ms),
            None if expires_at_ms is None else _clock.utc(expires_at_ms),
            ttl,
        )
    except (ValueError, TypeError, OverflowError) as error:
        raise _damaged(_decoded_namespace(namespace), key, error) from None


def _damaged(namespace: Namespace, key: str, error: Exception) -> CorruptMemoryError:
    """The error for an item whose row holds a version, ttl, expiry or time no write leaves."""
    return CorruptMemoryError(f"item {key!r:.200} in {namespace!r:.200}: its stored row is damaged ({error})")
