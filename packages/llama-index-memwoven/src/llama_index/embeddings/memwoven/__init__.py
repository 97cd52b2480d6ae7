"""memwoven embeddings for LlamaIndex: `EmbedFnEmbedding` and `embed_fn_from_embedding`."""

from llama_index.embeddings.memwoven.base import EmbedFnEmbedding, embed_fn_from_embedding

__all__ = ["EmbedFnEmbedding", "embed_fn_from_embedding"]
