"""`FileChatMemory`: one crash-safe JSON Lines file per chat session (format in `memwoven.backends.file`)."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from memwoven._cache import LRUCache
from memwoven._steps import async_twin
from memwoven.backends._cancel import current, in_thread
from memwoven.backends.file._fs import (
    DEFAULT_LOCK_TIMEOUT,
    FORMAT,
    CancellableThreads,
    StatKey,
    atomic_write,
    check_lock_timeout,
    checksum,
    dumps,
    is_int,
    open_versioned,
    parse_header,
    remove,
    short,
    write_lock,
)
from memwoven.contracts import (
    MAX_ID_BYTES,
    ChatMemory,
    History,
    MessagesIn,
    check_id,
    check_ttl,
    next_version,
)
from memwoven.errors import (
    ConcurrentModificationError,
    CorruptMemoryError,
    InvalidInputError,
)
from memwoven.history import message_ids, not_stored
from memwoven.models import (
    Message,
    coerce_messages,
    coerce_messages_after,
)

__all__ = ["FileChatMemory"]

# Chat memory -----------------------------------------------------------------------------------------------------

_SUFFIX = ".session.jsonl"
_SESSION_FILE = re.compile(r"[0-9a-f]{64}" + re.escape(_SUFFIX))
_LOCKS = ".locks"
_MAX_HEADER_BYTES = 8 * MAX_ID_BYTES + 4096  # the id JSON-escaped, at worst 6 bytes per byte, plus the rest
_MESSAGE_LIST = TypeAdapter(list[Message])
_MESSAGE = TypeAdapter(Message)


def _file_stem(session_id: str) -> str:
    """The file name stem of a session: the SHA-256 of its UTF-8 id (safe and case-insensitive-proof)."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class _Header:
    session_id: str
    version: int
    count: int
    digest: str


@dataclass(frozen=True)
class _Snapshot:
    """A parsed session file, valid while the file's header line and stat key are unchanged.

    `body` is the file's message lines, kept so that a write re-encodes only the messages after the ones it shares
    (by identity) with `messages`. It is kept in a few pieces, so that adding lines does not copy the others (a
    fresh copy of a large body costs page faults, not just a memcpy).
    """

    header: bytes
    key: StatKey
    messages: tuple[Message, ...]
    version: int
    body: tuple[bytes, ...]

    @functools.cached_property
    def ids(self) -> frozenset[str]:
        """The ids of `messages` (CM10), computed on first use."""
        return frozenset(message.id for message in self.messages if message.id is not None)


_NO_SNAPSHOT = _Snapshot(b"", StatKey(0, 0, 0, 0), (), 0, ())
_MAX_PIECES = 32  # a body in more pieces is joined into one


def _session_error(session_id: str | None, path: Path, reason: str) -> CorruptMemoryError:
    what = f"session {short(session_id)}" if session_id is not None else "a session"
    return CorruptMemoryError(f"{what} is corrupt: {reason} (file {path})")


def _parse_header(line: bytes, session_id: str | None, path: Path) -> _Header:
    """Decode and check a session file's header line (against `session_id` when given)."""
    raw = parse_header(
        line, ("format", "session_id", "version", "count"), lambda reason: _session_error(session_id, path, reason)
    )
    stored_id, version, count, digest = raw["session_id"], raw["version"], raw["count"], raw["sha256"]
    if not isinstance(stored_id, str) or not is_int(version, 1) or not is_int(count, 1):
        raise _session_error(session_id, path, "the header has a bad id, version or count")
    if session_id is not None and stored_id != session_id:
        raise _session_error(session_id, path, f"the file holds session {short(stored_id)}")
    if path.name != _file_stem(stored_id) + _SUFFIX:
        raise _session_error(stored_id, path, "the file name does not match the session id it holds")
    return _Header(stored_id, version, count, digest)


def _session_digest(session_id: str, version: int, count: int, chunks: Iterable[bytes]) -> str:
    """The checksum of a session file (`checksum` of its other header fields and its body)."""
    return checksum({"format": FORMAT, "session_id": session_id, "version": version, "count": count}, chunks)


def _check_body(body: bytes, header: _Header, path: Path) -> None:
    """Verify the header and body against the header's checksum and message count."""
    if _session_digest(header.session_id, header.version, header.count, [body]) != header.digest:
        raise _session_error(header.session_id, path, "checksum mismatch (the file was truncated or altered)")
    if not body.endswith(b"\n") or body.count(b"\n") != header.count:
        raise _session_error(header.session_id, path, f"expected {header.count} message lines")


def _decode_body(body: bytes, header: _Header, path: Path) -> list[Message]:
    _check_body(body, header, path)
    try:
        messages = _MESSAGE_LIST.validate_json(b"[" + body[:-1].replace(b"\n", b",") + b"]")
    except ValidationError as error:
        raise _session_error(header.session_id, path, f"undecodable message ({error.errors()[0]['msg']})") from None
    if len(messages) != header.count:
        raise _session_error(header.session_id, path, f"expected {header.count} messages, found {len(messages)}")
    return messages


def _message_line(message: Message) -> bytes:
    """A message's line in a session file (`InvalidInputError` if it has no UTF-8 form: a lone surrogate)."""
    try:
        return _MESSAGE.dump_json(message) + b"\n"
    except PydanticSerializationError as error:
        raise InvalidInputError(f"a message cannot be encoded as UTF-8 JSON ({error})") from None


def _body_after(base: _Snapshot, same: int, new: Sequence[Message]) -> tuple[bytes, ...]:
    """The body of a session holding `new`, whose first `same` messages are `base`'s first `same`: their lines are
    taken from `base.body`, only the rest is encoded."""
    added = b"".join([_message_line(message) for message in new[same:]])
    if same == len(base.messages):
        return _pieces(*base.body, added) if added else base.body
    if same == 0:
        return (added,)
    body = b"".join(base.body)  # the end of line `same`, found at C speed
    newlines = np.flatnonzero(np.frombuffer(body, dtype=np.uint8) == ord("\n"))
    return (body[: int(newlines[same - 1]) + 1], added)


def _pieces(*pieces: bytes) -> tuple[bytes, ...]:
    return pieces if len(pieces) <= _MAX_PIECES else (b"".join(pieces),)


def _read_header_line(stream: IO[bytes]) -> bytes:
    return stream.readline(_MAX_HEADER_BYTES)


class FileChatMemory(CancellableThreads, ChatMemory):
    """Chat histories in a directory, one crash-safe, checksummed file per session; safe across processes.

    File names are the SHA-256 of the session id, so any id stays inside `directory`; the id itself is stored in
    the file and checked on read. Loads are cached per session while the file is unchanged (`cache_size`
    sessions at most). A writer waits at most `lock_timeout` seconds (None: forever) for the session's lock,
    then raises `BackendUnavailableError`. With `ttl` (seconds) a session expires when its file has not been
    written for that long (judged by its modification time; every write resets it): it then reads as absent, and
    `cleanup_expired()` deletes its file.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
        cache_size: int = 64,
        ttl: float | None = None,
    ) -> None:
        lock_timeout = check_lock_timeout(lock_timeout)
        self.ttl = check_ttl(ttl)
        self.directory = Path(directory).absolute()
        self._locks = self.directory / _LOCKS  # made by the first writer: reading writes nothing
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise InvalidInputError(f"{self.directory} is not a directory") from None
        self.lock_timeout = lock_timeout
        self._cache: LRUCache[str, _Snapshot] = LRUCache(max(0, cache_size))

    def __repr__(self) -> str:
        return f"FileChatMemory({str(self.directory)!r})"

    def path_of(self, session_id: str) -> Path:
        """The file that holds (or would hold) a session."""
        return self.directory / (_file_stem(check_id(session_id)) + _SUFFIX)

    def load_versioned(self, session_id: str) -> History:
        """Return the session's messages and version, read from its file (or the cache if it is unchanged)."""
        found = self._read(session_id, self.path_of(session_id))
        return History([], 0) if found is None else History(list(found.messages), found.version)

    def save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        """Replace the session's history atomically (compare-and-swap with `expected_version`)."""
        path = self.path_of(session_id)
        cached = self._cache.get(path.name) or _NO_SNAPSHOT  # its lines encode its messages, whatever the file holds
        checked, same = coerce_messages_after(messages, cached.messages)
        message_ids(checked)
        new, body = tuple(checked), _body_after(cached, same, checked)
        with self._writing(session_id, path):
            current = self._stored_version(session_id, path, repairable=expected_version is None)
            if expected_version is not None and expected_version != current:
                raise ConcurrentModificationError(
                    f"session {short(session_id)} is at version {current}, not {expected_version}; reload and retry"
                )
            if not new:
                remove(path)
                self._cache.drop(path.name)
                return 0
            return self._write(session_id, path, current, body, new)

    def append(self, session_id: str, messages: MessagesIn) -> int:
        """Atomically add messages at the end of the session (across threads and processes)."""
        path = self.path_of(session_id)
        batch = coerce_messages(messages)
        message_ids(batch)
        if not batch:
            return self.load_versioned(session_id).version
        lines = {id(message): _message_line(message) for message in batch}  # encoded before taking the lock
        with self._writing(session_id, path):
            old = self._read(session_id, path) or _NO_SNAPSHOT  # fully checked: never extend a damaged history
            added = not_stored(batch, old.ids)
            if not added:
                return old.version
            body = _pieces(*old.body, b"".join([lines[id(message)] for message in added]))
            return self._write(session_id, path, old.version, body, old.messages + tuple(added))

    def _update_locked(self, session_id: str, change: Callable[[list[Message]], MessagesIn]) -> int:
        """Run `change` and write its result while holding the session's write lock (see `ChatMemory.update`)."""
        return self._locked_update(session_id, change, from_loop=False)

    async def _aupdate_locked(
        self, session_id: str, change: Callable[[list[Message]], MessagesIn | Awaitable[MessagesIn]]
    ) -> int:
        """`_update_locked` from async code, where `change` may be a coroutine function: the locked work runs in a
        thread of its own; a coroutine `change` runs on this loop. Not in the loop's default executor: there, the
        other updates of the session waiting for its lock could hold every worker a `change` awaiting
        `asyncio.to_thread` needs, and the lock would be held until it timed out.

        Cancelling the caller cancels the `change` coroutine it awaits; the thread then writes nothing and releases
        the lock (`in_thread`)."""
        own = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memwoven-file-update")
        try:
            locked = functools.partial(self._locked_update, session_id, change, from_loop=True)
            return await in_thread(locked, executor=own)
        finally:
            own.shutdown(wait=False)

    def _locked_update(self, session_id: str, change: Callable[[list[Message]], Any], from_loop: bool) -> int:
        path = self.path_of(session_id)
        with self._writing(session_id, path):
            stored = self._read(session_id, path) or _NO_SNAPSHOT  # fully checked: never rewrite a damaged history
            result = change(list(stored.messages))
            if isinstance(result, Awaitable):
                cancellation = current() if from_loop else None
                if cancellation is None:
                    raise InvalidInputError("update's change returned an awaitable; use aupdate for a coroutine")
                result = cancellation.await_from_thread(result)  # `Abandoned` if the caller was cancelled meanwhile
            new, same = coerce_messages_after(result, stored.messages)
            message_ids(new)
            if not new:
                remove(path)  # like `_write`, skipped if the caller was cancelled (`check_cancelled`)
                self._cache.drop(path.name)
                return 0
            return self._write(session_id, path, stored.version, _body_after(stored, same, new), tuple(new))

    def sessions(self) -> list[str]:
        """The stored session ids, sorted, read from the file headers (a damaged header raises `CorruptMemoryError`)."""
        ids = []
        with os.scandir(self.directory) as entries:
            names = [entry.name for entry in entries if _SESSION_FILE.fullmatch(entry.name)]
        for name in names:
            path = self.directory / name
            try:
                with open(path, "rb") as stream:
                    if self._expired(os.fstat(stream.fileno()).st_mtime_ns):
                        continue
                    line = _read_header_line(stream)
            except FileNotFoundError:  # cleared meanwhile
                continue
            ids.append(_parse_header(line, None, path).session_id)
        return sorted(ids)

    def cleanup_expired(self) -> int:
        """Delete the files of the sessions whose TTL ran out (they already read as absent); return how many."""
        if self.ttl is None:
            return 0
        removed = 0
        with os.scandir(self.directory) as entries:
            names = [entry.name for entry in entries if _SESSION_FILE.fullmatch(entry.name)]
        for name in names:
            path = self.directory / name
            with self._writing(name, path):
                try:
                    if not self._expired(os.stat(path).st_mtime_ns):
                        continue
                except FileNotFoundError:
                    continue
                remove(path)
                self._cache.drop(name)
                removed += 1
        return removed

    acleanup_expired = async_twin(cleanup_expired)

    def _expired(self, mtime_ns: int) -> bool:
        return self.ttl is not None and time.time_ns() - mtime_ns >= self.ttl * 1e9

    def close(self) -> None:
        """Drop the cache (there is nothing else to release)."""
        self._cache.clear()

    def _writing(self, session_id: str, path: Path) -> AbstractContextManager[None]:
        lock_path = self._locks / (path.name.removesuffix(_SUFFIX) + ".lock")
        self._locks.mkdir(exist_ok=True)
        return write_lock(lock_path, self.lock_timeout, f"session {short(session_id)}")

    def _read(self, session_id: str, path: Path) -> _Snapshot | None:
        """Read and check a session file (None if absent).

        The snapshot comes from the cache when the file's stat key and header line are unchanged (the header holds
        the version, unique per write, and the checksum), so an unchanged file is not parsed again.
        """
        opened = open_versioned(path)
        if opened is None:
            return None
        stream, key = opened
        with stream:
            if self._expired(key.mtime_ns):
                return None
            line = _read_header_line(stream)
            cached = self._cache.get(path.name)
            if cached is not None and cached.key == key and cached.header == line:
                return cached
            body = stream.read()
        header = _parse_header(line, session_id, path)
        snapshot = _Snapshot(line, key, tuple(_decode_body(body, header, path)), header.version, (body,))
        self._cache.put(path.name, snapshot)
        return snapshot

    def _stored_version(self, session_id: str, path: Path, *, repairable: bool) -> int:
        """The session's version from its header (0 if absent; also 0 if damaged and `repairable`)."""
        try:
            with open(path, "rb") as stream:
                if self._expired(os.fstat(stream.fileno()).st_mtime_ns):
                    return 0
                line = _read_header_line(stream)
        except FileNotFoundError:
            return 0
        try:
            return _parse_header(line, session_id, path).version
        except CorruptMemoryError:
            if repairable:  # a plain save replaces a damaged history: the way to repair it
                return 0
            raise

    def _write(
        self, session_id: str, path: Path, current: int, body: tuple[bytes, ...], messages: tuple[Message, ...]
    ) -> int:
        """Write the session file holding `messages` (encoded as `body`) over version `current`; cache it and
        return the new version."""
        version, count = next_version(current), len(messages)  # one line per message: JSON escapes newlines
        digest = _session_digest(session_id, version, count, body)
        fields = {"format": FORMAT, "session_id": session_id, "version": version, "count": count, "sha256": digest}
        line = dumps(fields) + b"\n"
        key = atomic_write(path, lambda stream: stream.writelines([line, *body]))
        self._cache.put(path.name, _Snapshot(line, key, messages, version, body))
        return version
