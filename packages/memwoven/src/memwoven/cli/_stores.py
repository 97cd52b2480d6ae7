"""Opening the stores a command names by URL, with the checks a command line needs (no typer or rich here)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy.engine import make_url

from memwoven.contracts import ChatMemory, CollectionInfo, ItemMemory, Namespace, VectorMemory, check_namespace
from memwoven.errors import MemwovenError
from memwoven.history import encode_message
from memwoven.models import Message
from memwoven.urls import (
    SQL_SCHEMES,
    _file_path,
    _resolve,
    item_memory_class,
    open_chat_memory,
    open_item_memory,
    open_vector_memory,
    redact_url,
    vector_collections,
)

__all__ = [
    "NAMESPACE_SYNTAX",
    "Failure",
    "SessionSummary",
    "Store",
    "item_size",
    "last_activity",
    "parse_namespace",
    "session_size",
    "show_namespace",
    "summarize",
]

NAMESPACE_SYNTAX = (
    "a namespace: its labels joined by '/' (users/u1/facts), or a JSON array of strings when a label holds a '/' "
    "or the first starts with '[' ('[\"users\", \"a/b\"]')"
)


class Failure(MemwovenError):
    """A command failed for a reason its one-line message explains (exit code 1)."""


@dataclass(frozen=True)
class Store:
    """A store named by a URL: where its chat histories and its vector collections live."""

    url: str

    @property
    def shown(self) -> str:
        """The URL with any password hidden."""
        return redact_url(self.url)

    @property
    def scheme(self) -> str:
        """The kind of store: memory, file, redis, qdrant or an SQL dialect (validates the URL)."""
        return _resolve(self.url, "")[0]

    @property
    def has_chat(self) -> bool:
        """False for vector-only stores (Qdrant)."""
        return self.scheme != "qdrant"

    def check_exists(self) -> None:
        """Refuse to read an SQLite file or a directory that does not exist (reading would create it)."""
        scheme = self.scheme
        if scheme == "sqlite":
            database = make_url(self.url).database
            if database and not Path(database).exists():
                raise Failure(f"no SQLite database at {self.shown} (the file {database!r} does not exist)")
        elif scheme == "file":
            path = _file_path(self.url)
            if not path.is_dir():
                raise Failure(f"no memwoven directory at {self.shown} ({str(path)!r} is not a directory)")

    def holds_chat(self) -> bool:
        """Whether chat sessions can be read here, found out without creating any storage.

        The SQL backends create their tables when first used, so on SQL their tables are looked up first,
        read-only: reading with a mistyped `?table_prefix=` finds no session instead of creating empty tables.
        """
        return self.has_chat and self._stored(self.chat)

    def _stored(self, opener: Callable[[], AbstractContextManager[ChatMemory | ItemMemory]]) -> bool:
        """Whether the memory `opener` opens may hold anything: on SQL, whether its tables exist (else opened not)."""
        if self.scheme not in SQL_SCHEMES:
            return True
        from memwoven.backends.sql import SQLChatMemory, SQLItemMemory  # on first use: the CLI starts without SQL

        with opener() as memory:
            return not isinstance(memory, (SQLChatMemory, SQLItemMemory)) or memory.has_tables()

    def require_chat(self) -> None:
        """Refuse a store that cannot hold chat sessions."""
        if not self.has_chat:
            raise Failure(f"{self.shown} stores vectors only (Qdrant); chat sessions live in SQL, files or Redis")

    def open_chat(self) -> ChatMemory:
        """The store's chat memory (the caller closes it)."""
        self.require_chat()
        return open_chat_memory(self.url)

    @contextmanager
    def chat(self) -> Iterator[ChatMemory]:
        """The store's chat memory, closed afterwards."""
        memory = self.open_chat()
        try:
            yield memory
        finally:
            memory.close()

    @property
    def has_items(self) -> bool:
        """Whether this kind of store keeps items (every kind but Qdrant)."""
        return item_memory_class(self.scheme) is not None

    def holds_items(self) -> bool:
        """Whether items can be read here, found out without creating any storage (as `holds_chat`)."""
        return self.has_items and self._stored(self.items)

    def require_items(self) -> None:
        """Refuse a store that cannot hold items."""
        if self.scheme == "qdrant":
            raise Failure(f"{self.shown} stores vectors only (Qdrant); items live in SQL (or memory://)")
        if not self.has_items:
            raise Failure(f"{self.shown}: this memwoven keeps no items in {self.scheme} stores")

    def open_items(self) -> ItemMemory:
        """The store's item memory (the caller closes it)."""
        self.require_items()
        return open_item_memory(self.url)

    def items(self) -> AbstractContextManager[ItemMemory]:
        """The store's item memory, closed afterwards."""
        return closing(self.open_items())

    def collections(self) -> list[CollectionInfo]:
        """The vector collections stored here, with their metric and dimension."""
        return vector_collections(self.url)

    def collection(self, name: str) -> CollectionInfo:
        """One existing collection, or a `Failure` naming the ones there are."""
        found = {info.name: info for info in self.collections()}
        if name not in found:
            there = ", ".join(found) or "none"
            raise Failure(f"no vector collection {name!r} at {self.shown} (collections: {there})")
        return found[name]

    def open_vectors(self, info: CollectionInfo) -> VectorMemory:
        """One collection opened with its own metric and dimension (the caller closes it)."""
        return open_vector_memory(self.url, collection=info.name, dimension=info.dimension, metric=info.metric)

    @contextmanager
    def vectors(self, info: CollectionInfo) -> Iterator[VectorMemory]:
        """One collection opened with its own metric and dimension, closed afterwards."""
        memory = self.open_vectors(info)
        try:
            yield memory
        finally:
            memory.close()


@dataclass(frozen=True)
class SessionSummary:
    """What `sessions list` shows of one session."""

    id: str
    messages: int
    last_activity: datetime | None
    size: int


def session_size(messages: list[Message]) -> int:
    """The session's size: the UTF-8 bytes of its messages' canonical JSON (what the backends store)."""
    return sum(len(encode_message(message).encode("utf-8")) for message in messages)


def last_activity(messages: list[Message], version: int) -> datetime | None:
    """When the session was last written, as far as can be told.

    The built-in backends derive versions from the clock at each write (nanoseconds since the epoch; Redis:
    microseconds of the server's clock), so the version dates the last write; else the newest `created_at` of its
    messages; else None.
    """
    for scale in (1_000_000_000, 1_000_000):
        seconds = version / scale
        if 946_684_800 <= seconds <= 4_102_444_800:  # 2000-01-01 .. 2100-01-01: a clock reading
            return datetime.fromtimestamp(seconds, tz=timezone.utc)
    stamps = [m.created_at for m in messages if m.created_at is not None]
    if not stamps:
        return None
    return max(s if s.tzinfo is not None else s.replace(tzinfo=timezone.utc) for s in stamps)


def parse_namespace(text: str, *, prefix: bool = False) -> Namespace:
    """A namespace written on the command line (`NAMESPACE_SYNTAX`); ValueError says what is wrong. A `prefix`
    may be empty (every namespace)."""
    if text.startswith("["):
        try:
            labels = json.loads(text)
        except ValueError as error:
            raise ValueError(f"not a JSON array of strings ({error})") from None
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise ValueError("a namespace in JSON is an array of strings")
    else:
        labels = text.split("/") if text else []
    return check_namespace(labels, "namespace prefix" if prefix else "namespace", prefix=prefix)


def show_namespace(namespace: Namespace) -> str:
    """A namespace as `parse_namespace` reads it back: labels joined by '/', or JSON when that would be ambiguous."""
    if any("/" in label for label in namespace) or (namespace and namespace[0].startswith("[")):
        return json.dumps(list(namespace), ensure_ascii=False)
    return "/".join(namespace)


def item_size(value: object) -> int:
    """The UTF-8 bytes of an item value's compact JSON."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def summarize(memory: ChatMemory, session_id: str) -> SessionSummary:
    """Load one session and summarize it."""
    messages, version = memory.load_versioned(session_id)
    return SessionSummary(session_id, len(messages), last_activity(messages, version), session_size(messages))
