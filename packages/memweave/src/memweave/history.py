"""Sans-I/O pieces of chat storage shared by the persistent backends: encoding, digests, snapshots, diffing.

A replace-all `save` costs O(change) because a backend only rewrites the messages after the longest prefix that
is already stored. Messages are deeply immutable, so each backend object remembers the last snapshot it read or
wrote of recent sessions. When the stored version still equals the remembered one, the unchanged prefix is
found by identity against the snapshot, at C speed and without encoding anything (`identical_prefix`,
`kept_prefix`); otherwise (another object wrote meanwhile) by comparing stored per-message digests with the new
messages' (`stored_prefix`).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from itertools import compress, count
from operator import is_not
from typing import NamedTuple

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from memweave.contracts import MessagesIn
from memweave.errors import CorruptMemoryError, InvalidInputError
from memweave.models import Message, coerce_messages

__all__ = [
    "EMPTY",
    "Edit",
    "Snapshot",
    "SnapshotCache",
    "decode_message",
    "digest",
    "encode_message",
    "identical_prefix",
    "kept_prefix",
    "prepare_edit",
    "stored_prefix",
]


class Snapshot(NamedTuple):
    """A session's messages at one version."""

    version: int
    messages: tuple[Message, ...]


EMPTY = Snapshot(0, ())


def encode_message(message: Message) -> str:
    """The canonical JSON text of a message, exactly as stored (`InvalidInputError` if it has no UTF-8 form)."""
    try:
        return message.model_dump_json()
    except PydanticSerializationError as error:  # a lone surrogate: valid in a Python str, not in UTF-8
        raise InvalidInputError(f"a message cannot be encoded as UTF-8 JSON ({error})") from None


def digest(body: str) -> bytes:
    """A 16-byte BLAKE2b digest of an encoded message."""
    return hashlib.blake2b(body.encode("utf-8"), digest_size=16).digest()


def decode_message(session_id: str, position: int, raw: str | bytes) -> Message:
    """Decode one stored message, raising `CorruptMemoryError` naming the session if it cannot be read."""
    try:
        return Message.model_validate_json(raw)
    except (ValidationError, ValueError, TypeError) as error:
        raise CorruptMemoryError(
            f"session {session_id!r}: stored message {position} cannot be decoded ({error})"
        ) from None


def identical_prefix(new: Sequence[object], old: Sequence[Message]) -> int:
    """How many leading items of `new` are the very objects of `old` (a scan at C speed)."""
    if not any(map(is_not, new, old)):  # the common case (an append), twice as fast as locating a change
        return min(len(new), len(old))
    return next(compress(count(), map(is_not, new, old)))


def kept_prefix(new: Sequence[Message], old: Sequence[Message], identical: int = 0) -> int:
    """How many leading messages of `new` are stored exactly as in `old`, given the `identical` leading ones.

    An equal but distinct message counts as unchanged only if it also serializes identically (``1 == 1.0 ==
    True`` in Python, but not in JSON).
    """
    kept = identical
    for a, b in zip(new[kept:], old[kept:]):
        if a is not b and (a != b or encode_message(a) != encode_message(b)):
            break
        kept += 1
    return kept


def stored_prefix(stored_digests: Sequence[bytes], bodies: Sequence[str]) -> int:
    """How many leading encoded `bodies` match the stored digests."""
    kept = 0
    for stored, body in zip(stored_digests, bodies):
        if stored != digest(body):
            break
        kept += 1
    return kept


class Edit(NamedTuple):
    """Validated messages to save, and how many of them lead as the very objects of a cached snapshot."""

    messages: tuple[Message, ...]
    base: Snapshot | None
    identical: int


def prepare_edit(messages: MessagesIn, cached: Snapshot | None) -> Edit:
    """`coerce_messages(messages)`, skipping the leading messages that are the cached snapshot's own objects.

    Those were validated when they were read or written, and are immutable: re-checking them would make saving
    a long history cost O(length) instead of O(change).
    """
    if cached is not None and isinstance(messages, (list, tuple)):
        identical = identical_prefix(messages, cached.messages)
        try:
            rest = tuple(coerce_messages(messages[identical:]))
        except InvalidInputError:
            coerce_messages(messages)  # raises again, naming the message by its position in the whole list
            raise
        return Edit(cached.messages[:identical] + rest, cached, identical)
    return Edit(tuple(coerce_messages(messages)), None, 0)


class SnapshotCache:
    """A bounded, thread-safe LRU of session id -> the last snapshot this object read or wrote."""

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidInputError(f"cache_size must be a non-negative int, got {size!r}")
        self._size = size
        self._entries: OrderedDict[str, Snapshot] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str) -> Snapshot | None:
        """The remembered snapshot of the session, if any."""
        with self._lock:
            snapshot = self._entries.get(session_id)
            if snapshot is not None:
                self._entries.move_to_end(session_id)
            return snapshot

    def put(self, session_id: str, snapshot: Snapshot) -> None:
        """Remember a snapshot (a version of 0, an absent session, is forgotten instead)."""
        if snapshot.version == 0:
            self.drop(session_id)
            return
        if self._size == 0:
            return
        with self._lock:
            self._entries[session_id] = snapshot
            self._entries.move_to_end(session_id)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def drop(self, session_id: str) -> None:
        """Forget the session."""
        with self._lock:
            self._entries.pop(session_id, None)
