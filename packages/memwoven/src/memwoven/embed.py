"""`EmbedFn`: text -> vector, deterministically. Plus an offline hashing embedder and a caching wrapper.

Invariants (tested by `memwoven.testing.EmbedFnContract`): E1 the same input gives the same vector; E2 no side
effects beyond caching; E3 a failure raises (`EmbeddingError`), never an empty or partial vector.

A `CachedEmbedFn` file holds nothing that cannot be computed again: an entry that is no whole, finite vector of the
embedder's dimension is a miss (logged, computed again and overwritten), never returned. A file that is not such a
cache (not SQLite, damaged, or with an `embeddings` table of another kind) raises `CorruptMemoryError` and is left
as it is: it may be another program's file.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import sqlite3
import threading
import types
import unicodedata
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from memwoven._steps import Call, Runner, Steps, async_twin, twins
from memwoven.errors import CorruptMemoryError, EmbeddingError, InvalidInputError

__all__ = ["CachedEmbedFn", "EmbedFn", "ExternalEmbedFn", "HashingEmbedFn", "embed_fn_from_callable"]

logger = logging.getLogger(__name__)


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise InvalidInputError("embed_many takes a list of texts, got a single string")
    result = list(texts)
    for position, text in enumerate(result):
        if not isinstance(text, str):
            raise InvalidInputError(f"text {position} is a {type(text).__name__}, not a str")
    return result


def _check_vectors(vectors: Any, count: int, dimension: int | None, source: str) -> list[list[float]]:
    """Validate what an embedder returned: `count` finite, non-empty vectors of one dimension (E3), `dimension` if
    given, else the first vector's."""
    try:
        rows = [[float(x) for x in vector] for vector in vectors]
    except (TypeError, ValueError) as error:
        raise EmbeddingError(f"{source} returned something that is not a list of vectors ({error})") from None
    if len(rows) != count:
        raise EmbeddingError(f"{source} returned {len(rows)} vectors for {count} texts")
    for row in rows:
        if not row:
            raise EmbeddingError(f"{source} returned an empty vector")
        if dimension is None:
            dimension = len(row)
        if len(row) != dimension:
            raise EmbeddingError(f"{source} returned a vector of dimension {len(row)}, expected {dimension}")
        if not all(map(math.isfinite, row)):
            raise EmbeddingError(f"{source} returned a vector with NaN or infinity")
    return rows


class EmbedFn(Runner, ABC):
    """Turns text into a vector of a known `dimension`. Call it like a function, or batch with `embed_many`."""

    @property
    @abstractmethod
    def dimension(self) -> int:
        """The length of every vector this function returns."""

    @property
    def model_id(self) -> str:
        """What identifies this function's vectors (for caches): vectors from equal ids are interchangeable."""
        return f"{type(self).__name__}:{self.dimension}"

    @abstractmethod
    def embed_many(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed a batch of texts, one vector per text, in order."""

    def _embed(self, text: str) -> Steps[list[float]]:
        """Embed one text."""
        vectors: list[list[float]] = yield Call(self, "embed_many", ([text],))
        return vectors[0]

    embed, aembed = twins(_embed)

    def __call__(self, text: str) -> list[float]:
        """Embed one text (an `EmbedFn` is a plain `text -> vector` callable too)."""
        return self.embed(text)

    async def aembed_many(self, texts: Sequence[str]) -> list[list[float]]:
        """`embed_many` from async code: the texts are checked here first (whatever `embed_many` checks), then
        `embed_many` runs off the event loop (`Runner._off_loop`: in a worker thread)."""
        return await self._off_loop(self.embed_many, _check_texts(texts))


_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashingEmbedFn(EmbedFn):
    """A deterministic, offline, lexical embedder: feature hashing of words and character n-grams.

    Each lower-cased word and each character n-gram of `<word>` is hashed (BLAKE2b, so vectors are the same in
    every process) to a signed position; the sum is L2-normalized. Texts sharing words or word pieces get high
    cosine similarity. No model, no network: it lets the whole library and its tests run anywhere. `ngram` is the
    n-gram length (an int >= 1), `ngram_weight` an n-gram's weight relative to a word's (a finite number >= 0).
    """

    def __init__(self, dimension: int = 384, *, ngram: int = 3, ngram_weight: float = 0.5) -> None:
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 2:
            raise InvalidInputError(f"dimension must be an int >= 2, got {dimension!r}")
        if isinstance(ngram, bool) or not isinstance(ngram, int) or ngram < 1:
            raise InvalidInputError(f"ngram must be an int >= 1, got {ngram!r}")
        if (
            isinstance(ngram_weight, bool)
            or not isinstance(ngram_weight, (int, float))
            or not math.isfinite(ngram_weight)
            or ngram_weight < 0
        ):
            raise InvalidInputError(f"ngram_weight must be a finite number >= 0, got {ngram_weight!r}")
        self._dimension = dimension
        self._ngram = ngram
        self._ngram_weight = ngram_weight
        # words weigh 1 and n-grams ngram_weight; scaled so neither exceeds 1 (same direction, and a huge weight
        # cannot overflow the sum or its norm)
        scale = max(1.0, float(ngram_weight))
        self._word_weight = 1.0 / scale
        self._ngram_feature_weight = ngram_weight / scale
        self._slots: dict[str, tuple[int, float]] = {}

    def __repr__(self) -> str:
        return f"HashingEmbedFn(dimension={self._dimension}, ngram={self._ngram})"

    @property
    def dimension(self) -> int:
        """The vector length."""
        return self._dimension

    @property
    def model_id(self) -> str:
        """Identity of the vectors: the algorithm and its parameters."""
        return f"hashing-v1:{self._dimension}:{self._ngram}:{self._ngram_weight}"

    def embed_many(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts by feature hashing."""
        return [self._vector(text).tolist() for text in _check_texts(texts)]

    def _slot(self, feature: str) -> tuple[int, float]:
        slot = self._slots.get(feature)
        if slot is None:
            digest = int.from_bytes(
                hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big"
            )
            slot = (digest % self._dimension, 1.0 if digest >> 63 else -1.0)
            if len(self._slots) < 1_000_000:
                self._slots[feature] = slot
        return slot

    def _features(self, text: str) -> list[tuple[str, float]]:
        words = _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())
        features = [("w:" + word, self._word_weight) for word in words]
        n, weight = self._ngram, self._ngram_feature_weight
        for word in words:
            padded = f"<{word}>"
            features += [("c:" + padded[i : i + n], weight) for i in range(max(1, len(padded) - n + 1))]
        return features or [("<empty>", 1.0)]

    def _vector(self, text: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        features = self._features(text)
        slots = [self._slot(feature) for feature, _ in features]
        positions = np.fromiter((p for p, _ in slots), dtype=np.intp, count=len(slots))
        weights = np.fromiter((s * w for (_, s), (_, w) in zip(slots, features)), dtype=np.float64, count=len(slots))
        vector = np.zeros(self._dimension, dtype=np.float64)
        np.add.at(vector, positions, weights)
        norm = float(np.linalg.norm(vector))
        if norm == 0.0:  # features cancelled out exactly; fall back to the first feature's slot
            vector[positions[0]] = 1.0
            return vector
        vector /= norm
        return vector


class ExternalEmbedFn(EmbedFn):
    """The base of an `EmbedFn` over some other embedder (a model SDK, a framework's embeddings, a function).

    A subclass passes the `model_id` (and the `dimension`, if known: otherwise it is found once, by embedding a
    probe text) and writes `_embed_texts`, the steps that ask the embedder for a batch. Everything else is done
    here: the texts are checked, an empty batch never reaches the embedder, an exception of the embedder becomes
    an `EmbeddingError` naming the model, and every result is checked (E3: one finite, non-empty vector per text,
    all of the one dimension). `embed_fn_from_callable` and the framework adapters are built on it;
    for an embedder that is a plain sync function, `embed_fn_from_callable` is all you need.
    """

    def __init__(self, *, dimension: int | None, model_id: str) -> None:
        self._dimension = dimension
        self._model_id = model_id

    @property
    def dimension(self) -> int:
        """The vector length (found by embedding a probe text if it was not given)."""
        if self._dimension is None:
            self._dimension = len(self.embed("dimension probe"))
        return self._dimension

    @property
    def model_id(self) -> str:
        """The identity given, or the one made from the embedder (its class or name, and its model)."""
        return self._model_id

    @abstractmethod
    def _embed_texts(self, texts: list[str]) -> Steps[Any]:
        """The steps that get the embedder's vectors for `texts` (a non-empty list of str), unchecked.

        Yield a `Call` of the embedder's batch method: ``raw = yield Call(self.client, "embed", (texts,))`` calls
        ``client.embed`` from `embed_many` and awaits ``client.aembed`` from `aembed_many`. An embedder with no
        async method is called through a sync method of the subclass and its `memwoven._steps.async_twin`, which
        runs it in a worker thread.
        """

    def _embed_many(self, texts: Sequence[str]) -> Steps[list[list[float]]]:
        """Embed texts in one batch of the embedder; every vector is checked (E3)."""
        batch = _check_texts(texts)
        if not batch:
            return []
        try:
            raw = yield from self._embed_texts(batch)
        except EmbeddingError:
            raise
        except Exception as error:
            raise EmbeddingError(f"{self._model_id} failed: {error}") from error
        vectors = _check_vectors(raw, len(batch), self._dimension, self._model_id)
        if self._dimension is None:
            self._dimension = len(vectors[0])
        return vectors

    embed_many, aembed_many = twins(_embed_many)


def _is_named(fn: object, name: str) -> bool:
    """Whether `name` is `fn`'s alone: a module-level function or class, or a builtin function.

    A lambda, a local function, a `functools.partial`, a bound method or a callable instance is named after its
    code or class, which other callables (other arguments, another instance, another model) share.
    """
    plain = isinstance(fn, (types.FunctionType, type)) or (
        isinstance(fn, types.BuiltinFunctionType) and (fn.__self__ is None or isinstance(fn.__self__, types.ModuleType))
    )
    return plain and "<" not in name


class _CallableEmbedFn(ExternalEmbedFn):
    def __init__(
        self,
        fn: Callable[[str], Sequence[float]],
        dimension: int | None,
        model_id: str | None,
        batch_fn: Callable[[list[str]], Sequence[Sequence[float]]] | None,
    ) -> None:
        module = getattr(fn, "__module__", None) or type(fn).__module__
        name = f"{module}.{getattr(fn, '__qualname__', type(fn).__name__)}"
        super().__init__(dimension=dimension, model_id=model_id or f"callable:{name}")
        self.anonymous = model_id is None and not _is_named(fn, name)
        self._fn = fn
        self._batch_fn = batch_fn

    def __repr__(self) -> str:
        return f"embed_fn_from_callable({self._fn!r}, dimension={self._dimension})"

    def _embed_texts(self, texts: list[str]) -> Steps[Any]:
        """Through the batch callable if given, else one call per text (from async code: in a worker thread)."""
        raw = yield Call(self, "_call_fn", (texts,))
        return raw

    def _call_fn(self, texts: list[str]) -> Sequence[Sequence[float]]:
        return self._batch_fn(texts) if self._batch_fn is not None else [self._fn(text) for text in texts]

    _acall_fn = async_twin(_call_fn)


def embed_fn_from_callable(
    fn: Callable[[str], Sequence[float]],
    *,
    dimension: int | None = None,
    model_id: str | None = None,
    batch_fn: Callable[[list[str]], Sequence[Sequence[float]]] | None = None,
) -> EmbedFn:
    """Turn a plain `text -> vector` callable (and optionally a batch callable) into an `EmbedFn`.

    Every result is checked (E3): an exception, an empty vector, NaN or a wrong dimension raise `EmbeddingError`.
    `model_id` defaults to `fn`'s importable name, which only a module-level function or class (or a builtin) has
    to itself: for a lambda, a local function, a `functools.partial`, a bound method or a callable instance give
    one if its vectors go to a `CachedEmbedFn` file (it warns otherwise), or other models' vectors may be served.
    """
    if not callable(fn):
        raise InvalidInputError("fn must be callable")
    return _CallableEmbedFn(fn, dimension, model_id, batch_fn)


def _decode(blob: object) -> list[float] | None:
    """A stored vector, or None if the cell holds no whole, finite, non-empty vector of float64."""
    if not isinstance(blob, bytes) or not blob or len(blob) % 8:
        return None
    vector = np.frombuffer(blob, dtype="<f8")
    return vector.tolist() if bool(np.isfinite(vector).all()) else None


class CachedEmbedFn(EmbedFn):
    """Wraps an `EmbedFn` with an in-memory LRU cache and, optionally, a persistent SQLite cache at `path`.

    Entries are keyed by the inner function's `model_id` and the SHA-256 of the text, so a cache file can be
    shared by several models without mixing their vectors: give settings of one model that embed differently
    (another dimension, other instructions) a `model_id` of their own. A damaged entry, or one of another dimension
    under the same `model_id`, is computed again (see the module docs); the vectors of one batch are always of one
    dimension. While the inner dimension is not known (an `ExternalEmbedFn` not yet called), a batch of hits only is
    served without calling the embedder, unless the hits disagree.
    """

    def __init__(self, inner: EmbedFn, *, max_entries: int = 10_000, path: str | Path | None = None) -> None:
        if not isinstance(inner, EmbedFn):
            raise InvalidInputError(f"inner must be an EmbedFn, got {type(inner).__name__}")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
            raise InvalidInputError(f"max_entries must be a non-negative int, got {max_entries!r}")
        if path is not None and not isinstance(path, (str, Path)):
            raise InvalidInputError(f"path must be a str or Path, got {type(path).__name__}")
        if path is not None and (not str(path) or Path(path).is_dir()):
            raise InvalidInputError(f"path must name a file, got {str(path)!r}")
        self.inner = inner
        self._max_entries = max_entries
        self._memory: OrderedDict[bytes, list[float]] = OrderedDict()
        self._lock = threading.Lock()
        self._path = Path(path) if path is not None else None
        if self._path is not None and isinstance(inner, _CallableEmbedFn) and inner.anonymous:
            logger.warning(
                "vectors cached in %s under %r, a name other callables may share (other arguments of a partial, "
                "another instance): give embed_fn_from_callable a model_id",
                self._path,
                inner.model_id,
            )
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            with self._connect() as db:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS embeddings ("
                    "model_id TEXT NOT NULL, text_sha256 BLOB NOT NULL, vector BLOB NOT NULL, "
                    "PRIMARY KEY (model_id, text_sha256))"
                )
                columns = [row[1] for row in db.execute("PRAGMA table_info(embeddings)")]
            if columns != ["model_id", "text_sha256", "vector"]:
                raise CorruptMemoryError(f"{self._path} holds an embeddings table of another kind: columns {columns}")

    def __repr__(self) -> str:
        return f"CachedEmbedFn({self.inner!r}, max_entries={self._max_entries}, path={self._path})"

    @property
    def dimension(self) -> int:
        """The inner function's dimension."""
        return self.inner.dimension

    @property
    def model_id(self) -> str:
        """The inner function's identity (cached vectors are the same vectors)."""
        return self.inner.model_id

    def embed_many(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts, computing only those in neither cache; the batch's vectors are all of one dimension."""
        batch = _check_texts(texts)
        keys = [hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest() for text in batch]
        text_of = dict(zip(keys, batch))
        found = self._lookup(keys)
        dimension = self._known_dimension()
        while True:  # twice at most: the second round recomputes only hits of another dimension than the first's
            missing = [key for key in text_of if key not in found]
            if missing:
                computed = _check_vectors(
                    self.inner.embed_many([text_of[key] for key in missing]),
                    len(missing),
                    dimension,
                    self.model_id,
                )
                dimension = len(computed[0])
                fresh = dict(zip(missing, computed))
                self._remember(fresh)
                found.update(fresh)
            elif dimension is None and len({len(vector) for vector in found.values()}) > 1:
                dimension = self.inner.dimension  # the hits disagree: only the embedder can tell which are its own
            stale = [key for key, vector in found.items() if dimension is not None and len(vector) != dimension]
            if not stale:
                return [list(found[key]) for key in keys]
            logger.warning(
                "%s: %d cached vectors not of dimension %s ignored and recomputed", self.model_id, len(stale), dimension
            )
            for key in stale:
                del found[key]

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        if self._path is None:
            raise RuntimeError("this cache keeps no file")  # only called when it does
        db = sqlite3.connect(self._path, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            with db:  # commits, or rolls back on error
                yield db
        except sqlite3.DatabaseError as error:
            # exactly DatabaseError: SQLITE_NOTADB or SQLITE_CORRUPT; its subclasses (a locked or full disk, ...) are
            # no damage. The file is never rebuilt: it may be something else's, given as this cache's path by mistake
            if type(error) is sqlite3.DatabaseError:
                raise CorruptMemoryError(
                    f"embedding cache {self._path} is not a SQLite database or is damaged"
                ) from error
            raise
        finally:
            db.close()

    def _lookup(self, keys: list[bytes]) -> dict[bytes, list[float]]:
        found: dict[bytes, list[float]] = {}
        with self._lock:
            for key in keys:
                vector = self._memory.get(key)
                if vector is not None:
                    self._memory.move_to_end(key)
                    found[key] = vector
        unknown = [key for key in dict.fromkeys(keys) if key not in found]
        if unknown and self._path is not None:
            with self._connect() as db:
                for start in range(0, len(unknown), 500):
                    chunk = unknown[start : start + 500]
                    marks = ",".join("?" * len(chunk))  # only placeholders go into the SQL text
                    rows = db.execute(
                        f"SELECT text_sha256, vector FROM embeddings WHERE model_id = ? AND text_sha256 IN ({marks})",  # noqa: S608
                        [self.model_id, *chunk],
                    ).fetchall()
                    # vectors stored under this id by an embedder of another dimension are misses (if the
                    # dimension is known: learning it would call the embedder, which a warm cache must not)
                    known = self._known_dimension()
                    for key, blob in rows:
                        vector = _decode(blob)
                        if vector is None:
                            logger.warning("%s: damaged cached vector ignored and recomputed", self.model_id)
                            continue
                        if known is not None and len(vector) != known:  # another embedder's, under this id
                            logger.warning("%s: cached vector of dimension %d ignored", self.model_id, len(vector))
                            continue
                        found[bytes(key)] = vector
            self._remember({key: found[key] for key in unknown if key in found}, persist=False)
        return found

    def _known_dimension(self) -> int | None:
        """The inner function's dimension if known without calling its embedder."""
        inner = self.inner
        return inner._dimension if isinstance(inner, ExternalEmbedFn) else inner.dimension

    def _remember(self, vectors: dict[bytes, list[float]], *, persist: bool = True) -> None:
        with self._lock:
            for key, vector in vectors.items():
                self._memory[key] = vector
                self._memory.move_to_end(key)
            while len(self._memory) > self._max_entries:
                self._memory.popitem(last=False)
        if persist and vectors and self._path is not None:
            with self._connect() as db:
                db.executemany(
                    "INSERT OR REPLACE INTO embeddings (model_id, text_sha256, vector) VALUES (?, ?, ?)",
                    [(self.model_id, key, np.asarray(v, dtype="<f8").tobytes()) for key, v in vectors.items()],
                )
