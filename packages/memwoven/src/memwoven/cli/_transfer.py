"""Export, import and migration: the memwoven export format (JSON Lines, version 2) and store-to-store copies.

No typer or rich here: progress goes through a `Reporter`. The format is specified in docs/export-format.md:

    {"type": "header", "format": "memwoven-export", "version": 2, "exported_at": ..., "source": ..., "memwoven": ...}
    {"type": "session", "id": ..., "messages": [<Message JSON>, ...]}
    {"type": "item", "namespace": [...], "key": ..., "value": {...}, "version": ..., "created_at": ...,
     "updated_at": ..., "expires_at": <time> | null, "ttl": <seconds> | null}
    {"type": "collection", "name": ..., "metric": "cosine" | "dot", "dimension": <int> | null}
    {"type": "document", "collection": ..., "id": ..., "content": ..., "metadata": {...}, "embedding": <base64>}
    {"type": "end", "sessions": S, "messages": M, "collections": C, "documents": D, "items": I}

Embeddings are the base64 of their little-endian float32 bytes, which is exactly what every backend stores.
Version 1 (no items, no `items` count) is read too. An item is written with its value and its `ttl` (so a sliding
expiry keeps its window); its version and times are the target's, its expiry restarts at the write; one with a fixed
expiry (an `expires_at`, no `ttl`) keeps that expiry, as the ttl of the seconds left; an item already expired when
an export is imported is not written.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from itertools import islice
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import numpy as np
from pydantic import TypeAdapter

import memwoven._clock as _clock
from memwoven.cli._stores import Failure, Store
from memwoven.contracts import (
    ChatMemory,
    CollectionInfo,
    ItemMemory,
    ItemWrite,
    Namespace,
    VectorMemory,
    check_item_key,
    check_item_value,
    check_ttl,
)
from memwoven.filters import json_equal
from memwoven.models import Item, UtcDatetime, VectorDocument, coerce_messages
from memwoven.vector_index import check_metric

__all__ = [
    "FORMAT",
    "VERSION",
    "Counts",
    "MigrationReport",
    "Reporter",
    "decode_embedding",
    "dump_record",
    "encode_embedding",
    "export_records",
    "import_records",
    "migrate",
]

FORMAT = "memwoven-export"
VERSION = 2
BATCH = 1000
_T = TypeVar("_T")
_MOMENT: TypeAdapter[datetime | None] = TypeAdapter(UtcDatetime | None)


class Reporter(Protocol):
    """Receives progress: `task(description, total)` returns the function to call with each step's size."""

    def task(self, description: str, total: int) -> Callable[[int], None]:
        """Start a task of `total` steps."""
        ...


class _Silent:
    def task(self, description: str, total: int) -> Callable[[int], None]:
        return lambda steps: None


@dataclass
class Counts:
    """How much an export or import held: the numbers of its end record."""

    sessions: int = 0
    messages: int = 0
    collections: int = 0
    documents: int = 0
    items: int = 0


def encode_embedding(embedding: Sequence[float]) -> str:
    """The base64 of the embedding's little-endian float32 bytes."""
    return base64.b64encode(np.asarray(embedding, dtype="<f4").tobytes()).decode("ascii")


def decode_embedding(value: object) -> list[float]:
    """An embedding from its base64 float32 form (or, as importers also accept, a JSON list of numbers)."""
    if isinstance(value, list):
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
            raise ValueError("an embedding's list holds numbers only")
        try:
            return [float(x) for x in value]
        except OverflowError:
            raise ValueError("an embedding's number is beyond float range") from None
    if not isinstance(value, str):
        raise ValueError("an embedding is a base64 string (or a list of numbers)")
    raw = base64.b64decode(value, validate=True)
    if not raw or len(raw) % 4:
        raise ValueError(f"an embedding of {len(raw)} bytes is not a whole number of float32 values")
    return np.frombuffer(raw, dtype="<f4").astype(np.float64).tolist()  # type: ignore[no-any-return]


def dump_record(record: dict[str, Any]) -> bytes:
    """One line of the export: compact UTF-8 JSON and a newline."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"


def _document_record(collection: str, document: VectorDocument) -> dict[str, Any]:
    return {
        "type": "document",
        "collection": collection,
        "id": document.id,
        "content": document.content,
        "metadata": document.metadata,
        "embedding": encode_embedding(document.embedding),
    }


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _batches(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def stored_items(memory: ItemMemory, namespaces: Iterable[Namespace]) -> Iterator[Item]:
    """Every live item of each namespace (exactly that namespace, not those under it), by key, read in pages."""
    for namespace in namespaces:
        after = None
        while True:
            page = memory.list(namespace, after=after, limit=BATCH)
            # Sorted by key, then namespace: of one key, this namespace's item comes first, so a page cut inside a
            # run of one key has already yielded it, and `after` that key loses nothing of this namespace.
            yield from (item for item in page if item.namespace == namespace)
            if len(page) < BATCH:
                break
            after = page[-1].key


def item_namespaces(memory: ItemMemory, prefixes: Sequence[Namespace] = ()) -> list[Namespace]:
    """The namespaces holding items, sorted: all, or those under one of `prefixes` (labels taken literally)."""
    if not prefixes:
        return memory.namespaces()
    found = {ns for prefix in prefixes for ns in memory.namespaces(prefix=prefix) if ns[: len(prefix)] == prefix}
    return sorted(found)


_SLACK = timedelta(seconds=1)  # a fixed expiry written again lands a few milliseconds away from the first


def _now() -> datetime:
    return _clock.utc(_clock.wall_ms())  # the clock the backends measure expiry with


class ItemCopy(NamedTuple):
    """An item to write: its value and expiry, a sliding `ttl` or (without one) a fixed `expires_at`."""

    namespace: Namespace
    key: str
    value: Mapping[str, Any]
    ttl: float | None = None
    expires_at: datetime | None = None

    @classmethod
    def of(cls, item: Item) -> ItemCopy:
        """The copy of a stored item."""
        return cls(item.namespace, item.key, item.value, item.ttl, item.expires_at)

    def expired(self, now: datetime) -> bool:
        """Whether it reads as absent at `now`."""
        return self.expires_at is not None and self.expires_at <= now

    def held_by(self, item: Item | None) -> bool:
        """Whether `item` already is this copy: the same value and ttl; for a fixed expiry, the same expiry (to
        within `_SLACK`), whatever ttl it was written with."""
        if item is None or not json_equal(item.value, self.value):
            return False
        if self.ttl is None and self.expires_at is not None:
            return item.expires_at is not None and abs(item.expires_at - self.expires_at) <= _SLACK
        return item.ttl == self.ttl

    def write(self, now: datetime) -> ItemWrite:
        """The `put` of this copy at `now`: a fixed expiry as the ttl of the seconds left then (`ItemMemory` has no
        fixed expiry: that ttl slides like any other)."""
        ttl = self.ttl
        if ttl is None and self.expires_at is not None:
            ttl = max((self.expires_at - now).total_seconds(), 0.001)
        return ItemWrite(self.namespace, self.key, self.value, ttl)


def write_changed(into: ItemMemory, copies: Sequence[ItemCopy]) -> int:
    """Put the `copies` the target does not already hold (`ItemCopy.held_by`; one `put_many`); return how many
    were written. So writing the same items again changes nothing, versions and expiries included."""
    present = into.get_many([(copy.namespace, copy.key) for copy in copies])
    now = _now()
    changed = [copy.write(now) for copy, item in zip(copies, present) if not copy.held_by(item)]
    if changed:
        into.put_many(changed)
    return len(changed)


def _same_document(stored: VectorDocument | None, document: VectorDocument) -> bool:
    """Whether `stored` is `document` as JSON tells them apart (pydantic's == takes ``True`` for ``1``)."""
    return (
        stored is not None
        and (stored.id, stored.content, stored.embedding) == (document.id, document.content, document.embedding)
        and json_equal(stored.metadata, document.metadata)
    )


# Export -------------------------------------------------------------------------------------------------------


def export_records(
    store: Store,
    *,
    sessions: Sequence[str] = (),
    collections: Sequence[str] = (),
    namespaces: Sequence[Namespace] = (),
    counts: Counts | None = None,
) -> Iterator[dict[str, Any]]:
    """The records of an export of `store`: everything, or only the sessions, collections and the items under the
    namespace prefixes named."""
    from memwoven import __version__

    counts = counts if counts is not None else Counts()
    sessions, collections = sorted(set(sessions)), sorted(set(collections))  # in the format's order, each once
    everything = not sessions and not collections and not namespaces
    yield {
        "type": "header",
        "format": FORMAT,
        "version": VERSION,
        "exported_at": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
        "source": store.shown,
        "memwoven": __version__,
    }
    if sessions and not store.holds_chat():
        raise Failure(f"no session {sessions[0]!r} at {store.shown}")
    if (everything and store.holds_chat()) or sessions:
        with store.chat() as chat:
            for session_id in sessions or chat.sessions():
                messages = chat.load(session_id)
                if not messages and sessions:
                    raise Failure(f"no session {session_id!r} at {store.shown}")
                if messages:  # a session cleared while exporting is simply absent
                    counts.sessions += 1
                    counts.messages += len(messages)
                    yield {
                        "type": "session",
                        "id": session_id,
                        "messages": [m.model_dump(mode="json") for m in messages],
                    }
    if namespaces and not store.has_items:
        store.require_items()
    if (everything or namespaces) and store.holds_items():
        with store.items() as memory:
            for item in stored_items(memory, item_namespaces(memory, namespaces)):
                counts.items += 1
                yield {"type": "item", **item.model_dump(mode="json")}
    infos = store.collections() if everything else [store.collection(name) for name in collections]
    for info in infos:
        with store.vectors(info) as memory:
            counts.collections += 1
            yield {"type": "collection", "name": info.name, "metric": info.metric, "dimension": memory.dimension}
            for batch in _chunks(memory.ids(), BATCH):
                for document in memory.get(batch):
                    counts.documents += 1
                    yield _document_record(info.name, document)
    yield {"type": "end", **asdict(counts)}


# Import -------------------------------------------------------------------------------------------------------


class _BadRecord(ValueError):
    pass


def _field(record: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = record.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise _BadRecord(f"a {record.get('type')} record needs {name!r} ({getattr(kind, '__name__', kind)})")
    return value


@dataclass
class _Pending(Generic[_T]):
    """Records waiting to be written in one batch, with the input line of each (to name where a refusal is)."""

    what: str
    values: list[_T] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)

    def add(self, value: _T, line: int) -> bool:
        """Add a record's value; return whether the batch is full."""
        self.values.append(value)
        self.lines.append(line)
        return len(self.values) >= BATCH

    def write(self, writer: Callable[[list[_T]], object]) -> int:
        """Write the batch with `writer` (a refusal, InvalidInputError, names its lines); return its size."""
        if not self.values:
            return 0
        try:
            writer(self.values)
        except ValueError as error:
            first, last = self.lines[0], self.lines[-1]
            where = f"line {first}" if first == last else f"{self.what} on lines {first}-{last}"
            raise Failure(f"{where}: {error}") from None
        written = len(self.values)
        self.values, self.lines = [], []
        return written


@dataclass
class _Importer:
    """Writes the records of an export into a store, one collection's documents in batches."""

    store: Store
    counts: Counts = field(default_factory=Counts)
    chat: ChatMemory | None = None
    items: ItemMemory | None = None
    item_writes: _Pending[ItemCopy] = field(default_factory=lambda: _Pending("an item"))
    item_addresses: set[tuple[Namespace, str]] = field(default_factory=set)
    expired: int = 0
    collection: CollectionInfo | None = None
    vectors: VectorMemory | None = None
    documents: _Pending[VectorDocument] = field(default_factory=lambda: _Pending("a document"))
    seen: set[str] = field(default_factory=set)

    def open(self) -> None:
        """Open the store before the first record, so that a URL it refuses is not blamed on a line."""
        if self.store.has_chat:
            self.chat = self.store.open_chat()
        if self.store.has_items:
            self.items = self.store.open_items()

    def session(self, record: dict[str, Any]) -> None:
        session_id = _field(record, "id", str)
        messages = coerce_messages(_field(record, "messages", list))
        if not messages:  # saving none would delete the target's session
            raise _BadRecord("a session record needs at least one message")
        if self.chat is None:
            raise Failure(f"the export holds chat sessions but {self.store.shown} stores vectors only")
        if self.chat.load(session_id) != messages:  # importing again changes nothing, not even the version
            self.chat.save(session_id, messages)
        self.counts.sessions += 1
        self.counts.messages += len(messages)

    def item(self, record: dict[str, Any], line: int) -> None:
        namespace, key = check_item_key(_field(record, "namespace", list), _field(record, "key", str))
        value = check_item_value(_field(record, "value", dict))
        ttl = check_ttl(record.get("ttl"))
        expires_at = _MOMENT.validate_python(record.get("expires_at"))
        if (namespace, key) in self.item_addresses:
            raise _BadRecord(f"item {key!r:.200} of namespace {list(namespace)!r:.200} appears twice")
        if self.items is None:
            self.store.require_items()
        self.item_addresses.add((namespace, key))
        self.counts.items += 1
        copy = ItemCopy(namespace, key, value, ttl, expires_at)
        if copy.expired(_now()):
            self.expired += 1  # it would read as absent at the source by now
            return
        if self.item_writes.add(copy, line):
            self.flush_items()

    def flush_items(self) -> None:
        if self.items is not None:
            self.item_writes.write(partial(write_changed, self.items))

    def start_collection(self, record: dict[str, Any]) -> None:
        self.flush()
        self.close_collection()
        name = _field(record, "name", str)
        if name in self.seen:
            raise _BadRecord(f"collection {name!r} appears twice")
        dimension = record.get("dimension")
        if dimension is not None and (not isinstance(dimension, int) or isinstance(dimension, bool)):
            raise _BadRecord("a collection's dimension is an integer or null")
        self.seen.add(name)
        self.collection = CollectionInfo(name, check_metric(_field(record, "metric", str)), dimension)
        self.vectors = self.store.open_vectors(self.collection)
        self.vectors.count()  # create it now (with its metric and dimension), even if no document follows
        self.counts.collections += 1

    def document(self, record: dict[str, Any], line: int) -> None:
        name = _field(record, "collection", str)
        if self.collection is None or name != self.collection.name:
            raise _BadRecord(f"a document of collection {name!r} must follow that collection's record")
        embedding = decode_embedding(record.get("embedding"))
        metadata = record.get("metadata", {})
        document = VectorDocument(
            id=_field(record, "id", str), content=record.get("content", ""), embedding=embedding, metadata=metadata
        )
        if self.documents.add(document, line):
            self.flush()

    def flush(self) -> None:
        if self.vectors is not None:
            self.counts.documents += self.documents.write(self.vectors.store)

    def close_collection(self) -> None:
        if self.vectors is not None:
            self.vectors.close()
            self.vectors = None

    def close(self) -> None:
        self.close_collection()
        if self.chat is not None:
            self.chat.close()
            self.chat = None
        if self.items is not None:
            self.items.close()
            self.items = None


def _parse_json(number: int, line: bytes) -> Any:
    text = line.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:  # RecursionError: nested beyond reading
        raise Failure(f"line {number}: not JSON ({error})") from None


def _parse(number: int, line: bytes) -> dict[str, Any] | None:
    record = _parse_json(number, line)
    if record is None:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("type"), str):
        raise Failure(f"line {number}: a record is a JSON object with a 'type'")
    return record


def _check_header(number: int, record: Any) -> int:
    if not isinstance(record, dict) or record.get("type") != "header" or record.get("format") != FORMAT:
        raise Failure(f"line {number}: not a memwoven export (the first line must be its header record)")
    version = record.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise Failure(f"line {number}: the header has no valid format version")
    if version > VERSION:
        raise Failure(f"the export is in format version {version}; this memwoven reads version {VERSION} at most")
    return version


def import_records(store: Store, lines: Iterable[bytes]) -> Counts:
    """Write an export into `store` (sessions replaced, documents upserted); return what it held.

    Fails on the first bad record, naming its line (a failure of the store names none); what came before it
    stays written (importing the same file again is harmless: every write is idempotent).
    """
    importer = _Importer(store)
    number, header, end, version = 0, False, None, VERSION
    try:
        for number, line in enumerate(lines, 1):
            if not header:
                version = _check_header(number, _parse_json(number, line))
                header = True
                importer.open()
                continue
            record = _parse(number, line)
            if record is None:
                continue
            if end is not None:
                raise Failure(f"line {number}: a record after the end record")
            kind = record["type"]
            try:
                if kind == "session":
                    importer.session(record)
                elif kind == "collection":
                    importer.start_collection(record)
                elif kind == "document":
                    importer.document(record, number)
                elif kind == "item" and version >= 2:
                    importer.item(record, number)
                elif kind == "end":
                    importer.flush()
                    importer.flush_items()
                    end = record
                else:
                    raise _BadRecord(f"unknown record type {kind!r}")
            except ValueError as error:  # the line's content is at fault; a failing store is not the line's
                raise Failure(f"line {number}: {error}") from None
        importer.flush()
        importer.flush_items()
    finally:
        importer.close()
    if not header:
        raise Failure("the input is empty (expected a memwoven export)")
    if end is None:
        raise Failure(
            f"the export is truncated after line {number} (no end record); what it held was imported: "
            "import the complete file again"
        )
    absent = {"items": 0} if version < 2 else {}  # version 1 has no items, nor their count
    expected = {name: end.get(name, absent.get(name)) for name in asdict(importer.counts)}
    if expected != asdict(importer.counts):
        raise Failure(f"the end record counts {expected} but the file held {asdict(importer.counts)}")
    if importer.seen:
        existing_collections(store, importer.seen)
    return importer.counts


# Migration ----------------------------------------------------------------------------------------------------


@dataclass
class MigrationReport(Counts):
    """What a migration found (the counts of the source) and did (how many it wrote)."""

    sessions_copied: int = 0
    documents_copied: int = 0
    items_copied: int = 0


@dataclass(frozen=True)
class Plan:
    """What a migration would copy: sessions with their message counts, collections with their sizes, the number
    of item namespaces and items."""

    sessions: dict[str, int]
    collections: list[tuple[CollectionInfo, int]]
    item_namespaces: int = 0
    items: int = 0


def plan_migration(source: Store) -> Plan:
    """Survey the source (read-only)."""
    sessions: dict[str, int] = {}
    if source.holds_chat():
        with source.chat() as chat:
            for session_id in chat.sessions():
                sessions[session_id] = len(chat.load(session_id))
    namespaces = items = 0
    if source.holds_items():
        with source.items() as memory:
            namespaces, items = len(memory.namespaces()), memory.count()
    collections = []
    for info in source.collections():
        with source.vectors(info) as memory:
            collections.append((info, memory.count()))
    return Plan({k: v for k, v in sessions.items() if v}, collections, namespaces, items)


def migrate(
    source: Store, target: Store, *, reporter: Reporter | None = None, batch_size: int = BATCH
) -> MigrationReport:
    """Copy every session, item and collection of `source` into `target`, then verify the counts.

    Resumable: what the target already holds identically is not written again, so after an interruption the
    same command carries on. Target sessions, items and documents the source does not have are left alone. Items
    keep their value and ttl; their versions and times are the target's.
    """
    reporter = reporter or _Silent()
    report = MigrationReport()
    expected: dict[str, int] = {}
    if source.holds_chat():
        with source.chat() as chat:
            ids = chat.sessions()
            if ids and not target.has_chat:
                raise Failure(f"{source.shown} has {len(ids)} chat sessions but {target.shown} stores vectors only")
            if ids:
                with target.chat() as into:
                    advance = reporter.task("sessions", len(ids))
                    for session_id in ids:
                        messages = chat.load(session_id)
                        if messages:  # else cleared meanwhile
                            expected[session_id] = len(messages)
                            if into.load(session_id) != messages:
                                into.save(session_id, messages)
                                report.sessions_copied += 1
                        advance(1)
    report.sessions, report.messages = len(expected), sum(expected.values())
    addresses: list[tuple[Namespace, str]] = []
    if source.holds_items():
        with source.items() as memory:
            namespaces = memory.namespaces()
            if namespaces and not target.has_items:
                target.require_items()
            if namespaces:
                with target.items() as into:
                    advance = reporter.task("items", memory.count())
                    for page in _batches(stored_items(memory, namespaces), batch_size):
                        report.items_copied += write_changed(into, [ItemCopy.of(item) for item in page])
                        addresses += [(item.namespace, item.key) for item in page]
                        advance(len(page))
    report.items = len(addresses)
    sizes: dict[str, int] = {}
    for info in source.collections():
        with source.vectors(info) as memory, target.vectors(info) as into:
            ids = memory.ids()
            into.count()  # create the collection (with its metric and dimension) even when empty
            advance = reporter.task(f"collection {info.name}", len(ids))
            for batch in _chunks(ids, batch_size):
                documents = memory.get(batch)
                present = {document.id: document for document in into.get(batch)}
                changed = [document for document in documents if not _same_document(present.get(document.id), document)]
                if changed:
                    into.store(changed)
                    report.documents_copied += len(changed)
                advance(len(batch))
            sizes[info.name] = memory.count()
    report.collections, report.documents = len(sizes), sum(sizes.values())
    _verify(target, expected, sizes)
    _verify_items(target, addresses)
    return report


def _verify_items(target: Store, addresses: list[tuple[Namespace, str]]) -> None:
    """Check the target holds every item copied."""
    if not addresses:
        return
    with target.items() as into:
        for start in range(0, len(addresses), BATCH):
            wanted = addresses[start : start + BATCH]
            for (namespace, key), item in zip(wanted, into.get_many(wanted)):
                if item is None:
                    raise Failure(
                        f"verification failed: item {key!r} of namespace {list(namespace)!r} is not in "
                        f"{target.shown} (did it expire meanwhile?)"
                    )


def existing_collections(target: Store, names: Iterable[str]) -> dict[str, CollectionInfo]:
    """The collections `names` as `target` lists them; a `Failure` names one it does not hold."""
    there = {info.name: info for info in target.collections()}
    for name in names:
        if name not in there:
            why = " (Qdrant creates a collection with its dimension: an empty one may have none)"
            raise Failure(
                f"verification failed: collection {name!r} is not in {target.shown}"
                + (why if target.scheme == "qdrant" else "")
            )
    return there


def _verify(target: Store, sessions: dict[str, int], sizes: dict[str, int]) -> None:
    """Check the target holds every session with its message count and every collection with its size."""
    if sessions:
        with target.chat() as chat:
            for session_id, count in sessions.items():
                found = len(chat.load(session_id))
                if found != count:
                    raise Failure(
                        f"verification failed: session {session_id!r} has {found} messages in {target.shown}, "
                        f"{count} in the source"
                    )
    there = existing_collections(target, sizes)
    for name, size in sizes.items():
        with target.vectors(there[name]) as memory:
            found = memory.count()
        if found != size:
            raise Failure(
                f"verification failed: collection {name!r} has {found} documents in {target.shown}, {size} in the "
                "source (did the target hold other documents, or did the source change meanwhile?)"
            )
