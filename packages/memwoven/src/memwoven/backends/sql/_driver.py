"""Statements run on the database driver's own cursor, past SQLAlchemy's execution: for the hot paths only.

SQLAlchemy's execution of a statement (its compiled cache lookup, execution context, events and result object) took
longer than SQLite's own execution of a one-namespace listing, ~40% of a checkpoint's write on SQLite, half of a small
write's process time on PostgreSQL, as long as PostgreSQL's index scan of a small collection, and ~40% of a chat
append on SQLite. So the statements of those paths are compiled once (`DriverSQL`, `MultiRow`, `OnDriver`) and run
here (`rows`, `execute_many`), their errors raised as SQLAlchemy raises them (`driver_errors`), so that retries and
error translation (`memwoven.backends.sql._engine`) see no difference. (They are not seen by SQLAlchemy's events.)
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, NamedTuple, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler

__all__ = ["DriverSQL", "MultiRow", "OnDriver", "driver_errors", "execute_many", "rows"]

_S = TypeVar("_S", bound=sa.Executable)
logger = logging.getLogger("memwoven.sql")


class driver_errors:
    """Raise the errors of calls made on `connection`'s driver connection directly (`statement` with `parameters`)
    as SQLAlchemy raises them: a `DBAPIError`, the connection invalidated if the error means it is closed, so that
    `Database`'s retries and error translation see no difference. (A class: on a write's path, a generator-based
    context manager cost more than the check.)"""

    __slots__ = ("_connection", "_dbapi_connection", "_parameters", "_statement")

    def __init__(self, connection: Connection, statement: str, parameters: Any = ()) -> None:
        self._connection, self._statement, self._parameters = connection, statement, parameters
        self._dbapi_connection = connection.connection.dbapi_connection

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: object) -> None:
        if error is None:
            return
        connection = self._connection
        dialect = connection.dialect
        errors = dialect.loaded_dbapi.Error
        if not isinstance(error, errors):
            return
        closed = dialect.is_disconnect(error, self._dbapi_connection, None)
        if closed:
            connection.invalidate(error)
        raise DBAPIError.instance(
            self._statement, self._parameters, error, errors, connection_invalidated=closed
        ) from error


def rows(
    connection: Connection, text: str, parameters: Sequence[Any] | Mapping[str, Any], *, binary: bool = False
) -> Iterator[Sequence[Any]]:
    """The rows of the SQL `text` run on the driver cursor of `connection`'s pooled connection, within its
    transaction (sqlite3's stream as they are iterated; SQLAlchemy's aiosqlite adapter reads them all at once);
    `binary`, on psycopg 3's own cursor with results in binary format (a bytea column as its bytes, no base64 to
    make and read)."""
    dbapi_connection = connection.connection.dbapi_connection
    if dbapi_connection is None:
        yield from _through_sqlalchemy(connection, text, parameters)
        return
    with driver_errors(connection, text, parameters):
        if binary:
            driver: Any = connection.connection.driver_connection
            if getattr(connection.dialect, "is_async", False):
                from sqlalchemy.util import await_only

                yield from await_only(_binary_rows(driver, text, parameters))  # in `run_sync`'s greenlet
                return
            with driver.cursor(binary=True) as cursor:
                cursor.execute(text, parameters)
                yield from cursor.fetchall()
            return
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(text, parameters)
            if not getattr(connection.dialect, "is_async", False):
                yield from cast("Iterable[Sequence[Any]]", cursor)  # sqlite3 streams them
                return
            # the async adapter read them all already: its cursor is closed before any row is used, so that a
            # reader raising on a row (a damaged one) leaves no cursor for the garbage collector to close after
            # the connection is gone (aiosqlite then raises "Connection closed", an unraisable error)
            fetched = cursor.fetchall()
        finally:
            cursor.close()
        yield from fetched


def execute_many(connection: Connection, text: str, parameters: Sequence[Sequence[Any]]) -> None:
    """Run the SQL `text` once per parameter sequence (the driver's executemany) on the driver cursor of
    `connection`'s pooled connection, within its transaction; as SQLAlchemy's ``exec_driver_sql`` where the
    connection was invalidated earlier in the transaction."""
    dbapi_connection = connection.connection.dbapi_connection
    if dbapi_connection is None:
        _through_sqlalchemy(connection, text, parameters, many=True)
        return
    with driver_errors(connection, text, parameters):
        cursor = dbapi_connection.cursor()
        try:
            cursor.executemany(text, parameters)
        finally:
            cursor.close()


def _through_sqlalchemy(
    connection: Connection, text: str, parameters: Any, *, many: bool = False
) -> Iterable[Sequence[Any]]:
    """`rows` (or, `many`, `execute_many`) where the driver connection was invalidated earlier in this transaction:
    the statement goes through SQLAlchemy's ``exec_driver_sql``, which raises as SQLAlchemy does for such a
    connection. Its rows (none for `many`)."""
    logger.debug("the driver connection was invalidated earlier in this transaction; executing through SQLAlchemy")
    if many:
        connection.exec_driver_sql(text, [tuple(row) for row in parameters])
        return ()
    return connection.exec_driver_sql(text, parameters if isinstance(parameters, Mapping) else tuple(parameters))


async def _binary_rows(driver: Any, text: str, parameters: Any) -> list[Any]:
    async with driver.cursor(binary=True) as cursor:
        await cursor.execute(text, parameters)
        found: list[Any] = await cursor.fetchall()
        return found


def _positional(dialect: sa.Dialect) -> sa.Dialect:
    """`dialect`, or for a driver taking named parameters (psycopg's "pyformat", an SQLite engine made "named")
    the same dialect taking them positionally ("%s"; SQLite "?"), which the driver accepts too: a statement's
    VALUES group can then be repeated."""
    if dialect.positional:
        return dialect
    return type(dialect)(paramstyle="qmark" if dialect.name == "sqlite" else "format")  # type: ignore[call-arg]


class DriverSQL(NamedTuple):
    """A statement compiled for a driver with positional parameters: its text, the names of its parameters in
    order, the values bound in the statement itself (a filter's operands, an upsert's increments) and the
    conversions its column types make of the values given (a float column's)."""

    text: str
    names: tuple[str, ...]
    fixed: dict[str, Any]
    processors: dict[str, Callable[[Any], Any]]

    @classmethod
    def of(
        cls, statement: sa.ClauseElement, dialect: sa.Dialect, column_keys: Sequence[str] | None = None
    ) -> DriverSQL | None:
        """`statement` compiled for `dialect` (an insert given values for `column_keys`), with positional parameters
        (`_positional`), or None if its parameters need more of SQLAlchemy (a list expanded, a value rendered into
        the text)."""
        compiled = cast("SQLCompiler", statement.compile(dialect=_positional(dialect), column_keys=column_keys))
        names = compiled.positiontup
        binds = compiled.binds.values()
        if names is None or any(b.expanding or b.literal_execute for b in binds):
            return None
        fixed = {name: bind.value for name, bind in compiled.binds.items() if not bind.required}
        processors = cast("dict[str, Callable[[Any], Any]]", dict(compiled._bind_processors))
        return cls(compiled.string, tuple(names), fixed, processors)

    def parameters(self, given: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional parameters for the values `given` by name (with the statement's own)."""
        values = {**self.fixed, **given}
        for name, process in self.processors.items():
            if values[name] is not None:
                values[name] = process(values[name])
        return tuple(values[name] for name in self.names)


class MultiRow(NamedTuple):
    """A one-row INSERT compiled for the driver (`DriverSQL`), repeated into as many VALUES groups as rows: the
    text before and after its one group, the group, the parameters after the groups (the upsert's own) and each
    column's conversion."""

    head: str
    group: str
    tail: str
    keys: tuple[str, ...]
    fixed: tuple[Any, ...]
    processors: tuple[Callable[[Any], Any] | None, ...]

    @classmethod
    def of(cls, statement: sa.Insert, dialect: sa.Dialect, keys: Sequence[str]) -> MultiRow | None:
        """`statement`, an insert of the columns `keys`, compiled for `dialect` with positional parameters and split
        around its one VALUES group, or None if its text is not laid out so (one group of one parameter per column,
        each perhaps cast, before every other parameter)."""
        dialect = _positional(dialect)
        placeholder = "?" if dialect.paramstyle == "qmark" else "%s"
        driver = DriverSQL.of(statement, dialect, keys)
        if driver is None or tuple(driver.names[: len(keys)]) != tuple(keys):
            return None
        head, found, rest = driver.text.partition(" VALUES (")
        closing = rest.find(")")
        if not found or closing < 0 or placeholder in head or "(" in rest[:closing]:
            return None
        group, tail = f"({rest[: closing + 1]}", rest[closing + 1 :]
        if group.count(placeholder) != len(keys):
            return None
        fixed = tuple(driver.fixed[name] for name in driver.names[len(keys) :])
        return cls(
            f"{head} VALUES ", group, tail, tuple(keys), fixed, tuple(driver.processors.get(key) for key in keys)
        )

    def of_rows(self, rows: Sequence[Mapping[str, Any]]) -> tuple[str, list[Any]]:
        """The statement's text for `len(rows)` rows and its parameters."""
        values: list[Any] = []
        for row in rows:
            for key, process in zip(self.keys, self.processors):
                value = row[key]
                values.append(value if process is None or value is None else process(value))
        values.extend(self.fixed)
        return f"{self.head}{', '.join(itertools.repeat(self.group, len(rows)))}{self.tail}", values


class OnDriver(Generic[_S]):
    """A statement with bound parameters, run on SQLite (and, `binary`, on psycopg 3 with results in binary format)
    as its SQL text compiled once per dialect (`DriverSQL`) on the driver's cursor (`rows`); elsewhere, or where its
    parameters need more of SQLAlchemy, through SQLAlchemy's execution."""

    __slots__ = ("_compiled", "binary", "statement")

    def __init__(self, statement: _S, *, binary: bool = False) -> None:
        self.statement = statement
        self.binary = binary
        self._compiled: dict[sa.Dialect, DriverSQL | None] = {}  # a sync and an async engine have a dialect each

    def rows(self, connection: Connection, parameters: Mapping[str, Any]) -> Iterable[Sequence[Any]]:
        """The rows of the statement run with `parameters` (by name) in `connection`'s transaction, by position;
        on sqlite3 they stream as they are iterated (none for a statement returning none). On the driver's cursor the
        statement runs at the first iteration, through SQLAlchemy when this is called: iterate at once."""
        dialect = connection.dialect
        binary = self.binary and dialect.name == "postgresql" and dialect.driver == "psycopg"
        if dialect.name == "sqlite" or binary:
            if dialect not in self._compiled:  # threads compiling it at once store the same
                self._compiled[dialect] = DriverSQL.of(cast("sa.ClauseElement", self.statement), dialect)
            driver = self._compiled[dialect]
            if driver is not None:
                return rows(connection, driver.text, driver.parameters(parameters), binary=binary)
        result = connection.execute(self.statement, parameters)
        return result if result.returns_rows else ()

    def execute(self, connection: Connection, parameters: Mapping[str, Any]) -> list[Sequence[Any]]:
        """`rows`, all of them read."""
        return list(self.rows(connection, parameters))
