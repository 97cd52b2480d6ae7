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

    def __init__(self, embeddings: Embeddings, dimension: int | None, model_id: str | None, queries: bool) -> None:
        name = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
        model_id = model_id or f"langchain:{type(embeddings).__qualname__}" + (f":{name}" if name else "")
        super().__init__(dimension=dimension, model_id=f"{model_id}:query" if queries else model_id)
        self.embeddings = embeddings
        self.queries = queries

    def __repr__(self) -> str:
        queries = ", queries=True" if self.queries else ""
        return f"embed_fn_from_embeddings({self.embeddings!r}{queries})"

    def _embed_texts(self, texts: list[str]) -> Steps[Any]:
        """One `embed_documents` call, or one `embed_query` per text for queries (their `a` twins from async code)."""
        if not self.queries:
            raw = yield Call(self.embeddings, "embed_documents", (texts,))
            return raw
        vectors = []
        for text in texts:
            vectors.append((yield Call(self.embeddings, "embed_query", (text,))))
        return vectors


def embed_fn_from_embeddings(
    embeddings: Embeddings, *, dimension: int | None = None, model_id: str | None = None, queries: bool = False
) -> EmbedFn:
    """A memwoven `EmbedFn` over LangChain `Embeddings`, batching through `embed_documents` / `aembed_documents`.

    With `queries`, texts are embedded as search queries (`embed_query` / `aembed_query`, one call per text) and
    ``:query`` ends the model id. An `EmbedFnEmbeddings` is unwrapped to its `EmbedFn` (it embeds queries as
    documents). The dimension is probed on first use unless given.
    """
    if isinstance(embeddings, EmbedFnEmbeddings):
        return embeddings.embed_fn
    if not isinstance(embeddings, Embeddings):
        raise InvalidInputError(f"embeddings must be a LangChain Embeddings, got {type(embeddings).__name__}")
    return _EmbeddingsEmbedFn(embeddings, dimension, model_id, queries)
