"""memwoven `EmbedFn` <-> LangChain `Embeddings`, in both directions."""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings

from memwoven import InvalidInputError
from memwoven._steps import Call, Runner, Steps, twins
from memwoven.embed import EmbedFn, ExternalEmbedFn

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


class _EmbeddingsEmbedFn(ExternalEmbedFn):
    """An `EmbedFn` over LangChain `Embeddings`; every result is checked (invariant E3)."""

    def __init__(self, embeddings: Embeddings, dimension: int | None, model_id: str | None) -> None:
        name = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
        super().__init__(
            dimension=dimension,
            model_id=model_id or f"langchain:{type(embeddings).__qualname__}" + (f":{name}" if name else ""),
        )
        self.embeddings = embeddings

    def __repr__(self) -> str:
        return f"embed_fn_from_embeddings({self.embeddings!r})"

    def _embed_texts(self, texts: list[str]) -> Steps[Any]:
        """One `embed_documents` call (`aembed_documents` from async code)."""
        raw = yield Call(self.embeddings, "embed_documents", (texts,))
        return raw


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
