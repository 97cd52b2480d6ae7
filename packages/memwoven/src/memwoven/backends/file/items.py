"""`FileItemMemory`: an `ItemMemory` in a directory tree, one crash-safe, checksummed file per namespace.

Layout. Every namespace has a directory, nested label by label below the memory's directory, so the namespaces
under a prefix are exactly the subtree of the prefix's directory: `list`, `count` and `namespaces` read nothing
outside it. A label's directory is named ``=`` and the label's UTF-8 bytes, each byte outside ``a-z 0-9 _ -``
written ``%XX`` (upper-case hex). Upper-case letters are escaped too, so no two labels share a name even on a
case-insensitive file system ("A" is ``=%41``, "a" is ``=a``); ".", "..", "CON", separators and the NFC / NFD forms
of one text all get names of their own. A label whose name would pass `_MAX_NAME` characters is named ``#`` and
the SHA-256 of its UTF-8 bytes instead (labels go up to 64 KiB, far beyond a file name). Paths stay short: labels
past the `_MAX_DEPTH`-th are not nested further, a namespace that long lives in ``+`` and the SHA-256 of its
remaining labels, inside the directory of its first `_MAX_DEPTH`; listing a prefix longer than that reads the
header lines (the namespaces, not the items) of the namespaces sharing the prefix's first `_MAX_DEPTH` labels.

A namespace's directory holds ``items.jsonl``, its items; ``lock``, the lock file of its writers; briefly
``items.jsonl.tmp`` while a writer replaces the file; and the directories of the namespaces one label longer.
Directories are never removed, and a namespace whose last item goes keeps a file with no items: it holds the
namespace's version floor (below). Deleting a namespace's directory by hand is safe (with no writer running).

The file (format 1): a JSON header line ``{"format": 1, "namespace": [labels], "floor": F, "count": N,
"expires_first": ms | null, "expires_last": ms | null, "sha256": ...}``, then N lines, one item each:
``{"key", "value", "version", "created_ms", "updated_ms", "expires_ms", "ttl"}`` (times in epoch milliseconds,
``expires_ms`` null: never). The digest is the SHA-256 of the header's other fields (compact UTF-8 JSON, in that
order), a newline, then the item lines. The namespace in the header is checked against the directory holding the
file. `floor` is the largest version the namespace ever gave an item, deleted ones included: a write's version is
`next_version(floor)`, so a version is never reused, even if the wall clock steps back. ``expires_first`` is the
earliest expiry of its items, ``expires_last`` when its last item expires (null if one never does): `namespaces`
and `cleanup_expired` decide from the header alone.

Writes. Writers take the locks of the namespaces they touch (a thread lock in this process, then a `filelock`
across processes; several in one fixed order, the namespaces' paths sorted), read each file afresh, check every
expected version (`ConcurrentModificationError` before anything is written), then write each new file to its temp
file and fsync it, and only then rename them over their targets (and fsync the directories). So a `put_many` is
all or nothing for compare-and-set and for any failure while writing (a full disk): nothing is renamed until every
file is written. A crash (a kill, a power loss) in the middle of the renames of a batch spanning namespaces can
leave the first namespaces written and the others not: each namespace's file is atomic, a batch is atomic per
namespace. Readers take no lock and see each file whole, old or new; a batch spanning namespaces becomes visible
namespace by namespace.

Reads. A file is decoded once and cached (at most `cache_size` namespaces) while its stat and header line (which
holds the checksum) are unchanged. A file that fails to decode, or fails its checksum, raises `CorruptMemoryError`
in every operation reaching that namespace (`namespaces` reads header lines only, so a damaged item line shows in
the reads of its namespace); other namespaces are unaffected. Restore or delete the file to repair it.

Expiry is measured on `memwoven._clock.wall_ms()`: an item whose ``expires_ms`` is not after now reads as absent
everywhere, version 0 included, until `cleanup_expired()` deletes it. A write costs a rewrite of its namespace's
file, O(namespace size). The async twins run each operation's file work in a worker thread.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Concatenate, NamedTuple, ParamSpec, TypeVar

import memwoven._clock as _clock
from memwoven._cache import LRUCache
from memwoven._durable import fsync_directory
from memwoven._steps import Call, Steps, async_twin
from memwoven.backends._items import check_stored_item, ttl_milliseconds
from memwoven.backends.file._fs import (
    DEFAULT_LOCK_TIMEOUT,
    FORMAT,
    CancellableThreads,
    Staged,
    StatKey,
    check_cancelled,
    check_lock_timeout,
    checksum,
    dumps,
    is_int,
    loads,
    open_versioned,
    parse_header,
    write_locks,
)
from memwoven.contracts import (
    MAX_ID_BYTES,
    CheckedWrite,
    ItemAddress,
    ItemMemory,
    ItemQuery,
    Namespace,
    check_expected,
    check_id,
    check_namespace,
    next_version,
)
from memwoven.errors import CorruptMemoryError, InvalidInputError
from memwoven.models import FrozenDict, Item, freeze_json

__all__ = ["FileItemMemory"]

_ITEMS = "items.jsonl"
_LOCK = "lock"
_MAX_DEPTH = 8  # labels nested as directories; the rest of a longer namespace is hashed into one
_MAX_NAME = 96  # characters of an encoded label name; a longer one is hashed
_LABEL_DIRECTORY = "=#+"  # the first character of a namespace directory's name
_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")
_BYTE_NAMES = tuple(chr(byte) if byte in _SAFE else f"%{byte:02X}" for byte in range(256))
# A header's namespace: at most 64 KiB of labels, each byte JSON-escaped in at most 6, plus quotes and commas.
_MAX_HEADER_BYTES = 10 * MAX_ID_BYTES + 4096
_HEADER_FIELDS = ("format", "namespace", "floor", "count", "expires_first", "expires_last")
_ITEM_FIELDS = frozenset({"key", "value", "version", "created_ms", "updated_ms", "expires_ms", "ttl"})

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _label_name(label: str) -> str:
    """The directory name of a label (see the module's documentation)."""
    data = label.encode("utf-8")
    name = "".join([_BYTE_NAMES[byte] for byte in data])
    return "=" + name if len(name) <= _MAX_NAME else "#" + hashlib.sha256(data).hexdigest()


def _parts(namespace: Namespace) -> tuple[str, ...]:
    """The path of a namespace's (or a prefix's) directory below the memory's, as names."""
    names = tuple(_label_name(label) for label in namespace[:_MAX_DEPTH])
    if len(namespace) <= _MAX_DEPTH:
        return names
    return (*names, "+" + hashlib.sha256(dumps(namespace[_MAX_DEPTH:])).hexdigest())


class _Entry(NamedTuple):
    """An item as stored: the `Item`, its times in epoch ms and its line in the file."""

    item: Item
    created_ms: int
    updated_ms: int
    expires_ms: int | None
    line: bytes

    def alive(self, now: int) -> bool:
        return self.expires_ms is None or self.expires_ms > now


def _entry(
    namespace: Namespace,
    key: str,
    value: dict[str, Any],
    version: int,
    created_ms: int,
    updated_ms: int,
    expires_ms: int | None,
    ttl: float | None,
) -> _Entry:
    item = Item.model_construct(
        namespace=namespace,
        key=key,
        value=value,
        version=version,
        created_at=_clock.utc(created_ms),
        updated_at=_clock.utc(updated_ms),
        expires_at=None if expires_ms is None else _clock.utc(expires_ms),
        ttl=ttl,
    )
    fields = {
        "key": key,
        "value": value,
        "version": version,
        "created_ms": created_ms,
        "updated_ms": updated_ms,
        "expires_ms": expires_ms,
        "ttl": ttl,
    }
    return _Entry(item, created_ms, updated_ms, expires_ms, dumps(fields) + b"\n")


class _Header(NamedTuple):
    namespace: Namespace
    floor: int
    item_count: int
    expires_first: int | None
    expires_last: int | None
    digest: str

    def alive(self, now: int) -> bool:
        """Whether the namespace holds a live item at `now`."""
        return self.item_count > 0 and (self.expires_last is None or self.expires_last > now)


@dataclass(frozen=True)
class _Snapshot:
    """A namespace's file as decoded, valid while the file's stat key and header line are unchanged."""

    header_line: bytes
    key: StatKey
    header: _Header
    entries: dict[str, _Entry]  # never changed once made: a write makes a new snapshot

    def live(self, key: str, now: int) -> _Entry | None:
        entry = self.entries.get(key)
        return entry if entry is not None and entry.alive(now) else None


def _expiry_bounds(entries: Iterable[_Entry]) -> tuple[int | None, int | None]:
    """(earliest expiry, when the last item expires: None if one never does) of a namespace's items."""
    expiries = [entry.expires_ms for entry in entries]
    timed = [moment for moment in expiries if moment is not None]
    first = min(timed, default=None)
    last = max(timed) if timed and len(timed) == len(expiries) else None
    return first, last


def _file_work(
    method: Callable[Concatenate[FileItemMemory, _P], _T],
) -> Callable[Concatenate[FileItemMemory, _P], Steps[_T]]:
    """A hook written as plain file code, made one step: a call of `FileItemMemory._disk` (which the async
    twins run in a worker thread)."""

    @functools.wraps(method)
    def steps(self: FileItemMemory, /, *args: _P.args, **kwargs: _P.kwargs) -> Steps[_T]:
        result: _T = yield Call(self, "_disk", (functools.partial(method, self, *args, **kwargs),))
        return result

    return steps


class FileItemMemory(CancellableThreads, ItemMemory):
    """Items in a directory tree, one crash-safe, checksummed file per namespace; safe across processes (see the
    module's documentation for the layout and what is atomic).

    A writer waits at most `lock_timeout` seconds (None: forever) for each namespace's lock, then raises
    `BackendUnavailableError`. Decoded namespaces are cached while their file is unchanged (`cache_size` of them
    at most).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
        cache_size: int = 64,
    ) -> None:
        lock_timeout = check_lock_timeout(lock_timeout)
        self._cache: LRUCache[str, _Snapshot] = LRUCache(cache_size)
        self.directory = Path(directory).absolute()
        self._root = str(self.directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise InvalidInputError(f"{self.directory} is not a directory") from None
        self.lock_timeout = lock_timeout

    def __repr__(self) -> str:
        return f"FileItemMemory({str(self.directory)!r})"

    def path_of(self, namespace: Sequence[str]) -> Path:
        """The file that holds (or would hold) a namespace's items."""
        return Path(self._directory_of(check_namespace(namespace)), _ITEMS)

    def close(self) -> None:
        """Drop the cache (there is nothing else to release)."""
        self._cache.clear()

    def _disk(self, work: Callable[[], _T]) -> _T:
        """Do one operation's file work (the one step of every hook)."""
        return work()

    _adisk = async_twin(_disk)

    # The hooks of `ItemMemory` -----------------------------------------------------------------------------

    @_file_work
    def _read(self, addresses: Sequence[ItemAddress], refresh: bool) -> builtins.list[Item | None]:
        snapshots = {namespace: self._load(namespace) for namespace in dict.fromkeys(ns for ns, _ in addresses)}
        now = _clock.wall_ms()
        if refresh:
            stale = {
                namespace
                for namespace, key in addresses
                if (live := _live(snapshots[namespace], key, now)) is not None and live.item.ttl is not None
            }
            if stale:
                snapshots.update(self._refresh(stale, {(ns, key) for ns, key in addresses if ns in stale}))
                now = _clock.wall_ms()
        found = [_live(snapshots[namespace], key, now) for namespace, key in addresses]
        return [None if entry is None else entry.item for entry in found]

    @_file_work
    def _write(self, writes: Sequence[CheckedWrite]) -> builtins.list[int]:
        by_namespace: dict[Namespace, list[CheckedWrite]] = {}
        for write in writes:
            by_namespace.setdefault(write.namespace, []).append(write)
        for namespace in by_namespace:
            self._make_directory(namespace)
        with self._locked(by_namespace):
            snapshots = {namespace: self._load(namespace) for namespace in by_namespace}
            now = _clock.wall_ms()
            for namespace, key, _, _, expected in writes:
                found = _live(snapshots[namespace], key, now)
                check_expected(namespace, key, 0 if found is None else found.item.version, expected)
            versions: dict[tuple[Namespace, str], int] = {}
            changes = {}
            for namespace, batch in by_namespace.items():
                snapshot = snapshots[namespace]
                floor = 0 if snapshot is None else snapshot.header.floor
                entries = {} if snapshot is None else dict(snapshot.entries)
                for _, key, value, ttl, _ in batch:
                    floor = next_version(floor)  # beyond every version this namespace gave: never reused
                    found = _live(snapshot, key, now)
                    previous = entries.get(key)  # IM3: updated_at grows with every write, even within 1 ms
                    written = now if previous is None else max(now, previous.updated_ms + 1)
                    created = written if found is None else found.created_ms
                    expires = None if ttl is None else written + ttl_milliseconds(ttl)
                    entries[key] = _entry(namespace, key, value, floor, created, written, expires, ttl)
                    versions[namespace, key] = floor
                changes[namespace] = (floor, entries)
            self._commit(changes)
        return [versions[write.namespace, write.key] for write in writes]

    @_file_work
    def _delete_items(self, addresses: Sequence[ItemAddress], expected: int | None) -> int:
        by_namespace: dict[Namespace, list[str]] = {}
        for namespace, key in addresses:
            by_namespace.setdefault(namespace, []).append(key)
        stored = [
            namespace
            for namespace in by_namespace
            if os.path.exists(os.path.join(self._directory_of(namespace), _ITEMS))
        ]
        with self._locked(stored):
            snapshots = {namespace: self._load(namespace) for namespace in stored}
            now = _clock.wall_ms()
            if expected is not None:
                namespace, key = addresses[0]
                found = _live(snapshots.get(namespace), key, now)
                check_expected(namespace, key, 0 if found is None else found.item.version, expected)
            existed = 0
            changes = {}
            for namespace, snapshot in snapshots.items():
                if snapshot is None or not any(key in snapshot.entries for key in by_namespace[namespace]):
                    continue
                entries = dict(snapshot.entries)
                for key in by_namespace[namespace]:
                    entry = entries.pop(key, None)
                    existed += entry is not None and entry.alive(now)
                changes[namespace] = (snapshot.header.floor, entries)
            self._commit(changes)
        return existed

    @_file_work
    def _select(self, query: ItemQuery) -> builtins.list[Item]:
        now = _clock.wall_ms()
        found = []
        for directory in self._directories_under(query.prefix):
            snapshot = self._load_at(directory, None, query.prefix)
            if snapshot is not None:
                found += [entry.item for entry in snapshot.entries.values() if entry.alive(now)]
        return query.answer(found)

    @_file_work
    def _stored_namespaces(self, prefix: Namespace) -> builtins.list[Namespace]:
        now = _clock.wall_ms()
        found = []
        for directory in self._directories_under(prefix):
            header = self._read_header(directory)
            if header is not None and header.namespace[: len(prefix)] == prefix and header.alive(now):
                found.append(header.namespace)
        return found

    @_file_work
    def _expire(self) -> int:
        removed = 0
        for directory in self._directories_under(()):
            header = self._read_header(directory)
            if header is None or header.expires_first is None or header.expires_first > _clock.wall_ms():
                continue
            namespace = header.namespace
            with self._locked([namespace]):
                snapshot = self._load(namespace)
                if snapshot is None:
                    continue
                now = _clock.wall_ms()
                entries = {key: entry for key, entry in snapshot.entries.items() if entry.alive(now)}
                if len(entries) < len(snapshot.entries):
                    removed += len(snapshot.entries) - len(entries)
                    self._commit({namespace: (snapshot.header.floor, entries)})
        return removed

    # Files -------------------------------------------------------------------------------------------------

    def _directory_of(self, namespace: Namespace) -> str:
        return os.path.join(self._root, *_parts(namespace))

    def _make_directory(self, namespace: Namespace) -> None:
        directory = self._directory_of(namespace)
        missing = []  # the directories made here, deepest first: each one's entry in its parent made durable
        path = Path(directory)
        while not path.exists() and path != self.directory:
            missing.append(path)
            path = path.parent
        try:
            os.makedirs(directory, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise CorruptMemoryError(
                f"namespace {namespace!r:.200} is corrupt: {directory} is not a directory"
            ) from None
        for made in reversed(missing):
            fsync_directory(made.parent)

    def _locked(self, namespaces: Iterable[Namespace]) -> AbstractContextManager[None]:
        """Hold the writer locks of `namespaces` (taken in the order of their paths, the same in every process)."""
        ordered = sorted((_parts(namespace), namespace) for namespace in namespaces)
        what = "namespace " + ", ".join(f"{namespace!r:.200}" for _, namespace in ordered[:3])
        return write_locks([Path(self._root, *parts, _LOCK) for parts, _ in ordered], self.lock_timeout, what)

    def _directories_under(self, prefix: Namespace) -> Iterator[str]:
        """The directories holding a namespace file that may start with `prefix` (only those of the namespaces
        starting with it, but for the deep ones sharing its first `_MAX_DEPTH` labels when it is longer)."""
        wanted = "+" if len(prefix) > _MAX_DEPTH else _LABEL_DIRECTORY
        pending = [self._directory_of(prefix[:_MAX_DEPTH])]
        while pending:
            directory = pending.pop()
            holds_items = False
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        if entry.name[:1] in wanted and entry.is_dir(follow_symlinks=False):
                            pending.append(entry.path)
                        # by POSIX, a listing racing a writer's rename over the file may show its name twice
                        holds_items = holds_items or entry.name == _ITEMS
            except FileNotFoundError:
                continue
            except NotADirectoryError:  # memwoven only makes directories there: the tree was damaged
                raise CorruptMemoryError(f"{directory!r}: a file stands where a namespace's directory should") from None
            if holds_items and directory != self._root:
                yield directory

    def _load(self, namespace: Namespace) -> _Snapshot | None:
        """The decoded file of `namespace` (None if it has none)."""
        return self._load_at(self._directory_of(namespace), namespace, namespace)

    def _load_at(self, directory: str, namespace: Namespace | None, prefix: Namespace) -> _Snapshot | None:
        """The decoded file in `directory` (None if absent, or if its namespace does not start with `prefix`).

        With `namespace`, the file must hold that one. The snapshot comes from the cache when the file's stat key
        and header line are unchanged (the header holds the checksum), so an unchanged file is not decoded again.
        """
        path = os.path.join(directory, _ITEMS)
        opened = open_versioned(path)
        if opened is None:
            return None
        stream, key = opened
        with stream:
            line = stream.readline(_MAX_HEADER_BYTES)
            cached = self._cache.get(directory)
            if cached is not None and cached.key == key and cached.header_line == line:
                return cached if cached.header.namespace[: len(prefix)] == prefix else None
            header = self._parse_header(line, directory, namespace)
            if header.namespace[: len(prefix)] != prefix:
                return None
            body = stream.read()
        snapshot = _Snapshot(line, key, header, _decode_items(header, body, path))
        self._cache.put(directory, snapshot)
        return snapshot

    def _read_header(self, directory: str) -> _Header | None:
        """The header of the file in `directory` (None if there is none), without reading its items."""
        try:
            with open(os.path.join(directory, _ITEMS), "rb") as stream:
                line = stream.readline(_MAX_HEADER_BYTES)
        except FileNotFoundError:
            return None
        cached = self._cache.get(directory)
        return (
            cached.header
            if cached is not None and cached.header_line == line
            else self._parse_header(line, directory, None)
        )

    def _parse_header(self, line: bytes, directory: str, namespace: Namespace | None) -> _Header:
        """Decode and check a header line: its fields, and that it belongs in `directory` (and to `namespace`)."""
        path = os.path.join(directory, _ITEMS)
        raw = parse_header(line, _HEADER_FIELDS, lambda reason: _corrupt(namespace, path, reason))
        try:
            stored = check_namespace(raw["namespace"]) if isinstance(raw["namespace"], list) else None
        except InvalidInputError:
            stored = None
        first, last = raw["expires_first"], raw["expires_last"]
        if stored is None or not is_int(raw["floor"], 0) or not is_int(raw["count"], 0):
            raise _corrupt(namespace, path, "the header has a bad namespace, floor or count")
        if not all(moment is None or is_int(moment, 0) for moment in (first, last)):
            raise _corrupt(namespace, path, "the header has bad expiry times")
        if namespace is not None and stored != namespace:
            raise _corrupt(namespace, path, f"the file holds namespace {stored!r:.200}")
        if self._directory_of(stored) != directory:
            raise _corrupt(stored, path, "the file is not in the directory of the namespace it holds")
        return _Header(stored, raw["floor"], raw["count"], first, last, raw["sha256"])

    def _refresh(
        self, namespaces: Iterable[Namespace], addresses: set[tuple[Namespace, str]]
    ) -> dict[Namespace, _Snapshot | None]:
        """Move the expiry of the live items at `addresses` that have a ttl to now + ttl; the new snapshots."""
        namespaces = builtins.list(namespaces)
        with self._locked(namespaces):
            snapshots = {namespace: self._load(namespace) for namespace in namespaces}
            now = _clock.wall_ms()
            changes = {}
            for namespace, snapshot in snapshots.items():
                if snapshot is None:
                    continue
                entries = dict(snapshot.entries)
                for key, entry in snapshot.entries.items():
                    item, ttl = entry.item, entry.item.ttl
                    if (namespace, key) in addresses and ttl is not None and entry.alive(now):
                        expires = now + ttl_milliseconds(ttl)
                        entries[key] = _entry(
                            namespace, key, item.value, item.version, entry.created_ms, entry.updated_ms, expires, ttl
                        )
                if entries != snapshot.entries:
                    changes[namespace] = (snapshot.header.floor, entries)
            return {**snapshots, **self._commit(changes)}

    def _commit(self, changes: dict[Namespace, tuple[int, dict[str, _Entry]]]) -> dict[Namespace, _Snapshot]:
        """Write the namespaces' new files (their floors and items; the caller holds their locks): every file is
        staged (written and fsynced) before any is renamed over its target. The new snapshots, cached."""
        staged: list[tuple[Namespace, Staged, _Snapshot]] = []
        try:
            for namespace, (floor, entries) in changes.items():
                first, last = _expiry_bounds(entries.values())
                lines = [entry.line for entry in entries.values()]
                fields = dict(zip(_HEADER_FIELDS, (FORMAT, namespace, floor, len(entries), first, last)))
                digest = checksum(fields, lines)
                header_line = dumps({**fields, "sha256": digest}) + b"\n"
                directory = self._directory_of(namespace)
                target = Path(directory, _ITEMS)
                written = Staged.write(target, functools.partial(_write_lines, [header_line, *lines]))
                header = _Header(namespace, floor, len(entries), first, last, digest)
                staged.append((namespace, written, _Snapshot(header_line, written.key, header, entries)))
            check_cancelled()  # before the first rename: all the files are committed, or none
        except BaseException:
            for _, written, _ in staged:
                written.discard()
            raise
        committed = {}
        try:
            for namespace, written, snapshot in staged:
                written.commit()
                self._cache.put(str(written.target.parent), snapshot)
                committed[namespace] = snapshot
        except BaseException:
            for namespace, written, _ in staged:
                if namespace not in committed:
                    written.discard()
                    self._cache.drop(str(written.target.parent))
            raise
        return committed


def _write_lines(lines: list[bytes], stream: IO[bytes]) -> None:
    stream.writelines(lines)


def _live(snapshot: _Snapshot | None, key: str, now: int) -> _Entry | None:
    return None if snapshot is None else snapshot.live(key, now)


def _corrupt(namespace: Namespace | None, path: str | Path, reason: str) -> CorruptMemoryError:
    what = "a namespace" if namespace is None else f"namespace {namespace!r:.200}"
    return CorruptMemoryError(f"{what} is corrupt: {reason} (file {path})")


def _decode_items(header: _Header, body: bytes, path: str) -> dict[str, _Entry]:
    """Check a file's body against its header (checksum, count, expiry bounds) and decode its items."""
    namespace = header.namespace
    lines = body.split(b"\n")
    if lines.pop() != b"" or len(lines) != header.item_count:  # every line, the last included, ends with a newline
        raise _corrupt(namespace, path, f"expected {header.item_count} item lines")
    lines = [line + b"\n" for line in lines]
    fields = dict(zip(_HEADER_FIELDS, (FORMAT, namespace, header.floor, header.item_count, *header[3:5])))
    if checksum(fields, lines) != header.digest:
        raise _corrupt(namespace, path, "checksum mismatch (the file was truncated or altered)")
    entries: dict[str, _Entry] = {}
    for line in lines:
        try:
            entry = _decode_item(namespace, line, header.floor)
        except (ValueError, TypeError, InvalidInputError, OverflowError) as error:  # OverflowError: a time too far
            raise _corrupt(namespace, path, f"an undecodable item ({error})") from None
        if entries.setdefault(entry.item.key, entry) is not entry:
            raise _corrupt(namespace, path, f"item {entry.item.key!r:.200} is stored twice")
    if _expiry_bounds(entries.values()) != (header.expires_first, header.expires_last):
        raise _corrupt(namespace, path, "the header's expiry times do not match the items")
    return entries


def _decode_item(namespace: Namespace, line: bytes, floor: int) -> _Entry:
    """One item line, checked (`ValueError`, `TypeError`, `InvalidInputError` or, for a time beyond `datetime`'s
    range, `OverflowError` if it is no valid item)."""
    raw = loads(line)
    if not isinstance(raw, dict) or raw.keys() != _ITEM_FIELDS:
        raise ValueError("not an object with the item fields")
    key, value, ttl, expires = check_id(raw["key"], "item key"), raw["value"], raw["ttl"], raw["expires_ms"]
    if not isinstance(value, dict):
        raise ValueError("the value is not a JSON object")
    if not is_int(raw["version"], 1) or raw["version"] > floor:
        raise ValueError("a bad version")
    if not is_int(raw["created_ms"], 0) or not is_int(raw["updated_ms"], 0):
        raise ValueError("bad times")
    if not (ttl is None or type(ttl) is float) or not (expires is None or is_int(expires, 0)):
        raise ValueError("a bad ttl or expiry")
    check_stored_item(raw["version"], expires, ttl)
    frozen: FrozenDict = freeze_json(value)
    return _entry(namespace, key, frozen, raw["version"], raw["created_ms"], raw["updated_ms"], expires, ttl)
