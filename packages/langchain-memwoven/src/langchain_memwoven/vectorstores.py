"""`MemwovenVectorStore`: a LangChain vector store over any memwoven `VectorMemory`."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance
from typing_extensions import Self

from langchain_memwoven._convert import thaw
from langchain_memwoven.embeddings import EmbedFnEmbeddings
from memwoven import InMemoryVectorMemory, InvalidInputError, ScoredDocument, VectorDocument, VectorMemory
from memwoven.embed import EmbedFn
from memwoven.urls import open_vector_memory

__all__ = ["MemwovenVectorStore"]

Filter = dict[str, Any]


def _document(stored: VectorDocument) -> Document:
    return Document(id=stored.id, page_content=stored.content, metadata=thaw(stored.metadata))


def _scored(hits: list[ScoredDocument]) -> list[tuple[Document, float]]:
    return [(_document(hit.document), hit.score) for hit in hits]


def _records(
    texts: Sequence[str], metadatas: Sequence[dict[str, Any]] | None, ids: Sequence[str | None] | None
) -> tuple[list[str], list[dict[str, Any]]]:
    """The ids (generated where missing) and the document records to store, without their embeddings."""
    if metadatas is not None and len(metadatas) != len(texts):
        raise InvalidInputError(f"got {len(metadatas)} metadatas for {len(texts)} texts")
    if ids is not None and len(ids) != len(texts):
        raise InvalidInputError(f"got {len(ids)} ids for {len(texts)} texts")
    final_ids = [given or str(uuid.uuid4()) for given in (ids or [None] * len(texts))]
    records = [
        {"id": doc_id, "content": text, "metadata": metadatas[i] if metadatas else {}}
        for i, (doc_id, text) in enumerate(zip(final_ids, texts))
    ]
    return final_ids, records


def _with_embeddings(records: list[dict[str, Any]], vectors: list[list[float]]) -> list[dict[str, Any]]:
    if len(vectors) != len(records):
        raise InvalidInputError(f"the embeddings returned {len(vectors)} vectors for {len(records)} texts")
    return [{**record, "embedding": vector} for record, vector in zip(records, vectors)]


def _memory(memory: VectorMemory | None, url: str | None, collection: str) -> VectorMemory:
    if memory is not None:
        return memory
    return open_vector_memory(url, collection=collection) if url is not None else InMemoryVectorMemory()


def _mmr(query: list[float], hits: list[ScoredDocument], k: int, lambda_mult: float) -> list[Document]:
    chosen = maximal_marginal_relevance(
        np.asarray(query, dtype=np.float32), [list(hit.document.embedding) for hit in hits], lambda_mult, k
    )
    return [_document(hits[i].document) for i in chosen]


class MemwovenVectorStore(VectorStore):
    """A LangChain `VectorStore` over one memwoven `VectorMemory` collection.

    Ids are upserted (a generated UUID when a document has none); `filter` is memwoven's metadata filter
    (`{"topic": "billing", "year": {"$gte": 2020}}`, see `memwoven.filters`); scores from
    `similarity_search_with_score` are the memory's raw similarities (cosine in [-1, 1]) and relevance scores
    map them to [0, 1]. `embedding` is a LangChain `Embeddings` or a memwoven `EmbedFn`.
    """

    def __init__(self, memory: VectorMemory, embedding: Embeddings | EmbedFn) -> None:
        self.memory = memory
        self._embeddings = EmbedFnEmbeddings(embedding) if isinstance(embedding, EmbedFn) else embedding

    def __repr__(self) -> str:
        return f"MemwovenVectorStore({self.memory!r}, {self._embeddings!r})"

    @property
    def embeddings(self) -> Embeddings:
        """The embeddings used for documents and queries."""
        return self._embeddings

    # --- writes ---------------------------------------------------------------------------------------------

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed and upsert texts; returns their ids (generated where `ids` has none)."""
        texts = list(texts)
        final_ids, records = _records(texts, metadatas, ids)
        if records:
            self.memory.store(_with_embeddings(records, self._embeddings.embed_documents(texts)))
        return final_ids

    async def aadd_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Async twin of `add_texts`."""
        texts = list(texts)
        final_ids, records = _records(texts, metadatas, ids)
        if records:
            await self.memory.astore(_with_embeddings(records, await self._embeddings.aembed_documents(texts)))
        return final_ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete documents by id (unknown ids are ignored); with no ids, delete every document."""
        if ids is None:
            self.memory.clear()
        else:
            self.memory.delete(ids)
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Async twin of `delete`."""
        if ids is None:
            await self.memory.aclear()
        else:
            await self.memory.adelete(ids)
        return True

    # --- reads ----------------------------------------------------------------------------------------------

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents with these ids, in the order asked; unknown ids are skipped."""
        return [_document(stored) for stored in self.memory.get(list(ids))]

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """Async twin of `get_by_ids`."""
        return [_document(stored) for stored in await self.memory.aget(list(ids))]

    def similarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, filter: Filter | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The `k` documents closest to `embedding` whose metadata matches `filter`, with their similarity."""
        return _scored(self.memory.search(embedding, top_k=k, filter=filter))

    async def asimilarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, filter: Filter | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Async twin of `similarity_search_with_score_by_vector`."""
        return _scored(await self.memory.asearch(embedding, top_k=k, filter=filter))

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: Filter | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The `k` documents closest to `query`, with their similarity (cosine: -1 to 1)."""
        return self.similarity_search_with_score_by_vector(self._embeddings.embed_query(query), k, filter)

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, filter: Filter | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Async twin of `similarity_search_with_score`."""
        embedding = await self._embeddings.aembed_query(query)
        return await self.asimilarity_search_with_score_by_vector(embedding, k, filter)

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: Filter | None = None, **kwargs: Any
    ) -> list[Document]:
        """The `k` documents closest to `embedding`."""
        return [doc for doc, _ in self.similarity_search_with_score_by_vector(embedding, k, filter)]

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: Filter | None = None, **kwargs: Any
    ) -> list[Document]:
        """Async twin of `similarity_search_by_vector`."""
        return [doc for doc, _ in await self.asimilarity_search_with_score_by_vector(embedding, k, filter)]

    def similarity_search(self, query: str, k: int = 4, filter: Filter | None = None, **kwargs: Any) -> list[Document]:
        """The `k` documents closest to `query`."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter)]

    async def asimilarity_search(
        self, query: str, k: int = 4, filter: Filter | None = None, **kwargs: Any
    ) -> list[Document]:
        """Async twin of `similarity_search`."""
        return [doc for doc, _ in await self.asimilarity_search_with_score(query, k, filter)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        """Map similarities to relevance in [0, 1]: cosine's [-1, 1] linearly (dot assumes unit vectors)."""
        return _relevance

    # --- maximal marginal relevance -------------------------------------------------------------------------

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Filter | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """`k` documents chosen among the `fetch_k` closest for both similarity and diversity."""
        return _mmr(embedding, self.memory.search(embedding, top_k=fetch_k, filter=filter), k, lambda_mult)

    async def amax_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Filter | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Async twin of `max_marginal_relevance_search_by_vector`."""
        return _mmr(embedding, await self.memory.asearch(embedding, top_k=fetch_k, filter=filter), k, lambda_mult)

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Filter | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """`k` documents for `query`, chosen among the `fetch_k` closest for similarity and diversity."""
        embedding = self._embeddings.embed_query(query)
        return self.max_marginal_relevance_search_by_vector(embedding, k, fetch_k, lambda_mult, filter)

    async def amax_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Filter | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Async twin of `max_marginal_relevance_search`."""
        embedding = await self._embeddings.aembed_query(query)
        return await self.amax_marginal_relevance_search_by_vector(embedding, k, fetch_k, lambda_mult, filter)

    # --- construction ---------------------------------------------------------------------------------------

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings | EmbedFn,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        memory: VectorMemory | None = None,
        url: str | None = None,
        collection: str = "default",
        **kwargs: Any,
    ) -> Self:
        """A store holding `texts`: in `memory`, in `collection` at `url`, or else in a new in-memory collection."""
        store = cls(_memory(memory, url, collection), embedding)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    @classmethod
    async def afrom_texts(
        cls,
        texts: list[str],
        embedding: Embeddings | EmbedFn,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        memory: VectorMemory | None = None,
        url: str | None = None,
        collection: str = "default",
        **kwargs: Any,
    ) -> Self:
        """Async twin of `from_texts`."""
        store = cls(_memory(memory, url, collection), embedding)
        await store.aadd_texts(texts, metadatas, ids=ids)
        return store

    def close(self) -> None:
        """Close the underlying memory."""
        self.memory.close()

    async def aclose(self) -> None:
        """Async twin of `close`."""
        await self.memory.aclose()


def _relevance(similarity: float) -> float:
    return min(1.0, max(0.0, (similarity + 1.0) / 2.0))
