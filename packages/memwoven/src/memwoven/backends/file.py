"""Embedded file backends: one crash-safe file per chat session, one `.npz` file per vector collection.

Every write goes to a temporary file in the target's directory, is flushed and fsynced, atomically renamed over
the target, and the directory is fsynced: a reader (or the next process after a crash) sees the old or the new
file, never a mix. Writers serialize on a per-file lock (a thread lock in this process, then a `filelock` lock
across processes), which makes `append` atomic and `save(..., expected_version=v)` a true compare-and-swap.
Readers take no lock. Anything that fails to decode raises `CorruptMemoryError`; nothing is guessed.

Chat session file (``<sha256 of the UTF-8 id>.session.jsonl``): a JSON header line
``{"format": 1, "session_id": ..., "version": ..., "count": N, "sha256": ...}`` followed by N lines, one `Message`
JSON each. The digest is the SHA-256 of ``{"format":1,"session_id":...,"version":...,"count":N}`` (compact UTF-8
JSON, fields in that order), a newline, then the N lines: it covers the header as well as the messages.

Vector collection file: an uncompressed `.npz` (loadable with ``numpy.load(path, allow_pickle=False)``) holding a
JSON ``header`` (format, dimension, metric, count), the float32 ``embeddings`` matrix and the ``documents`` JSON
(``[{"id", "content", "metadata"}, ...]`` in row order), the JSON blobs stored as uint8 arrays. The zip CRC-32 of
every member is verified on read.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import hashlib
import io
import json
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple, NoReturn

import filelock
import numpy as np
from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from memwoven.contracts import (
    MAX_ID_BYTES,
    ChatMemory,
    CollectionInfo,
    DocumentsIn,
    Filter,
    History,
    MessagesIn,
    Metric,
    VectorMemory,
    check_id,
    check_ids,
    is_collection_name,
    next_version,
)
from memwoven.errors import (
    BackendUnavailableError,
    ConcurrentModificationError,
    CorruptMemoryError,
    InvalidInputError,
)
from memwoven.history import message_ids, not_stored
from memwoven.models import (
    Message,
    ScoredDocument,
    VectorDocument,
    coerce_messages,
    coerce_messages_after,
    freeze_json,
)
from memwoven.vector_index import (
    DocumentBatch,
    VectorIndex,
    as_matrix,
    check_dimension,
    check_metric,
    check_stored_dimension,
    require_utf8,
)

__all__ = ["FileChatMemory", "FileVectorMemory", "list_collections"]

_FORMAT = 1
_LOCK_POLL_SECONDS = 0.002
_DEFAULT_LOCK_TIMEOUT = 60.0


# Shared file machinery -------------------------------------------------------------------------------------------


class _StatKey(NamedTuple):
    """What identifies one version of a file: files are only ever replaced whole, never edited in place."""

    device: int
    inode: int
    size: int
    mtime_ns: int


def _stat_key(stat: os.stat_result) -> _StatKey:
    return _StatKey(stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


# One process-wide set of thread locks, picked by lock path: threads of this process queue on them without
# polling (and two memory objects over the same files share them), while `filelock` excludes other processes.
_THREAD_LOCKS = tuple(threading.Lock() for _ in range(64))


@contextmanager
def _write_lock(lock_path: Path, timeout: float | None, what: str) -> Iterator[None]:
    """Hold the exclusive writer lock of one file, in this process and across processes."""
    wait = -1.0 if timeout is None else timeout
    thread_lock = _THREAD_LOCKS[hash(str(lock_path)) % len(_THREAD_LOCKS)]
    if not thread_lock.acquire(timeout=wait):
        raise BackendUnavailableError(f"{what} is locked by another writer (waited {timeout} s)")
    try:
        file_lock = filelock.FileLock(str(lock_path))
        try:
            file_lock.acquire(timeout=wait, poll_interval=_LOCK_POLL_SECONDS)
        except filelock.Timeout:
            raise BackendUnavailableError(f"{what} is locked by another process (waited {timeout} s)") from None
        try:
            yield
        finally:
            file_lock.release()
    finally:
        thread_lock.release()


def _fsync_directory(directory: Path) -> None:
    """Make a rename or unlink in `directory` durable (a no-op where directories cannot be opened)."""
    if os.name == "nt":  # Windows cannot open a directory; NTFS journals the rename itself
        return
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as error:  # some file systems refuse to fsync a directory
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _replace(source: Path, target: Path) -> None:
    """`os.replace`, retried briefly on Windows where a reader holding the target open makes it fail."""
    for _ in range(50 if os.name == "nt" else 0):
        try:
            os.replace(source, target)
            return
        except PermissionError:
            time.sleep(0.02)
    os.replace(source, target)


def _set_mtime_after(path: Path, floor_ns: int) -> None:
    """Give `path` an mtime strictly later than `floor_ns`, stepping up on file systems with coarse timestamps."""
    step = 1
    while True:
        stamp = max(time.time_ns(), floor_ns + step)
        os.utime(path, ns=(stamp, stamp))
        if os.stat(path).st_mtime_ns > floor_ns:
            return
        step *= 1000


def _atomic_write(target: Path, write: Callable[[IO[bytes]], None], *, mtime_after: int | None = None) -> _StatKey:
    """Replace `target` with what `write` produces: temp file, flush, fsync, rename, fsync the directory.

    The caller holds the target's write lock, so the temporary name can be fixed: a crash leaves at most one stale
    temp file, which the next writer truncates. With `mtime_after`, the new file's mtime is made strictly later,
    so every version of the file has its own stat key. Returns the stat key of the new file.
    """
    temp = target.with_name(target.name + ".tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        with os.fdopen(os.open(temp, flags, 0o666), "wb") as stream:
            write(stream)
            stream.flush()
            if mtime_after is not None:
                _set_mtime_after(temp, mtime_after)
            os.fsync(stream.fileno())
            key = _stat_key(os.fstat(stream.fileno()))
        _replace(temp, target)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp)
        raise
    _fsync_directory(target.parent)
    return key


def _remove(target: Path) -> None:
    """Delete `target` (and any stale temp file) durably; a missing file is fine. Caller holds the write lock."""
    with suppress(FileNotFoundError):
        os.unlink(target.with_name(target.name + ".tmp"))
    try:
        os.unlink(target)
    except FileNotFoundError:
        return
    _fsync_directory(target.parent)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON value")


def _loads(data: bytes) -> Any:
    """Strict JSON: UTF-8 only, and no NaN / Infinity."""
    return json.loads(data.decode("utf-8"), parse_constant=_reject_constant)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def _is_int(value: Any, minimum: int) -> bool:
    return type(value) is int and value >= minimum


def _short(value: str, limit: int = 80) -> str:
    """`repr` of an id, shortened so a 64 KiB id does not flood an error message."""
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"


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
    key: _StatKey
    messages: tuple[Message, ...]
    version: int
    body: tuple[bytes, ...]

    @functools.cached_property
    def ids(self) -> frozenset[str]:
        """The ids of `messages` (CM10), computed on first use."""
        return frozenset(message.id for message in self.messages if message.id is not None)


_NO_SNAPSHOT = _Snapshot(b"", _StatKey(0, 0, 0, 0), (), 0, ())
_MAX_PIECES = 32  # a body in more pieces is joined into one


def _session_error(session_id: str | None, path: Path, reason: str) -> CorruptMemoryError:
    what = f"session {_short(session_id)}" if session_id is not None else "a session"
    return CorruptMemoryError(f"{what} is corrupt: {reason} (file {path})")


def _parse_header(line: bytes, session_id: str | None, path: Path) -> _Header:
    """Decode and check a session file's header line (against `session_id` when given)."""
    if not line.endswith(b"\n"):
        raise _session_error(session_id, path, "the header line is truncated or missing")
    try:
        raw = _loads(line)
    except ValueError as error:
        raise _session_error(session_id, path, f"the header is not JSON ({error})") from None
    if not isinstance(raw, dict) or raw.keys() != {"format", "session_id", "version", "count", "sha256"}:
        raise _session_error(session_id, path, "the header does not have the expected fields")
    if raw["format"] != _FORMAT or type(raw["format"]) is not int:
        raise _session_error(session_id, path, f"unknown format {raw['format']!r}")
    stored_id, version, count, digest = raw["session_id"], raw["version"], raw["count"], raw["sha256"]
    if not isinstance(stored_id, str) or not _is_int(version, 1) or not _is_int(count, 1):
        raise _session_error(session_id, path, "the header has a bad id, version or count")
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise _session_error(session_id, path, "the header has a bad checksum field")
    if session_id is not None and stored_id != session_id:
        raise _session_error(session_id, path, f"the file holds session {_short(stored_id)}")
    if path.name != _file_stem(stored_id) + _SUFFIX:
        raise _session_error(stored_id, path, "the file name does not match the session id it holds")
    return _Header(stored_id, version, count, digest)


def _session_digest(session_id: str, version: int, count: int, chunks: Iterable[bytes]) -> str:
    """The checksum of a session file: SHA-256 of its other header fields (as one JSON line), then the body."""
    digest = hashlib.sha256(_dumps({"format": _FORMAT, "session_id": session_id, "version": version, "count": count}))
    digest.update(b"\n")
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


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


class FileChatMemory(ChatMemory):
    """Chat histories in a directory, one crash-safe, checksummed file per session; safe across processes.

    File names are the SHA-256 of the session id, so any id stays inside `directory`; the id itself is stored in
    the file and checked on read. Loads are cached per session while the file is unchanged (`cache_sessions`
    sessions at most). A writer waits at most `lock_timeout` seconds (None: forever) for the session's lock,
    then raises `BackendUnavailableError`. With `ttl` (seconds) a session expires when its file has not been
    written for that long (judged by its modification time; every write resets it): it then reads as absent, and
    `cleanup_expired()` deletes its file.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        lock_timeout: float | None = _DEFAULT_LOCK_TIMEOUT,
        cache_sessions: int = 64,
        ttl: float | None = None,
    ) -> None:
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0):
            raise InvalidInputError(f"ttl must be a positive number of seconds, got {ttl!r}")
        self.ttl = ttl
        self.directory = Path(directory).absolute()
        self._locks = self.directory / _LOCKS
        try:
            self._locks.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise InvalidInputError(f"{self.directory} is not a directory") from None
        self.lock_timeout = lock_timeout
        self._cache_size = max(0, cache_sessions)
        self._cache: OrderedDict[str, _Snapshot] = OrderedDict()
        self._cache_lock = threading.Lock()

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
        cached = self._cached(path.name) or _NO_SNAPSHOT  # its lines encode its messages, whatever the file holds now
        checked, same = coerce_messages_after(messages, cached.messages)
        message_ids(checked)
        new, body = tuple(checked), _body_after(cached, same, checked)
        with self._writing(session_id, path):
            current = self._stored_version(session_id, path, repairable=expected_version is None)
            if expected_version is not None and expected_version != current:
                raise ConcurrentModificationError(
                    f"session {_short(session_id)} is at version {current}, not {expected_version}; reload and retry"
                )
            if not new:
                _remove(path)
                self._forget(path.name)
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
        return self._locked_update(session_id, change, None)

    async def _aupdate_locked(
        self, session_id: str, change: Callable[[list[Message]], MessagesIn | Awaitable[MessagesIn]]
    ) -> int:
        """Async twin of `_update_locked`: the locked work runs in a thread; a coroutine `change` runs on this loop."""
        return await asyncio.to_thread(self._locked_update, session_id, change, asyncio.get_running_loop())

    def _locked_update(
        self, session_id: str, change: Callable[[list[Message]], Any], loop: asyncio.AbstractEventLoop | None
    ) -> int:
        path = self.path_of(session_id)
        with self._writing(session_id, path):
            current = self._read(session_id, path) or _NO_SNAPSHOT  # fully checked: never rewrite a damaged history
            result = change(list(current.messages))
            if isinstance(result, Awaitable):
                if loop is None:
                    raise InvalidInputError("update's change returned an awaitable; use aupdate for a coroutine")
                result = asyncio.run_coroutine_threadsafe(_awaited(result), loop).result()
            new, same = coerce_messages_after(result, current.messages)
            message_ids(new)
            if not new:
                _remove(path)
                self._forget(path.name)
                return 0
            return self._write(session_id, path, current.version, _body_after(current, same, new), tuple(new))

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
                _remove(path)
                self._forget(name)
                removed += 1
        return removed

    async def acleanup_expired(self) -> int:
        """Async twin of `cleanup_expired`."""
        return await asyncio.to_thread(self.cleanup_expired)

    def _expired(self, mtime_ns: int) -> bool:
        return self.ttl is not None and time.time_ns() - mtime_ns >= self.ttl * 1e9

    def close(self) -> None:
        """Drop the cache (there is nothing else to release)."""
        with self._cache_lock:
            self._cache.clear()

    def _writing(self, session_id: str, path: Path) -> AbstractContextManager[None]:
        lock_path = self._locks / (path.name.removesuffix(_SUFFIX) + ".lock")
        return _write_lock(lock_path, self.lock_timeout, f"session {_short(session_id)}")

    def _read(self, session_id: str, path: Path) -> _Snapshot | None:
        """Read and check a session file (None if absent).

        The snapshot comes from the cache when the file's stat key and header line are unchanged (the header holds
        the version, unique per write, and the checksum), so an unchanged file is not parsed again.
        """
        try:
            stream = open(path, "rb")  # noqa: SIM115 (a `with` follows at once)
        except FileNotFoundError:
            return None
        with stream:
            key = _stat_key(os.fstat(stream.fileno()))
            if self._expired(key.mtime_ns):
                return None
            line = _read_header_line(stream)
            cached = self._cached(path.name)
            if cached is not None and cached.key == key and cached.header == line:
                return cached
            body = stream.read()
        header = _parse_header(line, session_id, path)
        snapshot = _Snapshot(line, key, tuple(_decode_body(body, header, path)), header.version, (body,))
        self._remember(path.name, snapshot)
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
        fields = {"format": _FORMAT, "session_id": session_id, "version": version, "count": count, "sha256": digest}
        line = _dumps(fields) + b"\n"
        key = _atomic_write(path, lambda stream: stream.writelines([line, *body]))
        self._remember(path.name, _Snapshot(line, key, messages, version, body))
        return version

    def _cached(self, name: str) -> _Snapshot | None:
        with self._cache_lock:
            snapshot = self._cache.get(name)
            if snapshot is not None:
                self._cache.move_to_end(name)
            return snapshot

    def _remember(self, name: str, snapshot: _Snapshot) -> None:
        with self._cache_lock:
            self._cache[name] = snapshot
            self._cache.move_to_end(name)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _forget(self, name: str) -> None:
        with self._cache_lock:
            self._cache.pop(name, None)


async def _awaited(result: Awaitable[Any]) -> Any:
    return await result


# Vector memory ---------------------------------------------------------------------------------------------------

_MEMBERS = {"header", "embeddings", "documents"}


def list_collections(directory: str | os.PathLike[str]) -> list[CollectionInfo]:
    """The vector collections stored in `directory` (its `<collection>.npz` files), sorted by name.

    Reads each file's header; a file that cannot be decoded raises `CorruptMemoryError`.
    """
    root = Path(directory)
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.glob("*.npz")):
        if not is_collection_name(path.stem):
            continue
        try:
            header = _read_collection(path.read_bytes())[0]
        except FileNotFoundError:  # deleted meanwhile
            continue
        except Exception as error:  # any failure to decode is damage, as in `FileVectorMemory`
            raise CorruptMemoryError(f"vector collection {str(path)!r} is corrupt: {error}") from None
        found.append(CollectionInfo(path.stem, header["metric"], header["dimension"]))
    return found


def _encode_collection(index: VectorIndex, stream: IO[bytes]) -> None:
    """Write the collection as an uncompressed `.npz`: JSON header, float32 embeddings, documents JSON."""
    header = _dumps({"format": _FORMAT, "dimension": index.dimension, "metric": index.metric, "count": len(index)})
    documents = _dumps(
        [
            {"id": doc_id, "content": content, "metadata": metadata}
            for doc_id, content, metadata in zip(index.ids, index.contents, index.metadata)
        ]
    )
    np.savez(
        stream,
        header=np.frombuffer(header, dtype=np.uint8),
        embeddings=np.ascontiguousarray(index.matrix, dtype=np.float32),
        documents=np.frombuffer(documents, dtype=np.uint8),
    )


def _read_collection(data: bytes) -> tuple[dict[str, Any], Any, Any]:
    """Open the `.npz` bytes: (header, embeddings array, documents JSON). Raises anything on damage."""
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        if set(archive.files) != _MEMBERS:
            raise ValueError(f"expected the arrays {sorted(_MEMBERS)}, found {sorted(archive.files)}")
        header_bytes, embeddings, documents_bytes = archive["header"], archive["embeddings"], archive["documents"]
    for blob in (header_bytes, documents_bytes):
        if blob.dtype != np.uint8 or blob.ndim != 1:
            raise ValueError("the JSON members must be flat uint8 arrays")
    header = _loads(header_bytes.tobytes())
    if not isinstance(header, dict) or header.keys() != {"format", "dimension", "metric", "count"}:
        raise ValueError("the header does not have the expected fields")
    if header["format"] != _FORMAT or type(header["format"]) is not int:
        raise ValueError(f"unknown format {header['format']!r}")
    dimension, count = header["dimension"], header["count"]
    if not (dimension is None or _is_int(dimension, 1)) or not _is_int(count, 0) or (count and dimension is None):
        raise ValueError("the header has a bad dimension or count")
    if header["metric"] not in ("cosine", "dot"):
        raise ValueError(f"unknown metric {header['metric']!r}")
    if embeddings.dtype != np.float32 or embeddings.shape != (count, dimension or 0):
        raise ValueError(f"embeddings are {embeddings.dtype}{embeddings.shape}, expected float32({count}, {dimension})")
    return header, embeddings, _loads(documents_bytes.tobytes())


def _build_index(header: dict[str, Any], embeddings: Any, documents: Any) -> VectorIndex:
    """Rebuild the index from decoded file contents, checking every document. Raises anything on damage."""
    metric = check_metric(header["metric"])
    index = VectorIndex(header["dimension"], metric)
    if not isinstance(documents, list) or len(documents) != header["count"]:
        raise ValueError("the documents do not match the header's count")
    ids, contents, metadata = [], [], []
    for item in documents:
        if not isinstance(item, dict) or item.keys() != {"id", "content", "metadata"}:
            raise ValueError("a document does not have the fields id, content, metadata")
        if not isinstance(item["content"], str) or not isinstance(item["metadata"], dict):
            raise ValueError(f"document {item['id']!r} has a bad content or metadata")
        ids.append(check_id(item["id"], "document id"))
        contents.append(item["content"])
        metadata.append(freeze_json(item["metadata"]))
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate document ids")
    if ids:
        vectors = as_matrix(embeddings, header["dimension"], metric)  # finite, non-zero for cosine
        index.upsert(DocumentBatch(ids=ids, contents=contents, metadata=metadata, vectors=vectors))
    return index


class FileVectorMemory(VectorMemory):
    """One vector collection in one crash-safe `.npz` file, searched in memory with an exact `VectorIndex`.

    Every operation first checks the file's stat and reloads it if another object or process changed it. The
    dimension and metric are stored in the file: reopening with another dimension raises
    `DimensionMismatchError`, with another metric `InvalidInputError`. Writers lock the file (see
    `FileChatMemory` for `lock_timeout`) and rewrite it whole, so each write costs O(collection size).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        dimension: int | None = None,
        metric: Metric = "cosine",
        lock_timeout: float | None = _DEFAULT_LOCK_TIMEOUT,
    ) -> None:
        self.path = Path(path).absolute()
        self._requested = check_dimension(dimension)
        self.metric = check_metric(metric)
        self.lock_timeout = lock_timeout
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._guard = threading.RLock()
        self._index = VectorIndex(self._requested, self.metric)
        self._key: _StatKey | None = None
        self._stored_dimension: int | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise InvalidInputError(f"{self.path.parent} is not a directory") from None
        with self._guard, self._writing():
            if self._refresh() is None or (self._requested is not None and self._stored_dimension is None):
                self._rewrite(lambda index: None)  # persist the collection with its dimension and metric

    def __repr__(self) -> str:
        return f"FileVectorMemory({str(self.path)!r}, dimension={self._index.dimension}, metric={self.metric!r})"

    @property
    def dimension(self) -> int | None:
        """The embedding dimension (None until the first store, by any object, fixes it)."""
        with self._guard:
            self._refresh()
            return self._index.dimension

    def store(self, documents: DocumentsIn) -> None:
        """Insert or replace documents by id; the whole batch is validated before the file is rewritten."""
        with self._guard, self._writing():
            self._refresh()
            batch = self._index.prepare(documents)
            require_utf8(batch)
            if batch.ids:
                self._rewrite(lambda index: index.upsert(batch))

    def search(
        self,
        embedding: Sequence[float],
        *,
        top_k: int = 4,
        threshold: float | None = None,
        filter: Filter | None = None,
    ) -> list[ScoredDocument]:
        """Exact top-k search over the current contents of the file."""
        with self._guard:
            self._refresh()
            return self._index.search(embedding, top_k=top_k, threshold=threshold, filter=filter)

    def get(self, ids: Iterable[str]) -> list[VectorDocument]:
        """Documents by id, in the order asked."""
        with self._guard:
            self._refresh()
            return self._index.get(ids)

    def delete(self, ids: Iterable[str]) -> None:
        """Delete documents by id; unknown ids are ignored (and nothing is written)."""
        wanted = check_ids(ids)
        with self._guard, self._writing():
            self._refresh()
            if any(doc_id in self._index.rows for doc_id in wanted):
                self._rewrite(lambda index: index.remove(wanted))

    def count(self) -> int:
        """The number of documents."""
        with self._guard:
            self._refresh()
            return len(self._index)

    def clear(self) -> None:
        """Delete every document (the dimension and metric stay)."""
        with self._guard, self._writing():
            self._refresh()
            if len(self._index):
                self._rewrite(lambda index: index.clear())

    def ids(self) -> list[str]:
        """The ids of every document, sorted."""
        with self._guard:
            self._refresh()
            return sorted(self._index.ids)

    def _writing(self) -> AbstractContextManager[None]:
        return _write_lock(self._lock_path, self.lock_timeout, f"vector collection {str(self.path)!r}")

    def _refresh(self) -> _StatKey | None:
        """Reload the file if it changed since it was last read or written (caller holds `_guard`).

        Returns the stat key of the file now loaded, None if there is no file.
        """
        try:
            if _stat_key(os.stat(self.path)) == self._key:
                return self._key
            with open(self.path, "rb") as stream:
                key = _stat_key(os.fstat(stream.fileno()))
                data = stream.read()
        except FileNotFoundError:  # deleted behind our back: an empty collection, recreated by the next write
            self._index, self._key, self._stored_dimension = VectorIndex(self._requested, self.metric), None, None
            return None
        self._index = self._decode(data)
        self._key = key
        return key

    def _decode(self, data: bytes) -> VectorIndex:
        try:
            header, embeddings, documents = _read_collection(data)
        except Exception as error:  # any failure to decode the bytes is damage, whatever the library raised
            raise CorruptMemoryError(f"vector collection {str(self.path)!r} is corrupt: {error}") from None
        if header["metric"] != self.metric:
            raise InvalidInputError(f"{self.path} holds a {header['metric']!r} collection, not {self.metric!r}")
        stored = header["dimension"]
        check_stored_dimension(stored, self._requested, f"vector collection {str(self.path)!r}")
        try:
            index = _build_index(header, embeddings, documents)
        except Exception as error:
            raise CorruptMemoryError(f"vector collection {str(self.path)!r} is corrupt: {error}") from None
        self._stored_dimension = stored
        if index.dimension is None and self._requested is not None:
            index = VectorIndex(self._requested, self.metric)
        return index

    def _rewrite(self, change: Callable[[VectorIndex], object]) -> None:
        """Apply `change` to the index and write it (caller holds the write lock and has just refreshed)."""
        try:
            change(self._index)
            floor = self._key.mtime_ns if self._key is not None else None
            self._key = _atomic_write(
                self.path, lambda stream: _encode_collection(self._index, stream), mtime_after=floor
            )
            self._stored_dimension = self._index.dimension
        except BaseException:  # the index may be ahead of the file: reload it on next use
            self._index, self._key = VectorIndex(self._requested, self.metric), None
            raise
