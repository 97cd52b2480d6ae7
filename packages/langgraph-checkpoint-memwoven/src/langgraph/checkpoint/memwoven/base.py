"""`MemwovenSaver`: a LangGraph checkpointer (`BaseCheckpointSaver`) on any memwoven `ItemMemory`.

Layout under the saver's `namespace` (default ``("langgraph_checkpoints",)``), one item per stored thing, so a step
writes only what changed (as LangGraph's `PostgresSaver` does):

- ``(*namespace, "checkpoints", thread_id, "=" + checkpoint_ns)`` / checkpoint id: the checkpoint without its
  channel values, its metadata, its parent's id and, as plain JSON under ``values``, its small values of JSON's
  own types (`_inline`: rewritten with every checkpoint, as PostgresSaver keeps its primitive values, since an
  item of their own costs more). Checkpoint ids (uuid6) sort by time, so the newest is the last key.
- ``(*namespace, "blobs", thread_id, "=" + checkpoint_ns)`` / ``[channel, version]``: one other channel value,
  written when its version changes (or when a saver whose serde sees every value continues a checkpoint holding
  it inside, `_carried`).
- ``(*namespace, "writes", thread_id, "=" + checkpoint_ns, checkpoint_id)`` / ``[task_id]``: a task's pending
  writes for a checkpoint, one item per task (special channels at their fixed negative index, `WRITES_IDX_MAP`);
  data stored before that keeps one item per write, ``[task_id, index]``, and still reads.
- ``(*namespace, "threads")`` / thread id: with a `ttl`, the thread's record: its state (``live``, or
  ``deleting`` / ``deleted`` while and after the TTL sweep deletes it; ``deleting`` holds the deleter's claim
  token and its lease as expiry), last write time and expiry, an
  incarnation id (new each time the thread starts afresh); written by `put` in the same `put_many` as the
  checkpoint, compare-and-set on the record's version (see `MemwovenSaver`).

Values are serialized with the saver's `serde` (LangGraph's `JsonPlusSerializer` by default, no pickle fallback)
and kept as ``{"type": ..., "data": <base64>}`` inside the item's JSON value.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import contextlib
import itertools
import json
import logging
import math
import random
import re
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple, NoReturn

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from typing_extensions import Self, TypedDict

import memwoven._clock as _clock
from langchain_memwoven.messages import to_memwoven_messages
from langgraph.checkpoint.memwoven.ttl import DEFAULT_SWEEP_MINUTES, TTLSweeper, minutes_to_seconds
from memwoven import Item, ItemMemory, ItemWrite, Message, open_item_memory
from memwoven._cache import LRUCache
from memwoven._steps import Call, Runner, Sleep, Steps, twins
from memwoven.contracts import MAX_ID_BYTES, WILDCARD, PlainItem, check_namespace
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError, InvalidInputError

__all__ = ["MemwovenSaver", "ThreadDeletedError", "ThreadInfo", "ThreadTTLConfig", "messages_of"]

logger = logging.getLogger(__name__)

Namespace = tuple[str, ...]
_CHECKPOINTS, _BLOBS, _WRITES, _THREADS = "checkpoints", "blobs", "writes", "threads"
_KINDS = (_CHECKPOINTS, _WRITES, _BLOBS)  # a thread's items, by kind (checkpoints first: deleted first)
_LIVE, _DELETING, _DELETED = "live", "deleting", "deleted"
_PAGE = 500  # items per put_many / list page in the bulk operations
_ATTEMPTS = 100  # compare-and-set rounds of a put on a thread record other writers keep changing
_DEFAULT_SWEEP_LIMIT = 1000  # LangGraph's default number of threads per sweep
_INLINE_CHARS = 1024  # the longest string channel value kept inside its checkpoint (`_inline`)
_INLINE_INT = 10**18
_SURROGATE = re.compile("[\ud800-\udfff]")
_DELTA_MARKS = {"counters_since_delta_snapshot", "delta_writes_versioned"}  # metadata of DeltaChannel threads
_RETAIN_AHEAD = 4  # `keep_last`: checkpoints listed beyond the kept ones (a put drops one: one listing finds it)
_HOUSEKEEPING = 16  # `keep_last`: retention passes of a namespace between two looks for leftovers (`_retain`)
_LEASE_MS = 60_000  # how long a ``deleting`` claim holds without renewal (`_Claim`)
_WAIT_SECONDS = 0.05  # `delete_thread`'s pause while another deleter holds the thread


class ThreadTTLConfig(TypedDict, total=False):
    """LangGraph's checkpointer TTL config (``checkpointer.ttl`` in langgraph.json, `ThreadTTLConfig`)."""

    strategy: Literal["delete", "keep_latest"]
    """On expiry, ``"delete"`` (default) deletes the thread; ``"keep_latest"`` keeps its newest checkpoint of
    each checkpoint namespace (`prune`)."""
    default_ttl: float | None
    """Minutes after a thread's last `put` at which it expires (sliding on write; at most memwoven's `MAX_TTL`
    seconds, about 317 years); None: never."""
    sweep_interval_minutes: float | None
    """How often `start_ttl_sweeper` sweeps (default 5 minutes)."""
    sweep_limit: int | None
    """At most this many expired threads per sweep (default 1000)."""


class ThreadDeletedError(ConcurrentModificationError):
    """A `put` continued a thread that was deleted (expired and swept, or `delete_thread`) after the run read it,
    or that the TTL sweep is deleting now: nothing was written. Start the thread again (or retry later)."""


def _label(checkpoint_ns: str) -> str:
    """The namespace label of a checkpoint namespace ("" is LangGraph's root namespace; labels cannot be empty)."""
    return "=" + checkpoint_ns


def _blob_key(channel: str, version: str | int | float) -> str:
    return json.dumps([channel, version], ensure_ascii=False)


def _inline(value: object) -> bool:
    """Whether a channel value is kept inside its checkpoint (as PostgresSaver keeps its primitive values; with the
    default serde only): None, a
    bool, an int of at most 18 digits, a finite float or a string of at most `_INLINE_CHARS` characters (valid
    Unicode), exactly those types (a subclass, such as an enum, keeps its type through the serde in a blob). A row
    of its own costs more than such a value (its keys, indexes and serialized form)."""
    if value is None or type(value) is bool:
        return True
    if type(value) is int:
        return -_INLINE_INT < value < _INLINE_INT
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is str:
        return len(value) <= _INLINE_CHARS and (value.isascii() or not _SURROGATE.search(value))
    return False


def _task_key(task_id: str) -> str:
    return json.dumps([task_id], ensure_ascii=False)


_WRITE_FIELDS = {"task_id": str, "channel": str, "task_path": str, "idx": int}


def _check_write(item: Item, write: Mapping[str, Any]) -> None:
    if any(not isinstance(write.get(name), kind) for name, kind in _WRITE_FIELDS.items()):
        raise CorruptMemoryError(f"a stored pending write is damaged: {item.namespace!r} {item.key!r}")


def _task_writes(item: Item) -> builtins.list[dict[str, Any]]:
    """The writes of a task's item (`MemwovenSaver._put_writes`), each with its task's id and path, checked."""
    writes: Any = item.value.get("writes")
    if not isinstance(writes, Sequence) or not all(isinstance(w, Mapping) for w in writes):
        raise CorruptMemoryError(f"the stored pending writes are damaged: {item.namespace!r} {item.key!r}")
    task = {"task_id": item.value.get("task_id"), "task_path": item.value.get("task_path")}
    found: builtins.list[dict[str, Any]] = [{**w, **task} for w in writes]
    for write in found:
        _check_write(item, write)
    return found


class ThreadInfo(NamedTuple):
    """A thread `MemwovenSaver.list_threads` found."""

    thread_id: str
    updated_at: datetime | None
    """Its last write (None if unknown)."""
    expires_at: datetime | None
    """When its TTL runs out (None: no TTL)."""


def messages_of(found: CheckpointTuple, channel: str = "messages") -> builtins.list[Message]:
    """The messages of a checkpoint's `channel` (a list of LangChain messages, as `MessagesState` keeps it) as
    memwoven `Message`s; [] if the channel is empty, `InvalidInputError` if it holds something else. A read-only
    view: a message whose LangChain fields JSON cannot hold (a datetime, bytes) is given its standard fields only,
    with a logged warning, rather than failing the whole thread."""
    value = found.checkpoint["channel_values"].get(channel, [])
    if not isinstance(value, builtins.list) or not all(isinstance(m, BaseMessage) for m in value):
        thread_id = found.config["configurable"]["thread_id"]
        raise InvalidInputError(f"channel {channel!r} of thread {thread_id!r} holds no list of messages")
    return to_memwoven_messages(value, standard_if_not_json=True)


def _at(epoch_ms: object) -> datetime | None:
    return _clock.utc(epoch_ms) if isinstance(epoch_ms, int) else None


def _ids(ids: Sequence[str], what: str) -> builtins.list[str]:
    """Thread or run ids given as a sequence, as strings; a lone string is refused (as PostgresSaver does), not
    taken for its characters."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of ids, not a {type(ids).__name__}")
    return [str(i) for i in ids]


def _next_page(below: str | None, skip: int, page: Sequence[Item]) -> tuple[str | None, int]:
    """Where a newest-first listing goes on after `page` (the keys < `below` less the first `skip`): below its
    last key, by key rather than by offset, so that checkpoints written or deleted meanwhile shift nothing (an
    offset would return a checkpoint twice, or skip one). The page's last key itself stays in (another namespace
    of the prefix may hold it too): the bound is the next possible key (keys hold no NUL), less what was read."""
    last = page[-1].key
    ties = sum(1 for _ in itertools.takewhile(lambda item: item.key == last, reversed(page)))
    following = last + "\x01"
    if len(following.encode()) > MAX_ID_BYTES:  # no longer key can exist: go on by offset
        return below, skip + len(page)
    return following, (skip + len(page) if following == below else ties)


def _chunks(values: builtins.list[Any]) -> Iterator[builtins.list[Any]]:
    for start in range(0, len(values), _PAGE):
        yield values[start : start + _PAGE]


class _Floor(NamedTuple):
    """What `keep_last` leaves of a thread's namespace: the oldest checkpoint kept (its id), the kept checkpoints
    (newest first) and the older ones, to be dropped."""

    oldest: str
    kept: builtins.list[PlainItem]
    dropped: builtins.list[PlainItem]


class _Claim:
    """A deleter's hold on a thread's record, marked ``deleting`` with `token` at `version`, its lease renewed at
    `at` (epoch ms) until ``at + _LEASE_MS``, its expiry: past it, the claim is stale and anyone may take the
    deletion over (a deleter killed, or cancelled without marking it stale itself)."""

    __slots__ = ("at", "token", "version")

    def __init__(self) -> None:
        self.token, self.version, self.at = uuid.uuid4().hex, 0, 0


class MemwovenSaver(TTLSweeper, BaseCheckpointSaver[str], Runner):
    """A LangGraph checkpointer on a memwoven `ItemMemory`, for sync and async graphs alike.

    Retention:

    - ``keep_last=N`` keeps only the newest N checkpoints of each thread and checkpoint namespace (applied on every
      `put`): older ones, their writes, the channel values only they used and the subgraph calls started from them
      are deleted, so time travel reaches back N checkpoints. A thread using a `DeltaChannel` is pruned only
      when each of its N newest checkpoints holds every such channel's value (a snapshot): the others are rebuilt
      from their ancestors' writes, so until then it keeps its checkpoints (logged once).
    - ``ttl={"default_ttl": minutes}`` (LangGraph's `ThreadTTLConfig`) expires a whole *thread* that many minutes
      after its last `put` (sliding on write; reads do not extend it). Checkpoint items carry no TTL of their own
      (an old channel value still used by the newest checkpoint must live as long as the thread): each thread has
      a record, written with its checkpoints, holding its expiry. `sweep_ttl()` / `asweep_ttl()` delete the
      expired threads (``"strategy": "keep_latest"``: prune them to their newest checkpoint instead), at most
      ``sweep_limit`` a call; `start_ttl_sweeper()` runs it every ``sweep_interval_minutes``. Until swept, an
      expired thread reads as it was. Time travel works within a live thread (a fork is a `put`, so it extends
      the thread's life); an expired thread is gone with all its checkpoints. With both options, ``keep_last``
      bounds a thread's length and ``ttl`` its idle life. Savers sharing a namespace should share the ``ttl``.

    A sweep never leaves a thread half deleted by a concurrent `put`: it first marks the record ``deleting`` by
    compare-and-set on the version it found expired (a `put` since then changed the version: the thread is
    kept), deletes the thread's items, then leaves a ``deleted`` tombstone for one more ``default_ttl`` (a second
    pass then deletes stragglers, such as late `put_writes`, and the tombstone). The ``deleting`` claim is a
    lease (`_LEASE_MS`, renewed while deleting): a deletion that is cancelled or fails marks it stale, one whose
    process died leaves it to run out; the next `put`, `delete_thread` or sweep then finishes the deletion. A
    `put` writes the record compare-and-set too, on the version this saver last saw (or reads it first), so a
    `put` racing the sweep either lands first, and the sweep skips the thread, or fails with `ThreadDeletedError`,
    writing nothing: a thread being deleted accepts no `put`, and a deleted one (a tombstone, a record gone, or a
    new incarnation) accepts only a fresh start (a `put` without a parent checkpoint in the root namespace), never
    the continuation of a run that read it before. A run that pauses between reading and writing a thread for
    longer than ``default_ttl`` after the sweep cannot be told from a thread written before records existed. The
    compare-and-set costs a `put` nothing more while this saver is the thread's only writer; a conflict costs a
    read and a retry.
    """

    def __init__(
        self,
        items: ItemMemory,
        *,
        serde: SerializerProtocol | None = None,
        namespace: Sequence[str] = ("langgraph_checkpoints",),
        keep_last: int | None = None,
        ttl: ThreadTTLConfig | None = None,
        owns_items: bool = False,
    ) -> None:
        """A saver keeping its items in `items` under `namespace`; it closes `items` on `close()` only if
        `owns_items` (as `from_url` sets). `keep_last` and `ttl`: see the class."""
        if not isinstance(items, ItemMemory):
            raise InvalidInputError(f"items must be an ItemMemory, got {type(items).__name__}")
        if isinstance(namespace, str) or not namespace or not all(isinstance(x, str) and x for x in namespace):
            raise InvalidInputError(f"namespace must be a non-empty sequence of non-empty strings, got {namespace!r}")
        if WILDCARD in namespace:
            raise InvalidInputError(f'the saver namespace cannot hold the wildcard label "{WILDCARD}"')
        if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1):
            raise InvalidInputError(f"keep_last must be None or an int >= 1, got {keep_last!r:.120}")
        if not isinstance(ttl, (Mapping, type(None))) or set(ttl or {}) - set(ThreadTTLConfig.__annotations__):
            raise InvalidInputError(f"ttl must be a ThreadTTLConfig dict, got {ttl!r:.120}")
        config: dict[str, Any] = dict(ttl or {})
        strategy = config.get("strategy", "delete")
        if strategy not in ("delete", "keep_latest"):
            raise InvalidInputError(f'ttl strategy must be "delete" or "keep_latest", got {strategy!r:.120}')
        limit = config.get("sweep_limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise InvalidInputError(f"ttl sweep_limit must be None or an int >= 1, got {limit!r:.120}")
        default_ttl = minutes_to_seconds(config.get("default_ttl"), "default_ttl")
        interval = minutes_to_seconds(config.get("sweep_interval_minutes"), "sweep_interval_minutes")
        super().__init__(serde=serde)
        # small values skip the serde only when it is the default one: a serde of the user's (EncryptedSerializer,
        # their own types) sees every value
        self._inlines = serde is None or type(serde) is JsonPlusSerializer
        self.items = items
        self.namespace: Namespace = tuple(namespace)
        self.keep_last = keep_last
        self.ttl_config = ttl
        self._ttl_ms = None if default_ttl is None else round(default_ttl * 1000)
        self._strategy = strategy
        self._sweep_limit = limit or _DEFAULT_SWEEP_LIMIT
        self._sweep_seconds = None if default_ttl is None else interval or DEFAULT_SWEEP_MINUTES * 60
        self._records: LRUCache[str, tuple[int, str]] = LRUCache(4096)  # thread -> (record version, incarnation)
        # a subgraph call's namespace -> the root checkpoint it started from (`_drop_calls`)
        self._call_roots: LRUCache[Namespace, str] = LRUCache(4096)
        self._delta_threads: LRUCache[str, bool] = LRUCache(4096)  # threads `keep_last` found using a DeltaChannel
        # (namespace, checkpoint id) -> whether it is rebuilt from its ancestors (`_rebuilt_from_ancestors`)
        self._delta_marks: LRUCache[tuple[Namespace, str], bool] = LRUCache(16_384)
        self._used_blobs: LRUCache[tuple[Namespace, str], frozenset[str]] = LRUCache(16_384)  # `_blob_keys`
        self._sealed: LRUCache[tuple[Namespace, str], bool] = LRUCache(4096)  # checkpoints put without `_inline`
        self._floors: LRUCache[Namespace, tuple[str | None]] = LRUCache(4096)  # a namespace's last `keep_last` floor
        self._passes: LRUCache[Namespace, int] = LRUCache(4096)  # retention passes of a namespace (`_retain`)
        self._calling: LRUCache[str, bool] = LRUCache(4096)  # threads this saver put subgraph call checkpoints in
        self._owns_items = owns_items

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """A saver on `open_item_memory(url)` (``memory://``, ``file://``, ``sqlite:///...``, ``postgresql://``,
        ``mysql://``, ``redis://``, ``redis+cluster://``). `options` are the saver's (`serde`, `namespace`,
        `keep_last`, `ttl`); the others go to the item memory. The saver owns it: leaving ``with`` closes it."""
        own = {name: options.pop(name) for name in ("serde", "namespace", "keep_last", "ttl") if name in options}
        items = open_item_memory(url, **options)
        try:
            return cls(items, owns_items=True, **own)
        except BaseException:
            items.close()
            raise

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.items!r}, namespace={self.namespace!r}, keep_last={self.keep_last}, "
            f"ttl={self.ttl_config!r})"
        )

    # --- addressing and serialization ------------------------------------------------------------------------

    def _ns(self, kind: str, *labels: str) -> Namespace:
        if "" in labels:  # only a thread id can be empty here
            _refuse_empty_thread()
        return (*self.namespace, kind, *labels)

    @staticmethod
    def _where(config: RunnableConfig) -> tuple[str, str, str | None]:
        configurable = config.get("configurable") or {}
        if "thread_id" not in configurable:
            raise InvalidInputError("the config needs configurable.thread_id")
        checkpoint_ns = configurable.get("checkpoint_ns") or ""
        if configurable["thread_id"] == "":
            _refuse_empty_thread()
        return str(configurable["thread_id"]), str(checkpoint_ns), get_checkpoint_id(config)

    def _dump(self, value: Any) -> dict[str, str]:
        kind, data = self.serde.dumps_typed(value)
        return {"type": kind, "data": base64.b64encode(data).decode("ascii")}

    def _load(self, stored: Any) -> Any:
        """The value `_dump` stored (`CorruptMemoryError` if damaged; a type the serde refuses, such as pickle
        without `pickle_fallback`, raises the serde's error and is never loaded)."""
        try:
            kind, data = stored["type"], base64.b64decode(stored["data"], validate=True)
        except (KeyError, TypeError, ValueError, binascii.Error) as error:
            raise CorruptMemoryError(f"a stored checkpoint value is damaged: {error!r:.200}") from None
        if not isinstance(kind, str):
            raise CorruptMemoryError(f"a stored checkpoint value has no type: {kind!r:.120}")
        try:
            return self.serde.loads_typed((kind, data))
        except (ValueError, TypeError) as error:  # ormsgpack's and json's decode errors are ValueErrors
            raise CorruptMemoryError(f"a stored checkpoint value of type {kind!r} is damaged: {error!r:.200}") from None

    def _decoded(self, item: Item | PlainItem, field: Literal["checkpoint", "metadata"]) -> Any:
        """A checkpoint item's `field` decoded: a dict (a checkpoint's channel versions a dict too), else
        `CorruptMemoryError`."""
        found = self._load(item.value.get(field))
        versions = found.get("channel_versions", {}) if isinstance(found, dict) and field == "checkpoint" else {}
        if not isinstance(found, dict) or not isinstance(versions, dict):
            thread_id = self._place(item)[0]
            raise CorruptMemoryError(
                f"the {field} of stored checkpoint {item.key!r} of thread {thread_id!r} is damaged"
            )
        return found

    def _values_at(self, item: Item, versions: Mapping[str, Any]) -> Steps[tuple[dict[str, Any], bool]]:
        """The values of the channels in `versions` (channel -> version) as of the checkpoint `item`: those kept
        inside it (`_inline`), the others read from their blobs; a channel without a value is left out. And
        whether a blob was missing (`_tuples`)."""
        inline = item.value.get("values", {})
        if not isinstance(inline, Mapping):
            raise CorruptMemoryError(f"stored checkpoint {item.key!r} has damaged channel values")
        values = {channel: inline[channel] for channel in versions if channel in inline}
        stored = [(channel, version) for channel, version in versions.items() if channel not in inline]
        missing = False
        if stored:
            thread_id, checkpoint_ns = self._place(item)
            blob_ns = self._ns(_BLOBS, thread_id, _label(checkpoint_ns))
            blobs = yield Call(self.items, "get_many", ([(blob_ns, _blob_key(c, v)) for c, v in stored],))
            values.update(
                (channel, self._load(blob.value.get("value")))
                for (channel, _), blob in zip(stored, blobs)
                if blob is not None and "empty" not in blob.value
            )
            missing = None in blobs
        return values, missing

    def _writes_of(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> Steps[builtins.list[Any]]:
        """The stored pending writes of a checkpoint (their fields checked, values still serialized), in
        `writes_sort_key` order: one item per task, or (stored before that) one per write."""
        namespace = self._ns(_WRITES, thread_id, _label(checkpoint_ns), checkpoint_id)
        stored: builtins.list[Item] = yield Call(self.items, "list", (namespace,))
        found: dict[tuple[str, int], dict[str, Any]] = {}
        for item in sorted(stored, key=lambda item: "writes" in item.value):  # a task's item over older ones
            if "writes" in item.value:
                found.update(((w["task_id"], w["idx"]), w) for w in _task_writes(item))
            else:
                write: dict[str, Any] = dict(item.value)
                _check_write(item, write)
                found[write["task_id"], write["idx"]] = write
        return sorted(found.values(), key=lambda w: writes_sort_key(w["task_path"], w["task_id"], w["idx"]))

    def _config(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}
        }

    def _namespaces_under(self, prefix: Namespace, **options: Any) -> Steps[builtins.list[Namespace]]:
        """The stored namespaces starting with `prefix`, label by label. `ItemMemory.namespaces` takes a ``"*"``
        label as LangGraph's wildcard; a thread may be named ``"*"``, so what the wildcard also matched is left
        out here (a thread ``"*"`` never reaches another thread's items)."""
        spaces: builtins.list[Namespace] = yield Call(self.items, "namespaces", (), {"prefix": prefix, **options})
        return [space for space in spaces if space[: len(prefix)] == prefix]

    @staticmethod
    def _place(item: Item | PlainItem) -> tuple[str, str]:
        """The (thread id, checkpoint namespace) of a checkpoint item."""
        thread_id, label = item.namespace[-2:]
        return thread_id, label[1:]

    # --- reading ---------------------------------------------------------------------------------------------

    def _tuples(self, found: builtins.list[Item]) -> Steps[builtins.list[CheckpointTuple]]:
        """The checkpoint tuples of checkpoint items: their channel values and pending writes read alongside. A
        parent deleted by retention (`prune`, `keep_last`, `delete_for_runs`) is no parent: `parent_config` None,
        as LangGraph's PostgresSaver clears it when pruning."""
        parents = yield from self._stored_parents(found)
        tuples: builtins.list[CheckpointTuple] = []
        torn: builtins.list[int] = []  # the positions of checkpoints a blob of which was missing
        for item in found:
            thread_id, checkpoint_ns = self._place(item)
            value: dict[str, Any] = dict(item.value)
            checkpoint: Checkpoint = self._decoded(item, "checkpoint")
            versions = checkpoint.get("channel_versions", {})
            channel_values, missing = yield from self._values_at(item, versions)
            writes = yield from self._writes_of(thread_id, checkpoint_ns, item.key)
            if missing:
                torn.append(len(tuples))
            parent = value.get("parent")
            if parent is not None and not isinstance(parent, str):
                raise CorruptMemoryError(f"stored checkpoint {item.key!r} of thread {thread_id!r} is damaged")
            tuples.append(
                CheckpointTuple(
                    config=self._config(thread_id, checkpoint_ns, item.key),
                    checkpoint={**checkpoint, "channel_values": channel_values},
                    metadata=self._decoded(item, "metadata"),
                    parent_config=(
                        self._config(thread_id, checkpoint_ns, parent)
                        if parent and (item.namespace, parent) in parents
                        else None
                    ),
                    pending_writes=[(w["task_id"], w["channel"], self._load(w["value"])) for w in writes],
                )
            )
        if torn:  # deleted, blobs and writes with it, by a write's retention while read: it is no more
            still = yield Call(self.items, "get_many", ([(found[i].namespace, found[i].key) for i in torn],))
            gone = {i for i, item in zip(torn, still) if item is None}
            tuples = [checkpoint for i, checkpoint in enumerate(tuples) if i not in gone]
        return tuples

    def _stored_parents(self, found: builtins.list[Item]) -> Steps[set[tuple[Namespace, str]]]:
        """The (namespace, id) of the parents of the checkpoint items `found` that are stored: among `found`, or
        read (one `get_many` for the others)."""
        present = {(item.namespace, item.key) for item in found}
        named = {(item.namespace, parent) for item in found if isinstance(parent := item.value.get("parent"), str)}
        asked = sorted(named - present)
        if asked:
            stored: builtins.list[Item | None] = yield Call(self.items, "get_many", (asked,))
            present.update((item.namespace, item.key) for item in stored if item is not None)
        return present

    def _get_tuple(self, config: RunnableConfig) -> Steps[CheckpointTuple | None]:
        """The checkpoint `config` names (configurable.checkpoint_id), or the thread's newest; None if absent."""
        thread_id, checkpoint_ns, checkpoint_id = self._where(config)
        namespace = self._ns(_CHECKPOINTS, thread_id, _label(checkpoint_ns))
        while True:
            if checkpoint_id:
                item = yield Call(self.items, "get", (namespace, checkpoint_id))
                found = [] if item is None else [item]
            else:
                found = yield Call(self.items, "list", (namespace,), {"order": "desc", "limit": 1})
            tuples = yield from self._tuples(found)
            if tuples or not found or checkpoint_id:
                return tuples[0] if tuples else None
            # the newest checkpoint was deleted while it was read (retention after a newer one): read the newest

    get_tuple, aget_tuple = twins(_get_tuple)

    def _thread_messages(
        self, thread_id: str, *, checkpoint_ns: str = "", channel: str = "messages"
    ) -> Steps[builtins.list[Message]]:
        """The messages of a thread's latest checkpoint (its `channel`, a list of LangChain messages as
        `MessagesState` keeps it) as memwoven `Message`s, to show, export or keep them with memwoven's tools (a
        `ChatMemory`, the CLI, LlamaIndex's chat store); [] for an unknown thread. `InvalidInputError` if the
        channel holds something else."""
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}}
        found = yield from self._get_tuple(config)
        return [] if found is None else messages_of(found, channel)

    thread_messages, athread_messages = twins(_thread_messages)

    def _list_threads(self) -> Steps[builtins.list[ThreadInfo]]:
        """The threads holding checkpoints, by id: each with its last write and (with a `ttl`) expiry, from its
        record, or for a thread without one (written with no `ttl`) the time of its newest checkpoint."""
        depth = len(self.namespace) + 2
        spaces = yield from self._namespaces_under(self._ns(_CHECKPOINTS), max_depth=depth)
        ids = [space[-1] for space in spaces]
        records = (yield Call(self.items, "get_many", ([(self._ns(_THREADS), i) for i in ids],))) if ids else []
        threads = []
        for thread_id, record in zip(ids, records):
            value = {} if record is None or record.value.get("state") != _LIVE else record.value
            updated, expires = value.get("updated_at_ms"), value.get("expires_at_ms")
            if isinstance(updated, int):
                threads.append(ThreadInfo(thread_id, _clock.utc(updated), _at(expires)))
                continue
            newest = yield Call(self.items, "list", (self._ns(_CHECKPOINTS, thread_id),), {"order": "desc", "limit": 1})
            threads.append(ThreadInfo(thread_id, newest[0].updated_at if newest else None, None))
        return threads

    list_threads, alist_threads = twins(_list_threads)

    def _get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Steps[Mapping[str, DeltaChannelHistory]]:
        """For each of `channels`, the writes on the parent chain of the checkpoint `config` names, oldest first,
        back to the nearest ancestor storing a value of the channel (its `seed`), as the base class defines it; an
        ancestor costs one read of its checkpoint, its writes and only the asked channels' values."""
        if not channels:
            return {}
        thread_id, checkpoint_ns, checkpoint_id = self._where(config)
        label = _label(checkpoint_ns)
        namespace = self._ns(_CHECKPOINTS, thread_id, label)
        if checkpoint_id:
            target = yield Call(self.items, "get", (namespace, checkpoint_id))
        else:
            newest = yield Call(self.items, "list", (namespace,), {"order": "desc", "limit": 1})
            target = newest[0] if newest else None
        collected: dict[str, builtins.list[PendingWrite]] = {channel: [] for channel in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        parent = None if target is None else target.value.get("parent")
        while isinstance(parent, str) and remaining:
            item: Item | None = yield Call(self.items, "get", (namespace, parent))
            if item is None:
                break
            versions = self._decoded(item, "checkpoint").get("channel_versions", {})
            asked = {channel: versions[channel] for channel in remaining if channel in versions}
            found, _ = yield from self._values_at(item, asked)
            for write in reversed((yield from self._writes_of(thread_id, checkpoint_ns, item.key))):
                if write["channel"] in remaining:
                    collected[write["channel"]].append((write["task_id"], write["channel"], self._load(write["value"])))
            seeds.update(found)
            remaining -= found.keys()
            parent = item.value.get("parent")
        history: dict[str, DeltaChannelHistory] = {}
        for channel in channels:
            history[channel] = {"writes": collected[channel][::-1]}
            if channel in seeds:
                history[channel]["seed"] = seeds[channel]
        return history

    get_delta_channel_history, aget_delta_channel_history = twins(_get_delta_channel_history)

    def _list_steps(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Steps[builtins.list[CheckpointTuple]]:
        """The checkpoints matching `config` (a thread, optionally a namespace and a checkpoint id; None: all),
        whose metadata has every key-value pair of `filter`, older than `before`'s checkpoint, newest first, at
        most `limit`."""
        if limit is not None and limit <= 0:
            return []
        prefix = self._ns(_CHECKPOINTS)
        checkpoint_id = None
        if config is not None:
            thread_id, _, checkpoint_id = self._where(config)
            prefix = (*prefix, thread_id)
            checkpoint_ns = (config.get("configurable") or {}).get("checkpoint_ns")
            if checkpoint_ns is not None:
                prefix = (*prefix, _label(str(checkpoint_ns)))
        before_id = get_checkpoint_id(before) if before else None
        if checkpoint_id:
            if before_id is not None and checkpoint_id >= before_id:
                return []
            spaces = yield from self._namespaces_under(prefix)
            candidates: builtins.list[Item] = [
                item for item in (yield Call(self.items, "get_many", ([(ns, checkpoint_id) for ns in spaces],))) if item
            ]
        chosen: builtins.list[Item] = []
        below, skip = before_id, 0  # the next page: keys < below, less the first `skip` (read already)
        while True:
            if not checkpoint_id:
                page = limit if not filter and limit is not None else _PAGE
                options = {"order": "desc", "before": below, "limit": page, "offset": skip}
                candidates = yield Call(self.items, "list", (prefix,), options)
            for item in candidates:
                if filter:
                    metadata = self._decoded(item, "metadata")
                    if not all(metadata.get(key) == wanted for key, wanted in filter.items()):
                        continue
                chosen.append(item)
                if limit is not None and len(chosen) >= limit:
                    break
            if checkpoint_id or len(candidates) < _PAGE or (limit is not None and len(chosen) >= limit):
                break
            below, skip = _next_page(below, skip, candidates)
        return (yield from self._tuples(chosen))

    _list_all, _alist_all = twins(_list_steps)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints matching `config`, `filter`, `before` and `limit`, newest first (see `_list_steps`)."""
        yield from self._list_all(config, filter=filter, before=before, limit=limit)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async twin of `list`."""
        for found in await self._alist_all(config, filter=filter, before=before, limit=limit):
            yield found

    # --- writing ---------------------------------------------------------------------------------------------

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Steps[RunnableConfig]:
        """Store `checkpoint` (its channel values only for the channels in `new_versions`) and its metadata; the
        config naming it. With `keep_last`, older checkpoints of its thread and namespace beyond that are deleted."""
        thread_id, checkpoint_ns, parent_id = self._where(config)
        label = _label(checkpoint_ns)
        # the checkpoint's writes live one label deeper than it: an address too long for them is refused now, not
        # after the checkpoint is stored (every read of the thread would then fail)
        check_namespace(self._ns(_WRITES, thread_id, label, checkpoint["id"]), "the writes namespace of the checkpoint")
        saved = dict(checkpoint)
        values: dict[str, Any] = saved.pop("channel_values", {})  # type: ignore[assignment]
        inline = {channel: value for channel, value in values.items() if self._inlines and _inline(value)}
        full_metadata = get_checkpoint_metadata(config, metadata)
        run_id = full_metadata.get("run_id")
        stored_at = (self._ns(_CHECKPOINTS, thread_id, label), checkpoint["id"])
        carried = yield from self._carried(stored_at[0], parent_id, checkpoint, new_versions)
        writes = [
            ItemWrite(
                self._ns(_BLOBS, thread_id, label),
                _blob_key(channel, version),
                {"value": self._dump(values[channel])} if channel in values else {"empty": True},
            )
            for channel, version in {**carried, **new_versions}.items()
            if channel not in inline
        ]
        entry = {
            "checkpoint": self._dump(saved),
            "metadata": self._dump(full_metadata),
            "parent": parent_id,
            "run_id": run_id if isinstance(run_id, str) else None,
            "values": inline,
        }
        writes.append(ItemWrite(self._ns(_CHECKPOINTS, thread_id, label), checkpoint["id"], entry))
        if self.keep_last is not None:  # retention reads it back: known without decoding
            if ":" in checkpoint_ns:  # a subgraph call's: the root's retention drops it with its root checkpoint
                self._calling.put(thread_id, True)
            self._delta_marks.put(stored_at, bool(_DELTA_MARKS & full_metadata.keys()))
            versions = checkpoint["channel_versions"].items()
            self._used_blobs.put(stored_at, frozenset(_blob_key(channel, version) for channel, version in versions))
        if self._ttl_ms is None:
            yield Call(self.items, "put_many", (writes,))
        else:
            yield from self._put_with_record(thread_id, writes, continues=bool(parent_id) or bool(checkpoint_ns))
        if not self._inlines:
            self._sealed.put(stored_at, True)
        if self.keep_last is not None:
            yield from self._retain(thread_id, checkpoint_ns, self.keep_last)
        return self._config(thread_id, checkpoint_ns, checkpoint["id"])

    put, aput = twins(_put)

    def _carried(
        self, namespace: Namespace, parent_id: str | None, checkpoint: Checkpoint, new_versions: ChannelVersions
    ) -> Steps[dict[str, Any]]:
        """The channels (-> version) unchanged since the parent checkpoint that it keeps inside itself (`_inline`,
        put by a saver with the default serde), for a saver whose serde sees every value to write to blobs: no
        blob holds them, and its checkpoint keeps nothing inside. Nothing to read for a parent it put itself."""
        if self._inlines or not parent_id or self._sealed.get((namespace, parent_id)):
            return {}
        parent: Item | None = yield Call(self.items, "get", (namespace, parent_id))
        inline = {} if parent is None else parent.value.get("values", {})
        if not isinstance(inline, Mapping):
            raise CorruptMemoryError(f"stored checkpoint {parent_id!r} has damaged channel values")
        versions = checkpoint["channel_versions"]
        return {channel: versions[channel] for channel in inline if channel in versions and channel not in new_versions}

    def _put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> Steps[None]:
        """Store a task's writes for the checkpoint `config` names, in one item per task. Idempotent per (task,
        index): a regular write already stored is kept; a special channel's (`WRITES_IDX_MAP`: error, interrupt,
        ...) is replaced."""
        thread_id, checkpoint_ns, checkpoint_id = self._where(config)
        if not checkpoint_id:
            raise InvalidInputError("put_writes needs configurable.checkpoint_id")
        given: dict[int, dict[str, Any]] = {}
        for index, (channel, value) in enumerate(writes):
            slot = WRITES_IDX_MAP.get(channel, index)
            given[slot] = {"channel": channel, "idx": slot, "value": self._dump(value)}
        if not given:
            return
        namespace = self._ns(_WRITES, thread_id, _label(checkpoint_ns), checkpoint_id)
        key = _task_key(task_id)
        task = {"task_id": task_id, "task_path": task_path}
        written = True
        try:  # the common case, a task's first writes: one insert
            yield Call(
                self.items,
                "put",
                (namespace, key, {**task, "writes": builtins.list(given.values())}),
                {"expected_version": 0},
            )
        except ConcurrentModificationError:  # put again: merged into the stored ones, compare-and-set
            written = yield from self._merge_writes(namespace, key, task, given)
        if written and self.keep_last is not None:  # landed after retention dropped its checkpoint: delete it too
            known = self._floors.get(self._ns(_CHECKPOINTS, thread_id, _label(checkpoint_ns)))
            if known is None:
                floor = yield from self._retention_floor(thread_id, checkpoint_ns, self.keep_last, complete=False)
                known = (None if floor is None else floor.oldest,)
            oldest = known[0]
            if oldest is not None and checkpoint_id < oldest:
                yield Call(self.items, "delete_many", ([(namespace, key)],))

    def _merge_writes(
        self, namespace: Namespace, key: str, task: dict[str, Any], given: dict[int, dict[str, Any]]
    ) -> Steps[bool]:
        """Merge `given` (slot -> write) into a task's stored writes: a regular write stored is kept, a special one
        replaced; whether anything was written."""
        for _ in range(_ATTEMPTS):
            stored: Item | None = yield Call(self.items, "get", (namespace, key))
            kept = [] if stored is None else _task_writes(stored)
            merged = {w["idx"]: {name: w[name] for name in ("channel", "idx", "value")} for w in kept}
            changed = {slot: w for slot, w in given.items() if slot < 0 or slot not in merged}
            if stored is not None and all(merged.get(slot) == w for slot, w in changed.items()):
                return False
            value = {
                **(task if stored is None else stored.value),
                "writes": builtins.list({**merged, **changed}.values()),
            }
            try:
                yield Call(
                    self.items,
                    "put",
                    (namespace, key, value),
                    {"expected_version": 0 if stored is None else stored.version},
                )
            except ConcurrentModificationError:
                continue  # another writer of the same task came first: merge into theirs
            return True
        raise ConcurrentModificationError(f"the writes of {key!r} kept changing under {_ATTEMPTS} attempts")

    put_writes, aput_writes = twins(_put_writes)

    # --- deleting, pruning, copying --------------------------------------------------------------------------

    def _delete_under(self, prefixes: Sequence[Namespace], claim: tuple[str, _Claim] | None = None) -> Steps[bool]:
        """Delete every item whose namespace starts with one of `prefixes` (ItemMemory has no delete by prefix:
        list, then delete by key). With a (thread id, `claim`): stop, returning False, once the claim is lost."""
        for prefix in prefixes:
            while True:
                found: builtins.list[PlainItem] = yield Call(self.items, "list_plain", (prefix,), {"limit": _PAGE})
                # checked after listing: while the claim holds, nobody else could have taken the thread over
                # and written it anew, so what was listed is the old thread's
                if claim is not None and not (yield from self._renew(*claim)):
                    return False
                if found:
                    yield Call(self.items, "delete_many", ([(item.namespace, item.key) for item in found],))
                if len(found) < _PAGE:
                    break
        return True

    def _delete_thread_items(self, thread_id: str, claim: _Claim | None = None) -> Steps[bool]:
        self._forget_retention(thread_id)
        prefixes = [self._ns(kind, thread_id) for kind in _KINDS]
        return (yield from self._delete_under(prefixes, None if claim is None else (thread_id, claim)))

    def _forget_retention(self, thread_id: str) -> None:
        """Drop what `keep_last` remembers of a thread that is deleted or copied into: a floor it kept would make
        `put_writes` delete writes to the thread's new checkpoints older than it. (The floors of all threads go,
        as a cache keyed by namespace cannot drop one thread's: each is read again on its next use.)"""
        self._floors.clear()
        self._passes.clear()
        self._calling.drop(thread_id)

    def _delete_thread(self, thread_id: str) -> Steps[None]:
        """Delete every checkpoint, channel value and write of the thread. With a `ttl`, as the sweep does: the
        record marked ``deleting`` first (a concurrent `put` fails), then a ``deleted`` tombstone left behind."""
        thread_id = str(thread_id)
        if self._ttl_ms is None:
            yield from self._delete_thread_items(thread_id)
            yield Call(self.items, "delete_many", ([(self._ns(_THREADS), thread_id)],))
            return
        while True:
            stored: Item | None = yield Call(self.items, "get", (self._ns(_THREADS), thread_id))
            if stored is not None and stored.value.get("state") == _DELETING and not self._stale(stored):
                yield Sleep(_WAIT_SECONDS)  # another deleter holds it: done when it is
                continue
            try:
                yield from self._claim_and_delete(thread_id, 0 if stored is None else stored.version, drop=False)
            except ConcurrentModificationError:
                continue  # written meanwhile: look again
            return

    delete_thread, adelete_thread = twins(_delete_thread)

    # --- thread records, TTL ---------------------------------------------------------------------------------

    def _record(
        self, thread_id: str, state: str, expires_at_ms: int | None, incarnation: str = "", *, now: int
    ) -> dict[str, Any]:
        """A thread record written at `now` (epoch ms, the same reading its expiry was computed from)."""
        return {
            "thread_id": thread_id,
            "state": state,
            "incarnation": incarnation,
            "updated_at_ms": now,
            "expires_at_ms": expires_at_ms,
        }

    def _resolve(
        self, thread_id: str, stored: Item | None, known: tuple[int, str] | None, continues: bool
    ) -> tuple[int, str]:
        """The (expected version, incarnation) a `put` writes the thread's record with, given the stored record
        and what this saver last wrote (`known`); `ThreadDeletedError` if the put must not land (see the class)."""
        deleted = ThreadDeletedError(
            f"thread {thread_id!r} was deleted (expired, or delete_thread) after this run read it; start it again"
        )
        if stored is None:
            if continues and known is not None:
                raise deleted
            return 0, uuid.uuid4().hex  # a new thread, or one written before records existed
        state = stored.value.get("state")
        if state == _DELETING:
            raise ThreadDeletedError(f"thread {thread_id!r} is being deleted (TTL sweep or delete_thread); retry")
        if state == _DELETED:
            if continues:
                raise deleted
            return stored.version, uuid.uuid4().hex
        incarnation = str(stored.value.get("incarnation"))
        if continues and known is not None and incarnation != known[1]:
            raise deleted
        return stored.version, incarnation

    def _put_with_record(self, thread_id: str, writes: builtins.list[ItemWrite], *, continues: bool) -> Steps[None]:
        """`put_many` of `writes` and the thread's record (live, its expiry restarted), compare-and-set on the
        record's version: this saver's last (no read), else the stored one (read first when the put continues a
        thread); after a conflict, re-read and retry unless `_resolve` refuses."""
        if self._ttl_ms is None:
            raise RuntimeError("a thread record needs a ttl")  # the callers check
        namespace = self._ns(_THREADS)
        known = self._records.get(thread_id)
        if known is None and continues:
            stored = yield from self._stored_record(thread_id)
            expected, incarnation = self._resolve(thread_id, stored, None, continues)
        else:
            expected, incarnation = known or (0, uuid.uuid4().hex)
        for _ in range(_ATTEMPTS):
            now = _clock.wall_ms()
            value = self._record(thread_id, _LIVE, now + self._ttl_ms, incarnation, now=now)
            try:
                versions = yield Call(
                    self.items, "put_many", ([*writes, ItemWrite(namespace, thread_id, value, None, expected)],)
                )
            except ConcurrentModificationError:  # only the record is compare-and-set
                stored = yield from self._stored_record(thread_id)
                expected, incarnation = self._resolve(thread_id, stored, known, continues)
                continue
            self._records.put(thread_id, (versions[-1], incarnation))
            return
        raise ConcurrentModificationError(f"thread {thread_id!r}: its record kept changing over {_ATTEMPTS} attempts")

    def _stored_record(self, thread_id: str) -> Steps[Item | None]:
        """The thread's stored record, after finishing the deletion of a stale ``deleting`` claim (`_Claim`)."""
        while True:
            stored: Item | None = yield Call(self.items, "get", (self._ns(_THREADS), thread_id))
            if stored is None or stored.value.get("state") != _DELETING or not self._stale(stored):
                return stored
            with contextlib.suppress(ConcurrentModificationError):  # lost: taken over by another, look again
                yield from self._claim_and_delete(thread_id, stored.version, drop=False)

    @staticmethod
    def _stale(record: Item) -> bool:
        """Whether a ``deleting`` claim's lease has run out."""
        expires = record.value.get("expires_at_ms")
        return not isinstance(expires, int) or expires <= _clock.wall_ms()

    def _claim_record(self, thread_id: str, claim: _Claim, *, lease: bool = True) -> dict[str, Any]:
        """The record of `claim` (its lease from now, or, not `lease`, stale already)."""
        claim.at = _clock.wall_ms()
        record = self._record(thread_id, _DELETING, claim.at + _LEASE_MS if lease else claim.at, now=claim.at)
        return {**record, "claim": claim.token}

    def _claim_and_delete(self, thread_id: str, expected: int, *, drop: bool) -> Steps[None]:
        """Claim the thread's record ``deleting`` (compare-and-set on `expected`:
        `ConcurrentModificationError` if it changed), delete the thread's items, then leave a ``deleted``
        tombstone for one more TTL (or, `drop`, delete the record). A lost claim means another deleter took the
        thread over: it finishes. Cancelled or failing after the claim, the claim is marked stale (a killed
        process leaves it to its lease), for the next `put`, deletion or sweep to finish."""
        self._records.drop(thread_id)
        namespace, claim = self._ns(_THREADS), _Claim()
        try:
            claim.version = yield Call(
                self.items,
                "put",
                (namespace, thread_id, self._claim_record(thread_id, claim)),
                {"expected_version": expected},
            )
        except (ConcurrentModificationError, GeneratorExit):  # not claimed; or abandoned undriven: nothing can run
            raise
        except BaseException:  # interrupted: the claim may have landed all the same
            yield from self._release(thread_id, claim, expected)
            raise
        try:
            if not (yield from self._delete_thread_items(thread_id, claim)):
                return
            if drop:
                yield Call(self.items, "delete", (namespace, thread_id), {"expected_version": claim.version})
            else:
                now = _clock.wall_ms()
                tombstone = self._record(thread_id, _DELETED, now + (self._ttl_ms or 0), now=now)
                yield Call(self.items, "put", (namespace, thread_id, tombstone), {"expected_version": claim.version})
        except ConcurrentModificationError:
            pass  # the claim was taken over: the new holder finishes
        except GeneratorExit:
            raise
        except BaseException:
            yield from self._release(thread_id, claim, claim.version)
            raise

    def _renew(self, thread_id: str, claim: _Claim) -> Steps[bool]:
        """Whether `claim` still holds, its lease renewed once half of it has passed (compare-and-set)."""
        if _clock.wall_ms() - claim.at < _LEASE_MS // 2:
            return True
        try:
            claim.version = yield Call(
                self.items,
                "put",
                (self._ns(_THREADS), thread_id, self._claim_record(thread_id, claim)),
                {"expected_version": claim.version},
            )
        except ConcurrentModificationError:
            return False
        return True

    def _release(self, thread_id: str, claim: _Claim, version: int) -> Steps[None]:
        """Mark an interrupted deletion's claim stale, compare-and-set on `version` (the claim's last known one;
        for an interrupted claim, the version it was claiming, so that a claim still on its way fails), else on
        the stored one if it is still `claim`'s (a renewal landed). Best effort: failing, its lease runs out."""
        namespace = self._ns(_THREADS)
        stale = self._claim_record(thread_id, claim, lease=False)
        try:
            try:
                yield Call(self.items, "put", (namespace, thread_id, stale), {"expected_version": version})
            except ConcurrentModificationError:
                stored: Item | None = yield Call(self.items, "get", (namespace, thread_id))
                if stored is not None and stored.value.get("claim") == claim.token:
                    yield Call(self.items, "put", (namespace, thread_id, stale), {"expected_version": stored.version})
        except Exception:  # the interruption is what the caller hears of
            logger.debug("could not mark the deletion of thread %r stale", thread_id, exc_info=True)

    def _sweep_ttl(self) -> Steps[int]:
        """Delete (strategy ``"keep_latest"``: prune) the threads whose TTL has run out, at most `sweep_limit`,
        and the tombstones of deleted threads past theirs; returns how many threads were deleted or pruned."""
        if self._ttl_ms is None:
            return 0
        namespace, now = self._ns(_THREADS), _clock.wall_ms()
        expired: builtins.list[Item] = yield Call(
            self.items, "list", (namespace,), {"filter": {"expires_at_ms": {"$lte": now}}, "limit": self._sweep_limit}
        )
        swept = 0
        for record in expired:
            thread_id, state = record.key, record.value.get("state")
            try:
                if state == _LIVE and self._strategy == "keep_latest":
                    kept = {**record.value, "expires_at_ms": None}
                    yield Call(self.items, "put", (namespace, thread_id, kept), {"expected_version": record.version})
                else:
                    yield from self._claim_and_delete(thread_id, record.version, drop=state == _DELETED)
            except ConcurrentModificationError:
                continue  # written (or taken over by another sweep) since it was listed
            if state == _LIVE and self._strategy == "keep_latest":
                try:
                    yield from self._prune([thread_id])
                except NotImplementedError as error:  # a DeltaChannel thread: kept whole, not expired again
                    logger.warning("TTL sweep: %s; the thread is kept", error)
                    continue
            swept += state != _DELETED
        return swept

    sweep_ttl, asweep_ttl = twins(_sweep_ttl)

    def _drop_checkpoints(
        self,
        thread_id: str,
        checkpoint_ns: str,
        dropped: Sequence[Item | PlainItem],
        kept: Sequence[PlainItem] | None = None,
    ) -> Steps[None]:
        """Delete `dropped` (checkpoint items of one thread and namespace) with their writes and the channel values
        only they used: those no checkpoint in `kept` (the namespace's others; without it, listed here) uses. Only
        the dropped ones' values, never all those no checkpoint uses: a `put` under way may have written its new
        values and not yet its checkpoint (the file backend makes a batch visible namespace by namespace)."""
        if not dropped:
            return
        label = _label(checkpoint_ns)
        namespace = self._ns(_CHECKPOINTS, thread_id, label)
        if kept is None:
            listed: builtins.list[PlainItem] = yield Call(self.items, "list_plain", (namespace,))
            gone = {item.key for item in dropped}
            kept = [item for item in listed if item.key not in gone]
        doomed = [(item.namespace, item.key) for item in dropped]
        crowded = []  # writes namespaces holding a page or more: deleted page by page after
        for item in dropped:
            space = self._ns(_WRITES, thread_id, label, item.key)
            writes: builtins.list[PlainItem] = yield Call(self.items, "list_plain", (space,), {"limit": _PAGE})
            doomed += [(write.namespace, write.key) for write in writes]
            if len(writes) == _PAGE:
                crowded.append(space)
        used = set().union(*(self._blob_keys(namespace, item) for item in kept))
        unused = set().union(*(self._blob_keys(namespace, item) for item in dropped)) - used
        blobs = self._ns(_BLOBS, thread_id, label)
        doomed += [(blobs, key) for key in sorted(unused)]
        for chunk in _chunks(doomed):  # mostly one transaction: the checkpoints, their writes and values together
            yield Call(self.items, "delete_many", (chunk,))
        yield from self._delete_under(crowded)

    def _retention_floor(
        self, thread_id: str, checkpoint_ns: str, keep: int, *, complete: bool = True
    ) -> Steps[_Floor | None]:
        """What `keep` leaves of a thread's namespace (`_Floor`: the oldest kept checkpoint, the kept ones and the
        older ones, to be dropped: not `complete`, only those among the first few past the kept ones, for a caller
        wanting the floor alone). None if there are fewer than `keep`, or if one of the kept checkpoints is
        rebuilt from older ones: in a thread using a `DeltaChannel`, a checkpoint whose metadata counts updates
        since a snapshot reads the writes of its ancestors back to one (a fork's ancestors too, however old), so
        such a thread is pruned only when each kept checkpoint holds every such channel's value (logged once per
        thread)."""
        namespace = self._ns(_CHECKPOINTS, thread_id, _label(checkpoint_ns))
        newest: builtins.list[PlainItem] = yield Call(
            self.items, "list_plain", (namespace,), {"order": "desc", "limit": keep + _RETAIN_AHEAD}
        )
        if len(newest) < keep:
            return None
        kept, dropped = newest[:keep], newest[keep:]
        if any(self._rebuilt_from_ancestors(namespace, item) for item in kept):
            if self._delta_threads.get(thread_id) is None:
                self._delta_threads.put(thread_id, True)
                logger.warning(
                    "keep_last: thread %r uses a DeltaChannel; its checkpoints are kept while the newest %d "
                    "need older ones",
                    thread_id,
                    keep,
                )
            return None
        if complete and len(newest) == keep + _RETAIN_AHEAD:  # there may be older ones still
            older: builtins.list[PlainItem] = yield Call(
                self.items, "list_plain", (namespace,), {"order": "desc", "before": newest[-1].key}
            )
            dropped += older
        return _Floor(kept[-1].key, kept, dropped)

    def _rebuilt_from_ancestors(self, namespace: Namespace, item: PlainItem) -> bool:
        """Whether a stored checkpoint's DeltaChannel values are rebuilt from its ancestors' writes (its metadata
        counts updates since a snapshot); remembered per checkpoint, which never changes."""
        found = self._delta_marks.get((namespace, item.key))
        if found is None:
            found = bool(_DELTA_MARKS & self._decoded(item, "metadata").keys())
            self._delta_marks.put((namespace, item.key), found)
        return found

    def _blob_keys(self, namespace: Namespace, item: Item | PlainItem) -> frozenset[str]:
        """The keys of the channel values a stored checkpoint uses; remembered per checkpoint."""
        found = self._used_blobs.get((namespace, item.key))
        if found is None:
            versions = self._decoded(item, "checkpoint").get("channel_versions", {})
            found = frozenset(_blob_key(channel, version) for channel, version in versions.items())
            self._used_blobs.put((namespace, item.key), found)
        return found

    def _retain(self, thread_id: str, checkpoint_ns: str, keep: int, *, sweep: bool = False) -> Steps[None]:
        """Keep the newest `keep` checkpoints of a thread's namespace (see `_retention_floor`): drop the older
        ones, their writes and the channel values only they used, then (`sweep`, as `prune` does: always; else
        now and then) the writes of any older checkpoint. LangGraph stores writes asynchronously, so a write for a
        dropped checkpoint may land after it was dropped; such a write is deleted here, or by `_put_writes` when it
        lands after this pass. In the root namespace, the subgraph calls started from a dropped checkpoint go too
        (`_drop_calls`)."""
        label = _label(checkpoint_ns)
        namespace = self._ns(_CHECKPOINTS, thread_id, label)
        floor = yield from self._retention_floor(thread_id, checkpoint_ns, keep)
        if keep == self.keep_last:  # for the step's `put_writes`: an older floor only keeps more
            self._floors.put(namespace, (None if floor is None else floor.oldest,))
        if floor is None:
            return
        yield from self._drop_checkpoints(thread_id, checkpoint_ns, floor.dropped, floor.kept)
        # Leftovers: writes that landed after their checkpoint was dropped by another process (this one's own
        # `put_writes` deletes such a write itself), and subgraph calls another process started. Looked for on a
        # namespace's first pass and every `_HOUSEKEEPING` passes after (a prune's every time): invisible
        # meanwhile (no checkpoint reads them) but for the calls' own checkpoints.
        passes = self._passes.get(namespace) or 0
        self._passes.put(namespace, passes + 1)
        housekeeping = sweep or passes % _HOUSEKEEPING == 0
        if housekeeping:
            spaces = yield from self._namespaces_under(self._ns(_WRITES, thread_id, label))
            yield from self._delete_under([space for space in spaces if space[-1] < floor.oldest])
        if not checkpoint_ns and floor.dropped and (housekeeping or self._calling.get(thread_id)):
            yield from self._drop_calls(thread_id, floor.oldest)

    def _drop_calls(self, thread_id: str, oldest: str) -> Steps[None]:
        """Delete the namespaces of the subgraph calls (a checkpoint namespace with a task id after ":", written
        anew by each call, unlike a ``checkpointer=True`` subgraph's whose state outlives its calls) that started
        from a root checkpoint older than `oldest`, the oldest one kept, as PostgresSaver's prune does: each call
        would otherwise keep its own checkpoints for ever. A call started from a newer root checkpoint (one not yet
        saved: runs save in the background) is kept."""
        for space in (yield from self._namespaces_under(self._ns(_CHECKPOINTS, thread_id))):
            if ":" not in space[-1]:
                continue
            root = self._call_roots.get(space)
            if root is None:  # a call's root never changes: read once per call namespace (a call per step, N kept)
                newest: builtins.list[Item] = yield Call(self.items, "list", (space,), {"order": "desc", "limit": 1})
                parents = self._decoded(newest[0], "metadata").get("parents") if newest else None
                root = parents.get("") if isinstance(parents, Mapping) else None
                if not isinstance(root, str):
                    continue
                self._call_roots.put(space, root)
            if root < oldest:
                self._call_roots.drop(space)
                yield from self._delete_under([self._ns(kind, thread_id, space[-1]) for kind in _KINDS])

    def _refuse_delta_threads(self, thread_ids: Sequence[str]) -> Steps[None]:
        """`NotImplementedError` if one of the threads uses a `DeltaChannel` (its checkpoints' metadata counts the
        updates since a snapshot), as PostgresSaver refuses them: keeping only the newest checkpoint would cut the
        chain of writes such a channel is rebuilt from, and it would read back empty without an error."""
        delta = []
        for thread_id in thread_ids:
            found: builtins.list[Item] = yield Call(self.items, "list", (self._ns(_CHECKPOINTS, thread_id),))
            if any(_DELTA_MARKS & self._decoded(item, "metadata").keys() for item in found):
                delta.append(thread_id)
        if delta:
            raise NotImplementedError(f"keep_latest can't prune threads that use a DeltaChannel: {', '.join(delta)}")

    def _prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> Steps[None]:
        """Prune the threads: ``"keep_latest"`` keeps the newest checkpoint of each checkpoint namespace (with its
        writes and channel values), ``"delete"`` deletes the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(f'strategy must be "keep_latest" or "delete", got {strategy!r:.120}')
        wanted = _ids(thread_ids, "thread_ids")
        if strategy == "keep_latest":
            yield from self._refuse_delta_threads(wanted)
        for thread_id in wanted:
            if strategy == "delete":
                yield from self._delete_thread(thread_id)
                continue
            spaces = yield from self._namespaces_under(self._ns(_CHECKPOINTS, thread_id))
            for namespace in sorted(spaces, key=lambda space: space[-1] != "="):  # the root first: it drops calls
                yield from self._retain(thread_id, namespace[-1][1:], 1, sweep=True)

    prune, aprune = twins(_prune)

    def _delete_for_runs(self, run_ids: Sequence[str]) -> Steps[None]:
        """Delete the checkpoints whose metadata has one of `run_ids`, with their writes."""
        wanted = _ids(run_ids, "run_ids")
        if not wanted:
            return
        found: builtins.list[Item] = yield Call(
            self.items, "list", (self._ns(_CHECKPOINTS),), {"filter": {"run_id": {"$in": wanted}}}
        )
        groups: dict[tuple[str, str], builtins.list[Item]] = {}
        for item in found:
            groups.setdefault(self._place(item), []).append(item)
        for (thread_id, checkpoint_ns), dropped in groups.items():
            yield from self._drop_checkpoints(thread_id, checkpoint_ns, dropped)

    delete_for_runs, adelete_for_runs = twins(_delete_for_runs)

    def _copy_thread(self, source_thread_id: str, target_thread_id: str) -> Steps[None]:
        """Copy every checkpoint, channel value and write of one thread to another (same checkpoint ids)."""
        source, target = str(source_thread_id), str(target_thread_id)
        depth = len(self.namespace) + 1  # the thread label's position
        self._forget_retention(target)
        if self._ttl_ms is not None:  # the target starts a life of its own (refused while it is being deleted)
            yield from self._put_with_record(target, [], continues=False)
        for kind in (_BLOBS, _WRITES, _CHECKPOINTS):  # checkpoints last: a visible one has its values and writes
            found: builtins.list[Item] = yield Call(self.items, "list", (self._ns(kind, source),))
            copies = [
                ItemWrite((*item.namespace[:depth], target, *item.namespace[depth + 1 :]), item.key, item.value)
                for item in found
            ]
            for chunk in _chunks(copies):
                yield Call(self.items, "put_many", (chunk,))

    copy_thread, acopy_thread = twins(_copy_thread)

    # --- versions, lifecycle ---------------------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next channel version: a zero-padded counter and a random fraction (as LangGraph's own savers)."""
        current_v = 0 if current is None else int(str(current).split(".")[0])  # an int from another saver too
        return f"{current_v + 1:032}.{random.random():016}"  # noqa: S311 - a tie breaker, not a secret

    def _setup(self) -> Steps[None]:
        """Create the storage (tables) now rather than on first use; idempotent."""
        yield Call(self.items, "namespaces", (), {"prefix": self.namespace, "limit": 1})

    setup, asetup = twins(_setup)

    def _close(self) -> Steps[None]:
        """Close the item memory if this saver owns it (`from_url`)."""
        if self._owns_items:
            yield Call(self.items, "close")

    close, aclose = twins(_close)


def _refuse_empty_thread() -> NoReturn:
    """A thread is kept under its id, a namespace label, which cannot be empty (LangGraph's own savers take "")."""
    raise InvalidInputError("a thread_id cannot be empty")
