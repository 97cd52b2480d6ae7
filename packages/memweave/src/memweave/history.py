"""Sans-I/O pieces of chat storage shared by the persistent backends: encoding, digests, snapshot cache, diffing.

A replace-all `save` costs O(change) because a backend only writes the suffix after the longest prefix that
is already stored. The prefix is found from this object's last snapshot of the session when the stored version
still matches it (messages are immutable, so `new[:n] == cached` is a C-speed identity check), and otherwise
from the stored per-message digests.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

from pydantic import ValidationError

from memweave.errors import CorruptMemoryError, InvalidInputError
from memweave.models import Message

__all__ = ["SnapshotCache", "common_digest_prefix", "common_prefix", "decode_message", "digest", "encode_message"]


def encode_message(message: Message) -> str:
    """The canonical JSON text of a message, as stored."""
    try:
        return message.model_dump_json()
    except (ValueError, RecursionError) as error:
        raise InvalidInputError(f"message cannot be encoded as JSON: {error}") from None


def digest(encoded: str | bytes) -> str:
    """A short content digest of an encoded message (BLAKE2b-128, hex)."""
    data = encoded.encode("utf-8") if isinstance(encoded, str) else encoded
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def decode_message(session_id: str, position: int, raw: str | bytes) -> Message:
    """Decode one stored message, raising `CorruptMemoryError` naming the session if it cannot be read."""
    try:
        return Message.model_validate_json(raw)
    except (ValidationError, ValueError) as error:
        raise CorruptMemoryError(
            f"session {session_id!r}: stored message {position} cannot be decoded ({error.__class__.__name__})"
        ) from None


def common_prefix(old: Sequence[Message], new: Sequence[Message]) -> int:
    """Length of the longest common prefix of two message sequences (identity first, then equality)."""
    limit = min(len(old), len(new))
    if limit and list(old[:limit]) == list(new[:limit]):  # the usual case: nothing changed before the end
        return limit
    for position in range(limit):
        if old[position] is not new[position] and old[position] != new[position]:
            return position
    return limit


def common_digest_prefix(old: Sequence[str], new: Sequence[str]) -> int:
    """Length of the longest common prefix of two digest sequences."""
    limit = min(len(old), len(new))
    for position in range(limit):
        if old[position] != new[position]:
            return position
    return limit


class SnapshotCache:
    """A bounded LRU of `session_id -> (version, messages)` from this object's last load or write."""

    def __init__(self, max_sessions: int = 256) -> None:
        self._max = max_sessions
        self._entries: OrderedDict[str, tuple[int, tuple[Message, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str, version: int) -> tuple[Message, ...] | None:
        """The cached messages if they are at `version`, else None."""
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is None or entry[0] != version:
                return None
            self._entries.move_to_end(session_id)
            return entry[1]

    def latest(self, session_id: str) -> tuple[int, tuple[Message, ...]]:
        """The cached (version, messages) of the session, or (0, ()) if it is not cached."""
        with self._lock:
            return self._entries.get(session_id, (0, ()))

    def put(self, session_id: str, version: int, messages: Sequence[Message]) -> None:
        """Remember the session at `version` (a version of 0 forgets it)."""
        with self._lock:
            if version == 0 or self._max == 0:
                self._entries.pop(session_id, None)
                return
            self._entries[session_id] = (version, tuple(messages))
            self._entries.move_to_end(session_id)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def forget(self, session_id: str) -> None:
        """Drop the session from the cache."""
        with self._lock:
            self._entries.pop(session_id, None)
