"""Sans-I/O pieces of chat storage shared by the persistent backends: encoding, digests, snapshots, diffing.

A replace-all `save` costs O(change) because a backend only rewrites the messages after the longest prefix that
is already stored. Messages are deeply immutable, so each backend object remembers the last snapshot it read or
wrote of recent sessions. When the stored version still equals the remembered one, the unchanged prefix is
found by comparing with the snapshot (`models.same_prefix`: exact equality, at C speed for the very objects the
snapshot holds, without encoding anything); otherwise (another object wrote meanwhile) by comparing stored
per-message digests with the new messages' (`stored_prefix`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Iterable, Sequence
from typing import NamedTuple

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from memwoven._cache import LRUCache
from memwoven.contracts import MessagesIn
from memwoven.errors import CorruptMemoryError, InvalidInputError
from memwoven.models import Message, coerce_messages, known_then_rest, same_prefix

__all__ = [
    "EMPTY",
    "Edit",
    "Snapshot",
    "SnapshotCache",
    "decode_message",
    "digest",
    "encode_message",
    "message_ids",
    "not_stored",
    "prepare_edit",
    "stored_prefix",
]


class Snapshot(NamedTuple):
    """A session's messages at one version. Shared by every reader of the cache: never mutate `messages`
    (a list rather than a tuple because comparing a caller's list with it then needs no conversion)."""

    version: int
    messages: list[Message]


EMPTY = Snapshot(0, [])


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


def stored_prefix(stored_digests: Sequence[bytes], bodies: Sequence[str]) -> int:
    """How many leading encoded `bodies` match the stored digests."""
    kept = 0
    for stored, body in zip(stored_digests, bodies):
        if stored != digest(body):
            break
        kept += 1
    return kept


def message_ids(messages: Iterable[Message], already: Container[str] = frozenset()) -> list[str]:
    """The ids `messages` carry, in order, refusing (`InvalidInputError`, before anything is written) an id that
    appears twice among them or is in `already` (CM10: message ids are unique within a session)."""
    ids: list[str] = []
    seen: set[str] = set()
    for message in messages:
        message_id = message.id
        if message_id is None:
            continue
        if message_id in seen or message_id in already:
            raise InvalidInputError(f"message id {message_id!r} appears twice; ids are unique within a session")
        seen.add(message_id)
        ids.append(message_id)
    return ids


def not_stored(messages: Sequence[Message], stored_ids: Container[str]) -> list[Message]:
    """What an idempotent append stores (CM10): the messages without an id or whose id is not stored yet, in
    order (`messages` itself when that is all of them). Refuses an id repeated within `messages`."""
    message_ids(messages)
    if not any(message.id is not None and message.id in stored_ids for message in messages):
        return list(messages) if not isinstance(messages, list) else messages
    return [message for message in messages if message.id is None or message.id not in stored_ids]


class Edit(NamedTuple):
    """Validated messages to save, and how many of them lead unchanged from a cached snapshot."""

    messages: list[Message]
    base: Snapshot | None
    same: int


def prepare_edit(messages: MessagesIn, cached: Snapshot | None) -> Edit:
    """`coerce_messages(messages)`, skipping the leading messages equal to the cached snapshot's (`same_prefix`).

    Those were validated when they were read or written, and are immutable: re-checking them would make saving
    a long history cost O(length) instead of O(change). The snapshot's own objects stand in for them.
    """
    if cached is not None and isinstance(messages, (list, tuple)):
        known = cached.messages
        joined = known_then_rest(messages, known) if isinstance(messages, list) else None
        same = len(known) if joined is not None else same_prefix(messages, known)
        try:
            rest = coerce_messages(messages[same:])
        except InvalidInputError:
            coerce_messages(messages)  # raises again, naming the message by its position in the whole list
            raise
        if joined is None:
            return Edit((known if same == len(known) else known[:same]) + rest, cached, same)
        joined[same:] = rest  # the common save, the snapshot's messages then new ones: one list built
        return Edit(joined, cached, same)
    return Edit(coerce_messages(messages), None, 0)


class SnapshotCache(LRUCache[str, Snapshot]):
    """A bounded, thread-safe LRU of session id -> the last snapshot this object read or wrote."""

    def put(self, session_id: str, snapshot: Snapshot) -> None:
        """Remember a snapshot (a version of 0, an absent session, is forgotten instead)."""
        if snapshot.version == 0:
            self.drop(session_id)
        else:
            super().put(session_id, snapshot)
