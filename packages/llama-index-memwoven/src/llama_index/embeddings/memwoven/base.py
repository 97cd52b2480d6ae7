"""`EmbedFnEmbedding` (a memwoven `EmbedFn` as a LlamaIndex embedding) and `embed_fn_from_embedding` (the reverse)."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr

from memwoven._steps import Call, Runner, Steps, twins
from memwoven.embed import EmbedFn, embed_fn_from_callable

__all__ = ["EmbedFnEmbedding", "embed_fn_from_embedding"]


class EmbedFnEmbedding(BaseEmbedding, Runner):
    """A LlamaIndex embedding model that embeds through a memwoven `EmbedFn`, a batch at a time.

    Queries and texts get the same vectors (an `EmbedFn` makes no difference between them). `model_name` is the
    function's `model_id`; batches of `embed_batch_size` texts go to one `embed_many` call.
    """

    _embed_fn: EmbedFn = PrivateAttr()

    def __init__(self, embed_fn: EmbedFn, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", embed_fn.model_id)
        super().__init__(**kwargs)
        self._embed_fn = embed_fn

    @classmethod
    def class_name(cls) -> str:
        """The LlamaIndex class name."""
        return "EmbedFnEmbedding"

    @property
    def embed_fn(self) -> EmbedFn:
        """The memwoven function underneath."""
        return self._embed_fn

    def _get_query_embedding_steps(self, query: str) -> Steps[Embedding]:
        embedding: Embedding = yield Call(self._embed_fn, "embed", (query,))
        return embedding

    def _get_text_embedding_steps(self, text: str) -> Steps[Embedding]:
        embedding: Embedding = yield Call(self._embed_fn, "embed", (text,))
        return embedding

    def _get_text_embeddings_steps(self, texts: list[str]) -> Steps[list[Embedding]]:
        embeddings: list[Embedding] = yield Call(self._embed_fn, "embed_many", (texts,))
        return embeddings

    _get_query_embedding, _aget_query_embedding = twins(_get_query_embedding_steps)
    _get_text_embedding, _aget_text_embedding = twins(_get_text_embedding_steps)
    _get_text_embeddings, _aget_text_embeddings = twins(_get_text_embeddings_steps)


def embed_fn_from_embedding(
    embed_model: BaseEmbedding, *, dimension: int | None = None, model_id: str | None = None
) -> EmbedFn:
    """A memwoven `EmbedFn` that embeds through a LlamaIndex embedding model (batched by the model).

    Every vector is checked like any `EmbedFn`'s (a failure raises `EmbeddingError`). The dimension is found by
    embedding a probe text unless given. `model_id` (default: the class and model name) names what the vectors
    are, for caches (`CachedEmbedFn`): give settings of one model that embed differently their own.
    """
    return embed_fn_from_callable(
        embed_model.get_text_embedding,
        dimension=dimension,
        model_id=model_id or f"llama_index:{embed_model.class_name()}:{embed_model.model_name}",
        batch_fn=embed_model.get_text_embedding_batch,
    )
