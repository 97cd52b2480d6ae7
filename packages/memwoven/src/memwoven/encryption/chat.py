"""`EncryptedChatMemory`: every message of another `ChatMemory` encrypted (see `memwoven.encryption`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from memwoven._cache import LRUCache
from memwoven._steps import Call, Steps, twins
from memwoven.contracts import (
    ChatMemory,
    History,
    MessagesIn,
    check_id,
    cleanup_expired_steps,
)
from memwoven.encryption._keys import HASHED_ID, MARKER, IdHasher, KeyLike, Keyring, Wrapper, keyring, utf8
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError, InvalidInputError
from memwoven.history import encode_message, message_ids
from memwoven.models import Message, coerce_messages, same_prefix

__all__ = ["EncryptedChatMemory"]

logger = logging.getLogger("memwoven.encryption")

# Chat ----------------------------------------------------------------------------------------------------------


class _Undecryptable(CorruptMemoryError):
    """A stored message this wrapper cannot decrypt; the error already names the session by its own id."""


class _Sealed(NamedTuple):
    """A session as this object last read or wrote it: stored (encrypted) messages, plaintext ones, their JSON."""

    stored: tuple[Message, ...]
    plain: tuple[Message, ...]
    bodies: tuple[str, ...]


class _SealedCache(LRUCache[str, _Sealed]):
    """A bounded, thread-safe LRU of stored session id -> `_Sealed` (an empty session is forgotten instead)."""

    def put(self, key: str, value: _Sealed) -> None:
        if value.stored:
            super().put(key, value)
        else:
            self.drop(key)


class EncryptedChatMemory(Wrapper[ChatMemory], ChatMemory):
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
        if getattr(inner, "needs_plaintext", False):  # a policy would summarize or archive ciphertext
            raise TypeError(
                f"{type(inner).__name__} works on message text: wrap it around the EncryptedChatMemory instead "
                f"({type(inner).__name__}(EncryptedChatMemory(backend, key=...), ...))"
            )
        self.inner = inner
        self.keyring = keyring(key)
        self._hash = IdHasher(id_key) if id_key is not None else None
        self._cache = _SealedCache(cache_size)

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
        context = b"chat\x00" + utf8(stored_id, "session id")
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

    def _reencrypt(self, session_id: str, *, retries: int = 16) -> Steps[int]:
        """Rewrite the whole session with the newest key (under its optimistic version); returns the new version."""
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

    reencrypt, areencrypt = twins(_reencrypt)

    def _listing_steps(self) -> Steps[tuple[list[str], dict[str, str]]]:
        """The ids of the stored sessions, and (with `id_key`) the hash-shaped stored ids that do not open as a
        session of this wrapper, each with why."""
        stored_ids: list[str] = yield Call(self.inner, "sessions")
        if not self._hash:
            return stored_ids, {}
        found: list[str] = []
        unlisted: dict[str, str] = {}
        for stored_id in stored_ids:
            if not HASHED_ID.fullmatch(stored_id):
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

    def _load_versioned(self, session_id: str) -> Steps[History]:
        """Load and decrypt the session's messages."""
        stored_id = self.stored_id(session_id)
        with self._naming(session_id, stored_id):
            history = yield Call(self.inner, "load_versioned", (stored_id,))
        return self._open(session_id, stored_id, history)[1]

    load_versioned, aload_versioned = twins(_load_versioned)

    def _save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> Steps[int]:
        """Encrypt the changed messages and save the whole history through the inner memory."""
        stored_id = self.stored_id(session_id)
        sealed = self._seal(session_id, stored_id, messages, reuse=True)
        version: int = yield Call(
            self.inner, "save", (stored_id, list(sealed.stored)), {"expected_version": expected_version}
        )
        self._cache.put(stored_id, sealed)
        return version

    save, asave = twins(_save)

    def _append(self, session_id: str, messages: MessagesIn) -> Steps[int]:
        """Encrypt `messages` and append them through the inner memory."""
        stored_id = self.stored_id(session_id)
        sealed = self._seal(session_id, stored_id, messages, reuse=False)
        version: int = yield Call(self.inner, "append", (stored_id, list(sealed.stored)))
        return version

    append, aappend = twins(_append)

    def _sessions(self) -> Steps[list[str]]:
        """The stored sessions' ids, sorted.

        With `id_key` they are recovered by decrypting every session (slow, see the module docs), and a stored
        session whose id cannot be recovered is left out with a logged warning: `unlisted_sessions()` names it.
        """
        return self._listed((yield from self._listing_steps()))

    sessions, asessions = twins(_sessions)

    def _unlisted_sessions(self) -> Steps[dict[str, str]]:
        """With `id_key`: the stored sessions `sessions()` leaves out, stored id -> why (see the module docs)."""
        return (yield from self._listing_steps())[1]

    unlisted_sessions, aunlisted_sessions = twins(_unlisted_sessions)

    def _clear(self, session_id: str) -> Steps[None]:
        """Remove the session."""
        yield Call(self.inner, "clear", (self.stored_id(session_id),))

    clear, aclear = twins(_clear)

    def _cleanup_expired(self) -> Steps[int]:
        """Delete `inner`'s expired sessions and return how many (0 if `inner` has no TTL)."""
        return (yield from cleanup_expired_steps(self.inner))

    cleanup_expired, acleanup_expired = twins(_cleanup_expired)

    def _has_update_lock(self) -> bool:
        """`update` takes the inner memory's per-session write lock, when it has one."""
        return self.inner._has_update_lock()

    def _update_locked(self, session_id: str, change: Callable[[list[Message]], MessagesIn]) -> int:
        """Run `change` on the decrypted session under the inner memory's write lock, and write it encrypted."""
        return self._run(self._update_locked_steps(session_id, change))

    async def _aupdate_locked(
        self, session_id: str, change: Callable[[list[Message]], MessagesIn | Awaitable[MessagesIn]]
    ) -> int:
        """`_update_locked` from async code; `change` may be a coroutine function."""
        return await self._arun(self._update_locked_steps(session_id, change))

    def _update_locked_steps(self, session_id: str, change: Callable[[list[Message]], Any]) -> Steps[int]:
        stored_id = self.stored_id(session_id)
        written: list[_Sealed] = []
        with self._naming(session_id, stored_id):
            version: int = yield Call(
                self.inner, "_update_locked", (stored_id, self._sealing(session_id, stored_id, change, written))
            )
        self._cache.put(stored_id, written[-1])
        return version
