"""Open a backend from a URL (or from `MEMWOVEN_CHAT_URL` / `MEMWOVEN_VECTOR_URL` / `MEMWOVEN_ITEM_URL`).

| URL | chat memory | vector memory | item memory |
| --- | --- | --- | --- |
| `memory://` | `InMemoryChatMemory` | `InMemoryVectorMemory` | `InMemoryItemMemory` |
| `file:///abs/dir`, `file:rel/dir` | `FileChatMemory(dir)` | `FileVectorMemory(dir/<c>.npz)` | `FileItemMemory(dir)` |
| `sqlite:///f.db`, `postgresql://`, `mysql://`, `mariadb://` | `SQLChatMemory` | `SQLVectorMemory` | `SQLItemMemory` |
| `redis://`, `rediss://`, `redis+cluster://` | `RedisChatMemory` | `RedisVectorMemory` | `RedisItemMemory` |
| `qdrant://host:6333`, `qdrants://`, `qdrant+local:///dir`, `qdrant+memory://` | - | `QdrantVectorMemory` | - |

A few backend options can ride in the URL's query string, so that a URL alone (an environment variable, a CLI
argument) can name any store: `table_prefix` and `schema` on SQL URLs
(``postgresql://host/db?table_prefix=app_``), `prefix` on Redis URLs (``redis://host:6379/0?prefix=app``), and on
a vector memory's SQL URL `search` (``postgresql://host/db?search=server``: pgvector search in the database) and
`cache_dir` (``sqlite:///f.db?cache_dir=on``: the index in a file shared by the machine's processes) and
its index options (``?search=server&index=hnsw&ef_search=100``, also `hnsw_m` and `hnsw_ef_construction`). They
are taken out of the URL before it reaches the driver; every other query parameter goes to the driver as before.
A chat or item memory's SQL URL may carry the vector options too (checked, then ignored: one URL names a whole
store). One kind's option on another kind's URL (``?prefix=`` on SQL, ``?table_prefix=`` on Redis) raises
`InvalidInputError`, as does a query string or fragment on a memory, file or Qdrant URL, which take none.
`vector_collections(url)` lists the collections stored at a URL.
"""

from __future__ import annotations

import inspect
import os
import re
from importlib import import_module
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from memwoven._redact import redact_text, redact_url
from memwoven.contracts import ChatMemory, CollectionInfo, ItemMemory, Metric, VectorMemory, check_collection
from memwoven.errors import InvalidInputError

__all__ = [
    "BACKENDS",
    "CHAT_URL_VARIABLE",
    "ITEM_BACKENDS",
    "ITEM_URL_VARIABLE",
    "URL_OPTIONS",
    "VECTOR_URL_VARIABLE",
    "item_memory_class",
    "open_chat_memory",
    "open_item_memory",
    "open_vector_memory",
    "redact_text",
    "redact_url",
    "vector_collections",
]

_M = TypeVar("_M")

CHAT_URL_VARIABLE = "MEMWOVEN_CHAT_URL"
VECTOR_URL_VARIABLE = "MEMWOVEN_VECTOR_URL"
ITEM_URL_VARIABLE = "MEMWOVEN_ITEM_URL"
SQL_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "mariadb")
REDIS_SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster")
QDRANT_SCHEMES = ("qdrant", "qdrants", "qdrant+local", "qdrant+memory")
BACKENDS = {
    "memory": "memory",
    "file": "file",
    **dict.fromkeys(SQL_SCHEMES, "sql"),
    **dict.fromkeys(REDIS_SCHEMES, "redis"),
    **dict.fromkeys(QDRANT_SCHEMES, "qdrant"),
}
"""URL scheme -> the kind of backend that opens it (an SQL scheme may name a driver: ``postgresql+psycopg``)."""
URL_OPTIONS = {"sql": ("table_prefix", "schema"), "redis": ("prefix",)}
"""The backend options a URL's query string may carry, per kind of URL; the other kinds take no query string."""
VECTOR_URL_OPTIONS = {"sql": ("search", "cache_dir", "index", "hnsw_m", "hnsw_ef_construction", "ef_search")}
"""The options a vector memory's URL may carry besides `URL_OPTIONS` (``postgresql://host/db?search=server``); on
a chat or item memory's URL they are checked, then ignored."""
_OPTION_NAMES = frozenset(name for names in (*URL_OPTIONS.values(), *VECTOR_URL_OPTIONS.values()) for name in names)
"""memwoven's own option names: on a URL of a kind that does not take one, refused (never passed to a driver)."""
INTEGER_URL_OPTIONS = ("hnsw_m", "hnsw_ef_construction", "ef_search")
"""The URL options whose values are whole numbers (passed on as ints)."""
ITEM_BACKENDS = {
    "memory": "memwoven.backends.memory:InMemoryItemMemory",
    "file": "memwoven.backends.file.items:FileItemMemory",
    "sql": "memwoven.backends.sql:SQLItemMemory",
    "redis": "memwoven.backends.redis_items:RedisItemMemory",
}
"""The kind of URL (`BACKENDS`) -> the ``module:class`` of its `ItemMemory`. The class takes the URL's location
first (none for memory, the directory for file, the URL for SQL and Redis), then the options."""
_SQL_USER_INFO = re.compile(r"[\w+]+://(?:[^:/]*(?::[^@]*)?@)?")
"""The scheme and user info of an SQL URL, as SQLAlchemy's `make_url` matches them."""
_EXAMPLES = (
    "memory://, file:///path/to/dir, sqlite:///memwoven.db, postgresql://user@host/db, mysql://user@host/db, "
    "redis://host:6379/0, qdrant+local:///path/to/dir (vectors only)"
)


def _resolve(url: str | URL | None, variable: str) -> tuple[str, str | URL]:
    """Return (scheme, url), taking the URL from `variable` when none is given."""
    if url is None:
        url = os.environ.get(variable, "").strip()
        if not url:
            raise InvalidInputError(f"no memory URL given and {variable} is not set; set it to one of: {_EXAMPLES}")
        where = f"{variable}={redact_url(url)!r}"
    else:
        where = f"URL {redact_url(url)!r}"
    if isinstance(url, URL):
        if _kind(url.get_backend_name()) == "sql":
            return url.get_backend_name(), url
        if url.password is not None and url.username is None:  # else SQLAlchemy renders no password at all
            url = url.set(username="")
        url = url.render_as_string(hide_password=False)  # str(url) would hand the backend "***" as the password
    if not isinstance(url, str):
        raise InvalidInputError(f"a memory URL must be a string, got {type(url).__name__}")
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as error:  # e.g. an unclosed IPv6 bracket
        raise InvalidInputError(f"malformed {where}: {error}") from None
    base = scheme.split("+", 1)[0]
    kind = BACKENDS.get(scheme) or ("sql" if BACKENDS.get(base) == "sql" else None)
    if kind is None:
        schemes = ", ".join(f"{name}://" for name in BACKENDS)
        raise InvalidInputError(f"unsupported scheme in {where}; use one of {schemes}; e.g. {_EXAMPLES}")
    if kind != "sql":
        return kind, url
    try:
        make_url(url)
    except (ArgumentError, ValueError) as error:
        raise InvalidInputError(f"malformed {where}: {error}") from None
    return base, url


def _with_url_options(
    scheme: str, url: str | URL, options: dict[str, Any], *, vector: bool = False
) -> tuple[str | URL, dict[str, Any]]:
    """Move the backend options found in the URL's query string (`URL_OPTIONS`, `VECTOR_URL_OPTIONS`) into
    `options`; unless `vector`, the vector ones are checked, then dropped. An option of another kind of URL, or any
    query on a kind that takes none, raises `InvalidInputError`."""
    kind = _kind(scheme)
    if kind not in URL_OPTIONS:  # no driver reads these URLs' query: a parameter would be dropped unseen
        parts = urlsplit(str(url))
        if parts.query or parts.fragment:
            raise InvalidInputError(
                f"{kind} URLs take no query string or fragment, got {redact_url(url)!r}; pass options as keyword "
                "arguments, and percent-encode a '?' or '#' of a path (%3F, %23)"
            )
        return url, options
    taken = URL_OPTIONS[kind] + VECTOR_URL_OPTIONS.get(kind, ())
    if isinstance(url, URL):
        pairs = [
            (key, value)
            for key, values in url.query.items()
            for value in ([values] if isinstance(values, str) else values)
        ]
    else:
        pairs = parse_qsl(_sql_query(url) if kind == "sql" else urlsplit(url).query, keep_blank_values=True)
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in taken:
            found[key] = (found[key], value) if key in found else value
        elif key in _OPTION_NAMES:  # another kind's option: the driver would drop it, or fail at first use
            raise InvalidInputError(
                f"{key} is not an option of {scheme} URLs (they take {', '.join(taken)}), in {redact_url(url)!r}"
            )
    if found and kind == "sql":
        url = make_url(url).difference_update_query(found)
    elif found:
        parts = urlsplit(str(url))
        kept = [(key, value) for key, value in parse_qsl(parts.query, keep_blank_values=True) if key not in found]
        url = urlunsplit(parts._replace(query=urlencode(kept)))
    for name, value in found.items():
        if not isinstance(value, str):
            raise InvalidInputError(f"{name} appears more than once in the URL {redact_url(url)!r}")
        if not value:  # never silently the default: an empty prefix would be another tenant's storage
            raise InvalidInputError(f"{name} is empty in the URL {redact_url(url)!r}; give a value or leave it out")
        if name in options:
            raise InvalidInputError(f"{name} is given both in the URL and as an argument")
        if name in INTEGER_URL_OPTIONS:
            if not (value.isascii() and value.isdigit()):
                raise InvalidInputError(f"{name} must be a whole number in the URL {redact_url(url)!r}, got {value!r}")
            found[name] = int(value)
    return url, {**options, **(found if vector else _without_vector_options(found))}


def _without_vector_options(options: dict[str, Any]) -> dict[str, Any]:
    """`options` without a vector memory's search options (`VECTOR_URL_OPTIONS`), which are checked first: they say
    how vectors are searched, not where a store is, so one URL can name a whole store (as the CLI takes it)."""
    names = VECTOR_URL_OPTIONS["sql"]
    if any(name in options for name in names):
        from memwoven.backends.sql.vector import check_index_options, check_search_mode

        search = check_search_mode(options.get("search", "client"))
        index_options = [options.get(name) for name in ("index", "hnsw_m", "hnsw_ef_construction", "ef_search")]
        check_index_options(search, *index_options)
    return {name: value for name, value in options.items() if name not in names}


def _sql_query(url: str) -> str:
    """The query string of an SQL URL as SQLAlchemy reads it: after the first '?' that follows the user info (where
    a password may hold an unencoded '?' or '#', which `urlsplit` takes for the query or the fragment)."""
    user_info = _SQL_USER_INFO.match(url)
    return url[user_info.end() if user_info else 0 :].partition("?")[2]


def _file_path(url: str) -> Path:
    """The local directory a file URL names."""
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        host = parts.netloc.rpartition("@")[2]  # never the user info: it may hold a password
        raise InvalidInputError(f"file URLs name a local path (file:///abs/path), got host {host!r}")
    path = unquote(parts.path, errors="surrogateescape")  # byte for byte: %ff and %fe name distinct files
    if not path:
        raise InvalidInputError("a file URL needs a path, e.g. file:///var/lib/memwoven")
    if "\0" in path:
        raise InvalidInputError("a file URL's path holds a NUL (%00), which no file name may")
    return Path(path)


def _open(memory_class: type[_M], location: tuple[Any, ...], options: dict[str, Any], shared: Any = None) -> _M:
    """`memory_class(*location, **options)`, refusing an option it does not take (or a missing argument) with
    `InvalidInputError` before anything connects; `shared`: the `TypedDict` of the options a ``**options`` of
    `memory_class` takes (the SQL backends' `SQLOptions`), whose keys are its only other names."""
    try:
        parameters = inspect.signature(memory_class).bind(*location, **options).signature.parameters
    except TypeError as error:  # an unknown or missing option: refused as input, before any connection
        raise InvalidInputError(f"{memory_class.__name__}: {error}") from None
    if shared is not None:
        taken = shared.__required_keys__ | shared.__optional_keys__
        for name in options:
            if name not in parameters and name not in taken:
                raise InvalidInputError(f"{memory_class.__name__}: got an unexpected keyword argument {name!r}")
    return memory_class(*location, **options)


def open_chat_memory(url: str | URL | None = None, **options: Any) -> ChatMemory:
    """Open the chat memory a URL names (default: `$MEMWOVEN_CHAT_URL`); `options` go to the backend.

    As for `open_item_memory`, an option the backend does not take raises `InvalidInputError` before anything
    connects.
    """
    scheme, resolved = _resolve(url, CHAT_URL_VARIABLE)
    resolved, options = _with_url_options(scheme, resolved, options)
    if scheme == "memory":
        from memwoven.backends.memory import InMemoryChatMemory

        return _open(InMemoryChatMemory, (), options)
    if scheme == "file":
        from memwoven.backends.file import FileChatMemory

        return _open(FileChatMemory, (_file_path(str(resolved)),), options)
    if scheme == "redis":
        from memwoven.backends.redis import RedisChatMemory

        return _open(RedisChatMemory, (str(resolved),), options)
    if scheme == "qdrant":
        raise InvalidInputError("Qdrant stores vectors only; keep chat history in SQL, files or Redis")
    from memwoven.backends.sql import SQLChatMemory, SQLOptions

    return _open(SQLChatMemory, (resolved,), options, SQLOptions)


def open_vector_memory(
    url: str | URL | None = None,
    *,
    collection: str = "default",
    dimension: int | None = None,
    metric: Metric = "cosine",
    **options: Any,
) -> VectorMemory:
    """Open one vector collection at the URL (default: `$MEMWOVEN_VECTOR_URL`); `options` go to the backend.

    As for `open_item_memory`, an option the backend does not take raises `InvalidInputError` before anything
    connects (Qdrant passes the others to its client, which refuses those it does not take).
    """
    scheme, resolved = _resolve(url, VECTOR_URL_VARIABLE)
    resolved, options = _with_url_options(scheme, resolved, options, vector=True)
    check_collection(collection)
    options = {"dimension": dimension, "metric": metric, **options}
    if scheme == "memory":
        from memwoven.backends.memory import InMemoryVectorMemory

        return _open(InMemoryVectorMemory, (), options)
    if scheme == "file":
        from memwoven.backends.file import FileVectorMemory

        return _open(FileVectorMemory, (_file_path(str(resolved)) / f"{collection}.npz",), options)
    options["collection"] = collection
    if scheme == "redis":
        from memwoven.backends.redis_vector import RedisVectorMemory

        return _open(RedisVectorMemory, (str(resolved),), options)
    if scheme == "qdrant":
        from memwoven.backends.qdrant import QdrantVectorMemory

        return _open(QdrantVectorMemory, (str(resolved),), options)
    from memwoven.backends.sql import SQLOptions, SQLVectorMemory

    return _open(SQLVectorMemory, (resolved,), options, SQLOptions)


def _kind(scheme: str) -> str:
    """The kind of backend (`BACKENDS`) of a URL scheme (``rediss``, ``postgresql+psycopg``) or of a scheme
    `_resolve` returned; an unknown scheme as it is."""
    base = scheme.split("+", 1)[0]
    return BACKENDS.get(scheme) or ("sql" if BACKENDS.get(base) == "sql" else scheme)


def item_memory_class(scheme: str) -> type[ItemMemory] | None:
    """The `ItemMemory` class that opens URLs of `scheme` (a scheme or a kind of `BACKENDS`), or None for a
    vectors-only backend (Qdrant). Imports the class's module (a missing extra's package raises
    `ModuleNotFoundError` naming it)."""
    spec = ITEM_BACKENDS.get(_kind(scheme))
    if spec is None:
        return None
    module_name, _, class_name = spec.partition(":")
    found: type[ItemMemory] = getattr(import_module(module_name), class_name)
    return found


def open_item_memory(url: str | URL | None = None, **options: Any) -> ItemMemory:
    """Open the item memory a URL names (default: `$MEMWOVEN_ITEM_URL`); `options` go to the backend.

    The URL and the options are checked before anything connects: a bad URL, an option the backend does not take
    or a bad value (`table_prefix="a b"`) raise `InvalidInputError`.
    """
    scheme, resolved = _resolve(url, ITEM_URL_VARIABLE)
    resolved, options = _with_url_options(scheme, resolved, options)
    kind = _kind(scheme)
    memory_class = item_memory_class(kind)
    if memory_class is None:
        raise InvalidInputError(f"{scheme} URLs store vectors only; keep items in memory, SQL, files or Redis")
    location: tuple[Any, ...] = ()
    if kind == "file":
        location = (_file_path(str(resolved)),)
    elif kind != "memory":
        location = (str(resolved) if kind == "redis" else resolved,)
    return _open(memory_class, location, options)


def vector_collections(url: str | URL | None = None, **options: Any) -> list[CollectionInfo]:
    """The vector collections stored at the URL (default: `$MEMWOVEN_VECTOR_URL`), sorted by name.

    Each comes with its metric and dimension, which is what `open_vector_memory` needs to open it. Read-only:
    nothing is created. `options` select the store as for `open_vector_memory` (`table_prefix`, `prefix`, ...).
    `memory://` persists nothing, so it never has any.
    """
    scheme, resolved = _resolve(url, VECTOR_URL_VARIABLE)
    resolved, options = _with_url_options(scheme, resolved, options, vector=True)
    options = _without_vector_options(options)
    if scheme == "memory":
        return []
    if scheme == "file":
        from memwoven.backends.file import list_collections as file_collections

        return file_collections(_file_path(str(resolved)))
    if scheme == "redis":
        from memwoven.backends.redis_vector import list_collections as redis_collections

        return redis_collections(str(resolved), **options)
    if scheme == "qdrant":
        from memwoven.backends.qdrant import list_collections as qdrant_collections

        return qdrant_collections(str(resolved), **options)
    from memwoven.backends.sql.vector import list_collections as sql_collections

    return sql_collections(resolved, **options)
