"""MariaDB/MySQL: a row whose statement would exceed the server's max_allowed_packet (16 MiB here) is refused with
`InvalidInputError` before anything is written (the server used to drop the connection: `BackendUnavailableError`
after every reconnection), while batches of small rows, which the driver sends in statements of its own size, are
not."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from sql_support import sql_place

from memwoven import InvalidInputError, Message, SQLItemMemory
from memwoven.backends.sql import SQLChatMemory, SQLVectorMemory

pytestmark = pytest.mark.service

MIB = 1024 * 1024
_OVER = "x" * (17 * MIB)  # over the server's default max_allowed_packet, 16 MiB


@pytest.fixture
def place(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(URL, table prefix) on MariaDB; the tables are dropped after the test."""
    with sql_place("mariadb", tmp_path) as where:
        yield where


def _packet_limit(memory: SQLItemMemory) -> int:
    with memory.engine.connect() as connection:
        return int(connection.exec_driver_sql("SELECT @@max_allowed_packet").scalar_one())


def test_an_item_too_large_for_one_statement_is_refused_and_its_batch_writes_nothing(
    place: tuple[str, str],
) -> None:
    url, prefix = place
    with SQLItemMemory(url, table_prefix=prefix) as items:
        assert _packet_limit(items) == 16 * MIB  # the server's default, which the sizes here assume
        version = items.put(("ns",), "kept", {"v": 1})
        with pytest.raises(InvalidInputError, match="max_allowed_packet") as refused:
            items.put_many([(("ns",), "new", {"v": 2}), (("ns",), "kept", {"v": 3}), (("ns",), "big", {"v": _OVER})])
        assert "'big'" in str(refused.value)
        with pytest.raises(InvalidInputError, match="max_allowed_packet"):
            items.put(("ns",), "kept", {"v": _OVER}, expected_version=version)
        kept = items.get(("ns",), "kept")
        assert kept is not None
        assert (kept.value, kept.version) == ({"v": 1}, version)
        assert items.get(("ns",), "new") is None
        assert items.count(("ns",)) == 1


def test_the_escaped_size_counts_not_the_characters(place: tuple[str, str]) -> None:
    """6 MiB of backslashes: 12 MiB of JSON text, 24 MiB once escaped for SQL."""
    url, prefix = place
    with SQLItemMemory(url, table_prefix=prefix) as items:
        with pytest.raises(InvalidInputError, match="max_allowed_packet"):
            items.put(("ns",), "k", {"v": "\\" * (6 * MIB)})
        assert items.count(("ns",)) == 0


def test_a_value_below_the_limit_is_stored(place: tuple[str, str]) -> None:
    url, prefix = place
    value = {"v": "y" * (16 * MIB - 64 * 1024)}
    with SQLItemMemory(url, table_prefix=prefix) as items:
        items.put(("ns",), "k", value)
        got = items.get(("ns",), "k")
        assert got is not None
        assert got.value == value


def test_a_message_too_large_is_refused_by_append_and_save_leaving_the_history(place: tuple[str, str]) -> None:
    url, prefix = place
    first = Message(role="user", content="hi")
    with SQLChatMemory(url, table_prefix=prefix) as chat:
        version = chat.append("s", [first])
        big = Message(role="user", content=_OVER)
        with pytest.raises(InvalidInputError, match="max_allowed_packet") as refused:
            chat.append("s", [Message(role="user", content="small"), big])
        assert "message 2 of session 's'" in str(refused.value)
        with pytest.raises(InvalidInputError, match="max_allowed_packet"):
            chat.save("s", [Message(role="user", content="replaced"), big])
        with pytest.raises(InvalidInputError, match="max_allowed_packet"):
            asyncio.run(chat.aappend("s", [big]))  # the async engine's connections (aiomysql) too
        assert chat.load_versioned("s") == ([first], version)


def test_a_document_too_large_is_refused_and_its_batch_writes_nothing(place: tuple[str, str]) -> None:
    url, prefix = place
    with SQLVectorMemory(url, table_prefix=prefix, collection="c", dimension=2) as vectors:
        vectors.store([{"id": "a", "content": "kept", "embedding": [1.0, 0.0]}])
        with pytest.raises(InvalidInputError, match="max_allowed_packet") as refused:
            vectors.store(
                [
                    {"id": "b", "content": "small", "embedding": [0.0, 1.0]},
                    {"id": "big", "content": _OVER, "embedding": [1.0, 1.0]},
                ]
            )
        assert "document 'big'" in str(refused.value)
    with SQLVectorMemory(url, table_prefix=prefix, collection="c", dimension=2) as reopened:
        assert [(d.id, d.content) for d in reopened.get(["a", "b", "big"])] == [("a", "kept")]


def test_batches_of_small_rows_larger_than_the_limit_together_are_written(place: tuple[str, str]) -> None:
    url, prefix = place
    n, each = 20, "z" * MIB  # 20 MiB in one call: the driver splits it into statements of about 1 MB
    with SQLItemMemory(url, table_prefix=prefix) as items:
        items.put_many([(("ns",), f"k{i}", {"v": each}) for i in range(n)])
        assert items.count(("ns",)) == n
    with SQLChatMemory(url, table_prefix=prefix) as chat:
        messages = [Message(role="user", content=each) for _ in range(n)]
        chat.append("s", messages)
        assert chat.load("s") == messages
    with SQLVectorMemory(url, table_prefix=prefix, collection="c", dimension=2) as vectors:
        vectors.store([{"id": f"d{i}", "content": each, "embedding": [1.0, float(i)]} for i in range(n)])
        assert vectors.count() == n
