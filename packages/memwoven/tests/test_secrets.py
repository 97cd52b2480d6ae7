"""Passwords in URLs are never shown: not in reprs, not in errors (nor their causes), not in logs, not by the CLI.

Every server here is 127.0.0.1 on a port nothing listens on, so each failure is an immediate refusal.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from cli_support import memwoven

from memwoven import BackendUnavailableError, InvalidInputError, MemwovenError
from memwoven.cli import _app as cli
from memwoven.contracts import ChatMemory, VectorMemory
from memwoven.urls import open_chat_memory, open_vector_memory, redact_text, redact_url

PASSWORD = "Hunter2-s3cret"
ENCODED = "Hu%40nt%2Fer2-s3cret"  # "Hu@nt/er2-s3cret", percent-encoded as a URL needs it
SHOWN = ("s3cret", "Hunter2", "Hu@nt", "Hu%40nt")  # no piece of either password may appear


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


PORT = _closed_port()


def _assert_hidden(text: str) -> None:
    for piece in SHOWN:
        assert piece not in text, text


def _everything_about(error: BaseException) -> str:
    """What a log or a console would show of an error: its message, its causes, the whole traceback."""
    return "".join(traceback.format_exception(type(error), error, error.__traceback__)) + repr(error)


# Server URLs: (name, url, opens a chat memory too). Each holds the password in the user info, encoded or not.
SERVER_URLS = [
    ("postgresql", f"postgresql://me:{PASSWORD}@127.0.0.1:{PORT}/db", True),
    ("postgresql-encoded", f"postgresql://me:{ENCODED}@127.0.0.1:{PORT}/db", True),
    ("postgresql-query", f"postgresql://me@127.0.0.1:{PORT}/db?sslmode=disable&password={PASSWORD}", True),
    ("postgresql-query-hash", f"postgresql://me@127.0.0.1:{PORT}/db?password=ab#{PASSWORD}", True),  # one password
    ("mysql", f"mysql://root:{PASSWORD}@127.0.0.1:{PORT}/db", True),
    ("mariadb-encoded", f"mariadb://root:{ENCODED}@127.0.0.1:{PORT}/db?table_prefix=app_", True),
    ("redis", f"redis://:{PASSWORD}@127.0.0.1:{PORT}/0", True),
    ("redis-user", f"redis://me:{ENCODED}@127.0.0.1:{PORT}/0?prefix=app", True),
    ("redis-query", f"redis://127.0.0.1:{PORT}/0?password={PASSWORD}", True),
    ("redis-user-equals", f"redis://me:a=b@{PASSWORD}@127.0.0.1:{PORT}/0", True),  # redis-py: all before the last @
    ("rediss", f"rediss://:{PASSWORD}@127.0.0.1:{PORT}/0", True),
    ("qdrant", f"qdrant://:{PASSWORD}@127.0.0.1:{PORT}", False),
]


def _openers(with_chat: bool) -> list[tuple[str, Callable[[str], Any]]]:
    vector = ("vector", lambda url: open_vector_memory(url, collection="c"))  # no dimension: nothing checked at open
    return [("chat", open_chat_memory), vector] if with_chat else [vector]


CASES = [
    pytest.param(url, opener, id=f"{name}-{kind}")
    for name, url, with_chat in SERVER_URLS
    for kind, opener in _openers(with_chat)
]


async def _first_async_call(memory: ChatMemory | VectorMemory) -> None:
    try:
        await (memory.aload("s") if isinstance(memory, ChatMemory) else memory.acount())
    finally:
        await memory.aclose()


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
@pytest.mark.parametrize(("url", "opener"), CASES)
def test_reprs_errors_and_logs_never_show_the_password(
    url: str, opener: Callable[[str], Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # whatever the drivers log on the way
    memory = opener(url)
    _assert_hidden(repr(memory))
    assert "***" in repr(memory)
    with pytest.raises(BackendUnavailableError) as sync_error:
        memory.load("s") if isinstance(memory, ChatMemory) else memory.count()
    memory.close()
    _assert_hidden(_everything_about(sync_error.value))
    assert f"127.0.0.1:{PORT}" in str(sync_error.value)  # the error still says where
    with pytest.raises(BackendUnavailableError) as async_error:
        asyncio.run(_first_async_call(opener(url)))
    _assert_hidden(_everything_about(async_error.value))
    _assert_hidden("\n".join(f"{record.getMessage()} {record.args}" for record in caplog.records))


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
@pytest.mark.parametrize("url", [url for _, url, _ in SERVER_URLS])
def test_a_dimension_checked_at_open_never_shows_the_password(url: str) -> None:
    with pytest.raises(BackendUnavailableError) as raised:  # the stored dimension is read at construction
        open_vector_memory(url, collection="c", dimension=3)
    _assert_hidden(_everything_about(raised.value))


@pytest.mark.parametrize(
    "url",
    [
        f"redis+cluster://:{PASSWORD}@127.0.0.1:{PORT}/0",  # the cluster client connects at once
        f"redis://me:{PASSWORD}/x@127.0.0.1:{PORT}/0",  # an unencoded '/' makes the password look like a port
        f"redis://:{PASSWORD}@127.0.0.1:notaport/0",
        f"postgresql://me:{PASSWORD}@[::1/db",
        f"postgresql://me:{PASSWORD}@127.0.0.1:{PORT}/db?table_prefix=bad-prefix",
        f"postgresql://me:{PASSWORD}@127.0.0.1:{PORT}/db?table_prefix=a&table_prefix=b",
        f"postgresql+psycopg2://me:{PASSWORD}@127.0.0.1:{PORT}/db",
        f"oracle://me:{PASSWORD}@127.0.0.1:{PORT}/db",
        f"file://me:{PASSWORD}@host/dir",
        f"qdrant+local://me:{PASSWORD}@host/dir",
        f"qdrant://127.0.0.1:{PORT}?api_key={PASSWORD}",  # no query string: the key goes as api_key= or password
        f"unknown://me:{PASSWORD}@127.0.0.1/",
    ],
)
def test_urls_refused_at_opening_never_show_the_password(url: str) -> None:
    for opener in (open_chat_memory, lambda u: open_vector_memory(u, collection="c", dimension=3)):
        with pytest.raises(MemwovenError) as raised:
            opener(url)
        assert isinstance(raised.value, (InvalidInputError, BackendUnavailableError))
        _assert_hidden(_everything_about(raised.value))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://me:pw@h:5432/db", "postgresql://me:***@h:5432/db"),
        ("postgresql://me:p@ss/w?rd@h/db?x=1", "postgresql://me:***@h/db?x=1"),  # unencoded '@', '/', '?'
        ("postgresql://me:pw@h/db?x=a@b", "postgresql://me:***@h/db?x=a@b"),
        ("postgresql://me@h/db?password=pw&sslmode=require", "postgresql://me@h/db?password=***&sslmode=require"),
        ("redis://h:6379/0?Password=pw;api_key=k", "redis://h:6379/0?Password=***;api_key=***"),
        ("qdrant://h?api-key=k&access_key=k2&token=t", "qdrant://h?api-key=***&access_key=***&token=***"),
        ("postgresql://me@h:5432/db?options=-csearch_path%3Dx", "postgresql://me@h:5432/db?options=-csearch_path%3Dx"),
        ("sqlite:///relative/path.db", "sqlite:///relative/path.db"),
        ("file:relative/dir", "file:relative/dir"),
        ("memory://", "memory://"),
        ("redis://me:a=b@pw@h:6379/0", "redis://me:***@h:6379/0"),  # urllib's user info ends at the last '@'
        ("postgresql://me@h/db?password=ab#pw&x=1", "postgresql://me@h/db?password=***&x=1"),  # '#' is in the value
        ("postgresql://me@h/db?pass%77ord=pw", "postgresql://me@h/db?pass%77ord=***"),  # the name as drivers decode it
        ("postgresql://me@h/db?a=b?password=pw", "postgresql://me@h/db?a=b?password=***"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_url_takes_sqlalchemy_urls_and_redact_text_hides_pieces() -> None:
    from sqlalchemy.engine import make_url

    assert redact_url(make_url("postgresql://me:pw@h/db?password=pw")) == "postgresql://me:***@h/db?password=***"
    url = f"redis://me:{PASSWORD}/x@h/0"
    assert redact_text(f"Port could not be cast to integer value as '{PASSWORD}'", url) == (
        "Port could not be cast to integer value as '***'"
    )
    assert redact_text("nothing secret here", "redis://h/0") == "nothing secret here"
    hashed = f"postgresql://me@h/db?password=ab#{PASSWORD}"
    assert redact_text(f"database h refused 'ab#{PASSWORD}'", hashed) == "database h refused '***'"


CLI_CALLS = [
    ("sessions", "list", f"postgresql://me:{PASSWORD}@127.0.0.1:{PORT}/db"),
    ("sessions", "list", f"mysql://root:{ENCODED}@127.0.0.1:{PORT}/db"),
    ("sessions", "show", f"redis://:{PASSWORD}@127.0.0.1:{PORT}/0", "s"),
    ("sessions", "delete", f"redis://me:{PASSWORD}/x@127.0.0.1:{PORT}/0", "s"),
    ("vectors", "stats", f"postgresql://me@127.0.0.1:{PORT}/db?password={PASSWORD}"),
    ("vectors", "stats", f"qdrant://:{PASSWORD}@127.0.0.1:{PORT}"),
    ("export", f"redis://:{PASSWORD}@127.0.0.1:{PORT}/0"),
    ("migrate", f"postgresql://me:{PASSWORD}@127.0.0.1:{PORT}/db", f"mysql://root:{ENCODED}@127.0.0.1:{PORT}/db"),
]


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
@pytest.mark.parametrize("args", CLI_CALLS, ids=lambda args: "-".join(args[:2]) + "-" + args[-1].split(":")[0])
def test_the_cli_never_shows_the_password(args: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.run(args)
    shown = capsys.readouterr()
    assert exited.value.code == 1
    _assert_hidden(shown.out + shown.err)
    assert shown.err.startswith("memwoven: error: ")
    assert "***" in shown.err


def test_the_cli_entry_point_never_shows_the_password_even_when_debugging() -> None:
    """The real console script in a subprocess, also with MEMWOVEN_DEBUG=1 (a full traceback)."""
    args = ("sessions", "list", f"postgresql://me:{PASSWORD}@127.0.0.1:{PORT}/db")
    with ThreadPoolExecutor(2) as pool:
        plain = pool.submit(memwoven, *args)
        debugging = pool.submit(memwoven, *args, env={"MEMWOVEN_DEBUG": "1"})
        results = [plain.result(), debugging.result()]
    for result in results:
        assert result.returncode == 1, result
        _assert_hidden(result.stdout + result.stderr)
        assert "***" in result.stderr, result
    assert "Traceback" in results[1].stderr
    assert "BackendUnavailableError" in results[1].stderr
