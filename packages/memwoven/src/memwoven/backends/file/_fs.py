"""What both file backends share: atomic replacement, writer locks, strict JSON, file identity."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, NamedTuple, NoReturn

import filelock

from memwoven.errors import (
    BackendUnavailableError,
)

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "FORMAT",
    "StatKey",
    "atomic_write",
    "awaited",
    "dumps",
    "is_int",
    "loads",
    "remove",
    "short",
    "stat_key",
    "write_lock",
]

FORMAT = 1
_LOCK_POLL_SECONDS = 0.002
DEFAULT_LOCK_TIMEOUT = 60.0


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
        _replace(temp, target)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp)
        raise
    _fsync_directory(target.parent)
    return key


def remove(target: Path) -> None:
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


async def awaited(result: Awaitable[Any]) -> Any:
    """Await `result` (to run a coroutine on a loop from another thread)."""
    return await result
