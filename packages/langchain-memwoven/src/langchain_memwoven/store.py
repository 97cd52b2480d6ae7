"""`MemwovenStore`: a LangGraph long-term memory store (`BaseStore`) over memwoven's contracts.

Storage design
--------------
* **Items live in a `ChatMemory`, one session per item.** The session id is `prefix + JSON([*namespace, key])`
  (e.g. `store:["users","u1","memories","k1"]`); the session holds one `Message` whose metadata is the record:
  the value, `created_at`, `updated_at`, the TTL and its expiry, a revision and the ids of its index vectors.
  A put or delete is one `update` of that session (optimistic versioning, retried on conflict), so it is
  atomic and concurrent writers cannot lose each other's changes. `sessions()` (sorted) lists the items: a
  namespace prefix is a string prefix of the ids, and `list_namespaces` reads namespaces off the ids. Namespaces
  and store prefixes are boundaries: what follows the prefix is a whole JSON list of strings, and cutting another
  prefix off an id never leaves one, so `("a",)` (ids starting `["a",`) never matches `("ab",)`, and a store never
  reads, lists or deletes the items of another prefix, even one that starts with its own.
* **Semantic search uses a `VectorMemory` and an `EmbedFn`.** Each indexed text of an item (the `fields` paths,
  LangGraph's path syntax) is one vector document whose metadata names the item, its revision and the
  item's namespace prefixes (`{"prefixes": {"$contains": ...}}` selects a namespace prefix). Vectors are
  written before the item and the previous revision's vectors are deleted after it, so a hit is used only if
  its revision is the item's current one: a crash in between leaves unused vectors, never a wrong result.
* **Filters** use memwoven's filter language (`{"kind": "note", "year": {"$gte": 2020}}`) on the item value.
* **TTL** (minutes, as in LangGraph): expired items are never returned; `sweep_ttl()` deletes them (a namespace
  holding only expired items is still listed by `list_namespaces` until it runs). Reads refresh the TTL when
  asked (`refresh_ttl`, or `refresh_on_read` of the TTL config), which is a write.

In one `batch`, reads see the state before the batch; puts are applied last, the last put of a key winning,
as LangGraph's own stores do. Every operation is written once as a generator of backend calls, run either
through the sync methods (`batch`) or through their async twins (`abatch`), by memwoven's step engine.
"""

from __future__ import annotations

import json
import uuid
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    get_text_at_path,
    tokenize_path,
)
from typing_extensions import Self

from langchain_memwoven._convert import check_json
from langchain_memwoven.embeddings import embed_fn_from_embeddings
from memwoven import ChatMemory, CorruptMemoryError, InvalidInputError, Message, VectorMemory
from memwoven._steps import Call, Runner, Steps, twins
from memwoven.embed import EmbedFn
from memwoven.filters import compile_filter
from memwoven.models import thaw
from memwoven.urls import open_chat_memory, open_vector_memory

__all__ = ["MemwovenStore"]

_T = TypeVar("_T")
Namespace = tuple[str, ...]


def _call(target: Any, method: str, *args: Any, **kwargs: Any) -> Call:
    return Call(target, method, args, kwargs)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class _Record:
    """One stored item (kept as the metadata of the single message of its session)."""

    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    ttl: float | None = None
    expires_at: datetime | None = None
    revision: str = ""
    vectors: list[str] = field(default_factory=list)

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def refreshed(self, now: datetime) -> _Record:
        """The record with its expiry pushed `ttl` minutes past `now` (unchanged without a TTL)."""
        if self.ttl is None:
            return self
        return replace(self, expires_at=now + timedelta(minutes=self.ttl))

    def message(self) -> Message:
        metadata = {
            "value": self.value,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "ttl": self.ttl,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "revision": self.revision,
            "vectors": self.vectors,
        }
        return Message(role="system", metadata=metadata)

    @classmethod
    def parse(cls, session_id: str, messages: Sequence[Message]) -> _Record | None:
        if not messages:
            return None
        try:
            data: Mapping[str, Any] = messages[-1].metadata
            expires_at = data["expires_at"]
            return cls(
                value=thaw(data["value"]),
                created_at=datetime.fromisoformat(data["created_at"]),
                updated_at=datetime.fromisoformat(data["updated_at"]),
                ttl=data["ttl"],
                expires_at=datetime.fromisoformat(expires_at) if expires_at else None,
                revision=data["revision"],
                vectors=list(data["vectors"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise CorruptMemoryError(f"store item {session_id!r} is not a readable record ({error!r})") from None


class MemwovenStore(BaseStore, Runner):
    """A LangGraph `BaseStore` over a memwoven `ChatMemory` (items) and, for semantic search, a `VectorMemory`.

    ```python
    store = MemwovenStore.from_url("sqlite:///memory.db", embed=HashingEmbedFn(), fields=["text"])
    store.put(("users", "u1", "memories"), "m1", {"text": "likes green tea"})
    store.search(("users", "u1"), query="what does the user drink?", limit=3)
    ```

    See the module docstring for how items, vectors, filters and TTLs are stored.
    """

    supports_ttl = True

    def __init__(
        self,
        items: ChatMemory,
        *,
        vectors: VectorMemory | None = None,
        embed: EmbedFn | Embeddings | None = None,
        fields: Sequence[str] | None = None,
        ttl: TTLConfig | None = None,
        prefix: str = "store:",
        owns_memories: bool = False,
    ) -> None:
        """Store items in `items`; `vectors` and `embed` (both or neither) enable `search(query=...)`.

        `fields` are the paths indexed by default (LangGraph's syntax; default `"$"`, the whole value). `prefix`
        starts every session and vector id, so several stores can share memories. With `owns_memories`,
        `close()` closes them.
        """
        if (vectors is None) != (embed is None):
            raise InvalidInputError("semantic search needs both `vectors` (a VectorMemory) and `embed`, or neither")
        self.items = items
        self.vectors = vectors
        self.embed = embed_fn_from_embeddings(embed) if isinstance(embed, Embeddings) else embed
        self.fields = list(fields or ["$"])
        self.ttl_config = ttl
        self.prefix = prefix
        self._owns_memories = owns_memories

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        embed: EmbedFn | Embeddings | None = None,
        collection: str = "langgraph_store",
        fields: Sequence[str] | None = None,
        ttl: TTLConfig | None = None,
        prefix: str = "store:",
        **options: Any,
    ) -> Self:
        """A store whose items and (with `embed`) vectors live at one URL; `close()` releases both.

        `options` go to both backends (e.g. `schema=` for PostgreSQL).
        """
        items = open_chat_memory(url, **options)
        vectors = open_vector_memory(url, collection=collection, **options) if embed is not None else None
        return cls(items, vectors=vectors, embed=embed, fields=fields, ttl=ttl, prefix=prefix, owns_memories=True)

    def __repr__(self) -> str:
        return f"MemwovenStore({self.items!r}, vectors={self.vectors!r}, embed={self.embed!r})"

    def _batch(self, ops: Iterable[Op]) -> Steps[list[Result]]:
        """Execute operations: reads first (on the state before the batch), then the puts."""
        now = _now()
        results: list[Result] = []
        puts: dict[tuple[Namespace, str], PutOp] = {}
        for op in list(ops):
            result: Result = None
            if isinstance(op, GetOp):
                result = yield from self._get(op, now)
            elif isinstance(op, SearchOp):
                result = yield from (self._semantic_search(op, now) if op.query and self.embed else self._list(op, now))
            elif isinstance(op, ListNamespacesOp):
                result = yield from self._list_namespaces(op)
            elif isinstance(op, PutOp):
                puts[(tuple(op.namespace), op.key)] = op
            else:
                raise InvalidInputError(f"unknown store operation {op!r}")
            results.append(result)
        if puts:
            yield from self._put(list(puts.values()), now)
        return results

    def _sweep_ttl(self) -> Steps[int]:
        """Delete every expired item (and its vectors); returns how many were deleted."""
        now = _now()
        session_ids: list[str] = yield _call(self.items, "sessions")
        removed, stale = 0, []
        for session_id in session_ids:
            if self._parse(session_id) is None:
                continue
            record = _Record.parse(session_id, (yield _call(self.items, "load", session_id)))
            if record is None or not record.expired(now):
                continue
            replaced = yield from self._replace(session_id, lambda old: None if old and old.expired(now) else old)
            if replaced is not None:
                removed += 1
                stale += replaced.vectors
        if stale and self.vectors is not None:
            yield _call(self.vectors, "delete", stale)
        return removed

    def _close(self) -> Steps[None]:
        """Close the memories if this store opened them (`from_url`)."""
        if self._owns_memories:
            yield _call(self.items, "close")
            if self.vectors is not None:
                yield _call(self.vectors, "close")

    batch, abatch = twins(_batch)
    sweep_ttl, asweep_ttl = twins(_sweep_ttl)
    close, aclose = twins(_close)

    # --- ids -----------------------------------------------------------------------------------------------

    def _session_id(self, namespace: Namespace, key: str) -> str:
        return self.prefix + _json([*namespace, key])

    def _id_prefix(self, namespace_prefix: Namespace) -> str:
        """The start of the session id of every item under `namespace_prefix`."""
        return self.prefix + (_json(list(namespace_prefix))[:-1] + "," if namespace_prefix else "[")

    def _parse(self, session_id: str) -> tuple[Namespace, str] | None:
        """(namespace, key) of a store session id, or None for a session this store does not own."""
        if not session_id.startswith(self.prefix + "["):
            return None
        try:
            path = json.loads(session_id[len(self.prefix) :])
        except ValueError:
            return None
        if not isinstance(path, list) or len(path) < 2 or not all(isinstance(label, str) for label in path):
            return None
        return tuple(path[:-1]), path[-1]

    def _tag(self, namespace_prefix: Namespace) -> str:
        return self.prefix + _json(list(namespace_prefix))

    # --- operations ----------------------------------------------------------------------------------------

    def _load(self, session_id: str, now: datetime) -> Steps[_Record | None]:
        """The live (unexpired) record of an item, or None."""
        record = _Record.parse(session_id, (yield _call(self.items, "load", session_id)))
        return None if record is None or record.expired(now) else record

    def _item(self, session_id: str, record: _Record, score: float | None = None) -> SearchItem:
        parsed = self._parse(session_id)
        if parsed is None:  # listed under this store's prefix, so it parses: anything else is damage
            raise CorruptMemoryError(f"session {session_id!r} is not an item of this store")
        namespace, key = parsed
        return SearchItem(namespace, key, record.value, record.created_at, record.updated_at, score)

    def _get(self, op: GetOp, now: datetime) -> Steps[Item | None]:
        session_id = self._session_id(op.namespace, op.key)
        record = yield from self._load(session_id, now)
        if record is None:
            return None
        if op.refresh_ttl and record.ttl is not None:
            yield from self._refresh([session_id], now)
        item = self._item(session_id, record)
        return Item(
            value=item.value,
            key=item.key,
            namespace=item.namespace,
            created_at=item.created_at,
            updated_at=item.updated_at,
        )

    def _list(self, op: SearchOp, now: datetime) -> Steps[list[SearchItem]]:
        """Items under the namespace prefix matching the filter, in (namespace, key) order."""
        predicate = compile_filter(op.filter) if op.filter else None
        wanted = op.offset + op.limit
        session_ids: list[str] = yield _call(self.items, "sessions")
        start = self._id_prefix(op.namespace_prefix)
        found: list[tuple[str, _Record]] = []
        for session_id in session_ids[bisect_left(session_ids, start) :]:
            if len(found) >= wanted or not session_id.startswith(start):
                break
            if self._parse(session_id) is None:
                continue
            record = yield from self._load(session_id, now)
            if record is not None and (predicate is None or predicate(record.value)):
                found.append((session_id, record))
        page = found[op.offset : wanted]
        yield from self._refresh([sid for sid, record in page if record.ttl is not None and op.refresh_ttl], now)
        return [self._item(session_id, record) for session_id, record in page]

    def _semantic_search(self, op: SearchOp, now: datetime) -> Steps[list[SearchItem]]:
        """Items ranked by their best-matching vector; fetches more hits until the page is full or all are seen."""
        if self.vectors is None or self.embed is None or op.query is None:
            raise RuntimeError("a semantic search needs the store's index and a query")  # checked by the caller
        predicate = compile_filter(op.filter) if op.filter else None
        wanted = op.offset + op.limit
        query = yield _call(self.embed, "embed", op.query)
        vector_filter = {"prefixes": {"$contains": self._tag(op.namespace_prefix)}}
        records: dict[str, _Record | None] = {}
        top_k = max(wanted, 1) * 2
        while True:
            hits = yield _call(self.vectors, "search", query, top_k=top_k, filter=vector_filter)
            found: list[tuple[str, _Record, float]] = []
            seen: set[str] = set()
            for hit in hits:
                session_id, revision = hit.document.metadata.get("item"), hit.document.metadata.get("revision")
                if not isinstance(session_id, str) or session_id in seen:
                    continue
                if session_id not in records:
                    records[session_id] = yield from self._load(session_id, now)
                record = records[session_id]
                if record is None or record.revision != revision:
                    continue  # a vector of a deleted item or of an older revision
                seen.add(session_id)
                if predicate is None or predicate(record.value):
                    found.append((session_id, record, hit.score))
                if len(found) >= wanted:
                    break
            if len(found) >= wanted or len(hits) < top_k:
                break
            top_k *= 4
        page = found[op.offset : wanted]
        yield from self._refresh([sid for sid, record, _ in page if record.ttl is not None and op.refresh_ttl], now)
        return [self._item(session_id, record, score) for session_id, record, score in page]

    def _list_namespaces(self, op: ListNamespacesOp) -> Steps[list[Namespace]]:
        session_ids: list[str] = yield _call(self.items, "sessions")
        namespaces = {parsed[0] for parsed in map(self._parse, session_ids) if parsed is not None}
        conditions = op.match_conditions or ()
        matching = [ns for ns in namespaces if all(_matches(condition, ns) for condition in conditions)]
        if op.max_depth is not None:
            matching = list({ns[: op.max_depth] for ns in matching})
        return sorted(matching)[op.offset : op.offset + op.limit]

    def _texts(self, op: PutOp) -> list[tuple[str, str]]:
        """The (path, text) pairs to index for a put: `op.index`, else the store's fields; none for `False`."""
        if self.embed is None or op.index is False or op.value is None:
            return []
        pairs = []
        for path in op.index if op.index is not None else self.fields:
            texts = get_text_at_path(op.value, path if path == "$" else tokenize_path(path))
            pairs += [(path, texts[0])] if len(texts) == 1 else [(f"{path}.{i}", t) for i, t in enumerate(texts)]
        return pairs

    def _put(self, ops: list[PutOp], now: datetime) -> Steps[None]:
        """Write the vectors of every put, then each item (one `update`), then drop the replaced vectors."""
        plans: list[tuple[PutOp, str, list[str]]] = []
        documents: list[dict[str, Any]] = []
        for op in ops:
            if op.value is not None:
                if not isinstance(op.value, dict):
                    raise InvalidInputError(f"a store value must be a dict, got {type(op.value).__name__}")
                check_json(op.value, f"the value of {op.key!r}")
            revision = uuid.uuid4().hex
            session_id = self._session_id(op.namespace, op.key)
            tags = [self._tag(op.namespace[:depth]) for depth in range(len(op.namespace) + 1)]
            metadata = {"item": session_id, "revision": revision, "prefixes": tags}
            new_documents: list[dict[str, Any]] = [
                {
                    "id": self.prefix + _json([*op.namespace, op.key, path, revision]),
                    "content": text,
                    "metadata": {**metadata, "path": path},
                }
                for path, text in self._texts(op)
            ]
            documents += new_documents
            plans.append((op, revision, [document["id"] for document in new_documents]))
        if documents:
            if self.vectors is None or self.embed is None:
                raise RuntimeError("documents to index need the store's index")  # only made when it has one
            embeddings = yield _call(self.embed, "embed_many", [document["content"] for document in documents])
            yield _call(self.vectors, "store", [{**d, "embedding": e} for d, e in zip(documents, embeddings)])
        stale: list[str] = []
        for op, revision, vector_ids in plans:
            new = _writer(op, revision, vector_ids, now)
            replaced = yield from self._replace(self._session_id(op.namespace, op.key), new)
            stale += replaced.vectors if replaced is not None else []
        if stale and self.vectors is not None:
            yield _call(self.vectors, "delete", stale)

    def _replace(self, session_id: str, new: Callable[[_Record | None], _Record | None]) -> Steps[_Record | None]:
        """Atomically replace an item by `new(old)` (None deletes it); returns the record it replaced, if any."""
        replaced: list[_Record | None] = [None]

        def change(messages: list[Message]) -> list[Message]:
            old = _Record.parse(session_id, messages)
            record = new(old)
            replaced[0] = None if record is old else old
            if record is old:
                return messages
            return [] if record is None else [record.message()]

        yield _call(self.items, "update", session_id, change)
        return replaced[0]

    def _refresh(self, session_ids: list[str], now: datetime) -> Steps[None]:
        """Push the expiry of these items `ttl` minutes past `now`."""
        for session_id in session_ids:
            yield from self._replace(
                session_id, lambda old: old.refreshed(now) if old and not old.expired(now) else old
            )


def _writer(
    op: PutOp, revision: str, vector_ids: list[str], now: datetime
) -> Callable[[_Record | None], _Record | None]:
    """The change a put makes to an item: a new record keeping `created_at`, or None for a delete."""
    if op.value is None:
        return lambda old: None
    value = thaw(op.value)

    def write(old: _Record | None) -> _Record:
        created_at = old.created_at if old is not None and not old.expired(now) else now
        record = _Record(value, created_at, now, ttl=op.ttl, revision=revision, vectors=vector_ids)
        return record.refreshed(now)

    return write


def _matches(condition: MatchCondition, namespace: Namespace) -> bool:
    """LangGraph's namespace match: a prefix or suffix of labels, where "*" matches any label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    labels = namespace[: len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path) :]
    return all(want in ("*", label) for label, want in zip(labels, path))
