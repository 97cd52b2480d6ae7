"""`EncryptedItemMemory`: every value of another `ItemMemory` encrypted (see also `memwoven.encryption`).

What is stored
--------------
Each item is stored in `inner` as an item whose value is one entry, ``{"memwoven_encrypted": <token>}``. The
token (the one AES-GCM token format of the chat and vector wrappers, keys and rotation alike) encrypts the item's
value, and with `id_key` its namespace and key too; its associated data binds it to the address it is stored at,
so a token copied to another key or namespace does not decrypt. Versions, `created_at` / `updated_at`, `ttl` and
expiry, `expected_version` checks, `refresh_ttl`, batches (all or nothing) and `cleanup_expired` are `inner`'s,
passed through unchanged. A value that does not decrypt, or is not a token, raises `CorruptMemoryError` naming
the item; nothing is returned unverified.

Hashed addresses (`id_key`)
---------------------------
Without `id_key`, namespaces and keys are stored as given. With it, each namespace label is stored as an
HMAC-SHA256 (hex) of the label *and of the stored label before it*, and the key as an HMAC of the key and its
stored namespace. Hashing is deterministic, so `get`, `put` and `delete` go straight to the stored address; label
by label, so the stored namespaces under a prefix are the stored prefix's (a prefix is still a prefix, and still
a boundary); chained, so equal labels under different parents, and equal keys in different namespaces, do not
look equal in the store. The plaintext namespace and key travel inside the token and are checked against the
stored address on every read (a token moved to another address fails). A stored label is 64 characters, so a
namespace holds at most 1,024 labels here (the inner memory refuses longer ones, before writing anything).

`id_key` is a separate key, never rotated: another `id_key` addresses other items, and its items do not open
(`CorruptMemoryError`). One inner memory (table prefix, directory, key prefix) per pair of `key` and `id_key`: a
listing that meets an item of another wrapper, or one written in the clear, raises rather than skipping it.

What costs more
---------------
The store cannot filter ciphertext, nor order keys it only sees hashed, so the wrapper answers queries itself:

* `list` and `count` with a `filter`, and every `list` with `id_key`, read and decrypt every live item under the
  namespace prefix (one `list` of `inner`), then filter, range (`after` / `before` are plaintext keys), sort and
  page in process (`ItemQuery.answer`): O(items under the prefix) per call, whatever `limit` is. Without
  `id_key` and without a filter, `list` is `inner`'s own (its order is the plaintext order); without a filter,
  `count` is `inner`'s count in both modes.
* `namespaces` with `id_key` lists `inner`'s stored namespaces under the prefix's fixed labels (one call), then
  recovers each one's plaintext labels by decrypting one of its items (one `list(limit=1)` of `inner` per
  namespace), unless this object has already seen that namespace (the last `cache_size` are remembered: a stored
  namespace always names the same plaintext one). Wildcards, `suffix`, `max_depth` and paging then apply to the
  plaintext labels, as on any backend.

`reencrypt(namespace_prefix)` rewrites the items sealed with an older key under their current version (a
concurrent writer wins, and the item is retried); a rewrite is a write: a new version and `updated_at`, and an
item with a `ttl` has its expiry restarted.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

from memwoven._cache import LRUCache
from memwoven._steps import Call, Steps, twins
from memwoven.contracts import (
    CheckedWrite,
    ItemAddress,
    ItemMemory,
    ItemQuery,
    ItemWrite,
    Namespace,
    check_item_key,
    check_namespace,
)
from memwoven.encryption._keys import MARKER, IdHasher, KeyLike, Keyring, Keys, Wrapper, keyring
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError
from memwoven.models import Item, freeze_json

__all__ = ["EncryptedItemMemory"]

_CHUNK = 256  # items rewritten per `put_many` of `reencrypt`


class EncryptedItemMemory(Wrapper[ItemMemory], ItemMemory):
    """An `ItemMemory` that keeps every value of `inner` encrypted with AES-GCM, and with `id_key` its namespaces
    and keys hashed (see the module docs). Everything else (versions, expiry, atomic batches) is `inner`'s."""

    def __init__(self, inner: ItemMemory, *, key: Keys, id_key: KeyLike | None = None, cache_size: int = 4096) -> None:
        """Wrap `inner`; `key`: a key or keys oldest first; `id_key`: hash namespace labels and keys with this
        separate key; `cache_size`: how many hashed namespaces' plaintext labels to remember (`namespaces`)."""
        if not isinstance(inner, ItemMemory):
            raise TypeError(f"inner must be an ItemMemory, got {type(inner).__name__}")
        self.inner = inner
        self.keyring = keyring(key)
        self._hash = IdHasher(id_key) if id_key is not None else None
        self._names: LRUCache[Namespace, Namespace] = LRUCache(cache_size)

    # The sans-I/O core -----------------------------------------------------------------------------------------

    def _stored_prefix(self, namespace: Namespace) -> Namespace:
        """The labels `namespace` (or a prefix) is stored under: itself, or with `id_key` its chained hashes."""
        if self._hash is None:
            return namespace
        stored: list[str] = []
        parent = ""
        for label in namespace:
            parent = self._hash(f"item label\x00{parent}\x00{label}")
            stored.append(parent)
        return tuple(stored)

    def _stored(self, namespace: Namespace, key: str) -> ItemAddress:
        if self._hash is None:
            return namespace, key
        stored = self._stored_prefix(namespace)
        return stored, self._hash(f"item key\x00{stored[-1]}\x00{key}")

    def stored_address(self, namespace: Sequence[str], key: str) -> ItemAddress:
        """The (namespace, key) the item is stored under in `inner`: itself, or its keyed hashes with `id_key`."""
        return self._stored(*check_item_key(namespace, key))

    @staticmethod
    def _context(stored: ItemAddress) -> bytes:
        """The associated data binding a token to its stored address (JSON: no two addresses encode alike)."""
        return b"item\x00" + json.dumps([list(stored[0]), stored[1]]).encode("ascii")

    def _seal(
        self, namespace: Namespace, key: str, value: Mapping[str, Any], ttl: float | None, expected: int | None
    ) -> ItemWrite:
        """The write of `inner` that stores a (checked) write encrypted."""
        stored = self._stored(namespace, key)
        payload: dict[str, Any] = {"value": value}
        if self._hash:
            payload["namespace"], payload["key"] = list(namespace), key
            self._names.put(stored[0], namespace)
        plaintext = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        token = self.keyring.seal(plaintext, self._context(stored))
        return ItemWrite(*stored, {MARKER: token}, ttl, expected)

    def _open(self, stored: Item, address: ItemAddress | None = None) -> Item:
        """Decrypt an item of `inner` (`address`: the plaintext one asked for, when known, for errors)."""
        where = stored.namespace, stored.key
        name = f"{address[1]!r:.200} in {address[0]!r:.200}" if address else f"stored as {where!r:.300}"
        try:
            token = stored.value.get(MARKER) if len(stored.value) == 1 else None
            payload = json.loads(self.keyring.open(token, self._context(where)))
            if not isinstance(payload, dict) or not isinstance(payload.get("value"), dict):
                raise ValueError("does not hold an item")
            namespace, key = where
            if self._hash:
                labels, found = payload.get("namespace"), payload.get("key")
                if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
                    raise ValueError("does not hold its namespace")
                if not isinstance(found, str) or self._stored(tuple(labels), found) != where:
                    raise ValueError("holds another item's address")
                namespace, key = tuple(labels), found
                self._names.put(where[0], namespace)
            value = freeze_json(payload["value"])
        except ValueError as error:  # JSON, Unicode and freeze_json errors are ValueErrors
            raise CorruptMemoryError(f"item {name} {error}") from None
        # pydantic's unvalidated copy: the fields are checked above, `Item.model_copy` would check them again
        return BaseModel.model_copy(stored, update={"namespace": namespace, "key": key, "value": value})

    # The ItemMemory hooks ----------------------------------------------------------------------------------------

    @contextmanager
    def _naming(self, addresses: Sequence[ItemAddress]) -> Iterator[None]:
        """Re-raise the inner memory's error about one hashed address (a conflict, damage) naming the item."""
        try:
            yield
        except (ConcurrentModificationError, CorruptMemoryError) as error:
            if self._hash is None or len(addresses) != 1:
                raise
            namespace, key = addresses[0]
            raise type(error)(f"item {key!r:.200} in {namespace!r:.200} (stored hashed): {error}") from error

    def _read(self, addresses: Sequence[ItemAddress], refresh: bool) -> Steps[builtins.list[Item | None]]:
        stored = [self._stored(*address) for address in addresses]
        with self._naming(addresses):
            found: builtins.list[Item | None] = yield Call(self.inner, "get_many", (stored,), {"refresh_ttl": refresh})
        return [None if item is None else self._open(item, address) for item, address in zip(found, addresses)]

    def _write(self, writes: Sequence[CheckedWrite]) -> Steps[builtins.list[int]]:
        with self._naming([(write.namespace, write.key) for write in writes]):
            versions: builtins.list[int] = yield Call(self.inner, "put_many", ([self._seal(*w) for w in writes],))
        return versions

    def _delete_items(self, addresses: Sequence[ItemAddress], expected: int | None) -> Steps[int]:
        stored = [self._stored(*address) for address in addresses]
        with self._naming(addresses):
            if expected is not None:
                existed: bool = yield Call(self.inner, "delete", stored[0], {"expected_version": expected})
                return int(existed)
            deleted: int = yield Call(self.inner, "delete_many", (stored,))
        return deleted

    def _select(self, query: ItemQuery) -> Steps[builtins.list[Item]]:
        prefix = self._stored_prefix(query.prefix)
        if self._hash is None and query.predicate is None:  # plaintext keys, nothing to decrypt first: inner's query
            page = {"order": "desc" if query.descending else "asc", "limit": query.limit, "offset": query.offset}
            listed: builtins.list[Item] = yield Call(
                self.inner, "list", (prefix,), {"after": query.after, "before": query.before, **page}
            )
            return [self._open(item) for item in listed]
        # Hashed keys have no order, ciphertext no fields: read the prefix (the key range too, when keys are plain).
        window = {} if self._hash else {"after": query.after, "before": query.before}
        stored: builtins.list[Item] = yield Call(self.inner, "list", (prefix,), window)
        return query.answer(self._open(item) for item in stored)

    def _count_matching(self, query: ItemQuery) -> Steps[int]:
        if query.predicate is not None:
            matching: builtins.list[Item] = yield from self._select(query)
            return len(matching)
        counted: int = yield Call(self.inner, "count", (self._stored_prefix(query.prefix),))
        return counted

    def _stored_namespaces(self, prefix: Namespace) -> Steps[Iterable[Namespace]]:
        stored: builtins.list[Namespace] = yield Call(
            self.inner, "namespaces", (), {"prefix": self._stored_prefix(prefix)}
        )
        if self._hash is None:
            return stored
        found: builtins.list[Namespace] = []
        for namespace in stored:
            plain = self._names.get(namespace)
            if plain is None:
                sample: builtins.list[Item] = yield Call(self.inner, "list", (namespace,), {"limit": 1})
                if not sample:
                    continue  # emptied since it was listed
                plain = self._open(sample[0]).namespace[: len(namespace)]  # maybe an item of a deeper namespace
                self._names.put(namespace, plain)
            found.append(plain)
        return found

    def _expire(self) -> Steps[int]:
        removed: int = yield Call(self.inner, "cleanup_expired")
        return removed

    # Keys ------------------------------------------------------------------------------------------------------

    def _reencrypt(self, namespace_prefix: Sequence[str] = (), *, retries: int = 16) -> Steps[int]:
        """Rewrite the items under `namespace_prefix` sealed with an older key with the newest one (each under
        its current version: a concurrent write wins and the item is read again); returns how many."""
        prefix = self._stored_prefix(check_namespace(namespace_prefix, "namespace prefix", prefix=True))
        stored: builtins.list[Item] = yield Call(self.inner, "list", (prefix,))
        rewritten = 0
        for start in range(0, len(stored), _CHUNK):
            chunk: Sequence[Item | None] = stored[start : start + _CHUNK]
            for _ in range(retries):
                old = [(item, self._open(item)) for item in chunk if item is not None and self._is_old(item)]
                writes = [self._seal(i.namespace, i.key, i.value, i.ttl, s.version) for s, i in old]
                try:
                    if writes:
                        yield Call(self.inner, "put_many", (writes,))
                except ConcurrentModificationError:
                    chunk = yield Call(self.inner, "get_many", ([(s.namespace, s.key) for s, _ in old],))
                    continue
                rewritten += len(writes)
                break
            else:
                raise ConcurrentModificationError(f"items kept changing; gave up after {retries} tries")
        return rewritten

    reencrypt, areencrypt = twins(_reencrypt)

    def _is_old(self, stored: Item) -> bool:
        """Whether a stored item was sealed with a key other than the newest one."""
        token = stored.value.get(MARKER)
        return not isinstance(token, str) or Keyring.key_id(token) != self.keyring.current
