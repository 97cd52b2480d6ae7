"""`MemwovenStore`: LangGraph's `BaseStore` on memwoven's `ItemMemory` (items) and `VectorMemory` (semantic index).

Storage design
--------------
* **Items are ItemMemory items.** A LangGraph namespace is an ItemMemory namespace, under the store's own
  `namespace` prefix (default ``("langgraph_store",)``, beside the checkpointer's ``("langgraph_checkpoints",)``,
  so a store and a saver on one backend never see each other's items); keys, values, `created_at` / `updated_at`
  and expiry are the item's. Puts are one `put_many` (all or nothing), deletes one `delete_many`. A store reads
  and writes only under its prefix, label by label, so stores whose prefixes are siblings (``("t", "1")`` and
  ``("t", "12")``) share a backend without ever seeing each other's items or vectors. A store whose prefix begins
  another's (``("t",)``, or ``()``) sees, writes and deletes that store's items as its own namespaces
  (``("1", ...)``): nest stores for an administrative view only (``namespace=()`` sees the whole item memory, a
  saver's items included). `sweep_ttl` deletes every expired item in the backend, whichever store put it (they
  read as absent already), and the stale vectors under its prefix only.
* **Search without a query** is `ItemMemory.list` of the namespace prefix (a label boundary: ``("a",)`` never
  matches ``("ab",)``) with the filter, ordered by key, then namespace; `list_namespaces` is
  `ItemMemory.namespaces` (LangGraph's prefix / suffix / `"*"` / `max_depth` semantics).
* **Filters** are memwoven's filter language on the value (`memwoven.filters`): plain values test equality (lists
  and objects too) and ``$eq $ne $gt $gte $lt $lte`` (and memwoven's ``$in $nin $exists $contains $and $or
  $not``) compare; a dotted key reaches into nested objects (``{"user.level": 3}``). Comparisons with ±infinity
  and NaN, which no stored JSON value holds, are resolved here (``{"$lt": inf}``: any number; ``{"$eq": nan}``:
  nothing). Where LangGraph's own stores disagree, this follows `PostgresStore`: ``{"f": None}`` matches a stored
  null, not a missing field (``{"f": {"$exists": False}}`` does), and an object matches an equal object only
  (`InMemoryStore` matches a missing field and any object holding the given keys).
* **Semantic search** (`index=`): each text of an item (the index `fields`, LangGraph's path syntax) is one
  vector document, with ids ``<item>@<version>#0``, ``#1``, ...: a put writes its version's documents, then
  deletes those of the version it replaced (their number read from its document ``#0``), and a delete removes
  them. A hit is used only if it names the item's current version, so a vector of an older value, of a write
  that crashed half-way or of a deleted item is never a result. Vectors are written after the item (the version
  is the item's): a search in between does not find the item semantically yet, and two concurrent puts of one
  item may leave the loser's vectors behind (never a wrong hit); `sweep_ttl` deletes such stale vectors, and
  since ids name the version, never a vector a put is writing meanwhile. An item's score is its best
  document's: cosine similarity, inner product, or minus the Euclidean distance (`distance_type` ``"l2"``, exact
  through one extra dimension).
* **TTL** in minutes, as in LangGraph (the item's `ttl` is in seconds): expired items read as absent everywhere;
  `refresh_ttl` (default `TTLConfig.refresh_on_read`, else True) restarts the window of the items a `get` or a
  `search` returns; `sweep_ttl` frees the expired items (`cleanup_expired`) and their vectors;
  `start_ttl_sweeper` runs it every `sweep_interval_minutes` (5 by default, as LangGraph's stores).

In one `batch`, every operation is validated before anything is read or written (`InvalidInputError`), reads
see the state before the batch, and the puts are applied last, the last put of a key winning, as in LangGraph's
own stores. Every operation is written once as steps and run by memwoven's engine, through the contracts' sync
methods (`batch`) or their async twins (`abatch`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)
from typing_extensions import Self

from langchain_memwoven.embeddings import EmbedFnEmbeddings, embed_fn_from_embeddings
from langgraph.checkpoint.memwoven.ttl import DEFAULT_SWEEP_MINUTES, TTLSweeper, minutes_to_seconds
from memwoven import InvalidInputError, ItemMemory, VectorMemory
from memwoven import Item as StoredItem
from memwoven._steps import Call, Runner, Steps, twins
from memwoven.contracts import (
    WILDCARD,
    ItemWrite,
    Namespace,
    PlainItem,
    check_item_keys,
    check_item_value,
    check_namespace,
)
from memwoven.embed import EmbedFn
from memwoven.filters import compile_filter
from memwoven.models import thaw
from memwoven.urls import open_item_memory, open_vector_memory

__all__ = ["DEFAULT_NAMESPACE", "DistanceType", "MemwovenIndexConfig", "MemwovenStore", "StoreNamespaceError"]

DEFAULT_NAMESPACE: tuple[str, ...] = ("langgraph_store",)
"""The item namespace a store keeps its items under unless told otherwise (the checkpointer's is
``("langgraph_checkpoints",)``)."""

DistanceType = Literal["cosine", "inner_product", "l2"]
_METRICS: dict[str, Literal["cosine", "dot"]] = {"cosine": "cosine", "inner_product": "dot", "l2": "dot"}
_LARGEST = 1.7976931348623157e308  # the largest float: every stored number lies within ±_LARGEST
_NOTHING: dict[str, Any] = {"$in": []}  # a field test no value passes
_ALWAYS = object()  # a field test every value passes: no test
_SWEEP_CHUNK = 1000  # vector documents or items a sweep reads or deletes at once


class MemwovenIndexConfig(IndexConfig, total=False):
    """LangGraph's `IndexConfig` (`dims`, `embed`, `fields`) plus the options its SQL stores accept."""

    distance_type: DistanceType
    """How hits are scored: cosine similarity (default), inner product or minus the Euclidean distance."""
    text_fields: list[str] | None
    """`SqliteIndexConfig`'s name for `fields` (used when `fields` is not given)."""
    ann_index_config: Mapping[str, Any]
    """Accepted for `PostgresIndexConfig` compatibility and ignored: memwoven's vector search is exact."""


class StoreNamespaceError(InvalidNamespaceError, InvalidInputError):
    """A namespace LangGraph refuses (an empty label, a period, NUL): both LangGraph's and memwoven's error."""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _field_condition(condition: Any) -> Any:
    """One field's condition with comparisons against ±infinity / NaN resolved (no stored number is either);
    `_ALWAYS` if nothing is left to test."""
    if not isinstance(condition, Mapping) or not any(str(key).startswith("$") for key in condition):
        return condition
    kept: dict[str, Any] = {}
    for op, operand in condition.items():
        if not isinstance(operand, float) or math.isfinite(operand):
            kept[op] = operand
            continue
        if math.isnan(operand) or op in ("$eq", "$in"):
            if op in ("$ne", "$nin"):
                continue  # nothing equals NaN or infinity: always true
            return _NOTHING
        above = operand > 0  # +inf
        if op in ("$ne",):
            continue
        if (op in ("$lt", "$lte")) == above:  # x < inf, x > -inf: any number
            kept["$lte" if above else "$gte"] = _LARGEST if above else -_LARGEST
        else:  # x > inf, x < -inf: nothing
            return _NOTHING
    return kept or _ALWAYS  # an empty object would be a value to equal


def _filter(spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A LangGraph filter as a memwoven filter (the same language; infinities and NaN resolved)."""
    if not spec:
        return None
    if not isinstance(spec, Mapping):
        raise InvalidInputError(f"a filter must be a dict, got {type(spec).__name__}")
    converted: dict[str, Any] = {}
    for key, condition in spec.items():
        if key in ("$and", "$or") and isinstance(condition, list):
            converted[key] = [_filter(part) or {} for part in condition]
        elif key == "$not" and isinstance(condition, Mapping):
            converted[key] = _filter(condition) or {}
        elif (field := _field_condition(condition)) is not _ALWAYS:
            converted[key] = field
    compile_filter(converted)  # refuses a malformed filter before anything is read or written
    return converted


def _is_paths(value: object) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(path, str) for path in value)


def _check_ops(ops: Sequence[Op]) -> None:
    """LangGraph's namespace rules for ops given to `batch` directly (its methods check them too)."""
    for op in ops:
        if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
            raise InvalidInputError(f"unknown store operation {op!r:.200}")
        try:
            validate_op_namespace(op)
        except InvalidNamespaceError as error:
            raise StoreNamespaceError(str(error)) from None
        if isinstance(op, PutOp) and not op.namespace:
            raise StoreNamespaceError("Namespace cannot be empty.")
        if isinstance(op, PutOp) and op.index is not None and op.index is not False and not _is_paths(op.index):
            raise InvalidInputError(f"a put's index must be None, False or a list of paths, got {op.index!r:.80}")
        if isinstance(op, SearchOp):
            for name, value in (("limit", op.limit), ("offset", op.offset)):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise InvalidInputError(f"search {name} must be an int >= 0, got {value!r:.80}")
        if isinstance(op, ListNamespacesOp):
            kinds = [condition.match_type for condition in op.match_conditions or ()]
            if kinds.count("prefix") > 1 or kinds.count("suffix") > 1:
                raise InvalidInputError("list_namespaces takes at most one prefix and one suffix condition")


class MemwovenStore(TTLSweeper, BaseStore, Runner):
    """LangGraph's long-term memory store over any memwoven backend: `compile(store=...)`, `create_agent(store=...)`.

    ```python
    from langgraph.store.memwoven import MemwovenStore

    index = {"dims": 1536, "embed": "openai:text-embedding-3-small"}
    with MemwovenStore.from_url("sqlite:///memory.db", index=index) as store:
        store.put(("users", "u1", "memories"), "m1", {"text": "likes green tea"})
        store.search(("users", "u1"), query="what does the user drink?", limit=3)
    ```

    See the module's documentation for how items, vectors, filters and TTLs are stored.
    """

    supports_ttl = True

    def __init__(
        self,
        items: ItemMemory,
        *,
        vectors: VectorMemory | None = None,
        index: MemwovenIndexConfig | IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        namespace: Sequence[str] = DEFAULT_NAMESPACE,
        owns_memories: bool = False,
    ) -> None:
        """Keep items in `items` and, with `index` (LangGraph's `IndexConfig`), their vectors in `vectors`.

        `namespace` is put in front of every namespace (a store sees only what is under it; ``()``: everything).
        `ttl` is LangGraph's `TTLConfig` (minutes). With `owns_memories`, `close()` closes the memories.
        """
        if not isinstance(items, ItemMemory):
            raise InvalidInputError(f"items must be a memwoven ItemMemory, got {type(items).__name__}")
        self.items = items
        self.namespace: Namespace = check_namespace(namespace, "store namespace", prefix=True)
        if WILDCARD in self.namespace:
            raise InvalidInputError(f'the store namespace cannot hold the wildcard label "{WILDCARD}"')
        self.ttl_config = ttl
        self._default_ttl = minutes_to_seconds((ttl or {}).get("default_ttl"), "default_ttl")
        interval = minutes_to_seconds((ttl or {}).get("sweep_interval_minutes"), "sweep_interval_minutes")
        self._sweep_seconds = None if ttl is None else interval or DEFAULT_SWEEP_MINUTES * 60
        self._owns_memories = owns_memories
        self.vectors = vectors
        self.index_config: MemwovenIndexConfig | None = None
        self.embeddings: Embeddings | None = None
        if index is None:
            if vectors is not None:
                raise InvalidInputError("vectors need an index config (index={'dims': ..., 'embed': ...})")
            return
        if vectors is None:
            raise InvalidInputError("an index config needs a VectorMemory (vectors=) to keep the vectors in")
        self._setup_index(dict(index), vectors)  # type: ignore[arg-type]

    def _setup_index(self, config: MemwovenIndexConfig, vectors: VectorMemory) -> None:
        dims = config.get("dims")
        if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
            raise InvalidInputError(f"index dims must be a positive int, got {dims!r:.80}")
        distance = config.get("distance_type", "cosine")
        if distance not in _METRICS:
            raise InvalidInputError(f"distance_type must be one of {sorted(_METRICS)}, got {distance!r:.80}")
        if vectors.metric != _METRICS[distance]:
            raise InvalidInputError(
                f"distance_type {distance!r} needs a VectorMemory with metric {_METRICS[distance]!r}, "
                f"got {vectors.metric!r}"
            )
        stored_dims = dims + 1 if distance == "l2" else dims
        if vectors.dimension is not None and vectors.dimension != stored_dims:
            raise InvalidInputError(
                f"the VectorMemory holds {vectors.dimension}-d vectors; this index needs {stored_dims}"
            )
        embed = config.get("embed")
        try:
            self.embeddings = EmbedFnEmbeddings(embed) if isinstance(embed, EmbedFn) else ensure_embeddings(embed)
        except ValueError as error:  # LangGraph's: no embed, or a provider string without langchain installed
            raise InvalidInputError(str(error)) from None
        fields = config.get("fields") or config.get("text_fields") or ["$"]
        self.index_config = config
        self._distance: DistanceType = distance
        # Puts and searches embed through an `EmbedFn` alike: a provider's failure is an `EmbeddingError` and each
        # vector is checked (finite, `dims` long), from either (an `EmbedFn` given as `embed` serves both as it is).
        self._embed_fn = embed_fn_from_embeddings(self.embeddings, dimension=dims)
        self._query_fn = embed_fn_from_embeddings(self.embeddings, dimension=dims, queries=True)
        self._fields = [(path, path if path == "$" else tokenize_path(path)) for path in fields]

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        index: MemwovenIndexConfig | IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        namespace: Sequence[str] = DEFAULT_NAMESPACE,
        collection: str = "langgraph_store",
        **options: Any,
    ) -> Self:
        """A store at a memwoven URL: the items in `open_item_memory(url)` (``memory://``, ``sqlite:///file.db``,
        ``postgresql://...``, ``mysql://...``, and every other scheme with an item memory).

        With `index`, the vectors live at the same URL in `collection` (`open_vector_memory`). `options` go to both
        backends (e.g. `table_prefix=`, `schema=`; or in the URL's query string), but for the item memory's own
        (`indexed_fields=`: on SQLite, the filter fields to keep an index of). The store owns the memories:
        `close()` (or leaving ``with``) closes them.
        """
        if not isinstance(url, str):
            raise InvalidInputError(f"a store URL must be a string, got {type(url).__name__}")
        items_only = {name: options.pop(name) for name in ("indexed_fields",) if name in options}
        items = open_item_memory(url, **options, **items_only)
        vectors = None
        try:
            if index is not None:
                distance = str(index.get("distance_type", "cosine"))
                dims = index.get("dims")
                metric = _METRICS.get(distance, "cosine")
                dimension = dims + 1 if distance == "l2" and isinstance(dims, int) else dims
                vectors = open_vector_memory(url, collection=collection, dimension=dimension, metric=metric, **options)
            return cls(items, vectors=vectors, index=index, ttl=ttl, namespace=namespace, owns_memories=True)
        except BaseException:
            items.close()
            if vectors is not None:
                vectors.close()
            raise

    def __repr__(self) -> str:
        return f"MemwovenStore({self.items!r}, vectors={self.vectors!r}, namespace={self.namespace!r})"

    # --- batches ---------------------------------------------------------------------------------------------

    def _batch(self, ops: Iterable[Op]) -> Steps[list[Result]]:
        """Run LangGraph store operations: all validated first, the reads on the state before the batch, then the
        puts (the last put of a key winning)."""
        ops = list(ops)
        _check_ops(ops)
        filters: list[dict[str, Any] | None] = []
        puts: dict[tuple[Namespace, str], PutOp] = {}
        gets: list[tuple[int, GetOp]] = []
        refreshing = False
        for i, op in enumerate(ops):
            filters.append(_filter(op.filter) if isinstance(op, SearchOp) else None)
            if isinstance(op, PutOp):
                puts[(tuple(op.namespace), op.key)] = op
            elif isinstance(op, GetOp):
                gets.append((i, op))
            refreshing = refreshing or (isinstance(op, (GetOp, SearchOp)) and bool(op.refresh_ttl))
        writes = self._writes(list(puts.values()), check=refreshing) if puts else []
        results: list[Result] = [None] * len(ops)
        for refresh in (False, True) if gets else ():
            chosen = [(i, op) for i, op in gets if bool(op.refresh_ttl) == refresh]
            if chosen:
                keys = [(self._full(op.namespace), op.key) for _, op in chosen]
                found = yield Call(self.items, "get_many", (keys,), {"refresh_ttl": refresh})
                for (i, _), item in zip(chosen, found):
                    results[i] = None if item is None else self._item(item)
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp):
                if op.query and self.index_config is not None:
                    results[i] = yield from self._semantic_search(op, filters[i])
                else:
                    results[i] = yield from self._list(op, filters[i])
            elif isinstance(op, ListNamespacesOp):
                results[i] = yield from self._list_namespaces(op)
        if puts:
            yield from self._put(list(puts.values()), writes)
        return results

    batch, abatch = twins(_batch)

    # --- reads -----------------------------------------------------------------------------------------------

    def _full(self, namespace: Sequence[str]) -> Namespace:
        return (*self.namespace, *namespace)

    def _own(self, namespace: Namespace) -> Namespace:
        return namespace[len(self.namespace) :]

    def _item(self, item: StoredItem) -> Item:
        return Item(
            value=thaw(item.value),
            key=item.key,
            namespace=self._own(item.namespace),
            created_at=item.created_at,
            updated_at=item.updated_at,
        )

    def _search_item(self, item: StoredItem, score: float | None) -> SearchItem:
        return SearchItem(
            self._own(item.namespace), item.key, thaw(item.value), item.created_at, item.updated_at, score
        )

    def _refresh(self, op: SearchOp, page: Sequence[StoredItem | PlainItem]) -> Steps[None]:
        """Restart the TTL window of the items a search returned, if asked."""
        keys = [(item.namespace, item.key) for item in page if item.ttl is not None]
        if op.refresh_ttl and keys:
            yield Call(self.items, "get_many", (keys,), {"refresh_ttl": True})

    def _list(self, op: SearchOp, spec: dict[str, Any] | None) -> Steps[list[SearchItem]]:
        """Items under the namespace prefix whose value matches the filter, by key then namespace."""
        page: list[PlainItem] = yield Call(
            self.items,
            "list_plain",
            (self._full(op.namespace_prefix),),
            {"filter": spec, "limit": op.limit, "offset": op.offset},
        )
        yield from self._refresh(op, page)
        depth = len(self.namespace)
        return [SearchItem(i.namespace[depth:], i.key, i.value, i.created_at, i.updated_at) for i in page]

    def _semantic_search(self, op: SearchOp, spec: dict[str, Any] | None) -> Steps[list[SearchItem]]:
        """Items ranked by their best current vector; asks for more hits until the page is full or all are seen."""
        if self.vectors is None or op.query is None:
            raise RuntimeError("a semantic search needs the store's index and a query")  # checked by the caller
        if spec:
            # A filter no item matches needs no vectors: without this, every hit under the prefix is read to find
            # that out (seconds for thousands of items), where the item memory's filtered list takes milliseconds.
            matching = yield Call(self.items, "list", (self._full(op.namespace_prefix),), {"filter": spec, "limit": 1})
            if not matching:
                return []
        query, query_norm2 = yield from self._query_vector(op.query)
        predicate = compile_filter(spec) if spec else None
        wanted = op.offset + op.limit
        tag = _json(list(self._full(op.namespace_prefix)))
        known: dict[tuple[Namespace, str], StoredItem | None] = {}
        top_k = max(2 * wanted, 10)
        while True:
            hits = yield Call(
                self.vectors, "search", (query,), {"top_k": top_k, "filter": {"prefixes": {"$contains": tag}}}
            )
            addresses = []
            for hit in hits:
                address = _address(hit.document.metadata)
                if address is not None and address not in known:
                    known[address] = None
                    addresses.append(address)
            if addresses:
                found = yield Call(self.items, "get_many", (addresses,))
                known.update(zip(addresses, found))
            ranked: list[tuple[StoredItem, float]] = []
            seen: set[tuple[Namespace, str]] = set()
            for hit in hits:
                address = _address(hit.document.metadata)
                item = known.get(address) if address is not None else None
                if address is None or item is None or address in seen:
                    continue
                if hit.document.metadata.get("version") != item.version:
                    continue  # a vector of an older value (or of a write that did not finish)
                seen.add(address)
                if predicate is None or predicate(item.value):
                    ranked.append((item, self._score(hit.score, query_norm2)))
            if len(ranked) >= wanted or len(hits) < top_k:
                break
            top_k *= 4
        page = ranked[op.offset : wanted]
        yield from self._refresh(op, [item for item, _ in page])
        return [self._search_item(item, score) for item, score in page]

    def _query_vector(self, text: str) -> Steps[tuple[list[float], float]]:
        """The query's embedding as stored vectors are searched with it, and its squared norm."""
        raw: list[float] = yield Call(self._query_fn, "embed", (text,))
        vector = np.asarray(raw, dtype=np.float64)
        norm2 = float(vector @ vector)
        if self._distance == "l2":
            vector = np.append(vector, 1.0)
        return vector.tolist(), norm2

    def _score(self, score: float, query_norm2: float) -> float:
        if self._distance != "l2":
            return float(score)
        # stored [d, -|d|^2/2] . query [q, 1] = q.d - |d|^2/2, so |q - d|^2 = |q|^2 - 2 * score
        return -math.sqrt(max(query_norm2 - 2.0 * score, 0.0))

    def _list_namespaces(self, op: ListNamespacesOp) -> Steps[list[Namespace]]:
        prefix: tuple[str, ...] = ()
        suffix: tuple[str, ...] = ()
        for condition in op.match_conditions or ():
            if condition.match_type == "prefix":
                prefix = tuple(condition.path)
            else:
                suffix = tuple(condition.path)
        depth = len(self.namespace)
        if not (depth and suffix):
            found: list[Namespace] = yield Call(
                self.items,
                "namespaces",
                (),
                {
                    "prefix": (*self.namespace, *prefix),
                    "suffix": suffix or None,
                    "max_depth": None if op.max_depth is None else depth + op.max_depth,
                    "limit": op.limit,
                    "offset": op.offset,
                },
            )
            return [self._own(namespace) for namespace in found]
        # A suffix as long as the namespace could reach into the store's own labels: match it on our part only.
        everything: list[Namespace] = yield Call(
            self.items, "namespaces", (), {"prefix": (*self.namespace, *prefix), "suffix": suffix}
        )
        mine = {
            self._own(namespace)[: op.max_depth] for namespace in everything if len(namespace) - depth >= len(suffix)
        }
        return sorted(mine)[op.offset : op.offset + op.limit]

    # --- writes ----------------------------------------------------------------------------------------------

    def _writes(self, ops: list[PutOp], *, check: bool) -> list[ItemWrite]:
        """The item writes of the puts (deletes excluded). With `check` (the batch refreshes ttls as it reads,
        before `put_many` validates), their keys, values and ttls are validated here as `put_many` validates them:
        a bad put fails the batch before it refreshes a ttl or writes anything."""
        writes = []
        for op in ops:
            if op.value is None:
                continue
            if op.ttl is not None and not isinstance(op.ttl, (int, float)):
                raise InvalidInputError(f"ttl must be a number of minutes or None, got {op.ttl!r:.80}")
            ttl = minutes_to_seconds(op.ttl, "ttl")
            value = check_item_value(op.value) if check else op.value
            writes.append(ItemWrite(self._full(op.namespace), op.key, value, ttl))
        if check:
            check_item_keys([(self._full(op.namespace), op.key) for op in ops])
        return writes

    def _texts(self, op: PutOp) -> list[tuple[str, str]]:
        """The (path, text) pairs a put indexes: `op.index` if given, else the index fields; none for False."""
        if self.index_config is None or op.index is False or op.value is None:
            return []
        paths = self._fields if op.index is None else [(p, p if p == "$" else tokenize_path(p)) for p in op.index]
        pairs = []
        for path, tokens in paths:
            texts = get_text_at_path(op.value, tokens)
            pairs += [(path, texts[0])] if len(texts) == 1 else [(f"{path}.{i}", t) for i, t in enumerate(texts)]
        return pairs

    def _put(self, ops: list[PutOp], writes: list[ItemWrite]) -> Steps[None]:
        """Embed what is indexed, write the items and delete the deleted ones, then replace their vectors."""
        deletes = [(self._full(op.namespace), op.key) for op in ops if op.value is None]
        texts = {(self._full(op.namespace), op.key): self._texts(op) for op in ops if op.value is not None}
        embeddings: list[list[float]] = []
        contents = [text for pairs in texts.values() for _, text in pairs]
        if contents:
            embeddings = yield Call(self._embed_fn, "embed_many", (contents,))
        replaced: list[str] = []  # the ids of the vectors of the versions this put replaces or deletes
        if self.vectors is not None:
            addresses = [*texts, *deletes]
            before: list[StoredItem | None] = (yield Call(self.items, "get_many", (addresses,))) if addresses else []
            firsts = {
                _vector_id(address, item.version, 0): (address, item.version)
                for address, item in zip(addresses, before)
                if item is not None
            }
            for document in (yield Call(self.vectors, "get", (list(firsts),))) if firsts else []:
                count = document.metadata.get("count")
                address, version = firsts[document.id]
                replaced += [_vector_id(address, version, position) for position in range(_count(count))]
        versions: list[int] = (yield Call(self.items, "put_many", (writes,))) if writes else []
        if deletes:
            yield Call(self.items, "delete_many", (deletes,))
        if self.vectors is None:
            return
        documents: list[dict[str, Any]] = []
        vectors = iter(embeddings)
        for (address, pairs), version in zip(texts.items(), versions):
            namespace, key = address
            prefixes = [_json(list(namespace[:depth])) for depth in range(len(namespace) + 1)]
            metadata = {
                "ns": list(namespace),
                "key": key,
                "version": version,
                "count": len(pairs),
                "prefixes": prefixes,
            }
            for position, (path, text) in enumerate(pairs):
                embedding = self._stored_vector(next(vectors))
                documents.append(
                    {
                        "id": _vector_id(address, version, position),
                        "content": text,
                        "embedding": embedding,
                        "metadata": {**metadata, "path": path},
                    }
                )
        if documents:
            yield Call(self.vectors, "store", (documents,))
        if replaced:
            yield Call(self.vectors, "delete", (replaced,))

    def _stored_vector(self, embedding: list[float]) -> list[float]:
        if self._distance != "l2":
            return embedding
        vector = np.asarray(embedding, dtype=np.float64)
        return [*embedding, -float(vector @ vector) / 2.0]

    # --- TTL, setup and lifecycle ----------------------------------------------------------------------------

    def _sweep_ttl(self) -> Steps[int]:
        """Delete the expired items and the vectors no current item uses; returns how many items were deleted.

        The vectors are read before the items: a vector naming version v was written after its item reached v,
        so an item read later at another version has moved past v for good, and no write ever stores a vector
        under v's ids again (they name the version): deleting them cannot remove a newer put's vectors."""
        removed: int = yield Call(self.items, "cleanup_expired")
        if self.vectors is None:
            return removed
        ids: list[str] = yield Call(self.vectors, "ids")
        tag = _json(list(self.namespace))
        mine: list[tuple[str, tuple[Namespace, str], object]] = []  # (vector id, item address, version named)
        for start in range(0, len(ids), _SWEEP_CHUNK):
            for document in (yield Call(self.vectors, "get", (ids[start : start + _SWEEP_CHUNK],))):
                address = _address(document.metadata)
                prefixes = document.metadata.get("prefixes")
                if address is not None and isinstance(prefixes, (list, tuple)) and tag in prefixes:
                    mine.append((document.id, address, document.metadata.get("version")))
        addresses = sorted({address for _, address, _ in mine})
        current: dict[tuple[Namespace, str], int] = {}
        for start in range(0, len(addresses), _SWEEP_CHUNK):
            chunk = addresses[start : start + _SWEEP_CHUNK]
            found = yield Call(self.items, "get_many", (chunk,))
            current.update((address, item.version) for address, item in zip(chunk, found) if item is not None)
        stale = [document_id for document_id, address, version in mine if current.get(address) != version]
        for start in range(0, len(stale), _SWEEP_CHUNK):
            yield Call(self.vectors, "delete", (stale[start : start + _SWEEP_CHUNK],))
        return removed

    sweep_ttl, asweep_ttl = twins(_sweep_ttl)

    def _setup(self) -> Steps[None]:
        """Create the storage (tables) now rather than on first use; idempotent."""
        yield Call(self.items, "namespaces", (), {"limit": 1})
        if self.vectors is not None:
            yield Call(self.vectors, "count")

    setup, asetup = twins(_setup)

    def _close(self) -> Steps[None]:
        """Close the memories if this store owns them (`from_url`)."""
        if self._owns_memories:
            yield Call(self.items, "close")
            if self.vectors is not None:
                yield Call(self.vectors, "close")

    close, aclose = twins(_close)


def _vector_id(address: tuple[Namespace, str], version: int, position: int) -> str:
    """The id of the `position`-th vector document of an item's `version`: the item's JSON address, ``@version``,
    ``#position``. Ids name the version, so a version's vectors are never overwritten by a later put's."""
    namespace, key = address
    return f"{_json([*namespace, key])}@{version}#{position}"


def _count(count: object) -> int:
    """The number of vector documents document #0 says its version has (1 if it says nothing usable)."""
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def _address(metadata: Mapping[str, Any]) -> tuple[Namespace, str] | None:
    """The (namespace, key) a vector document belongs to, or None for a document that is not one of ours."""
    namespace, key = metadata.get("ns"), metadata.get("key")
    if not isinstance(namespace, (list, tuple)) or not isinstance(key, str) or not namespace:
        return None
    if not all(isinstance(label, str) for label in namespace):
        return None
    return tuple(namespace), key
