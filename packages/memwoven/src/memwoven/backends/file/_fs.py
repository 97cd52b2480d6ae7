"""What the file backends share: atomic replacement (one file, or several staged then committed), writer locks,
strict JSON, file identity."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import IO, Any, NamedTuple, NoReturn, ParamSpec, TypeVar

import filelock

from memwoven._durable import fsync_directory
from memwoven.backends._cancel import current, in_thread
from memwoven.errors import (
    BackendUnavailableError,
    CorruptMemoryError,
    InvalidInputError,
)

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "FORMAT",
    "CancellableThreads",
    "Staged",
    "StatKey",
    "atomic_write",
    "check_cancelled",
    "check_lock_timeout",
    "checksum",
    "dumps",
    "is_int",
    "loads",
    "open_versioned",
    "parse_header",
    "remove",
    "short",
    "stat_key",
    "write_lock",
    "write_locks",
]

_T = TypeVar("_T")
_P = ParamSpec("_P")

FORMAT = 1
_DIGEST = re.compile(r"[0-9a-f]{64}")
_LOCK_POLL_SECONDS = 0.002
DEFAULT_LOCK_TIMEOUT = 60.0


def check_lock_timeout(lock_timeout: float | None) -> float | None:
    """Validate a file backend's `lock_timeout`: None (wait forever) or a number of seconds >= 0."""
    if lock_timeout is not None and (
        isinstance(lock_timeout, bool) or not isinstance(lock_timeout, (int, float)) or not lock_timeout >= 0
    ):
        raise InvalidInputError(f"lock_timeout must be None or a number of seconds >= 0, got {lock_timeout!r}")
    return lock_timeout


# ----------------------------------------------------------------------------------------


class StatKey(NamedTuple):
    """What identifies one version of a file: files are only ever replaced whole, never edited in place."""

    device: int
    inode: int
    size: int
    mtime_ns: int


def stat_key(stat: os.stat_result) -> StatKey:
    return StatKey(stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


# One process-wide set of thread locks, picked by lock path: threads of this process queue on them without
# polling (and two memory objects over the same files share them), while `filelock` excludes other processes.
_THREAD_LOCKS = tuple(threading.Lock() for _ in range(64))


@contextmanager
def write_lock(lock_path: Path, timeout: float | None, what: str) -> Iterator[None]:
    """Hold the exclusive writer lock of one file, in this process and across processes."""
    with write_locks([lock_path], timeout, what):
        yield


@contextmanager
def write_locks(lock_paths: Sequence[Path], timeout: float | None, what: str) -> Iterator[None]:
    """Hold the writer locks of several files at once, taken in a fixed order so that writers never deadlock.

    The thread locks come first, in slot order (two paths may share a slot: it is taken once), then the file
    locks, in the order of `lock_paths` (every caller must sort them the same way). `timeout` bounds each wait.
    """
    wait = -1.0 if timeout is None else timeout
    slots = sorted({hash(str(path)) % len(_THREAD_LOCKS) for path in lock_paths})
    with ExitStack() as held:
        for slot in slots:
            thread_lock = _THREAD_LOCKS[slot]
            if not thread_lock.acquire(timeout=wait):
                raise BackendUnavailableError(f"{what} is locked by another writer (waited {timeout} s)")
            held.callback(thread_lock.release)
        for path in lock_paths:
            file_lock = filelock.FileLock(str(path))
            try:
                file_lock.acquire(timeout=wait, poll_interval=_LOCK_POLL_SECONDS)
            except filelock.Timeout:
                raise BackendUnavailableError(f"{what} is locked by another process (waited {timeout} s)") from None
            held.callback(file_lock.release)
        yield


def open_versioned(path: str | Path) -> tuple[IO[bytes], StatKey] | None:
    """Open `path` for reading, with the stat key of the version opened (None if there is no file). Files are only
    ever replaced whole, so what the stream reads is that version, whatever writers do meanwhile."""
    try:
        stream = open(path, "rb")  # noqa: SIM115 (the caller closes it)
    except FileNotFoundError:
        return None
    except NotADirectoryError:  # memwoven only makes directories there: the tree was damaged
        raise CorruptMemoryError(f"{str(path)!r}: a file stands where a directory of its path should be") from None
    return stream, stat_key(os.fstat(stream.fileno()))


def _replace(source: Path, target: Path) -> None:
    """`os.replace`, retried briefly on Windows where a reader holding the target open makes it fail."""
    for _ in range(50 if os.name == "nt" else 0):
        try:
            os.replace(source, target)
        except PermissionError:
            time.sleep(0.02)
        else:
            return
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


def atomic_write(target: Path, write: Callable[[IO[bytes]], None], *, mtime_after: int | None = None) -> StatKey:
    """Replace `target` with what `write` produces: temp file, flush, fsync, rename, fsync the directory.

    The caller holds the target's write lock, so the temporary name can be fixed: a crash leaves at most one stale
    temp file, which the next writer truncates. With `mtime_after`, the new file's mtime is made strictly later,
    so every version of the file has its own stat key. Returns the stat key of the new file.
    """
    staged = Staged.write(target, write, mtime_after=mtime_after)
    try:
        check_cancelled()
    except BaseException:
        staged.discard()
        raise
    staged.commit()
    return staged.key


class Staged(NamedTuple):
    """A replacement of `target` written in full and fsynced to its temp file, not yet renamed over it: a writer
    of several files stages them all, then commits them, so that a failure to write any leaves every file as it
    was (`discard`)."""

    target: Path
    temp: Path
    key: StatKey
    """The stat key the target will have once committed."""

    @classmethod
    def write(cls, target: Path, write: Callable[[IO[bytes]], None], *, mtime_after: int | None = None) -> Staged:
        """Write the temp file of `target` (see `atomic_write`; the caller holds the target's write lock)."""
        temp = target.with_name(target.name + ".tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            with os.fdopen(os.open(temp, flags, 0o666), "wb") as stream:
                write(stream)
                stream.flush()
                if mtime_after is not None:
                    _set_mtime_after(temp, mtime_after)
                os.fsync(stream.fileno())
                key = stat_key(os.fstat(stream.fileno()))
        except BaseException:
            with suppress(OSError):
                os.unlink(temp)
            raise
        return cls(target, temp, key)

    def commit(self) -> None:
        """Rename the temp file over the target and make the rename durable."""
        try:
            _replace(self.temp, self.target)
        except BaseException:
            self.discard()
            raise
        fsync_directory(self.target.parent)

    def discard(self) -> None:
        """Delete the temp file (the target stays as it was)."""
        with suppress(OSError):
            os.unlink(self.temp)


def remove(target: Path) -> None:
    """Delete `target` (and any stale temp file) durably; a missing file is fine. Caller holds the write lock."""
    check_cancelled()
    with suppress(FileNotFoundError):
        os.unlink(target.with_name(target.name + ".tmp"))
    try:
        os.unlink(target)
    except FileNotFoundError:
        return
    fsync_directory(target.parent)


def checksum(fields: Mapping[str, Any], chunks: Iterable[bytes]) -> str:
    """The digest a checksummed file's header holds: SHA-256 of its other header fields (compact JSON, in order),
    a newline, then the body's chunks."""
    digest = hashlib.sha256(dumps(fields))
    digest.update(b"\n")
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def parse_header(line: bytes, fields: Collection[str], damaged: Callable[[str], Exception]) -> dict[str, Any]:
    """Decode the JSON header line of a checksummed file, checking its frame: a whole line holding an object with
    exactly `fields` and ``sha256`` (a SHA-256 hex digest), ``format`` being `FORMAT`. On failure, raises
    `damaged(reason)` (a `CorruptMemoryError` naming the file)."""
    if not line.endswith(b"\n"):
        raise damaged("the header line is truncated or missing")
    try:
        raw = loads(line)
    except ValueError as error:
        raise damaged(f"the header is not JSON ({error})") from None
    if not isinstance(raw, dict) or raw.keys() != {*fields, "sha256"}:
        raise damaged("the header does not have the expected fields")
    if raw.get("format") != FORMAT or type(raw["format"]) is not int:
        raise damaged(f"unknown format {raw.get('format')!r:.80}")
    if not isinstance(raw["sha256"], str) or not _DIGEST.fullmatch(raw["sha256"]):
        raise damaged("the header has a bad checksum field")
    return raw


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON value")


def loads(data: bytes) -> Any:
    """Strict JSON: UTF-8 only, and no NaN / Infinity."""
    return json.loads(data.decode("utf-8"), parse_constant=_reject_constant)


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def is_int(value: Any, minimum: int) -> bool:
    return type(value) is int and value >= minimum


def short(value: str, limit: int = 80) -> str:
    """`repr` of an id, shortened so a 64 KiB id does not flood an error message."""
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"


def check_cancelled() -> None:
    """Raise `Abandoned` if the async call this work runs for was cancelled: called right before a write commits
    (renames or deletes), so that a cancelled call writes nothing unless it had begun committing."""
    cancellation = current()
    if cancellation is not None:
        cancellation.check()


class CancellableThreads:
    """Mixin of the file backends: their async twins run the sync methods in a worker thread that carries the
    caller's `Cancellation` (`in_thread`), which `check_cancelled` reads before each write."""

    async def _off_loop(self, method: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """`Runner._off_loop`, the worker thread carrying the caller's cancellation."""
        return await in_thread(functools.partial(method, *args, **kwargs))
