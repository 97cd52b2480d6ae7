"""The tables of the SQL backends and the few statements whose SQL differs between databases.

All tables of one store share a name prefix (``memwoven_`` by default; lowercase, see `check_identifier`)::

    {prefix}meta        (name PK, value)                          -- one row: the schema version
    {prefix}sessions    (session_key PK, session_id, version, message_count, chain, updated_at, expires_at_ms)
    {prefix}messages    (session_key, seq, message_key, chain, body)  -- PK (session_key, seq),
                                                                      -- UNIQUE (session_key, message_key)
    {prefix}collections (collection_key PK, name, dimension, metric, version, generation)
    {prefix}vectors     (collection_key, doc_key, doc_id, content, metadata, embedding, version, deleted)
    {prefix}items       (address PK, namespace, ns_head, item_key, key_head, value, version, created_ms,
                         updated_ms, expires_at_ms, ttl)          -- INDEX (ns_head), INDEX (key_head),
                                                                  -- INDEX (expires_at_ms)
                        SQLite: INDEX (key_head, item_key, namespace) instead of INDEX (key_head)
                        PostgreSQL also: GIN INDEX (value_jsonb(value) jsonb_path_ops),
                                         INDEX (ns_head) WHERE has_nul(value),
                                         STATISTICS on has_nul's strpos (PostgreSQL 14+)

The items table (`memwoven.backends.sql.items`) stores its namespace and key as text compared in code point
order (`ORDERED_TEXT`): SQLite's default BINARY collation, PostgreSQL ``COLLATE "C"``, and on MariaDB/MySQL the
UTF-8 bytes in a BLOB (byte order is code point order, and unlike ``utf8mb4_bin`` it does not ignore trailing
spaces); ``ns_head`` and ``key_head``, their first `HEAD_CHARS` characters (`ORDERED_HEAD`), are what the indexes
hold (ids up to 64 KiB exceed an index entry). On PostgreSQL, filters (`memwoven.backends.sql._filters`) test the
value as ``jsonb`` (`value_jsonb`: NULL where the text holds ``\\u0000``, which ``jsonb`` refuses) through an
expression index; ``value`` stays the exact text.

No table name ends with another, so prefixes that start one another (``a_``, ``a_s``) never name the same table.

Ids and names are stored as data, never used in SQL text (but for the escaped literals of an item listing's
namespace range on PostgreSQL: see `memwoven.backends.sql.items`) or compared by the database: rows are keyed by the
SHA-256 of the id (`key_of`), so ids of any length and characters stay apart whatever the collation
(case twins, trailing spaces, NFC/NFD twins); a message's `id`, when it has one, is keyed the same way
(`message_key`, NULL without an id: NULLs never collide). Message bodies are stored as the exact
`Message.model_dump_json()` text and document metadata as JSON text (PostgreSQL's `json` type, which keeps the text
verbatim; plain text elsewhere), so what is read back is exactly what was written.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection
from sqlalchemy.schema import SchemaItem
from sqlalchemy.sql.compiler import DDLCompiler
from sqlalchemy.sql.ddl import BaseDDLElement

from memwoven.errors import CorruptMemoryError, InvalidInputError

__all__ = [
    "HEAD_CHARS",
    "ORDERED_TEXT",
    "SCHEMA_VERSION",
    "Tables",
    "check_identifier",
    "create_tables",
    "has_nul",
    "insert_ignoring",
    "key_of",
    "upsert",
    "upsert_rows",
    "value_jsonb",
]

SCHEMA_VERSION = "4"  # 4: items addressed namespace first, values indexed by expression on PostgreSQL (3 stored a
# generated jsonb column); 3: items' key_head; 2: message ids unique per session, rolling digests (none of 1-3 was
# published)
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,40}")
_MYSQL = ("mysql", "mariadb")
_MYSQL_TABLE: dict[str, Any] = {
    f"{d}_{k}": v for d in _MYSQL for k, v in (("engine", "InnoDB"), ("charset", "utf8mb4"))
}

KEY = sa.String(64).with_variant(mysql.CHAR(64, charset="ascii", collation="ascii_bin"), *_MYSQL)
ID_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), *_MYSQL)  # ids are up to 64 KiB of UTF-8
LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), *_MYSQL)


class _JSONColumn(sa.types.UserDefinedType[str]):
    """PostgreSQL's `json`, which (unlike `jsonb`) keeps the input text verbatim; read back cast to text so the
    driver does not parse it."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "JSON"

    def column_expression(self, column: Any) -> Any:
        return sa.cast(column, sa.Text)


# Not MariaDB's JSON: its check refuses documents nested over 32 levels, below what every other backend stores
# (models.MAX_JSON_DEPTH). Nor MySQL's binary JSON, which would normalize the text.
JSON_TEXT = LONG_TEXT.with_variant(_JSONColumn(), "postgresql")
"""Exact JSON text: PostgreSQL `json`, LONGTEXT on MariaDB/MySQL, TEXT on SQLite."""


def _nul_at(value: str = "value") -> str:
    return f"strpos({value}::text, '\\u0000')"


def has_nul(value: str = "value") -> str:
    """PostgreSQL: the SQL test of an item value column `value` whose text holds an escaped NUL, NULL as
    `value_jsonb` (the predicate of the partial index of such rows: cheap, since every insert evaluates it)."""
    return f"{_nul_at(value)} > 0"


def value_jsonb(value: str = "value") -> str:
    """PostgreSQL: the SQL of the item value column `value` as ``jsonb``, NULL where the text holds an escaped NUL
    (``\\u0000``), which ``jsonb`` refuses. Filters must use this very expression: it is what the GIN index holds."""
    return f"(CASE WHEN {_nul_at(value)} = 0 THEN {value}::jsonb END)"


def _postgresql_items_ddl(prefix: str, schema: str | None) -> list[tuple[sa.ExecutableDDLElement, int]]:
    """The items' PostgreSQL DDL, each with the server major version it needs: a GIN index (containment, ``@>``)
    of the values as `value_jsonb`, an index of the rows without it (so that a filter's pre-selection,
    ``value_jsonb @> ... OR has_nul ...``, is two index scans), and statistics of `has_nul`'s expression, without
    which the planner takes a third of the rows for NUL-holding and scans the table.

    An expression index, not a generated column: a stored ``jsonb`` copy doubled what every write sent to the heap
    and the WAL (the LangGraph checkpointer's steps ~7% slower on PostgreSQL), for filters that read the index."""
    statistics = f"{prefix}items_nul_stats" if schema is None else f'"{schema}".{prefix}items_nul_stats'
    statements = [
        (f"CREATE INDEX {prefix}items_by_value ON %(fullname)s USING gin ({value_jsonb()} jsonb_path_ops)", 0),
        (f"CREATE INDEX {prefix}items_with_nul ON %(fullname)s (ns_head) WHERE {has_nul()}", 0),
        (f"CREATE STATISTICS {statistics} ON ({_nul_at()}) FROM %(fullname)s", 14),
    ]
    return [(sa.DDL(statement), version) for statement, version in statements]  # type: ignore[no-untyped-call]


HEAD_CHARS = 100
"""How many characters of an item's encoded namespace and of its key the indexed `ns_head` and `key_head` keep."""


class _Utf8Bytes(sa.types.TypeDecorator[str]):
    """Text kept as its UTF-8 bytes (MariaDB/MySQL): compared byte by byte, which is code point order, with no
    collation's padding or folding."""

    impl = mysql.MEDIUMBLOB
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: sa.Dialect) -> bytes | None:
        return None if value is None else value.encode("utf-8")

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> str | None:
        try:
            return None if value is None else bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptMemoryError(f"a stored text is not UTF-8: {bytes(value)[:200]!r}") from None


class _Utf8Head(_Utf8Bytes):
    impl = mysql.VARBINARY(4 * HEAD_CHARS)  # type: ignore[assignment]
    cache_ok = True


ORDERED_TEXT = sa.Text().with_variant(sa.Text(collation="C"), "postgresql").with_variant(_Utf8Bytes(), *_MYSQL)
"""Text compared and sorted in code point order on every database (ids up to 64 KiB: not indexable)."""
ORDERED_HEAD = (
    sa.String(HEAD_CHARS)
    .with_variant(sa.String(HEAD_CHARS, collation="C"), "postgresql")
    .with_variant(_Utf8Head(), *_MYSQL)
)
"""The first `HEAD_CHARS` characters of an `ORDERED_TEXT` value, short enough for an index everywhere."""
DIGEST = sa.LargeBinary(16).with_variant(mysql.BINARY(16), *_MYSQL)
BLOB = sa.LargeBinary().with_variant(mysql.LONGBLOB(), *_MYSQL)


def check_identifier(value: object, what: str) -> str:
    """Validate a table prefix or schema name: lowercase ASCII letters, digits and '_', not starting with a digit,
    at most 41 characters.

    Lowercase only, because databases fold the case of names differently (SQLite always, even quoted; MariaDB
    with `lower_case_table_names`; PostgreSQL when unquoted): ``Acme_`` and ``acme_`` would share tables on some.
    Lowercase names are never quoted nor folded, so two distinct prefixes (or schemas) never share storage.
    """
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise InvalidInputError(
            f"{what} must be lowercase letters, digits and '_', not starting with a digit, at most 41 characters "
            f"(databases fold the case of names differently), got {value!r}"
        )
    return value


def key_of(identifier: str) -> str:
    """The fixed-size row key of a session or document id: the hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(identifier.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Tables:
    """Every table of one prefix and schema."""

    meta: sa.Table
    sessions: sa.Table
    messages: sa.Table
    collections: sa.Table
    vectors: sa.Table
    items: sa.Table

    @classmethod
    def build(cls, prefix: str, schema: str | None) -> Tables:
        """Describe the tables named with `prefix`, in `schema` (None: the connection's default schema)."""
        metadata = sa.MetaData(schema=schema)

        def table(name: str, *columns: SchemaItem) -> sa.Table:
            return sa.Table(f"{prefix}{name}", metadata, *columns, **_MYSQL_TABLE)

        vectors = table(
            "vectors",
            sa.Column("collection_key", KEY, primary_key=True),
            sa.Column("doc_key", KEY, primary_key=True),
            sa.Column("doc_id", ID_TEXT, nullable=False),
            sa.Column("content", LONG_TEXT, nullable=False),
            sa.Column("metadata", JSON_TEXT, nullable=False),
            sa.Column("embedding", BLOB, nullable=False),  # float32, little-endian
            sa.Column("version", sa.BigInteger, nullable=False),  # the collection version that last wrote it
            sa.Column("deleted", sa.Boolean, nullable=False),  # a tombstone, so other objects see the delete
        )
        sa.Index(f"{prefix}vectors_by_version", vectors.c.collection_key, vectors.c.version)
        messages = table(
            "messages",
            sa.Column("session_key", KEY, primary_key=True),
            sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("message_key", KEY, nullable=True),  # key_of(message.id); NULL when it has no id
            sa.Column("chain", DIGEST, nullable=False),  # the session's rolling digest through this message
            sa.Column("body", JSON_TEXT, nullable=False),
        )
        items = table(
            "items",
            sa.Column("address", KEY, primary_key=True),  # digests of the namespace and (namespace, key): see items
            sa.Column("namespace", ORDERED_TEXT, nullable=False),  # encoded: see backends.sql.items
            sa.Column("ns_head", ORDERED_HEAD, nullable=False),  # its first HEAD_CHARS characters, indexed
            sa.Column("item_key", ORDERED_TEXT, nullable=False),
            sa.Column("key_head", ORDERED_HEAD, nullable=False),  # its first HEAD_CHARS characters, indexed
            sa.Column("value", JSON_TEXT, nullable=False),
            sa.Column("version", sa.BigInteger, nullable=False),
            sa.Column("created_ms", sa.BigInteger, nullable=False),  # epoch ms
            sa.Column("updated_ms", sa.BigInteger, nullable=False),
            sa.Column("expires_at_ms", sa.BigInteger, nullable=True, index=True),  # NULL: never
            sa.Column("ttl", sa.Double, nullable=True),  # seconds
        )
        sa.Index(f"{prefix}items_by_namespace", items.c.ns_head)
        # SQLite indexes keys of any length: there the index holds the listings' whole order, so a listing of a
        # prefix holding most items reads its first page off the index, with no sort (`backends.sql.items`).
        sa.Index(f"{prefix}items_by_key", items.c.key_head).ddl_if(callable_=_not_sqlite)
        sa.Index(f"{prefix}items_in_order", items.c.key_head, items.c.item_key, items.c.namespace).ddl_if(
            dialect="sqlite"
        )
        for ddl, version in _postgresql_items_ddl(prefix, schema):
            sa.event.listen(items, "after_create", ddl.execute_if(callable_=_postgresql(version)))
        sa.Index(f"{prefix}messages_by_id", messages.c.session_key, messages.c.message_key, unique=True)
        return cls(
            meta=table(
                "meta",
                sa.Column("name", sa.String(64), primary_key=True),
                sa.Column("value", sa.String(255), nullable=False),
            ),
            sessions=table(
                "sessions",
                sa.Column("session_key", KEY, primary_key=True),
                sa.Column("session_id", ID_TEXT, nullable=False),
                sa.Column("version", sa.BigInteger, nullable=False),
                sa.Column("message_count", sa.Integer, nullable=False),
                sa.Column("chain", DIGEST, nullable=False),  # the rolling digest through its last message
                sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
                sa.Column("expires_at_ms", sa.BigInteger, nullable=True, index=True),  # sliding TTL, epoch ms
            ),
            messages=messages,
            collections=table(
                "collections",
                sa.Column("collection_key", KEY, primary_key=True),
                sa.Column("name", ID_TEXT, nullable=False),
                sa.Column("dimension", sa.Integer, nullable=True),
                sa.Column("metric", sa.String(16), nullable=False),
                sa.Column("version", sa.BigInteger, nullable=False),
                sa.Column("generation", sa.BigInteger, nullable=False),  # bumped by clear(): reload everything
            ),
            vectors=vectors,
            items=items,
        )


def create_tables(connection: Connection, tables: Tables, wanted: Sequence[sa.Table]) -> None:
    """Create `wanted` and the meta table if missing, then check the stored schema version.

    Idempotent. When several processes race to create the same tables, the losers fail with a duplicate-table
    error; the caller runs this again (`Work(ddl=True)` is retried) and the re-check then finds them.
    """
    schema = tables.meta.schema
    if schema is not None and connection.dialect.name == "postgresql":
        connection.execute(sa.schema.CreateSchema(schema, if_not_exists=True))
    tables.meta.metadata.create_all(connection, tables=[tables.meta, *wanted], checkfirst=True)
    if connection.dialect.name == "sqlite":  # indexes added to tables that exist (a PRAGMA a table to check)
        preparer = connection.dialect.identifier_preparer
        where = "" if schema is None else f"{preparer.quote_schema(schema)}."
        for table in wanted:
            # Not SQLAlchemy's checkfirst: it reflects the table's indexes, warning about each expression index
            # (`SQLItemMemory(indexed_fields=...)`). A race lost here fails on the duplicate; the caller retries.
            listed = connection.exec_driver_sql(f"PRAGMA {where}index_list({preparer.quote(table.name)})")
            present = {row[1] for row in listed}
            for index in table.indexes:
                if index.name not in present:
                    index.create(connection)  # honours the index's ddl_if
    connection.execute(insert_ignoring(connection, tables.meta, {"name": "schema_version", "value": SCHEMA_VERSION}))
    stored = connection.execute(
        sa.select(tables.meta.c.value).where(tables.meta.c.name == "schema_version")
    ).scalar_one()
    if stored != SCHEMA_VERSION:
        raise CorruptMemoryError(
            f"tables {tables.meta.name.removesuffix('meta')}* have schema version {stored}; "
            f"this memwoven reads version {SCHEMA_VERSION} (move the data with `memwoven export` from the release "
            "that wrote it and `memwoven import`, or use another table_prefix)"
        )


def _ddl_if(check: Callable[[sa.Dialect], bool]) -> Callable[..., bool]:
    """A callable for `ddl_if` / `execute_if`: the DDL runs where `check(dialect)` holds."""

    def callable_(
        ddl: BaseDDLElement,
        target: SchemaItem | str,
        bind: Connection | None,
        tables: list[sa.Table] | None = None,
        state: Any | None = None,
        *,
        dialect: sa.Dialect,
        compiler: DDLCompiler | None = None,
        checkfirst: bool = False,
    ) -> bool:
        return check(dialect)

    return callable_


_not_sqlite = _ddl_if(lambda dialect: dialect.name != "sqlite")


def _postgresql(version: int) -> Callable[..., bool]:
    """For `execute_if`: the DDL is for PostgreSQL `version` (major) or later."""
    return _ddl_if(lambda dialect: dialect.name == "postgresql" and (dialect.server_version_info or (0,)) >= (version,))


def dialect_insert(table: sa.Table, dialect: str) -> Any:
    """An INSERT into `table` with `dialect`'s conflict clauses (``on_conflict_do_*`` on PostgreSQL and SQLite,
    ``on_duplicate_key_update`` on MariaDB/MySQL). The dialect's package is imported here, at its first use: the
    PostgreSQL one alone takes ~65 ms, which a process on another database does without."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    if dialect == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)
    return mysql.insert(table)


def insert_ignoring(connection: Connection, table: sa.Table, values: Mapping[str, Any]) -> sa.Executable:
    """INSERT one row unless its primary key exists (then nothing changes; on MariaDB/MySQL the row is locked)."""
    dialect = connection.dialect.name
    statement = dialect_insert(table, dialect).values(values)
    ignoring: sa.Executable
    if dialect in ("postgresql", "sqlite"):
        ignoring = statement.on_conflict_do_nothing()
    else:
        first_key = table.primary_key.columns[0].name
        ignoring = statement.on_duplicate_key_update({first_key: statement.inserted[first_key]})
    return ignoring


def upsert(connection: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Insert `rows` or replace the rows with the same primary key: one statement, executed for many rows."""
    connection.execute(_upsert_statement(table, tuple(rows[0]), connection.dialect.name), rows)


def upsert_rows(
    connection: Connection, table: sa.Table, columns: tuple[str, ...], rows: Iterable[tuple[Any, ...]], chunk: int
) -> None:
    """`upsert` of rows given as tuples of `columns`, sent `chunk` rows at a time as the driver's own parameters:
    no per-row SQLAlchemy processing, so each value must be one the driver takes as it is (str, bytes, int, bool)."""
    compiled = _upsert_statement(table, columns, connection.dialect.name).compile(dialect=connection.dialect)
    statement, positional = str(compiled), tuple(compiled.positiontup or ()) == columns
    remaining = iter(rows)
    while batch := list(itertools.islice(remaining, chunk)):
        connection.exec_driver_sql(statement, batch if positional else [dict(zip(columns, row)) for row in batch])


@functools.lru_cache(maxsize=256)
def _upsert_statement(table: sa.Table, columns: tuple[str, ...], dialect: str) -> sa.Insert:
    """The upsert of `columns` into `table` on `dialect`, built once: building it costs more than a one-row write."""
    keys = [column.name for column in table.primary_key.columns]
    replaced = [name for name in columns if name not in keys]
    insert = dialect_insert(table, dialect)
    statement: sa.Insert
    if dialect in _MYSQL:
        statement = insert.on_duplicate_key_update({n: insert.inserted[n] for n in replaced})
    else:
        statement = insert.on_conflict_do_update(index_elements=keys, set_={n: insert.excluded[n] for n in replaced})
    return statement
