"""Encryption at rest: `EncryptedChatMemory` and `EncryptedVectorMemory` wrap any backend with AES-GCM.

Needs the `cryptography` package (`pip install "memwoven[encryption]"`). The wrappers encrypt on the way in and
decrypt on the way out, so the store only ever holds ciphertext, whatever backend it is::

    key = generate_key()  # keep it in a secret store, e.g. an environment variable
    chat = EncryptedChatMemory(open_chat_memory("sqlite:///memory.db"), key=key)
    notes = EncryptedVectorMemory(open_vector_memory("sqlite:///memory.db", collection="notes"), key=key)

What is encrypted
-----------------
* Chat: each message is stored as a message with the same role whose only field is the metadata entry
  ``{"memwoven_encrypted": <token>}``. The token encrypts the message's whole JSON: content and content parts,
  tool calls and their arguments, `tool_call_id`, `name`, `id`, `created_at`, `metadata`, `extras` (and the role
  again, checked on read, so a changed role is detected too).
* Vectors: each document is stored with the token as its content and empty metadata; the token encrypts its
  content and metadata, and its embedding when `encrypt_embeddings=True`.

What the store still sees: the role and position of every message and how many there are, the approximate
size of every value, versions and write times, the embeddings (unless `encrypt_embeddings`), and the session,
message and document ids unless `id_key` is given (then it sees their keyed hashes, HMAC-SHA256). Message ids stay
visible to the inner memory (as given, or hashed within their session) so that it keeps them unique and its
appends idempotent (CM10); an id changed in the store is detected on read.

Tokens and tampering
--------------------
A token is ``mwe2:<key id>:<base64url(nonce || ciphertext || tag)>``: AES-GCM with a fresh random 96-bit nonce per
value. The associated data binds it to its kind (chat or vector), its key id and the id it is stored under (the
session id, or the collection name and the document id), so a token copied to another session, document or
collection does not decrypt. Any value that does not decrypt, or is not a token at all, raises
`CorruptMemoryError` naming the session (or document); nothing is ever returned unverified. The binding is to
the session, not to a position in it: someone who can write to the store can still drop, repeat or reorder one
session's messages, or roll a session back to an older state, without being detected; they cannot read, forge,
alter or move one.

The collection is the wrapper's `collection`: by default the inner memory's collection name (its `collection`
attribute; for a `FileVectorMemory`, the file's name without `.npz`, as `open_vector_memory` names it). Only the
name counts, not the database, table prefix or server, so a collection copied under its own name (`memwoven
migrate`) still decrypts, and one renamed in storage needs `collection=<old name>`. An `InMemoryVectorMemory`
has no name: its tokens are bound to none unless `collection=` is given (nor are those of another backend
without a `collection` name, which logs a warning).

Keys and rotation
-----------------
`key` is one key or a list of keys, oldest first: values are written with the last one and read with whichever
one wrote them (its id is in the token). To rotate, append a new key; `reencrypt` rewrites old values with it,
after which the old key can be dropped. A key is 16, 24 or 32 random bytes (AES-128/192/256), raw or encoded
in URL-safe base64 as `generate_key()` returns it. A key id is a keyed hash of the key, so it reveals nothing.
Use a key for at most 2**32 values: nonces are random.

Hashed ids
----------
With `id_key` (a separate key, never rotated: changing it loses access to every session), session and document
ids are stored as their HMAC-SHA256, so the store does not reveal them. The original id is kept inside each
encrypted value, which is how `sessions()` and `ids()` still return the original ids — but they then read and
decrypt every session (its whole history) or every document, O(everything stored), instead of one listing.
A stored session whose id is shaped like a hash but does not open with this key and `id_key` (a plain session
named like one, another `id_key`'s or key's session, or damage) is left out of `sessions()` with a logged
warning rather than hiding every other session; `unlisted_sessions()` returns each such stored id with why.

Filters
-------
Metadata is encrypted, so a backend cannot filter on it: `search(..., filter=...)` filters after decryption.
The wrapper asks the backend for a growing page of the best hits until `top_k` of them match, so a selective
filter costs a scan of the ranked hits down to the last match, up to the whole collection. With
`encrypt_embeddings=True` the backend cannot rank either, and every search reads and decrypts the whole
collection and ranks it in process: meant for small collections only, and off by default.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple, Union

import numpy as np
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from memwoven._steps import Call, Steps, arun, run
from memwoven.backends.file import FileVectorMemory
from memwoven.backends.memory import InMemoryVectorMemory
from memwoven.contracts import (
    ChatMemory,
    DocumentsIn,
    Filter,
    History,
    MessagesIn,
    VectorMemory,
    check_id,
    check_ids,
)
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError, InvalidInputError
from memwoven.filters import compile_filter
from memwoven.history import encode_message, message_ids
from memwoven.models import Message, ScoredDocument, VectorDocument, coerce_messages, same_prefix
from memwoven.vector_index import VectorIndex, as_query, check_search_args

try:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
except ImportError as error:  # pragma: no cover - depends on the installation
    raise ImportError(
        'memwoven.encryption needs the cryptography package: pip install "memwoven[encryption]"'
    ) from error

__all__ = [
    "MARKER",
    "EncryptedChatMemory",
    "EncryptedVectorMemory",
    "KeyLike",
    "Keyring",
    "generate_key",
]

KeyLike = Union[bytes, str]
"""A key: 16, 24 or 32 raw bytes, or the same bytes in URL-safe base64 (what `generate_key` returns)."""
MARKER = "memwoven_encrypted"
"""The metadata key under which an encrypted message keeps its token."""
_VERSION = "mwe2"
_NONCE_BYTES = 12
_KEY_SIZES = (16, 24, 32)
_HASHED_ID = re.compile(r"[0-9a-f]{64}")
_PAGE = 16  # the first page of hits a filtered search asks for (at least 2 * top_k)
_CHUNK = 256  # documents read per `get` when a whole collection is decrypted

logger = logging.getLogger("memwoven.encryption")


def generate_key(size: int = 32) -> str:
    """A new random AES key of `size` bytes (32: AES-256), as URL-safe base64 text."""
    if size not in _KEY_SIZES:
        raise InvalidInputError(f"an AES key is 16, 24 or 32 bytes, not {size!r}")
    return base64.urlsafe_b64encode(os.urandom(size)).decode("ascii")


def _key_bytes(key: object, what: str = "key") -> bytes:
    if isinstance(key, str):
        try:
            key = base64.urlsafe_b64decode(key.strip().encode("ascii") + b"=" * (-len(key.strip()) % 4))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise InvalidInputError(f"a text {what} must be URL-safe base64 (see generate_key())") from None
    if not isinstance(key, bytes):
        raise InvalidInputError(f"a {what} must be bytes or base64 text, got {type(key).__name__}")
    if len(key) not in _KEY_SIZES:
        raise InvalidInputError(f"a {what} must be 16, 24 or 32 bytes long, got {len(key)}")
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text.encode("ascii") + b"=" * (-len(text) % 4))


class Keyring:
    """AES-GCM keys by id: `seal` encrypts with the newest key, `open` decrypts with the one a token names."""

    def __init__(self, keys: KeyLike | Sequence[KeyLike]) -> None:
        """`keys`: one key, or several oldest first (the last one encrypts)."""
        listed = list(keys) if isinstance(keys, Sequence) and not isinstance(keys, (bytes, str)) else [keys]
        if not listed:
            raise InvalidInputError("a keyring needs at least one key")
        self._ciphers: dict[str, AESGCM] = {}
        for raw in map(_key_bytes, listed):
            key_id = _b64(hmac.new(raw, b"memwoven key id", hashlib.sha256).digest()[:6])
            self._ciphers[key_id] = AESGCM(raw)
            self.current = key_id
        if len(self._ciphers) != len(listed):
            raise InvalidInputError("the same key is given twice")

    @property
    def key_ids(self) -> list[str]:
        """The ids of the keys, oldest first (safe to show: a key id is a keyed hash of its key)."""
        return list(self._ciphers)

    def __repr__(self) -> str:
        return f"Keyring(key_ids={self.key_ids})"

    def seal(self, plaintext: bytes, context: bytes) -> str:
        """Encrypt `plaintext` with the newest key, bound to `context`, as a token."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._ciphers[self.current].encrypt(nonce, plaintext, self._associated(self.current, context))
        return f"{_VERSION}:{self.current}:{_b64(nonce + sealed)}"

    def open(self, token: object, context: bytes) -> bytes:
        """Decrypt a token made by `seal` with the same `context`; raise `ValueError` saying why it cannot."""
        if not isinstance(token, str):
            raise ValueError("is not encrypted (no memwoven token)")
        version, _, rest = token.partition(":")
        key_id, _, body = rest.partition(":")
        if version != _VERSION or not body:
            raise ValueError("is not a memwoven token")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise ValueError(f"was encrypted with key {key_id!r}, which is not in the keyring {self.key_ids}")
        try:
            data = _unb64(body)
            return cipher.decrypt(data[:_NONCE_BYTES], data[_NONCE_BYTES:], self._associated(key_id, context))
        except (InvalidTag, ValueError, UnicodeEncodeError):
            raise ValueError(
                "fails authentication: altered, or moved from another session, document or collection"
            ) from None

    @staticmethod
    def key_id(token: str) -> str:
        """The id of the key a token was sealed with."""
        return token.split(":", 2)[1] if token.count(":") >= 2 else ""

    @staticmethod
    def _associated(key_id: str, context: bytes) -> bytes:
        return f"memwoven:{_VERSION}:{key_id}:".encode("ascii") + context


def _keyring(key: KeyLike | Sequence[KeyLike] | Keyring) -> Keyring:
    return key if isinstance(key, Keyring) else Keyring(key)


class _IdHasher:
    """Stored ids as HMAC-SHA256 hex digests of the original ids."""

    def __init__(self, id_key: KeyLike) -> None:
        self._key = _key_bytes(id_key, "id_key")

    def __call__(self, value: str) -> str:
        return hmac.new(self._key, value.encode("utf-8"), hashlib.sha256).hexdigest()


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} is not valid Unicode (it contains a lone surrogate)") from None


# Chat ----------------------------------------------------------------------------------------------------------


class _Undecryptable(CorruptMemoryError):
    """A stored message this wrapper cannot decrypt; the error already names the session by its own id."""


class _Sealed(NamedTuple):
    """A session as this object last read or wrote it: stored (encrypted) messages, plaintext ones, their JSON."""

    stored: tuple[Message, ...]
    plain: tuple[Message, ...]
    bodies: tuple[str, ...]


class _SealedCache:
    """A bounded, thread-safe LRU of stored session id -> `_Sealed`."""

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidInputError(f"cache_size must be a non-negative int, got {size!r}")
        self._size = size
        self._entries: OrderedDict[str, _Sealed] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> _Sealed | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: str, value: _Sealed) -> None:
        with self._lock:
            if not value.stored or self._size == 0:
                self._entries.pop(key, None)
                return
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


class EncryptedChatMemory(ChatMemory):
    """A `ChatMemory` that keeps every message of `inner` encrypted with AES-GCM (see the module docs).

    Versions, atomicity, isolation and concurrency are `inner`'s: the wrapper only transforms messages (`update`
    falls back to `inner`'s per-session write lock as `inner`'s own `update` does). For the last `cache_size`
    sessions it read or wrote, it remembers which ciphertext holds which message, so a save re-encrypts only the
    messages that changed and the backend's O(change) saves stay O(change) (a session it does not remember is
    re-encrypted whole: a fresh nonce per message, so equal messages never look equal).
    """

    def __init__(
        self,
        inner: ChatMemory,
        *,
        key: KeyLike | Sequence[KeyLike] | Keyring,
        id_key: KeyLike | None = None,
        cache_size: int = 256,
    ) -> None:
        """Wrap `inner`; `key`: a key or keys oldest first; `id_key`: hash session ids with this separate key."""
        if not isinstance(inner, ChatMemory):
            raise TypeError(f"inner must be a ChatMemory, got {type(inner).__name__}")
        self.inner = inner
        self.keyring = _keyring(key)
        self._hash = _IdHasher(id_key) if id_key is not None else None
        self._cache = _SealedCache(cache_size)

    @property
    def hashed_ids(self) -> bool:
        """True when session ids are stored as their keyed hashes."""
        return self._hash is not None

    def __repr__(self) -> str:
        hashed = ", hashed ids" if self._hash else ""
        return f"EncryptedChatMemory({self.inner!r}, key_ids={self.keyring.key_ids}{hashed})"

    # The sans-I/O core -----------------------------------------------------------------------------------------

    def stored_id(self, session_id: str) -> str:
        """The id the session is stored under in `inner`: itself, or its keyed hash with `id_key`."""
        session_id = check_id(session_id)
        return self._hash(session_id) if self._hash else session_id

    def _stored_message_id(self, stored_id: str, message_id: str | None) -> str | None:
        """The id a message is stored with, so that the inner memory keeps ids unique and appends idempotent
        (CM10): the id itself, or with `id_key` its keyed hash within the session (equal ids stay equal, and
        nothing else about them shows)."""
        if message_id is None or self._hash is None:
            return message_id
        return self._hash(f"message\x00{stored_id}\x00{message_id}")

    def _seal(self, session_id: str, stored_id: str, messages: MessagesIn, reuse: bool) -> _Sealed:
        """Validate and encrypt `messages`, reusing the ciphertext of unchanged messages at the same position."""
        cached = self._cache.get(stored_id) if reuse else None
        if cached is not None and isinstance(messages, (list, tuple)):
            same = same_prefix(messages, cached.plain)
            try:
                plain = list(cached.plain[:same]) + coerce_messages(messages[same:])
            except InvalidInputError:
                coerce_messages(messages)  # raises again, naming the message by its position in the whole list
                raise
        else:
            plain = coerce_messages(messages)
        message_ids(plain)  # unique (CM10), refused naming the id itself rather than its stored form
        context = b"chat\x00" + _utf8(stored_id, "session id")
        prefix = json.dumps(session_id).encode("utf-8") + b"\n" if self._hash else b""
        stored: list[Message] = []
        bodies: list[str] = []
        for position, message in enumerate(plain):
            if cached is not None and position < len(cached.plain) and message is cached.plain[position]:
                stored.append(cached.stored[position])
                bodies.append(cached.bodies[position])
                continue
            try:
                body = encode_message(message)
                encoded = body.encode("utf-8")
            except (PydanticSerializationError, UnicodeEncodeError) as error:
                raise InvalidInputError(f"message {position} cannot be encoded as UTF-8 JSON ({error})") from None
            if cached is not None and position < len(cached.bodies) and body == cached.bodies[position]:
                stored.append(cached.stored[position])
            else:
                token = self.keyring.seal(prefix + encoded, context)
                stored_message_id = self._stored_message_id(stored_id, message.id)
                stored.append(Message(role=message.role, id=stored_message_id, metadata={MARKER: token}))
            bodies.append(body)
        return _Sealed(tuple(stored), tuple(plain), tuple(bodies))

    def _open(
        self, session_id: str | None, stored_id: str, history: History, cache: bool = True
    ) -> tuple[str | None, History]:
        """Decrypt a stored history; returns the original session id found in it (hashed ids) and the history.

        Without `cache`, every message is decrypted (which is what finds the session id) and none is remembered.
        """
        name = session_id if session_id is not None else f"(stored as {stored_id})"
        cached = self._cache.get(stored_id) if cache else None
        context = b"chat\x00" + stored_id.encode("utf-8")
        plain: list[Message] = []
        bodies: list[str] = []
        for position, message in enumerate(history.messages):
            if cached is not None and position < len(cached.stored):
                known = cached.stored[position]
                if message is known or message == known:
                    plain.append(cached.plain[position])
                    bodies.append(cached.bodies[position])
                    continue
            try:
                data = self.keyring.open(message.metadata.get(MARKER), context)
                if self._hash:
                    line, _, data = data.partition(b"\n")
                    found = json.loads(line)
                    if not isinstance(found, str) or self._hash(found) != stored_id:
                        raise ValueError("holds another session's id")
                    if session_id is None:
                        session_id = name = found
                body = data.decode("utf-8")
                decoded = Message.model_validate_json(body)
                if decoded.role != message.role:
                    raise ValueError("has had its role changed")
                if message.id != self._stored_message_id(stored_id, decoded.id):
                    raise ValueError("has had its id changed")
            except (ValueError, ValidationError) as error:  # JSON and Unicode errors are ValueErrors
                raise _Undecryptable(f"session {name!r}: stored message {position} {error}") from None
            plain.append(decoded)
            bodies.append(body)
        if cache:
            self._cache.put(stored_id, _Sealed(tuple(history.messages), tuple(plain), tuple(bodies)))
        return session_id, History(plain, history.version)

    @contextmanager
    def _naming(self, session_id: str, stored_id: str) -> Iterator[None]:
        """Re-raise the inner memory's `CorruptMemoryError` about a hashed id with the session's own id."""
        try:
            yield
        except CorruptMemoryError as error:
            if stored_id == session_id or isinstance(error, _Undecryptable):
                raise
            raise CorruptMemoryError(f"session {session_id!r} (stored as {stored_id}): {error}") from error

    def _sealing(
        self, session_id: str, stored_id: str, change: Callable[[list[Message]], Any], written: list[_Sealed]
    ) -> Callable[[list[Message]], Any]:
        """`change` as the inner memory's locked update runs it: on the stored messages decrypted, its result
        encrypted (and appended to `written`). A coroutine's result is encrypted once awaited (async `update`)."""

        def seal(result: MessagesIn) -> list[Message]:
            written.append(self._seal(session_id, stored_id, result, reuse=True))
            return list(written[-1].stored)

        async def seal_awaited(result: Awaitable[MessagesIn]) -> list[Message]:
            return seal(await result)

        def sealing(stored: list[Message]) -> Any:
            result = change(self._open(session_id, stored_id, History(stored, 0))[1].messages)
            return seal_awaited(result) if isinstance(result, Awaitable) else seal(result)

        return sealing

    def _reencrypt_steps(self, session_id: str, retries: int) -> Steps[int]:
        stored_id = self.stored_id(session_id)
        for _ in range(retries):
            history = yield Call(self.inner, "load_versioned", (stored_id,))
            if not history.messages:
                return 0
            _, opened = self._open(session_id, stored_id, history)
            sealed = self._seal(session_id, stored_id, opened.messages, reuse=False)
            try:
                version: int = yield Call(
                    self.inner, "save", (stored_id, list(sealed.stored)), {"expected_version": history.version}
                )
            except ConcurrentModificationError:
                continue
            self._cache.put(stored_id, sealed)
            return version
        raise ConcurrentModificationError(f"session {session_id!r} kept changing; gave up after {retries} tries")

    def _listing_steps(self) -> Steps[tuple[list[str], dict[str, str]]]:
        """The ids of the stored sessions, and (with `id_key`) the hash-shaped stored ids that do not open as a
        session of this wrapper, each with why."""
        stored_ids: list[str] = yield Call(self.inner, "sessions")
        if not self._hash:
            return stored_ids, {}
        found: list[str] = []
        unlisted: dict[str, str] = {}
        for stored_id in stored_ids:
            if not _HASHED_ID.fullmatch(stored_id):
                continue  # not written by a wrapper that hashes ids
            try:
                history = yield Call(self.inner, "load_versioned", (stored_id,))
                session_id, _ = self._open(None, stored_id, History(history.messages[:1], history.version), False)
            except CorruptMemoryError as error:
                unlisted[stored_id] = str(error)
                continue
            if session_id is not None:  # None: emptied since it was listed
                found.append(session_id)
        return sorted(found), unlisted

    @staticmethod
    def _listed(listing: tuple[list[str], dict[str, str]]) -> list[str]:
        found, unlisted = listing
        if unlisted:
            logger.warning(
                "sessions(): %d stored sessions do not open with this key and id_key and are left out, stored as %s "
                "(see unlisted_sessions())",
                len(unlisted),
                ", ".join(sorted(unlisted)),
            )
        return found

    # ChatMemory ------------------------------------------------------------------------------------------------

    def load_versioned(self, session_id: str) -> History:
        """Load and decrypt the session's messages."""
        stored_id = self.stored_id(session_id)
        with self._naming(session_id, stored_id):
            history = self.inner.load_versioned(stored_id)
        return self._open(session_id, stored_id, history)[1]

    def save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        """Encrypt the changed messages and save the whole history through the inner memory."""
        stored_id = self.stored_id(session_id)
        sealed = self._seal(session_id, stored_id, messages, reuse=True)
        version = self.inner.save(stored_id, list(sealed.stored), expected_version=expected_version)
        self._cache.put(stored_id, sealed)
        return version

    def append(self, session_id: str, messages: MessagesIn) -> int:
        """Encrypt `messages` and append them through the inner memory."""
        stored_id = self.stored_id(session_id)
        return self.inner.append(stored_id, list(self._seal(session_id, stored_id, messages, reuse=False).stored))

    def sessions(self) -> list[str]:
        """The stored sessions' ids, sorted.

        With `id_key` they are recovered by decrypting every session (slow, see the module docs), and a stored
        session whose id cannot be recovered is left out with a logged warning: `unlisted_sessions()` names it.
        """
        return self._listed(run(self._listing_steps()))

    def unlisted_sessions(self) -> dict[str, str]:
        """With `id_key`: the stored sessions `sessions()` leaves out, stored id -> why (see the module docs)."""
        return run(self._listing_steps())[1]

    def clear(self, session_id: str) -> None:
        """Remove the session."""
        self.inner.clear(self.stored_id(session_id))

    def _has_update_lock(self) -> bool:
        """`update` takes the inner memory's per-session write lock, when it has one."""
        return self.inner._has_update_lock()

    def _update_locked(self, session_id: str, change: Callable[[list[Message]], MessagesIn]) -> int:
        """Run `change` on the decrypted session under the inner memory's write lock, and write it encrypted."""
        stored_id = self.stored_id(session_id)
        written: list[_Sealed] = []
        with self._naming(session_id, stored_id):
            version = self.inner._update_locked(stored_id, self._sealing(session_id, stored_id, change, written))
        self._cache.put(stored_id, written[-1])
        return version

    def reencrypt(self, session_id: str, *, retries: int = 16) -> int:
        """Rewrite the whole session with the newest key (under its optimistic version); returns the new version."""
        return run(self._reencrypt_steps(session_id, retries))

    def close(self) -> None:
        """Close the inner memory."""
        self.inner.close()

    async def aload_versioned(self, session_id: str) -> History:
        """Async twin of `load_versioned`."""
        stored_id = self.stored_id(session_id)
        with self._naming(session_id, stored_id):
            history = await self.inner.aload_versioned(stored_id)
        return self._open(session_id, stored_id, history)[1]

    async def asave(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        """Async twin of `save`."""
        stored_id = self.stored_id(session_id)
        sealed = self._seal(session_id, stored_id, messages, reuse=True)
        version = await self.inner.asave(stored_id, list(sealed.stored), expected_version=expected_version)
        self._cache.put(stored_id, sealed)
        return version

    async def aappend(self, session_id: str, messages: MessagesIn) -> int:
        """Async twin of `append`."""
        stored_id = self.stored_id(session_id)
        sealed = self._seal(session_id, stored_id, messages, reuse=False)
        return await self.inner.aappend(stored_id, list(sealed.stored))

    async def asessions(self) -> list[str]:
        """Async twin of `sessions`."""
        return self._listed(await arun(self._listing_steps()))

    async def aunlisted_sessions(self) -> dict[str, str]:
        """Async twin of `unlisted_sessions`."""
        return (await arun(self._listing_steps()))[1]

    async def aclear(self, session_id: str) -> None:
        """Async twin of `clear`."""
        await self.inner.aclear(self.stored_id(session_id))

    async def _aupdate_locked(
        self, session_id: str, change: Callable[[list[Message]], MessagesIn | Awaitable[MessagesIn]]
    ) -> int:
        """Async twin of `_update_locked`; `change` may be a coroutine function."""
        stored_id = self.stored_id(session_id)
        written: list[_Sealed] = []
        with self._naming(session_id, stored_id):
            version = await self.inner._aupdate_locked(stored_id, self._sealing(session_id, stored_id, change, written))
        self._cache.put(stored_id, written[-1])
        return version

    async def areencrypt(self, session_id: str, *, retries: int = 16) -> int:
        """Async twin of `reencrypt`."""
        return await arun(self._reencrypt_steps(session_id, retries))

    async def aclose(self) -> None:
        """Async twin of `close`."""
        await self.inner.aclose()


# Vectors -------------------------------------------------------------------------------------------------------


def _collection_name(inner: VectorMemory) -> str | None:
    """The name of the collection `inner` holds, or None if it has none."""
    name = getattr(inner, "collection", None)
    if isinstance(name, str):
        return name
    if isinstance(inner, FileVectorMemory):
        return inner.path.stem  # the name `open_vector_memory` and `vector_collections` give a file collection
    if not isinstance(inner, InMemoryVectorMemory):
        logger.warning("%r has no collection name: pass collection= to bind its tokens to one", inner)
    return None


class EncryptedVectorMemory(VectorMemory):
    """A `VectorMemory` that keeps the content and metadata of `inner`'s documents encrypted (see the module docs).

    Embeddings stay in the clear by default, so that the backend can rank; with `encrypt_embeddings=True` the
    backend stores a constant unit vector instead and every search decrypts and ranks the whole collection here.
    Tokens are bound to `collection`, by default the name of `inner`'s collection (see the module docs).
    """

    def __init__(
        self,
        inner: VectorMemory,
        *,
        key: KeyLike | Sequence[KeyLike] | Keyring,
        id_key: KeyLike | None = None,
        encrypt_embeddings: bool = False,
        collection: str | None = None,
    ) -> None:
        """Wrap `inner`; `key`: a key or keys oldest first; `id_key`: hash document ids with this separate key;
        `collection`: the name tokens are bound to, instead of `inner`'s own."""
        if not isinstance(inner, VectorMemory):
            raise TypeError(f"inner must be a VectorMemory, got {type(inner).__name__}")
        self.inner = inner
        self.metric = inner.metric
        self.keyring = _keyring(key)
        self.encrypt_embeddings = bool(encrypt_embeddings)
        self._hash = _IdHasher(id_key) if id_key is not None else None
        self.collection = _collection_name(inner) if collection is None else collection
        name = "" if self.collection is None else check_id(self.collection, "collection name")
        # Neither a collection name nor an id holds a NUL, so the context names exactly one (collection, id) pair.
        self._context = b"vector\x00" + name.encode("utf-8") + b"\x00"

    @property
    def hashed_ids(self) -> bool:
        """True when document ids are stored as their keyed hashes."""
        return self._hash is not None

    def __repr__(self) -> str:
        options = (", hashed ids" if self._hash else "") + (", encrypted embeddings" if self.encrypt_embeddings else "")
        return (
            f"EncryptedVectorMemory({self.inner!r}, collection={self.collection!r}, key_ids={self.keyring.key_ids}"
            f"{options})"
        )

    @property
    def dimension(self) -> int | None:
        """The inner memory's dimension (also with encrypted embeddings: the stand-in vectors keep it)."""
        return self.inner.dimension

    # The sans-I/O core -----------------------------------------------------------------------------------------

    def stored_id(self, document_id: str) -> str:
        """The id the document is stored under in `inner`: itself, or its keyed hash with `id_key`."""
        document_id = check_id(document_id, "document id")
        return self._hash(document_id) if self._hash else document_id

    def _seal(self, documents: DocumentsIn) -> list[VectorDocument]:
        """Validate `documents` as the built-in backends do, and encrypt them."""
        batch = VectorIndex(self.inner.dimension, self.metric).prepare(documents)
        sealed: list[VectorDocument] = []
        for doc_id, content, metadata, vector in zip(batch.ids, batch.contents, batch.metadata, batch.vectors):
            payload: dict[str, Any] = {"content": content, "metadata": metadata}
            if self._hash:
                payload["id"] = doc_id
            embedding = vector.tolist()
            if self.encrypt_embeddings:
                payload["embedding"] = _b64(vector.astype("<f4").tobytes())
                embedding = [1.0] + [0.0] * (len(embedding) - 1)
            stored_id = self.stored_id(doc_id)
            plaintext = json.dumps(payload, separators=(",", ":")).encode("ascii")  # ASCII keeps lone surrogates
            token = self.keyring.seal(plaintext, self._context + stored_id.encode("utf-8"))
            sealed.append(VectorDocument(id=stored_id, content=token, embedding=embedding))
        return sealed

    def _open(self, stored: VectorDocument, name: str | None = None) -> VectorDocument:
        """Decrypt a stored document (`name`: its original id when known, for errors)."""
        if name is None:
            name = f"(stored as {stored.id})" if self._hash else stored.id
        try:
            payload = json.loads(self.keyring.open(stored.content, self._context + stored.id.encode("utf-8")))
            if not isinstance(payload, dict) or not {"content", "metadata"} <= payload.keys():
                raise ValueError("does not hold a document")
            if ("embedding" in payload) != self.encrypt_embeddings:
                held = "an encrypted embedding" if "embedding" in payload else "no encrypted embedding"
                raise ValueError(
                    f"holds {held}: open the collection with encrypt_embeddings={not self.encrypt_embeddings}"
                )
            if self._hash:
                found = payload.get("id")
                if not isinstance(found, str) or self._hash(found) != stored.id:
                    raise ValueError("holds another document's id")
                name = found
            embedding: Any = stored.embedding
            if self.encrypt_embeddings:
                embedding = np.frombuffer(_unb64(payload["embedding"]), dtype="<f4").tolist()
            return VectorDocument(
                id=name, content=payload["content"], embedding=embedding, metadata=payload["metadata"]
            )
        except (ValueError, TypeError, ValidationError) as error:
            raise CorruptMemoryError(f"document {name!r} {error}") from None

    def _all_steps(self) -> Steps[list[VectorDocument]]:
        """Read and decrypt the whole collection."""
        stored_ids: list[str] = yield Call(self.inner, "ids")
        documents: list[VectorDocument] = []
        for start in range(0, len(stored_ids), _CHUNK):
            chunk: list[VectorDocument] = yield Call(self.inner, "get", (stored_ids[start : start + _CHUNK],))
            documents += map(self._open, chunk)
        return documents

    def _search_steps(
        self, embedding: Sequence[float], top_k: int, threshold: float | None, filter: Filter | None
    ) -> Steps[list[ScoredDocument]]:
        check_search_args(top_k, threshold)
        predicate = compile_filter(filter) if filter is not None else None
        query = as_query(embedding, self.inner.dimension, self.metric).tolist()
        if self.encrypt_embeddings:
            index = VectorIndex(self.inner.dimension, self.metric)
            index.upsert(index.prepare((yield from self._all_steps())))
            return index.search(query, top_k=top_k, threshold=threshold, filter=filter)
        if predicate is None and not self._hash:  # the backend's ranking and tie-break are final
            hits = yield Call(self.inner, "search", (query,), {"top_k": top_k, "threshold": threshold})
            return [ScoredDocument(document=self._open(hit.document), score=hit.score) for hit in hits]
        if top_k == 0:
            return []
        page = max(2 * top_k, _PAGE)
        while True:
            hits = yield Call(self.inner, "search", (query,), {"top_k": page, "threshold": threshold})
            found = [(hit.score, self._open(hit.document)) for hit in hits]
            matches = sorted(
                ((score, doc) for score, doc in found if predicate is None or predicate(doc.metadata)),
                key=lambda hit: (-hit[0], hit[1].id),
            )
            # Done when the backend has nothing more, or when the k-th match scores strictly above every hit not
            # yet fetched (so no unseen document can tie with it and win on its original id).
            if len(hits) < page or (len(matches) >= top_k and matches[top_k - 1][0] > hits[-1].score):
                return [ScoredDocument(document=doc, score=score) for score, doc in matches[:top_k]]
            page *= 4

    def _get_steps(self, ids: Iterable[str]) -> Steps[list[VectorDocument]]:
        wanted = check_ids(ids)
        stored_ids = [self.stored_id(i) for i in wanted]
        names = dict(zip(stored_ids, wanted))
        stored: list[VectorDocument] = yield Call(self.inner, "get", (stored_ids,))
        return [self._open(document, names.get(document.id)) for document in stored]

    def _ids_steps(self) -> Steps[list[str]]:
        if not self._hash:
            stored_ids: list[str] = yield Call(self.inner, "ids")
            return stored_ids
        return sorted(document.id for document in (yield from self._all_steps()))

    def _reencrypt_steps(self) -> Steps[int]:
        stored_ids: list[str] = yield Call(self.inner, "ids")
        rewritten = 0
        for start in range(0, len(stored_ids), _CHUNK):
            chunk: list[VectorDocument] = yield Call(self.inner, "get", (stored_ids[start : start + _CHUNK],))
            old = [self._open(d) for d in chunk if Keyring.key_id(d.content) != self.keyring.current]
            if old:
                yield Call(self.inner, "store", (self._seal(old),))
                rewritten += len(old)
        return rewritten

    # VectorMemory ----------------------------------------------------------------------------------------------

    def store(self, documents: DocumentsIn) -> None:
        """Encrypt and upsert documents by id."""
        self.inner.store(self._seal(documents))

    def search(
        self,
        embedding: Sequence[float],
        *,
        top_k: int = 4,
        threshold: float | None = None,
        filter: Filter | None = None,
    ) -> list[ScoredDocument]:
        """Exact top-k search; a metadata `filter` is applied after decryption (see the module docs)."""
        return run(self._search_steps(embedding, top_k, threshold, filter))

    def get(self, ids: Iterable[str]) -> list[VectorDocument]:
        """Documents by id, decrypted, in the order asked."""
        return run(self._get_steps(ids))

    def delete(self, ids: Iterable[str]) -> None:
        """Delete documents by id."""
        self.inner.delete([self.stored_id(i) for i in check_ids(ids)])

    def count(self) -> int:
        """The number of documents."""
        return self.inner.count()

    def clear(self) -> None:
        """Delete every document."""
        self.inner.clear()

    def ids(self) -> list[str]:
        """Every document id, sorted; with `id_key`, recovered by decrypting every document."""
        return run(self._ids_steps())

    def reencrypt(self) -> int:
        """Rewrite the documents sealed with an older key with the newest one; returns how many.

        Not atomic with concurrent writers: a document stored by another writer between this call's read and
        its write may be overwritten with its older value. Run it while nothing else writes to the collection.
        """
        return run(self._reencrypt_steps())

    def close(self) -> None:
        """Close the inner memory."""
        self.inner.close()

    async def astore(self, documents: DocumentsIn) -> None:
        """Async twin of `store`."""
        await self.inner.astore(self._seal(documents))

    async def asearch(
        self,
        embedding: Sequence[float],
        *,
        top_k: int = 4,
        threshold: float | None = None,
        filter: Filter | None = None,
    ) -> list[ScoredDocument]:
        """Async twin of `search`."""
        return await arun(self._search_steps(embedding, top_k, threshold, filter))

    async def aget(self, ids: Iterable[str]) -> list[VectorDocument]:
        """Async twin of `get`."""
        return await arun(self._get_steps(ids))

    async def adelete(self, ids: Iterable[str]) -> None:
        """Async twin of `delete`."""
        await self.inner.adelete([self.stored_id(i) for i in check_ids(ids)])

    async def acount(self) -> int:
        """Async twin of `count`."""
        return await self.inner.acount()

    async def aclear(self) -> None:
        """Async twin of `clear`."""
        await self.inner.aclear()

    async def aids(self) -> list[str]:
        """Async twin of `ids`."""
        return await arun(self._ids_steps())

    async def areencrypt(self) -> int:
        """Async twin of `reencrypt`."""
        return await arun(self._reencrypt_steps())

    async def aclose(self) -> None:
        """Async twin of `close`."""
        await self.inner.aclose()
