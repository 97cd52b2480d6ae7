from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from memwoven import (
    FileChatMemory,
    FileVectorMemory,
    InMemoryChatMemory,
    InMemoryVectorMemory,
    InvalidInputError,
    SQLChatMemory,
    SQLItemMemory,
    SQLVectorMemory,
)
from memwoven.urls import (
    BACKENDS,
    CHAT_URL_VARIABLE,
    VECTOR_URL_VARIABLE,
    open_chat_memory,
    open_item_memory,
    open_vector_memory,
    redact_url,
    vector_collections,
)


def test_memory_urls() -> None:
    assert isinstance(open_chat_memory("memory://"), InMemoryChatMemory)
    vectors = open_vector_memory("memory://", dimension=3, metric="dot")
    assert isinstance(vectors, InMemoryVectorMemory)
    assert vectors.dimension == 3
    assert vectors.metric == "dot"


def test_file_urls(tmp_path: Path) -> None:
    with open_chat_memory(f"file://{tmp_path}/chats") as chat:
        assert isinstance(chat, FileChatMemory)
        chat.append("s", [{"role": "user", "content": "hi"}])
    with open_vector_memory(f"file://{tmp_path}/vectors", collection="notes", dimension=2) as vectors:
        assert isinstance(vectors, FileVectorMemory)
        vectors.store([{"id": "a", "embedding": [1.0, 0.0]}])
    assert (tmp_path / "vectors" / "notes.npz").exists()


def test_sqlite_urls(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/memory.db"
    with open_chat_memory(url) as chat:
        assert isinstance(chat, SQLChatMemory)
        chat.append("s", [{"role": "user", "content": "hi"}])
    with open_chat_memory(url) as again:
        assert again.load("s")[0].text == "hi"
    with open_vector_memory(url, collection="notes", dimension=2) as vectors:
        assert isinstance(vectors, SQLVectorMemory)


def test_the_environment_variables_are_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHAT_URL_VARIABLE, "memory://")
    monkeypatch.setenv(VECTOR_URL_VARIABLE, f"sqlite:///{tmp_path}/v.db")
    assert isinstance(open_chat_memory(), InMemoryChatMemory)
    with open_vector_memory(dimension=4) as vectors:
        assert isinstance(vectors, SQLVectorMemory)


@pytest.mark.parametrize("variable", [CHAT_URL_VARIABLE, VECTOR_URL_VARIABLE])
def test_a_missing_url_names_the_variable(variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(variable, raising=False)
    opener = open_chat_memory if variable == CHAT_URL_VARIABLE else open_vector_memory
    with pytest.raises(InvalidInputError, match=variable):
        opener()


@pytest.mark.parametrize("url", ["nosuch://x", "not a url", "", "http://example.com", "file://remotehost/path"])
def test_malformed_urls_raise_clear_errors(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHAT_URL_VARIABLE, url)
    with pytest.raises(InvalidInputError) as raised:
        open_chat_memory()
    assert CHAT_URL_VARIABLE in str(raised.value) or "file URLs" in str(raised.value)


@pytest.mark.parametrize(
    ("url", "parsed", "fix"),
    [
        ("sqlite://x.db", "host 'x.db' with no file path", "sqlite:///x.db"),
        ("sqlite://data/x.db", "host 'data' with the path 'x.db'", "sqlite:///data/x.db"),
    ],
)
def test_a_sqlite_url_with_two_slashes_says_what_was_parsed(
    url: str, parsed: str, fix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for opener in (open_chat_memory, open_vector_memory, SQLChatMemory):
        with pytest.raises(InvalidInputError) as raised:
            opener(url)
        assert parsed in str(raised.value)
        assert fix in str(raised.value)
        assert "in-memory" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_scheme_lists_every_scheme_the_dispatch_table_opens() -> None:
    with pytest.raises(InvalidInputError) as raised:
        open_chat_memory("nosuch://host/db")
    listed = str(raised.value).split("use one of ", 1)[1].split("; ", 1)[0].split(", ")
    assert listed == [f"{scheme}://" for scheme in BACKENDS]
    assert {"mariadb://", "rediss://", "redis+cluster://", "qdrant://"} <= set(listed)


@pytest.mark.parametrize("url", ["memory+x://", "file+x:///tmp/x", "redis+x://host/0"])
def test_only_sql_schemes_take_a_driver(url: str) -> None:
    with pytest.raises(InvalidInputError, match="unsupported scheme"):
        open_chat_memory(url)


def test_bad_collection_names_are_rejected() -> None:
    for name in ["", "../x", "a/b", "x" * 101]:
        with pytest.raises(InvalidInputError):
            open_vector_memory("memory://", collection=name)


def test_passwords_never_show() -> None:
    assert "secret" not in redact_url("postgresql://user:secret@db.internal:5432/app")
    assert "***" in redact_url("postgresql://user:secret@db.internal:5432/app")
    with pytest.raises(InvalidInputError) as raised:
        open_chat_memory("redis2://user:secret@host/0")
    assert "secret" not in str(raised.value)


def test_redis_and_qdrant_urls(tmp_path: Path) -> None:
    from memwoven.backends.qdrant import QdrantVectorMemory
    from memwoven.backends.redis import RedisChatMemory
    from memwoven.backends.redis_vector import RedisVectorMemory

    assert isinstance(open_chat_memory("redis://127.0.0.1:6379/0", prefix="mw_url_test"), RedisChatMemory)
    assert isinstance(open_vector_memory("redis://127.0.0.1:6379/0", prefix="mw_url_test"), RedisVectorMemory)
    with open_vector_memory(f"qdrant+local://{tmp_path}/q", collection="notes", dimension=2) as vectors:
        assert isinstance(vectors, QdrantVectorMemory)
    with pytest.raises(InvalidInputError, match="vectors only"):
        open_chat_memory("qdrant+memory://")


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///{dir}/x.db?table_prefix=",
        "sqlite:///{dir}/x.db?schema=&table_prefix=a_",
        "postgresql://me@127.0.0.1:1/db?table_prefix=",
        "redis://127.0.0.1:1/0?prefix=",
        "postgresql://me:p#w@127.0.0.1:1/db?table_prefix=",  # SQLAlchemy's password 'p#w', urllib's fragment
        "postgresql://me:p?w@127.0.0.1:1/db?table_prefix=",
        "mysql://root:p#w@127.0.0.1:1/db?table_prefix=&charset=utf8mb4",
    ],
)
def test_an_empty_url_option_is_refused_never_the_default(url: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="is empty in the URL"):
        open_chat_memory(url.format(dir=tmp_path))
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("charset", ["utf8", "latin1", "nosuch"])
def test_a_mariadb_url_with_a_charset_short_of_utf8mb4_is_refused(charset: str) -> None:
    """Only utf8mb4 holds every text memwoven accepts: utf8 (three bytes) or latin1 failed on an emoji with the
    driver's own error, or stored mangled text outside strict SQL modes. Refused before connecting."""
    with pytest.raises(InvalidInputError, match="utf8mb4"):
        open_chat_memory(f"mysql://root@127.0.0.1:1/test?charset={charset}")


@pytest.mark.parametrize("password", ["pw", "p@ss/w:rd#1"])
def test_a_sqlalchemy_url_object_for_redis_keeps_its_password(password: str) -> None:
    """str() of a SQLAlchemy `URL` prints the password as ***: the client authenticated with that."""
    from sqlalchemy.engine import URL

    url = URL.create("redis", password=password, host="127.0.0.1", port=1, database="0", query={"prefix": "mw_obj"})
    with open_chat_memory(url) as chat:  # made, not connected
        assert chat._client.connection_pool.connection_kwargs["password"] == password
        assert "prefix='mw_obj'" in repr(chat)
        assert password not in repr(chat)


@pytest.mark.parametrize(
    "url",
    [
        "file://{dir}/tenant#1",  # was the directory 'tenant', as '#2' was
        "file://{dir}/chats?prefix=b",  # was 'chats', as '?prefix=a' was
        "memory://?prefix=a",
        "qdrant+local://{dir}/q#1",
        "qdrant+memory://?prefix=a",
        "qdrant://127.0.0.1:1?api_key=k",  # was dropped: the client went without its key
    ],
)
def test_urls_that_take_no_options_refuse_a_query_or_fragment(url: str, tmp_path: Path) -> None:
    url = url.format(dir=tmp_path)
    openers = [lambda u: open_vector_memory(u, dimension=2), vector_collections]
    if not url.startswith("qdrant"):
        openers += [open_chat_memory, open_item_memory]
    for opener in openers:
        with pytest.raises(InvalidInputError, match="no query string or fragment"):
            opener(url)
    assert list(tmp_path.iterdir()) == []


def test_file_urls_name_distinct_paths_byte_for_byte(tmp_path: Path) -> None:
    with open_chat_memory(f"file://{tmp_path}/%ff") as ff, open_chat_memory(f"file://{tmp_path}/%fe") as fe:
        assert ff.directory != fe.directory  # both were U+FFFD
        assert os.fsencode(ff.directory.name) == b"\xff"
    with open_chat_memory(f"file://{tmp_path}/a%3Fb%23c") as encoded:
        assert encoded.directory.name == "a?b#c"
    for opener in (open_chat_memory, open_item_memory, vector_collections):
        with pytest.raises(InvalidInputError, match="NUL"):
            opener(f"file://{tmp_path}/a%00b")


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("sqlite:///{dir}/x.db?prefix=a", "prefix"),  # was ignored: every 'tenant' in one set of tables
        ("postgresql://me@127.0.0.1:1/db?sslmode=disable&prefix=a", "prefix"),  # was the driver's error at first use
        ("mysql://root@127.0.0.1:1/db?prefix=", "prefix"),
        ("redis://127.0.0.1:1/0?table_prefix=a_", "table_prefix"),  # was redis-py's TypeError at first use
        ("redis://127.0.0.1:1/0?prefix=a&schema=s", "schema"),
        ("redis://127.0.0.1:1/0?search=server", "search"),
    ],
)
def test_an_option_of_another_kind_of_url_is_refused(url: str, name: str, tmp_path: Path) -> None:
    url = url.format(dir=tmp_path)
    for opener in (open_chat_memory, open_item_memory, lambda u: open_vector_memory(u, collection="c")):
        with pytest.raises(InvalidInputError, match=f"{name} is not an option of"):
            opener(url)
    assert list(tmp_path.iterdir()) == []


def test_a_chat_or_item_url_may_carry_the_vector_options(tmp_path: Path) -> None:
    """One URL names a whole store (the CLI's): the vector options are checked, then left out of the chat and item
    memories (and of the driver's parameters)."""
    url = f"sqlite:///{tmp_path}/x.db?table_prefix=one_&search=server&index=hnsw&ef_search=100&cache_dir=on"
    for opener in (open_chat_memory, open_item_memory):
        with opener(url) as memory:
            assert isinstance(memory, (SQLChatMemory, SQLItemMemory))
            assert memory.url == f"sqlite:///{tmp_path}/x.db"
            assert memory.table_prefix == "one_"
    for bad, words in [("search=sever", "unknown search"), ("ef_search=x", "whole number"), ("index=hnsw", "needs")]:
        for opener in (open_chat_memory, open_item_memory):
            with pytest.raises(InvalidInputError, match=words):
                opener(f"sqlite:///{tmp_path}/y.db?{bad}")
    assert not (tmp_path / "y.db").exists()
    with pytest.raises(InvalidInputError, match="unexpected keyword argument 'search'"):
        open_item_memory(f"sqlite:///{tmp_path}/y.db", search="server")  # as an argument: not a chat or item option


@pytest.mark.parametrize(
    "url",
    [
        "memory://",
        "file://{tmp}/store",
        "sqlite:///{tmp}/x.db",
        "postgresql://user:s3cr3t@127.0.0.1:1/db",  # unreachable: refused before connecting
        "redis://:s3cr3t@127.0.0.1:1/0",
        "qdrant://127.0.0.1:1",  # the client's own TypeError; an embedded client ignored unknown options
        "qdrant+memory://",
        "qdrant+local://{tmp}/q",
    ],
)
@pytest.mark.parametrize("opener", [open_chat_memory, open_vector_memory])
def test_an_option_the_backend_does_not_take_is_invalid_input(opener: Any, url: str, tmp_path: Path) -> None:
    """As for `open_item_memory`: it was the constructor's bare TypeError (after a SQL URL was parsed)."""
    if url.startswith("qdrant") and opener is open_chat_memory:
        pytest.skip("Qdrant stores vectors only")
    url = url.format(tmp=tmp_path)
    for option in ("no_such_option", "table_prefx"):
        with pytest.raises(InvalidInputError, match=f"unexpected keyword argument '{option}'") as raised:
            opener(url, **{option: "x"})
        assert "s3cr3t" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []  # nothing was created
    if url.startswith("sqlite"):  # the options every SQL backend takes through `**options` stay accepted
        with opener(url, table_prefix="t_", pool_size=2) as memory:
            assert memory.table_prefix == "t_"


def test_an_sqlite_url_takes_no_schema(tmp_path: Path) -> None:
    """It was accepted, and the first use created the file, then raised a retryable BackendUnavailableError."""
    url = f"sqlite:///{tmp_path}/x.db"
    openers = [
        lambda: open_chat_memory(f"{url}?schema=tenant_a"),
        lambda: open_item_memory(f"{url}?schema=tenant_a"),
        lambda: open_vector_memory(f"{url}?schema=tenant_a", dimension=2),
        lambda: SQLChatMemory(url, schema="tenant_a"),
    ]
    for opener in openers:
        with pytest.raises(InvalidInputError, match="takes no schema"):
            opener()
    assert list(tmp_path.iterdir()) == []
