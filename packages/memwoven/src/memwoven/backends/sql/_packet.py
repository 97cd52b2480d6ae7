"""MariaDB/MySQL: rows too large for one statement refused before they are sent.

The server refuses a statement longer than its ``max_allowed_packet`` (16 MiB by default) and, for one well beyond
it, drops the connection mid-statement: that looked like a lost server (`BackendUnavailableError`, after as many
reconnections as a lost connection gets), and no retry could succeed. The drivers (PyMySQL, aiomysql) split a
batch into statements of about 1 MB of rows each, a row larger than that going alone, so the limit that matters is
one row's: its values as the driver escapes them into the statement (UTF-8, a NUL, newline, carriage return,
``\\x1a``, quote or backslash taking two bytes; bytes as ``_binary'...'``), plus the statement's own text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy.engine import Connection

from memwoven.errors import InvalidInputError

__all__ = ["check_rows"]

_MYSQL = ("mysql", "mariadb")
_LIMIT = "memwoven_max_allowed_packet"  # key of the limit in the DBAPI connection's `info`
# The text around one row's values (every statement memwoven sends is under 1 KiB with the longest prefix and
# schema names) and the packet's header.
_STATEMENT_TEXT = 2048
_QUOTED = 11  # what a value adds besides its text: quotes, a "_binary" introducer, the comma
_ESCAPED = tuple("\x00\n\r\x1a'\"\\")
_ESCAPED_BYTES = tuple(character.encode("ascii") for character in _ESCAPED)


def packet_limit(connection: Connection) -> int | None:
    """The ``max_allowed_packet`` of `connection`'s session on MariaDB/MySQL (read at its first use, then kept with
    the DBAPI connection: the server fixes it when the connection opens); None on other databases."""
    if connection.dialect.name not in _MYSQL:
        return None
    info = connection.info
    limit: int | None = info.get(_LIMIT)
    if limit is None:
        limit = info[_LIMIT] = int(connection.exec_driver_sql("SELECT @@max_allowed_packet").scalar_one())
    return limit


def check_rows(
    connection: Connection, columns: Sequence[Sequence[str | bytes]], fixed: int, name: Callable[[int], str]
) -> None:
    """On MariaDB/MySQL, raise `InvalidInputError` if a row would not fit in one statement (`packet_limit`): the
    rows' variable values given as parallel `columns`, with `fixed` bytes at most of each row's other values;
    `name(i)` names row ``i`` in the error. Elsewhere nothing.

    A bound from each column's longest value settles the usual case at the cost of a ``len`` per value; only past
    it is each row measured, and its escaped size counted only if its own bound exceeds the limit."""
    limit = packet_limit(connection)
    if limit is None or not columns or not columns[0]:
        return
    room = limit - _STATEMENT_TEXT - fixed
    if sum(4 * max(map(len, column)) + _QUOTED for column in columns) <= room:
        return
    for position in range(len(columns[0])):
        cells = [column[position] for column in columns]
        if sum(map(_worst, cells)) <= room:
            continue
        size = sum(map(_escaped, cells))
        if size > room:
            raise InvalidInputError(
                f"{name(position)} takes {size + fixed:,} bytes in an SQL statement; the server takes statements "
                f"of at most {limit:,} bytes (max_allowed_packet), the statement's own text included: store less, "
                "or raise the server's max_allowed_packet"
            )


def _worst(cell: str | bytes) -> int:
    """At least `_escaped(cell)`, without reading the value."""
    per_unit = 2 if isinstance(cell, bytes) or cell.isascii() else 4
    return per_unit * len(cell) + _QUOTED


def _escaped(cell: str | bytes) -> int:
    """The bytes `cell` takes in a statement as the driver escapes it (at most: without backslash escapes, in
    the NO_BACKSLASH_ESCAPES mode, only quotes are doubled)."""
    if isinstance(cell, bytes):
        return len(cell) + sum(map(cell.count, _ESCAPED_BYTES)) + _QUOTED
    size = len(cell) if cell.isascii() else len(cell.encode("utf-8", "surrogatepass"))
    return size + sum(map(cell.count, _ESCAPED)) + _QUOTED
