"""memwoven `EmbedFn` <-> LangChain `Embeddings`, in both directions."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from langchain_core.embeddings import Embeddings

from memwoven import InvalidInputError
from memwoven._steps import Call, Runner, Steps, twins
from memwoven.embed import EmbedFn
from memwoven.errors import EmbeddingError

__all__ = ["EmbedFnEmbeddings", "embed_fn_from_embeddings"]


class EmbedFnEmbeddings(Embeddings, Runner):
    """A LangChain `Embeddings` over a memwoven `EmbedFn` (documents go through one `embed_many` batch)."""

    def __init__(self, embed_fn: EmbedFn) -> None:
        if not isinstance(embed_fn, EmbedFn):
            raise InvalidInputError(f"embed_fn must be a memwoven EmbedFn, got {type(embed_fn).__name__}")
        self.embed_fn = embed_fn

    def __repr__(self) -> str:
        return f"EmbedFnEmbeddings({self.embed_fn!r})"

    def _embed_documents(self, texts: list[str]) -> Steps[list[list[float]]]:
        """Embed documents in one batch."""
        vectors: list[list[float]] = yield Call(self.embed_fn, "embed_many", (texts,))
        return vectors

    def _embed_query(self, text: str) -> Steps[list[float]]:
        """Embed a query."""
        vector: list[float] = yield Call(self.embed_fn, "embed", (text,))
        return vector

    embed_documents, aembed_documents = twins(_embed_documents)
    embed_query, aembed_query = twins(_embed_query)


def _texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise InvalidInputError("embed_many takes a list of texts, got a single string")
    batch = list(texts)
    for position, text in enumerate(batch):
        if not isinstance(text, str):
            raise InvalidInputError(f"text {position} is a {type(text).__name__}, not a str")
    return batch


class _EmbeddingsEmbedFn(EmbedFn, Runner):
    """An `EmbedFn` over LangChain `Embeddings`; every result is checked (invariant E3)."""

    def __init__(self, embeddings: Embeddings, dimension: int | None, model_id: str | None) -> None:
        self.embeddings = embeddings
        self._dimension = dimension
        name = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
        self._model_id = model_id or f"langchain:{type(embeddings).__qualname__}" + (f":{name}" if name else "")

    def __repr__(self) -> str:
        return f"embed_fn_from_embeddings({self.embeddings!r})"

    @property
    def dimension(self) -> int:
        """The vector length (found by embedding a probe text if it was not given)."""
        if self._dimension is None:
            self._dimension = len(self.embed("dimension probe"))
        return self._dimension

    @property
    def model_id(self) -> str:
        """The identity given, or the embeddings class (and its `model` attribute, if any)."""
        return self._model_id

    def _embed_many(self, texts: Sequence[str]) -> Steps[list[list[float]]]:
        """Embed texts with one `embed_documents` call (`aembed_documents` from async code)."""
        batch = _texts(texts)
        if not batch:
            return []
        with self._failures():
            raw = yield Call(self.embeddings, "embed_documents", (batch,))
        return self._checked(raw, len(batch))

    embed_many, aembed_many = twins(_embed_many)

    @contextmanager
    def _failures(self) -> Iterator[None]:
        """Turn an exception of the embeddings into an `EmbeddingError` (E3)."""
        try:
            yield
        except EmbeddingError:
            raise
        except Exception as error:
            raise EmbeddingError(f"{self._model_id} failed: {error}") from error

    def _checked(self, raw: Any, count: int) -> list[list[float]]:
        """Validate what the embeddings returned: `count` finite, non-empty vectors of one dimension."""
        try:
            vectors = [[float(x) for x in vector] for vector in raw]
        except (TypeError, ValueError) as error:
            raise EmbeddingError(
                f"{self._model_id} returned something that is not a list of vectors ({error})"
            ) from None
        if len(vectors) != count:
            raise EmbeddingError(f"{self._model_id} returned {len(vectors)} vectors for {count} texts")
        for vector in vectors:
            if not vector or not all(map(math.isfinite, vector)):
                raise EmbeddingError(f"{self._model_id} returned an empty vector or one with NaN or infinity")
            if self._dimension is None:
                self._dimension = len(vector)
            if len(vector) != self._dimension:
                raise EmbeddingError(f"{self._model_id} returned dimension {len(vector)}, expected {self._dimension}")
        return vectors


def embed_fn_from_embeddings(
    embeddings: Embeddings, *, dimension: int | None = None, model_id: str | None = None
) -> EmbedFn:
    """A memwoven `EmbedFn` over LangChain `Embeddings`, batching through `embed_documents` / `aembed_documents`.

    An `EmbedFnEmbeddings` is unwrapped to its `EmbedFn`. The dimension is probed on first use unless given.
    """
    if isinstance(embeddings, EmbedFnEmbeddings):
        return embeddings.embed_fn
    if not isinstance(embeddings, Embeddings):
        raise InvalidInputError(f"embeddings must be a LangChain Embeddings, got {type(embeddings).__name__}")
    return _EmbeddingsEmbedFn(embeddings, dimension, model_id)
