"""Open a backend from a URL (or from `MEMWEAVE_CHAT_URL` / `MEMWEAVE_VECTOR_URL`).

| URL | chat memory | vector memory |
| --- | --- | --- |
| `memory://` | `InMemoryChatMemory` | `InMemoryVectorMemory` |
| `file:///abs/dir`, `file:rel/dir` | `FileChatMemory(dir)` | `FileVectorMemory(dir/<collection>.npz)` |
| `sqlite:///file.db`, `postgresql://...`, `mysql://...`, `mariadb://...` | `SQLChatMemory` | `SQLVectorMemory` |
| `redis://...`, `rediss://...`, `redis+cluster://...` | `RedisChatMemory` | `RedisVectorMemory` |
| `qdrant://host:6333`, `qdrants://...`, `qdrant+local:///dir`, `qdrant+memory://` | - | `QdrantVectorMemory` |
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from memweave.contracts import ChatMemory, Metric, VectorMemory
from memweave.errors import InvalidInputError

__all__ = ["CHAT_URL_VARIABLE", "VECTOR_URL_VARIABLE", "open_chat_memory", "open_vector_memory", "redact_url"]

CHAT_URL_VARIABLE = "MEMWEAVE_CHAT_URL"
VECTOR_URL_VARIABLE = "MEMWEAVE_VECTOR_URL"
SQL_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "mariadb")
REDIS_SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster")
QDRANT_SCHEMES = ("qdrant", "qdrants", "qdrant+local", "qdrant+memory")
_COLLECTION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
_EXAMPLES = (
    "memory://, file:///path/to/dir, sqlite:///memweave.db, postgresql://user@host/db, mysql://user@host/db, "
    "redis://host:6379/0, qdrant+local:///path/to/dir (vectors only)"
)


def redact_url(url: str | URL) -> str:
    """The URL with any password replaced by ***, safe to print or log."""
    try:
        return make_url(url).render_as_string(hide_password=True) if "://" in str(url) else str(url)
    except (ArgumentError, ValueError):
        return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", str(url))


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
        return url.get_backend_name(), url
    if not isinstance(url, str):
        raise InvalidInputError(f"a memory URL must be a string, got {type(url).__name__}")
    scheme = urlsplit(url).scheme.lower()
    if scheme in REDIS_SCHEMES:
        return "redis", url
    if scheme in QDRANT_SCHEMES:
        return "qdrant", url
    base = scheme.split("+", 1)[0]
    if base in SQL_SCHEMES:
        try:
            make_url(url)
        except ArgumentError as error:
            raise InvalidInputError(f"malformed {where}: {error}") from None
    elif base not in ("memory", "file"):
        raise InvalidInputError(f"unsupported scheme in {where}; use one of: {_EXAMPLES}")
    return base, url


def _file_path(url: str) -> Path:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise InvalidInputError(f"file URLs name a local path (file:///abs/path), got host {parts.netloc!r}")
    path = unquote(parts.path)
    if not path:
        raise InvalidInputError("a file URL needs a path, e.g. file:///var/lib/memweave")
    return Path(path)


def open_chat_memory(url: str | URL | None = None, **options: Any) -> ChatMemory:
    """Open the chat memory a URL names (default: `$MEMWEAVE_CHAT_URL`); `options` go to the backend."""
    scheme, resolved = _resolve(url, CHAT_URL_VARIABLE)
    if scheme == "memory":
        from memweave.backends.memory import InMemoryChatMemory

        return InMemoryChatMemory(**options)
    if scheme == "file":
        from memweave.backends.file import FileChatMemory

        return FileChatMemory(_file_path(str(resolved)), **options)
    if scheme == "redis":
        from memweave.backends.redis import RedisChatMemory

        return RedisChatMemory(str(resolved), **options)
    if scheme == "qdrant":
        raise InvalidInputError("Qdrant stores vectors only; keep chat history in SQL, files or Redis")
    from memweave.backends.sql import SQLChatMemory

    return SQLChatMemory(resolved, **options)


def open_vector_memory(
    url: str | URL | None = None,
    *,
    collection: str = "default",
    dimension: int | None = None,
    metric: Metric = "cosine",
    **options: Any,
) -> VectorMemory:
    """Open one vector collection at the URL (default: `$MEMWEAVE_VECTOR_URL`); `options` go to the backend."""
    scheme, resolved = _resolve(url, VECTOR_URL_VARIABLE)
    if not isinstance(collection, str) or not _COLLECTION.match(collection):
        raise InvalidInputError(f"collection names use letters, digits, '_', '.', '-' (max 100), got {collection!r}")
    if scheme == "memory":
        from memweave.backends.memory import InMemoryVectorMemory

        return InMemoryVectorMemory(dimension, metric=metric, **options)
    if scheme == "file":
        from memweave.backends.file import FileVectorMemory

        path = _file_path(str(resolved)) / f"{collection}.npz"
        return FileVectorMemory(path, dimension=dimension, metric=metric, **options)
    if scheme == "redis":
        from memweave.backends.redis_vector import RedisVectorMemory

        return RedisVectorMemory(str(resolved), collection=collection, dimension=dimension, metric=metric, **options)
    if scheme == "qdrant":
        from memweave.backends.qdrant import QdrantVectorMemory

        return QdrantVectorMemory(str(resolved), collection=collection, dimension=dimension, metric=metric, **options)
    from memweave.backends.sql import SQLVectorMemory

    return SQLVectorMemory(resolved, collection=collection, dimension=dimension, metric=metric, **options)
