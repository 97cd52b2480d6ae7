"""Export, import and migration: the memwoven export format (JSON Lines, version 1) and store-to-store copies.

No typer or rich here: progress goes through a `Reporter`. The format is specified in docs/export-format.md:

    {"type": "header", "format": "memwoven-export", "version": 1, "exported_at": ..., "source": ..., "memwoven": ...}
    {"type": "session", "id": ..., "messages": [<Message JSON>, ...]}
    {"type": "collection", "name": ..., "metric": "cosine" | "dot", "dimension": <int> | null}
    {"type": "document", "collection": ..., "id": ..., "content": ..., "metadata": {...}, "embedding": <base64>}
    {"type": "end", "sessions": S, "messages": M, "collections": C, "documents": D}

Embeddings are the base64 of their little-endian float32 bytes, which is exactly what every backend stores.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

import numpy as np

from memwoven.cli._stores import Failure, Store
from memwoven.contracts import ChatMemory, CollectionInfo, VectorMemory
from memwoven.models import VectorDocument, coerce_messages
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
VERSION = 1
BATCH = 1000


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


def encode_embedding(embedding: Sequence[float]) -> str:
    """The base64 of the embedding's little-endian float32 bytes."""
    return base64.b64encode(np.asarray(embedding, dtype="<f4").tobytes()).decode("ascii")


def decode_embedding(value: object) -> list[float]:
    """An embedding from its base64 float32 form (or, as importers also accept, a JSON list of numbers)."""
    if isinstance(value, list):
        return [float(x) for x in value]
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


# Export -------------------------------------------------------------------------------------------------------


def export_records(
    store: Store,
    *,
    sessions: Sequence[str] = (),
    collections: Sequence[str] = (),
    counts: Counts | None = None,
) -> Iterator[dict[str, Any]]:
    """The records of an export of `store`: everything, or only the sessions and collections named."""
    from memwoven import __version__

    counts = counts if counts is not None else Counts()
    everything = not sessions and not collections
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
class _Importer:
    """Writes the records of an export into a store, one collection's documents in batches."""

    store: Store
    counts: Counts = field(default_factory=Counts)
    chat: ChatMemory | None = None
    collection: CollectionInfo | None = None
    vectors: VectorMemory | None = None
    pending: list[VectorDocument] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # the input line of each pending document
    seen: set[str] = field(default_factory=set)

    def open(self) -> None:
        """Open the store before the first record, so that a URL it refuses is not blamed on a line."""
        if self.store.has_chat:
            self.chat = self.store.open_chat()

    def session(self, record: dict[str, Any]) -> None:
        session_id = _field(record, "id", str)
        messages = coerce_messages(_field(record, "messages", list))
        if self.chat is None:
            raise Failure(f"the export holds chat sessions but {self.store.shown} stores vectors only")
        self.chat.save(session_id, messages)  # replace-all: importing again gives the same history
        self.counts.sessions += 1
        self.counts.messages += len(messages)

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
        self.pending.append(document)
        self.lines.append(line)
        if len(self.pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        if self.pending and self.vectors is not None:
            try:
                self.vectors.store(self.pending)
            except ValueError as error:  # the store refused a document of the batch (InvalidInputError)
                first, last = self.lines[0], self.lines[-1]
                where = f"line {first}" if first == last else f"a document on lines {first}-{last}"
                raise Failure(f"{where}: {error}") from None
            self.counts.documents += len(self.pending)
            self.pending, self.lines = [], []

    def close_collection(self) -> None:
        if self.vectors is not None:
            self.vectors.close()
            self.vectors = None

    def close(self) -> None:
        self.close_collection()
        if self.chat is not None:
            self.chat.close()
            self.chat = None


def _parse_json(number: int, line: bytes) -> Any:
    text = line.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise Failure(f"line {number}: not JSON ({error})") from None


def _parse(number: int, line: bytes) -> dict[str, Any] | None:
    record = _parse_json(number, line)
    if record is None:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("type"), str):
        raise Failure(f"line {number}: a record is a JSON object with a 'type'")
    return record


def _check_header(number: int, record: Any) -> None:
    if not isinstance(record, dict) or record.get("type") != "header" or record.get("format") != FORMAT:
        raise Failure(f"line {number}: not a memwoven export (the first line must be its header record)")
    version = record.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise Failure(f"line {number}: the header has no valid format version")
    if version > VERSION:
        raise Failure(f"the export is in format version {version}; this memwoven reads version {VERSION} at most")


def import_records(store: Store, lines: Iterable[bytes]) -> Counts:
    """Write an export into `store` (sessions replaced, documents upserted); return what it held.

    Fails on the first bad record, naming its line (a failure of the store names none); what came before it
    stays written (importing the same file again is harmless: every write is idempotent).
    """
    importer = _Importer(store)
    number, header, end = 0, False, None
    try:
        for number, line in enumerate(lines, 1):
            if not header:
                _check_header(number, _parse_json(number, line))
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
                elif kind == "end":
                    importer.flush()
                    end = record
                else:
                    raise _BadRecord(f"unknown record type {kind!r}")
            except ValueError as error:  # the line's content is at fault; a failing store is not the line's
                raise Failure(f"line {number}: {error}") from None
        importer.flush()
    finally:
        importer.close()
    if not header:
        raise Failure("the input is empty (expected a memwoven export)")
    if end is None:
        raise Failure(
            f"the export is truncated after line {number} (no end record); what it held was imported: "
            "import the complete file again"
        )
    expected = {name: end.get(name) for name in asdict(importer.counts)}
    if expected != asdict(importer.counts):
        raise Failure(f"the end record counts {expected} but the file held {asdict(importer.counts)}")
    return importer.counts


# Migration ----------------------------------------------------------------------------------------------------


@dataclass
class MigrationReport(Counts):
    """What a migration found (the counts of the source) and did (how many it wrote)."""

    sessions_copied: int = 0
    documents_copied: int = 0


@dataclass(frozen=True)
class Plan:
    """What a migration would copy: sessions with their message counts, collections with their sizes."""

    sessions: dict[str, int]
    collections: list[tuple[CollectionInfo, int]]


def plan_migration(source: Store) -> Plan:
    """Survey the source (read-only)."""
    sessions: dict[str, int] = {}
    if source.holds_chat():
        with source.chat() as chat:
            for session_id in chat.sessions():
                sessions[session_id] = len(chat.load(session_id))
    collections = []
    for info in source.collections():
        with source.vectors(info) as memory:
            collections.append((info, memory.count()))
    return Plan({k: v for k, v in sessions.items() if v}, collections)


def migrate(
    source: Store, target: Store, *, reporter: Reporter | None = None, batch_size: int = BATCH
) -> MigrationReport:
    """Copy every session and collection of `source` into `target`, then verify the counts.

    Resumable: what the target already holds identically is not written again, so after an interruption the
    same command carries on. Target sessions and documents the source does not have are left alone.
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
    sizes: dict[str, int] = {}
    for info in source.collections():
        with source.vectors(info) as memory, target.vectors(info) as into:
            ids = memory.ids()
            into.count()  # create the collection (with its metric and dimension) even when empty
            advance = reporter.task(f"collection {info.name}", len(ids))
            for batch in _chunks(ids, batch_size):
                documents = memory.get(batch)
                present = {document.id: document for document in into.get(batch)}
                changed = [document for document in documents if present.get(document.id) != document]
                if changed:
                    into.store(changed)
                    report.documents_copied += len(changed)
                advance(len(batch))
            sizes[info.name] = memory.count()
    report.collections, report.documents = len(sizes), sum(sizes.values())
    _verify(target, expected, sizes)
    return report


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
    there = {info.name: info for info in target.collections()}
    for name, size in sizes.items():
        info = there.get(name)
        found = 0
        if info is not None:
            with target.vectors(info) as memory:
                found = memory.count()
        if found != size:
            raise Failure(
                f"verification failed: collection {name!r} has {found} documents in {target.shown}, {size} in the "
                "source (did the target hold other documents, or did the source change meanwhile?)"
            )
