"""A collection's index in a memory-mapped file, shared read-only by every process of a machine.

A backend that keeps a client-side index of a stored collection (the SQL vector backend) writes the collection's
live rows, as of one version of its change stream, to one file per state under a cache directory; a process
opening the collection maps the newest file of the same collection and generation instead of reading every row,
then applies the changes made after that version (`CachedIndex`: the mapped rows, minus those changed or deleted
since, plus a small private `VectorIndex` of the changed rows). The file is a cache, never the durable copy: it is
written to a temporary file, fsynced and renamed into place (a reader sees a whole file or none), and a file whose
header, size or checksums do not hold, that belongs to another database, collection, generation, metric or
dimension, or whose stamp the database does not vouch for (`newest`), is ignored (and a damaged one removed): the
backend then reads the database.

Layout (little-endian): a 4 KiB header (magic, the length and XXH3-64 hash of a JSON description, the
description), then the sections it lists, each with its offset, length and XXH3-64 hash, 4 KiB aligned: the
float32 matrix, the rows' inverse norms, the 64-bit hashes of the ids sorted (and the row of each), and for ids,
contents and metadata (JSON text) one UTF-8 blob each with int64 offsets. Ids, contents and metadata are decoded
only for the rows a search returns; an id is found by binary search over the hashes, then checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import mmap
import os
import struct
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import xxhash

from memwoven._durable import fsync_directory
from memwoven.contracts import DocumentsIn, Metric, check_ids
from memwoven.errors import CorruptMemoryError
from memwoven.models import FrozenDict, FrozenList, ScoredDocument, VectorDocument, freeze_json
from memwoven.vector_index import DocumentBatch, Matrix, Rows, SearchQuery, VectorIndex, best_rows, stored_scales

__all__ = [
    "CacheFile",
    "CacheWriter",
    "CachedIndex",
    "cache_identity",
    "default_cache_dir",
    "id_hashes",
    "newest",
    "remove_files",
    "writing",
]

logger = logging.getLogger(__name__)

_MAGIC = b"MWVCACH2"
_OLD_MAGICS = (b"MWVCACHE",)  # format 1: CRC-32 checksums; such a file is removed and rebuilt
# 3: a file names the stamp its database vouches for it by; 4: its rows are checked as `store` checks them (a file
# of format 3 may hold a damaged table's NaN, zero or overlong rows, under valid checksums)
_FORMAT = 4
_HEADER = 4096  # bytes before the first section
_ALIGN = 4096  # sections start on a page
_PREFIX = struct.Struct("<8sIQ")  # magic, JSON length, JSON XXH3-64
_SUFFIX = ".mwvc"
_TEXTS = ("ids", "contents", "metadata")


def default_cache_dir() -> Path:
    """The machine's cache directory for memwoven: ``$MEMWOVEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/memwoven``,
    else ``~/.cache/memwoven``."""
    chosen = os.environ.get("MEMWOVEN_CACHE_DIR")
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memwoven"


def cache_identity(*parts: str) -> str:
    """A file-name-safe identity of a stored collection, from the parts that name it (database token, key)."""
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:40]


def id_hashes(ids: Sequence[str]) -> npt.NDArray[np.uint64]:
    """The 64-bit hash of each id: the first 8 bytes (big-endian) of the SHA-256 of its UTF-8 bytes."""
    digests = b"".join(hashlib.sha256(i.encode("utf-8", "surrogatepass")).digest()[:8] for i in ids)
    return np.frombuffer(digests, dtype=">u8").astype(np.uint64)


def _temporary(identity: str) -> str:
    """The name prefix of a collection's files being written."""
    return f".tmp-{identity}-"


def _padding(size: int) -> int:
    return -size % _ALIGN


class CacheWriter:
    """Writes one cache file: `add` the live rows page by page (the matrix goes straight to the file), then
    `commit` names the version they reflect (or `abort`). Ids must be unique."""

    def __init__(self, directory: Path, identity: str, dimension: int, metric: Metric) -> None:
        self.directory, self.identity, self.dimension, self.metric = directory, identity, dimension, metric
        directory.mkdir(parents=True, exist_ok=True)
        descriptor, name = tempfile.mkstemp(dir=directory, prefix=_temporary(identity), suffix=_SUFFIX)
        self._path = Path(name)
        self._file: BinaryIO = os.fdopen(descriptor, "w+b")
        self._file.write(bytes(_HEADER))
        self._count = 0
        self._matrix_hash = xxhash.xxh3_64()
        self._norms: list[Matrix] = []
        self._hashes: list[npt.NDArray[np.uint64]] = []
        self._texts: dict[str, tuple[bytearray, list[int]]] = {name: (bytearray(), []) for name in _TEXTS}

    @property
    def count(self) -> int:
        """The rows added so far."""
        return self._count

    def add(
        self,
        ids: Sequence[str],
        contents: Sequence[str],
        metadata: Sequence[str],
        vectors: Matrix,
        hashes: npt.NDArray[np.uint64] | None = None,
    ) -> None:
        """Append rows: ids, contents, metadata as JSON text, their float32 vectors and (if known) `id_hashes`."""
        data = np.ascontiguousarray(vectors, dtype="<f4")
        if data.shape != (len(ids), self.dimension):
            raise ValueError(f"expected a ({len(ids)}, {self.dimension}) matrix, got {data.shape}")
        raw = data.data.cast("B")
        self._file.write(raw)
        self._matrix_hash.update(raw)
        self._norms.append(
            stored_scales(
                data, self.metric, lambda row, problem: CorruptMemoryError(f"document {ids[row]!r}: {problem}")
            )
        )
        self._hashes.append(id_hashes(ids) if hashes is None else hashes.astype(np.uint64))
        for name, values in zip(_TEXTS, (ids, contents, metadata)):
            blob, lengths = self._texts[name]
            for value in values:
                encoded = value.encode("utf-8", "surrogatepass")
                blob += encoded
                lengths.append(len(encoded))
        self._count += len(ids)

    def commit(self, generation: int, version: int, stamp: str) -> Path:
        """Finish the file as the collection's state at (`generation`, `version`), named by `stamp` (hex, which
        the database records for it: `newest`), fsync it and rename it into place; older files of the collection
        are removed, and so are its other temporary files: the writer holds `writing`, so those are left by
        writers that died. Returns its path."""
        count = self._count
        matrix = [_HEADER, count * self.dimension * 4, self._matrix_hash.intdigest()]
        sections: dict[str, list[int]] = {"matrix": matrix}
        self._file.write(bytes(_padding(_HEADER + sections["matrix"][1])))
        hashes = np.concatenate(self._hashes) if self._hashes else np.empty(0, np.uint64)
        order = np.argsort(hashes, kind="stable").astype("<i8")
        arrays: dict[str, Any] = {
            "norms": np.concatenate(self._norms) if self._norms else np.empty(0, np.float32),
            "hashes": hashes[order].astype("<u8"),
            "order": order,
        }
        for name in _TEXTS:
            blob, lengths = self._texts[name]
            offsets = np.zeros(count + 1, dtype="<i8")
            np.cumsum(lengths, out=offsets[1:])
            arrays[f"{name}_offsets"] = offsets
            arrays[name] = np.frombuffer(bytes(blob), dtype=np.uint8)
        for name, array in arrays.items():
            data = np.ascontiguousarray(array).data.cast("B")
            sections[name] = [self._file.tell(), len(data), xxhash.xxh3_64_intdigest(data)]
            self._file.write(data)
            self._file.write(bytes(_padding(len(data))))
        description = json.dumps(
            {
                "format": _FORMAT,
                "identity": self.identity,
                "generation": generation,
                "version": version,
                "stamp": stamp,
                "count": count,
                "dimension": self.dimension,
                "metric": self.metric,
                "size": self._file.tell(),
                "sections": sections,
            }
        ).encode()
        if _PREFIX.size + len(description) > _HEADER:
            raise ValueError("cache header too long")
        self._file.seek(0)
        self._file.write(_PREFIX.pack(_MAGIC, len(description), xxhash.xxh3_64_intdigest(description)) + description)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        path = self.directory / f"{self.identity}.{generation}.{version}.{stamp}{_SUFFIX}"
        os.replace(self._path, path)
        fsync_directory(self.directory)
        for older in _files(self.directory, self.identity):
            if older[:2] < (generation, version) or not older[2]:
                with contextlib.suppress(OSError):  # another process may have removed it first
                    older[3].unlink()
        for stale in self.directory.glob(f"{_temporary(self.identity)}*{_SUFFIX}"):
            with contextlib.suppress(OSError):
                stale.unlink()
        return path

    def abort(self) -> None:
        """Drop the unfinished file."""
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(OSError):
            self._path.unlink()


_held: set[tuple[int, int]] = set()  # (device, inode) of the lock files this process's loaders hold
_holding = threading.Lock()


@contextlib.contextmanager
def writing(directory: Path, identity: str, *, wait: bool) -> Iterator[bool]:
    """Hold the right to write a collection's file (an exclusive `flock` on ``<identity>.lock`` in `directory`,
    released when the block ends or the process dies): yields True once held, or False at once if another loader
    of this process holds it, or another process does and `wait` is False. Without `fcntl` (Windows), always True.
    """
    directory.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield True
        return
    descriptor = os.open(directory / f"{identity}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        status = os.fstat(descriptor)
        lock = (status.st_dev, status.st_ino)
        with _holding:
            free = lock not in _held
            if free:
                _held.add(lock)
        if not free:  # its holder may be a task of this thread's event loop, or wait for what this thread holds
            yield False
            return
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            with _holding:
                _held.discard(lock)
    finally:
        os.close(descriptor)


def _files(directory: Path, identity: str) -> list[tuple[int, int, str, Path]]:
    """(generation, version, stamp, path) of the collection's finished cache files, newest first; the stamp is
    "" for a file of format 2, named without one (never mapped: `commit` removes it)."""
    found = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    for path in entries:
        parts = path.name.split(".")
        if len(parts) == 4:
            parts.insert(3, "")
        if len(parts) == 5 and parts[0] == identity and "." + parts[4] == _SUFFIX:
            with contextlib.suppress(ValueError):
                found.append((int(parts[1]), int(parts[2]), parts[3], path))
    return sorted(found, reverse=True)


def remove_files(directory: Path, identity: str) -> None:
    """Remove a collection's cache files, finished or not, and its lock file (its tables were dropped)."""
    leftovers = [found[3] for found in _files(directory, identity)]
    leftovers += directory.glob(f"{_temporary(identity)}*{_SUFFIX}")
    for path in [*leftovers, directory / f"{identity}.lock"]:
        with contextlib.suppress(OSError):  # already gone, or another process's to remove
            path.unlink()


class CacheFile:
    """One mapped, checked cache file: the matrix, inverse norms and id hashes as read-only arrays over the
    mapping, ids, contents and metadata decoded one row at a time. `sections` maps each section's name to its
    (offset, length, XXH3-64)."""

    sections: dict[str, tuple[int, ...]]

    def __init__(self, path: Path, header: dict[str, Any], mapping: mmap.mmap) -> None:
        self.path = path
        self.generation: int = header["generation"]
        self.version: int = header["version"]
        self.stamp: str = header["stamp"]
        self.count: int = header["count"]
        self.dimension: int = header["dimension"]
        self._mapping = mapping
        sections = self.sections = {name: tuple(where) for name, where in header["sections"].items()}

        def array(name: str, dtype: str) -> Any:
            offset, length, _ = sections[name]
            kind = np.dtype(dtype)
            return np.frombuffer(mapping, dtype=kind, count=length // kind.itemsize, offset=offset)

        self.matrix: Matrix = array("matrix", "<f4").reshape(self.count, self.dimension)
        self.inverse_norms: Matrix = array("norms", "<f4")
        self._hashes = array("hashes", "<u8")
        self._order = array("order", "<i8")
        self._texts = {name: (array(f"{name}_offsets", "<i8"), array(name, "u1")) for name in _TEXTS}

    @classmethod
    def open(cls, path: Path, identity: str, dimension: int, metric: Metric) -> CacheFile | None:
        """The file mapped and checked (header, size, every section's XXH3-64, identity, metric, dimension), or
        None, logged, if it does not hold (a damaged file is removed)."""
        try:
            with path.open("rb") as file:
                size = os.fstat(file.fileno()).st_size
                if size < _HEADER:
                    raise ValueError(f"{size} bytes, shorter than a header")
                mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as error:
            logger.warning("vector cache %s unreadable (%s): reading the database instead", path, error)
            return None
        except ValueError as error:
            _discard(path, str(error))
            return None
        try:
            header = _check(mapping, size)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            mapping.close()
            _discard(path, str(error))
            return None
        if (header["identity"], header["dimension"], header["metric"]) != (identity, dimension, metric):
            mapping.close()  # another collection's (a hash collision of names) or other settings: not ours
            logger.warning("vector cache %s belongs to another collection or settings: ignored", path)
            return None
        return cls(path, header, mapping)

    def row_of(self, doc_ids: Sequence[str]) -> list[int | None]:
        """The row of each id, or None where the file does not hold it."""
        hashes = id_hashes(doc_ids)
        starts = np.searchsorted(self._hashes, hashes, side="left").tolist()
        found: list[int | None] = []
        for doc_id, wanted, start in zip(doc_ids, hashes.tolist(), starts):
            row = None
            position = start
            while position < self.count and int(self._hashes[position]) == wanted:
                candidate = int(self._order[position])
                if self.id(candidate) == doc_id:
                    row = candidate
                    break
                position += 1
            found.append(row)
        return found

    def text(self, name: str, row: int) -> str:
        """The id, content or metadata (JSON text) at `row`: `name` is "ids", "contents" or "metadata"."""
        offsets, blob = self._texts[name]
        return bytes(blob[offsets[row] : offsets[row + 1]]).decode("utf-8", "surrogatepass")

    def id(self, row: int) -> str:
        """The id at `row`."""
        return self.text("ids", row)

    def document(self, row: int) -> VectorDocument:
        """The document at `row`."""
        metadata = json.loads(self.text("metadata", row))
        return VectorDocument.model_construct(
            id=self.id(row),
            content=self.text("contents", row),
            embedding=FrozenList(self.matrix[row].tolist()),
            metadata=freeze_json(metadata),
        )

    def metadata(self) -> list[FrozenDict]:
        """Every row's metadata, decoded (for a filter)."""
        return [freeze_json(json.loads(self.text("metadata", row))) for row in range(self.count)]


def _check(mapping: mmap.mmap, size: int) -> dict[str, Any]:
    """The header of a mapped file, or ValueError (KeyError, TypeError, AttributeError) if anything does not hold."""
    magic, length, checksum = _PREFIX.unpack_from(mapping, 0)
    if magic in _OLD_MAGICS:
        raise ValueError("written by an older memwoven (format 1)")
    if magic != _MAGIC:
        raise ValueError("not a memwoven vector cache")
    description = mapping[_PREFIX.size : _PREFIX.size + length]
    if _PREFIX.size + length > _HEADER or xxhash.xxh3_64_intdigest(description) != checksum:
        raise ValueError("header checksum mismatch")
    header: dict[str, Any] = json.loads(description)
    if header["format"] != _FORMAT:
        raise ValueError(f"format {header['format']}, this memwoven reads {_FORMAT}")
    if header["size"] != size:
        raise ValueError(f"{size} bytes, the header says {header['size']} (truncated?)")
    count, dimension = header["count"], header["dimension"]
    expected = {"matrix": count * dimension * 4, "norms": count * 4, "hashes": count * 8, "order": count * 8}
    expected.update({f"{name}_offsets": (count + 1) * 8 for name in _TEXTS})
    view = memoryview(mapping)
    try:
        for name, (offset, length, expected_hash) in header["sections"].items():
            if name in expected and length != expected.pop(name):
                raise ValueError(f"section {name} has {length} bytes")
            if name in _TEXTS:
                expected.pop(name, None)
            if offset < _HEADER or offset + length > size:
                raise ValueError(f"section {name} out of the file")
            if xxhash.xxh3_64_intdigest(view[offset : offset + length]) != expected_hash:
                raise ValueError(f"section {name} checksum mismatch")
    finally:
        view.release()
    if expected:
        raise ValueError(f"sections missing: {sorted(expected)}")
    return header


def _discard(path: Path, reason: str) -> None:
    logger.warning("vector cache %s cannot be used (%s): removed, reading the database instead", path, reason)
    with contextlib.suppress(OSError):
        path.unlink()


def newest(
    directory: Path,
    identity: str,
    generation: int,
    dimension: int,
    metric: Metric,
    vouched: Mapping[str, tuple[int, int]],
) -> CacheFile | None:
    """The newest usable cache file of a collection at `generation` whose stamp the database vouches for, at the
    (generation, version) it records for that stamp, or None.

    Versions alone cannot tell histories apart: a database copied (a template, a backup restored) goes on from the
    same versions with other writes, and the files of one copy would be read as the state of another. A process
    that writes a file records its stamp in the database afterwards (`vouched`), so a copy holds the stamps of the
    files written from their shared history only."""
    for found_generation, found_version, stamp, path in _files(directory, identity):
        if found_generation == generation and vouched.get(stamp) == (found_generation, found_version):
            opened = CacheFile.open(path, identity, dimension, metric)
            if opened is not None and (opened.generation, opened.version, opened.stamp) == (
                found_generation,
                found_version,
                stamp,
            ):
                return opened
    return None


class CachedIndex:
    """A collection's index over a mapped `CacheFile`: its rows minus those changed or deleted since (`dead`),
    plus a private `VectorIndex` of the rows changed since. Answers as a `VectorIndex` of the same rows would."""

    def __init__(self, base: CacheFile, metric: Metric) -> None:
        self.base = base
        self.metric = metric
        self.dimension: int | None = base.dimension
        self.overlay = VectorIndex(base.dimension, metric)
        self._dead = np.zeros(base.count, dtype=bool)
        self._live = base.count  # base rows not dead
        self._metadata: list[FrozenDict] | None = None  # the base's metadata, decoded by the first filter

    def __len__(self) -> int:
        return self._live + len(self.overlay)

    @property
    def ids(self) -> list[str]:
        """Every live id (decoded: for listing, not for searching)."""
        live = np.flatnonzero(~self._dead).tolist()
        return [self.base.id(row) for row in live] + list(self.overlay.ids)

    def prepare(self, documents: DocumentsIn) -> DocumentBatch:
        """Validate documents against this index (as `VectorIndex.prepare`)."""
        return self.overlay.prepare(documents)

    def _kill(self, doc_ids: Sequence[str]) -> None:
        for row in self.base.row_of(doc_ids):
            if row is not None and not self._dead[row]:
                self._dead[row] = True
                self._live -= 1

    def upsert(self, batch: DocumentBatch) -> None:
        """Insert or replace the batch's documents (in the overlay; their mapped rows, if any, stop counting)."""
        self._kill(batch.ids)
        self.overlay.upsert(batch)

    def remove(self, ids: Iterable[str]) -> int:
        """Delete documents by id (unknown ids ignored); returns how many were removed."""
        wanted = list(dict.fromkeys(check_ids(ids)))
        before = len(self)
        self.overlay.remove(wanted)
        self._kill(wanted)
        return before - len(self)

    def clear(self) -> None:
        """Remove every document."""
        self._dead[:] = True
        self._live = 0
        self.overlay.clear()

    def get(self, ids: Iterable[str]) -> list[VectorDocument]:
        """The stored documents with these ids, in the order asked."""
        wanted = check_ids(ids)
        rows = self.base.row_of(wanted)
        found = []
        for doc_id, row in zip(wanted, rows):
            if doc_id in self.overlay.rows:
                found.append(self.overlay.document(self.overlay.rows[doc_id]))
            elif row is not None and not self._dead[row]:
                found.append(self.base.document(row))
        return found

    def query(self, search: SearchQuery) -> list[ScoredDocument]:
        """`VectorIndex.query` over the mapped rows still live and the overlay, merged."""
        query = search.vector_for(self.dimension)
        if search.top_k == 0:
            return []
        hits = [(hit.score, hit.document.id, hit) for hit in self.overlay.query(search)]
        if self._live:
            rows: Rows | None = None if self._live == self.base.count else np.flatnonzero(~self._dead)
            if search.predicate is not None:
                if self._metadata is None:
                    self._metadata = self.base.metadata()
                metadata, predicate = self._metadata, search.predicate
                candidates = range(self.base.count) if rows is None else rows.tolist()
                rows = np.fromiter((r for r in candidates if predicate(metadata[r])), dtype=np.intp)
            if rows is None or len(rows):
                picked, scores = best_rows(self.base.matrix, self.base.inverse_norms, query, rows, search, self.metric)
                for row, score in zip(picked.tolist(), scores.tolist()):
                    hits.append((score, self.base.id(row), row))
        hits.sort(key=lambda hit: (-hit[0], hit[1]))
        return [
            hit
            if isinstance(hit, ScoredDocument)
            else ScoredDocument.model_construct(document=self.base.document(hit), score=score)
            for score, _, hit in hits[: search.top_k]
        ]

    def needs_rewrite(self) -> bool:
        """Whether the rows changed since the file are many enough that a fresh file pays (a sixteenth of it, or
        4,096 rows, whichever is more)."""
        return len(self.overlay) + (self.base.count - self._live) > max(4096, self.base.count // 16)

    def wants_newer_file(self) -> bool:
        """Whether to map a newer file, or write one: `needs_rewrite`, and no other process is writing one now (if
        one is, its file is mapped once it is done)."""
        if not self.needs_rewrite():
            return False
        try:
            with writing(self.base.path.parent, self.base.path.name.split(".")[0], wait=False) as free:
                return free
        except OSError:  # the directory went away or became read-only: keep the overlay
            return False

    def write(self, writer: CacheWriter, page: int = 8192) -> None:
        """Add every live row (the mapped ones, then the overlay's) to `writer`."""
        live = np.flatnonzero(~self._dead)
        base = self.base
        for start in range(0, len(live), page):
            rows = live[start : start + page].tolist()
            ids, contents, metadata = ([base.text(name, row) for row in rows] for name in _TEXTS)
            writer.add(ids, contents, metadata, base.matrix[rows])
        overlay = self.overlay
        for start in range(0, len(overlay), page):
            end = min(len(overlay), start + page)
            metadata = [json.dumps(m) for m in overlay.metadata[start:end]]  # ASCII: keeps any lone surrogate
            writer.add(overlay.ids[start:end], overlay.contents[start:end], metadata, overlay.matrix[start:end])
