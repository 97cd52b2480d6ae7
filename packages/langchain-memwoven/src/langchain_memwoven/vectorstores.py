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

from langchain_memwoven._twins import constructor_twins
from langchain_memwoven.embeddings import EmbedFnEmbeddings
from memwoven import InvalidInputError, ScoredDocument, VectorDocument, VectorMemory
from memwoven._steps import Call, Runner, Steps, twins
from memwoven.embed import EmbedFn
from memwoven.models import thaw
from memwoven.urls import open_vector_memory
from memwoven.vector_index import store_columns

__all__ = ["MemwovenVectorStore"]

Filter = dict[str, Any]


def _document(stored: VectorDocument) -> Document:
    return Document(id=stored.id, page_content=stored.content, metadata=thaw(stored.metadata))


def _scored(hits: list[ScoredDocument]) -> list[tuple[Document, float]]:
    return [(_document(hit.document), hit.score) for hit in hits]


def _ids(
    texts: Sequence[str], metadatas: Sequence[dict[str, Any]] | None, ids: Sequence[str | None] | None
) -> list[str]:
    """The documents' ids (generated where missing), once the lengths are checked."""
    if metadatas is not None and len(metadatas) != len(texts):
        raise InvalidInputError(f"got {len(metadatas)} metadatas for {len(texts)} texts")
    if ids is not None and len(ids) != len(texts):
        raise InvalidInputError(f"got {len(ids)} ids for {len(texts)} texts")
    return [given or str(uuid.uuid4()) for given in (ids or [None] * len(texts))]


def _memory(memory: VectorMemory | None, url: str | None, collection: str, options: dict[str, Any]) -> VectorMemory:
    """The given memory, or the collection opened at `url` (a new in-memory one without), with `options`."""
    if memory is None:  # a new in-memory collection has no name to check
        return (
            open_vector_memory(url, collection=collection, **options)
            if url
            else open_vector_memory("memory://", **options)
        )
    if options:  # never silently dropped: they would configure nothing
        raise InvalidInputError(f"{', '.join(sorted(options))}: options of a memory opened from url=, not of memory=")
    return memory


def _mmr(query: list[float], hits: list[ScoredDocument], k: int, lambda_mult: float) -> list[Document]:
    chosen = maximal_marginal_relevance(
        np.asarray(query, dtype=np.float32), [list(hit.document.embedding) for hit in hits], lambda_mult, k
    )
    return [_document(hits[i].document) for i in chosen]


class MemwovenVectorStore(VectorStore, Runner):
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

    def _add_texts(
        self,
        /,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: Sequence[str | None] | None = None,
        **kwargs: Any,
    ) -> Steps[list[str]]:
        """Embed and upsert texts; returns their ids (generated where `ids` has none)."""
        texts = list(texts)
        final_ids = _ids(texts, metadatas, ids)
        if texts:
            vectors = yield Call(self._embeddings, "embed_documents", (texts,))
            if len(vectors) != len(texts):
                raise InvalidInputError(f"the embeddings returned {len(vectors)} vectors for {len(texts)} texts")
            yield from store_columns(self.memory, final_ids, vectors, contents=texts, metadata=metadatas)
        return final_ids

    def _add_documents(
        self, /, documents: list[Document], ids: list[str] | None = None, **kwargs: Any
    ) -> Steps[list[str]]:
        """Embed and upsert documents; returns their ids: `ids` if given, else each document's `id` (generated where
        it has none), as `InMemoryVectorStore` does (LangChain's base ignores `Document.id` once ``ids=None`` is
        passed)."""
        texts = [doc.page_content for doc in documents]
        metadatas = [doc.metadata for doc in documents]
        given: Sequence[str | None] = ids or [doc.id for doc in documents]
        return (yield from self._add_texts(texts, metadatas, ids=given, **kwargs))

    def _delete(self, /, ids: list[str] | None = None, **kwargs: Any) -> Steps[bool | None]:
        """Delete documents by id (unknown ids are ignored); with no ids, delete every document. Other keyword
        arguments (another store's `filter=`, say) are refused, so that they never read as "delete everything"."""
        if kwargs:
            raise InvalidInputError(f"delete takes ids only, not {', '.join(sorted(kwargs))}")
        yield Call(self.memory, "clear") if ids is None else Call(self.memory, "delete", (ids,))
        return True

    add_texts, aadd_texts = twins(_add_texts)
    add_documents, aadd_documents = twins(_add_documents)
    delete, adelete = twins(_delete)

    # --- reads ----------------------------------------------------------------------------------------------

    def _get_by_ids(self, ids: Sequence[str], /) -> Steps[list[Document]]:
        """The documents with these ids, in the order asked; unknown ids are skipped."""
        return [_document(stored) for stored in (yield Call(self.memory, "get", (list(ids),)))]

    def _similarity_search_with_score_by_vector(
        self, /, embedding: list[float], k: int = 4, filter: Filter | None = None, **kwargs: Any
    ) -> Steps[list[tuple[Document, float]]]:
        """The `k` documents closest to `embedding` whose metadata matches `filter`, with their similarity."""
        return _scored((yield Call(self.memory, "search", (embedding,), {"top_k": k, "filter": filter})))

    def _similarity_search_with_score(
        self, /, query: str, k: int = 4, filter: Filter | None = None, **kwargs: Any
    ) -> Steps[list[tuple[Document, float]]]:
        """The `k` documents closest to `query`, with their similarity (cosine: -1 to 1)."""
        embedding = yield Call(self._embeddings, "embed_query", (query,))
        scored: list[tuple[Document, float]] = yield Call(
            self, "similarity_search_with_score_by_vector", (embedding, k, filter)
        )
        return scored

    def _similarity_search_by_vector(
        self, /, embedding: list[float], k: int = 4, filter: Filter | None = None, **kwargs: Any
    ) -> Steps[list[Document]]:
        """The `k` documents closest to `embedding`."""
        scored = yield Call(self, "similarity_search_with_score_by_vector", (embedding, k, filter))
        return [doc for doc, _ in scored]

    def _similarity_search(
        self, /, query: str, k: int = 4, filter: Filter | None = None, **kwargs: Any
    ) -> Steps[list[Document]]:
        """The `k` documents closest to `query`."""
        return [doc for doc, _ in (yield Call(self, "similarity_search_with_score", (query, k, filter)))]

    get_by_ids, aget_by_ids = twins(_get_by_ids)
    similarity_search_with_score_by_vector, asimilarity_search_with_score_by_vector = twins(
        _similarity_search_with_score_by_vector
    )
    similarity_search_with_score, asimilarity_search_with_score = twins(_similarity_search_with_score)
    similarity_search_by_vector, asimilarity_search_by_vector = twins(_similarity_search_by_vector)
    similarity_search, asimilarity_search = twins(_similarity_search)

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        """Map similarities to relevance in [0, 1]: cosine's [-1, 1] linearly (dot assumes unit vectors)."""
        return _relevance

    # --- maximal marginal relevance -------------------------------------------------------------------------

    def _max_marginal_relevance_search_by_vector(
        self,
        /,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Filter | None = None,
        **kwargs: Any,
    ) -> Steps[list[Document]]:
        """`k` documents chosen among the `fetch_k` closest for both similarity and diversity."""
        hits = yield Call(self.memory, "search", (embedding,), {"top_k": fetch_k, "filter": filter})
        return _mmr(embedding, hits, k, lambda_mult)

    def _max_marginal_relevance_search(
        self,
        /,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Filter | None = None,
        **kwargs: Any,
    ) -> Steps[list[Document]]:
        """`k` documents for `query`, chosen among the `fetch_k` closest for similarity and diversity."""
        embedding = yield Call(self._embeddings, "embed_query", (query,))
        documents: list[Document] = yield Call(
            self, "max_marginal_relevance_search_by_vector", (embedding, k, fetch_k, lambda_mult, filter)
        )
        return documents

    max_marginal_relevance_search_by_vector, amax_marginal_relevance_search_by_vector = twins(
        _max_marginal_relevance_search_by_vector
    )
    max_marginal_relevance_search, amax_marginal_relevance_search = twins(_max_marginal_relevance_search)

    # --- construction ---------------------------------------------------------------------------------------

    @staticmethod
    def _from_texts(
        cls: type[MemwovenVectorStore],
        /,
        texts: list[str],
        embedding: Embeddings | EmbedFn,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        memory: VectorMemory | None = None,
        url: str | None = None,
        collection: str = "default",
        **kwargs: Any,
    ) -> Steps[MemwovenVectorStore]:
        """A store holding `texts`: in `memory`, in `collection` at `url`, or else in a new in-memory collection;
        other keyword arguments are options of the memory opened (`open_vector_memory`'s: `metric=`, a backend's
        own), refused (`InvalidInputError`) where nothing is opened or the backend does not take them."""
        store = cls(_memory(memory, url, collection, kwargs), embedding)
        yield Call(store, "add_texts", (texts, metadatas), {"ids": ids})
        return store

    from_texts, afrom_texts = constructor_twins(_from_texts)

    def _close(self) -> Steps[None]:
        """Close the underlying memory."""
        yield Call(self.memory, "close")

    close, aclose = twins(_close)


def _relevance(similarity: float) -> float:
    return min(1.0, max(0.0, (similarity + 1.0) / 2.0))
