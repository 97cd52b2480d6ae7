from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import math
import sqlite3
import struct
from pathlib import Path
from typing import Any

import pytest

from memwoven import InMemoryVectorMemory, VectorDocument
from memwoven._steps import Call, Steps
from memwoven.embed import CachedEmbedFn, EmbedFn, ExternalEmbedFn, HashingEmbedFn, embed_fn_from_callable
from memwoven.errors import CorruptMemoryError, EmbeddingError, InvalidInputError
from memwoven.testing import EmbedFnContract


class TestHashingEmbedFn(EmbedFnContract):
    @pytest.fixture
    def embed_fn(self) -> EmbedFn:
        return HashingEmbedFn(dimension=64)


class TestCachedEmbedFn(EmbedFnContract):
    @pytest.fixture
    def embed_fn(self, tmp_path: Path) -> EmbedFn:
        return CachedEmbedFn(HashingEmbedFn(dimension=32), max_entries=3, path=tmp_path / "cache.db")


class TestCallableEmbedFn(EmbedFnContract):
    @pytest.fixture
    def embed_fn(self) -> EmbedFn:
        inner = HashingEmbedFn(dimension=16)
        return embed_fn_from_callable(inner.embed, model_id="wrapped-hashing")


class _Client:
    """A model SDK's client with a sync and a native async batch method; records which one ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.inner = HashingEmbedFn(dimension=24)

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(("embed", texts))
        return self.inner.embed_many(texts)

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(("aembed", texts))
        return self.inner.embed_many(texts)


class _OverClient(ExternalEmbedFn):
    def __init__(self, client: _Client) -> None:
        super().__init__(dimension=None, model_id="client-24")
        self.client = client

    def _embed_texts(self, texts: list[str]) -> Steps[Any]:
        raw = yield Call(self.client, "embed", (texts,))
        return raw


class TestExternalEmbedFn(EmbedFnContract):
    @pytest.fixture
    def embed_fn(self) -> EmbedFn:
        return _OverClient(_Client())


def test_an_external_embed_fn_uses_the_embedder_s_own_async_method_and_skips_empty_batches() -> None:
    client = _Client()
    embed_fn = _OverClient(client)
    assert embed_fn.embed_many([]) == []
    assert asyncio.run(embed_fn.aembed_many([])) == []
    assert client.calls == []
    assert embed_fn.dimension == 24  # probed once
    assert asyncio.run(embed_fn.aembed_many(["a", "b"])) == embed_fn.embed_many(["a", "b"])
    assert client.calls == [("embed", ["dimension probe"]), ("aembed", ["a", "b"]), ("embed", ["a", "b"])]
    client.inner = HashingEmbedFn(dimension=8)
    with pytest.raises(EmbeddingError, match="client-24 returned a vector of dimension 8, expected 24"):
        embed_fn.embed("x")


def test_hashing_vectors_are_unit_length_and_stable_across_instances() -> None:
    a, b = HashingEmbedFn(dimension=128), HashingEmbedFn(dimension=128)
    vector = a.embed("Deterministic across processes")
    assert vector == b.embed("Deterministic across processes")
    assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-9)


def test_hashing_similarity_follows_shared_words() -> None:
    embed = HashingEmbedFn(dimension=256)
    memory = InMemoryVectorMemory(dimension=embed.dimension)
    texts = {
        "cats": "Cats like to sleep on warm sofas",
        "stocks": "The stock market fell sharply on Monday",
        "python": "Python lists and dictionaries are built in",
    }
    memory.store([VectorDocument(id=k, content=v, embedding=embed(v)) for k, v in texts.items()])
    assert memory.search(embed("where do cats sleep?"), top_k=1)[0].document.id == "cats"
    assert memory.search(embed("stock prices on monday"), top_k=1)[0].document.id == "stocks"


def test_hashing_rejects_a_bad_dimension() -> None:
    with pytest.raises(InvalidInputError):
        HashingEmbedFn(dimension=0)


@pytest.mark.parametrize(
    "options",
    [
        {"ngram": 2.5},
        {"ngram": "3"},
        {"ngram": True},
        {"ngram": 0},
        {"ngram_weight": math.nan},
        {"ngram_weight": math.inf},
        {"ngram_weight": -0.5},
        {"ngram_weight": "0.5"},
        {"ngram_weight": True},
    ],
    ids=repr,
)
def test_hashing_rejects_bad_ngram_options_when_built(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        HashingEmbedFn(8, **options)


def test_hashing_vectors_stay_unit_length_for_any_finite_ngram_weight() -> None:
    for weight in [0, 0.0, 2, 1e200, 1.7e308]:
        vector = HashingEmbedFn(8, ngram_weight=weight).embed("hello there")
        assert all(map(math.isfinite, vector))
        assert math.isclose(math.fsum(x * x for x in vector), 1.0)


def test_the_cache_computes_each_text_once_and_persists(tmp_path: Path) -> None:
    calls: list[str] = []

    def embed(text: str) -> list[float]:
        calls.append(text)
        return [float(len(text)), 1.0]

    inner = embed_fn_from_callable(embed, model_id="len")
    cached = CachedEmbedFn(inner, path=tmp_path / "cache.db")
    assert cached.embed_many(["a", "bb", "a"]) == [[1.0, 1.0], [2.0, 1.0], [1.0, 1.0]]
    assert cached.embed("bb") == [2.0, 1.0]
    assert calls == ["a", "bb"]
    reopened = CachedEmbedFn(inner, path=tmp_path / "cache.db")
    assert reopened.embed_many(["bb", "a"]) == [[2.0, 1.0], [1.0, 1.0]]
    assert calls == ["a", "bb"]
    other_model = CachedEmbedFn(embed_fn_from_callable(embed, model_id="other"), path=tmp_path / "cache.db")
    other_model.embed("a")
    assert calls == ["a", "bb", "a"]  # the cache never mixes models


def test_the_lru_keeps_at_most_max_entries() -> None:
    calls: list[str] = []
    cached = CachedEmbedFn(embed_fn_from_callable(lambda t: calls.append(t) or [1.0, 2.0]), max_entries=2)
    for text in ["a", "b", "c", "a"]:
        cached.embed(text)
    assert calls == ["a", "b", "c", "a"]


@pytest.mark.parametrize("max_entries", [-1, "10", 2.0, True, None], ids=repr)
def test_the_cache_rejects_a_bad_max_entries_when_built(max_entries: Any) -> None:
    with pytest.raises(InvalidInputError):
        CachedEmbedFn(HashingEmbedFn(4), max_entries=max_entries)


def test_the_cache_rejects_a_path_that_is_no_file_name(tmp_path: Path) -> None:
    for path in [tmp_path, str(tmp_path), "", 42]:
        with pytest.raises(InvalidInputError):
            CachedEmbedFn(HashingEmbedFn(4), path=path)  # type: ignore[arg-type]
    assert CachedEmbedFn(HashingEmbedFn(4), max_entries=0, path=tmp_path / "c.db").embed("x")  # 0: no LRU at all


@pytest.mark.parametrize(
    "result",
    [[], [math.nan, 1.0], [math.inf], "not a vector", None],
    ids=["empty", "nan", "inf", "string", "none"],
)
def test_e3_bad_results_raise_instead_of_returning(result: object) -> None:
    embed = embed_fn_from_callable(lambda text: result)  # type: ignore[arg-type, return-value]
    with pytest.raises(EmbeddingError):
        embed("x")


def test_e3_a_failing_callable_raises_embedding_error() -> None:
    def broken(text: str) -> list[float]:
        raise RuntimeError("model server down")

    embed = embed_fn_from_callable(broken, dimension=3)
    with pytest.raises(EmbeddingError, match="model server down"):
        embed("x")
    with pytest.raises(EmbeddingError):
        asyncio.run(embed.aembed("x"))


def test_e3_a_changing_dimension_raises() -> None:
    sizes = iter([2, 3])
    embed = embed_fn_from_callable(lambda text: [1.0] * next(sizes))
    assert embed.dimension == 2
    with pytest.raises(EmbeddingError):
        embed("second call returns 3 numbers")


def test_a_batch_callable_is_used_for_batches() -> None:
    batches: list[list[str]] = []

    def batch(texts: list[str]) -> list[list[float]]:
        batches.append(texts)
        return [[1.0, float(len(t))] for t in texts]

    embed = embed_fn_from_callable(lambda t: [0.0, 0.0], batch_fn=batch, dimension=2)
    assert embed.embed_many(["a", "bbb"]) == [[1.0, 1.0], [1.0, 3.0]]
    assert batches == [["a", "bbb"]]


def test_a_cache_file_never_serves_vectors_of_another_dimension(tmp_path: Path) -> None:
    """Two embedders under one model id sharing a cache file (two lambdas had one default id): the vectors of the
    other dimension are misses, computed again, never returned as this embedder's (when its dimension is known:
    learning it would call the embedder, which a warm cache must not)."""
    path = tmp_path / "cache.db"
    small = embed_fn_from_callable(lambda text: [1.0, 2.0], dimension=2, model_id="shared")
    large = embed_fn_from_callable(lambda text: [9.0, 9.0, 9.0, 9.0], dimension=4, model_id="shared")
    assert CachedEmbedFn(small, path=path).embed("hello") == [1.0, 2.0]
    assert CachedEmbedFn(large, path=path).embed("hello") == [9.0, 9.0, 9.0, 9.0]
    assert embed_fn_from_callable(len).model_id == "callable:builtins.len"  # the module names it too


def _by_model(text: str, model: str = "small") -> list[float]:
    return [1.0, 0.0] if model == "small" else [0.0, 1.0]


class _Model:
    def __init__(self, model: str) -> None:
        self.model = model

    def __call__(self, text: str) -> list[float]:
        return _by_model(text, self.model)

    def embed(self, text: str) -> list[float]:
        return _by_model(text, self.model)


@pytest.mark.parametrize(
    "make",
    [
        lambda model: functools.partial(_by_model, model=model),
        lambda model: _Model(model),
        lambda model: _Model(model).embed,
        lambda model: lambda text: _by_model(text, model),
    ],
    ids=["partial", "callable-instance", "bound-method", "lambda"],
)
def test_a_callable_whose_name_is_not_its_own_warns_when_cached_in_a_file(
    make: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two models behind one kind of callable get one default model_id: a shared cache file would serve one the
    other's vectors, so caching them in a file without a model_id of their own warns."""
    small = embed_fn_from_callable(make("small"), dimension=2)
    large = embed_fn_from_callable(make("large"), dimension=2)
    assert small.model_id == large.model_id
    with caplog.at_level(logging.WARNING, logger="memwoven.embed"):
        CachedEmbedFn(small)  # no file, nothing shared
        assert not caplog.records
        CachedEmbedFn(small, path=tmp_path / "cache.db")
    assert "give embed_fn_from_callable a model_id" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memwoven.embed"):
        CachedEmbedFn(embed_fn_from_callable(make("large"), dimension=2, model_id="large"), path=tmp_path / "c.db")
    assert not caplog.records


def test_a_module_level_function_or_builtin_is_named_after_itself_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="memwoven.embed"):
        CachedEmbedFn(embed_fn_from_callable(_by_model, dimension=2), path=tmp_path / "cache.db")
    assert not caplog.records
    assert embed_fn_from_callable(_by_model).model_id == f"callable:{__name__}._by_model"


def _stored(path: Path, text: str) -> object:
    with sqlite3.connect(path) as db:
        key = hashlib.sha256(text.encode()).digest()
        return db.execute("SELECT vector FROM embeddings WHERE text_sha256 = ?", [key]).fetchone()[0]


def _damage(path: Path, cell: object) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE embeddings SET vector = ?", [cell])
    db.close()


@pytest.mark.parametrize(
    "cell",
    [b"\x00" * 13, b"", struct.pack("<2d", math.nan, 1.0), struct.pack("<2d", math.inf, 1.0), "not a blob", 7],
    ids=["torn", "empty", "nan", "inf", "text", "integer"],
)
@pytest.mark.parametrize("dimension", [2, None], ids=["dimension-known", "dimension-unknown"])
@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_damaged_cache_entry_is_a_miss_recomputed_and_overwritten(
    cell: object, dimension: int | None, run: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A cache holds nothing that cannot be computed again: a cell that is no whole finite vector is never returned
    (nor an error raised for it); it is computed again, logged, and replaced in the file."""
    path = tmp_path / "cache.db"
    calls: list[str] = []

    def embed(text: str) -> list[float]:
        calls.append(text)
        return [3.0, 4.0]

    CachedEmbedFn(embed_fn_from_callable(embed, dimension=dimension, model_id="m"), path=path).embed("hello")
    _damage(path, cell)
    cached = CachedEmbedFn(embed_fn_from_callable(embed, dimension=dimension, model_id="m"), path=path)
    with caplog.at_level(logging.WARNING, logger="memwoven.embed"):
        vector = cached.embed("hello") if run == "sync" else asyncio.run(cached.aembed("hello"))
    assert vector == [3.0, 4.0]
    assert calls == ["hello", "hello"]
    assert "damaged cached vector" in caplog.text
    assert _stored(path, "hello") == struct.pack("<2d", 3.0, 4.0)


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_cache_file_that_is_not_sqlite_raises_corrupt_memory_error_and_is_left_alone(
    run: str, tmp_path: Path
) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"garbage" * 1000)
    with pytest.raises(CorruptMemoryError):
        CachedEmbedFn(HashingEmbedFn(4), path=junk)
    assert junk.read_bytes() == b"garbage" * 1000  # maybe someone else's file: never rebuilt
    path = tmp_path / "cache.db"
    cached = CachedEmbedFn(HashingEmbedFn(4), path=path)
    for name in ["cache.db", "cache.db-wal", "cache.db-shm"]:
        (tmp_path / name).unlink(missing_ok=True)
    path.write_bytes(b"garbage" * 1000)  # replaced behind an open cache
    with pytest.raises(CorruptMemoryError):
        cached.embed("x") if run == "sync" else asyncio.run(cached.aembed("x"))


def test_a_cache_file_with_another_embeddings_table_raises_corrupt_memory_error(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE embeddings (id INTEGER PRIMARY KEY, data TEXT)")
    with pytest.raises(CorruptMemoryError):
        CachedEmbedFn(HashingEmbedFn(4), path=path)


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_batch_never_mixes_dimensions_when_the_dimension_is_not_yet_known(run: str, tmp_path: Path) -> None:
    """Vectors of another embedder under the same model id, and the dimension not given: one batch's vectors are
    all the embedder's own, whether the batch has misses (their dimension decides) or only hits (the embedder is
    asked its dimension, once, when the hits disagree)."""
    path = tmp_path / "cache.db"

    def run_batch(cached: CachedEmbedFn, texts: list[str]) -> list[list[float]]:
        return cached.embed_many(texts) if run == "sync" else asyncio.run(cached.aembed_many(texts))

    old = CachedEmbedFn(embed_fn_from_callable(lambda text: [1.0, 2.0, 3.0, 4.0], model_id="m"), path=path)
    assert run_batch(old, ["old", "older"]) == [[1.0, 2.0, 3.0, 4.0]] * 2
    new = CachedEmbedFn(embed_fn_from_callable(lambda text: [5.0, 6.0], model_id="m"), path=path)
    assert run_batch(new, ["old", "new"]) == [[5.0, 6.0], [5.0, 6.0]]
    hits_only = CachedEmbedFn(embed_fn_from_callable(lambda text: [5.0, 6.0], model_id="m"), path=path)
    assert run_batch(hits_only, ["older", "new"]) == [[5.0, 6.0], [5.0, 6.0]]
