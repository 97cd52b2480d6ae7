"""Where an SQL test's tables live, and the conformance suites' storage hooks shared by the SQL backends."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memwoven.backends.sql import SQLChatMemory
from memwoven.backends.sql._schema import Tables
from memwoven_test_support import mysql_url, postgres_url, unique_name

KINDS = ("sqlite", "postgresql", "mariadb")


def drop_tables(url: str, prefix: str) -> None:
    """Drop every memwoven table named with `prefix` (and only those); `url` as memwoven takes it."""
    memory = SQLChatMemory(url, table_prefix=prefix)  # for memwoven's own choice of driver
    try:
        Tables.build(prefix, None).meta.metadata.drop_all(memory.engine, checkfirst=True)
    finally:
        memory.close()


@contextlib.contextmanager
def sql_place(kind: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(URL, table prefix) for one test on `kind`; on a server, its tables (and only those) are dropped after."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path}/db/memwoven.db", "memwoven_"
        return
    url = postgres_url() if kind == "postgresql" else mysql_url()
    prefix = unique_name("mwt") + "_"
    try:
        yield url, prefix
    finally:
        drop_tables(url, prefix)


class SQLHooks:
    """`reopen` and `neighbour` (a table prefix extending this one's) for a contract suite on an SQL backend."""

    def reopen(self, memory: Any) -> Any:
        return type(memory)(memory.engine.url, table_prefix=memory.table_prefix)

    @contextlib.contextmanager
    def neighbour(self, memory: Any) -> Iterator[Any]:
        with type(memory)(memory.engine.url, table_prefix=memory.table_prefix + "s_") as neighbour:
            try:
                yield neighbour
            finally:
                neighbour.drop_tables()
